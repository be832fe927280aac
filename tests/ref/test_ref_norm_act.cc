// The ref backend's norm, rotary and gated-activation ops: known answers worked out by hand,
// properties, agreement with plain double-precision math within the tolerance table, rejected
// arguments (with nothing written), zero tokens, and the jit::Backend wrapper.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "codegen/ref/ref.h"
#include "ir/check_args.h"
#include "ir/numeric.h"
#include "ir/op_spec.h"
#include "tests/harness/matchers.h"

namespace jit {
namespace {

namespace ref = codegen::ref;
using ir::RopeStyle;
using test::compare;
using test::HostTensor;
using test::matches;
using test::Tolerance;
using test::tolerance_for;

constexpr DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr OpKind kActivations[] = {OpKind::kSiluAndMul,    OpKind::kMulAndSilu,
                                   OpKind::kGeluAndMul,    OpKind::kGeluTanhAndMul,
                                   OpKind::kFatreluAndMul, OpKind::kSwigluoaiAndMul};
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

OpSpec norm_spec(OpKind op, DType dtype, int64_t hidden, bool weight = true) {
  return OpSpec::make(op, ir::NormParams{dtype, hidden, weight});
}

OpSpec rope_spec(DType dtype, int64_t head_size, int64_t rot_dim, RopeStyle style, int64_t heads_q,
                 int64_t heads_kv, bool key, DType cache_dtype) {
  return OpSpec::make(OpKind::kRotaryEmbedding,
                      ir::RopeParams{dtype, cache_dtype, head_size, rot_dim, style, heads_q,
                                     key ? heads_kv : 0, key});
}

OpSpec act_spec(OpKind op, DType dtype, int64_t d) {
  return OpSpec::make(op, ir::ActivationParams{dtype, d});
}

// The activation's arguments with the layer defaults: fatrelu threshold 0, swigluoai
// alpha 1.702 and limit 7.
KernelArgs act_args(OpKind op, const Tensor& out, const Tensor& input) {
  KernelArgs args{out, input};
  if (op == OpKind::kFatreluAndMul) args.add_scalar(0.0);
  if (op == OpKind::kSwigluoaiAndMul) args.add_scalar(1.702).add_scalar(7.0);
  return args;
}

void run_ok(const OpSpec& spec, const KernelArgs& args) {
  const Status status = ref::run(spec, args);
  ASSERT_TRUE(status.is_ok()) << to_string(spec) << ": " << status.to_string();
}

double rnd(DType dtype, double v) {
  HostTensor t = HostTensor::from_values(dtype, {1}, {v});
  return t.get(0);
}

// ---- known answers ------------------------------------------------------------------------------

TEST(RmsNormKnown, ThreeFour) {
  // mean of squares (9 + 16) / 2 = 12.5; eps 0.
  HostTensor x = HostTensor::from_values(DType::kF32, {1, 2}, {3, 4});
  HostTensor w = HostTensor::from_values(DType::kF32, {2}, {1, 1});
  HostTensor out = HostTensor::zeros(DType::kF32, {1, 2});
  run_ok(norm_spec(OpKind::kRmsNorm, DType::kF32, 2),
         {{out.tensor(), x.tensor(), w.tensor()}, {0.0}});
  EXPECT_NEAR(out.get(0), 3 / std::sqrt(12.5), 1e-7);
  EXPECT_NEAR(out.get(1), 4 / std::sqrt(12.5), 1e-7);
  // The weight scales each column; eps goes inside the mean: 1/sqrt(12.5 + 3.5) = 1/4.
  HostTensor w2 = HostTensor::from_values(DType::kF32, {2}, {2, 0.5});
  run_ok(norm_spec(OpKind::kRmsNorm, DType::kF32, 2),
         {{out.tensor(), x.tensor(), w2.tensor()}, {3.5}});
  EXPECT_EQ(out.get(0), 1.5);
  EXPECT_EQ(out.get(1), 0.5);
}

TEST(RmsNormKnown, ExactInEveryDtype) {
  // [4, 4, 4, 4] / sqrt(16) = 1 and [2, -2] / 2: exact, so every dtype gives the same bits.
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    HostTensor x = HostTensor::from_values(dtype, {2, 2}, {4, 4, 2, -2});
    HostTensor w = HostTensor::from_values(dtype, {2}, {0.5, 3});
    HostTensor out = HostTensor::zeros(dtype, {2, 2});
    run_ok(norm_spec(OpKind::kRmsNorm, dtype, 2), {{out.tensor(), x.tensor(), w.tensor()}, {0.0}});
    EXPECT_EQ(out.values(), (std::vector<double>{0.5, 3, 0.5, -3}));
  }
}

TEST(RmsNormKnown, SixteenBitRoundsBeforeTheWeight) {
  // bf16 [3, 4], w = [1, 1.5], eps 0: 4·inv = 1.1313708 rounds to 1.1328125; times 1.5 in fp32
  // is 1.69921875, a tie on the bf16 grid (2^-7) that goes to the even 1.703125. Without the
  // intermediate rounding, rnd(1.1313708·1.5 = 1.6970563) would be 1.6953125.
  HostTensor x = HostTensor::from_values(DType::kBF16, {1, 2}, {3, 4});
  HostTensor w = HostTensor::from_values(DType::kBF16, {2}, {1, 1.5});
  HostTensor out = HostTensor::zeros(DType::kBF16, {1, 2});
  run_ok(norm_spec(OpKind::kRmsNorm, DType::kBF16, 2),
         {{out.tensor(), x.tensor(), w.tensor()}, {0.0}});
  EXPECT_EQ(out.get(0), 0.84765625);
  EXPECT_EQ(out.get(1), 1.703125);
}

TEST(FusedAddRmsNormKnown, ResidualGetsTheSum) {
  HostTensor x = HostTensor::from_values(DType::kBF16, {1, 2}, {1, 2});
  HostTensor r = HostTensor::from_values(DType::kBF16, {1, 2}, {2, 2});
  HostTensor w = HostTensor::from_values(DType::kBF16, {2}, {1, 1});
  run_ok(norm_spec(OpKind::kFusedAddRmsNorm, DType::kBF16, 2),
         {{x.tensor(), r.tensor(), w.tensor()}, {0.0}});
  EXPECT_EQ(r.values(), (std::vector<double>{3, 4}));
  EXPECT_EQ(x.get(0), rnd(DType::kBF16, 3 / std::sqrt(12.5)));
  EXPECT_EQ(x.get(1), rnd(DType::kBF16, 4 / std::sqrt(12.5)));
}

// Runs a one-token activation on f32 [x..., y...] and returns out.
std::vector<double> act_f32(OpKind op, const std::vector<double>& input,
                            std::vector<double> scalars = {}) {
  const int64_t d = int64_t(input.size()) / 2;
  HostTensor in = HostTensor::from_values(DType::kF32, {1, 2 * d}, input);
  HostTensor out = HostTensor::zeros(DType::kF32, {1, d});
  KernelArgs args{out.tensor(), in.tensor()};
  for (double s : scalars) args.add_scalar(s);
  if (scalars.empty()) args = act_args(op, out.tensor(), in.tensor());
  run_ok(act_spec(op, DType::kF32, d), args);
  return out.values();
}

TEST(ActivationKnown, SiluGeluValues) {
  // x = [0, 1, 1], y = [5, 1, 2]
  const std::vector<double> silu = act_f32(OpKind::kSiluAndMul, {0, 1, 1, 5, 1, 2});
  EXPECT_EQ(silu[0], 0.0);
  EXPECT_NEAR(silu[1], 0.7310586, 1e-7);
  EXPECT_NEAR(silu[2], 2 * 0.7310586, 2e-7);
  // mul_and_silu applies silu to the second half: x * silu(y).
  const std::vector<double> mul_silu = act_f32(OpKind::kMulAndSilu, {2, 3, 1, 0});
  EXPECT_NEAR(mul_silu[0], 2 * 0.7310586, 2e-7);
  EXPECT_EQ(mul_silu[1], 0.0);
  EXPECT_NEAR(act_f32(OpKind::kGeluAndMul, {1, 1})[0], 0.8413447, 1e-7);
  EXPECT_NEAR(act_f32(OpKind::kGeluTanhAndMul, {1, 1})[0], 0.8411920, 1e-7);
  // gelu(-1) = -1 + gelu(1) (gelu(x) - gelu(-x) = x).
  EXPECT_NEAR(act_f32(OpKind::kGeluAndMul, {-1, 1})[0], 0.8413447 - 1, 1e-7);
}

TEST(ActivationKnown, FatreluIsStrict) {
  // threshold 1: x = 1 is not above it; x = 1.5 is; y = 2.
  EXPECT_EQ(act_f32(OpKind::kFatreluAndMul, {1, 1.5, 0.5, 2, 2, 2}, {1.0}),
            (std::vector<double>{0, 3, 0}));
  // A negative threshold passes negative x.
  EXPECT_EQ(act_f32(OpKind::kFatreluAndMul, {-2, -4, 3, 3}, {-3.0}), (std::vector<double>{-6, 0}));
}

TEST(ActivationKnown, SwigluoaiFormula) {
  // Interleaved (gate, up) pairs; alpha 1.702, limit 7.
  //   (1, 2):    (2+1)·1·σ(1.702)           = 2.5373873
  //   (10, -9):  g=7, u=-7: (-6)·7·σ(11.914) = -41.999719
  //   (-10, 1):  no lower clamp on gate: 2·(-10)·σ(-17.02) = -8.1159226e-7
  const std::vector<double> out =
      act_f32(OpKind::kSwigluoaiAndMul, {1, 2, 10, -9, -10, 1}, {1.702, 7.0});
  EXPECT_NEAR(out[0], 2.537387297798464, 1e-6);
  EXPECT_NEAR(out[1], -41.99971876981991, 1e-5);
  EXPECT_NEAR(out[2], -8.115922589710624e-07, 1e-12);
  // KILN: NaN in the gate or in up propagates (CUDA's fminf would clamp it away).
  const std::vector<double> nan = act_f32(OpKind::kSwigluoaiAndMul, {kNan, 1, 1, kNan}, {1.702, 7});
  EXPECT_TRUE(std::isnan(nan[0]));
  EXPECT_TRUE(std::isnan(nan[1]));
}

TEST(ActivationKnown, SpecialValues) {
  // silu(+inf)·1 = inf; NaN propagates; fatrelu drops a NaN x (NaN > θ is false).
  EXPECT_EQ(act_f32(OpKind::kSiluAndMul, {kInf, 1})[0], kInf);
  EXPECT_TRUE(std::isnan(act_f32(OpKind::kGeluAndMul, {kNan, 1})[0]));
  EXPECT_TRUE(std::isnan(act_f32(OpKind::kSiluAndMul, {1, kNan})[0]));
  EXPECT_EQ(act_f32(OpKind::kFatreluAndMul, {kNan, 2}, {0.0})[0], 0.0);
}

TEST(ActivationKnown, SixteenBitRoundsTheActivationFirst) {
  // bf16, x = 0.5, y = 1.5: silu(0.5) = 0.31122967 rounds to 0.310546875; times 1.5 in fp32 is
  // 0.4658203125, a tie on the bf16 grid (spacing 2^-9 there), which goes to the even
  // 0.46484375. Rounding silu(0.5)·1.5 = 0.46684 once would give 0.466796875 instead.
  HostTensor in = HostTensor::from_values(DType::kBF16, {1, 2}, {0.5, 1.5});
  HostTensor out = HostTensor::zeros(DType::kBF16, {1, 1});
  run_ok(act_spec(OpKind::kSiluAndMul, DType::kBF16, 1), {out.tensor(), in.tensor()});
  EXPECT_EQ(out.get(0), 0.46484375);
}

// A one-token, one-head rope of `head` (f32) with one cache row `cache_row` at position 0.
std::vector<double> rope_f32(const std::vector<double>& head, const std::vector<double>& cache_row,
                             RopeStyle style) {
  const int64_t d = int64_t(head.size());
  const int64_t rot = int64_t(cache_row.size());
  HostTensor pos = HostTensor::from_values(DType::kI64, {1}, {0});
  HostTensor q = HostTensor::from_values(DType::kF32, {1, d}, head);
  HostTensor cache = HostTensor::from_values(DType::kF32, {1, rot}, cache_row);
  run_ok(rope_spec(DType::kF32, d, rot, style, 1, 0, false, DType::kF32),
         {pos.tensor(), q.tensor(), Tensor(), cache.tensor()});
  return q.values();
}

TEST(RopeKnown, RotatesAUnitVector) {
  // (1, 0) rotated by θ = 0.3 is (cos θ, sin θ); (0, 1) becomes (-sin θ, cos θ).
  const double c = std::cos(0.3), s = std::sin(0.3);
  const std::vector<double> a = rope_f32({1, 0}, {c, s}, RopeStyle::kNeox);
  EXPECT_NEAR(a[0], c, 1e-7);
  EXPECT_NEAR(a[1], s, 1e-7);
  const std::vector<double> b = rope_f32({0, 1}, {c, s}, RopeStyle::kGptj);
  EXPECT_NEAR(b[0], -s, 1e-7);
  EXPECT_NEAR(b[1], c, 1e-7);
}

TEST(RopeKnown, NeoxAndGptjPairDifferently) {
  // h = [1, 2, 3, 4], a quarter turn for both pairs (c = 0, s = 1): (x, y) -> (-y, x).
  // NeoX pairs (h0, h2), (h1, h3): [-3, -4, 1, 2]. GPT-J pairs (h0, h1), (h2, h3): [-2, 1, -4, 3].
  EXPECT_EQ(rope_f32({1, 2, 3, 4}, {0, 0, 1, 1}, RopeStyle::kNeox),
            (std::vector<double>{-3, -4, 1, 2}));
  EXPECT_EQ(rope_f32({1, 2, 3, 4}, {0, 0, 1, 1}, RopeStyle::kGptj),
            (std::vector<double>{-2, 1, -4, 3}));
}

TEST(RopeKnown, CacheIsRoundedToTheQueryType) {
  // An f32 cache with cos = 1 + 2^-8 - 2^-12 (below the bf16 midpoint, so it rounds to 1) and
  // sin = 0. The classic kernel computes with T operands, so a bf16 query is unchanged:
  // x = 1.9921875 stays; with the unrounded cos, x·c = 1.99949 would round up to 2. An f32
  // query is scaled by c.
  const double c = 1 + std::ldexp(1.0, -8) - std::ldexp(1.0, -12);
  HostTensor pos = HostTensor::from_values(DType::kI64, {1}, {0});
  HostTensor cache = HostTensor::from_values(DType::kF32, {1, 2}, {c, 0});
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostTensor q = HostTensor::from_values(dtype, {1, 2}, {1.9921875, 1});
    run_ok(rope_spec(dtype, 2, 2, RopeStyle::kNeox, 1, 0, false, DType::kF32),
           {pos.tensor(), q.tensor(), Tensor(), cache.tensor()});
    EXPECT_EQ(q.get(0), dtype == DType::kBF16 ? 1.9921875 : double(float(1.9921875 * c)));
  }
}

