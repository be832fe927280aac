// Tests of the comparison harness itself: views, generators, tolerances, worst-element reports.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "ir/numeric.h"
#include "tests/harness/matchers.h"

namespace jit::test {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(HostTensor, DenseViewIsContiguousAndZeroed) {
  HostTensor t = HostTensor::zeros(DType::kBF16, {3, 5});
  const Tensor view = t.tensor();
  EXPECT_TRUE(view.is_contiguous());
  EXPECT_EQ(view.numel(), 15);
  EXPECT_EQ(t.storage().size(), 30u);
  for (double v : t.values()) EXPECT_EQ(v, 0.0);
}

TEST(HostTensor, RowStridedViewLeavesPaddingAlone) {
  // randn(T, 2H)[..., :H] with T = 3, H = 4.
  HostTensor t = HostTensor::row_strided(DType::kF32, {3, 4}, 8);
  EXPECT_EQ(t.tensor().stride(0), 8);
  EXPECT_FALSE(t.tensor().is_contiguous());
  fill_equal(t, 2.0);
  int64_t twos = 0;
  for (size_t i = 0; i < t.storage().size(); i += 4) {
    float v;
    std::memcpy(&v, t.storage().data() + i, 4);
    twos += v == 2.0f;
  }
  EXPECT_EQ(twos, 12);  // only the 12 logical elements were written
  EXPECT_EQ(t.byte_offset(5), (8 + 1) * 4);
}

TEST(HostTensor, CopyOwnsItsStorage) {
  HostTensor a = HostTensor::from_values(DType::kF16, {2}, {1.0, 2.0});
  HostTensor b = a;
  b.set(0, 5.0);
  EXPECT_EQ(a.get(0), 1.0);
  EXPECT_EQ(b.get(0), 5.0);
  EXPECT_NE(a.tensor().data(), b.tensor().data());
}

TEST(HostTensor, SetRoundsToTheDtype) {
  HostTensor t = HostTensor::zeros(DType::kBF16, {1});
  // bf16 has 7 fraction bits: 1 + 2^-8 and 1 + 3·2^-8 are ties, rounded to the even neighbour.
  t.set(0, 1.0 + std::ldexp(1.0, -8));
  EXPECT_EQ(t.get(0), 1.0);
  t.set(0, 1.0 + 3 * std::ldexp(1.0, -8));
  EXPECT_EQ(t.get(0), 1.0 + std::ldexp(1.0, -6));
  HostTensor i = HostTensor::from_values(DType::kI64, {2}, {7, -3});
  EXPECT_EQ(i.tensor().data_as<int64_t>()[1], -3);
}

TEST(Generators, SeededAndReproducible) {
  HostTensor a = HostTensor::zeros(DType::kF32, {64});
  HostTensor b = HostTensor::zeros(DType::kF32, {64});
  HostTensor c = HostTensor::zeros(DType::kF32, {64});
  fill_normal(a, 7, 1.0, 0.1);
  fill_normal(b, 7, 1.0, 0.1);
  fill_normal(c, 8, 1.0, 0.1);
  EXPECT_EQ(a.values(), b.values());
  EXPECT_NE(a.values(), c.values());
  double mean = 0;
  for (double v : a.values()) mean += v / 64;
  EXPECT_NEAR(mean, 1.0, 0.1);
}

TEST(Generators, SmallIntegersAndEqualValues) {
  HostTensor t = HostTensor::zeros(DType::kBF16, {100});
  fill_small_int(t, 3, -4, 4);
  for (double v : t.values()) {
    EXPECT_EQ(v, std::round(v));
    EXPECT_LE(std::fabs(v), 4);
  }
  fill_equal(t, 0.75);
  for (double v : t.values()) EXPECT_EQ(v, 0.75);
}

TEST(Generators, AdversarialCoversTheSpecialValues) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostTensor t = HostTensor::zeros(dtype, {4096});
    fill_adversarial(t, 11);
    bool nan = false, pos_inf = false, neg_inf = false, neg_zero = false, subnormal = false;
    const double normal_min = dtype == DType::kF16 ? std::ldexp(1.0, -14) : std::ldexp(1.0, -126);
    for (double v : t.values()) {
      nan |= std::isnan(v);
      pos_inf |= v == kInf;
      neg_inf |= v == -kInf;
      neg_zero |= v == 0 && std::signbit(v);
      subnormal |= v != 0 && std::fabs(v) < normal_min;
    }
    EXPECT_TRUE(nan && pos_inf && neg_inf && neg_zero && subnormal);
    // Every special value is representable in the dtype (nothing is lost when stored).
    for (double v : adversarial_values(dtype)) {
      HostTensor one = HostTensor::from_values(dtype, {1}, {v});
      if (!std::isnan(v)) {
        EXPECT_EQ(one.get(0), v);
      }
    }
  }
}

