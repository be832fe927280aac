// kiln._kiln: the Python extension module. Tensors cross through DLPack without a copy (any
// object with __dlpack__: NumPy arrays, torch tensors, kiln.Tensor views); every jit::ops
// function is bound with vLLM's argument names and order; jit::compile, prewarm and the cache
// counters are exposed; kiln's errors become Python exceptions carrying kiln's message.
#include <dlpack/dlpack.h>
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "ir/op_spec.h"
#include "runtime/disk_cache.h"
#include "runtime/ops.h"
#include "runtime/prewarm.h"
#include "runtime/runtime.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace jit::python {
namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

// The exception classes, created in PYBIND11_MODULE (see the module docstring there).
PyObject* g_error = nullptr;             // kiln.Error(RuntimeError)
PyObject* g_invalid_argument = nullptr;  // kiln.InvalidArgumentError(kiln.Error, ValueError)
PyObject* g_dtype_error = nullptr;       // kiln.DTypeError(InvalidArgumentError, TypeError)

// Maps a kiln Status onto the exception classes: a wrong dtype is a TypeError (kiln's checks
// say "argument 'x' has dtype ..."), any other invalid argument a ValueError, the rest
// kiln.Error.
[[noreturn]] void raise_status(const Status& status) {
  PyObject* type = g_error;
  if (status.code() == StatusCode::kInvalidArgument) {
    const std::string& m = status.message();
    const bool dtype = m.find("' has dtype ") != std::string::npos ||
                       m.find("argument 'dtype'") != std::string::npos;
    type = dtype ? g_dtype_error : g_invalid_argument;
  }
  PyErr_SetString(type, status.to_string().c_str());
  throw py::error_already_set();
}

// ---- DLPack import ----------------------------------------------------------------------------

// DLPack type of a kiln dtype (fp8 leaves as its bytes: DLPack 0.6 has no fp8 codes).
DLDataType dl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kI8: return {kDLInt, 8, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    case DType::kFp8E4m3:
    case DType::kFp8E5m2:
    case DType::kU8: return {kDLUInt, 8, 1};
  }
  return {kDLUInt, 8, 1};
}

/// kiln.Tensor: a view of another DLPack object, optionally with its element type
/// reinterpreted (a uint16 NumPy array as bf16, a uint8 one as fp8_e4m3): NumPy has no bf16 or
/// fp8 dtype, so those cross as same-width integer views with an explicit dtype.
struct PyTensor {
  py::object owner;
  std::optional<DType> dtype;  ///< reinterpretation; nullopt: the owner's own dtype
};

DType parse_dtype_arg(std::string_view arg, const py::handle& obj);

// A DLPack capsule of `obj` (calls obj.__dlpack__()). `arg` names the argument in errors.
py::capsule dlpack_capsule(std::string_view arg, const py::handle& obj) {
  if (!py::hasattr(obj, "__dlpack__")) {
    throw py::type_error(fmt::format(
        "argument '{}' must support DLPack (a NumPy array, torch tensor or kiln.Tensor), got {}",
        arg, std::string(py::str(py::type::handle_of(obj).attr("__name__")))));
  }
  py::object cap;
  try {
    cap = obj.attr("__dlpack__")();
  } catch (py::error_already_set& e) {
    // NumPy refuses read-only arrays (DLPack 0.x cannot mark them read-only) and strides that
    // are not whole elements.
    throw py::value_error(
        fmt::format("argument '{}' cannot be shared through DLPack: {}", arg, e.what()));
  }
  if (!PyCapsule_IsValid(cap.ptr(), kCapsuleName)) {
    throw py::type_error(
        fmt::format("argument '{}': __dlpack__() did not return a DLPack capsule", arg));
  }
  return py::reinterpret_borrow<py::capsule>(cap);
}

// ---- torch CPU tensors without __dlpack__ ------------------------------------------------------
//
// torch's Tensor.__dlpack__ is a Python wrapper that costs ~3 µs a tensor on the machines kiln
// is measured on (the export under it ~0.4 µs): 9 of the ~13.5 µs a one-row rms_norm on torch
// tensors took. A plain CPU torch.Tensor's (or nn.Parameter's: torch's dispatcher hands a
// model's weights to kernels as such) view is read off its attributes instead (data_ptr(),
// shape, stride(), dtype: ~0.4 µs), giving the view the DLPack path gives. Anything else takes
// the DLPack path with its checks and messages: other devices and layouts (sparse, mkldnn,
// nested), other subclasses (their own dispatch), tensors that require grad (torch refuses to
// export them), dtypes kiln has no name for, more dims than kiln's rank limit, and any tensor
// whose attributes raise (e.g. inside torch.func transforms). A negated or conjugated view
// (torch's lazy neg/conj bits) is refused by name on either path: DLPack exports its memory
// without applying the bit, so kiln would read the un-negated values.

// torch's types and kiln's dtypes of torch's dtype objects, found once torch is imported (kiln
// never imports torch itself). The references are held for the process's life (never
// released: no Python object is touched after the interpreter is finalised). Filled under the
// GIL, like every call into this module.
struct TorchTypes {
  PyTypeObject* tensor = nullptr;
  PyTypeObject* parameter = nullptr;
  PyObject* strided = nullptr;  // torch.strided, the dense layout
  std::vector<std::pair<PyObject*, DType>> dtypes;
};

const TorchTypes* torch_types() {
  static TorchTypes types;
  if (types.tensor != nullptr) return &types;
  PyObject* modules = PySys_GetObject("modules");  // borrowed
  PyObject* torch = modules != nullptr ? PyDict_GetItemString(modules, "torch") : nullptr;
  if (torch == nullptr) return nullptr;
  py::handle module(torch);
  if (!py::hasattr(module, "Tensor") || !py::hasattr(module, "strided") ||
      !py::hasattr(module, "nn")) {
    return nullptr;  // torch is still being imported
  }
  const std::pair<const char*, DType> names[] = {
      {"float32", DType::kF32}, {"float16", DType::kF16}, {"bfloat16", DType::kBF16},
      {"int8", DType::kI8},     {"uint8", DType::kU8},    {"int32", DType::kI32},
      {"int64", DType::kI64}};
  const auto keep = [](py::object o) { return o.release().ptr(); };
  for (const auto& [name, dtype] : names) types.dtypes.emplace_back(keep(module.attr(name)), dtype);
  types.strided = keep(module.attr("strided"));
  types.parameter = reinterpret_cast<PyTypeObject*>(keep(module.attr("nn").attr("Parameter")));
  types.tensor = reinterpret_cast<PyTypeObject*>(keep(module.attr("Tensor")));
  return &types;
}

// obj.<name> / obj.<name>() by an interned name (no str built per access, no bound method
// object); nullptr with the Python error set when it raises.
PyObject* torch_attr(const py::handle& obj, PyObject* name) {
  return PyObject_GetAttr(obj.ptr(), name);
}
PyObject* torch_call(const py::handle& obj, PyObject* name) {
  return PyObject_CallMethodNoArgs(obj.ptr(), name);
}