// ---- rotary properties ------------------------------------------------------------------------

// A cos_sin_cache [max_position, rot] built like vLLM's RotaryEmbedding (base 10000).
HostTensor make_cache(DType dtype, int64_t max_position, int64_t rot) {
  HostTensor cache = HostTensor::zeros(dtype, {max_position, rot});
  const int64_t half = rot / 2;
  for (int64_t p = 0; p < max_position; ++p) {
    for (int64_t j = 0; j < half; ++j) {
      const double inv_freq = 1.0 / std::pow(10000.0, double(2 * j) / double(rot));
      cache.set(p * rot + j, std::cos(double(p) * inv_freq));
      cache.set(p * rot + half + j, std::sin(double(p) * inv_freq));
    }
  }
  return cache;
}

HostTensor random_positions(std::vector<int64_t> sizes, int64_t max_position, uint64_t seed) {
  HostTensor pos = HostTensor::zeros(DType::kI64, std::move(sizes));
  test::fill_uniform(pos, seed, 0, double(max_position));
  return pos;
}

TEST(RopeProperty, PreservesPairNormsF32) {
  // [B, S, NH, D] with D = 80, rot 64, both styles, query and key.
  const int64_t b = 2, s = 3, nh = 4, nkv = 2, d = 80, rot = 64, max_pos = 64;
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
    HostTensor pos = random_positions({b, s}, max_pos, 1);
    HostTensor q = HostTensor::zeros(DType::kF32, {b, s, nh, d});
    HostTensor k = HostTensor::zeros(DType::kF32, {b, s, nkv, d});
    test::fill_normal(q, 2);
    test::fill_normal(k, 3);
    const HostTensor q0 = q, k0 = k;
    HostTensor cache = make_cache(DType::kF32, max_pos, rot);
    run_ok(rope_spec(DType::kF32, d, rot, style, nh, nkv, true, DType::kF32),
           {pos.tensor(), q.tensor(), k.tensor(), cache.tensor()});
    for (const auto& [after, before] : {std::pair{&q, &q0}, std::pair{&k, &k0}}) {
      const int64_t heads = after->numel() / d;
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t j = 0; j < rot / 2; ++j) {
          const int64_t ix = h * d + (style == RopeStyle::kNeox ? j : 2 * j);
          const int64_t iy = h * d + (style == RopeStyle::kNeox ? rot / 2 + j : 2 * j + 1);
          const double n0 = std::hypot(before->get(ix), before->get(iy));
          const double n1 = std::hypot(after->get(ix), after->get(iy));
          ASSERT_NEAR(n1, n0, 1e-6 + 4e-6 * n0) << "head " << h << " pair " << j;
        }
        // Partial rotary: elements rot..D-1 are untouched.
        for (int64_t i = rot; i < d; ++i) ASSERT_EQ(after->get(h * d + i), before->get(h * d + i));
      }
    }
  }
}

