#include "codegen/arm/arm_backend.h"

#include <fmt/format.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "codegen/arm/call_block.h"
#include "codegen/arm/generator.h"
#include "codegen/arm/kernels.h"
#include "codegen/arm/orc_loader.h"
#include "ir/params_cache.h"
#include "ir/params_cpu.h"

// Declared by LLVM's TargetSelect.h for every configured target; only AArch64 is needed.
extern "C" {
void LLVMInitializeAArch64TargetInfo();
void LLVMInitializeAArch64Target();
void LLVMInitializeAArch64TargetMC();
void LLVMInitializeAArch64AsmPrinter();
}

namespace jit::codegen::arm {
namespace {

using Clock = std::chrono::steady_clock;
double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

bool is_cache_op(OpKind op) {
  switch (op) {
    case OpKind::kReshapeAndCache:
    case OpKind::kReshapeAndCacheFlash:
    case OpKind::kConcatAndCacheMla:
    case OpKind::kSwapBlocks:
    case OpKind::kConvertFp8:
    case OpKind::kCpGatherCache:
    case OpKind::kGatherAndMaybeDequantCache: return true;
    default: return false;
  }
}

bool is_served(OpKind op) {
  const std::string_view family = op_family(op);
  return family == "norm" || family == "activation" || family == "rope" || is_cache_op(op) ||
         op == OpKind::kCpuAttentionWithKvCache;
}

const llvm::Target* aarch64_target(std::string* error) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeAArch64TargetInfo();
    LLVMInitializeAArch64Target();
    LLVMInitializeAArch64TargetMC();
    LLVMInitializeAArch64AsmPrinter();
  });
  return llvm::TargetRegistry::lookupTarget(std::string(kTriple), *error);
}

Status generate(KernelBuilder& k, const OpSpec& spec, bool bf16_dot) {
  const std::string_view family = op_family(spec.op);
  if (family == "norm") return generate_norm(k, spec);
  if (family == "activation") return generate_activation(k, spec);
  if (family == "rope") return generate_rope(k, spec);
  if (is_cache_op(spec.op)) return generate_cache(k, spec);
  if (spec.op == OpKind::kCpuAttentionWithKvCache) return generate_attention(k, spec, bf16_dot);
  return Status(StatusCode::kUnsupported,
                fmt::format("arm backend does not generate {}", op_name(spec.op)));
}

}  // namespace

ArmCpu arm_cpu(const Target& target) {
  return target.fingerprint == kNeoverseN1.fingerprint ? kNeoverseN1 : kNeoverseV1;
}

std::string_view llvm_version() {
  return "llvm-" LLVM_VERSION_STRING;
}

Result<ObjectCode> compile_object(const OpSpec& spec, int opt_level, bool bf16_dot,
                                  const ArmCpu& cpu) {
  if (opt_level != 2 && opt_level != 3) {
    return invalid_argument(
        fmt::format("arm config: {}={} is not allowed; allowed: 2, 3", kOptKnob, opt_level));
  }
  ObjectCode out;
  out.symbol = kernel_symbol(spec);
  std::string error;
  const llvm::Target* target = aarch64_target(&error);
  if (target == nullptr) {
    return Status(StatusCode::kUnavailable, fmt::format("LLVM has no AArch64 target: {}", error));
  }
  llvm::TargetOptions options;
  // Kernels follow the contract's IEEE rounding: no fused multiply-add unless the IR asks.
  options.AllowFPOpFusion = llvm::FPOpFusion::Strict;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      std::string(kTriple), std::string(cpu.name), std::string(cpu.features), options,
      llvm::Reloc::PIC_, std::nullopt,
      opt_level == 3 ? llvm::CodeGenOpt::Aggressive : llvm::CodeGenOpt::Default));

  auto start = Clock::now();
  KernelBuilder k(out.symbol);
  k.function()->addFnAttr("target-cpu", cpu.name);
  k.function()->addFnAttr("target-features", cpu.features);
  KILN_RETURN_IF_ERROR(generate(k, spec, bf16_dot && cpu.bf16));
  if (std::string broken = k.finish(); !broken.empty()) {
    return Status(StatusCode::kInternal,
                  fmt::format("arm backend built invalid IR for {}: {}", to_string(spec), broken));
  }
  std::unique_ptr<llvm::LLVMContext> context = k.take_context();
  std::unique_ptr<llvm::Module> module = k.take_module();
  module->setDataLayout(tm->createDataLayout());
  module->setTargetTriple(std::string(kTriple));
  {
    llvm::raw_string_ostream os(out.ir);
    module->print(os, nullptr);
  }
  out.build_us = micros_since(start);

  start = Clock::now();
  {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(tm.get());
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(
        opt_level == 3 ? llvm::OptimizationLevel::O3 : llvm::OptimizationLevel::O2);
    mpm.run(*module, mam);
  }
  out.optimize_us = micros_since(start);

  start = Clock::now();
  llvm::SmallVector<char, 0> buffer;
  {
    llvm::raw_svector_ostream os(buffer);
    llvm::legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_ObjectFile)) {
      return Status(StatusCode::kInternal, "LLVM AArch64 target cannot emit object files");
    }
    pm.run(*module);
  }
  out.object.assign(buffer.begin(), buffer.end());
  out.emit_us = micros_since(start);
  module.reset();  // before its context
  return out;
}

