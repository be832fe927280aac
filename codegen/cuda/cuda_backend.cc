#include "codegen/cuda/cuda_backend.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "codegen/cuda/launch.h"

namespace jit::codegen::cuda {
namespace {

constexpr char kMagic[4] = {'K', 'C', 'U', '1'};

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(uint8_t(v >> (8 * i)));
}
void put_bytes(std::vector<uint8_t>& out, const void* data, size_t size) {
  put_u32(out, uint32_t(size));
  const auto* p = static_cast<const uint8_t*>(data);
  out.insert(out.end(), p, p + size);
}

// Reads length-prefixed fields of a CudaBinary buffer.
struct Reader {
  const std::vector<uint8_t>& bytes;
  size_t pos = 0;
  bool ok = true;
  uint32_t u32() {
    if (pos + 4 > bytes.size()) {
      ok = false;
      return 0;
    }
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(bytes[pos + i]) << (8 * i);
    pos += 4;
    return v;
  }
  template <class C>
  C field() {
    const uint32_t size = u32();
    if (!ok || pos + size > bytes.size()) {
      ok = false;
      return C();
    }
    C c(bytes.begin() + long(pos), bytes.begin() + long(pos + size));
    pos += size;
    return c;
  }
};

// Whether a tensor the kernel reads or writes is in host memory (swap_blocks' mapping is read by
// the host and must be on the CPU).
bool uses_host_memory(const OpSpec& spec, const KernelArgs& args) {
  for (int i = 0; i < args.tensor_count; ++i) {
    if (spec.op == OpKind::kSwapBlocks && i == 2) continue;
    const Tensor& t = args.tensor(i);
    if (t.defined() && t.device().kind == Device::Kind::kCpu) return true;
  }
  return false;
}

int device_of(const KernelArgs& args) {
  for (int i = 0; i < args.tensor_count; ++i) {
    if (args.tensor(i).defined()) return args.tensor(i).device().index;
  }
  return 0;
}

// A loaded CUDA kernel: the binary, and per CUDA context the CUfunction (modules belong to a
// context; the first launch in each context loads the module).
class CudaExecutable final : public Executable {
 public:
  CudaExecutable(OpSpec spec, Config config, CudaBinary binary)
      : spec_(std::move(spec)), config_(std::move(config)), binary_(std::move(binary)) {}

  Status run(const KernelArgs& args) const override {
    Result<const Driver*> driver = Driver::get();
    if (!driver.is_ok()) return driver.status();
    if (uses_host_memory(spec_, args)) {
      return invalid_argument(fmt::format(
          "{}: the cuda backend needs every tensor on a cuda device; a cpu tensor was passed",
          op_name(spec_.op)));
    }
    Result<std::vector<LaunchPlan>> plans = plan_launch(spec_, config_, args, /*host_data=*/false);
    if (!plans.is_ok()) return plans.status();
    KILN_RETURN_IF_ERROR(driver.value()->ensure_context(device_of(args)));
    Result<void*> function = function_for(*driver.value());
    if (!function.is_ok()) return function.status();
    for (const LaunchPlan& plan : plans.value()) {
      if (plan.empty) continue;
      // A plan may chain follow-up launches (paged_attention_v2's reduce) on the same stream.
      for (const LaunchPlan* step = &plan; step != nullptr; step = step->then.get()) {
        KILN_RETURN_IF_ERROR(driver.value()->launch(function.value(), step->grid, step->block,
                                                    step->shared_bytes, current_stream(),
                                                    step->params, step->params_size));
      }
    }
    return Status::ok();
  }
  size_t code_size() const override { return binary_.cubin.size(); }

