// The ref backend's attention family: known answers worked out by hand (paged attention, merge,
// the spec's vertical/slash examples, top-k on small arrays), properties (v2 == v1, batch order
// and page placement, merge of a split == the whole, exact top-k sets), rejected arguments with
// nothing written, and one op case per op through ref::run.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "codegen/ref/ref.h"
#include "ir/check_args.h"
#include "ir/numeric.h"
#include "ir/op_spec.h"
#include "ir/params_cache.h"
#include "tests/harness/matchers.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

namespace ref = codegen::ref;
using ir::KvCacheDtype;
using test::HostTensor;
using test::matches;
using test::OpCase;
using test::Tolerance;

constexpr double kInf = std::numeric_limits<double>::infinity();

OpSpec paged_spec(OpKind op, DType dtype, KvCacheDtype kv, int64_t head_size, int64_t block_size,
                  int64_t heads_q, int64_t heads_kv, bool alibi = false, bool blocksparse = false,
                  int64_t partition_size = 0) {
  return OpSpec::make(op, ir::PagedAttentionParams{dtype, kv, head_size, block_size, heads_q,
                                                   heads_kv, alibi, blocksparse, partition_size});
}

void run_ok(const OpSpec& spec, const KernelArgs& args) {
  const Status status = ref::run(spec, args);
  ASSERT_TRUE(status.is_ok()) << to_string(spec) << ": " << status.to_string();
}

OpCase case_ok(const OpSpec& spec, int64_t size, test::InputKind kind, uint64_t seed) {
  Result<OpCase> c = test::make_case(spec, size, kind, seed);
  EXPECT_TRUE(c.is_ok()) << to_string(spec) << ": " << c.status().to_string();
  return c.is_ok() ? std::move(c.value()) : OpCase{};
}

// ---- a hand-built paged attention problem -------------------------------------------------------

// One kv head per query head group, a cache of `blocks` blocks; tokens are written by logical
// position through the block table. f32 with kv=auto unless stated.
struct Paged {
  ir::PagedAttentionParams p;
  int64_t x;
  HostTensor out, query, key_cache, value_cache, tables, seq_lens, slopes, k_scale, v_scale;

  Paged(const ir::PagedAttentionParams& params, int64_t seqs, int64_t blocks, int64_t width)
      : p(params), x(ir::paged_key_x(params.dtype, params.kv)) {
    const DType cache = p.kv == KvCacheDtype::kAuto ? p.dtype : DType::kFp8E4m3;
    out = HostTensor::zeros(p.dtype, {seqs, p.head_count_q, p.head_size});
    query = HostTensor::zeros(p.dtype, {seqs, p.head_count_q, p.head_size});
    key_cache =
        HostTensor::zeros(cache, {blocks, p.head_count_kv, p.head_size / x, p.block_size, x});
    value_cache = HostTensor::zeros(cache, {blocks, p.head_count_kv, p.head_size, p.block_size});
    tables = HostTensor::zeros(DType::kI32, {seqs, width});
    seq_lens = HostTensor::zeros(DType::kI32, {seqs});
    slopes = HostTensor::zeros(DType::kF32, {p.head_count_q});
    k_scale = HostTensor::from_values(DType::kF32, {1}, {1.0});
    v_scale = HostTensor::from_values(DType::kF32, {1}, {1.0});
  }
  int64_t block_of(int64_t s, int64_t j) const {
    return int64_t(tables.get(s * tables.sizes()[1] + j / p.block_size));
  }
  void set_key(int64_t s, int64_t g, int64_t j, int64_t d, double v) {
    const int64_t t = j % p.block_size;
    key_cache.set(
        (((block_of(s, j) * p.head_count_kv + g) * (p.head_size / x) + d / x) * p.block_size + t) *
                x +
            d % x,
        v);
  }
  void set_value(int64_t s, int64_t g, int64_t j, int64_t d, double v) {
    value_cache.set(((block_of(s, j) * p.head_count_kv + g) * p.head_size + d) * p.block_size +
                        j % p.block_size,
                    v);
  }
  KernelArgs args(double scale, int64_t max_seq_len) const {
    KernelArgs a{out.tensor(),
                 query.tensor(),
                 key_cache.tensor(),
                 value_cache.tensor(),
                 tables.tensor(),
                 seq_lens.tensor(),
                 p.alibi ? slopes.tensor() : Tensor{},
                 k_scale.tensor(),
                 v_scale.tensor()};
    for (double s : {scale, double(max_seq_len), 0.0, 0.0, 0.0, 0.0, 0.0}) a.add_scalar(s);
    return a;
  }
};

ir::PagedAttentionParams f32_params(int64_t head_size, int64_t block_size) {
  return {DType::kF32, KvCacheDtype::kAuto, head_size, block_size, 1, 1, false, false, 0};
}

TEST(PagedAttentionKnown, TwoTokensByHand) {
  // q = [1, 0, 0, 0], k0 = [1, 0, 0, 0], k1 = 0, scale 1: z = [1, 0], m = 1,
  // p = [1, e^-1], S = 1 + e^-1; v0 = [2, 0, 0, 0], v1 = [0, 4, 0, 0]:
  // out = [2 / (S + 1e-6), 4 e^-1 / (S + 1e-6), 0, 0].
  Paged pa(f32_params(4, 2), 1, 3, 2);
  pa.tables.set(0, 2);  // the sequence's page is block 2
  pa.seq_lens.set(0, 2);
  pa.query.set(0, 1);
  pa.set_key(0, 0, 0, 0, 1);
  pa.set_value(0, 0, 0, 0, 2);
  pa.set_value(0, 0, 1, 1, 4);
  run_ok(OpSpec::make(OpKind::kPagedAttentionV1, pa.p), pa.args(1.0, 2));
  const double s = 1 + std::exp(-1.0);
  EXPECT_NEAR(pa.out.get(0), 2 / (s + 1e-6), 1e-6);
  EXPECT_NEAR(pa.out.get(1), 4 * std::exp(-1.0) / (s + 1e-6), 1e-6);
  EXPECT_EQ(pa.out.get(2), 0);
  EXPECT_EQ(pa.out.get(3), 0);
}