TEST(RopeProperty, PositionZeroIsIdentity) {
  // cache row 0 is cos = 1, sin = 0: x' = rnd(rnd(x) - rnd(0)) = x, bit for bit, in every dtype.
  for (DType dtype : kFloatTypes) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
      SCOPED_TRACE(dtype_name(dtype));
      HostTensor pos = HostTensor::zeros(DType::kI64, {5});
      HostTensor q = HostTensor::zeros(dtype, {5, 3 * 16});
      HostTensor k = HostTensor::zeros(dtype, {5, 16});
      test::fill_normal(q, 4);
      test::fill_normal(k, 5);
      const HostTensor q0 = q, k0 = k;
      HostTensor cache = make_cache(dtype, 8, 16);
      run_ok(rope_spec(dtype, 16, 16, style, 3, 1, true, dtype),
             {pos.tensor(), q.tensor(), k.tensor(), cache.tensor()});
      EXPECT_TRUE(matches(q, q0, Tolerance::exact()));
      EXPECT_TRUE(matches(k, k0, Tolerance::exact()));
    }
  }
}

TEST(RopeProperty, LayoutsAgreeAndPaddingIsUntouched) {
  // The same logical query/key as [T, NH*D], [B, S, NH, D] and a padded [B, S, NH, D+8]
  // slice (non-contiguous heads, key padded differently from query: KILN takes the key's head
  // stride from key) give the same bits, and the padding is never written.
  const int64_t b = 2, s = 3, t = b * s, nh = 4, nkv = 2, d = 24, rot = 16, max_pos = 32;
  for (DType dtype : kFloatTypes) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
      SCOPED_TRACE(dtype_name(dtype));
      const OpSpec spec = rope_spec(dtype, d, rot, style, nh, nkv, true, dtype);
      HostTensor cache = make_cache(dtype, max_pos, rot);
      HostTensor pos_flat = random_positions({t}, max_pos, 6);
      HostTensor pos_2d = HostTensor::from_values(DType::kI64, {b, s}, pos_flat.values());
      HostTensor q_flat = HostTensor::zeros(dtype, {t, nh * d});
      HostTensor k_flat = HostTensor::zeros(dtype, {t, nkv * d});
      test::fill_normal(q_flat, 7);
      test::fill_normal(k_flat, 8);
      HostTensor q_4d = HostTensor::from_values(dtype, {b, s, nh, d}, q_flat.values());
      HostTensor k_4d = HostTensor::from_values(dtype, {b, s, nkv, d}, k_flat.values());
      HostTensor q_pad =
          HostTensor::strided(dtype, {b, s, nh, d}, {s * nh * (d + 8), nh * (d + 8), d + 8, 1});
      HostTensor k_pad =
          HostTensor::strided(dtype, {b, s, nkv, d}, {s * nkv * (d + 3), nkv * (d + 3), d + 3, 1});
      test::fill_equal(q_pad, 9);  // padding holds 0, logical elements are overwritten below
      for (int64_t i = 0; i < q_pad.numel(); ++i) q_pad.set(i, q_flat.get(i));
      for (int64_t i = 0; i < k_pad.numel(); ++i) k_pad.set(i, k_flat.get(i));
      const std::vector<std::byte> q_pad_before = q_pad.storage();
      run_ok(spec, {pos_flat.tensor(), q_flat.tensor(), k_flat.tensor(), cache.tensor()});
      run_ok(spec, {pos_2d.tensor(), q_4d.tensor(), k_4d.tensor(), cache.tensor()});
      run_ok(spec, {pos_2d.tensor(), q_pad.tensor(), k_pad.tensor(), cache.tensor()});
      EXPECT_EQ(q_4d.values(), q_flat.values());
      EXPECT_EQ(k_4d.values(), k_flat.values());
      EXPECT_EQ(q_pad.values(), q_flat.values());
      EXPECT_EQ(k_pad.values(), k_flat.values());
      // Padding bytes of q_pad are unchanged.
      for (int64_t tok = 0; tok < t; ++tok) {
        for (int64_t h = 0; h < nh; ++h) {
          const int64_t row = (tok * nh + h) * (d + 8);
          for (int64_t i = d; i < d + 8; ++i) {
            const size_t byte = size_t(row + i) * dtype_size(dtype);
            if (byte >= q_pad_before.size()) continue;
            ASSERT_EQ(std::memcmp(&q_pad.storage()[byte], &q_pad_before[byte], dtype_size(dtype)),
                      0);
          }
        }
      }
    }
  }
}

