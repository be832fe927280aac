// cpu_attention_with_kv_cache (isa=neon) from the arm backend, executed on AArch64 under
// qemu-aarch64 against the ref: f32/f16/bf16 (bf16 through BFMLALB/T + BFDOT and through fp32
// FMLA), decode and prefill mixes, every feature flag, GQA, head sizes 32..128, block sizes 32
// and 64.
#include <gtest/gtest.h>

#include "tests/arm/qemu_executable.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

using test::InputKind;

OpSpec attention_spec(DType dtype, int64_t head_size, int64_t block_size, int64_t heads_q,
                      int64_t heads_kv, bool causal, bool window, bool alibi, bool softcap,
                      bool sinks) {
  return OpSpec::make(
      OpKind::kCpuAttentionWithKvCache,
      ir::CpuAttentionParams{ir::CpuAttnIsa::kNeon, dtype, head_size, block_size, heads_q, heads_kv,
                             causal, window, alibi, softcap, sinks});
}

class NeonAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto driver = test::QemuDriver::get();
    if (!driver.is_ok()) {
      GTEST_SKIP() << "AArch64 emulation unavailable: " << driver.status().message();
    }
  }

  // Every input kind for `requests` requests; false at the first mismatch.
  static bool check(const OpSpec& spec, const Config& config, int64_t requests) {
    auto kernel = test::compile_for_qemu(spec, config);
    EXPECT_TRUE(kernel.is_ok()) << to_string(spec) << ": " << kernel.status().to_string();
    if (!kernel.is_ok()) return false;
    for (InputKind kind : test::input_kinds_for(spec.op)) {
      auto c = test::make_case(spec, requests, kind, /*seed=*/uint64_t(requests) * 131 + 7);
      EXPECT_TRUE(c.is_ok()) << c.status().to_string();
      if (!c.is_ok()) return false;
      const auto report = test::check_against_ref(kernel.value(), c.value());
      EXPECT_TRUE(report.ok) << to_string(spec) << " config=" << config.to_string()
                             << " requests=" << requests
                             << " inputs=" << test::input_kind_name(kind) << "\n"
                             << report.message;
      if (!report.ok) return false;
    }
    return true;
  }
};

TEST_F(NeonAttentionTest, EveryDtypeAndBothBf16PathsMatchRef) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t bf16 : {1, 0}) {
      if (bf16 == 0 && dtype != DType::kBF16) continue;
      const Config config = Config().set("opt", 2).set("bf16", bf16);
      for (auto [d, bs] : {std::pair<int64_t, int64_t>{32, 32}, {64, 64}, {128, 32}}) {
        if (!check(attention_spec(dtype, d, bs, 4, 2, true, false, false, false, false), config,
                   3)) {
          return;
        }
      }
    }
  }
}

// Every combination of window, alibi, softcap and sinks, causal or not, on the bf16 path;
// fp32 with none and with all of them.
TEST_F(NeonAttentionTest, FeatureFlagsMatchRef) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int flags = 0; flags < 16; ++flags) {
      if (dtype == DType::kF32 && flags != 0 && flags != 15) continue;
      const bool window = flags & 1, alibi = flags & 2, softcap = flags & 4, sinks = flags & 8;
      for (bool causal : {true, false}) {
        const OpSpec spec =
            attention_spec(dtype, 64, 32, 4, 1, causal, window, alibi, softcap, sinks);
        if (!check(spec, Config().set("opt", 2), 4)) return;
      }
    }
  }
}

// A CPU without bf16: the backend's Neoverse N1 profile compiles bf16 data on the fp32 path,
// and the object runs on qemu's neoverse-n1 model, which traps bf16 instructions as illegal
// (this test caught a lower() that ignored the target's CPU class).
TEST_F(NeonAttentionTest, Bf16DataOnACpuWithoutBf16TakesTheFp32Path) {
  const OpSpec spec = attention_spec(DType::kBF16, 64, 32, 4, 2, true, true, false, false, true);
  auto kernel = test::compile_for_qemu(spec, Config().set("opt", 2), "aarch64-neoverse-n1",
                                       /*emulate_n1=*/true);
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  for (InputKind kind : test::input_kinds_for(spec.op)) {
    auto c = test::make_case(spec, 3, kind, 19);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    const auto report = test::check_against_ref(kernel.value(), c.value());
    EXPECT_TRUE(report.ok) << test::input_kind_name(kind) << "\n" << report.message;
  }
}

}  // namespace
}  // namespace jit
