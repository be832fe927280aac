// The ref backend's CPU attention and oneDNN GEMM ops: known answers worked out by hand,
// properties (KV split, page placement, dynamic vs static scales), rejected arguments (with
// nothing written), and every op running through make_case as `kiln check` does.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "codegen/ref/ref.h"
#include "ir/op_spec.h"
#include "tests/harness/matchers.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

namespace ref = codegen::ref;
using ir::CpuAttnIsa;
using test::HostTensor;
using test::matches;
using test::Tolerance;

void run_ok(const OpSpec& spec, const KernelArgs& args) {
  const Status status = ref::run(spec, args);
  ASSERT_TRUE(status.is_ok()) << to_string(spec) << ": " << status.to_string();
}

// Expects ref::run to reject `args` with kInvalidArgument naming `arg`, and every tensor in
// `outputs` to keep its bytes.
using test::filled;

void expect_rejected(const OpSpec& spec, const KernelArgs& args, const std::string& arg,
                     std::vector<const HostTensor*> outputs) {
  test::expect_ref_rejects(spec, args, "'" + arg + "'", outputs);
}

// ---- CPU attention helpers -------------------------------------------------------------------

ir::CpuAttentionParams attn_params(DType dtype, int64_t head_size, int64_t heads_q,
                                   int64_t heads_kv, bool causal, CpuAttnIsa isa = CpuAttnIsa::kVec,
                                   int64_t block_size = 32) {
  ir::CpuAttentionParams p;
  p.isa = isa;
  p.dtype = dtype;
  p.head_size = head_size;
  p.block_size = block_size;
  p.head_count_q = heads_q;
  p.head_count_kv = heads_kv;
  p.causal = causal;
  return p;
}

// One attention call: K/V written through the ref's cpu_attn_reshape_and_cache, metadata from
// its scheduler.
struct AttnProblem {
  OpSpec spec;
  HostTensor query, key_cache, value_cache, output, qsl, seq_lens, slopes, table, metadata, sinks;
  double scale = 1.0, left = -1.0, right = -1.0, softcap = 0.0;
  double k_scale = 1.0, v_scale = 1.0;  // fp8 caches only

  KernelArgs args() const {
    const auto& p = spec.get<ir::CpuAttentionParams>();
    KernelArgs a({query.tensor(), key_cache.tensor(), value_cache.tensor(), output.tensor(),
                  qsl.tensor(), seq_lens.tensor(), p.alibi ? slopes.tensor() : Tensor(),
                  table.tensor(), metadata.tensor(), p.sinks ? sinks.tensor() : Tensor()},
                 {scale, left, right, softcap});
    if (p.kv != ir::KvCacheDtype::kAuto) a.add_scalar(k_scale).add_scalar(v_scale);
    return a;
  }
  // Builds the metadata for `window` (−1: none) and `kv_split`.
  void schedule(int64_t window, bool kv_split) {
    const auto& p = spec.get<ir::CpuAttentionParams>();
    const OpSpec sched =
        OpSpec::make(OpKind::kCpuAttnGetSchedulerMetadata,
                     ir::CpuAttnSchedulerParams{p.isa, p.dtype, p.head_size, p.head_count_q,
                                                p.head_count_kv, p.causal});
    // A made case carries a metadata tensor of the ref's size.
    metadata = test::make_case(sched, 1, test::InputKind::kNormal, 1)->tensors[0];
    run_ok(sched, KernelArgs({metadata.tensor(), seq_lens.tensor(), qsl.tensor()},
                             {double(seq_lens.numel()), double(window), kv_split ? 1.0 : 0.0}));
    left = window == -1 ? -1.0 : double(window - 1);
    right = window == -1 ? -1.0 : p.causal ? 0.0 : double(window - 1);
  }
  HostTensor run() {
    run_ok(spec, args());
    return output;
  }
};

// `keys`/`values`: [Σ seq_lens, Hkv, D], the requests' KV tokens in order. `placement` maps the
// requests' logical blocks (request-major) to physical ids; empty = identity. With an fp8
// p.kv the caches are u8 and written with k_scale / v_scale.
AttnProblem make_problem(const ir::CpuAttentionParams& p, const std::vector<int64_t>& q_lens,
                         const std::vector<int64_t>& seq_lens, const HostTensor& query,
                         const HostTensor& keys, const HostTensor& values,
                         std::vector<int64_t> placement = {}, double k_scale = 1.0,
                         double v_scale = 1.0) {
  AttnProblem a;
  a.k_scale = k_scale;
  a.v_scale = v_scale;
  const bool fp8 = p.kv != ir::KvCacheDtype::kAuto;
  a.spec = OpSpec::make(OpKind::kCpuAttentionWithKvCache, p);
  const auto requests = int64_t(q_lens.size());
  std::vector<double> qsl = {0}, lens;
  int64_t total_blocks = 0, max_blocks = 1;
  for (int64_t r = 0; r < requests; ++r) {
    qsl.push_back(qsl.back() + double(q_lens[size_t(r)]));
    lens.push_back(double(seq_lens[size_t(r)]));
    const int64_t b = (seq_lens[size_t(r)] + p.block_size - 1) / p.block_size;
    total_blocks += b;
    max_blocks = std::max(max_blocks, b);
  }
  if (placement.empty()) {
    placement.resize(size_t(total_blocks));
    std::iota(placement.begin(), placement.end(), 0);
  }
  const int64_t blocks = total_blocks + 1;
  std::vector<double> table(size_t(requests * max_blocks), 0.0), slots;
  int64_t logical = 0;
  for (int64_t r = 0; r < requests; ++r) {
    for (int64_t j = 0; j < seq_lens[size_t(r)]; ++j) {
      const int64_t phys = placement[size_t(logical + j / p.block_size)];
      table[size_t(r * max_blocks + j / p.block_size)] = double(phys);
      slots.push_back(double(phys * p.block_size + j % p.block_size));
    }
    logical += (seq_lens[size_t(r)] + p.block_size - 1) / p.block_size;
  }
  const int64_t slab = p.block_size * p.head_size;
  a.key_cache = HostTensor::strided(fp8 ? DType::kU8 : p.dtype,
                                    {blocks, p.head_count_kv, p.block_size, p.head_size},
                                    {p.head_count_kv * 2 * slab, 2 * slab, p.head_size, 1});
  a.value_cache = a.key_cache;
  const OpSpec write = OpSpec::make(OpKind::kCpuAttnReshapeAndCache,
                                    ir::CpuAttnCacheWriteParams{p.isa, p.dtype, p.head_count_kv,
                                                                p.head_size, p.block_size, p.kv});
  HostTensor slot_mapping = HostTensor::from_values(DType::kI64, {int64_t(slots.size())}, slots);
  KernelArgs write_args({keys.tensor(), values.tensor(), a.key_cache.tensor(),
                         a.value_cache.tensor(), slot_mapping.tensor()});
  if (fp8) write_args.add_scalar(k_scale).add_scalar(v_scale);
  run_ok(write, write_args);
  a.query = query;
  a.output = HostTensor::zeros(p.dtype, query.sizes());
  a.qsl = HostTensor::from_values(DType::kI32, {requests + 1}, qsl);
  a.seq_lens = HostTensor::from_values(DType::kI32, {requests}, lens);
  a.table = HostTensor::from_values(DType::kI32, {requests, max_blocks}, table);
  a.scale = 1.0 / std::sqrt(double(p.head_size));
  a.schedule(-1, true);
  return a;
}

// A [rows, heads, d] tensor whose every row (token, head) is `row`.
HostTensor rows_of(DType dtype, int64_t rows, int64_t heads, const std::vector<double>& row) {
  std::vector<double> v;
  for (int64_t i = 0; i < rows * heads; ++i) v.insert(v.end(), row.begin(), row.end());
  return HostTensor::from_values(dtype, {rows, heads, int64_t(row.size())}, v);
}