TEST(PagedAttentionKnown, UniformKeysGiveTheMeanOfValues) {
  // Five tokens over two pages (the second one partial), equal keys: every weight is 1/5.
  Paged pa(f32_params(8, 4), 1, 4, 3);
  pa.tables.set(0, 3);
  pa.tables.set(1, 0);
  pa.seq_lens.set(0, 5);
  std::vector<double> mean(8, 0.0);
  for (int64_t d = 0; d < 8; ++d) pa.query.set(d, 0.5 * double(d) - 1);
  for (int64_t j = 0; j < 5; ++j) {
    for (int64_t d = 0; d < 8; ++d) {
      pa.set_key(0, 0, j, d, 0.25);
      pa.set_value(0, 0, j, d, double(j * 8 + d));
      mean[size_t(d)] += double(j * 8 + d) / 5;
    }
  }
  // Slots past the length hold NaN: never read.
  for (int64_t t = 1; t < 4; ++t) {
    for (int64_t d = 0; d < 8; ++d) pa.value_cache.set((0 * 8 + d) * 4 + t, std::nan(""));
  }
  run_ok(OpSpec::make(OpKind::kPagedAttentionV1, pa.p), pa.args(0.3, 5));
  for (int64_t d = 0; d < 8; ++d) EXPECT_NEAR(pa.out.get(d), mean[size_t(d)], 1e-5) << d;
}

TEST(PagedAttentionKnown, AlibiWeightsByDistance) {
  // Equal keys, slope ln 3: z = slope * (j - L + 1) = [-ln 3, 0], weights [1/4, 3/4].
  ir::PagedAttentionParams p = f32_params(4, 4);
  p.alibi = true;
  Paged pa(p, 1, 1, 1);
  pa.seq_lens.set(0, 2);
  pa.slopes.set(0, std::log(3.0));
  for (int64_t d = 0; d < 4; ++d) {
    pa.set_value(0, 0, 0, d, 4);
    pa.set_value(0, 0, 1, d, 8);
  }
  run_ok(OpSpec::make(OpKind::kPagedAttentionV1, pa.p), pa.args(1.0, 2));
  EXPECT_NEAR(pa.out.get(0), 7.0, 1e-5);
}

TEST(PagedAttentionKnown, Fp8ValuesAreScaled) {
  // One token: out = V_0 / (1 + 1e-6); the e4m3 code of 1.5 times v_scale 0.25 is 0.375.
  const ir::PagedAttentionParams p{
      DType::kBF16, KvCacheDtype::kFp8E4m3, 16, 16, 2, 1, false, false, 0};
  Paged pa(p, 1, 1, 1);
  pa.seq_lens.set(0, 1);
  pa.v_scale.set(0, 0.25);
  for (int64_t d = 0; d < 16; ++d) pa.set_value(0, 0, 0, d, 1.5);
  run_ok(OpSpec::make(OpKind::kPagedAttentionV1, pa.p), pa.args(0.25, 1));
  for (int64_t i = 0; i < 32; ++i) EXPECT_EQ(pa.out.get(i), 0.375) << i;
}

TEST(PagedAttentionKnown, EmptySequenceGivesZeros) {
  Paged pa(f32_params(4, 2), 2, 1, 1);
  pa.seq_lens.set(0, 0);
  pa.seq_lens.set(1, 1);
  for (int64_t d = 0; d < 4; ++d) pa.set_value(1, 0, 0, d, 3);
  pa.tables.set(0, 99);  // never read: the sequence is empty
  for (int64_t i = 0; i < 8; ++i) pa.out.set(i, 5);
  run_ok(OpSpec::make(OpKind::kPagedAttentionV1, pa.p), pa.args(1.0, 1));
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(pa.out.get(i), 0);
  EXPECT_NEAR(pa.out.get(4), 3, 1e-5);
}

TEST(PagedAttentionKnown, BlockSparseMasksSparseBlocks) {
  // Six tokens, cache blocks of 2 = sparse blocks of 2, vert_stride 2, local 1, step 0 (off 1):
  // qb = 2; block kb attended iff (kb + 1) % 2 == 0 or kb > 1, i.e. kb in {1, 2}: tokens 2..5.
  ir::PagedAttentionParams p = f32_params(4, 2);
  p.blocksparse = true;
  Paged pa(p, 1, 3, 3);
  for (int64_t i = 0; i < 3; ++i) pa.tables.set(i, double(i));
  pa.seq_lens.set(0, 6);
  for (int64_t j = 0; j < 6; ++j) pa.set_value(0, 0, j, 0, double(j));
  KernelArgs args = pa.args(1.0, 6);
  args.scalars[2] = 0;  // tp_rank
  args.scalars[3] = 1;  // local blocks
  args.scalars[4] = 2;  // vert stride
  args.scalars[5] = 2;  // sparse block size
  args.scalars[6] = 0;  // sliding step
  run_ok(OpSpec::make(OpKind::kPagedAttentionV1, pa.p), args);
  EXPECT_NEAR(pa.out.get(0), (2 + 3 + 4 + 5) / 4.0, 1e-5);
}

// ---- paged attention properties ------------------------------------------------------------

// The v2 call with the same inputs as a v1 case and partitions of `partition_size`.
struct V2Run {
  HostTensor out, exp_sums, max_logits, tmp_out;
};
V2Run run_v2(const OpSpec& v1, const OpCase& c, int64_t partition_size) {
  auto p = v1.get<ir::PagedAttentionParams>();
  p.partition_size = partition_size;
  const int64_t seqs = c.tensors[0].sizes()[0];
  const auto max_seq_len = int64_t(c.scalars[1]);
  const int64_t parts = (max_seq_len + partition_size - 1) / partition_size;
  V2Run r{HostTensor::zeros(p.dtype, {seqs, p.head_count_q, p.head_size}),
          HostTensor::zeros(DType::kF32, {seqs, p.head_count_q, parts}),
          HostTensor::zeros(DType::kF32, {seqs, p.head_count_q, parts}),
          HostTensor::zeros(p.dtype, {seqs, p.head_count_q, parts, p.head_size})};
  KernelArgs args{r.out.tensor(), r.exp_sums.tensor(), r.max_logits.tensor(), r.tmp_out.tensor()};
  for (size_t i = 1; i < c.tensors.size(); ++i) {
    args.add(c.present[i] ? c.tensors[i].tensor() : Tensor{});
  }
  for (double s : c.scalars) args.add_scalar(s);
  const Status status = ref::run(OpSpec::make(OpKind::kPagedAttentionV2, p), args);
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  return r;
}