TEST(RopeProperty, KeyIsOptional) {
  // key=false rotates the query exactly as it is rotated alongside a key.
  const int64_t t = 4, nh = 2, d = 8;
  HostTensor pos = random_positions({t}, 16, 9);
  HostTensor cache = make_cache(DType::kBF16, 16, d);
  HostTensor q1 = HostTensor::zeros(DType::kBF16, {t, nh, d});
  test::fill_normal(q1, 10);
  HostTensor q2 = q1;
  HostTensor k = HostTensor::zeros(DType::kBF16, {t, 1, d});
  run_ok(rope_spec(DType::kBF16, d, d, RopeStyle::kNeox, nh, 1, true, DType::kBF16),
         {pos.tensor(), q1.tensor(), k.tensor(), cache.tensor()});
  run_ok(rope_spec(DType::kBF16, d, d, RopeStyle::kNeox, nh, 0, false, DType::kBF16),
         {pos.tensor(), q2.tensor(), Tensor(), cache.tensor()});
  EXPECT_TRUE(matches(q2, q1, Tolerance::exact()));
}

// ---- norm properties ------------------------------------------------------------------------

TEST(NormProperty, FusedAddEqualsAddThenRmsNorm) {
  const int64_t t = 5, h = 37;
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    HostTensor x = HostTensor::row_strided(dtype, {t, h}, 2 * h);  // randn(T, 2H)[..., :H]
    HostTensor r = HostTensor::zeros(dtype, {t, h});
    HostTensor w = HostTensor::zeros(dtype, {h});
    test::fill_normal(x, 11, 0, 1.0 / (2 * h));
    test::fill_normal(r, 12, 0, 1.0 / (2 * h));
    test::fill_normal(w, 13, 1, 0.1);
    // z = rnd_T(x + r), then rms_norm(z).
    HostTensor z = HostTensor::zeros(dtype, {t, h});
    for (int64_t i = 0; i < z.numel(); ++i) z.set(i, float(x.get(i)) + float(r.get(i)));
    HostTensor expected = HostTensor::zeros(dtype, {t, h});
    run_ok(norm_spec(OpKind::kRmsNorm, dtype, h),
           {{expected.tensor(), z.tensor(), w.tensor()}, {1e-6}});
    run_ok(norm_spec(OpKind::kFusedAddRmsNorm, dtype, h),
           {{x.tensor(), r.tensor(), w.tensor()}, {1e-6}});
    EXPECT_TRUE(matches(r, z, Tolerance::exact()));
    EXPECT_TRUE(matches(x, expected, Tolerance::exact()));
  }
}