std::vector<double> unit(int64_t d, int64_t i, double value = 1.0) {
  std::vector<double> v(size_t(d), 0.0);
  v[size_t(i)] = value;
  return v;
}

// Value row j of a [kv, 1, d] tensor as: every element = values[j].
HostTensor const_rows(DType dtype, int64_t d, const std::vector<double>& values) {
  std::vector<double> v;
  for (double x : values) v.insert(v.end(), size_t(d), x);
  return HostTensor::from_values(dtype, {int64_t(values.size()), 1, d}, v);
}

constexpr int64_t kD = 32;

// ---- attention: known answers ----------------------------------------------------------------

TEST(CpuAttentionKnown, OneQueryOverTwoKeysByHand) {
  // q = e0, k0 = 0, k1 = e0, scale 1: logits 0 and 1; v0 = 2, v1 = -1 everywhere.
  // out = (e^0·2 + e^1·(-1)) / (e^0 + e^1).
  const auto p = attn_params(DType::kF32, kD, 1, 1, true);
  HostTensor q = rows_of(DType::kF32, 1, 1, unit(kD, 0));
  HostTensor k = HostTensor::from_values(DType::kF32, {2, 1, kD}, [] {
    std::vector<double> v(2 * kD, 0.0);
    v[kD] = 1.0;
    return v;
  }());
  AttnProblem a = make_problem(p, {1}, {2}, q, k, const_rows(DType::kF32, kD, {2.0, -1.0}));
  a.scale = 1.0;
  const HostTensor out = a.run();
  const double e = std::exp(1.0);
  const double want = (2.0 - e) / (1.0 + e);
  for (int64_t d = 0; d < kD; ++d) EXPECT_NEAR(out.get(d), want, 1e-7) << d;
}

TEST(CpuAttentionKnown, UniformKeysGiveTheMeanOfTheValues) {
  // Every key equal: every logit equal, so the output is the plain mean of the values.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const auto p = attn_params(dtype, kD, 2, 1, true);
    const int64_t kv = 70;  // three blocks, the last one partial
    HostTensor q = filled(dtype, {1, 2, kD}, 5);
    HostTensor k = rows_of(dtype, kv, 1, std::vector<double>(size_t(kD), 0.5));
    HostTensor v = filled(dtype, {kv, 1, kD}, 6);
    AttnProblem a = make_problem(p, {1}, {kv}, q, k, v);
    const HostTensor out = a.run();
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t d = 0; d < kD; ++d) {
        double mean = 0;
        for (int64_t j = 0; j < kv; ++j) mean += v.get(j * kD + d);
        mean /= double(kv);
        // One rounding of the exact mean: within half an ulp of it.
        EXPECT_NEAR(out.get(h * kD + d), mean, 0.5 * test::ulp_of(dtype, mean) + 1e-12)
            << dtype_name(dtype) << " h" << h << " d" << d;
      }
    }
  }
}

TEST(CpuAttentionKnown, CausalQueriesAreTheLastPositions) {
  // seq_len 3, q_len 2, causal: token 0 sits at position 1 (sees keys 0, 1), token 1 at 2 (sees
  // 0, 1, 2). Zero keys: uniform weights over what each token sees. Values 3, 6, 12.
  const auto p = attn_params(DType::kF32, kD, 1, 1, true);
  HostTensor q = filled(DType::kF32, {2, 1, kD});
  HostTensor k = HostTensor::zeros(DType::kF32, {3, 1, kD});
  HostTensor v = const_rows(DType::kF32, kD, {3.0, 6.0, 12.0});
  HostTensor out = make_problem(p, {2}, {3}, q, k, v).run();
  EXPECT_EQ(out.get(0), 4.5f);
  EXPECT_EQ(out.get(kD), 7.0f);
  // Non-causal: positions start at 0 and nothing is masked, both tokens see all three keys.
  out = make_problem(attn_params(DType::kF32, kD, 1, 1, false), {2}, {3}, q, k, v).run();
  EXPECT_EQ(out.get(0), 7.0f);
  EXPECT_EQ(out.get(kD), 7.0f);
}

TEST(CpuAttentionKnown, SlidingWindow) {
  HostTensor k = HostTensor::zeros(DType::kF32, {5, 1, kD});
  HostTensor v = const_rows(DType::kF32, kD, {1.0, 2.0, 4.0, 8.0, 16.0});
  // Causal decode at position 4 with window 2 (left 1, right 0): keys 3 and 4 only.
  auto p = attn_params(DType::kF32, kD, 1, 1, true);
  p.sliding_window = true;
  HostTensor q1 = filled(DType::kF32, {1, 1, kD});
  AttnProblem a = make_problem(p, {1}, {5}, q1, k, v);
  a.schedule(2, true);
  EXPECT_EQ(a.run().get(0), 12.0f);
  // Non-causal window 1 (left 0, right 0): token i sees key i only; with seq_len 2 and three
  // query tokens, token 2 sees nothing and its row is zeros (KILN).
  p.causal = false;
  HostTensor q3 = filled(DType::kF32, {3, 1, kD});
  AttnProblem b = make_problem(p, {3}, {2}, q3, HostTensor::zeros(DType::kF32, {2, 1, kD}),
                               const_rows(DType::kF32, kD, {1.0, 2.0}));
  b.schedule(1, false);
  b.output = filled(DType::kF32, {3, 1, kD}, 7);  // proves the masked row is written
  const HostTensor out = b.run();
  EXPECT_EQ(out.get(0), 1.0f);
  EXPECT_EQ(out.get(kD), 2.0f);
  for (int64_t d = 0; d < kD; ++d) EXPECT_EQ(out.get(2 * kD + d), 0.0f) << d;
}

TEST(CpuAttentionKnown, SinkJoinsTheDenominatorOnce) {
  // One key with logit 0, value 1; sink logit 1: out = e^0 / (e^0 + e^1) = 1 / (1 + e). The
  // sink is counted once even when the decode's KV is split (here: 100 keys, all logit 0,
  // values 1 -> out = 100 / (100 + e)).
  auto p = attn_params(DType::kF32, kD, 2, 1, true);
  p.sinks = true;
  HostTensor q = filled(DType::kF32, {1, 2, kD});
  AttnProblem a = make_problem(p, {1}, {1}, q, HostTensor::zeros(DType::kF32, {1, 1, kD}),
                               const_rows(DType::kF32, kD, {1.0}));
  a.sinks = HostTensor::from_values(DType::kBF16, {2}, {1.0, -1.0});
  HostTensor out = a.run();
  EXPECT_NEAR(out.get(0), 1.0 / (1.0 + std::exp(1.0)), 1e-7);
  EXPECT_NEAR(out.get(kD), 1.0 / (1.0 + std::exp(-1.0)), 1e-7);
  AttnProblem b = make_problem(p, {1}, {100}, q, HostTensor::zeros(DType::kF32, {100, 1, kD}),
                               const_rows(DType::kF32, kD, std::vector<double>(100, 1.0)));
  b.sinks = a.sinks;
  out = b.run();  // scheduled with kv_split: 100 keys in chunks of 32
  EXPECT_NEAR(out.get(0), 100.0 / (100.0 + std::exp(1.0)), 1e-6);
}