Result<std::string> disassemble(const std::vector<uint8_t>& object) {
  const auto path =
      std::filesystem::temp_directory_path() /
      fmt::format("kiln-arm-{}-{:x}.o", getpid(), reinterpret_cast<uintptr_t>(object.data()));
  {
    std::ofstream file(path, std::ios::binary);
    file.write(reinterpret_cast<const char*>(object.data()), std::streamsize(object.size()));
  }
  const std::string command =
      fmt::format("llvm-objdump-16 -d --no-show-raw-insn --mattr=+bf16,+i8mm,+fullfp16 '{}' 2>&1",
                  path.string());
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    std::filesystem::remove(path);
    return Status(StatusCode::kUnavailable, "cannot run llvm-objdump-16");
  }
  std::string text;
  std::array<char, 4096> chunk;
  size_t n;
  while ((n = std::fread(chunk.data(), 1, chunk.size(), pipe)) > 0) text.append(chunk.data(), n);
  const int rc = pclose(pipe);
  std::filesystem::remove(path);
  if (rc != 0) {
    return Status(StatusCode::kUnavailable,
                  fmt::format("llvm-objdump-16 failed (install llvm-16): {}", text));
  }
  const size_t start = text.find("Disassembly of section");
  return start == std::string::npos ? text : text.substr(start);
}

namespace {

// Below this many bytes moved per call, kernels run on the calling thread (x86's default).
constexpr double kMinParallelBytes = 256 * 1024;

// A kernel linked into this process (AArch64 hosts).
class ArmExecutable final : public Executable {
 public:
  ArmExecutable(OpSpec spec, ArmKernelFn fn, size_t object_size)
      : spec_(std::move(spec)), fn_(fn), size_(object_size) {}

  Status run(const KernelArgs& args) const override {
    Result<CallPlan> plan = plan_call(spec_, args);
    if (!plan.is_ok()) return plan.status();
    const int64_t rows = plan->rows;
    if (rows <= 0) return Status::ok();
    // Rows split over OpenMP threads as on x86 (a region costs microseconds: small calls
    // run on the calling thread).
    const double bytes = estimates(spec_, {.tokens = rows}).bytes;
    const int threads = int(std::min<int64_t>(omp_get_max_threads(), rows));
    if (!plan->parallel || threads <= 1 || bytes < kMinParallelBytes) {
      fn_(plan->block.words.data(), 0, rows);
      return Status::ok();
    }
    const uint64_t* words = plan->block.words.data();
#pragma omp parallel num_threads(threads)
    {
      const int64_t t = omp_get_thread_num();
      const int64_t n = omp_get_num_threads();
      const int64_t begin = rows * t / n;
      const int64_t end = rows * (t + 1) / n;
      if (begin < end) fn_(words, begin, end);
    }
    return Status::ok();
  }
  const void* code_address() const override {
    return reinterpret_cast<const void*>(fn_);
  }
  size_t code_size() const override {
    return size_;
  }

 private:
  OpSpec spec_;
  ArmKernelFn fn_;
  size_t size_;
};

// An AArch64 kernel on a host that cannot run it: compiling (and caching, and dumping) works,
// running reports why not.
class CrossExecutable final : public Executable {
 public:
  CrossExecutable(OpSpec spec, std::string reason, size_t object_size)
      : spec_(std::move(spec)), reason_(std::move(reason)), size_(object_size) {}
  Status run(const KernelArgs&) const override {
    return Status(StatusCode::kUnavailable,
                  fmt::format("{} was compiled for arm:neon ({}), which this host cannot run: {}",
                              to_string(spec_), kTriple, reason_));
  }
  /// The object's size (there is no loaded code on this host).
  size_t code_size() const override { return size_; }