TEST(Ulp, SpacingIncludingSubnormals) {
  EXPECT_EQ(ulp_of(DType::kBF16, 1.0), std::ldexp(1.0, -7));
  EXPECT_EQ(ulp_of(DType::kBF16, 1.99), std::ldexp(1.0, -7));
  EXPECT_EQ(ulp_of(DType::kBF16, -2.0), std::ldexp(1.0, -6));
  EXPECT_EQ(ulp_of(DType::kF16, 1.0), std::ldexp(1.0, -10));
  EXPECT_EQ(ulp_of(DType::kF32, 1.0), std::ldexp(1.0, -23));
  // Below the smallest normal the spacing is the smallest subnormal, also at 0.
  EXPECT_EQ(ulp_of(DType::kF16, 0.0), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp_of(DType::kF16, std::ldexp(1.0, -20)), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp_of(DType::kF32, 1e-40), std::ldexp(1.0, -149));
  EXPECT_EQ(ulp_of(DType::kI32, 5.0), 1.0);
}

TEST(Compare, UlpToleranceAcceptsOneRejectsTwo) {
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double ulp = ulp_of(dtype, 1.5);
    HostTensor expected = HostTensor::from_values(dtype, {1}, {1.5});
    HostTensor one = HostTensor::from_values(dtype, {1}, {1.5 + ulp});
    HostTensor two = HostTensor::from_values(dtype, {1}, {1.5 - 2 * ulp});
    EXPECT_TRUE(compare(one, expected, Tolerance::ulp(1)).ok());
    EXPECT_FALSE(compare(two, expected, Tolerance::ulp(1)).ok());
    EXPECT_TRUE(compare(two, expected, Tolerance::ulp(2)).ok());
  }
  // Subnormal spacing: two adjacent f16 subnormals are 1 ulp apart.
  const double tiny = std::ldexp(1.0, -24);
  HostTensor a = HostTensor::from_values(DType::kF16, {2}, {tiny, 0.0});
  HostTensor b = HostTensor::from_values(DType::kF16, {2}, {2 * tiny, tiny});
  EXPECT_TRUE(compare(a, b, Tolerance::ulp(1)).ok());
  HostTensor c = HostTensor::from_values(DType::kF16, {2}, {3 * tiny, 3 * tiny});
  EXPECT_EQ(compare(a, c, Tolerance::ulp(1)).mismatches, 2);
}

TEST(Compare, AbsRelBoundary) {
  HostTensor expected = HostTensor::from_values(DType::kF32, {2}, {1.0, 0.0});
  HostTensor inside = HostTensor::from_values(DType::kF32, {2}, {1.0 + 0.9e-3, 0.49e-3});
  HostTensor outside = HostTensor::from_values(DType::kF32, {2}, {1.0 + 2e-3, 0.0});
  const Tolerance tol = Tolerance::abs_rel(0.5e-3, 0.5e-3);  // allowed: 1e-3 at 1, 5e-4 at 0
  EXPECT_TRUE(compare(inside, expected, tol).ok());
  const CompareResult r = compare(outside, expected, tol);
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_EQ(r.worst_index, 0);
  EXPECT_NEAR(r.worst_ratio, 2.0, 1e-3);
}