TEST(CpuAttentionKnown, SoftcapThenAlibi) {
  // q = e0·x, k0 = 0, k1 = e0, scale 1 -> logits 0 and x. Softcap c: x' = c·tanh(x / c).
  // v0 = 1, v1 = 0: out = 1 / (1 + e^(x')).
  auto p = attn_params(DType::kF32, kD, 1, 1, true);
  p.softcap = true;
  std::vector<double> k_vals(2 * kD, 0.0);
  k_vals[kD] = 1.0;
  HostTensor k = HostTensor::from_values(DType::kF32, {2, 1, kD}, k_vals);
  HostTensor v = const_rows(DType::kF32, kD, {1.0, 0.0});
  for (double x : {3.0, 30.0, 1e30}) {
    AttnProblem a = make_problem(p, {1}, {2}, rows_of(DType::kF32, 1, 1, unit(kD, 0, x)), k, v);
    a.scale = 1.0;
    a.softcap = 10.0;
    const double capped = 10.0 * std::tanh(x / 10.0);  // 1e30 -> exactly 10, not NaN
    EXPECT_NEAR(a.run().get(0), 1.0 / (1.0 + std::exp(capped)), 1e-7) << x;
  }
  // ALiBi after the softcap: slope 0.5, the query at position 1, key 0 gets 0.5·(0 − 1).
  p.alibi = true;
  AttnProblem a = make_problem(p, {1}, {2}, rows_of(DType::kF32, 1, 1, unit(kD, 0, 30.0)), k, v);
  a.scale = 1.0;
  a.softcap = 10.0;
  a.slopes = HostTensor::from_values(DType::kF32, {1}, {0.5});
  const double s0 = -0.5, s1 = 10.0 * std::tanh(3.0);
  EXPECT_NEAR(a.run().get(0), std::exp(s0) / (std::exp(s0) + std::exp(s1)), 1e-7);
}

TEST(CpuAttentionKnown, CacheSlabLayouts) {
  // One token (offset 5 of block 1) with key[d] = d + 1, value[d] = -(d + 1), written by
  // cpu_attn_reshape_and_cache; checked at the spec's slab indices (bs = 32, D = 32).
  const int64_t bs = 32, d_max = 32, t = 5;
  for (CpuAttnIsa isa : {CpuAttnIsa::kVec, CpuAttnIsa::kAmx}) {
    const DType dt = DType::kBF16;
    const OpSpec spec = OpSpec::make(OpKind::kCpuAttnReshapeAndCache,
                                     ir::CpuAttnCacheWriteParams{isa, dt, 1, d_max, bs});
    std::vector<double> kv, vv;
    for (int64_t d = 0; d < d_max; ++d) kv.push_back(double(d + 1)), vv.push_back(-double(d + 1));
    HostTensor key = HostTensor::from_values(dt, {1, 1, d_max}, kv);
    HostTensor value = HostTensor::from_values(dt, {1, 1, d_max}, vv);
    HostTensor kc = HostTensor::zeros(dt, {2, 1, bs, d_max}), vc = kc;
    HostTensor slot = HostTensor::from_values(DType::kI64, {1}, {double(bs + t)});
    run_ok(spec, {key.tensor(), value.tensor(), kc.tensor(), vc.tensor(), slot.tensor()});
    const int64_t slab = bs * d_max;  // block 1 starts here
    for (int64_t d = 0; d < d_max; ++d) {
      const int64_t fk = isa == CpuAttnIsa::kVec
                             ? d * bs + t
                             : (t / 16) * 16 * d_max + (d / 2) * 32 + (t % 16) * 2 + (d % 2);
      const int64_t fv = isa == CpuAttnIsa::kVec
                             ? t * d_max + d
                             : (d / 16) * 16 * bs + (t / 2) * 32 + (d % 16) * 2 + (t % 2);
      EXPECT_EQ(kc.get(slab + fk), double(d + 1)) << enum_name(isa) << " d" << d;
      EXPECT_EQ(vc.get(slab + fv), -double(d + 1)) << enum_name(isa) << " d" << d;
    }
    // Exactly 2·D elements became non-zero: nothing else was touched.
    int64_t written = 0;
    for (double x : kc.values()) written += x != 0;
    for (double x : vc.values()) written += x != 0;
    EXPECT_EQ(written, 2 * d_max) << enum_name(isa);
  }
}

TEST(CpuAttentionKnown, NegativeSlotIsSkipped) {
  const DType dt = DType::kF16;
  const OpSpec spec = OpSpec::make(OpKind::kCpuAttnReshapeAndCache,
                                   ir::CpuAttnCacheWriteParams{CpuAttnIsa::kVec16, dt, 2, 16, 16});
  HostTensor key = filled(dt, {2, 2, 16}, 1), value = filled(dt, {2, 2, 16}, 2);
  HostTensor kc = filled(dt, {1, 2, 16, 16}, 3), vc = filled(dt, {1, 2, 16, 16}, 4);
  HostTensor kc_before = kc;
  HostTensor slots = HostTensor::from_values(DType::kI64, {2}, {-1, 3});
  run_ok(spec, {key.tensor(), value.tensor(), kc.tensor(), vc.tensor(), slots.tensor()});
  // Token 1 landed at offset 3 of head 0 (K transposed: d·16 + 3); token 0 went nowhere, so
  // every other element is as before.
  int64_t changed = 0;
  for (int64_t i = 0; i < kc.numel(); ++i) changed += kc.get(i) != kc_before.get(i);
  EXPECT_LE(changed, 2 * 16);
  for (int64_t d = 0; d < 16; ++d) EXPECT_EQ(kc.get(d * 16 + 3), key.get(32 + d)) << d;
}

// ---- fp8 KV caches (spec §3.6): stored = fp8(x / scale), read as fp8·scale ------------------

// One token at offset 5 of block 1 into u8 caches (vLLM's allocation), codes checked by hand.
// e4m3: 1.0 = 0x38, -1.5 = 0xBC, 2.0 = 0x40, max 448 = 0x7E; ties to even: 1.0625 (between
// 1.0 and 1.125) -> 0x38, 1.1875 (between 1.125 and 1.25) -> 0x3A. e5m2: 1.0 = 0x3C,
// -1.5 = 0xBE, 2.0 = 0x40, max 57344 = 0x7B; 1.0625 and 1.1875 -> 1.0 (0x3C) and 1.25 (0x3D).
TEST(CpuAttentionFp8Known, CacheWriteQuantisesByHand) {
  const int64_t bs = 32, d_max = 32, t = 5;
  const DType dt = DType::kBF16;
  const double k_scale = 0.5, v_scale = 2.0;
  for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
    const bool e4m3 = kv == ir::KvCacheDtype::kFp8E4m3;
    const OpSpec spec =
        OpSpec::make(OpKind::kCpuAttnReshapeAndCache,
                     ir::CpuAttnCacheWriteParams{CpuAttnIsa::kVec, dt, 1, d_max, bs, kv});
    // key: 0.5 / -0.75 alternating (-> 1.0, -1.5); value: 1e6 (saturates), 2.125, 2.375
    // (ties), then 4 (-> 2.0).
    std::vector<double> kvals, vvals;
    std::vector<int> kcodes, vcodes;
    for (int64_t d = 0; d < d_max; ++d) {
      kvals.push_back(d % 2 == 0 ? 0.5 : -0.75);
      kcodes.push_back(d % 2 == 0 ? (e4m3 ? 0x38 : 0x3C) : (e4m3 ? 0xBC : 0xBE));
      const double v = d == 0 ? 1e6 : d == 1 ? 2.125 : d == 2 ? 2.375 : 4.0;
      vvals.push_back(v);
      vcodes.push_back(d == 0   ? (e4m3 ? 0x7E : 0x7B)
                       : d == 1 ? (e4m3 ? 0x38 : 0x3C)
                       : d == 2 ? (e4m3 ? 0x3A : 0x3D)
                                : 0x40);
    }
    HostTensor key = HostTensor::from_values(dt, {1, 1, d_max}, kvals);
    HostTensor value = HostTensor::from_values(dt, {1, 1, d_max}, vvals);
    HostTensor kc = HostTensor::zeros(DType::kU8, {2, 1, bs, d_max}), vc = kc;
    HostTensor slot = HostTensor::from_values(DType::kI64, {1}, {double(bs + t)});
    run_ok(spec, KernelArgs({key.tensor(), value.tensor(), kc.tensor(), vc.tensor(), slot.tensor()},
                            {k_scale, v_scale}));
    const int64_t slab = bs * d_max;
    for (int64_t d = 0; d < d_max; ++d) {
      EXPECT_EQ(kc.get(slab + d * bs + t), double(kcodes[size_t(d)])) << enum_name(kv) << d;
      EXPECT_EQ(vc.get(slab + t * d_max + d), double(vcodes[size_t(d)])) << enum_name(kv) << d;
    }
    int64_t written = 0;
    for (double x : kc.values()) written += x != 0;
    for (double x : vc.values()) written += x != 0;
    EXPECT_EQ(written, 2 * d_max) << enum_name(kv);
  }
}