 private:
  Result<void*> function_for(const Driver& driver) const {
    void* context = driver.current_context();
    std::lock_guard lock(mutex_);
    if (auto it = functions_.find(context); it != functions_.end()) return it->second;
    // The cubin when it matches the device; the driver JIT-compiles the PTX otherwise.
    const void* image = binary_.cubin.empty() ? static_cast<const void*>(binary_.ptx.c_str())
                                              : static_cast<const void*>(binary_.cubin.data());
    Result<void*> function = driver.load_function(image, binary_.kernel_name);
    if (!function.is_ok() && !binary_.cubin.empty()) {
      function = driver.load_function(binary_.ptx.c_str(), binary_.kernel_name);
    }
    if (function.is_ok()) functions_[context] = function.value();
    return function;
  }

  OpSpec spec_;
  Config config_;
  CudaBinary binary_;
  mutable std::mutex mutex_;
  mutable std::map<void*, void*> functions_;
};

class CudaBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kCuda; }

  Support supports(const OpSpec& spec, const Target& target) const override {
    if (target.backend != BackendKind::kCuda) return Support::no("not a cuda target");
    if (Result<SmArch> arch = parse_sm_arch(target.arch); !arch.is_ok()) {
      return Support::no(arch.status().message());
    }
    return cuda_supports(spec);
  }

  // Whether a template exists for `op`, whatever the target's arch (what `kiln list` shows).
  bool generates(OpKind op, const Target&) const override {
    return cuda_supports(OpSpec::defaults(op)).reason.find("no template") == std::string::npos;
  }

  std::vector<Config> configs(const OpSpec& spec, const Target&) const override {
    return cuda_configs(spec);
  }

  Result<Artifact> lower(const OpSpec& spec, const Config& config,
                         const Target& target) const override {
    Result<SmArch> arch = parse_sm_arch(target.arch);
    if (!arch.is_ok()) return arch.status();
    // The artifact keeps the resolved config: the launch plan reads its knobs.
    Result<Config> resolved = resolve_config(spec, config);
    if (!resolved.is_ok()) return resolved.status();
    RenderedKernel rendered;
    Result<CudaBinary> binary = compile_kernel(spec, resolved.value(), arch.value(), &rendered);
    if (!binary.is_ok()) return binary.status();
    Artifact artifact;
    artifact.code = binary->serialize();
    artifact.source = rendered.unit();
    artifact.log = binary->report().to_string() + "\n" + binary->ptxas_log;
    artifact.config = std::move(resolved).value();
    return artifact;
  }

  Result<std::shared_ptr<const Executable>> load(const OpSpec& spec, const Artifact& artifact,
                                                 const Target&) const override {
    Result<CudaBinary> binary = CudaBinary::parse(artifact.code);
    if (!binary.is_ok()) return binary.status();
    // Resolved again, defensively: lower stores resolved configs (and older entries have
    // another codegen version, so they are never found), but an artifact built elsewhere (a
    // hand-made bundle) may hold a partial one.
    Result<Config> resolved = resolve_config(spec, artifact.config);
    if (!resolved.is_ok()) return resolved.status();
    // Loading into a context is deferred to the first launch: compiling works without a GPU.
    return std::shared_ptr<const Executable>(std::make_shared<CudaExecutable>(
        spec, std::move(resolved).value(), std::move(binary).value()));
  }

  std::string_view codegen_version() const override { return cuda::codegen_version(); }
};

}  // namespace

std::vector<uint8_t> CudaBinary::serialize() const {
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  put_bytes(out, arch.data(), arch.size());
  put_bytes(out, kernel_name.data(), kernel_name.size());
  put_bytes(out, cubin.data(), cubin.size());
  put_bytes(out, ptx.data(), ptx.size());
  put_bytes(out, ptxas_log.data(), ptxas_log.size());
  return out;
}