/// A lazy-view bit of a torch tensor: the method that reads it, and its words for the error.
struct LazyBit {
  PyObject* method;
  const char *what, *resolve;
};
const LazyBit& neg_bit() {
  static const LazyBit bit{PyUnicode_InternFromString("is_neg"), "negated", "resolve_neg"};
  return bit;
}
const LazyBit& conj_bit() {
  static const LazyBit bit{PyUnicode_InternFromString("is_conj"), "conjugated", "resolve_conj"};
  return bit;
}

/// Refuses `obj` (a torch tensor) when `bit` is set, naming the argument; false when the bit
/// cannot be read (no Python error left pending: the DLPack path then reports what is wrong).
bool refuse_lazy_bit(std::string_view arg, const py::handle& obj, const LazyBit& bit) {
  const auto set = py::reinterpret_steal<py::object>(torch_call(obj, bit.method));
  if (!set) {
    PyErr_Clear();
    return false;
  }
  if (set.ptr() == Py_True) {
    throw py::value_error(
        fmt::format("argument '{}' is a lazily {} torch view (its memory holds "
                    "the values before that); pass tensor.{}()",
                    arg, bit.what, bit.resolve));
  }
  return true;
}

/// Refuses a torch tensor (any subclass) whose neg or conj bit is set, naming the argument.
void refuse_lazy_views(std::string_view arg, const py::handle& obj) {
  const TorchTypes* torch = torch_types();
  if (torch == nullptr || !PyObject_TypeCheck(obj.ptr(), torch->tensor)) return;
  if (refuse_lazy_bit(arg, obj, neg_bit())) refuse_lazy_bit(arg, obj, conj_bit());
}

/// The view of `obj` when it is a plain CPU torch.Tensor (or nn.Parameter) of a dtype kiln
/// takes, else nullopt (with no Python error pending). A lazily negated one is refused by name
/// here, as refuse_lazy_views does on the other path; the conj bit needs a complex dtype, which
/// this path never takes, so it is not read (110 ns a tensor).
std::optional<Tensor> torch_cpu_view(std::string_view arg, const py::handle& obj) {
  const TorchTypes* torch = torch_types();
  if (torch == nullptr) return std::nullopt;
  PyTypeObject* type = Py_TYPE(obj.ptr());
  if (type != torch->tensor && type != torch->parameter) return std::nullopt;
  static PyObject* const kLayout = PyUnicode_InternFromString("layout");
  static PyObject* const kIsCpu = PyUnicode_InternFromString("is_cpu");
  static PyObject* const kRequiresGrad = PyUnicode_InternFromString("requires_grad");
  static PyObject* const kDtype = PyUnicode_InternFromString("dtype");
  static PyObject* const kShape = PyUnicode_InternFromString("shape");
  static PyObject* const kStride = PyUnicode_InternFromString("stride");
  static PyObject* const kDataPtr = PyUnicode_InternFromString("data_ptr");
  // Any attribute that raises sends the tensor to the DLPack path, which says what is wrong.
  const auto declined = [] {
    PyErr_Clear();
    return std::nullopt;
  };
  const auto own = [](PyObject* o) { return py::reinterpret_steal<py::object>(o); };
  const py::object layout = own(torch_attr(obj, kLayout));
  if (!layout || layout.ptr() != torch->strided) return declined();
  const py::object is_cpu = own(torch_attr(obj, kIsCpu));
  const py::object requires_grad = own(torch_attr(obj, kRequiresGrad));
  if (!is_cpu || !requires_grad || is_cpu.ptr() != Py_True || requires_grad.ptr() != Py_False) {
    return declined();
  }
  const py::object dtype_object = own(torch_attr(obj, kDtype));
  std::optional<DType> dtype;
  for (const auto& [object, kiln_dtype] : torch->dtypes) {
    if (object == dtype_object.ptr()) dtype = kiln_dtype;
  }
  if (!dtype || !refuse_lazy_bit(arg, obj, neg_bit())) return declined();
  const py::object shape = own(torch_attr(obj, kShape)), stride = own(torch_call(obj, kStride));
  if (!shape || !stride || !PyTuple_Check(shape.ptr()) || !PyTuple_Check(stride.ptr())) {
    return declined();
  }
  const Py_ssize_t rank = PyTuple_GET_SIZE(shape.ptr());
  if (rank > Tensor::kMaxRank || PyTuple_GET_SIZE(stride.ptr()) != rank) return declined();
  std::array<int64_t, Tensor::kMaxRank> sizes{}, strides{};
  for (Py_ssize_t d = 0; d < rank; ++d) {
    sizes[size_t(d)] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), d));
    strides[size_t(d)] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride.ptr(), d));
  }
  const py::object data_ptr = own(torch_call(obj, kDataPtr));
  if (!data_ptr) return declined();
  void* data = PyLong_AsVoidPtr(data_ptr.ptr());
  if (PyErr_Occurred()) return declined();
  return Tensor(data, *dtype, int(rank), sizes.data(), strides.data(), Device::cpu());
}

/// Converts Python arguments to jit::Tensor views for one call and keeps their DLPack
/// capsules alive until the call is done. The capsules are not consumed (not renamed), so
/// each producer frees its DLManagedTensor when the capsule dies: the view borrows the memory
/// for the duration of the call only.
class Borrow {
 public:
  /// None gives an absent tensor (Tensor{}); kiln's op then says whether that is allowed.
  /// `as`: reinterpret the elements as this same-width dtype (kiln.Tensor's dtype), which
  /// also admits DLPack types kiln has no name for (uint16 holding bf16 bits).
  Tensor operator()(std::string_view arg, const py::handle& obj,
                    std::optional<DType> as = std::nullopt) {
    if (obj.is_none()) return Tensor{};
    if (py::isinstance<PyTensor>(obj)) {
      const auto& view = obj.cast<const PyTensor&>();
      return (*this)(arg, view.owner, as ? as : view.dtype);
    }
    if (std::optional<Tensor> t = torch_cpu_view(arg, obj)) return as ? retype(arg, *t, *as) : *t;
    refuse_lazy_views(arg, obj);
    py::capsule cap = dlpack_capsule(arg, obj);
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), kCapsuleName));
    keep_.push_back(cap);
    DLManagedTensor view = *managed;  // shallow: only read by from_dlpack
    if (as) {
      const DLDataType& src = managed->dl_tensor.dtype;
      const size_t bytes = size_t(src.bits) * src.lanes / 8;
      if (bytes != dtype_size(*as)) {
        PyErr_SetString(g_dtype_error,
                        fmt::format("argument '{}': cannot view {}-byte elements as {} ({} "
                                    "bytes); use an integer array of the same width",
                                    arg, bytes, dtype_name(*as), dtype_size(*as))
                            .c_str());
        throw py::error_already_set();
      }
      view.dl_tensor.dtype = dl_dtype(*as);
    }
    Result<Tensor> t = Tensor::from_dlpack(&view);
    if (!t.is_ok()) {
      PyErr_SetString(g_dtype_error,
                      fmt::format("argument '{}': {}", arg, t.status().message()).c_str());
      throw py::error_already_set();
    }
    return as ? retype(arg, *t, *as) : *t;
  }

  /// `t` with its element type replaced by `dtype` of the same width.
  static Tensor retype(std::string_view arg, const Tensor& t, DType dtype) {
    if (dtype_size(dtype) != t.element_size()) {
      PyErr_SetString(g_dtype_error,
                      fmt::format("argument '{}': cannot view {} elements ({} bytes) as {} ({} "
                                  "bytes); use an integer array of the same width",
                                  arg, dtype_name(t.dtype()), t.element_size(), dtype_name(dtype),
                                  dtype_size(dtype))
                          .c_str());
      throw py::error_already_set();
    }
    return Tensor(t.data(), dtype, t.dim(), t.sizes(), t.strides(), t.device());
  }

 private:
  std::vector<py::object> keep_;
};