// q = e0, k0 = 0, k1 = e0 (stored as 2.0 with k_scale 0.5, read back as 1.0): logits 0 and 1;
// v0 = 2, v1 = -1 stored as 8 and -4 with v_scale 0.25. out = (2 − e) / (1 + e), as in the
// bf16 case above: the scales cancel exactly.
TEST(CpuAttentionFp8Known, OneQueryOverTwoKeysByHand) {
  for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
    auto p = attn_params(DType::kF32, kD, 1, 1, true);
    p.kv = kv;
    HostTensor q = rows_of(DType::kF32, 1, 1, unit(kD, 0));
    HostTensor k = HostTensor::from_values(DType::kF32, {2, 1, kD}, [] {
      std::vector<double> v(2 * kD, 0.0);
      v[kD] = 1.0;
      return v;
    }());
    AttnProblem a =
        make_problem(p, {1}, {2}, q, k, const_rows(DType::kF32, kD, {2.0, -1.0}), {}, 0.5, 0.25);
    EXPECT_EQ(a.key_cache.get(1), 0x40);  // key 1, dim 0: 1.0 / 0.5 = 2.0 in both formats
    a.scale = 1.0;
    const HostTensor out = a.run();
    const double e = std::exp(1.0);
    const double want = (2.0 - e) / (1.0 + e);
    for (int64_t d = 0; d < kD; ++d) EXPECT_NEAR(out.get(d), want, 1e-7) << enum_name(kv) << d;
  }
}

// With power-of-two scales fp8·scale is exact in f32, so the fp8 attention equals the kv=auto
// f32 attention over caches holding the dequantised values (GQA, causal prefill + decodes).
TEST(CpuAttentionFp8Property, EqualsF32OverTheDequantisedValues) {
  for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
    const int64_t d = 64, hkv = 2, hq = 8, total_kv = 45 + 7;
    auto p8 = attn_params(DType::kF32, d, hq, hkv, true);
    p8.kv = kv;
    HostTensor q = filled(DType::kF32, {5 + 1, hq, d}, 3);
    HostTensor keys = filled(DType::kF32, {total_kv, hkv, d}, 4);
    HostTensor values = filled(DType::kF32, {total_kv, hkv, d}, 5);
    const double k_scale = 0.25, v_scale = 2.0;
    AttnProblem a8 = make_problem(p8, {5, 1}, {45, 7}, q, keys, values, {}, k_scale, v_scale);
    // The values the fp8 cache holds: decode(fp8(x / scale)) · scale, exact in f32.
    HostTensor keys_q = keys, values_q = values;
    const DType fmt = ir::cpu_attn_cache_dtype(DType::kF32, kv);
    for (int64_t i = 0; i < keys.numel(); ++i) {
      HostTensor one = HostTensor::zeros(fmt, {1});
      one.set(0, float(keys.get(i)) / float(k_scale));
      keys_q.set(i, one.get(0) * k_scale);
      one.set(0, float(values.get(i)) / float(v_scale));
      values_q.set(i, one.get(0) * v_scale);
    }
    AttnProblem a32 = make_problem(attn_params(DType::kF32, d, hq, hkv, true), {5, 1}, {45, 7}, q,
                                   keys_q, values_q);
    const HostTensor o8 = a8.run(), o32 = a32.run();
    for (int64_t i = 0; i < o8.numel(); ++i) {
      ASSERT_NEAR(o8.get(i), o32.get(i), 1e-6) << enum_name(kv) << " element " << i;
    }
  }
}

TEST(CpuAttentionFp8BadInput, ScalesAndCacheDtype) {
  const DType dt = DType::kBF16;
  const OpSpec write = OpSpec::make(
      OpKind::kCpuAttnReshapeAndCache,
      ir::CpuAttnCacheWriteParams{CpuAttnIsa::kVec, dt, 2, 32, 32, ir::KvCacheDtype::kFp8E4m3});
  HostTensor key = filled(dt, {3, 2, 32}), value = filled(dt, {3, 2, 32});
  HostTensor kc = HostTensor::zeros(DType::kU8, {2, 2, 32, 32}), vc = kc;
  HostTensor kc_bf16 = filled(dt, {2, 2, 32, 32}, 5);
  HostTensor kc_e5m2 = HostTensor::zeros(DType::kFp8E5m2, {2, 2, 32, 32});
  HostTensor slots = HostTensor::from_values(DType::kI64, {3}, {0, 33, 63});
  const auto args = [&](const HostTensor& kcache, double ks, double vs) {
    return KernelArgs({key.tensor(), value.tensor(), kcache.tensor(), vc.tensor(), slots.tensor()},
                      {ks, vs});
  };
  expect_rejected(write, args(kc, 0.0, 1.0), "k_scale", {&kc, &vc});
  expect_rejected(write, args(kc, 1.0, -2.0), "v_scale", {&kc, &vc});
  expect_rejected(write, args(kc, 1.0, std::nan("")), "v_scale", {&kc, &vc});
  expect_rejected(write, args(kc_bf16, 1.0, 1.0), "key_cache", {&kc_bf16, &vc});
  expect_rejected(write, args(kc_e5m2, 1.0, 1.0), "key_cache", {&kc_e5m2, &vc});
  // An fp8 spec without its two scales: the count check says what is expected.
  const Status missing = ref::run(
      write, KernelArgs({key.tensor(), value.tensor(), kc.tensor(), vc.tensor(), slots.tensor()}));
  EXPECT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find("2 scalars"), std::string::npos) << missing.message();
  // The attention: k_scale must be > 0; an auto spec given fp8 caches names the cache.
  auto p = attn_params(DType::kF32, kD, 2, 1, true);
  p.kv = ir::KvCacheDtype::kFp8E4m3;
  HostTensor q = filled(DType::kF32, {1, 2, kD}, 7);
  HostTensor k = filled(DType::kF32, {3, 1, kD}, 8);
  AttnProblem a = make_problem(p, {1}, {3}, q, k, k, {}, 0.5, 0.5);
  a.k_scale = 0.0;
  expect_rejected(a.spec, a.args(), "k_scale", {&a.output});
  a.k_scale = 0.5;
  AttnProblem a_auto = a;
  a_auto.spec =
      OpSpec::make(OpKind::kCpuAttentionWithKvCache, attn_params(DType::kF32, kD, 2, 1, true));
  expect_rejected(a_auto.spec, a_auto.args(), "key_cache", {&a_auto.output});
}

// ---- attention: properties -------------------------------------------------------------------

// A batch of decodes and a prefill with every feature on, GQA 4:2.
AttnProblem feature_problem(DType dtype, std::vector<int64_t> placement = {}) {
  auto p = attn_params(dtype, 64, 4, 2, true);
  p.alibi = p.softcap = p.sinks = true;
  const std::vector<int64_t> q_lens = {1, 5, 1}, seq_lens = {150, 40, 97};
  HostTensor q = filled(dtype, {7, 4, 64}, 11);
  HostTensor k = filled(dtype, {287, 2, 64}, 12), v = filled(dtype, {287, 2, 64}, 13);
  AttnProblem a = make_problem(p, q_lens, seq_lens, q, k, v, std::move(placement));
  a.softcap = 8.0;
  a.slopes = HostTensor::from_values(DType::kF32, {4}, {0.25, 0.0625, 0.015625, 0.00390625});
  a.sinks = HostTensor::from_values(DType::kBF16, {4}, {0.5, 2.0, -1.0, 3.0});
  return a;
}