TEST(NormProperty, NoWeightEqualsWeightOfOnes) {
  for (OpKind op : {OpKind::kRmsNorm, OpKind::kFusedAddRmsNorm}) {
    for (DType dtype : kFloatTypes) {
      SCOPED_TRACE(dtype_name(dtype));
      const int64_t t = 3, h = 19;
      HostTensor a = HostTensor::zeros(dtype, {t, h});
      HostTensor b = HostTensor::zeros(dtype, {t, h});
      test::fill_normal(a, 14);
      test::fill_normal(b, 15);
      HostTensor a2 = a, b2 = b;
      HostTensor ones = HostTensor::zeros(dtype, {h});
      test::fill_equal(ones, 1);
      run_ok(norm_spec(op, dtype, h, true), {{a.tensor(), b.tensor(), ones.tensor()}, {1e-5}});
      run_ok(norm_spec(op, dtype, h, false), {{a2.tensor(), b2.tensor(), Tensor()}, {1e-5}});
      EXPECT_TRUE(matches(a2, a, Tolerance::exact()));
      EXPECT_TRUE(matches(b2, b, Tolerance::exact()));
    }
  }
}

TEST(NormProperty, StridedAndThreeDInputsMatchDense) {
  // Rows addressed by row_stride: a [T, 2H][..., :H] slice and a [B, NH, H] view give the
  // same bits as the dense input.
  const int64_t b = 2, nh = 3, t = b * nh, h = 33;
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const OpSpec spec = norm_spec(OpKind::kRmsNorm, dtype, h);
    HostTensor dense = HostTensor::zeros(dtype, {t, h});
    test::fill_normal(dense, 16);
    HostTensor strided = HostTensor::row_strided(dtype, {t, h}, 2 * h);
    HostTensor three_d = HostTensor::row_strided(dtype, {b, nh, h}, h + 5);
    for (int64_t i = 0; i < dense.numel(); ++i) {
      strided.set(i, dense.get(i));
      three_d.set(i, dense.get(i));
    }
    HostTensor w = HostTensor::zeros(dtype, {h});
    test::fill_normal(w, 17, 1, 0.1);
    HostTensor out_dense = HostTensor::zeros(dtype, {t, h});
    HostTensor out_strided = HostTensor::zeros(dtype, {t, h});
    HostTensor out_3d = HostTensor::zeros(dtype, {b, nh, h});
    run_ok(spec, {{out_dense.tensor(), dense.tensor(), w.tensor()}, {1e-6}});
    run_ok(spec, {{out_strided.tensor(), strided.tensor(), w.tensor()}, {1e-6}});
    run_ok(spec, {{out_3d.tensor(), three_d.tensor(), w.tensor()}, {1e-6}});
    EXPECT_TRUE(matches(out_strided, out_dense, Tolerance::exact()));
    EXPECT_EQ(out_3d.values(), out_dense.values());
  }
}

TEST(NormProperty, ScaleInvariantWithoutEps) {
  // With eps = 0, rms_norm(2x) = rms_norm(x) exactly: the double sum scales by 4, inv by 1/2.
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    HostTensor x = HostTensor::zeros(dtype, {4, 50});
    test::fill_normal(x, 18);
    HostTensor x2 = x;
    for (int64_t i = 0; i < x2.numel(); ++i) x2.set(i, 2 * x.get(i));
    HostTensor w = HostTensor::zeros(dtype, {50});
    test::fill_normal(w, 19, 1, 0.1);
    HostTensor y = HostTensor::zeros(dtype, {4, 50}), y2 = y;
    run_ok(norm_spec(OpKind::kRmsNorm, dtype, 50), {{y.tensor(), x.tensor(), w.tensor()}, {0.0}});
    run_ok(norm_spec(OpKind::kRmsNorm, dtype, 50), {{y2.tensor(), x2.tensor(), w.tensor()}, {0.0}});
    EXPECT_TRUE(matches(y2, y, Tolerance::exact()));
  }
}

TEST(NormProperty, AllEqualRowsNormaliseToOne) {
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    HostTensor x = HostTensor::zeros(dtype, {3, 40});
    test::fill_equal(x, -3);
    HostTensor out = HostTensor::zeros(dtype, {3, 40});
    run_ok(norm_spec(OpKind::kRmsNorm, dtype, 40, false),
           {{out.tensor(), x.tensor(), Tensor()}, {0.0}});
    HostTensor minus_one = HostTensor::zeros(dtype, {3, 40});
    test::fill_equal(minus_one, -1);
    EXPECT_TRUE(matches(out, minus_one, tolerance_for(OpKind::kRmsNorm, dtype)));
  }
}

// ---- agreement with plain double math
// -------------------------------------------------------------

// The ref within tolerance_for() of the op computed in double from the same inputs and rounded
// once to T: checks the oracle's math independently of its rounding sequence. 16-bit results
// may sit one more ulp away than two backends following the same sequence, hence ulps + 1.
// Activation inputs stay in [-3, 3]: further out an activation such as gelu(-5) ~ -1e-6 is a
// 16-bit subnormal, whose rounding error (absolute, not relative) the multiply by y scales to
// several ulps of the output. That is the spec's rounding sequence, not an error of the ref.
Tolerance against_math(OpKind op, DType dtype) {
  Tolerance tol = tolerance_for(op, dtype);
  if (tol.kind == Tolerance::Kind::kUlp) tol.ulps += 1;
  return tol;
}

TEST(AgainstMath, RmsNorm) {
  for (int64_t h : {1, 7, 16, 769}) {
    for (DType dtype : kFloatTypes) {
      SCOPED_TRACE(fmt::format("{} H={}", dtype_name(dtype), h));
      const int64_t t = 7;
      const double eps = 1e-6;
      HostTensor x = HostTensor::zeros(dtype, {t, h});
      HostTensor w = HostTensor::zeros(dtype, {h});
      test::fill_normal(x, 20, 0, 1.0 / double(2 * h));
      test::fill_normal(w, 21, 1, 0.1);
      HostTensor out = HostTensor::zeros(dtype, {t, h});
      run_ok(norm_spec(OpKind::kRmsNorm, dtype, h),
             {{out.tensor(), x.tensor(), w.tensor()}, {eps}});
      HostTensor expected = HostTensor::zeros(dtype, {t, h});
      for (int64_t r = 0; r < t; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < h; ++i) ss += x.get(r * h + i) * x.get(r * h + i);
        const double inv = 1 / std::sqrt(ss / double(h) + eps);
        for (int64_t i = 0; i < h; ++i) expected.set(r * h + i, x.get(r * h + i) * inv * w.get(i));
      }
      EXPECT_TRUE(matches(out, expected, against_math(OpKind::kRmsNorm, dtype)));
    }
  }
}

