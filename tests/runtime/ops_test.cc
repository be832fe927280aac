// jit::ops: vLLM signatures, results equal to ref, and bad arguments rejected with the
// argument named and nothing written.
#include "runtime/ops.h"

#include <gtest/gtest.h>

#include "codegen/ref/ref.h"
#include "tests/harness/matchers.h"

namespace jit {
namespace {

using test::HostTensor;

// Expects `call` to throw jit::Error whose message contains every `needle`.
template <class Call>
void expect_error(Call call, std::initializer_list<std::string_view> needles) {
  try {
    call();
    ADD_FAILURE() << "expected jit::Error";
  } catch (const Error& e) {
    for (std::string_view n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message lacks '" << n << "': " << e.what();
    }
  }
}

TEST(Ops, RmsNormMatchesRef) {
  HostTensor x = HostTensor::zeros(DType::kBF16, {7, 768});
  HostTensor w = HostTensor::zeros(DType::kBF16, {768});
  test::fill_normal(x, 1);
  test::fill_normal(w, 2, 1.0, 0.1);
  HostTensor out = HostTensor::zeros(DType::kBF16, {7, 768});
  HostTensor expected = out;
  ops::rms_norm(out.tensor(), x.tensor(), w.tensor(), 1e-6);
  const OpSpec spec = OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kBF16, 768, true});
  ASSERT_TRUE(
      codegen::ref::run(spec, KernelArgs({expected.tensor(), x.tensor(), w.tensor()}, {1e-6}))
          .is_ok());
  EXPECT_TRUE(test::matches(out, expected, test::tolerance_for(OpKind::kRmsNorm, DType::kBF16)));
}

TEST(Ops, FusedAddRmsNormUpdatesBothInPlace) {
  HostTensor x = HostTensor::zeros(DType::kF32, {3, 64});
  HostTensor r = HostTensor::zeros(DType::kF32, {3, 64});
  HostTensor w = HostTensor::zeros(DType::kF32, {64});
  test::fill_normal(x, 1);
  test::fill_normal(r, 2);
  test::fill_normal(w, 3, 1.0, 0.1);
  HostTensor x_ref = x, r_ref = r;
  ops::fused_add_rms_norm(x.tensor(), r.tensor(), w.tensor(), 1e-5);
  const OpSpec spec = OpSpec::make(OpKind::kFusedAddRmsNorm, ir::NormParams{DType::kF32, 64, true});
  ASSERT_TRUE(
      codegen::ref::run(spec, KernelArgs({x_ref.tensor(), r_ref.tensor(), w.tensor()}, {1e-5}))
          .is_ok());
  const auto tol = test::tolerance_for(OpKind::kFusedAddRmsNorm, DType::kF32);
  EXPECT_TRUE(test::matches(x, x_ref, tol));
  EXPECT_TRUE(test::matches(r, r_ref, tol));
}

TEST(Ops, EveryActivationRuns) {
  HostTensor in = HostTensor::zeros(DType::kF16, {2, 34});
  test::fill_normal(in, 5);
  HostTensor out = HostTensor::zeros(DType::kF16, {2, 17});
  ops::silu_and_mul(out.tensor(), in.tensor());
  ops::mul_and_silu(out.tensor(), in.tensor());
  ops::gelu_and_mul(out.tensor(), in.tensor());
  ops::gelu_tanh_and_mul(out.tensor(), in.tensor());
  ops::fatrelu_and_mul(out.tensor(), in.tensor(), 0.1);
  ops::swigluoai_and_mul(out.tensor(), in.tensor());
  HostTensor expected = HostTensor::zeros(DType::kF16, {2, 17});
  const OpSpec spec = OpSpec::make(OpKind::kSwigluoaiAndMul, ir::ActivationParams{DType::kF16, 17});
  ASSERT_TRUE(
      codegen::ref::run(spec, KernelArgs({expected.tensor(), in.tensor()}, {1.702, 7.0})).is_ok());
  EXPECT_TRUE(test::matches(out, expected, test::tolerance_for(spec.op, DType::kF16)));
}