TEST(CpuAttentionProperty, KvSplitEqualsNoSplit) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    AttnProblem a = feature_problem(dtype);
    a.schedule(-1, false);
    const HostTensor whole = a.run();
    a.schedule(-1, true);  // the decodes of 150 and 97 keys split into chunks of 32
    a.output = HostTensor::zeros(dtype, whole.sizes());
    const HostTensor split = a.run();
    // Both are double computations rounded once; they may differ by a rounding flip.
    EXPECT_TRUE(matches(split, whole, Tolerance::ulp(1))) << dtype_name(dtype);
  }
}

TEST(CpuAttentionProperty, PagePlacementChangesNothing) {
  const AttnProblem base = feature_problem(DType::kBF16);
  AttnProblem a = base;
  const HostTensor ordered = a.run();
  // Same logical K/V in reversed and interleaved physical blocks (12 blocks in all).
  std::vector<int64_t> reversed(12);
  std::iota(reversed.rbegin(), reversed.rend(), 0);
  AttnProblem b = feature_problem(DType::kBF16, reversed);
  EXPECT_TRUE(matches(b.run(), ordered, Tolerance::exact()));
  const std::vector<int64_t> shuffled = {7, 2, 11, 0, 9, 4, 1, 10, 3, 8, 5, 6};
  AttnProblem c = feature_problem(DType::kBF16, shuffled);
  EXPECT_TRUE(matches(c.run(), ordered, Tolerance::exact()));
}

TEST(CpuAttentionProperty, GqaEqualsMhaWithRepeatedKvHeads) {
  // 4 query heads over 2 kv heads = 4 query heads over 4 kv heads where kv head h holds kv
  // head h / 2 of the GQA problem.
  const int64_t kv = 45;
  HostTensor q = filled(DType::kF32, {3, 4, kD}, 21);
  HostTensor k2 = filled(DType::kF32, {kv, 2, kD}, 22), v2 = filled(DType::kF32, {kv, 2, kD}, 23);
  HostTensor k4 = HostTensor::zeros(DType::kF32, {kv, 4, kD}), v4 = k4;
  for (int64_t j = 0; j < kv; ++j) {
    for (int64_t h = 0; h < 4; ++h) {
      for (int64_t d = 0; d < kD; ++d) {
        k4.set((j * 4 + h) * kD + d, k2.get((j * 2 + h / 2) * kD + d));
        v4.set((j * 4 + h) * kD + d, v2.get((j * 2 + h / 2) * kD + d));
      }
    }
  }
  HostTensor gqa =
      make_problem(attn_params(DType::kF32, kD, 4, 2, true), {3}, {kv}, q, k2, v2).run();
  HostTensor mha =
      make_problem(attn_params(DType::kF32, kD, 4, 4, true), {3}, {kv}, q, k4, v4).run();
  EXPECT_TRUE(matches(gqa, mha, Tolerance::exact()));
}

// ---- attention and scheduler: bad input ------------------------------------------------------

TEST(CpuAttentionBadInput, Scheduler) {
  const OpSpec spec =
      OpSpec::make(OpKind::kCpuAttnGetSchedulerMetadata,
                   ir::CpuAttnSchedulerParams{CpuAttnIsa::kVec, DType::kBF16, 64, 4, 2, true});
  HostTensor md = test::make_case(spec, 2, test::InputKind::kNormal, 1)->tensors[0];
  md = filled(DType::kI8, md.sizes());
  HostTensor md_small = HostTensor::zeros(DType::kI8, {16});
  HostTensor lens = HostTensor::from_values(DType::kI32, {2}, {5, 9});
  HostTensor lens_short = HostTensor::from_values(DType::kI32, {2}, {5, 1});
  HostTensor lens_f32 = HostTensor::from_values(DType::kF32, {2}, {5, 9});
  HostTensor qsl = HostTensor::from_values(DType::kI32, {3}, {0, 1, 4});
  HostTensor qsl_long = HostTensor::from_values(DType::kI32, {4}, {0, 1, 4, 5});
  const auto args = [&](const HostTensor& m, const HostTensor& l, const HostTensor& s,
                        double window = -1) {
    return KernelArgs({m.tensor(), l.tensor(), s.tensor()}, {2.0, window, 1.0});
  };
  expect_rejected(spec, args(md, lens_f32, qsl), "seq_lens", {&md});
  expect_rejected(spec, args(md, lens, qsl_long), "query_start_loc", {&md});
  expect_rejected(spec, args(md_small, lens, qsl), "metadata", {&md_small});
  expect_rejected(spec, args(md, lens, qsl, 0), "window_size", {&md});
  // Causal queries are the last positions: 3 query tokens need a sequence of at least 3.
  expect_rejected(spec, args(md, lens_short, qsl), "seq_lens", {&md});
}

TEST(CpuAttentionBadInput, ReshapeAndCache) {
  const DType dt = DType::kBF16;
  const OpSpec spec = OpSpec::make(OpKind::kCpuAttnReshapeAndCache,
                                   ir::CpuAttnCacheWriteParams{CpuAttnIsa::kVec, dt, 2, 32, 32});
  HostTensor key = filled(dt, {3, 2, 32}), value = filled(dt, {3, 2, 32});
  HostTensor key_f16 = filled(DType::kF16, {3, 2, 32}), key_heads = filled(dt, {3, 3, 32});
  HostTensor value_short = filled(dt, {2, 2, 32});
  HostTensor kc = filled(dt, {2, 2, 32, 32}, 5), vc = filled(dt, {2, 2, 32, 32}, 6);
  HostTensor kc_strided = HostTensor::strided(dt, {2, 2, 32, 32}, {4096, 2048, 64, 1});
  HostTensor vc_other = HostTensor::strided(dt, {2, 2, 32, 32}, {4096, 2048, 32, 1});
  HostTensor slots = HostTensor::from_values(DType::kI64, {3}, {0, 33, 63});
  HostTensor slots_far = HostTensor::from_values(DType::kI64, {3}, {0, 64, 5});
  HostTensor slots_i32 = HostTensor::from_values(DType::kI32, {3}, {0, 33, 63});
  HostTensor slots_short = HostTensor::from_values(DType::kI64, {2}, {0, 33});
  const auto args = [](const HostTensor& k, const HostTensor& v, const HostTensor& kcache,
                       const HostTensor& vcache, const HostTensor& s) {
    return KernelArgs{k.tensor(), v.tensor(), kcache.tensor(), vcache.tensor(), s.tensor()};
  };
  expect_rejected(spec, args(key_f16, value, kc, vc, slots), "key", {&kc, &vc});
  expect_rejected(spec, args(key_heads, value, kc, vc, slots), "key", {&kc, &vc});
  expect_rejected(spec, args(key, value_short, kc, vc, slots), "value", {&kc, &vc});
  expect_rejected(spec, args(key, value, kc_strided, vc, slots), "key_cache", {&kc_strided, &vc});
  expect_rejected(spec, args(key, value, kc, vc_other, slots), "value_cache", {&kc, &vc_other});
  expect_rejected(spec, args(key, value, kc, vc, slots_i32), "slot_mapping", {&kc, &vc});
  expect_rejected(spec, args(key, value, kc, vc, slots_short), "slot_mapping", {&kc, &vc});
  // Slot 64 is past the 2 blocks of 32: rejected before token 0 is written.
  expect_rejected(spec, args(key, value, kc, vc, slots_far), "slot_mapping", {&kc, &vc});
}