double math_activation(OpKind op, double x, double y) {
  switch (op) {
    case OpKind::kSiluAndMul: return x / (1 + std::exp(-x)) * y;
    case OpKind::kMulAndSilu: return x * (y / (1 + std::exp(-y)));
    case OpKind::kGeluAndMul: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))) * y;
    case OpKind::kGeluTanhAndMul: {
      const double inner = std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x);
      return 0.5 * x * (1 + std::tanh(inner)) * y;
    }
    case OpKind::kFatreluAndMul: return (x > 0 ? x : 0) * y;
    default: {  // swigluoai on (gate, up) = (x, y)
      const double g = std::min(x, 7.0), u = std::clamp(y, -7.0, 7.0);
      return (u + 1) * g / (1 + std::exp(-1.702 * g));
    }
  }
}

TEST(AgainstMath, Activations) {
  for (OpKind op : kActivations) {
    for (DType dtype : kFloatTypes) {
      for (int64_t d : {1, 9, 64}) {
        SCOPED_TRACE(fmt::format("{} {} d={}", op_name(op), dtype_name(dtype), d));
        const int64_t t = 5;
        HostTensor in = HostTensor::zeros(dtype, {t, 2 * d});
        test::fill_uniform(in, 22, -3, 3);
        HostTensor out = HostTensor::zeros(dtype, {t, d});
        run_ok(act_spec(op, dtype, d), act_args(op, out.tensor(), in.tensor()));
        HostTensor expected = HostTensor::zeros(dtype, {t, d});
        for (int64_t r = 0; r < t; ++r) {
          for (int64_t i = 0; i < d; ++i) {
            const bool interleaved = op == OpKind::kSwigluoaiAndMul;
            const double x = in.get(r * 2 * d + (interleaved ? 2 * i : i));
            const double y = in.get(r * 2 * d + (interleaved ? 2 * i + 1 : d + i));
            expected.set(r * d + i, math_activation(op, x, y));
          }
        }
        EXPECT_TRUE(matches(out, expected, against_math(op, dtype)));
      }
    }
  }
}

TEST(AgainstMath, SixteenBitWithinOneUlpOfF32) {
  // The same (16-bit representable) inputs through the f32 op, rounded to T, and through the
  // 16-bit op: they differ only by the extra rounding of the activation.
  for (OpKind op : kActivations) {
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(fmt::format("{} {}", op_name(op), dtype_name(dtype)));
      const int64_t t = 4, d = 33;
      HostTensor in = HostTensor::zeros(dtype, {t, 2 * d});
      test::fill_uniform(in, 23, -3, 3);  // see against_math() on subnormal activations
      HostTensor in_f32 = HostTensor::from_values(DType::kF32, {t, 2 * d}, in.values());
      HostTensor out = HostTensor::zeros(dtype, {t, d});
      HostTensor out_f32 = HostTensor::zeros(DType::kF32, {t, d});
      run_ok(act_spec(op, dtype, d), act_args(op, out.tensor(), in.tensor()));
      run_ok(act_spec(op, DType::kF32, d), act_args(op, out_f32.tensor(), in_f32.tensor()));
      HostTensor rounded = HostTensor::from_values(dtype, {t, d}, out_f32.values());
      EXPECT_TRUE(matches(out, rounded, Tolerance::ulp(1)));
    }
  }
}

TEST(AgainstMath, AdversarialInputsGiveFiniteOrSpecialValuesWithoutCrashing) {
  // Every op on ±0, ±inf, NaN, subnormals and huge values: NaN inputs give NaN outputs (except
  // fatrelu's discarded x), and finite moderate inputs give finite outputs.
  for (OpKind op : kActivations) {
    for (DType dtype : kFloatTypes) {
      SCOPED_TRACE(fmt::format("{} {}", op_name(op), dtype_name(dtype)));
      const int64_t t = 16, d = 32;
      HostTensor in = HostTensor::zeros(dtype, {t, 2 * d});
      test::fill_adversarial(in, 24);
      HostTensor out = HostTensor::zeros(dtype, {t, d});
      run_ok(act_spec(op, dtype, d), act_args(op, out.tensor(), in.tensor()));
      for (int64_t r = 0; r < t; ++r) {
        for (int64_t i = 0; i < d; ++i) {
          const bool interleaved = op == OpKind::kSwigluoaiAndMul;
          const double x = in.get(r * 2 * d + (interleaved ? 2 * i : i));
          const double y = in.get(r * 2 * d + (interleaved ? 2 * i + 1 : d + i));
          const double o = out.get(r * d + i);
          if (std::isnan(y) || (std::isnan(x) && op != OpKind::kFatreluAndMul)) {
            EXPECT_TRUE(std::isnan(o)) << "x " << x << " y " << y;
          }
          if (std::fabs(x) <= 4 && std::fabs(y) <= 4) {
            EXPECT_TRUE(std::isfinite(o)) << "x " << x << " y " << y;
          }
        }
      }
    }
  }
  // Norms: a NaN in a row makes the row NaN; finite rows stay finite.
  for (DType dtype : kFloatTypes) {
    HostTensor x = HostTensor::zeros(dtype, {2, 4});
    test::fill_small_int(x, 25);
    x.set(1, kNan);
    HostTensor out = HostTensor::zeros(dtype, {2, 4});
    run_ok(norm_spec(OpKind::kRmsNorm, dtype, 4, false),
           {{out.tensor(), x.tensor(), Tensor()}, {1e-6}});
    for (int64_t i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(out.get(i)));
    for (int64_t i = 4; i < 8; ++i) EXPECT_TRUE(std::isfinite(out.get(i)));
  }
}

// ---- zero tokens --------------------------------------------------------------------------------

TEST(ZeroTokens, EveryOpIsANoOp) {
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    // Zero rows: null data pointers are allowed and never dereferenced.
    const Tensor empty_rows(nullptr, dtype, {0, 8});
    HostTensor w = HostTensor::zeros(dtype, {8});
    run_ok(norm_spec(OpKind::kRmsNorm, dtype, 8), {{empty_rows, empty_rows, w.tensor()}, {1e-6}});
    run_ok(norm_spec(OpKind::kFusedAddRmsNorm, dtype, 8),
           {{empty_rows, empty_rows, w.tensor()}, {1e-6}});
    for (OpKind op : kActivations) {
      const Tensor in(nullptr, dtype, {0, 16});
      run_ok(act_spec(op, dtype, 8), act_args(op, empty_rows, in));
    }
    HostTensor cache = make_cache(dtype, 4, 8);
    run_ok(rope_spec(dtype, 8, 8, RopeStyle::kNeox, 2, 1, true, dtype),
           {Tensor(nullptr, DType::kI64, {0}), Tensor(nullptr, dtype, {0, 16}),
            Tensor(nullptr, dtype, {0, 8}), cache.tensor()});
  }
}