TEST(Ops, RotaryEmbeddingRotatesInPlace) {
  HostTensor positions = HostTensor::from_values(DType::kI64, {2}, {0, 1});
  HostTensor q = HostTensor::zeros(DType::kF32, {2, 8});
  test::fill_normal(q, 1);
  HostTensor q0 = q;
  // rot_dim 2: row 0 is angle 0 (identity), row 1 rotates (q0, q1) by 90 degrees.
  HostTensor cache = HostTensor::from_values(DType::kF32, {2, 2}, {1, 0, 0, 1});
  ops::rotary_embedding(positions.tensor(), q.tensor(), Tensor{}, 8, cache.tensor(), true);
  EXPECT_EQ(q.get(0), q0.get(0));
  EXPECT_FLOAT_EQ(q.get(8), -q0.get(9));
  EXPECT_FLOAT_EQ(q.get(9), q0.get(8));
  EXPECT_EQ(q.get(10), q0.get(10)) << "beyond rot_dim untouched";
}

// ---- bad arguments: the message names the argument; the output is not written.

TEST(OpsErrors, RmsNormWrongDtype) {
  HostTensor x = HostTensor::zeros(DType::kI32, {2, 8});
  HostTensor out = HostTensor::zeros(DType::kI32, {2, 8});
  HostTensor w = HostTensor::zeros(DType::kI32, {8});
  expect_error([&] { ops::rms_norm(out.tensor(), x.tensor(), w.tensor(), 1e-6); },
               {"rms_norm", "input", "i32", "bf16"});
}

TEST(OpsErrors, RmsNormWeightOfWrongLength) {
  HostTensor x = HostTensor::zeros(DType::kBF16, {2, 8});
  HostTensor out = HostTensor::zeros(DType::kBF16, {2, 8});
  HostTensor w = HostTensor::zeros(DType::kBF16, {9});
  test::fill_equal(out, 3.0);
  const auto before = out.storage();
  expect_error([&] { ops::rms_norm(out.tensor(), x.tensor(), w.tensor(), 1e-6); },
               {"weight", "9", "8"});
  EXPECT_EQ(out.storage(), before) << "nothing is written on error";
}

TEST(OpsErrors, RmsNormNonContiguousOut) {
  HostTensor x = HostTensor::zeros(DType::kF32, {2, 8});
  HostTensor out = HostTensor::row_strided(DType::kF32, {2, 8}, 16);
  HostTensor w = HostTensor::zeros(DType::kF32, {8});
  expect_error([&] { ops::rms_norm(out.tensor(), x.tensor(), w.tensor(), 1e-6); },
               {"out", "contiguous"});
}

TEST(OpsErrors, RmsNormMismatchedRows) {
  HostTensor x = HostTensor::zeros(DType::kF32, {3, 8});
  HostTensor out = HostTensor::zeros(DType::kF32, {2, 8});
  HostTensor w = HostTensor::zeros(DType::kF32, {8});
  expect_error([&] { ops::rms_norm(out.tensor(), x.tensor(), w.tensor(), 1e-6); }, {"row"});
}

TEST(OpsErrors, RmsNormNegativeEpsilon) {
  HostTensor x = HostTensor::zeros(DType::kF32, {1, 8});
  HostTensor out = HostTensor::zeros(DType::kF32, {1, 8});
  HostTensor w = HostTensor::zeros(DType::kF32, {8});
  expect_error([&] { ops::rms_norm(out.tensor(), x.tensor(), w.tensor(), -1.0); }, {"epsilon"});
}

TEST(OpsErrors, FusedAddRmsNormResidualDtype) {
  HostTensor x = HostTensor::zeros(DType::kBF16, {2, 8});
  HostTensor r = HostTensor::zeros(DType::kF16, {2, 8});
  HostTensor w = HostTensor::zeros(DType::kBF16, {8});
  test::fill_equal(x, 1.0);
  const auto before = x.storage();
  expect_error([&] { ops::fused_add_rms_norm(x.tensor(), r.tensor(), w.tensor(), 1e-6); },
               {"residual", "f16", "bf16"});
  EXPECT_EQ(x.storage(), before);
}