TEST(CpuAttentionBadInput, Attention) {
  AttnProblem a = feature_problem(DType::kBF16);
  a.output = filled(DType::kBF16, a.output.sizes(), 3);
  const auto& p = a.spec.get<ir::CpuAttentionParams>();
  const auto rejected = [&](AttnProblem bad, const std::string& arg) {
    expect_rejected(bad.spec, bad.args(), arg, {&bad.output});
  };
  {
    AttnProblem bad = a;
    bad.query = filled(DType::kF16, a.query.sizes());
    rejected(bad, "query");
  }
  {
    AttnProblem bad = a;
    bad.output = filled(DType::kBF16, {7, 4, 32});
    rejected(bad, "output");
  }
  {
    // A block id outside the cache (12 blocks), or negative: nothing is written.
    AttnProblem bad = a;
    bad.table.set(0, 12);
    rejected(bad, "block_table");
    bad.table.set(0, -1);
    rejected(bad, "block_table");
  }
  {
    // Too few block-table columns for seq_lens.
    AttnProblem bad = a;
    bad.table = HostTensor::zeros(DType::kI32, {3, 2});
    rejected(bad, "block_table");
  }
  {
    // Metadata built for another window, or garbage.
    AttnProblem bad = a;
    auto q = bad.spec.get<ir::CpuAttentionParams>();
    q.sliding_window = true;
    bad.spec = OpSpec::make(OpKind::kCpuAttentionWithKvCache, q);
    bad.left = 63;
    bad.right = 0;
    rejected(bad, "scheduler_metadata");
    AttnProblem garbage = a;
    garbage.metadata = filled(DType::kI8, a.metadata.sizes());
    rejected(garbage, "scheduler_metadata");
  }
  {
    AttnProblem bad = a;
    bad.seq_lens.set(1, 3);  // other lengths than the metadata was built for (and < q_len 5)
    rejected(bad, "seq_lens");
  }
  {
    AttnProblem bad = a;
    bad.slopes = HostTensor::zeros(DType::kF32, {p.head_count_q + 1});
    rejected(bad, "alibi_slopes");
    bad = a;
    bad.sinks = HostTensor::zeros(DType::kF16, {p.head_count_q});
    rejected(bad, "s_aux");
    bad = a;
    bad.softcap = 0.0;  // softcap=true needs a positive cap
    rejected(bad, "softcap");
    bad = a;
    bad.left = 5;  // sliding_window=false: both edges -1
    rejected(bad, "sliding_window_left");
  }
}

// ---- GEMM --------------------------------------------------------------------------------------

OpSpec mm_spec(OpKind op, DType dtype, int64_t k, int64_t n) {
  return OpSpec::make(op, ir::GemmParams{dtype, k, n});
}

OpSpec scaled_spec(OpKind op, DType out, int64_t k, int64_t n, bool dynamic, bool azp,
                   bool per_channel) {
  return OpSpec::make(op, ir::ScaledGemmParams{out, k, n, dynamic, azp, per_channel});
}

// The handler create_onednn_mm makes from `b` (a [K, N] view).
HostTensor mm_handler(DType dtype, const HostTensor& b) {
  const OpSpec create = mm_spec(OpKind::kCreateOnednnMm, dtype, b.sizes()[0], b.sizes()[1]);
  HostTensor handler = test::make_case(create, 1, test::InputKind::kNormal, 1)->tensors[0];
  run_ok(create, KernelArgs({handler.tensor(), b.tensor()}, {128.0}));
  return handler;
}

HostTensor scaled_handler(const OpSpec& mm, const HostTensor& b, const HostTensor& b_scales) {
  OpSpec create = mm;
  create.op = OpKind::kCreateOnednnScaledMm;
  HostTensor handler = test::make_case(create, 1, test::InputKind::kNormal, 1)->tensors[0];
  run_ok(create, KernelArgs({handler.tensor(), b.tensor(), b_scales.tensor()}, {32.0}));
  return handler;
}

// [K, N] with strides (1, K) holding `rows` (row-major K x N values).
HostTensor col_major(DType dtype, int64_t k, int64_t n, const std::vector<double>& rows) {
  HostTensor t = HostTensor::strided(dtype, {k, n}, {1, k});
  for (int64_t i = 0; i < k * n; ++i) t.set(i, rows[size_t(i)]);
  return t;
}

TEST(GemmKnown, SmallIntegersByHand) {
  // a = [[1, 2, 3], [-1, 0, 2]], b = [[1, 0], [0, 1], [2, -1]], bias = [10, 20]:
  // a @ b = [[7, -1], [3, -2]]; + bias = [[17, 19], [13, 18]].
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    HostTensor a = HostTensor::from_values(dt, {2, 3}, {1, 2, 3, -1, 0, 2});
    HostTensor b = col_major(dt, 3, 2, {1, 0, 0, 1, 2, -1});
    HostTensor bias = HostTensor::from_values(dt, {2}, {10, 20});
    HostTensor c = HostTensor::zeros(dt, {2, 2});
    HostTensor handler = mm_handler(dt, b);
    const OpSpec spec = mm_spec(OpKind::kOnednnMm, dt, 3, 2);
    run_ok(spec, {c.tensor(), a.tensor(), bias.tensor(), handler.tensor()});
    EXPECT_EQ(c.values(), (std::vector<double>{17, 19, 13, 18})) << dtype_name(dt);
    // The same handler without bias (bias may change from call to call).
    run_ok(spec, {c.tensor(), a.tensor(), Tensor(), handler.tensor()});
    EXPECT_EQ(c.values(), (std::vector<double>{7, -1, 3, -2})) << dtype_name(dt);
  }
}

TEST(GemmKnown, OneRoundingOfTheSum) {
  // bf16: 256 + 1 + 1 is 258 exactly in fp32 and rounds once to 258; summing into bf16 would
  // give 256 + 1 -> 256, + 1 -> 256.
  HostTensor a = HostTensor::from_values(DType::kBF16, {1, 3}, {256, 1, 1});
  HostTensor b = col_major(DType::kBF16, 3, 1, {1, 1, 1});
  HostTensor c = HostTensor::zeros(DType::kBF16, {1, 1});
  HostTensor handler = mm_handler(DType::kBF16, b);
  run_ok(mm_spec(OpKind::kOnednnMm, DType::kBF16, 3, 1),
         {c.tensor(), a.tensor(), Tensor(), handler.tensor()});
  EXPECT_EQ(c.get(0), 258.0);
}

TEST(ScaledGemmKnown, StaticAzpEqualsShiftedProductScaled) {
  // a = [[3, -2], [0, 5]], zp = 2, b = [[1, 2], [-3, 4]] (K = 2, N = 2), s_a = 0.5,
  // s_b = [2, 0.25] per channel, bias = [1, -1]:
  // (a − zp) = [[1, -4], [-2, 3]]; (a − zp) @ b = [[13, -14], [-11, 8]];
  // c = 0.5 · s_b[n] · that + bias = [[14, -2.75], [-10, 0]].
  const OpSpec spec = scaled_spec(OpKind::kOnednnScaledMm, DType::kF32, 2, 2, false, true, true);
  HostTensor b = col_major(DType::kI8, 2, 2, {1, 2, -3, 4});
  HostTensor b_scales = HostTensor::from_values(DType::kF32, {2}, {2.0, 0.25});
  HostTensor handler = scaled_handler(spec, b, b_scales);
  HostTensor a = HostTensor::from_values(DType::kI8, {2, 2}, {3, -2, 0, 5});
  HostTensor a_scales = HostTensor::from_values(DType::kF32, {1}, {0.5});
  HostTensor azp = HostTensor::from_values(DType::kI32, {1}, {2});
  HostTensor bias = HostTensor::from_values(DType::kF32, {2}, {1, -1});
  HostTensor c = HostTensor::zeros(DType::kF32, {2, 2});
  run_ok(spec, {c.tensor(), a.tensor(), a_scales.tensor(), azp.tensor(), Tensor(), bias.tensor(),
                handler.tensor()});
  EXPECT_EQ(c.values(), (std::vector<double>{14, -2.75, -10, 0}));
}