Result<CudaBinary> CudaBinary::parse(const std::vector<uint8_t>& bytes) {
  if (bytes.size() < 4 || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return Status(StatusCode::kCacheError, "cuda artifact: bad magic (not a kiln CUDA binary)");
  }
  Reader r{bytes, 4};
  CudaBinary b;
  b.arch = r.field<std::string>();
  b.kernel_name = r.field<std::string>();
  b.cubin = r.field<std::vector<uint8_t>>();
  b.ptx = r.field<std::string>();
  b.ptxas_log = r.field<std::string>();
  if (!r.ok || r.pos != bytes.size() || b.kernel_name.empty() || b.ptx.empty()) {
    return Status(StatusCode::kCacheError, "cuda artifact: truncated or malformed binary");
  }
  return b;
}

Target cuda_target(const SmArch& arch) {
  Target target;
  target.backend = BackendKind::kCuda;
  target.arch = arch.name();
  target.fingerprint = "cuda-" + target.arch;
  return target;
}

Target default_cuda_target() {
  if (Result<const Driver*> driver = Driver::get(); driver.is_ok()) {
    if (Result<SmArch> arch = driver.value()->device_arch(0); arch.is_ok()) {
      return cuda_target(arch.value());
    }
  }
  if (const char* env = std::getenv("KILN_CUDA_ARCH"); env && *env) {
    if (Result<SmArch> arch = parse_sm_arch(env); arch.is_ok()) return cuda_target(arch.value());
  }
  return cuda_target(SmArch{90, false});
}

std::string toolchain_version() {
  Result<const Nvrtc*> nvrtc = Nvrtc::get();
  return nvrtc.is_ok() ? nvrtc.value()->version() : "nvrtc-unavailable";
}

std::vector<std::string> nvrtc_options(const SmArch& arch) {
  return {
      "--gpu-architecture=" + arch.name(),
      "--std=c++17",
      // The specs fix every rounding step (rnd_T(x·c) − rnd_T(y·s), ...): no contraction.
      "--fmad=false",
      // Unannotated functions (the templates' local lambdas) are device functions.
      "-default-device",
      // The resource report (registers, spills, smem) lands in the program log.
      "-Xptxas=-v",
  };
}

Result<CudaBinary> compile_kernel(const OpSpec& spec, const Config& config, const SmArch& arch,
                                  RenderedKernel* rendered_out) {
  Result<RenderedKernel> rendered = render(spec, config);
  if (!rendered.is_ok()) return rendered.status();
  Result<const Nvrtc*> nvrtc = Nvrtc::get();
  if (!nvrtc.is_ok()) return nvrtc.status();
  const std::string unit = rendered->unit();
  const std::string name = fmt::format("{}.cu", op_name(spec.op));
  Result<NvrtcOutput> out = nvrtc.value()->compile(
      unit, name, template_headers(), nvrtc_options(arch), rendered->name_expression("KilnCfg"));
  if (!out.is_ok()) {
    const Status& s = out.status();
    return Status(s.code(), s.message(), s.detail() + "\n--- source ---\n" + unit);
  }
  CudaBinary binary;
  binary.arch = arch.name();
  binary.kernel_name = out->lowered_name;
  binary.cubin = std::move(out->cubin);
  binary.ptx = std::move(out->ptx);
  binary.ptxas_log = std::move(out->log);
  if (rendered_out != nullptr) *rendered_out = std::move(rendered).value();
  return binary;
}

std::string_view codegen_version() {
  static const std::string version = [] {
    XXH3_state_t* state = XXH3_createState();
    XXH3_64bits_reset(state);
    for (const SourceHeader& h : template_headers()) {
      XXH3_64bits_update(state, h.name.data(), h.name.size() + 1);  // with its NUL: a separator
      XXH3_64bits_update(state, h.text.data(), h.text.size());
    }
    const uint64_t digest = XXH3_64bits_digest(state);
    XXH3_freeState(state);
    return fmt::format("{}-{:016x}", kCodegenVersion, digest);
  }();
  return version;
}

std::unique_ptr<Backend> make_backend() {
  return std::make_unique<CudaBackend>();
}

}  // namespace jit::codegen::cuda