TEST(Compare, ReportsTheWorstElement) {
  HostTensor expected = HostTensor::zeros(DType::kF32, {2, 3});
  HostTensor actual = HostTensor::zeros(DType::kF32, {2, 3});
  actual.set(1, 0.5);   // small miss
  actual.set(4, -3.0);  // the worst
  actual.set(5, 1e-7);  // within tolerance
  const CompareResult r = compare(actual, expected, Tolerance::abs_rel(1e-6, 0));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.count, 6);
  EXPECT_EQ(r.mismatches, 2);
  EXPECT_EQ(r.worst_index, 4);
  EXPECT_EQ(r.worst_actual, -3.0);
  EXPECT_EQ(r.worst_expected, 0.0);
  EXPECT_NE(r.message.find("2 of 6"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("index 4 [1, 1]"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("actual -3"), std::string::npos) << r.message;
  const ::testing::AssertionResult m = matches(actual, expected, Tolerance::abs_rel(1e-6, 0));
  EXPECT_FALSE(m);
  EXPECT_NE(std::string(m.message()).find("index 4"), std::string::npos);
}

TEST(Compare, NanAndInfinityHandling) {
  const Tolerance loose = Tolerance::abs_rel(1e30, 1);
  HostTensor nan = HostTensor::from_values(DType::kBF16, {1}, {kNan});
  HostTensor one = HostTensor::from_values(DType::kBF16, {1}, {1.0});
  HostTensor pos_inf = HostTensor::from_values(DType::kBF16, {1}, {kInf});
  HostTensor neg_inf = HostTensor::from_values(DType::kBF16, {1}, {-kInf});
  HostTensor big = HostTensor::from_values(DType::kBF16, {1}, {1e38});
  for (Tolerance tol : {Tolerance::exact(), loose, Tolerance::ulp(1000)}) {
    SCOPED_TRACE(tol.to_string());
    EXPECT_TRUE(compare(nan, nan, tol).ok());
    EXPECT_FALSE(compare(nan, one, tol).ok());
    EXPECT_FALSE(compare(one, nan, tol).ok());
    EXPECT_TRUE(compare(pos_inf, pos_inf, tol).ok());
    EXPECT_FALSE(compare(pos_inf, neg_inf, tol).ok());
    EXPECT_FALSE(compare(big, pos_inf, tol).ok());
    EXPECT_FALSE(compare(pos_inf, big, tol).ok());
  }
  // A NaN with a different payload still matches NaN.
  HostTensor other_nan = HostTensor::zeros(DType::kBF16, {1});
  const uint16_t payload = 0x7FC1;
  std::memcpy(other_nan.tensor().data(), &payload, 2);
  EXPECT_TRUE(compare(other_nan, nan, Tolerance::exact()).ok());
}

TEST(Compare, ExactComparesBitsSoSignedZerosDiffer) {
  HostTensor pos = HostTensor::from_values(DType::kF32, {1}, {0.0});
  HostTensor neg = HostTensor::from_values(DType::kF32, {1}, {-0.0});
  EXPECT_FALSE(compare(pos, neg, Tolerance::exact()).ok());
  EXPECT_TRUE(compare(pos, neg, Tolerance::abs_rel(0, 0)).ok());
  EXPECT_TRUE(compare(pos, pos, Tolerance::exact()).ok());
}

TEST(Compare, LogicalElementsOnlyAcrossLayouts) {
  HostTensor dense = HostTensor::zeros(DType::kF16, {3, 4});
  HostTensor strided = HostTensor::row_strided(DType::kF16, {3, 4}, 9);
  fill_normal(dense, 5);
  for (int64_t i = 0; i < dense.numel(); ++i) strided.set(i, dense.get(i));
  // Garbage in the padding is not compared.
  auto* bytes = static_cast<std::byte*>(strided.tensor().data());
  std::memset(bytes + 4 * 2, 0xFF, 5 * 2);
  EXPECT_TRUE(compare(strided, dense, Tolerance::exact()).ok());
}

TEST(Compare, ShapeOrDtypeMismatchFails) {
  HostTensor a = HostTensor::zeros(DType::kF32, {2, 3});
  HostTensor b = HostTensor::zeros(DType::kF32, {3, 2});
  HostTensor c = HostTensor::zeros(DType::kF16, {2, 3});
  EXPECT_FALSE(compare(a, b, Tolerance::exact()).ok());
  EXPECT_FALSE(compare(a, c, Tolerance::exact()).ok());
  EXPECT_NE(compare(a, b, Tolerance::exact()).message.find("mismatch"), std::string::npos);
}

TEST(ToleranceTable, FollowsTestingSpec) {
  auto same = [](Tolerance a, Tolerance b) {
    return a.kind == b.kind && a.atol == b.atol && a.rtol == b.rtol && a.ulps == b.ulps;
  };
  EXPECT_TRUE(
      same(tolerance_for(OpKind::kRotaryEmbedding, DType::kF32), Tolerance::abs_rel(1e-6, 4e-6)));
  EXPECT_TRUE(
      same(tolerance_for(OpKind::kFatreluAndMul, DType::kF32), Tolerance::abs_rel(1e-6, 4e-6)));
  EXPECT_TRUE(same(tolerance_for(OpKind::kRmsNorm, DType::kF32), Tolerance::abs_rel(1e-5, 1e-5)));
  EXPECT_TRUE(
      same(tolerance_for(OpKind::kGeluAndMul, DType::kF32), Tolerance::abs_rel(1e-5, 4e-5)));
  EXPECT_TRUE(same(tolerance_for(OpKind::kSwigluoaiAndMul, DType::kBF16), Tolerance::ulp(1)));
  EXPECT_TRUE(same(tolerance_for(OpKind::kRotaryEmbedding, DType::kF16), Tolerance::ulp(1)));
  EXPECT_TRUE(same(tolerance_for(OpKind::kFusedAddRmsNorm, DType::kBF16), Tolerance::ulp(2)));
  EXPECT_TRUE(same(tolerance_for(OpKind::kSwapBlocks, DType::kBF16), Tolerance::exact()));
}

}  // namespace
}  // namespace jit::test