TEST(PagedAttentionProperty, V2WithAnyPartitionSizeEqualsV1) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool alibi : {false, true}) {
      SCOPED_TRACE(fmt::format("{} alibi={}", dtype_name(dtype), alibi));
      const OpSpec v1 =
          paged_spec(OpKind::kPagedAttentionV1, dtype, KvCacheDtype::kAuto, 32, 8, 4, 2, alibi);
      OpCase c = case_ok(v1, 6, test::InputKind::kNormal, 11);
      run_ok(v1, c.args());
      // bf16 rounds each partition's output before the reduce: the bf16 tolerance.
      const Tolerance tol =
          dtype == DType::kF32 ? Tolerance::abs_rel(1e-5, 1e-5) : Tolerance::abs_rel(1e-2, 1e-2);
      for (int64_t partition : {8, 16, 24, 64}) {
        SCOPED_TRACE(partition);
        EXPECT_TRUE(matches(run_v2(v1, c, partition).out, c.tensors[0], tol));
      }
    }
  }
}

TEST(PagedAttentionProperty, BatchOrderAndPagePlacementChangeNothing) {
  const OpSpec spec =
      paged_spec(OpKind::kPagedAttentionV1, DType::kF16, KvCacheDtype::kFp8E4m3, 32, 4, 8, 2);
  OpCase a = case_ok(spec, 7, test::InputKind::kNormal, 5);
  OpCase b = a;
  // Reverse the sequences and move every cache block to a new place.
  const int64_t seqs = 7;
  const int64_t blocks = a.tensors[2].sizes()[0];
  const int64_t width = a.tensors[4].sizes()[1];
  std::vector<int64_t> place(static_cast<size_t>(blocks));
  std::iota(place.begin(), place.end(), int64_t(0));
  std::shuffle(place.begin(), place.end(), std::mt19937_64(3));
  for (int cache : {2, 3}) {
    const int64_t per_block = a.tensors[size_t(cache)].numel() / blocks;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      for (int64_t i = 0; i < per_block; ++i) {
        b.tensors[size_t(cache)].set(place[size_t(blk)] * per_block + i,
                                     a.tensors[size_t(cache)].get(blk * per_block + i));
      }
    }
  }
  const int64_t row = a.tensors[0].numel() / seqs;
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t r = seqs - 1 - s;
    for (int64_t i = 0; i < row; ++i) b.tensors[1].set(r * row + i, a.tensors[1].get(s * row + i));
    b.tensors[5].set(r, a.tensors[5].get(s));
    for (int64_t i = 0; i < width; ++i) {
      const double blk = a.tensors[4].get(s * width + i);
      b.tensors[4].set(r * width + i, blk < 0 ? blk : double(place[size_t(blk)]));
    }
  }
  run_ok(spec, a.args());
  run_ok(spec, b.args());
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t i = 0; i < row; ++i) {
      ASSERT_EQ(b.tensors[0].get((seqs - 1 - s) * row + i), a.tensors[0].get(s * row + i)) << s;
    }
  }
}

TEST(PagedAttentionProperty, MergeOfTwoPartitionsEqualsTheWhole) {
  // v2 with two partitions: partition p's partial output and LSE m_p + log S_p, merged by
  // merge_attn_states, give attention over the whole sequence (v1). (The 1e-6 terms differ by
  // < 1e-6 relative.)
  const OpSpec v1 =
      paged_spec(OpKind::kPagedAttentionV1, DType::kF32, KvCacheDtype::kAuto, 16, 4, 2, 2);
  OpCase c = case_ok(v1, 1, test::InputKind::kNormal, 21);  // one sequence of 3.5 + 1 pages
  run_ok(v1, c.args());
  const auto len = int64_t(c.tensors[5].get(0));
  const int64_t half = ((len / 2 + 3) / 4) * 4;
  const V2Run r = run_v2(v1, c, half);
  ASSERT_EQ(r.exp_sums.sizes()[2], 2);
  const int64_t heads = 2, d = 16;
  HostTensor prefix = HostTensor::zeros(DType::kF32, {1, heads, d});
  HostTensor suffix = HostTensor::zeros(DType::kF32, {1, heads, d});
  HostTensor prefix_lse = HostTensor::zeros(DType::kF32, {heads, 1});
  HostTensor suffix_lse = HostTensor::zeros(DType::kF32, {heads, 1});
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < d; ++i) {
      prefix.set(h * d + i, r.tmp_out.get((h * 2 + 0) * d + i));
      suffix.set(h * d + i, r.tmp_out.get((h * 2 + 1) * d + i));
    }
    prefix_lse.set(h, r.max_logits.get(h * 2) + std::log(r.exp_sums.get(h * 2)));
    suffix_lse.set(h, r.max_logits.get(h * 2 + 1) + std::log(r.exp_sums.get(h * 2 + 1)));
  }
  HostTensor merged = HostTensor::zeros(DType::kF32, {1, heads, d});
  run_ok(OpSpec::make(OpKind::kMergeAttnStates,
                      ir::MergeAttnStatesParams{DType::kF32, DType::kF32, heads, d, false}),
         {{merged.tensor(), Tensor{}, prefix.tensor(), prefix_lse.tensor(), suffix.tensor(),
           suffix_lse.tensor(), Tensor{}},
          {-1.0}});
  EXPECT_TRUE(matches(merged, c.tensors[0], Tolerance::abs_rel(1e-5, 1e-5)));
}