TEST(OpsErrors, ActivationOddInput) {
  HostTensor in = HostTensor::zeros(DType::kBF16, {2, 7});
  HostTensor out = HostTensor::zeros(DType::kBF16, {2, 3});
  expect_error([&] { ops::silu_and_mul(out.tensor(), in.tensor()); }, {"input", "even"});
}

TEST(OpsErrors, ActivationOutWidth) {
  HostTensor in = HostTensor::zeros(DType::kBF16, {2, 8});
  HostTensor out = HostTensor::zeros(DType::kBF16, {2, 3});
  expect_error([&] { ops::gelu_and_mul(out.tensor(), in.tensor()); }, {"out", "3", "4"});
}

TEST(OpsErrors, ActivationOutDtype) {
  HostTensor in = HostTensor::zeros(DType::kBF16, {2, 8});
  HostTensor out = HostTensor::zeros(DType::kF32, {2, 4});
  expect_error([&] { ops::swigluoai_and_mul(out.tensor(), in.tensor()); }, {"out", "f32"});
}

TEST(OpsErrors, ActivationNonContiguousInput) {
  HostTensor in = HostTensor::row_strided(DType::kF32, {2, 8}, 16);
  HostTensor out = HostTensor::zeros(DType::kF32, {2, 4});
  expect_error([&] { ops::fatrelu_and_mul(out.tensor(), in.tensor(), 0.0); },
               {"input", "contiguous"});
}

TEST(OpsErrors, ActivationNullPointer) {
  HostTensor out = HostTensor::zeros(DType::kF32, {2, 4});
  const Tensor null_input(nullptr, DType::kF32, {2, 8});
  expect_error([&] { ops::mul_and_silu(out.tensor(), null_input); }, {"input", "null"});
}

TEST(OpsErrors, RotaryPositionsDtype) {
  HostTensor positions = HostTensor::zeros(DType::kI32, {2});
  HostTensor q = HostTensor::zeros(DType::kF32, {2, 8});
  HostTensor cache = HostTensor::zeros(DType::kF32, {4, 8});
  expect_error(
      [&] {
        ops::rotary_embedding(positions.tensor(), q.tensor(), Tensor{}, 8, cache.tensor(), true);
      },
      {"positions", "i32", "i64"});
}

TEST(OpsErrors, RotaryHeadSizeMustDivide) {
  HostTensor positions = HostTensor::zeros(DType::kI64, {2});
  HostTensor q = HostTensor::zeros(DType::kF32, {2, 12});
  HostTensor cache = HostTensor::zeros(DType::kF32, {4, 8});
  expect_error(
      [&] {
        ops::rotary_embedding(positions.tensor(), q.tensor(), Tensor{}, 8, cache.tensor(), true);
      },
      {"head_size"});
}

TEST(OpsErrors, RotaryRotDimLargerThanHead) {
  HostTensor positions = HostTensor::zeros(DType::kI64, {2});
  HostTensor q = HostTensor::zeros(DType::kF32, {2, 8});
  HostTensor cache = HostTensor::zeros(DType::kF32, {4, 16});
  expect_error(
      [&] {
        ops::rotary_embedding(positions.tensor(), q.tensor(), Tensor{}, 8, cache.tensor(), true);
      },
      {"rot_dim"});
}

TEST(OpsErrors, RotaryKeyHeadsMustDivideQueryHeads) {
  HostTensor positions = HostTensor::zeros(DType::kI64, {2});
  HostTensor q = HostTensor::zeros(DType::kF32, {2, 4 * 8});
  HostTensor k = HostTensor::zeros(DType::kF32, {2, 3 * 8});
  HostTensor cache = HostTensor::zeros(DType::kF32, {4, 8});
  expect_error(
      [&] {
        ops::rotary_embedding(positions.tensor(), q.tensor(), k.tensor(), 8, cache.tensor(), true);
      },
      {"heads_q", "heads_kv"});
}

}  // namespace
}  // namespace jit