// ---- rejected arguments
// --------------------------------------------------------------------------

// Expects ref::run to reject `args` with kInvalidArgument naming `arg`, and every tensor in
// `outputs` to keep its bytes.
using test::filled;

void expect_rejected(const OpSpec& spec, const KernelArgs& args, const std::string& arg,
                     std::vector<const HostTensor*> outputs) {
  test::expect_ref_rejects(spec, args, "'" + arg + "'", outputs);
}

TEST(BadInput, RmsNorm) {
  const DType dt = DType::kBF16;
  const OpSpec spec = norm_spec(OpKind::kRmsNorm, dt, 8);
  HostTensor out = filled(dt, {4, 8}), x = filled(dt, {4, 8}), w = filled(dt, {8});
  HostTensor x_f16 = filled(DType::kF16, {4, 8}), x_wide = filled(dt, {4, 9});
  HostTensor x_rows = filled(dt, {5, 8}), w_short = filled(dt, {7});
  HostTensor out_strided = HostTensor::row_strided(dt, {4, 8}, 16);
  test::fill_normal(out_strided, 3);
  expect_rejected(spec, {{out.tensor(), x_f16.tensor(), w.tensor()}, {1e-6}}, "input", {&out});
  expect_rejected(spec, {{out.tensor(), x_wide.tensor(), w.tensor()}, {1e-6}}, "input", {&out});
  expect_rejected(spec, {{out.tensor(), x_rows.tensor(), w.tensor()}, {1e-6}}, "out", {&out});
  expect_rejected(spec, {{out_strided.tensor(), x.tensor(), w.tensor()}, {1e-6}}, "out",
                  {&out_strided});
  expect_rejected(spec, {{out.tensor(), x.tensor(), Tensor()}, {1e-6}}, "weight", {&out});
  expect_rejected(spec, {{out.tensor(), x.tensor(), w_short.tensor()}, {1e-6}}, "weight", {&out});
  expect_rejected(spec, {{out.tensor(), x.tensor(), w.tensor()}, {-1.0}}, "epsilon", {&out});
  expect_rejected(norm_spec(OpKind::kRmsNorm, dt, 8, false),
                  {{out.tensor(), x.tensor(), w.tensor()}, {1e-6}}, "weight", {&out});
  // A CUDA tensor is refused by the ref (it would dereference a device pointer).
  const Tensor x_cuda(x.tensor().data(), dt, {4, 8}, Device::cuda(0));
  const Status cuda = ref::run(spec, {{out.tensor(), x_cuda, w.tensor()}, {1e-6}});
  EXPECT_EQ(cuda.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cuda.message().find("cpu"), std::string::npos) << cuda.message();
  // Wrong argument count.
  EXPECT_EQ(ref::run(spec, {{out.tensor(), x.tensor(), w.tensor()}}).code(),
            StatusCode::kInvalidArgument);
}

TEST(BadInput, FusedAddRmsNorm) {
  const DType dt = DType::kF16;
  const OpSpec spec = norm_spec(OpKind::kFusedAddRmsNorm, dt, 8);
  HostTensor x = filled(dt, {4, 8}), r = filled(dt, {4, 8}), w = filled(dt, {8});
  HostTensor r_bf16 = filled(DType::kBF16, {4, 8}), r_rows = filled(dt, {3, 8});
  HostTensor x_wide = filled(dt, {4, 16}), w_f32 = filled(DType::kF32, {8});
  expect_rejected(spec, {{x.tensor(), r_bf16.tensor(), w.tensor()}, {1e-6}}, "residual", {&x});
  expect_rejected(spec, {{x.tensor(), r_rows.tensor(), w.tensor()}, {1e-6}}, "residual",
                  {&x, &r_rows});
  expect_rejected(spec, {{x_wide.tensor(), r.tensor(), w.tensor()}, {1e-6}}, "input",
                  {&x_wide, &r});
  expect_rejected(spec, {{x.tensor(), r.tensor(), Tensor()}, {1e-6}}, "weight", {&x, &r});
  expect_rejected(spec, {{x.tensor(), r.tensor(), w_f32.tensor()}, {1e-6}}, "weight", {&x, &r});
}

TEST(BadInput, RotaryEmbedding) {
  const DType dt = DType::kBF16;
  const int64_t t = 3, nh = 4, nkv = 2, d = 16;
  const OpSpec spec = rope_spec(dt, d, d, RopeStyle::kNeox, nh, nkv, true, dt);
  const OpSpec no_key = rope_spec(dt, d, d, RopeStyle::kNeox, nh, 0, false, dt);
  HostTensor pos = HostTensor::from_values(DType::kI64, {t}, {0, 1, 2});
  HostTensor pos_i32 = HostTensor::from_values(DType::kI32, {t}, {0, 1, 2});
  HostTensor pos_far = HostTensor::from_values(DType::kI64, {t}, {0, 8, 2});
  HostTensor pos_neg = HostTensor::from_values(DType::kI64, {t}, {0, 1, -1});
  HostTensor q = filled(dt, {t, nh * d}), k = filled(dt, {t, nkv * d});
  HostTensor q_heads = filled(dt, {t, nh + 1, d}), q_tokens = filled(dt, {t + 1, nh * d});
  HostTensor k_f16 = filled(DType::kF16, {t, nkv * d});
  HostTensor cache = make_cache(dt, 8, d), cache_f32 = make_cache(DType::kF32, 8, d);
  HostTensor cache_rot = make_cache(dt, 8, d - 2);
  expect_rejected(spec, {pos_i32.tensor(), q.tensor(), k.tensor(), cache.tensor()}, "positions",
                  {&q, &k});
  expect_rejected(spec, {pos.tensor(), q_heads.tensor(), k.tensor(), cache.tensor()}, "query",
                  {&q_heads, &k});
  expect_rejected(spec, {pos.tensor(), q_tokens.tensor(), k.tensor(), cache.tensor()}, "query",
                  {&q_tokens, &k});
  expect_rejected(spec, {pos.tensor(), q.tensor(), k_f16.tensor(), cache.tensor()}, "key",
                  {&q, &k_f16});
  expect_rejected(spec, {pos.tensor(), q.tensor(), Tensor(), cache.tensor()}, "key", {&q});
  expect_rejected(no_key, {pos.tensor(), q.tensor(), k.tensor(), cache.tensor()}, "key", {&q, &k});
  expect_rejected(spec, {pos.tensor(), q.tensor(), k.tensor(), cache_f32.tensor()}, "cos_sin_cache",
                  {&q, &k});
  expect_rejected(spec, {pos.tensor(), q.tensor(), k.tensor(), cache_rot.tensor()}, "cos_sin_cache",
                  {&q, &k});
  // Positions outside the cache are the ref's own (data-dependent) check, still before writes.
  expect_rejected(spec, {pos_far.tensor(), q.tensor(), k.tensor(), cache.tensor()}, "positions",
                  {&q, &k});
  expect_rejected(spec, {pos_neg.tensor(), q.tensor(), k.tensor(), cache.tensor()}, "positions",
                  {&q, &k});
}