TEST(ScaledGemmKnown, DynamicAzpEqualsShiftedProductScaled) {
  // Per token: row m uses s_a[m], zp[m]; azp_adj[n] = s_b[n] · Σ_k b[k, n]. The epilogue
  // s_a (s_b a·b) − s_a zp azp_adj must equal s_a s_b (a − zp)·b.
  const int64_t m = 5, k = 37, n = 11;
  const OpSpec spec = scaled_spec(OpKind::kOnednnScaledMm, DType::kF32, k, n, true, true, true);
  HostTensor b = HostTensor::strided(DType::kI8, {k, n}, {1, k});
  test::fill_small_int(b, 1, -100, 100);
  HostTensor b_scales = HostTensor::zeros(DType::kF32, {n});
  test::fill_uniform(b_scales, 2, -0.1, 0.1);
  HostTensor handler = scaled_handler(spec, b, b_scales);
  HostTensor a = HostTensor::zeros(DType::kI8, {m, k});
  test::fill_small_int(a, 3, -128, 127);
  HostTensor a_scales = HostTensor::zeros(DType::kF32, {m, 1});
  test::fill_uniform(a_scales, 4, -0.05, 0.05);
  HostTensor azp = HostTensor::zeros(DType::kI32, {m, 1});
  test::fill_small_int(azp, 5, -30, 30);
  HostTensor azp_adj = HostTensor::zeros(DType::kF32, {1, n});
  for (int64_t j = 0; j < n; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += b.get(i * n + j);
    azp_adj.set(j, double(float(b_scales.get(j) * sum)));
  }
  HostTensor c = HostTensor::zeros(DType::kF32, {m, n});
  run_ok(spec, {c.tensor(), a.tensor(), a_scales.tensor(), azp.tensor(), azp_adj.tensor(), Tensor(),
                handler.tensor()});
  HostTensor want = HostTensor::zeros(DType::kF32, {m, n});
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t dot = 0;
      for (int64_t i = 0; i < k; ++i) {
        dot += (int64_t(a.get(r * k + i)) - int64_t(azp.get(r))) * int64_t(b.get(i * n + j));
      }
      want.set(r * n + j, a_scales.get(r) * b_scales.get(j) * double(dot));
    }
  }
  // azp_adj is an fp32 input, so the two sides differ by its rounding: rtol 1e-3 of spec.
  EXPECT_TRUE(matches(c, want, Tolerance::abs_rel(1e-4, 1e-3)));
}

TEST(ScaledGemmProperty, DynamicWithEqualScalesEqualsStatic) {
  for (bool azp : {false, true}) {
    const int64_t m = 6, k = 64, n = 9;
    const OpSpec dyn = scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, k, n, true, azp, false);
    const OpSpec stat = scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, k, n, false, azp, false);
    HostTensor b = HostTensor::strided(DType::kI8, {k, n}, {1, k});
    test::fill_small_int(b, 7, -60, 60);
    HostTensor b_scales = HostTensor::from_values(DType::kF32, {1}, {0.03125});
    HostTensor a = HostTensor::zeros(DType::kI8, {m, k});
    test::fill_small_int(a, 8, -60, 60);
    HostTensor bias = HostTensor::zeros(DType::kBF16, {n});
    test::fill_uniform(bias, 9, 0, 10);
    // Power-of-two scales keep both formulas exact before the one rounding.
    HostTensor s_dyn = HostTensor::zeros(DType::kF32, {m, 1});
    test::fill_equal(s_dyn, 0.25);
    HostTensor s_stat = HostTensor::from_values(DType::kF32, {1, 1}, {0.25});
    HostTensor zp_dyn = HostTensor::zeros(DType::kI32, {m, 1});
    test::fill_equal(zp_dyn, 3);
    HostTensor zp_stat = HostTensor::from_values(DType::kI32, {1}, {3});
    HostTensor azp_adj = HostTensor::zeros(DType::kF32, {n});
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < k; ++i) sum += b.get(i * n + j);
      azp_adj.set(j, 0.03125 * sum);
    }
    HostTensor c_dyn = HostTensor::zeros(DType::kBF16, {m, n}), c_stat = c_dyn;
    run_ok(dyn, {c_dyn.tensor(), a.tensor(), s_dyn.tensor(), azp ? zp_dyn.tensor() : Tensor(),
                 azp ? azp_adj.tensor() : Tensor(), bias.tensor(),
                 scaled_handler(dyn, b, b_scales).tensor()});
    run_ok(stat, {c_stat.tensor(), a.tensor(), s_stat.tensor(), azp ? zp_stat.tensor() : Tensor(),
                  Tensor(), bias.tensor(), scaled_handler(stat, b, b_scales).tensor()});
    EXPECT_TRUE(matches(c_dyn, c_stat, Tolerance::exact())) << "azp " << azp;
  }
}

TEST(GemmBadInput, OnednnMm) {
  const DType dt = DType::kBF16;
  const OpSpec spec = mm_spec(OpKind::kOnednnMm, dt, 8, 4);
  HostTensor b = HostTensor::strided(dt, {8, 4}, {1, 8});
  test::fill_normal(b, 1);
  HostTensor handler = mm_handler(dt, b);
  HostTensor a = filled(dt, {3, 8}), bias = filled(dt, {4}), c = filled(dt, {3, 4}, 5);
  HostTensor a_f16 = filled(DType::kF16, {3, 8}), a_k = filled(dt, {3, 7});
  HostTensor bias_long = filled(dt, {5}), c_rows = filled(dt, {2, 4});
  HostTensor c_strided = HostTensor::row_strided(dt, {3, 4}, 8);
  const auto args = [&](const HostTensor& cc, const HostTensor& aa, const HostTensor& h) {
    return KernelArgs{cc.tensor(), aa.tensor(), bias.tensor(), h.tensor()};
  };
  expect_rejected(spec, args(c, a_f16, handler), "a", {&c});
  expect_rejected(spec, args(c, a_k, handler), "a", {&c});
  expect_rejected(spec, args(c_rows, a, handler), "a", {&c_rows});
  expect_rejected(spec, args(c_strided, a, handler), "c", {&c_strided});
  expect_rejected(spec, {c.tensor(), a.tensor(), bias_long.tensor(), handler.tensor()}, "bias",
                  {&c});
  // K mismatch between the handler and a: a handler for K = 4 (smaller) ...
  HostTensor b4 = HostTensor::strided(dt, {4, 4}, {1, 4});
  expect_rejected(spec, args(c, a, mm_handler(dt, b4)), "handler", {&c});
  // ... or one of the same size with K and N swapped ([4, 8]) names the handler too.
  HostTensor b_swapped = HostTensor::strided(dt, {4, 8}, {1, 4});
  HostTensor swapped = mm_handler(dt, b_swapped);
  ASSERT_EQ(swapped.numel(), handler.numel());
  expect_rejected(spec, args(c, a, swapped), "handler", {&c});
  // Garbage of the right size, and a handler of another dtype.
  HostTensor garbage = filled(DType::kU8, handler.sizes());
  expect_rejected(spec, args(c, a, garbage), "handler", {&c});
  HostTensor b_f16 = HostTensor::strided(DType::kF16, {8, 4}, {1, 8});
  expect_rejected(spec, args(c, a, mm_handler(DType::kF16, b_f16)), "handler", {&c});
  HostTensor handler_i8 = HostTensor::zeros(DType::kI8, handler.sizes());
  expect_rejected(spec, args(c, a, handler_i8), "handler", {&c});
  // create_onednn_mm: b of the wrong shape or dtype, a handler of the wrong size.
  const OpSpec create = mm_spec(OpKind::kCreateOnednnMm, dt, 8, 4);
  HostTensor h = HostTensor::zeros(DType::kU8, handler.sizes());
  HostTensor h_small = HostTensor::zeros(DType::kU8, {64});
  expect_rejected(create, KernelArgs({h.tensor(), b4.tensor()}, {128.0}), "b", {&h});
  expect_rejected(create, KernelArgs({h.tensor(), b_f16.tensor()}, {128.0}), "b", {&h});
  expect_rejected(create, KernelArgs({h_small.tensor(), b.tensor()}, {128.0}), "handler",
                  {&h_small});
  expect_rejected(create, KernelArgs({h.tensor(), b.tensor()}, {0.0}), "primitive_cache_size",
                  {&h});
}