// ---- merge_attn_states ------------------------------------------------------------------------

struct Merge {
  HostTensor out, out_lse, prefix, prefix_lse, suffix, suffix_lse, scale;
  ir::MergeAttnStatesParams p;
  Merge(DType out_dtype, const std::vector<double>& x, const std::vector<double>& y,
        const std::vector<double>& lp, const std::vector<double>& ls)
      : p{DType::kF32, out_dtype, 1, int64_t(x.size() / lp.size()), true} {
    const auto t = int64_t(lp.size());
    out = HostTensor::zeros(out_dtype, {t, 1, p.head_size});
    out_lse = HostTensor::zeros(DType::kF32, {1, t});
    prefix = HostTensor::from_values(DType::kF32, {t, 1, p.head_size}, x);
    suffix = HostTensor::from_values(DType::kF32, {t, 1, p.head_size}, y);
    prefix_lse = HostTensor::from_values(DType::kF32, {1, t}, lp);
    suffix_lse = HostTensor::from_values(DType::kF32, {1, t}, ls);
    scale = HostTensor::from_values(DType::kF32, {1}, {0.5});
  }
  Status run(double with_context = -1) {
    const bool fp8 = p.out_dtype == DType::kFp8E4m3;
    return ref::run(OpSpec::make(OpKind::kMergeAttnStates, p),
                    {{out.tensor(), out_lse.tensor(), prefix.tensor(), prefix_lse.tensor(),
                      suffix.tensor(), suffix_lse.tensor(), fp8 ? scale.tensor() : Tensor{}},
                     {with_context}});
  }
};

TEST(MergeAttnStatesKnown, WeightsByLse) {
  // Token 0: equal LSEs 0 -> the average, lse ln 2. Token 1: prefix +inf (empty) -> the suffix,
  // lse 3. Token 2: both empty -> the prefix, lse -inf. Token 3: lse ln 3 vs 0 -> 3/4, 1/4.
  Merge m(DType::kF32, {2, 4, 1, 1, 7, 7, 8, 0}, {4, 8, 3, 5, 9, 9, 0, 4},
          {0, kInf, -kInf, std::log(3.0)}, {0, 3, kInf, 0});
  ASSERT_TRUE(m.run().is_ok());
  const std::vector<double> want = {3, 6, 3, 5, 7, 7, 6, 1};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(m.out.get(int64_t(i)), want[i], 1e-6) << i;
  EXPECT_NEAR(m.out_lse.get(0), std::log(2.0), 1e-6);
  EXPECT_EQ(m.out_lse.get(1), 3);
  EXPECT_EQ(m.out_lse.get(2), -kInf);
  EXPECT_NEAR(m.out_lse.get(3), std::log(4.0), 1e-6);
}

TEST(MergeAttnStatesKnown, TokensWithoutContextCopyTheSuffix) {
  // prefill_tokens_with_context = 1: token 1 copies the suffix and its raw (+inf) LSE.
  Merge m(DType::kF32, {2, 2}, {4, 6}, {0, 0}, {0, kInf});
  ASSERT_TRUE(m.run(1).is_ok());
  EXPECT_NEAR(m.out.get(0), 3, 1e-6);
  EXPECT_EQ(m.out.get(1), 6);
  EXPECT_EQ(m.out_lse.get(1), kInf);
}

TEST(MergeAttnStatesKnown, Fp8OutputDividesByTheScale) {
  // (2 + 4) / 2 = 3, / 0.5 = 6; 1000 / 0.5 saturates to 448.
  Merge m(DType::kFp8E4m3, {2, 1000}, {4, 1000}, {0}, {0});
  ASSERT_TRUE(m.run().is_ok());
  EXPECT_EQ(m.out.get(0), 6);
  EXPECT_EQ(m.out.get(1), 448);
}

// ---- vertical / slash indexes ----------------------------------------------------------------

// Runs the converter for B = 1, H = 1, BM = BN = 64 and returns per row block (blocks, columns),
// empty for row blocks that were not written (r0 >= q).
struct RowOut {
  std::vector<int64_t> blocks, columns;
  bool operator==(const RowOut&) const = default;
};
std::vector<RowOut> convert(bool causal, int64_t q, int64_t kv, const std::vector<double>& v,
                            const std::vector<double>& s, int64_t context = 0) {
  if (context == 0) context = q;
  const int64_t rows = (context + 63) / 64;
  const auto nv = int64_t(v.size()), ns = int64_t(s.size());
  HostTensor count = HostTensor::zeros(DType::kI32, {1, 1, rows});
  HostTensor offset = HostTensor::zeros(DType::kI32, {1, 1, rows, ns});
  HostTensor ccount = HostTensor::zeros(DType::kI32, {1, 1, rows});
  HostTensor cindex = HostTensor::zeros(DType::kI32, {1, 1, rows, nv});
  HostTensor qs = HostTensor::from_values(DType::kI32, {1}, {double(q)});
  HostTensor kvs = HostTensor::from_values(DType::kI32, {1}, {double(kv)});
  HostTensor vt = HostTensor::from_values(DType::kI32, {1, 1, nv}, v);
  HostTensor st = HostTensor::from_values(DType::kI32, {1, 1, ns}, s);
  const Status status = ref::run(
      OpSpec::make(OpKind::kConvertVerticalSlashIndexes, ir::VerticalSlashParams{64, 64, causal}),
      {{count.tensor(), offset.tensor(), ccount.tensor(), cindex.tensor(), qs.tensor(),
        kvs.tensor(), vt.tensor(), st.tensor()},
       {double(context)}});
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  std::vector<RowOut> out(static_cast<size_t>(rows));
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t i = 0; i < int64_t(count.get(m)); ++i) {
      out[size_t(m)].blocks.push_back(int64_t(offset.get(m * ns + i)));
    }
    for (int64_t i = 0; i < int64_t(ccount.get(m)); ++i) {
      out[size_t(m)].columns.push_back(int64_t(cindex.get(m * nv + i)));
    }
  }
  return out;
}

