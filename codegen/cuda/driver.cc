#include "codegen/cuda/driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>

namespace jit::codegen::cuda {

// The driver API with plain types (CUresult = int, handles = pointers, CUdevice = int,
// CUdeviceptr = unsigned long long): no toolkit header needed.
struct DriverApi {
  int (*init)(unsigned);
  int (*get_error_name)(int, const char**);
  int (*device_get_count)(int*);
  int (*device_get)(int*, int);
  int (*device_get_attribute)(int*, int, int);
  int (*primary_ctx_retain)(void**, int);
  int (*ctx_get_current)(void**);
  int (*ctx_set_current)(void*);
  int (*ctx_synchronize)();
  int (*module_load_data)(void**, const void*);
  int (*module_get_function)(void**, void*, const char*);
  int (*launch_kernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       void*, void**, void**);
  int (*mem_alloc)(unsigned long long*, size_t);
  int (*mem_free)(unsigned long long);
  int (*memcpy_htod)(unsigned long long, const void*, size_t);
  int (*memcpy_dtoh)(void*, unsigned long long, size_t);
  int (*memcpy_dtod)(unsigned long long, unsigned long long, size_t);
};

namespace {

constexpr int kAttrComputeMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrComputeMinor = 76;

Status unavailable(std::string reason) {
  return {StatusCode::kUnavailable, "CUDA unavailable: " + std::move(reason)};
}

thread_local void* t_stream = nullptr;

}  // namespace

std::string SmArch::name() const {
  return fmt::format("sm_{}{}", version, arch_specific ? "a" : "");
}

Result<SmArch> parse_sm_arch(std::string_view text) {
  std::string_view t = text;
  if (t.starts_with("cuda:")) t.remove_prefix(5);
  if (t.starts_with("sm_")) t.remove_prefix(3);
  SmArch arch;
  if (!t.empty() && t.back() == 'a') {
    arch.arch_specific = true;
    t.remove_suffix(1);
  }
  int value = 0;
  bool digits = !t.empty() && t.size() <= 3;
  for (char c : t) {
    if (c < '0' || c > '9') digits = false;
    value = value * 10 + (c - '0');
  }
  if (!digits || value < 80) {
    return invalid_argument(
        fmt::format("cuda target '{}' is not an sm arch kiln compiles for; allowed: sm_XX or "
                    "sm_XXa with XX >= 80 (offline set: sm_80, sm_86, sm_89, sm_90, sm_90a, "
                    "sm_100, sm_120)",
                    text));
  }
  arch.version = value;
  return arch;
}

const std::vector<SmArch>& offline_archs() {
  static const std::vector<SmArch> archs = {{80, false}, {86, false},  {89, false}, {90, false},
                                            {90, true},  {100, false}, {120, false}};
  return archs;
}

Status Driver::check(int rc, const char* what) const {
  if (rc == 0) return Status::ok();
  const char* name = "unknown error";
  if (api_ != nullptr && api_->get_error_name != nullptr) api_->get_error_name(rc, &name);
  return {StatusCode::kInternal, fmt::format("CUDA driver: {} failed: {} ({})", what, name, rc)};
}

Result<const Driver*> Driver::get() {
  static Driver driver;
  static DriverApi api;
  static Result<const Driver*> loaded = []() -> Result<const Driver*> {
    const char* path = "libcuda.so.1";
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      return unavailable(
          fmt::format("{} not found (no NVIDIA driver installed): {}", path, dlerror()));
    }
    std::string missing;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (fn == nullptr) missing += fmt::format(" {}", name);
    };
    sym(api.init, "cuInit");
    sym(api.get_error_name, "cuGetErrorName");
    sym(api.device_get_count, "cuDeviceGetCount");
    sym(api.device_get, "cuDeviceGet");
    sym(api.device_get_attribute, "cuDeviceGetAttribute");
    sym(api.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    sym(api.ctx_get_current, "cuCtxGetCurrent");
    sym(api.ctx_set_current, "cuCtxSetCurrent");
    sym(api.ctx_synchronize, "cuCtxSynchronize");
    sym(api.module_load_data, "cuModuleLoadData");
    sym(api.module_get_function, "cuModuleGetFunction");
    sym(api.launch_kernel, "cuLaunchKernel");
    sym(api.mem_alloc, "cuMemAlloc_v2");
    sym(api.mem_free, "cuMemFree_v2");
    sym(api.memcpy_htod, "cuMemcpyHtoD_v2");
    sym(api.memcpy_dtoh, "cuMemcpyDtoH_v2");
    sym(api.memcpy_dtod, "cuMemcpyDtoD_v2");
    if (!missing.empty()) return unavailable(fmt::format("{} lacks{}", path, missing));
    driver.api_ = &api;
    if (const int rc = api.init(0); rc != 0) {
      const char* name = "unknown error";
      api.get_error_name(rc, &name);
      return unavailable(fmt::format("cuInit failed: {} ({}); no usable GPU or driver", name, rc));
    }
    int count = 0;
    if (api.device_get_count(&count) != 0 || count == 0) {
      return unavailable("the driver reports no CUDA device");
    }
    driver.device_count_ = count;
    return static_cast<const Driver*>(&driver);
  }();
  return loaded;
}