TEST(BadInput, Activations) {
  for (OpKind op : kActivations) {
    SCOPED_TRACE(op_name(op));
    const DType dt = DType::kF32;
    const OpSpec spec = act_spec(op, dt, 8);
    HostTensor out = filled(dt, {3, 8}), in = filled(dt, {3, 16});
    HostTensor out_bf16 = filled(DType::kBF16, {3, 8}), in_narrow = filled(dt, {3, 15});
    HostTensor in_rows = filled(dt, {4, 16});
    HostTensor out_strided = HostTensor::row_strided(dt, {3, 8}, 9);
    HostTensor in_strided = HostTensor::row_strided(dt, {3, 16}, 20);
    test::fill_normal(out_strided, 4);
    expect_rejected(spec, act_args(op, out_bf16.tensor(), in.tensor()), "out", {&out_bf16});
    expect_rejected(spec, act_args(op, out.tensor(), in_narrow.tensor()), "input", {&out});
    expect_rejected(spec, act_args(op, out.tensor(), in_rows.tensor()), "out", {&out});
    expect_rejected(spec, act_args(op, out_strided.tensor(), in.tensor()), "out", {&out_strided});
    expect_rejected(spec, act_args(op, out.tensor(), in_strided.tensor()), "input", {&out});
    expect_rejected(spec, act_args(op, out.tensor(), Tensor()), "input", {&out});
    // Scalars in the wrong number.
    KernelArgs extra = act_args(op, out.tensor(), in.tensor());
    extra.add_scalar(1.0);
    EXPECT_EQ(ref::run(spec, extra).code(), StatusCode::kInvalidArgument);
  }
}

TEST(BadInput, InvalidSpecIsRefusedNotIndexed) {
  // hidden 0 is not a valid spec; the ref refuses it instead of dividing by the row width.
  const Tensor empty(nullptr, DType::kBF16, {4, 0});
  const Status status = ref::run(norm_spec(OpKind::kRmsNorm, DType::kBF16, 0, false),
                                 {{empty, empty, Tensor()}, {0.0}});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("hidden"), std::string::npos) << status.message();
}

// ---- the jit::Backend wrapper
// ---------------------------------------------------------------------

TEST(RefBackend, ImplementsNormRopeAndActivations) {
  EXPECT_TRUE(ref::implements(OpKind::kRmsNorm));
  EXPECT_TRUE(ref::implements(OpKind::kFusedAddRmsNorm));
  EXPECT_TRUE(ref::implements(OpKind::kRotaryEmbedding));
  EXPECT_TRUE(ref::implements(OpKind::kSwigluoaiAndMul));
}

TEST(RefBackend, BackendInterface) {
  const std::unique_ptr<Backend> backend = ref::make_backend();
  const Target target{BackendKind::kRef, X86Isa::kNone, "ref"};
  EXPECT_EQ(backend->kind(), BackendKind::kRef);
  EXPECT_EQ(backend->codegen_version(), "ref-1");
  EXPECT_FALSE(backend->cacheable());
  const OpSpec spec = act_spec(OpKind::kGeluAndMul, DType::kBF16, 12);
  EXPECT_TRUE(backend->supports(spec, target).ok);
  const Support no = backend->supports(OpSpec::defaults(OpKind::kPagedAttentionV1), target);
  EXPECT_FALSE(no.ok);
  EXPECT_NE(no.reason.find("paged_attention_v1"), std::string::npos) << no.reason;
  EXPECT_FALSE(backend->supports(act_spec(OpKind::kGeluAndMul, DType::kBF16, 0), target).ok);
  const std::vector<Config> configs = backend->configs(spec, target);
  ASSERT_EQ(configs.size(), 1u);
  EXPECT_EQ(configs[0], Config{});
  const Result<Artifact> artifact = backend->lower(spec, configs[0], target);
  ASSERT_TRUE(artifact.is_ok()) << artifact.status().to_string();
  EXPECT_TRUE(artifact->code.empty());
  const auto exe = backend->load(spec, *artifact, target);
  ASSERT_TRUE(exe.is_ok()) << exe.status().to_string();
  EXPECT_EQ((*exe)->code_address(), nullptr);
  // The executable computes what ref::run computes.
  HostTensor in = filled(DType::kBF16, {3, 24});
  HostTensor out = HostTensor::zeros(DType::kBF16, {3, 12}), expected = out;
  ASSERT_TRUE((*exe)->run({out.tensor(), in.tensor()}).is_ok());
  run_ok(spec, {expected.tensor(), in.tensor()});
  EXPECT_TRUE(matches(out, expected, Tolerance::exact()));
}

TEST(RefBackend, ExecutableReportsBadArguments) {
  const std::unique_ptr<Backend> backend = ref::make_backend();
  const Target target{BackendKind::kRef, X86Isa::kNone, "ref"};
  const OpSpec spec = act_spec(OpKind::kSiluAndMul, DType::kF32, 4);
  const auto exe = backend->load(spec, Artifact{}, target);
  ASSERT_TRUE(exe.is_ok());
  HostTensor out = HostTensor::zeros(DType::kF32, {2, 4}),
             in = HostTensor::zeros(DType::kF32, {2, 9});
  const Status status = (*exe)->run({out.tensor(), in.tensor()});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("input"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace jit