TEST(VerticalSlashKnown, SpecWorkedExamples) {
  using V = std::vector<int64_t>;
  // Causal, q = kv = 256, V = [0, 1, 5, 70, 130, 200], S = [200, 64, 0].
  EXPECT_EQ(convert(true, 256, 256, {0, 1, 5, 70, 130, 200}, {200, 64, 0}),
            (std::vector<RowOut>{
                {V{0}, V{}}, {V{0, 64}, V{}}, {V{64, 128}, V{0, 1, 5}}, {V{0, 128, 192}, V{70}}}));
  // Causal with a prefix: q = 128, kv = 384.
  EXPECT_EQ(convert(true, 128, 384, {3, 10, 300}, {100, 0}),
            (std::vector<RowOut>{{V{156, 256}, V{3, 10}}, {V{220, 320}, V{3, 10, 300}}}));
  // Non-causal, q = 128, kv = 256.
  EXPECT_EQ(convert(false, 128, 256, {3, 10, 250}, {300, 130, 64}),
            (std::vector<RowOut>{{V{0, 126, 192}, V{}}, {V{20, 190}, V{3, 10}}}));
  // Causal, a vertical beyond the last slash range is dropped.
  EXPECT_EQ(convert(true, 256, 256, {100}, {200})[3], (RowOut{V{0}, V{}}));
  // Causal, no usable slash.
  const std::vector<RowOut> none = convert(true, 256, 256, {5, 100}, {300});
  EXPECT_EQ(none[1], (RowOut{V{128}, V{5, 100}}));
  EXPECT_EQ(none[3], (RowOut{V{}, V{5, 100}}));
  // Causal, q = kv = 100: a partial second row block.
  EXPECT_EQ(convert(true, 100, 100, {5, 50, 99}, {0})[1], (RowOut{V{64}, V{5, 50}}));
}

TEST(VerticalSlashKnown, ANearSlashExtendsTheRangeByOneBlock) {
  // Causal, q = kv = 256, row 3 (r1 = 256): slash 100 gives [92, 156); slash 70 ends at 186,
  // within one block of 156, so the range grows by a whole block to 220 (not to 186), which
  // covers vertical 200; slash 0 ends at 256 <= 220 + 64: grow to 284. Blocks start at 92,
  // 156, 220 (clamped to kv). Extending only to 186 would give blocks [92, 156, 192].
  EXPECT_EQ(convert(true, 256, 256, {200}, {100, 70, 0})[3], (RowOut{{92, 156, 220}, {}}));
}

TEST(VerticalSlashKnown, RowsPastTheQueryAreNotWritten) {
  // context 256 (4 row blocks) but q = 64: only row block 0 is written.
  const std::vector<RowOut> rows = convert(true, 64, 64, {1}, {0}, 256);
  EXPECT_EQ(rows[0], (RowOut{{0}, {}}));
  for (size_t m = 1; m < 4; ++m) EXPECT_EQ(rows[m], RowOut{}) << m;
}

TEST(VerticalSlashKnown, MergeheadUsesThePerHeadCounts) {
  // Head 0 uses 1 vertical / 1 slash, head 1 all: head 1 matches the plain op on the full
  // lists, head 0 the plain op on their first entries.
  const OpSpec spec = OpSpec::make(OpKind::kConvertVerticalSlashIndexesMergehead,
                                   ir::VerticalSlashParams{64, 64, true});
  HostTensor count = HostTensor::zeros(DType::kI32, {1, 2, 4});
  HostTensor offset = HostTensor::zeros(DType::kI32, {1, 2, 4, 3});
  HostTensor ccount = HostTensor::zeros(DType::kI32, {1, 2, 4});
  HostTensor cindex = HostTensor::zeros(DType::kI32, {1, 2, 4, 6});
  HostTensor qs = HostTensor::from_values(DType::kI32, {1}, {256});
  HostTensor kvs = HostTensor::from_values(DType::kI32, {1}, {256});
  HostTensor vt = HostTensor::from_values(DType::kI32, {1, 2, 6},
                                          {0, 1, 5, 70, 130, 200, 0, 1, 5, 70, 130, 200});
  HostTensor st = HostTensor::from_values(DType::kI32, {1, 2, 3}, {200, 64, 0, 200, 64, 0});
  HostTensor vc = HostTensor::from_values(DType::kI32, {2}, {1, 6});
  HostTensor sc = HostTensor::from_values(DType::kI32, {2}, {1, 3});
  run_ok(spec, {{count.tensor(), offset.tensor(), ccount.tensor(), cindex.tensor(), qs.tensor(),
                 kvs.tensor(), vt.tensor(), st.tensor(), vc.tensor(), sc.tensor()},
                {256.0}});
  const std::vector<RowOut> full = convert(true, 256, 256, {0, 1, 5, 70, 130, 200}, {200, 64, 0});
  const std::vector<RowOut> first = convert(true, 256, 256, {0}, {200});
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t m = 0; m < 4; ++m) {
      RowOut got;
      const int64_t row = h * 4 + m;
      for (int64_t i = 0; i < int64_t(count.get(row)); ++i) {
        got.blocks.push_back(int64_t(offset.get(row * 3 + i)));
      }
      for (int64_t i = 0; i < int64_t(ccount.get(row)); ++i) {
        got.columns.push_back(int64_t(cindex.get(row * 6 + i)));
      }
      EXPECT_EQ(got, (h == 0 ? first : full)[size_t(m)]) << h << " " << m;
    }
  }
}

// ---- top-k
// ---------------------------------------------------------------------------------------