// ---- DLPack export of kiln.Tensor -------------------------------------------------------------

// The DLManagedTensor kiln.Tensor.__dlpack__ hands out: a copy of the owner's view with kiln's
// dtype, keeping the owner's capsule (hence its memory) alive until the consumer calls the
// deleter.
struct Export {
  DLManagedTensor managed{};
  std::array<int64_t, Tensor::kMaxRank> shape{};
  std::array<int64_t, Tensor::kMaxRank> strides{};
  PyObject* owner_capsule = nullptr;  // strong reference
};

void export_deleter(DLManagedTensor* self) {
  auto* e = static_cast<Export*>(self->manager_ctx);
  // Consumers may call the deleter from any thread, with or without the GIL.
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_XDECREF(e->owner_capsule);
  PyGILState_Release(gil);
  delete e;
}

// Destructor of the capsule we return: frees the export unless a consumer took it (renamed it).
void export_capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;  // consumed: the consumer deletes it
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

py::capsule export_dlpack(const PyTensor& view) {
  py::capsule owner = dlpack_capsule("self", view.owner);
  auto* src = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(owner.ptr(), kCapsuleName));
  Borrow borrow;
  const Tensor v = borrow("self", view.owner, view.dtype);
  auto e = std::make_unique<Export>();
  std::copy(v.sizes(), v.sizes() + v.dim(), e->shape.begin());
  std::copy(v.strides(), v.strides() + v.dim(), e->strides.begin());
  DLTensor& d = e->managed.dl_tensor;
  d.data = v.data();
  d.device = src->dl_tensor.device;
  d.ndim = v.dim();
  d.dtype = dl_dtype(v.dtype());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->owner_capsule = owner.release().ptr();
  e->managed.manager_ctx = e.get();
  e->managed.deleter = export_deleter;
  DLManagedTensor* managed = &e.release()->managed;
  PyObject* cap = PyCapsule_New(managed, kCapsuleName, export_capsule_destructor);
  if (cap == nullptr) {
    export_deleter(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

// ---- dtype arguments --------------------------------------------------------------------------

// A dtype given as kiln/torch text ("bf16", "bfloat16"), a torch.dtype, a NumPy dtype or type.
DType parse_dtype_arg(std::string_view arg, const py::handle& obj) {
  std::string text;
  if (py::isinstance<py::str>(obj)) {
    text = obj.cast<std::string>();
  } else {
    text = py::str(obj).cast<std::string>();
    if (text.rfind("torch.", 0) == 0) {
      text = text.substr(6);
    } else if (py::hasattr(obj, "name") && py::isinstance<py::str>(obj.attr("name"))) {
      text = obj.attr("name").cast<std::string>();  // numpy.dtype
    } else if (py::hasattr(obj, "__name__")) {
      text = obj.attr("__name__").cast<std::string>();  // numpy.float32 and friends
    }
  }
  if (auto d = parse_dtype(text)) return *d;
  PyErr_SetString(g_dtype_error,
                  fmt::format("argument '{}' = {} is not a kiln dtype (allowed: f32, f16, bf16, "
                              "fp8_e4m3, fp8_e5m2, i8, u8, i32, i64 or their torch/NumPy names)",
                              arg, text)
                      .c_str());
  throw py::error_already_set();
}

// ---- compile / Kernel -------------------------------------------------------------------------

std::optional<BackendKind> parse_backend(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  for (BackendKind k : {BackendKind::kRef, BackendKind::kX86, BackendKind::kCuda, BackendKind::kArm,
                        BackendKind::kOnednn}) {
    if (backend_name(k) == *name) return k;
  }
  throw py::value_error(fmt::format(
      "argument 'backend' = \"{}\" is not a kiln backend (allowed: ref, x86, cuda, arm, onednn)",
      *name));
}

Kernel compile_spec(const std::string& spec_text, const std::optional<std::string>& backend,
                    const std::optional<std::string>& isa, bool use_disk_cache) {
  Result<OpSpec> spec = parse_spec(spec_text);
  if (!spec.is_ok()) raise_status(spec.status());
  CompileOptions options;
  options.backend = parse_backend(backend);
  options.use_disk_cache = use_disk_cache;
  if (isa) {
    X86Isa cap{};
    if (!parse_x86_isa(*isa, &cap) || cap == X86Isa::kNone) {
      throw py::value_error(
          fmt::format("argument 'isa' = \"{}\" is not an x86 ISA level (allowed: {})", *isa,
                      x86_isa_level_names()));
    }
    options.isa = cap;
  }
  Result<Kernel> kernel = [&] {
    py::gil_scoped_release nogil;
    return compile(*spec, options);
  }();
  if (!kernel.is_ok()) raise_status(kernel.status());
  return *kernel;
}

void run_kernel(const Kernel& kernel, const py::sequence& tensors, const py::sequence& scalars) {
  if (py::len(tensors) > size_t(KernelArgs::kMaxTensors) ||
      py::len(scalars) > size_t(KernelArgs::kMaxScalars)) {
    throw py::value_error(
        fmt::format("argument 'tensors'/'scalars': at most {} tensors and {} "
                    "scalars",
                    KernelArgs::kMaxTensors, KernelArgs::kMaxScalars));
  }
  Borrow borrow;
  KernelArgs args;
  for (size_t i = 0; i < py::len(tensors); ++i) {
    args.add(borrow(fmt::format("tensors[{}]", i), tensors[i]));
  }
  for (size_t i = 0; i < py::len(scalars); ++i) args.add_scalar(scalars[i].cast<double>());
  Status status;
  {
    py::gil_scoped_release nogil;
    status = kernel.run(args);
  }
  if (!status.is_ok()) raise_status(status);
}

py::dict kernel_info(const Kernel& kernel) {
  const KernelInfo& i = kernel.info();
  py::list skipped;
  for (const std::string& s : i.skipped) skipped.append(s);
  return py::dict("spec"_a = i.spec_text, "backend"_a = std::string(backend_name(i.backend)),
                  "target"_a = i.target.name(), "config"_a = i.config.to_string(),
                  "source"_a = std::string(kernel_source_name(i.source)),
                  "code_size"_a = i.code_size, "generate_us"_a = i.generate_us,
                  "total_us"_a = i.total_us, "cache_key"_a = i.cache_key, "skipped"_a = skipped);
}

py::dict cache_info() {
  Runtime& rt = Runtime::global();
  const RuntimeCounters c = rt.counters();
  py::dict info("memory_hits"_a = c.memory_hits, "disk_hits"_a = c.disk_hits,
                "generated"_a = c.generated, "errors"_a = c.errors,
                "cache_dir"_a = rt.options().cache_dir.string(), "sealed"_a = rt.sealed());
  if (runtime::DiskCache* disk = rt.disk_cache()) {
    const runtime::CacheStats s = disk->stats();
    info["disk_entries"] = s.entries;
    info["disk_bytes"] = s.bytes;
    info["disk_max_bytes"] = s.max_bytes;
  } else {
    info["disk_cache_status"] = rt.cache_status().to_string();
  }
  return info;
}

py::dict prewarm_manifest(const std::string& path, int threads) {
  Result<PrewarmReport> r = [&] {
    py::gil_scoped_release nogil;
    return prewarm(path, threads);
  }();
  if (!r.is_ok()) raise_status(r.status());
  return py::dict("specs"_a = r->specs, "kernels"_a = r->kernels, "generated"_a = r->generated,
                  "disk_hits"_a = r->disk_hits, "memory_hits"_a = r->memory_hits,
                  "wall_ms"_a = r->wall_ms);
}

// ---- ops --------------------------------------------------------------------------------------

// Runs a jit::ops call without the GIL (the borrowed capsules stay alive in `Borrow`), turning
// jit::Error into the Python exception classes.
template <class F>
void call_op(F&& f) {
  try {
    py::gil_scoped_release nogil;
    f();
  } catch (const Error& e) {
    raise_status(e.status());
  }
}

using Obj = const py::object&;

// The GEMM ops take their float dtype from an argument (b's dtype, output_type), which kiln's
// spec validation reports as a spec field ("dtype=i32 is not supported"); this names the
// Python argument instead.
void expect_gemm_float(std::string_view op, std::string_view arg, DType dtype,
                       std::string_view what) {
  if (dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16) return;
  PyErr_SetString(g_dtype_error,
                  fmt::format("invalid argument: {}: argument '{}' {} {} (allowed: f32, f16, bf16)",
                              op, arg, what, dtype_name(dtype))
                      .c_str());
  throw py::error_already_set();
}

// T(x): the tensor view of the Python argument named x.
#define T(x) b(#x, x)

void bind_ops(py::module_& m) {
  // ---- norm, rope, activations
  m.def(
      "rms_norm",
      [](Obj out, Obj input, Obj weight, double epsilon) {
        Borrow b;
        Tensor o = T(out), i = T(input), w = T(weight);
        call_op([&] { ops::rms_norm(o, i, w, epsilon); });
      },
      "out"_a, "input"_a, "weight"_a, "epsilon"_a,
      "out = rms_norm(input) * weight per row (out contiguous, weight [H] or None).");
  m.def(
      "fused_add_rms_norm",
      [](Obj input, Obj residual, Obj weight, double epsilon) {
        Borrow b;
        Tensor i = T(input), r = T(residual), w = T(weight);
        call_op([&] { ops::fused_add_rms_norm(i, r, w, epsilon); });
      },
      "input"_a, "residual"_a, "weight"_a, "epsilon"_a,
      "In place: residual += input; input = rms_norm(residual) * weight.");
  m.def(
      "rotary_embedding",
      [](Obj positions, Obj query, Obj key, int64_t head_size, Obj cos_sin_cache, bool is_neox) {
        Borrow b;
        Tensor p = T(positions), q = T(query), k = T(key), c = T(cos_sin_cache);
        call_op([&] { ops::rotary_embedding(p, q, k, head_size, c, is_neox); });
      },
      "positions"_a, "query"_a, "key"_a, "head_size"_a, "cos_sin_cache"_a, "is_neox"_a,
      "In place rotary embedding of query (and key unless None) by cos_sin_cache[positions].");
  m.def(
      "silu_and_mul",
      [](Obj out, Obj input) {
        Borrow b;
        Tensor o = T(out), i = T(input);
        call_op([&] { ops::silu_and_mul(o, i); });
      },
      "out"_a, "input"_a, "out[..., d] = silu(input[..., :d]) * input[..., d:].");
  m.def(
      "mul_and_silu",
      [](Obj out, Obj input) {
        Borrow b;
        Tensor o = T(out), i = T(input);
        call_op([&] { ops::mul_and_silu(o, i); });
      },
      "out"_a, "input"_a, "out = input[..., :d] * silu(input[..., d:]).");
  m.def(
      "gelu_and_mul",
      [](Obj out, Obj input) {
        Borrow b;
        Tensor o = T(out), i = T(input);
        call_op([&] { ops::gelu_and_mul(o, i); });
      },
      "out"_a, "input"_a, "out = gelu(x) * y with the exact (erf) GELU.");
  m.def(
      "gelu_tanh_and_mul",
      [](Obj out, Obj input) {
        Borrow b;
        Tensor o = T(out), i = T(input);
        call_op([&] { ops::gelu_tanh_and_mul(o, i); });
      },
      "out"_a, "input"_a, "out = gelu_tanh(x) * y.");
  m.def(
      "fatrelu_and_mul",
      [](Obj out, Obj input, double threshold) {
        Borrow b;
        Tensor o = T(out), i = T(input);
        call_op([&] { ops::fatrelu_and_mul(o, i, threshold); });
      },
      "out"_a, "input"_a, "threshold"_a = 0.0, "out = (x > threshold ? x : 0) * y.");
  m.def(
      "swigluoai_and_mul",
      [](Obj out, Obj input, double alpha, double limit) {
        Borrow b;
        Tensor o = T(out), i = T(input);
        call_op([&] { ops::swigluoai_and_mul(o, i, alpha, limit); });
      },
      "out"_a, "input"_a, "alpha"_a = 1.702, "limit"_a = 7.0,
      "GPT-OSS SwiGLU on interleaved (gate, up) pairs.");

  // ---- cache family
  m.def(
      "swap_blocks",
      [](Obj src, Obj dst, int64_t block_size_in_bytes, Obj block_mapping) {
        Borrow b;
        Tensor s = T(src), d = T(dst), bm = T(block_mapping);
        call_op([&] { ops::swap_blocks(s, d, block_size_in_bytes, bm); });
      },
      "src"_a, "dst"_a, "block_size_in_bytes"_a, "block_mapping"_a,
      "dst block d <- src block s for each row (s, d) of block_mapping [N, 2] (int64).");
  m.def(
      "reshape_and_cache",
      [](Obj key, Obj value, Obj key_cache, Obj value_cache, Obj slot_mapping,
         const std::string& kv_cache_dtype, Obj k_scale, Obj v_scale) {
        Borrow b;
        Tensor k = T(key), v = T(value), kc = T(key_cache), vc = T(value_cache),
               sm = T(slot_mapping), ks = T(k_scale), vs = T(v_scale);
        call_op([&] { ops::reshape_and_cache(k, v, kc, vc, sm, kv_cache_dtype, ks, vs); });
      },
      "key"_a, "value"_a, "key_cache"_a, "value_cache"_a, "slot_mapping"_a, "kv_cache_dtype"_a,
      "k_scale"_a, "v_scale"_a,
      "Writes key/value [T, H, D] into the legacy paged caches at slot_mapping (in place).");
  m.def(
      "reshape_and_cache_flash",
      [](Obj key, Obj value, Obj key_cache, Obj value_cache, Obj slot_mapping,
         const std::string& kv_cache_dtype, Obj k_scale, Obj v_scale) {
        Borrow b;
        Tensor k = T(key), v = T(value), kc = T(key_cache), vc = T(value_cache),
               sm = T(slot_mapping), ks = T(k_scale), vs = T(v_scale);
        call_op([&] { ops::reshape_and_cache_flash(k, v, kc, vc, sm, kv_cache_dtype, ks, vs); });
      },
      "key"_a, "value"_a, "key_cache"_a, "value_cache"_a, "slot_mapping"_a, "kv_cache_dtype"_a,
      "k_scale"_a, "v_scale"_a,
      "Writes key/value [T, H, D] into flash caches [NB, BS, H, D] (NHD or HND view).");
  m.def(
      "concat_and_cache_mla",
      [](Obj kv_c, Obj k_pe, Obj kv_cache, Obj slot_mapping, const std::string& kv_cache_dtype,
         Obj scale) {
        Borrow b;
        Tensor c = T(kv_c), p = T(k_pe), kc = T(kv_cache), sm = T(slot_mapping), s = T(scale);
        call_op([&] { ops::concat_and_cache_mla(c, p, kc, sm, kv_cache_dtype, s); });
      },
      "kv_c"_a, "k_pe"_a, "kv_cache"_a, "slot_mapping"_a, "kv_cache_dtype"_a, "scale"_a,
      "Writes MLA entries [kv_c | k_pe] (or fp8_ds_mla entries) into kv_cache.");
  m.def(
      "concat_and_cache_mla_rope_fused",
      [](Obj positions, Obj q_pe, Obj k_pe, Obj kv_c, Obj cos_sin_cache, bool is_neox,
         Obj slot_mapping, Obj kv_cache, const std::string& kv_cache_dtype, Obj kv_cache_scale) {
        Borrow b;
        Tensor p = T(positions), q = T(q_pe), k = T(k_pe), c = T(kv_c), cs = T(cos_sin_cache),
               sm = T(slot_mapping), kc = T(kv_cache), s = T(kv_cache_scale);
        call_op([&] {
          ops::concat_and_cache_mla_rope_fused(p, q, k, c, cs, is_neox, sm, kc, kv_cache_dtype, s);
        });
      },
      "positions"_a, "q_pe"_a, "k_pe"_a, "kv_c"_a, "cos_sin_cache"_a, "is_neox"_a, "slot_mapping"_a,
      "kv_cache"_a, "kv_cache_dtype"_a, "kv_cache_scale"_a,
      "Rotates q_pe and k_pe in place, then writes [kv_c | k_pe] into kv_cache.");
  m.def(
      "convert_fp8",
      [](Obj dst_cache, Obj src_cache, double scale, const std::string& kv_cache_dtype) {
        Borrow b;
        Tensor d = T(dst_cache), s = T(src_cache);
        call_op([&] { ops::convert_fp8(d, s, scale, kv_cache_dtype); });
      },
      "dst_cache"_a, "src_cache"_a, "scale"_a = 1.0, "kv_cache_dtype"_a = "fp8",
      "e4m3 quantise (float -> uint8/fp8) or dequantise (uint8/fp8 -> float) element-wise.");
  m.def(
      "gather_and_maybe_dequant_cache",
      [](Obj src_cache, Obj dst, Obj block_table, Obj cu_seq_lens, Obj token_to_seq,
         int64_t num_tokens, const std::string& kv_cache_dtype, Obj scale, Obj seq_starts) {
        Borrow b;
        Tensor s = T(src_cache), d = T(dst), bt = T(block_table), cu = T(cu_seq_lens),
               ts = T(token_to_seq), sc = T(scale), ss = T(seq_starts);
        call_op([&] {
          ops::gather_and_maybe_dequant_cache(s, d, bt, cu, ts, num_tokens, kv_cache_dtype, sc, ss);
        });
      },
      "src_cache"_a, "dst"_a, "block_table"_a, "cu_seq_lens"_a, "token_to_seq"_a, "num_tokens"_a,
      "kv_cache_dtype"_a, "scale"_a, "seq_starts"_a = py::none(),
      "Gathers (and dequantises) cache entries into dst rows.");
  m.def(
      "cp_gather_cache",
      [](Obj src_cache, Obj dst, Obj block_table, Obj cu_seq_lens, int64_t batch_size,
         Obj seq_starts) {
        Borrow b;
        Tensor s = T(src_cache), d = T(dst), bt = T(block_table), cu = T(cu_seq_lens),
               ss = T(seq_starts);
        call_op([&] { ops::cp_gather_cache(s, d, bt, cu, batch_size, ss); });
      },
      "src_cache"_a, "dst"_a, "block_table"_a, "cu_seq_lens"_a, "batch_size"_a,
      "seq_starts"_a = py::none(), "Copies each request's cache entries into dst rows.");
  m.def(
      "cp_gather_and_upconvert_fp8_kv_cache",
      [](Obj src_cache, Obj dst, Obj block_table, Obj seq_lens, Obj workspace_starts,
         int64_t batch_size) {
        Borrow b;
        Tensor s = T(src_cache), d = T(dst), bt = T(block_table), sl = T(seq_lens),
               ws = T(workspace_starts);
        call_op([&] { ops::cp_gather_and_upconvert_fp8_kv_cache(s, d, bt, sl, ws, batch_size); });
      },
      "src_cache"_a, "dst"_a, "block_table"_a, "seq_lens"_a, "workspace_starts"_a, "batch_size"_a,
      "Expands 656-byte fp8_ds_mla entries into bf16 rows of 576.");
  m.def(
      "indexer_k_quant_and_cache",
      [](Obj k, Obj kv_cache, Obj slot_mapping, int64_t quant_block_size,
         const std::string& kv_cache_dtype) {
        Borrow b;
        Tensor kk = T(k), kc = T(kv_cache), sm = T(slot_mapping);
        call_op(
            [&] { ops::indexer_k_quant_and_cache(kk, kc, sm, quant_block_size, kv_cache_dtype); });
      },
      "k"_a, "kv_cache"_a, "slot_mapping"_a, "quant_block_size"_a, "kv_cache_dtype"_a,
      "Per-group e4m3 quantisation of k into the DeepSeek indexer cache (kv_cache_dtype is the "
      "scale format: 'ue8m0' or plain).");
  m.def(
      "cp_gather_indexer_k_quant_cache",
      [](Obj kv_cache, Obj dst_k, Obj dst_scale, Obj block_table, Obj cu_seq_lens) {
        Borrow b;
        Tensor kc = T(kv_cache), dk = T(dst_k), ds = T(dst_scale), bt = T(block_table),
               cu = T(cu_seq_lens);
        call_op([&] { ops::cp_gather_indexer_k_quant_cache(kc, dk, ds, bt, cu); });
      },
      "kv_cache"_a, "dst_k"_a, "dst_scale"_a, "block_table"_a, "cu_seq_lens"_a,
      "Copies the indexer cache's values and scale bytes back into rows.");

  // ---- attention, sparse indices, top-k
  m.def(
      "paged_attention_v1",
      [](Obj out, Obj query, Obj key_cache, Obj value_cache, int64_t num_kv_heads, double scale,
         Obj block_tables, Obj seq_lens, int64_t block_size, int64_t max_seq_len, Obj alibi_slopes,
         const std::string& kv_cache_dtype, Obj k_scale, Obj v_scale, int64_t tp_rank,
         int64_t blocksparse_local_blocks, int64_t blocksparse_vert_stride,
         int64_t blocksparse_block_size, int64_t blocksparse_head_sliding_step) {
        Borrow b;
        Tensor o = T(out), q = T(query), kc = T(key_cache), vc = T(value_cache),
               bt = T(block_tables), sl = T(seq_lens), al = T(alibi_slopes), ks = T(k_scale),
               vs = T(v_scale);
        call_op([&] {
          ops::paged_attention_v1(o, q, kc, vc, num_kv_heads, scale, bt, sl, block_size,
                                  max_seq_len, al, kv_cache_dtype, ks, vs, tp_rank,
                                  blocksparse_local_blocks, blocksparse_vert_stride,
                                  blocksparse_block_size, blocksparse_head_sliding_step);
        });
      },
      "out"_a, "query"_a, "key_cache"_a, "value_cache"_a, "num_kv_heads"_a, "scale"_a,
      "block_tables"_a, "seq_lens"_a, "block_size"_a, "max_seq_len"_a, "alibi_slopes"_a,
      "kv_cache_dtype"_a, "k_scale"_a, "v_scale"_a, "tp_rank"_a = 0,
      "blocksparse_local_blocks"_a = 0, "blocksparse_vert_stride"_a = 0,
      "blocksparse_block_size"_a = 64, "blocksparse_head_sliding_step"_a = 0,
      "Decode attention against the legacy paged cache.");
  m.def(
      "paged_attention_v2",
      [](Obj out, Obj exp_sums, Obj max_logits, Obj tmp_out, Obj query, Obj key_cache,
         Obj value_cache, int64_t num_kv_heads, double scale, Obj block_tables, Obj seq_lens,
         int64_t block_size, int64_t max_seq_len, Obj alibi_slopes,
         const std::string& kv_cache_dtype, Obj k_scale, Obj v_scale, int64_t tp_rank,
         int64_t blocksparse_local_blocks, int64_t blocksparse_vert_stride,
         int64_t blocksparse_block_size, int64_t blocksparse_head_sliding_step,
         int64_t partition_size) {
        Borrow b;
        Tensor o = T(out), es = T(exp_sums), ml = T(max_logits), to = T(tmp_out), q = T(query),
               kc = T(key_cache), vc = T(value_cache), bt = T(block_tables), sl = T(seq_lens),
               al = T(alibi_slopes), ks = T(k_scale), vs = T(v_scale);
        call_op([&] {
          ops::paged_attention_v2(
              o, es, ml, to, q, kc, vc, num_kv_heads, scale, bt, sl, block_size, max_seq_len, al,
              kv_cache_dtype, ks, vs, tp_rank, blocksparse_local_blocks, blocksparse_vert_stride,
              blocksparse_block_size, blocksparse_head_sliding_step, partition_size);
        });
      },
      "out"_a, "exp_sums"_a, "max_logits"_a, "tmp_out"_a, "query"_a, "key_cache"_a, "value_cache"_a,
      "num_kv_heads"_a, "scale"_a, "block_tables"_a, "seq_lens"_a, "block_size"_a, "max_seq_len"_a,
      "alibi_slopes"_a, "kv_cache_dtype"_a, "k_scale"_a, "v_scale"_a, "tp_rank"_a = 0,
      "blocksparse_local_blocks"_a = 0, "blocksparse_vert_stride"_a = 0,
      "blocksparse_block_size"_a = 64, "blocksparse_head_sliding_step"_a = 0,
      "partition_size"_a = 512,
      "paged_attention_v1 split into partitions of partition_size tokens.");
  m.def(
      "merge_attn_states",
      [](Obj output, Obj prefix_output, Obj prefix_lse, Obj suffix_output, Obj suffix_lse,
         Obj output_lse, std::optional<int64_t> prefill_tokens_with_context, Obj output_scale) {
        Borrow b;
        Tensor o = T(output), ol = T(output_lse), po = T(prefix_output), pl = T(prefix_lse),
               so = T(suffix_output), sl = T(suffix_lse), os = T(output_scale);
        call_op([&] {
          ops::merge_attn_states(o, ol, po, pl, so, sl, prefill_tokens_with_context, os);
        });
      },
      "output"_a, "prefix_output"_a, "prefix_lse"_a, "suffix_output"_a, "suffix_lse"_a,
      "output_lse"_a = py::none(), "prefill_tokens_with_context"_a = py::none(),
      "output_scale"_a = py::none(),
      "Merges two partial attention results by their LSEs (vLLM's Python argument order).");
  m.def(
      "convert_vertical_slash_indexes",
      [](Obj block_count, Obj block_offset, Obj column_count, Obj column_index, Obj q_seqlens,
         Obj kv_seqlens, Obj vertical_indexes, Obj slash_indexes, int64_t context_size,
         int64_t block_size_M, int64_t block_size_N, bool causal) {
        Borrow b;
        Tensor bc = T(block_count), bo = T(block_offset), cc = T(column_count),
               ci = T(column_index), qs = T(q_seqlens), ks = T(kv_seqlens),
               vi = T(vertical_indexes), si = T(slash_indexes);
        call_op([&] {
          ops::convert_vertical_slash_indexes(bc, bo, cc, ci, qs, ks, vi, si, context_size,
                                              block_size_M, block_size_N, causal);
        });
      },
      "block_count"_a, "block_offset"_a, "column_count"_a, "column_index"_a, "q_seqlens"_a,
      "kv_seqlens"_a, "vertical_indexes"_a, "slash_indexes"_a, "context_size"_a, "block_size_M"_a,
      "block_size_N"_a, "causal"_a = true,
      "MInference vertical/slash lists -> key blocks and extra columns.");
  m.def(
      "convert_vertical_slash_indexes_mergehead",
      [](Obj block_count, Obj block_offset, Obj column_count, Obj column_index, Obj q_seqlens,
         Obj kv_seqlens, Obj vertical_indexes, Obj slash_indexes, Obj vertical_indices_count,
         Obj slash_indices_count, int64_t context_size, int64_t block_size_M, int64_t block_size_N,
         bool causal) {
        Borrow b;
        Tensor bc = T(block_count), bo = T(block_offset), cc = T(column_count),
               ci = T(column_index), qs = T(q_seqlens), ks = T(kv_seqlens),
               vi = T(vertical_indexes), si = T(slash_indexes), vc = T(vertical_indices_count),
               sc = T(slash_indices_count);
        call_op([&] {
          ops::convert_vertical_slash_indexes_mergehead(bc, bo, cc, ci, qs, ks, vi, si, vc, sc,
                                                        context_size, block_size_M, block_size_N,
                                                        causal);
        });
      },
      "block_count"_a, "block_offset"_a, "column_count"_a, "column_index"_a, "q_seqlens"_a,
      "kv_seqlens"_a, "vertical_indexes"_a, "slash_indexes"_a, "vertical_indices_count"_a,
      "slash_indices_count"_a, "context_size"_a, "block_size_M"_a, "block_size_N"_a,
      "causal"_a = true, "The vertical/slash conversion with per-head valid counts.");
  m.def(
      "top_k_per_row_prefill",
      [](Obj logits, Obj rowStarts, Obj rowEnds, Obj indices, int64_t numRows, int64_t stride0,
         int64_t stride1, int64_t topK) {
        Borrow b;
        Tensor l = T(logits), rs = T(rowStarts), re = T(rowEnds), i = T(indices);
        call_op([&] { ops::top_k_per_row_prefill(l, rs, re, i, numRows, stride0, stride1, topK); });
      },
      "logits"_a, "rowStarts"_a, "rowEnds"_a, "indices"_a, "numRows"_a, "stride0"_a, "stride1"_a,
      "topK"_a, "Indices of the topK largest f32 logits of each row range.");
  m.def(
      "top_k_per_row_decode",
      [](Obj logits, int64_t next_n, Obj seq_lens, Obj indices, int64_t numRows, int64_t stride0,
         int64_t stride1, int64_t topK) {
        Borrow b;
        Tensor l = T(logits), sl = T(seq_lens), i = T(indices);
        call_op(
            [&] { ops::top_k_per_row_decode(l, next_n, sl, i, numRows, stride0, stride1, topK); });
      },
      "logits"_a, "next_n"_a, "seq_lens"_a, "indices"_a, "numRows"_a, "stride0"_a, "stride1"_a,
      "topK"_a, "Top-k per row with row ends from seq_lens (decode).");

  // ---- CPU attention
  m.def("cpu_attn_metadata_bytes", &ops::cpu_attn_metadata_bytes,
        "Bytes of the int8 scheduler-metadata tensor.");
  m.def(
      "cpu_attn_get_scheduler_metadata_into",
      [](Obj metadata, int64_t num_reqs, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
         Obj seq_lens, Obj dtype, Obj query_start_loc, bool causal, int64_t sliding_window_size,
         const std::string& isa, bool enable_kv_split) {
        Borrow b;
        Tensor md = T(metadata), sl = T(seq_lens), qsl = T(query_start_loc);
        const DType dt = parse_dtype_arg("dtype", dtype);
        call_op([&] {
          ops::cpu_attn_get_scheduler_metadata(md, num_reqs, num_heads, num_kv_heads, head_dim, sl,
                                               dt, qsl, causal, sliding_window_size, isa,
                                               enable_kv_split);
        });
      },
      "metadata"_a, "num_reqs"_a, "num_heads"_a, "num_kv_heads"_a, "head_dim"_a, "seq_lens"_a,
      "dtype"_a, "query_start_loc"_a, "causal"_a, "sliding_window_size"_a, "isa"_a,
      "enable_kv_split"_a, "Writes the scheduler metadata into `metadata` (int8).");
  m.def(
      "cpu_attn_reshape_and_cache",
      [](Obj key, Obj value, Obj key_cache, Obj value_cache, Obj slot_mapping,
         const std::string& isa, double k_scale, double v_scale,
         const std::string& kv_cache_dtype) {
        Borrow b;
        Tensor k = T(key), v = T(value), kc = T(key_cache), vc = T(value_cache),
               sm = T(slot_mapping);
        call_op([&] {
          ops::cpu_attn_reshape_and_cache(k, v, kc, vc, sm, isa, k_scale, v_scale, kv_cache_dtype);
        });
      },
      "key"_a, "value"_a, "key_cache"_a, "value_cache"_a, "slot_mapping"_a, "isa"_a,
      "k_scale"_a = 1.0, "v_scale"_a = 1.0, "kv_cache_dtype"_a = "auto",
      "Writes key/value into the ISA-specific CPU attention caches (fp8 caches: "
      "kv_cache_dtype fp8/fp8_e4m3/fp8_e5m2 stores fp8(x / scale) codes).");
  m.def(
      "cpu_attention_with_kv_cache",
      [](Obj query, Obj key_cache, Obj value_cache, Obj output, Obj query_start_loc, Obj seq_lens,
         double scale, bool causal, Obj alibi_slopes, std::pair<int64_t, int64_t> sliding_window,
         Obj block_table, double softcap, Obj scheduler_metadata, Obj s_aux, double k_scale,
         double v_scale, const std::string& kv_cache_dtype) {
        Borrow b;
        Tensor q = T(query), kc = T(key_cache), vc = T(value_cache), o = T(output),
               qsl = T(query_start_loc), sl = T(seq_lens), al = T(alibi_slopes),
               bt = T(block_table), md = T(scheduler_metadata), sa = T(s_aux);
        call_op([&] {
          ops::cpu_attention_with_kv_cache(q, kc, vc, o, qsl, sl, scale, causal, al,
                                           sliding_window.first, sliding_window.second, bt, softcap,
                                           md, sa, k_scale, v_scale, kv_cache_dtype);
        });
      },
      "query"_a, "key_cache"_a, "value_cache"_a, "output"_a, "query_start_loc"_a, "seq_lens"_a,
      "scale"_a, "causal"_a, "alibi_slopes"_a, "sliding_window"_a, "block_table"_a, "softcap"_a,
      "scheduler_metadata"_a, "s_aux"_a = py::none(), "k_scale"_a = 1.0, "v_scale"_a = 1.0,
      "kv_cache_dtype"_a = "auto",
      "Varlen CPU attention (vLLM's wrapper: sliding_window=(left, right); fp8 caches: "
      "kv_cache_dtype fp8/fp8_e4m3/fp8_e5m2 reads k = code·k_scale, v = code·v_scale).");

  // ---- oneDNN GEMM (vLLM's handler model: a handler is a Python int naming a live kiln
  // object that owns the packed weight; release_onednn_handler frees it).
  m.def(
      "create_onednn_mm",
      [](Obj b, int64_t primitive_cache_size) {
        Borrow bw;
        const Tensor w = bw("b", b);
        if (w.defined()) expect_gemm_float("create_onednn_mm", "b", w.dtype(), "has dtype");
        int64_t handler = 0;
        call_op([&] { handler = ops::create_onednn_mm(w, primitive_cache_size); });
        return handler;
      },
      "b"_a, "primitive_cache_size"_a = 128,
      "Packs b [K, N] (f32/f16/bf16, any strides; vLLM passes weight.t()) for onednn_mm and "
      "returns the handler (an int).");
  m.def(
      "onednn_mm",
      [](Obj c, Obj a, Obj bias, int64_t handler) {
        Borrow b;
        Tensor cc = T(c), aa = T(a), bb = T(bias);
        call_op([&] { ops::onednn_mm(cc, aa, bb, handler); });
      },
      "c"_a, "a"_a, "bias"_a, "handler"_a,
      "c [M, N] = a [M, K] @ b + bias (fp32 accumulation, one rounding); bias [N] or None.");
  m.def(
      "create_onednn_scaled_mm",
      [](Obj b, Obj b_scales, Obj output_type, bool dynamic_act_quant, bool use_azp,
         int64_t primitive_cache_size) {
        Borrow bw;
        const Tensor w = bw("b", b), s = bw("b_scales", b_scales);
        const DType out = parse_dtype_arg("output_type", output_type);
        expect_gemm_float("create_onednn_scaled_mm", "output_type", out, "is");
        int64_t handler = 0;
        call_op([&] {
          handler = ops::create_onednn_scaled_mm(w, s, out, dynamic_act_quant, use_azp,
                                                 primitive_cache_size);
        });
        return handler;
      },
      "b"_a, "b_scales"_a, "output_type"_a, "dynamic_act_quant"_a, "use_azp"_a,
      "primitive_cache_size"_a = 128,
      "Packs an int8 b [K, N] (column-major: weight.t()) with fp32 b_scales (1 or N) for "
      "onednn_scaled_mm; output_type f32/f16/bf16 (name or NumPy dtype). Returns the handler.");
  m.def(
      "onednn_scaled_mm",
      [](Obj c, Obj a, Obj a_scales, Obj azp, Obj azp_adj, Obj bias, int64_t handler) {
        Borrow b;
        Tensor cc = T(c), aa = T(a), as = T(a_scales), z = T(azp), za = T(azp_adj), bb = T(bias);
        call_op([&] { ops::onednn_scaled_mm(cc, aa, as, z, za, bb, handler); });
      },
      "c"_a, "a"_a, "a_scales"_a, "azp"_a, "azp_adj"_a, "bias"_a, "handler"_a,
      "int8 a [M, K] times the handler's b, exact in int32, scaled (per tensor or per token), "
      "zero points and bias applied in fp32, one rounding into c [M, N].");
  m.def(
      "release_onednn_handler",
      [](int64_t handler) { call_op([&] { ops::release_onednn_handler(handler); }); }, "handler"_a,
      "Frees a handler (vLLM's release_dnnl_matmul_handler); later use is an error.");
}

#undef T

}  // namespace
}  // namespace jit::python

