// The arm backend's kernels executed on AArch64 (qemu-aarch64, through kiln_neon_driver and
// ORC) against the ref backend on this host: every op x dtype, every tail of the 16-lane main
// loop (widths 1..17) and large widths, every input kind of spec/testing.md.
#include <gtest/gtest.h>

#include "tests/arm/arm_test_util.h"
#include "tests/arm/qemu_executable.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

using test::InputKind;

// The kernel for `spec` under qemu, or a skip that says why the emulator is unavailable.
#define KILN_NEON_KERNEL(kernel, spec)                                                       \
  auto kernel##_result = test::compile_for_qemu(spec);                                       \
  if (kernel##_result.status().code() == StatusCode::kUnavailable) {                         \
    GTEST_SKIP() << "AArch64 emulation unavailable: " << kernel##_result.status().message(); \
  }                                                                                          \
  ASSERT_TRUE(kernel##_result.is_ok()) << kernel##_result.status().to_string();              \
  const Kernel& kernel = kernel##_result.value()

// Every input kind over `tokens` rows; the first failure per spec is reported.
void check_spec(const Kernel& kernel, int64_t tokens) {
  const OpSpec& spec = kernel.spec();
  for (InputKind kind : test::input_kinds_for(spec.op)) {
    auto c = test::make_case(spec, tokens, kind, /*seed=*/uint64_t(tokens) * 131 + 7);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    const auto report = test::check_against_ref(kernel, c.value());
    EXPECT_TRUE(report.ok) << to_string(spec) << " tokens=" << tokens
                           << " inputs=" << test::input_kind_name(kind) << "\n"
                           << report.message;
    if (!report.ok) return;
  }
}

class NeonRowOpTest : public ::testing::TestWithParam<OpKind> {};

TEST_P(NeonRowOpTest, MatchesRefForEveryTailAndDtype) {
  const OpKind op = GetParam();
  for (DType dtype : test::kArmDtypes) {
    std::vector<int64_t> widths;
    for (int64_t w = 1; w <= 17; ++w) widths.push_back(w);
    for (int64_t w : {33, 100, 4096}) widths.push_back(w);
    for (int64_t width : widths) {
      KILN_NEON_KERNEL(kernel, test::arm_row_spec(op, dtype, width));
      check_spec(kernel, width >= 1000 ? 2 : 3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllRowOps, NeonRowOpTest, ::testing::ValuesIn(test::kArmRowOps),
                         [](const auto& info) { return std::string(op_name(info.param)); });

TEST(NeonNorm, WithoutWeightMatchesRef) {
  for (OpKind op : {OpKind::kRmsNorm, OpKind::kFusedAddRmsNorm}) {
    KILN_NEON_KERNEL(kernel, test::arm_row_spec(op, DType::kBF16, 130, /*weight=*/false));
    check_spec(kernel, 4);
  }
}

TEST(NeonRope, MatchesRefAcrossShapesAndStyles) {
  struct Shape {
    int64_t head_size, rot_dim;
  };
  const Shape shapes[] = {{8, 8}, {64, 64}, {80, 32}, {96, 34}, {128, 128}, {40, 2}};
  for (DType dtype : test::kArmDtypes) {
    for (DType cache_dtype : {dtype, DType::kF32}) {
      for (ir::RopeStyle style : {ir::RopeStyle::kNeox, ir::RopeStyle::kGptj}) {
        for (const Shape& shape : shapes) {
          const bool key = shape.head_size != 40;  // one shape without key
          KILN_NEON_KERNEL(kernel, test::arm_rope_spec(dtype, cache_dtype, shape.head_size,
                                                       shape.rot_dim, style, key));
          check_spec(kernel, 3);
        }
      }
    }
  }
}

// Heads padded in memory ([T, NH, D + 64] sliced to D) and a key whose head stride differs.
TEST(NeonRope, StridedHeadsMatchRef) {
  const int64_t tokens = 5, heads_q = 4, heads_kv = 2, d = 64;
  const OpSpec spec =
      test::arm_rope_spec(DType::kBF16, DType::kBF16, d, d, ir::RopeStyle::kNeox, true);
  KILN_NEON_KERNEL(kernel, spec);
  auto c = test::make_case(spec, tokens, InputKind::kNormal, 11);
  ASSERT_TRUE(c.is_ok());
  test::HostTensor q = test::HostTensor::strided(DType::kBF16, {tokens, heads_q, d},
                                                 {heads_q * (d + 64), d + 64, 1});
  test::HostTensor k = test::HostTensor::strided(DType::kBF16, {tokens, heads_kv, d},
                                                 {heads_kv * (d + 8), d + 8, 1});
  test::fill_normal(q, 3);
  test::fill_normal(k, 4);
  c->tensors[1] = q;
  c->tensors[2] = k;
  const auto report = test::check_against_ref(kernel, c.value());
  EXPECT_TRUE(report.ok) << report.message;
}

TEST(NeonRope, PositionOutsideTheCacheIsAnErrorAndWritesNothing) {
  const OpSpec spec =
      test::arm_rope_spec(DType::kF32, DType::kF32, 16, 16, ir::RopeStyle::kGptj, false);
  KILN_NEON_KERNEL(kernel, spec);
  auto c = test::make_case(spec, 3, InputKind::kNormal, 5);
  ASSERT_TRUE(c.is_ok());
  const int64_t max_position = c->tensors[3].sizes()[0];
  c->tensors[0].set(1, double(max_position));  // one past the cache
  const std::vector<double> before = c->tensors[1].values();
  const Status status = kernel.run(c->args());
  ASSERT_FALSE(status.is_ok());
  EXPECT_NE(status.message().find("positions"), std::string::npos) << status.message();
  EXPECT_EQ(c->tensors[1].values(), before);
}

}  // namespace
}  // namespace jit
