// The arm backend on any host: every op builds valid IR and an AArch64 object whose
// disassembly uses NEON vector instructions; the runtime serves arm:neon only when asked,
// caches the objects on disk per target, and reports clearly that an x86 host cannot run them.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>

#include "codegen/arm/arm_backend.h"
#include "runtime/disk_cache.h"
#include "runtime/runtime.h"
#include "tests/arm/arm_test_util.h"
#include "tests/harness/example_specs.h"

namespace jit {
namespace {

using codegen::arm::compile_object;
using codegen::arm::disassemble;

std::string disassembly_of(const OpSpec& spec, int opt = 3) {
  auto object = compile_object(spec, opt);
  EXPECT_TRUE(object.is_ok()) << object.status().to_string();
  if (!object.is_ok()) return {};
  EXPECT_GT(object->object.size(), 64u);
  auto text = disassemble(object->object);
  EXPECT_TRUE(text.is_ok()) << text.status().to_string();
  return text.is_ok() ? text.value() : std::string();
}

// How many lines of `text` match `pattern` (an instruction with its operands).
int count(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return int(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

TEST(ArmCodegen, EveryRowOpUsesNeonVectorArithmetic) {
  for (OpKind op : test::kArmRowOps) {
    for (DType dtype : test::kArmDtypes) {
      const OpSpec spec = test::arm_row_spec(op, dtype, 4096);
      const std::string text = disassembly_of(spec);
      // fp32 arithmetic on four-lane q registers: fmul/fadd/fdiv/fsub v.4s.
      EXPECT_GT(count(text, R"(\bf(mul|add|sub|div)\s+v\d+\.4s)"), 0) << to_string(spec) << text;
      if (dtype == DType::kF16) {
        // half <-> float through the NEON conversions (fcvtl/fcvtl2 and fcvtn/fcvtn2).
        EXPECT_GT(count(text, R"(\bfcvtl2?\s+v\d+\.4s)"), 0) << to_string(spec);
        EXPECT_GT(count(text, R"(\bfcvtn2?\s+v\d+\.(4h|8h))"), 0) << to_string(spec);
      }
      if (dtype == DType::kBF16) {
        // bf16 widening is a 16-bit left shift of each lane (shll/ushll by 16).
        EXPECT_GT(count(text, R"(\b(u?shll2?)\s+v\d+\.4s, v\d+\.(4h|8h), #(16|0))"), 0)
            << to_string(spec) << text;
      }
    }
  }
}

TEST(ArmCodegen, NormsUseAVectorSquareRootFreeReductionAndOneSqrt) {
  const std::string text = disassembly_of(test::arm_row_spec(OpKind::kRmsNorm, DType::kF32, 4096));
  EXPECT_GT(count(text, R"(\bfsqrt\s+s\d+)"), 0) << text;
  EXPECT_GT(count(text, R"(\bfaddp\s+v\d+\.4s)"), 0) << text;  // tree reduce of the sum
}

TEST(ArmCodegen, RopeStylesUseNeonShufflesForGptjPairs) {
  for (DType dtype : test::kArmDtypes) {
    const std::string neox =
        disassembly_of(test::arm_rope_spec(dtype, dtype, 128, 128, ir::RopeStyle::kNeox, true));
    // f16 products and sums may run natively on .8h lanes: rounding a float product of two
    // halves to half equals the half product (LLVM folds the conversions away).
    EXPECT_GT(count(neox, R"(\bf(mul|sub|add)\s+v\d+\.(4s|8h))"), 0) << neox;
    const std::string gptj =
        disassembly_of(test::arm_rope_spec(dtype, dtype, 128, 128, ir::RopeStyle::kGptj, true));
    // Even/odd lanes split and re-interleaved by structure loads/stores or permutes.
    EXPECT_GT(count(gptj, R"(\b(ld2|st2|uzp1|uzp2|zip1|zip2)\s)"), 0) << gptj;
  }
}

TEST(ArmCodegen, Bf16AttentionUsesBfmlalAndBfdotAndFp32UsesFmla) {
  const auto spec = [](DType dtype) {
    return OpSpec::make(OpKind::kCpuAttentionWithKvCache,
                        ir::CpuAttentionParams{ir::CpuAttnIsa::kNeon, dtype, 128, 32, 8, 2, true,
                                               false, false, false, false});
  };
  auto bf16 = compile_object(spec(DType::kBF16), 2, /*bf16_dot=*/true);
  ASSERT_TRUE(bf16.is_ok()) << bf16.status().to_string();
  const std::string text = disassemble(bf16->object).value();
  EXPECT_GT(count(text, R"(\bbfmlalb\s+v\d+\.4s, v\d+\.8h, v\d+\.8h)"), 0) << text;
  EXPECT_GT(count(text, R"(\bbfmlalt\s+v\d+\.4s, v\d+\.8h, v\d+\.8h)"), 0) << text;
  EXPECT_GT(count(text, R"(\bbfdot\s+v\d+\.4s, v\d+\.8h, v\d+\.8h)"), 0) << text;
  // The fp32 path (bf16 knob off, or f32 data): FMLA on four lanes, no bf16 arithmetic.
  for (auto object :
       {compile_object(spec(DType::kBF16), 2, false), compile_object(spec(DType::kF32), 2, true)}) {
    ASSERT_TRUE(object.is_ok()) << object.status().to_string();
    const std::string fp32 = disassemble(object->object).value();
    EXPECT_GT(count(fp32, R"(\bfmla\s+v\d+\.4s)"), 0) << fp32;
    EXPECT_EQ(count(fp32, R"(\bbf(mlal[bt]|dot|mmla)\s)"), 0) << fp32;
  }
}

TEST(ArmCodegen, TheNeoverseN1ProfileNeverEmitsBf16Instructions) {
  const OpSpec spec =
      OpSpec::make(OpKind::kCpuAttentionWithKvCache,
                   ir::CpuAttentionParams{ir::CpuAttnIsa::kNeon, DType::kBF16, 64, 32, 4, 2, true,
                                          false, false, false, false});
  auto object = compile_object(spec, 2, /*bf16_dot=*/true, codegen::arm::kNeoverseN1);
  ASSERT_TRUE(object.is_ok()) << object.status().to_string();
  const std::string text = disassemble(object->object).value();
  EXPECT_EQ(count(text, R"(\bbf(mlal[bt]|dot|mmla|cvtn?2?)\s)"), 0) << text;
  EXPECT_GT(count(text, R"(\bfmla\s+v\d+\.4s)"), 0) << text;
  // The runtime's target for such a host offers no bf16 configs.
  Target n1 = host_target(BackendKind::kArm);
  n1.fingerprint = std::string(codegen::arm::kNeoverseN1.fingerprint);
  for (const Config& config : codegen::arm::make_backend()->configs(spec, n1)) {
    EXPECT_EQ(config.get("bf16", 0), 0) << config.to_string();
  }
}

TEST(ArmCodegen, Fp8QuantiseUsesVectorDivideAndNarrowing) {
  const OpSpec spec =
      OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{DType::kFp8E4m3, DType::kBF16});
  const std::string text = disassembly_of(spec);
  EXPECT_GT(count(text, R"(\bfdiv\s+v\d+\.4s)"), 0) << text;  // x / scale, IEEE
  EXPECT_GT(count(text, R"(\bumin\s+v\d+\.4s)"), 0) << text;  // saturation to the largest code
  // The codes narrowed to bytes (a table lookup or narrowing moves).
  EXPECT_GT(count(text, R"(\b(xtn2?|uzp1|tbl)\s+v\d+\.(8b|16b|8h))"), 0) << text;
}

TEST(ArmCodegen, NoLibraryCallsInKernels) {
  // exp/erfc are inlined polynomials: the objects must link without libm.
  for (OpKind op : test::kArmRowOps) {
    auto object = compile_object(test::arm_row_spec(op, DType::kBF16, 77));
    ASSERT_TRUE(object.is_ok()) << object.status().to_string();
    auto text = disassemble(object->object);
    ASSERT_TRUE(text.is_ok());
    EXPECT_EQ(count(text.value(), R"(\bbl\s)"), 0) << op_name(op) << text.value();
  }
}

TEST(ArmCodegen, Opt2AndOpt3BothBuildAndOtherLevelsAreRejected) {
  const OpSpec spec = test::arm_row_spec(OpKind::kSiluAndMul, DType::kF16, 100);
  EXPECT_FALSE(disassembly_of(spec, 2).empty());
  auto bad = compile_object(spec, 1);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("opt=1 is not allowed; allowed: 2, 3"), std::string::npos)
      << bad.status().message();
}

// A knob the arm backend does not read for the op, or a bf16 value other than 0 / 1, is refused
// with what is allowed (not ignored).
TEST(ArmRuntime, UnknownKnobsAndBadBf16ValuesAreRefused) {
  Runtime runtime(RuntimeOptions{});
  CompileOptions options;
  options.backend = BackendKind::kArm;
  options.config = Config().set("bf16", 1);
  auto row = runtime.compile(test::arm_row_spec(OpKind::kRmsNorm, DType::kBF16, 64), options);
  ASSERT_FALSE(row.is_ok());
  EXPECT_NE(row.status().message().find("unknown knob 'bf16' for rms_norm; allowed: opt"),
            std::string::npos)
      << row.status().message();
  const OpSpec attention =
      OpSpec::make(OpKind::kCpuAttentionWithKvCache,
                   ir::CpuAttentionParams{ir::CpuAttnIsa::kNeon, DType::kBF16, 64, 32, 4, 2, true,
                                          false, false, false, false});
  options.config = Config().set("unroll", 2);
  auto unknown = runtime.compile(attention, options);
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("unknown knob 'unroll' for "
                                            "cpu_attention_with_kv_cache; allowed: opt, bf16"),
            std::string::npos)
      << unknown.status().message();
  options.config = Config().set("bf16", 2);
  auto value = runtime.compile(attention, options);
  ASSERT_FALSE(value.is_ok());
  EXPECT_NE(value.status().message().find("bf16=2 is not allowed; allowed: 0, 1"),
            std::string::npos)
      << value.status().message();
  options.config = Config().set("opt", 2).set("bf16", 0);
  auto good = runtime.compile(attention, options);
  EXPECT_TRUE(good.is_ok()) << good.status().to_string();
}

Runtime& runtime_with_cache(const std::filesystem::path& dir) {
  RuntimeOptions options;
  options.cache_dir = dir;
  static std::vector<std::unique_ptr<Runtime>> runtimes;  // alive for the test program
  runtimes.push_back(std::make_unique<Runtime>(options));
  return *runtimes.back();
}

TEST(ArmRuntime, ExplicitArmTargetCompilesAndIsCachedPerTarget) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("kiln-arm-cache-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const OpSpec spec = test::arm_row_spec(OpKind::kRmsNorm, DType::kBF16, 4096);
  CompileOptions options;
  options.backend = BackendKind::kArm;
  auto first = runtime_with_cache(dir).compile(spec, options);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_EQ(first->info().target.name(), "arm:neon");
  EXPECT_EQ(first->info().target.fingerprint, "aarch64-neoverse-v1");
  EXPECT_EQ(first->info().source, KernelSource::kGenerated);
  EXPECT_FALSE(first->info().cache_key.empty());
  // A second process (runtime) finds the object on disk.
  auto second = runtime_with_cache(dir).compile(spec, options);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_EQ(second->info().source, KernelSource::kDiskCache);
  EXPECT_EQ(second->info().cache_key, first->info().cache_key);
  // The x86 entry of the same spec is a different key.
  CompileOptions x86;
  x86.backend = BackendKind::kX86;
  auto host = runtime_with_cache(dir).compile(spec, x86);
  if (host.is_ok()) {
    EXPECT_NE(host->info().cache_key, first->info().cache_key);
  }
  std::filesystem::remove_all(dir);
}

TEST(ArmRuntime, DefaultDispatchNeverPicksArmAndArmRejectsUnservedOps) {
  Runtime runtime(RuntimeOptions{});
  auto kernel = runtime.compile(test::arm_row_spec(OpKind::kSiluAndMul, DType::kF32, 64));
  ASSERT_TRUE(kernel.is_ok());
  EXPECT_NE(kernel->info().backend, BackendKind::kArm);

  CompileOptions options;
  options.backend = BackendKind::kArm;
  auto parsed = parse_spec(test::valid_examples().at("paged_attention_v1").front());
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  const OpSpec unserved = parsed.value();
  auto refused = runtime.compile(unserved, options);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("arm"), std::string::npos)
      << refused.status().message();
}

#if !defined(__aarch64__)
TEST(ArmRuntime, RunningOnANonAArch64HostIsAClearError) {
  Runtime runtime(RuntimeOptions{});
  CompileOptions options;
  options.backend = BackendKind::kArm;
  const OpSpec spec = test::arm_row_spec(OpKind::kSiluAndMul, DType::kF32, 8);
  auto kernel = runtime.compile(spec, options);
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  std::vector<float> in(16, 1.0f), out(8, 0.0f);
  const Status status = kernel->run(KernelArgs(
      {Tensor(out.data(), DType::kF32, {1, 8}), Tensor(in.data(), DType::kF32, {1, 16})}));
  ASSERT_FALSE(status.is_ok());
  EXPECT_NE(status.message().find("cannot run"), std::string::npos) << status.message();
  EXPECT_EQ(out[0], 0.0f);  // nothing written
}
#endif

}  // namespace
}  // namespace jit