// top_k_per_row_prefill over one row per entry of `rows` (each padded with NaN to the widest).
std::vector<std::vector<int64_t>> top_k_prefill(int64_t k,
                                                const std::vector<std::vector<double>>& rows,
                                                const std::vector<int64_t>& starts = {}) {
  const auto n = int64_t(rows.size());
  size_t width = 1;
  for (const auto& r : rows) width = std::max(width, r.size());
  HostTensor logits = HostTensor::zeros(DType::kF32, {n, int64_t(width)});
  HostTensor rs = HostTensor::zeros(DType::kI32, {n});
  HostTensor re = HostTensor::zeros(DType::kI32, {n});
  HostTensor idx = HostTensor::zeros(DType::kI32, {n, k});
  for (int64_t r = 0; r < n; ++r) {
    for (size_t j = 0; j < width; ++j) {
      logits.set(r * int64_t(width) + int64_t(j),
                 j < rows[size_t(r)].size() ? rows[size_t(r)][j] : std::nan(""));
    }
    rs.set(r, starts.empty() ? 0 : double(starts[size_t(r)]));
    re.set(r, double(rows[size_t(r)].size()));
  }
  run_ok(
      OpSpec::make(OpKind::kTopKPerRowPrefill, ir::TopKParams{k}),
      {{logits.tensor(), rs.tensor(), re.tensor(), idx.tensor()}, {double(n), double(width), 1.0}});
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < k; ++i) out[size_t(r)].push_back(int64_t(idx.get(r * k + i)));
  }
  return out;
}

using Ix = std::vector<int64_t>;

TEST(TopKKnown, ShortRowsGiveTheirPositionsThenMinusOne) {
  const auto out = top_k_prefill(4, {{}, {5}, {3, 1, 2}, {9, 8, 7, 6}});
  EXPECT_EQ(out[0], (Ix{-1, -1, -1, -1}));
  EXPECT_EQ(out[1], (Ix{0, -1, -1, -1}));
  EXPECT_EQ(out[2], (Ix{0, 1, 2, -1}));  // ascending positions, not by value
  EXPECT_EQ(out[3], (Ix{0, 1, 2, 3}));
}

TEST(TopKKnown, LargestValuesInAscendingPositions) {
  const double ninf = -kInf;
  const auto out = top_k_prefill(2, {{1, 5, 3, 4},
                                     {ninf, ninf, 0, ninf},
                                     {-0.0, 0.0, -1, -2},
                                     {10.0000010, 10.0000019, 10.0000029, 10.0}});
  EXPECT_EQ(out[0], (Ix{1, 3}));
  // -inf is a value like any other: the finite one and one of the -infs.
  EXPECT_EQ(out[1][1], 2);
  EXPECT_TRUE(out[1][0] == 0 || out[1][0] == 1 || out[1][0] == 3);
  // ±0 tie: both are above -1.
  EXPECT_EQ(out[2], (Ix{0, 1}));
  // A narrow band one fp32 ulp (9.5e-7) apart.
  EXPECT_EQ(out[3], (Ix{1, 2}));
}

TEST(TopKKnown, TiesAcceptAnyEqualValue) {
  // Values [3, 7, 7, 7, 1], k = 2: 1 and one of {2, 3}.
  const Ix out = top_k_prefill(2, {{3, 7, 7, 7, 1}})[0];
  std::vector<double> row = {3, 7, 7, 7, 1};
  Ix sorted = out;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted[0], sorted[1]);
  for (int64_t i : out) EXPECT_EQ(row[size_t(i)], 7);
}

TEST(TopKKnown, PositionsAreRelativeToTheRowStart) {
  // Row [9, 0, 5, 6, 1] from start 1 (rowEnd 5): range [0, 5, 6, 1] -> relative {1, 2}.
  const auto out = top_k_prefill(2, {{9, 0, 5, 6, 1}}, {1});
  EXPECT_EQ(out[0], (Ix{1, 2}));
}