PYBIND11_MODULE(_kiln, m) {
  using namespace jit::python;
  m.doc() = "kiln's C++ core: DLPack tensor views, jit::ops, compile, prewarm, cache counters.";

  // kiln.Error (RuntimeError): compile failures, unsupported specs, cache errors.
  // kiln.InvalidArgumentError (kiln.Error, ValueError): a bad argument; the message names it.
  // kiln.DTypeError (InvalidArgumentError, TypeError): an argument of the wrong dtype.
  g_error = PyErr_NewExceptionWithDoc("kiln.Error", "A kiln failure (kiln's message).",
                                      PyExc_RuntimeError, nullptr);
  py::tuple invalid_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_invalid_argument = PyErr_NewExceptionWithDoc(
      "kiln.InvalidArgumentError", "A bad argument; the message names it and what is allowed.",
      invalid_bases.ptr(), nullptr);
  py::tuple dtype_bases =
      py::make_tuple(py::handle(g_invalid_argument), py::handle(PyExc_TypeError));
  g_dtype_error =
      PyErr_NewExceptionWithDoc("kiln.DTypeError", "An argument of a dtype the op does not accept.",
                                dtype_bases.ptr(), nullptr);
  m.attr("Error") = py::handle(g_error);
  m.attr("InvalidArgumentError") = py::handle(g_invalid_argument);
  m.attr("DTypeError") = py::handle(g_dtype_error);

  py::class_<PyTensor>(m, "Tensor",
                       "A zero-copy view of a DLPack object (NumPy array, torch tensor), "
                       "optionally reinterpreting its elements as a same-width kiln dtype.")
      .def(py::init([](py::object obj, py::object dtype) {
             PyTensor t{std::move(obj), std::nullopt};
             if (!dtype.is_none()) t.dtype = parse_dtype_arg("dtype", dtype);
             Borrow b;
             b("obj", t.owner, t.dtype);  // checks the object now, not at first use
             return t;
           }),
           "obj"_a, "dtype"_a = py::none())
      .def_property_readonly("owner", [](const PyTensor& t) { return t.owner; })
      .def_property_readonly(
          "dtype",
          [](const PyTensor& t) {
            Borrow b;
            return std::string(jit::dtype_name(b("self", t.owner, t.dtype).dtype()));
          })
      .def_property_readonly("shape",
                             [](const PyTensor& t) {
                               Borrow b;
                               const jit::Tensor v = b("self", t.owner, t.dtype);
                               return std::vector<int64_t>(v.sizes(), v.sizes() + v.dim());
                             })
      .def_property_readonly("strides",
                             [](const PyTensor& t) {
                               Borrow b;
                               const jit::Tensor v = b("self", t.owner, t.dtype);
                               return std::vector<int64_t>(v.strides(), v.strides() + v.dim());
                             })
      .def_property_readonly(
          "data_ptr",
          [](const PyTensor& t) {
            Borrow b;
            return reinterpret_cast<uintptr_t>(b("self", t.owner, t.dtype).data());
          })
      .def(
          "__dlpack__", [](const PyTensor& t, py::object stream) { return export_dlpack(t); },
          "stream"_a = py::none())
      .def("__dlpack_device__",
           [](const PyTensor& t) {
             Borrow b;
             const jit::Tensor v = b("self", t.owner, t.dtype);
             return v.device().kind == jit::Device::Kind::kCpu
                        ? py::make_tuple(int(kDLCPU), 0)
                        : py::make_tuple(int(kDLCUDA), v.device().index);
           })
      .def("__repr__", [](const PyTensor& t) {
        Borrow b;
        const jit::Tensor v = b("self", t.owner, t.dtype);
        return "kiln.Tensor(" + v.describe() + ")";
      });

  py::class_<jit::Kernel>(m, "Kernel", "A compiled kernel (see kiln.compile).")
      .def("run", &run_kernel, "tensors"_a, "scalars"_a = py::list(),
           "Runs with KernelArgs in the op's order (docs/ops.md): tensors (None = absent), "
           "then numeric scalars. Arguments are checked first; nothing is written on error.")
      .def_property_readonly("spec", [](const jit::Kernel& k) { return jit::to_string(k.spec()); })
      .def_property_readonly(
          "backend",
          [](const jit::Kernel& k) { return std::string(backend_name(k.info().backend)); })
      .def_property_readonly("info", &kernel_info)
      .def("__repr__", [](const jit::Kernel& k) {
        return fmt::format("kiln.Kernel({} on {})", jit::to_string(k.spec()),
                           k.info().target.name());
      });

  m.def("compile", &compile_spec, "spec"_a, "backend"_a = py::none(), "isa"_a = py::none(),
        "use_disk_cache"_a = true,
        "Compiles (or finds) the kernel of a spec text; backend='ref' forces the reference.");
  m.def("prewarm", &prewarm_manifest, "path"_a, "threads"_a = 0,
        "Compiles every spec of a manifest (text or JSON) and seals the runtime.");
  m.def("cache_info", &cache_info, "The runtime's cache counters and disk cache state.");
  m.def(
      "canonical_spec",
      [](const std::string& text) {
        jit::Result<jit::OpSpec> s = jit::parse_spec(text);
        if (!s.is_ok()) raise_status(s.status());
        return jit::to_string(*s);
      },
      "text"_a, "The canonical text of a spec (validated).");

  py::module_ ops = m.def_submodule("ops", "kiln's vLLM ops (see kiln.ops).");
  bind_ops(ops);
}