Result<SmArch> Driver::device_arch(int device) const {
  int dev = 0, major = 0, minor = 0;
  KILN_RETURN_IF_ERROR(check(api_->device_get(&dev, device), "cuDeviceGet"));
  KILN_RETURN_IF_ERROR(
      check(api_->device_get_attribute(&major, kAttrComputeMajor, dev), "cuDeviceGetAttribute"));
  KILN_RETURN_IF_ERROR(
      check(api_->device_get_attribute(&minor, kAttrComputeMinor, dev), "cuDeviceGetAttribute"));
  // Arch-specific features (wgmma, tcgen05) are what sm_90a/sm_100a add; kiln's kernels use
  // none, so the portable arch is the device's target.
  return SmArch{major * 10 + minor, false};
}

void* Driver::current_context() const {
  void* ctx = nullptr;
  api_->ctx_get_current(&ctx);
  return ctx;
}

Status Driver::ensure_context(int device) const {
  if (current_context() != nullptr) return Status::ok();
  int dev = 0;
  KILN_RETURN_IF_ERROR(check(api_->device_get(&dev, device), "cuDeviceGet"));
  void* ctx = nullptr;
  KILN_RETURN_IF_ERROR(check(api_->primary_ctx_retain(&ctx, dev), "cuDevicePrimaryCtxRetain"));
  return check(api_->ctx_set_current(ctx), "cuCtxSetCurrent");
}

Result<void*> Driver::load_function(const void* image, const std::string& name) const {
  void* module = nullptr;
  KILN_RETURN_IF_ERROR(check(api_->module_load_data(&module, image), "cuModuleLoadData"));
  void* function = nullptr;
  KILN_RETURN_IF_ERROR(
      check(api_->module_get_function(&function, module, name.c_str()), "cuModuleGetFunction"));
  return function;
}

Status Driver::launch(void* function, const unsigned grid[3], const unsigned block[3],
                      unsigned shared_bytes, void* stream, const void* params,
                      size_t params_size) const {
  // The kernel takes one struct by value: its parameter array has one entry.
  void* args[] = {const_cast<void*>(params)};
  (void)params_size;
  return check(api_->launch_kernel(function, grid[0], grid[1], grid[2], block[0], block[1],
                                   block[2], shared_bytes, stream, args, nullptr),
               "cuLaunchKernel");
}

Result<void*> Driver::alloc(size_t bytes) const {
  KILN_RETURN_IF_ERROR(ensure_context(0));
  unsigned long long ptr = 0;
  KILN_RETURN_IF_ERROR(check(api_->mem_alloc(&ptr, bytes == 0 ? 1 : bytes), "cuMemAlloc"));
  return reinterpret_cast<void*>(ptr);
}
Status Driver::free(void* ptr) const {
  KILN_RETURN_IF_ERROR(ensure_context(0));
  return check(api_->mem_free(reinterpret_cast<unsigned long long>(ptr)), "cuMemFree");
}
Status Driver::copy_to_device(void* dst, const void* src, size_t bytes) const {
  KILN_RETURN_IF_ERROR(ensure_context(0));
  return check(api_->memcpy_htod(reinterpret_cast<unsigned long long>(dst), src, bytes),
               "cuMemcpyHtoD");
}
Status Driver::copy_to_host(void* dst, const void* src, size_t bytes) const {
  KILN_RETURN_IF_ERROR(ensure_context(0));
  return check(api_->memcpy_dtoh(dst, reinterpret_cast<unsigned long long>(src), bytes),
               "cuMemcpyDtoH");
}
Status Driver::copy_on_device(void* dst, const void* src, size_t bytes) const {
  KILN_RETURN_IF_ERROR(ensure_context(0));
  return check(api_->memcpy_dtod(reinterpret_cast<unsigned long long>(dst),
                                 reinterpret_cast<unsigned long long>(src), bytes),
               "cuMemcpyDtoD");
}
Status Driver::synchronize() const {
  KILN_RETURN_IF_ERROR(ensure_context(0));
  return check(api_->ctx_synchronize(), "cuCtxSynchronize");
}

void set_current_stream(void* stream) {
  t_stream = stream;
}
void* current_stream() {
  return t_stream;
}

}  // namespace jit::codegen::cuda