TEST(GemmBadInput, OnednnScaledMm) {
  const int64_t k = 8, n = 4, m = 3;
  const OpSpec spec = scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, k, n, true, true, true);
  HostTensor b = HostTensor::strided(DType::kI8, {k, n}, {1, k});
  test::fill_small_int(b, 1);
  HostTensor b_scales = filled(DType::kF32, {n});
  HostTensor handler = scaled_handler(spec, b, b_scales);
  HostTensor c = filled(DType::kBF16, {m, n}, 4), c_f16 = filled(DType::kF16, {m, n});
  HostTensor a = HostTensor::zeros(DType::kI8, {m, k});
  HostTensor a_scales = filled(DType::kF32, {m, 1}), a_scales_short = filled(DType::kF32, {m - 1});
  HostTensor azp = HostTensor::zeros(DType::kI32, {m}), azp_adj = filled(DType::kF32, {1, n});
  HostTensor azp_adj_long = filled(DType::kF32, {n + 1});
  HostTensor bias = filled(DType::kBF16, {n});
  struct Call {
    const HostTensor* c;
    const HostTensor* a_scales;
    const HostTensor* azp;
    const HostTensor* azp_adj;
    const HostTensor* handler;
  };
  const auto args = [&](Call x) {
    return KernelArgs{x.c->tensor(),
                      a.tensor(),
                      x.a_scales->tensor(),
                      x.azp ? x.azp->tensor() : Tensor(),
                      x.azp_adj ? x.azp_adj->tensor() : Tensor(),
                      bias.tensor(),
                      x.handler->tensor()};
  };
  run_ok(spec, args({&c, &a_scales, &azp, &azp_adj, &handler}));
  c = filled(DType::kBF16, {m, n}, 4);
  expect_rejected(spec, args({&c_f16, &a_scales, &azp, &azp_adj, &handler}), "c", {&c_f16});
  expect_rejected(spec, args({&c, &a_scales_short, &azp, &azp_adj, &handler}), "a_scales", {&c});
  expect_rejected(spec, args({&c, &a_scales, nullptr, &azp_adj, &handler}), "azp", {&c});
  expect_rejected(spec, args({&c, &a_scales, &azp, nullptr, &handler}), "azp_adj", {&c});
  expect_rejected(spec, args({&c, &a_scales, &azp, &azp_adj_long, &handler}), "azp_adj", {&c});
  // A handler of the unquantised GEMM, or of the same GEMM with per-tensor scales.
  HostTensor bf = HostTensor::strided(DType::kBF16, {k, n}, {1, k});
  HostTensor mm = mm_handler(DType::kBF16, bf);
  expect_rejected(spec, args({&c, &a_scales, &azp, &azp_adj, &mm}), "handler", {&c});
  const OpSpec per_tensor =
      scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, k, n, true, true, false);
  HostTensor one_scale = filled(DType::kF32, {1});
  HostTensor other = scaled_handler(per_tensor, b, one_scale);
  expect_rejected(spec, args({&c, &a_scales, &azp, &azp_adj, &other}), "handler", {&c});
  // create_onednn_scaled_mm: b not column-major, b_scales of the wrong length.
  OpSpec create = spec;
  create.op = OpKind::kCreateOnednnScaledMm;
  HostTensor h = HostTensor::zeros(DType::kU8, handler.sizes());
  HostTensor b_rows = HostTensor::zeros(DType::kI8, {k, n});
  HostTensor scales_short = filled(DType::kF32, {n - 1});
  expect_rejected(create, KernelArgs({h.tensor(), b_rows.tensor(), b_scales.tensor()}, {32.0}), "b",
                  {&h});
  expect_rejected(create, KernelArgs({h.tensor(), b.tensor(), scales_short.tensor()}, {32.0}),
                  "b_scales", {&h});
}

// ---- every op through make_case, as `kiln check` runs it ---------------------------------------

std::vector<OpSpec> cpu_specs() {
  auto attn = attn_params(DType::kBF16, 64, 8, 2, true);
  auto attn_all = attn_params(DType::kF16, 80, 9, 3, false, CpuAttnIsa::kVec16, 16);
  attn_all.sliding_window = attn_all.alibi = attn_all.softcap = attn_all.sinks = true;
  auto attn_amx = attn_params(DType::kBF16, 64, 4, 4, true, CpuAttnIsa::kAmx, 32);
  attn_amx.sliding_window = true;
  return {
      OpSpec::make(OpKind::kCpuAttnGetSchedulerMetadata,
                   ir::CpuAttnSchedulerParams{CpuAttnIsa::kVec, DType::kBF16, 128, 32, 8, true}),
      OpSpec::make(OpKind::kCpuAttnReshapeAndCache,
                   ir::CpuAttnCacheWriteParams{CpuAttnIsa::kAmx, DType::kBF16, 2, 64, 32}),
      OpSpec::make(OpKind::kCpuAttnReshapeAndCache,
                   ir::CpuAttnCacheWriteParams{CpuAttnIsa::kVec16, DType::kF32, 3, 48, 16}),
      OpSpec::make(OpKind::kCpuAttentionWithKvCache, attn),
      OpSpec::make(OpKind::kCpuAttentionWithKvCache, attn_all),
      OpSpec::make(OpKind::kCpuAttentionWithKvCache, attn_amx),
      mm_spec(OpKind::kCreateOnednnMm, DType::kBF16, 15, 33),
      mm_spec(OpKind::kOnednnMm, DType::kF32, 15, 33),
      mm_spec(OpKind::kOnednnMm, DType::kBF16, 64, 17),
      scaled_spec(OpKind::kCreateOnednnScaledMm, DType::kBF16, 15, 33, true, true, true),
      scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, 15, 33, true, true, true),
      scaled_spec(OpKind::kOnednnScaledMm, DType::kF16, 40, 9, false, true, false),
      scaled_spec(OpKind::kOnednnScaledMm, DType::kF32, 40, 9, false, false, true),
  };
}

TEST(CpuOpCases, EveryOpBuildsACaseThatRunsOnRef) {
  std::vector<bool> covered(7, false);
  for (const OpSpec& spec : cpu_specs()) {
    ASSERT_TRUE(ref::implements(spec.op)) << to_string(spec);
    covered[size_t(spec.op) - size_t(OpKind::kCpuAttnGetSchedulerMetadata)] = true;
    for (test::InputKind kind : test::input_kinds_for(spec.op)) {
      for (int64_t size : test::token_sweep()) {
        SCOPED_TRACE(
            fmt::format("{} {} size {}", to_string(spec), test::input_kind_name(kind), size));
        Result<test::OpCase> c = test::make_case(spec, size, kind, 42);
        ASSERT_TRUE(c.is_ok()) << c.status().to_string();
        ASSERT_EQ(c->tolerances.size(), c->outputs.size());
        test::OpCase before = *c;
        run_ok(spec, c->args());
        // Something was written (the cases never start from what ref produces), and a second
        // run on the same inputs gives the same bytes.
        bool changed = false;
        for (int o : c->outputs)
          changed |= c->tensors[size_t(o)].storage() != before.tensors[size_t(o)].storage();
        EXPECT_TRUE(changed);
        test::OpCase again = before;
        run_ok(spec, again.args());
        for (int o : c->outputs) {
          EXPECT_TRUE(again.tensors[size_t(o)].storage() == c->tensors[size_t(o)].storage());
        }
      }
    }
  }
  for (size_t i = 0; i < covered.size(); ++i) EXPECT_TRUE(covered[i]) << "op " << i;
}

}  // namespace
}  // namespace jit