 private:
  OpSpec spec_;
  std::string reason_;
  size_t size_;
};

// The knobs an op reads on this backend: opt for every op, bf16 (0 / 1) for CPU attention;
// opt's values are checked by compile_object.
Status check_config(const OpSpec& spec, const Config& config) {
  const bool attention = spec.op == OpKind::kCpuAttentionWithKvCache;
  constexpr std::string_view kAttentionKnobs[] = {kOptKnob, kBf16Knob};
  const std::span<const std::string_view> knobs(kAttentionKnobs, attention ? 2 : 1);
  KILN_RETURN_IF_ERROR(check_knob_names("arm", spec, config, knobs));
  if (const int64_t bf16 = config.get(kBf16Knob, 1); bf16 != 0 && bf16 != 1) {
    return invalid_argument(
        fmt::format("arm config: {}={} is not allowed; allowed: 0, 1", kBf16Knob, bf16));
  }
  return Status::ok();
}

class ArmBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kArm; }

  Support supports(const OpSpec& spec, const Target& target) const override {
    if (target.backend != BackendKind::kArm) {
      return Support::no(
          fmt::format("arm backend generates for arm targets; target is {}", target.name()));
    }
    if (!is_served(spec.op)) {
      return Support::no(fmt::format(
          "arm backend does not generate {} yet (served: rms_norm, fused_add_rms_norm, "
          "rotary_embedding, silu_and_mul, mul_and_silu, gelu_and_mul, gelu_tanh_and_mul, "
          "fatrelu_and_mul, swigluoai_and_mul, reshape_and_cache, reshape_and_cache_flash, "
          "concat_and_cache_mla, swap_blocks, convert_fp8, cp_gather_cache, "
          "gather_and_maybe_dequant_cache, cpu_attention_with_kv_cache)",
          op_name(spec.op)));
    }
    if (spec.op == OpKind::kConcatAndCacheMla &&
        spec.get<ir::MlaCacheWriteParams>().kv == ir::KvCacheDtype::kFp8DsMla) {
      return Support::no(
          "arm backend does not generate concat_and_cache_mla with kv=fp8_ds_mla yet (served "
          "kv: auto, fp8_e4m3, fp8_e5m2)");
    }
    if (spec.op == OpKind::kCpuAttentionWithKvCache &&
        spec.get<ir::CpuAttentionParams>().isa != ir::CpuAttnIsa::kNeon) {
      return Support::no(
          "arm backend generates cpu_attention_with_kv_cache for the neon cache layout only "
          "(isa=neon)");
    }
    return Support::yes();
  }

  std::vector<Config> configs(const OpSpec& spec, const Target& target) const override {
    // Attention defaults to O2: at O3 LLVM unrolls the fp32 q.k loop into ~11 KB of code and
    // takes ~7x longer to compile (kiln_arm_latency, docs/arm.md); the loops are already
    // vectorised by hand, so O2 loses nothing the generator did not do itself.
    const bool attention = spec.op == OpKind::kCpuAttentionWithKvCache;
    std::vector<Config> space = {Config().set(std::string(kOptKnob), attention ? 2 : 3),
                                 Config().set(std::string(kOptKnob), attention ? 3 : 2)};
    if (spec.op == OpKind::kCpuAttentionWithKvCache && arm_cpu(target).bf16 &&
        spec.get<ir::CpuAttentionParams>().dtype == DType::kBF16) {
      space.push_back(Config().set(std::string(kOptKnob), 2).set(std::string(kBf16Knob), 0));
    }
    return space;
  }

  Result<Artifact> lower(const OpSpec& spec, const Config& config,
                         const Target& target) const override {
    KILN_RETURN_IF_ERROR(check_config(spec, config));
    Result<ObjectCode> object = compile_object(spec, int(config.get(kOptKnob, 3)),
                                               config.get(kBf16Knob, 1) != 0, arm_cpu(target));
    if (!object.is_ok()) return object.status();
    Artifact artifact;
    artifact.code = std::move(object->object);
    artifact.source = std::move(object->ir);
    artifact.config = config;
    artifact.log = fmt::format("build {:.0f} us, optimise {:.0f} us, emit {:.0f} us",
                               object->build_us, object->optimize_us, object->emit_us);
    return artifact;
  }

  Result<std::shared_ptr<const Executable>> load(const OpSpec& spec, const Artifact& artifact,
                                                 const Target&) const override {
    if (artifact.code.empty()) return Status(StatusCode::kInternal, "arm artifact has no code");
    // Also here: a disk-cache entry stored before lower checked the knobs may carry others.
    KILN_RETURN_IF_ERROR(check_config(spec, artifact.config));
#if defined(__aarch64__)
    std::string error;
    OrcLoader* loader = OrcLoader::global(&error);
    void* address = loader == nullptr ? nullptr
                                      : loader->load(artifact.code.data(), artifact.code.size(),
                                                     kernel_symbol(spec), &error);
    if (address == nullptr) return Status(StatusCode::kInternal, error);
    return std::shared_ptr<const Executable>(std::make_shared<ArmExecutable>(
        spec, reinterpret_cast<ArmKernelFn>(address), artifact.code.size()));
#else
    return std::shared_ptr<const Executable>(
        std::make_shared<CrossExecutable>(spec, "the host is not AArch64", artifact.code.size()));
#endif
  }

  std::string_view codegen_version() const override {
    return kCodegenVersion;
  }
};

}  // namespace

std::unique_ptr<Backend> make_backend() {
  return std::make_unique<ArmBackend>();
}

}  // namespace jit::codegen::arm
