#include "codegen/x86/x86_backend.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>

#include "codegen/code_arena.h"
#include "codegen/x86/generator.h"
#include "codegen/x86/kernels.h"
#include "ir/check_args.h"

namespace jit::codegen::x86 {
namespace {

// Config knobs (tuning space):
//   threads: OpenMP threads across rows (0 = omp_get_max_threads()).
//   min_parallel_kib: below this many KiB moved per call, run on the calling thread (a
//     parallel region costs a few microseconds, more than a decode-sized row takes).
constexpr std::string_view kThreads = "threads";
constexpr std::string_view kMinParallelKib = "min_parallel_kib";
constexpr int64_t kDefaultMinParallelKib = 256;

bool is_norm(OpKind op) {
  return op == OpKind::kRmsNorm || op == OpKind::kFusedAddRmsNorm;
}
bool is_activation(OpKind op) {
  return op_family(op) == "activation";
}
bool is_rope(OpKind op) {
  return op == OpKind::kRotaryEmbedding;
}

// Splits rows [0, rows) over threads, each running the kernel on a contiguous range.
void run_rows(KernelFn fn, const void* call_args, int64_t rows, double bytes,
              const Config& config) {
  if (rows <= 0) return;
  int threads = int(config.get(kThreads, 0));
  if (threads <= 0) threads = omp_get_max_threads();
  const double min_bytes = double(config.get(kMinParallelKib, kDefaultMinParallelKib)) * 1024;
  threads = int(std::min<int64_t>(threads, rows));
  if (threads <= 1 || bytes < min_bytes) {
    fn(call_args, 0, rows);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t n = omp_get_num_threads();
    const int64_t begin = rows * t / n;
    const int64_t end = rows * (t + 1) / n;
    if (begin < end) fn(call_args, begin, end);
  }
}

class X86Executable final : public Executable {
 public:
  X86Executable(OpSpec spec, Config config, const void* code, size_t size)
      : spec_(std::move(spec)), config_(std::move(config)), code_(code), size_(size) {}

  Status run(const KernelArgs& args) const override {
    const auto fn = reinterpret_cast<KernelFn>(const_cast<void*>(code_));
    if (is_norm(spec_.op)) {
      run_norm(fn, args);
    } else if (is_rope(spec_.op)) {
      return run_rope(fn, args);
    } else {
      run_activation(fn, args);
    }
    return Status::ok();
  }
  const void* code_address() const override { return code_; }
  size_t code_size() const override { return size_; }

 private:
  void run_norm(KernelFn fn, const KernelArgs& args) const {
    const auto& p = spec_.get<ir::NormParams>();
    const size_t esize = dtype_size(p.dtype);
    const Tensor& a = args.tensor(0);  // out (rms_norm) or input (fused)
    const Tensor& b = args.tensor(1);  // input (rms_norm) or residual (fused)
    NormCallArgs call{};
    if (spec_.op == OpKind::kFusedAddRmsNorm) {
      call.dst = a.data();
      call.src = a.data();
      call.dst_row_stride = call.src_row_stride = ir::row_stride(a) * int64_t(esize);
      call.residual = b.data();
      call.residual_row_stride = ir::row_stride(b) * int64_t(esize);
    } else {
      call.dst = a.data();
      call.dst_row_stride = p.hidden * int64_t(esize);
      call.src = b.data();
      call.src_row_stride = ir::row_stride(b) * int64_t(esize);
    }
    call.weight = args.tensor(2).data();
    call.epsilon = float(args.scalar(0));
    const int64_t rows = b.numel() / p.hidden;
    run_rows(fn, &call, rows, estimates(spec_, {.tokens = rows}).bytes, config_);
  }