TEST(TopKKnown, DecodeRowEndsAndClamp) {
  // next_n = 2, seq_lens [3, 1]: rows end at 3 - 2 + 0 + 1 = 2, 3, then max(0, 0) = 0, 1.
  HostTensor logits =
      HostTensor::from_values(DType::kF32, {4, 3}, {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  HostTensor lens = HostTensor::from_values(DType::kI32, {2}, {3, 1});
  HostTensor idx = HostTensor::zeros(DType::kI32, {4, 2});
  run_ok(OpSpec::make(OpKind::kTopKPerRowDecode, ir::TopKParams{2}),
         {{logits.tensor(), lens.tensor(), idx.tensor()}, {2.0, 4.0, 3.0, 1.0}});
  EXPECT_EQ(idx.values(), (std::vector<double>{0, 1, 1, 2, -1, -1, 0, -1}));
}

TEST(TopKProperty, TrueTopKOfLongRandomRows) {
  // Rows around 12288 of N(0, 1) and of a narrow band [10, 10.2): the selected values are the
  // k largest (as a multiset), with distinct indices inside the row.
  constexpr int64_t kK = 2048;
  std::mt19937_64 rng(7);
  std::vector<std::vector<double>> rows;
  for (int64_t len : {12287, 12288, 12289}) {
    std::vector<double> row(static_cast<size_t>(len));
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> band(10.0f, 10.2f);
    for (double& v : row) v = len == 12288 ? band(rng) : normal(rng);
    rows.push_back(row);
  }
  const auto out = top_k_prefill(kK, rows);
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<double> want = rows[r];
    std::sort(want.begin(), want.end(), std::greater<>());
    want.resize(kK);
    std::vector<double> got;
    Ix seen = out[r];
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
    for (int64_t i : out[r]) {
      ASSERT_GE(i, 0);
      ASSERT_LT(i, int64_t(rows[r].size()));
      got.push_back(rows[r][size_t(i)]);
    }
    std::sort(got.begin(), got.end(), std::greater<>());
    EXPECT_EQ(got, want) << r;
  }
}

// ---- bad inputs -------------------------------------------------------------------------------

// Runs `args` (built from `c` and then broken by the caller) and expects kInvalidArgument whose
// message names `arg`, with every output's storage unchanged.
void expect_rejected(const OpSpec& spec, const OpCase& c, const KernelArgs& args,
                     const std::string& arg) {
  std::vector<const HostTensor*> outputs;
  for (int i : c.outputs) outputs.push_back(&c.tensors[size_t(i)]);
  test::expect_ref_rejects(spec, args, arg, outputs);
}

TEST(PagedAttentionBadInput, Rejected) {
  for (OpKind op : {OpKind::kPagedAttentionV1, OpKind::kPagedAttentionV2}) {
    SCOPED_TRACE(op_name(op));
    const bool v2 = op == OpKind::kPagedAttentionV2;
    const int q = v2 ? 4 : 1;  // index of query
    const OpSpec spec =
        paged_spec(op, DType::kBF16, KvCacheDtype::kAuto, 32, 8, 4, 2, false, false, v2 ? 16 : 0);
    OpCase c = case_ok(spec, 5, test::InputKind::kNormal, 1);
    {  // wrong query dtype
      HostTensor wrong = HostTensor::zeros(DType::kF16, c.tensors[size_t(q)].sizes());
      KernelArgs args = c.args();
      args.tensors[size_t(q)] = wrong.tensor();
      expect_rejected(spec, c, args, "'query'");
    }
    {  // query with 3 heads for a spec with heads_q=4
      HostTensor wrong = HostTensor::zeros(DType::kBF16, {5, 3, 32});
      KernelArgs args = c.args();
      args.tensors[size_t(q)] = wrong.tensor();
      expect_rejected(spec, c, args, "'query'");
    }
    {  // a block-table entry outside the cache
      OpCase bad = c;
      bad.tensors[size_t(q + 3)].set(0, double(c.tensors[size_t(q + 1)].sizes()[0]));
      expect_rejected(spec, bad, bad.args(), "'block_tables'");
    }
    {  // a sequence longer than its block-table row allows (and than max_seq_len)
      OpCase bad = c;
      const int64_t width = c.tensors[size_t(q + 3)].sizes()[1];
      bad.tensors[size_t(q + 4)].set(1, double(width * 8 + 1));
      bad.scalars[1] = double(width * 8 + 1);
      if (v2) {  // keep the scratch shapes consistent with the new max_seq_len
        const int64_t parts = (width * 8 + 1 + 15) / 16;
        bad.tensors[1] = HostTensor::zeros(DType::kF32, {5, 4, parts});
        bad.tensors[2] = HostTensor::zeros(DType::kF32, {5, 4, parts});
        bad.tensors[3] = HostTensor::zeros(DType::kBF16, {5, 4, parts, 32});
      }
      expect_rejected(spec, bad, bad.args(), "'seq_lens'");
    }
    {  // seq_len beyond max_seq_len
      OpCase bad = c;
      bad.tensors[size_t(q + 4)].set(0, c.scalars[1] + 1);
      expect_rejected(spec, bad, bad.args(), "'seq_lens'");
    }
    {  // a value cache with the wrong head count
      HostTensor wrong =
          HostTensor::zeros(DType::kBF16, {c.tensors[size_t(q + 2)].sizes()[0], 1, 32, 8});
      KernelArgs args = c.args();
      args.tensors[size_t(q + 2)] = wrong.tensor();
      expect_rejected(spec, c, args, "'value_cache'");
    }
  }
  // heads_q % heads_kv != 0 is not a valid spec.
  const OpSpec bad =
      paged_spec(OpKind::kPagedAttentionV1, DType::kBF16, KvCacheDtype::kAuto, 32, 8, 6, 4);
  EXPECT_EQ(validate(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(test::make_case(bad, 2, test::InputKind::kNormal, 1).is_ok());
}

TEST(MergeAttnStatesBadInput, Rejected) {
  const OpSpec spec = OpSpec::make(
      OpKind::kMergeAttnStates, ir::MergeAttnStatesParams{DType::kF16, DType::kF16, 4, 16, true});
  OpCase c = case_ok(spec, 6, test::InputKind::kNormal, 2);
  {
    HostTensor wrong = HostTensor::zeros(DType::kF16, {4, 6});
    KernelArgs args = c.args();
    args.tensors[3] = wrong.tensor();  // prefix_lse must be f32
    expect_rejected(spec, c, args, "'prefix_lse'");
  }
  {
    HostTensor wrong = HostTensor::zeros(DType::kF16, {5, 4, 16});
    KernelArgs args = c.args();
    args.tensors[4] = wrong.tensor();  // 5 tokens against 6
    expect_rejected(spec, c, args, "'suffix_output'");
  }
  {
    KernelArgs args = c.args();
    args.scalars[0] = 7;  // more tokens with context than tokens
    expect_rejected(spec, c, args, "'prefill_tokens_with_context'");
  }
}

TEST(VerticalSlashBadInput, Rejected) {
  for (bool causal : {true, false}) {
    const OpSpec spec =
        OpSpec::make(OpKind::kConvertVerticalSlashIndexes, ir::VerticalSlashParams{64, 64, causal});
    OpCase c = case_ok(spec, 2, test::InputKind::kNormal, 3);
    {  // a vertical index at kv_len
      OpCase bad = c;
      bad.tensors[6].set(2, c.tensors[5].get(0));
      expect_rejected(spec, bad, bad.args(), "'vertical_indexes'");
    }
    {  // int64 seqlens
      HostTensor wrong = HostTensor::zeros(DType::kI64, {2});
      KernelArgs args = c.args();
      args.tensors[4] = wrong.tensor();
      expect_rejected(spec, c, args, "'q_seqlens'");
    }
    {  // block_offset sized for the wrong NNZ_S
      HostTensor wrong = HostTensor::zeros(DType::kI32, {2, 2, 4, 5});
      KernelArgs args = c.args();
      args.tensors[1] = wrong.tensor();
      expect_rejected(spec, c, args, "'block_offset'");
    }
    {  // q longer than context_size's row blocks
      OpCase bad = c;
      bad.tensors[4].set(0, 4 * 64 + 1);
      if (causal) bad.tensors[5].set(0, 4 * 64 + 1);
      expect_rejected(spec, bad, bad.args(), "'q_seqlens'");
    }
  }
  const OpSpec merge = OpSpec::make(OpKind::kConvertVerticalSlashIndexesMergehead,
                                    ir::VerticalSlashParams{64, 64, true});
  OpCase c = case_ok(merge, 2, test::InputKind::kNormal, 3);
  OpCase bad = c;
  bad.tensors[9].set(0, 0);  // counts must be >= 1
  expect_rejected(merge, bad, bad.args(), "'slash_indices_count'");
  // BM != BN is not a valid spec (KILN).
  EXPECT_FALSE(validate(OpSpec::make(OpKind::kConvertVerticalSlashIndexes,
                                     ir::VerticalSlashParams{64, 32, true}))
                   .is_ok());
}

TEST(TopKBadInput, Rejected) {
  const OpSpec prefill = OpSpec::make(OpKind::kTopKPerRowPrefill, ir::TopKParams{8});
  OpCase c = case_ok(prefill, 6, test::InputKind::kNormal, 4);
  {
    HostTensor wrong = HostTensor::zeros(DType::kBF16, c.tensors[0].sizes());
    KernelArgs args = c.args();
    args.tensors[0] = wrong.tensor();
    expect_rejected(prefill, c, args, "'logits'");
  }
  {
    HostTensor wrong = HostTensor::zeros(DType::kI32, {6, 7});  // k = 8 columns expected
    KernelArgs args = c.args();
    args.tensors[3] = wrong.tensor();
    expect_rejected(prefill, c, args, "'indices'");
  }
  {
    OpCase bad = c;
    bad.tensors[2].set(0, double(c.tensors[0].sizes()[1] + 1));  // rowEnd past the columns
    expect_rejected(prefill, bad, bad.args(), "'rowEnds'");
  }
  const OpSpec decode = OpSpec::make(OpKind::kTopKPerRowDecode, ir::TopKParams{8});
  OpCase d = case_ok(decode, 6, test::InputKind::kNormal, 4);
  OpCase bad = d;
  bad.tensors[1].set(0, double(d.tensors[0].sizes()[1] + 5));
  expect_rejected(decode, bad, bad.args(), "'seq_lens'");
}

// ---- every op has a case that runs ------------------------------------------------------------

TEST(AttentionCases, EveryOpBuildsAndRuns) {
  const OpSpec specs[] = {
      paged_spec(OpKind::kPagedAttentionV1, DType::kBF16, KvCacheDtype::kAuto, 64, 16, 8, 2),
      paged_spec(OpKind::kPagedAttentionV1, DType::kF16, KvCacheDtype::kFp8E5m2, 80, 8, 4, 4, true),
      paged_spec(OpKind::kPagedAttentionV1, DType::kF32, KvCacheDtype::kAuto, 40, 16, 4, 1, false,
                 true),
      paged_spec(OpKind::kPagedAttentionV2, DType::kBF16, KvCacheDtype::kFp8E4m3, 32, 16, 8, 8,
                 true, true, 64),
      paged_spec(OpKind::kPagedAttentionV2, DType::kF32, KvCacheDtype::kAuto, 16, 8, 2, 1, false,
                 false, 32),
      OpSpec::make(OpKind::kMergeAttnStates,
                   ir::MergeAttnStatesParams{DType::kBF16, DType::kBF16, 4, 40, true}),
      OpSpec::make(OpKind::kMergeAttnStates,
                   ir::MergeAttnStatesParams{DType::kF16, DType::kFp8E4m3, 2, 64, false}),
      OpSpec::make(OpKind::kConvertVerticalSlashIndexes, ir::VerticalSlashParams{64, 64, true}),
      OpSpec::make(OpKind::kConvertVerticalSlashIndexes, ir::VerticalSlashParams{32, 32, false}),
      OpSpec::make(OpKind::kConvertVerticalSlashIndexesMergehead,
                   ir::VerticalSlashParams{16, 16, true}),
      OpSpec::make(OpKind::kConvertVerticalSlashIndexesMergehead,
                   ir::VerticalSlashParams{64, 64, false}),
      OpSpec::make(OpKind::kTopKPerRowPrefill, ir::TopKParams{64}),
      OpSpec::make(OpKind::kTopKPerRowDecode, ir::TopKParams{32}),
  };
  for (const OpSpec& spec : specs) {
    EXPECT_TRUE(ref::implements(spec.op)) << op_name(spec.op);
    for (test::InputKind kind : test::input_kinds_for(spec.op)) {
      for (int64_t size : test::token_sweep()) {
        for (uint64_t seed : {1u, 2u, 3u}) {
          SCOPED_TRACE(fmt::format("{} {} size {} seed {}", to_string(spec),
                                   test::input_kind_name(kind), size, seed));
          const OpCase c = case_ok(spec, size, kind, seed);
          ASSERT_TRUE(check_args(spec, c.args()).is_ok()) << check_args(spec, c.args()).to_string();
          OpCase run = c;
          run_ok(spec, run.args());
          // Deterministic: a second run gives the same bits.
          OpCase again = c;
          run_ok(spec, again.args());
          for (int i : c.outputs) {
            EXPECT_EQ(run.tensors[size_t(i)].storage(), again.tensors[size_t(i)].storage());
          }
          ASSERT_EQ(c.tolerances.size(), c.outputs.size());
        }
      }
    }
  }
}

TEST(AttentionCases, OutputsAreFiniteAndUnreadSlotsStayUnread) {
  // The paged cases put NaN in every cache slot no sequence owns: a finite output proves the
  // ref never read one. Empty sequences (index 3) give exact zeros.
  const OpSpec spec = paged_spec(OpKind::kPagedAttentionV2, DType::kF16, KvCacheDtype::kAuto, 16, 4,
                                 4, 2, true, false, 8);
  OpCase c = case_ok(spec, 6, test::InputKind::kNormal, 9);
  run_ok(spec, c.args());
  for (int64_t i = 0; i < c.tensors[0].numel(); ++i) {
    ASSERT_TRUE(std::isfinite(c.tensors[0].get(i))) << i;
  }
  for (int64_t i = 3 * 4 * 16; i < 4 * 4 * 16; ++i) EXPECT_EQ(c.tensors[0].get(i), 0) << i;
}

}  // namespace
}  // namespace jit