  Status run_rope(KernelFn fn, const KernelArgs& args) const {
    const auto& p = spec_.get<ir::RopeParams>();
    const Tensor& positions = args.tensor(0);
    const Tensor& query = args.tensor(1);
    const Tensor& key = args.tensor(2);
    // Checked before any write: the kernel indexes the cache with the positions.
    KILN_RETURN_IF_ERROR(ir::check_rope_positions(positions, args.tensor(3).size(0)));
    const int64_t esize = int64_t(dtype_size(p.dtype));
    const int lead = positions.dim();
    RopeCallArgs call{};
    call.positions = positions.data_as<const int64_t>();
    call.query = query.data();
    call.cos_sin_cache = args.tensor(3).data();
    const ir::RopeStrides q = ir::rope_strides(query, lead, p.head_size);
    call.query_token_stride = q.token * esize;
    call.query_head_stride = q.head * esize;
    if (p.key) {
      const ir::RopeStrides k = ir::rope_strides(key, lead, p.head_size);
      call.key = key.data();
      call.key_token_stride = k.token * esize;
      call.key_head_stride = k.head * esize;
    }
    const int64_t tokens = positions.numel();
    run_rows(fn, &call, tokens, estimates(spec_, {.tokens = tokens}).bytes, config_);
    return Status::ok();
  }

  void run_activation(KernelFn fn, const KernelArgs& args) const {
    const auto& p = spec_.get<ir::ActivationParams>();
    const int64_t esize = int64_t(dtype_size(p.dtype));
    ActivationCallArgs call{};
    call.dst = args.tensor(0).data();
    call.src = args.tensor(1).data();
    call.dst_row_stride = p.d * esize;
    call.src_row_stride = 2 * p.d * esize;
    if (spec_.op == OpKind::kFatreluAndMul) call.threshold = float(args.scalar(0));
    if (spec_.op == OpKind::kSwigluoaiAndMul) {
      call.alpha = float(args.scalar(0));
      call.limit = float(args.scalar(1));
    }
    const int64_t rows = args.tensor(0).numel() / p.d;
    run_rows(fn, &call, rows, estimates(spec_, {.tokens = rows}).bytes, config_);
  }

  OpSpec spec_;
  Config config_;
  const void* code_;
  size_t size_;
};

class X86Backend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kX86; }

  Support supports(const OpSpec& spec, const Target& target) const override {
    if (target.isa < X86Isa::kAvx2) {
      return Support::no(
          fmt::format("x86 backend needs AVX2+FMA+F16C; target is {}", x86_isa_name(target.isa)));
    }
    if (!is_norm(spec.op) && !is_activation(spec.op) && !is_rope(spec.op)) {
      return Support::no(fmt::format(
          "x86 backend does not generate {} yet (served: rms_norm, fused_add_rms_norm, "
          "rotary_embedding, silu_and_mul, mul_and_silu, gelu_and_mul, gelu_tanh_and_mul, "
          "fatrelu_and_mul, swigluoai_and_mul)",
          op_name(spec.op)));
    }
    return Support::yes();  // every dtype and width validate() accepts
  }

  std::vector<Config> configs(const OpSpec& spec, const Target& target) const override {
    std::vector<Config> space;
    space.push_back(Config{});  // heuristic default
    for (int64_t threads : {1, 2}) {
      for (int64_t kib : {64, 256, 1024}) {
        space.push_back(
            Config().set(std::string(kThreads), threads).set(std::string(kMinParallelKib), kib));
      }
    }
    return space;
  }

  Result<Artifact> lower(const OpSpec& spec, const Config& config,
                         const Target& target) const override {
    Result<std::vector<uint8_t>> code = is_norm(spec.op)   ? generate_norm(spec, target.isa)
                                        : is_rope(spec.op) ? generate_rope(spec, target.isa)
                                                           : generate_activation(spec, target.isa);
    if (!code.is_ok()) return code.status();
    Artifact artifact;
    artifact.code = std::move(code).value();
    artifact.config = config;
    return artifact;
  }

  Result<std::shared_ptr<const Executable>> load(const OpSpec& spec, const Artifact& artifact,
                                                 const Target& target) const override {
    if (artifact.code.empty()) {
      return Status(StatusCode::kInternal, "x86 artifact has no code");
    }
    Result<const void*> address = CodeArena::global().add(artifact.code);
    if (!address.is_ok()) return address.status();
    return std::shared_ptr<const Executable>(std::make_shared<X86Executable>(
        spec, artifact.config, address.value(), artifact.code.size()));
  }

  std::string_view codegen_version() const override { return kCodegenVersion; }
};

}  // namespace

std::unique_ptr<Backend> make_backend() {
  return std::make_unique<X86Backend>();
}

}  // namespace jit::codegen::x86
