// Op cases of the CPU attention ops and the oneDNN GEMM ops (spec/norm_act_cpu_ops.md §3, §4;
// argument order in docs/ops.md). What `size` means per op:
//   cpu_attn_get_scheduler_metadata, cpu_attention_with_kv_cache: requests (a mix of decodes
//     and short prefills, KV lengths up to about three blocks);
//   cpu_attn_reshape_and_cache: tokens written;
//   onednn_mm, onednn_scaled_mm: M (rows of a);
//   create_onednn_mm, create_onednn_scaled_mm: unused (they only pack the [K, N] weight).
// The metadata and handler tensors the attention and mm ops read are made by the ref's own
// scheduler and create ops (their formats are described in codegen/ref/ref_cpu.cc).
//
// Tolerances (OpCase::tolerances, from spec/testing.md against a double-accumulating ref):
//   scheduler metadata, cache write, create_*: exact (byte copies / a deterministic blob);
//   attention: bf16 1e-2/1e-2, f16 1e-3/1e-3, f32 1e-5/1e-5 (vLLM's own test uses 1.5e-2/1e-2
//     against an fp32 reference); with an fp8 KV cache the same, tighter than testing.md's
//     3e-2/1e-2: the ref reads the same fp8 codes, so only the kernel's fp32 arithmetic (and
//     the runner's folding of k_scale / v_scale into scale and 1/l) differs;
//   fp8 KV caches (kv=fp8_e4m3/fp8_e5m2): the caches have the fp8 dtype (the checks also accept
//     u8, as vLLM allocates), filled N(0, 1) (fp8 has no adversarial table here: the query /
//     key / value inputs carry the specials), scales k_scale = 0.37, v_scale = 1.7 (not powers
//     of two, so the cache write's division rounds).
//   onednn_mm: exact on small-integer inputs (every partial sum is an integer below 2^24, so
//     fp32 accumulation is exact and one rounding remains); otherwise rtol 1e-2 (bf16),
//     2e-3 (f16: one ulp is 2^-10 relative), 1e-5 (f32), plus atol K·1e-6 for sums that
//     cancel to near zero (fp32 accumulation error grows with K);
//   onednn_scaled_mm: the integer part is exact; after scaling rtol 1e-3, widened to one ulp
//     of the output type for bf16 (2^-7 relative) and f16 (2^-10 ≈ 9.8e-4 fits 1e-3), plus
//     atol 1e-6 of the largest term (the dynamic zero-point correction cancels).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "codegen/ref/ref.h"
#include "tests/harness/op_case_families.h"

namespace jit {
namespace test {
namespace {

void fill(HostTensor& t, InputKind kind, uint64_t seed) {
  switch (kind) {
    case InputKind::kNormal: fill_normal(t, seed); break;
    case InputKind::kSmallInt: fill_small_int(t, seed); break;
    case InputKind::kEqual: fill_equal(t, 0.75); break;
    case InputKind::kAdversarial: fill_adversarial(t, seed); break;
  }
}

// ---- CPU attention -------------------------------------------------------------------------

// Per-request query and KV lengths of a varlen batch.
struct Lengths {
  std::vector<double> query_start_loc;  // [R + 1]
  std::vector<double> seq_lens;         // [R]
  int64_t tokens = 0;
};

// Even requests decode one token, odd ones prefill 2..9; KV lengths 1 .. 3·BS + 7 (partial last
// pages), causal ones at least the query length. Request 0 has a single-token sequence.
Lengths make_lengths(int64_t requests, bool causal, int64_t block_size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> prefill(2, 9);
  std::uniform_int_distribution<int64_t> kv(1, 3 * block_size + 7);
  Lengths l;
  l.query_start_loc.push_back(0);
  for (int64_t r = 0; r < requests; ++r) {
    const int64_t q_len = r % 2 == 0 ? 1 : prefill(rng);
    int64_t seq_len = r == 0 ? 1 : kv(rng);
    if (causal) seq_len = std::max(seq_len, q_len);
    l.tokens += q_len;
    l.query_start_loc.push_back(double(l.tokens));
    l.seq_lens.push_back(double(seq_len));
  }
  return l;
}

OpCase scheduler_case(const OpSpec& spec, int64_t requests, uint64_t seed) {
  const auto& p = spec.get<ir::CpuAttnSchedulerParams>();
  const Lengths l = make_lengths(requests, p.causal, 32, seed);
  OpCase c;
  c.tensors = {HostTensor::zeros(DType::kI8, {codegen::ref::cpu_attn_metadata_bytes()}),
               HostTensor::from_values(DType::kI32, {requests}, l.seq_lens),
               HostTensor::from_values(DType::kI32, {requests + 1}, l.query_start_loc)};
  c.present = {true, true, true};
  c.names = {"metadata", "seq_lens", "query_start_loc"};
  c.outputs = {0};
  c.tolerances = {Tolerance::exact()};
  c.scalars = {double(requests), -1.0, 1.0};
  return c;
}

// k_scale / v_scale of the fp8 cases.
constexpr double kKScale = 0.37;
constexpr double kVScale = 1.7;

// A [blocks, heads_kv, block_size, head_size] cache view whose slabs are two slabs apart, as in
// vLLM's test (head stride 2·BS·D, not BS·D).
HostTensor padded_cache(DType dtype, int64_t blocks, int64_t heads_kv, int64_t block_size,
                        int64_t head_size) {
  const int64_t slab = block_size * head_size;
  return HostTensor::strided(dtype, {blocks, heads_kv, block_size, head_size},
                             {heads_kv * 2 * slab, 2 * slab, head_size, 1});
}

OpCase cache_write_case(const OpSpec& spec, int64_t tokens, InputKind kind, uint64_t seed) {
  const auto& p = spec.get<ir::CpuAttnCacheWriteParams>();
  const int64_t blocks = (tokens + p.block_size - 1) / p.block_size + 1;
  // Token-strided key/value: [T, Hkv, D] views of [T, Hkv + 1, D].
  const std::vector<int64_t> sizes = {tokens, p.head_count_kv, p.head_size};
  const std::vector<int64_t> strides = {(p.head_count_kv + 1) * p.head_size, p.head_size, 1};
  HostTensor key = HostTensor::strided(p.dtype, sizes, strides);
  HostTensor value = HostTensor::strided(p.dtype, sizes, strides);
  fill(key, kind, seed);
  fill(value, kind, seed + 1);
  // Caches start filled, so a slot that must not be written is visible.
  const bool fp8 = p.kv != ir::KvCacheDtype::kAuto;
  HostTensor key_cache = padded_cache(ir::cpu_attn_cache_dtype(p.dtype, p.kv), blocks,
                                      p.head_count_kv, p.block_size, p.head_size);
  HostTensor value_cache = key_cache;
  fill_normal(key_cache, seed + 2);
  fill_normal(value_cache, seed + 3);
  // Distinct random slots; token 1 is skipped (slot −1).
  std::vector<int64_t> order(static_cast<size_t>(blocks * p.block_size));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed + 4));
  std::vector<double> slots(order.begin(), order.begin() + tokens);
  if (tokens > 1) slots[1] = -1;
  OpCase c;
  c.tensors = {key, value, key_cache, value_cache,
               HostTensor::from_values(DType::kI64, {tokens}, slots)};
  c.present = {true, true, true, true, true};
  c.names = {"key", "value", "key_cache", "value_cache", "slot_mapping"};
  c.outputs = {2, 3};
  c.tolerances = {Tolerance::exact(), Tolerance::exact()};
  if (fp8) c.scalars = {kKScale, kVScale};
  return c;
}

Tolerance attention_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return Tolerance::abs_rel(1e-2, 1e-2);
    case DType::kF16: return Tolerance::abs_rel(1e-3, 1e-3);
    default: return Tolerance::abs_rel(1e-5, 1e-5);
  }
}

Result<OpCase> attention_case(const OpSpec& spec, int64_t requests, InputKind kind, uint64_t seed) {
  const auto& p = spec.get<ir::CpuAttentionParams>();
  const Lengths l = make_lengths(requests, p.causal, p.block_size, seed);
  // Pages: every request's blocks, placed at shuffled physical ids, plus two spare blocks.
  int64_t used = 0, max_blocks = 1;
  for (double s : l.seq_lens) {
    const int64_t b = (int64_t(s) + p.block_size - 1) / p.block_size;
    used += b;
    max_blocks = std::max(max_blocks, b);
  }
  const int64_t blocks = used + 2;
  std::vector<int64_t> ids(static_cast<size_t>(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed + 1));
  std::vector<double> table(size_t(requests * max_blocks), 0.0);
  size_t next = 0;
  for (int64_t r = 0; r < requests; ++r) {
    const int64_t b = (int64_t(l.seq_lens[size_t(r)]) + p.block_size - 1) / p.block_size;
    for (int64_t i = 0; i < b; ++i) table[size_t(r * max_blocks + i)] = double(ids[next++]);
  }
  // Token- and head-padded query, as a slice of a larger projection output.
  HostTensor query = HostTensor::strided(p.dtype, {l.tokens, p.head_count_q, p.head_size},
                                         {(p.head_count_q + 1) * p.head_size, p.head_size, 1});
  fill(query, kind, seed + 2);
  const bool fp8 = p.kv != ir::KvCacheDtype::kAuto;
  HostTensor key_cache = padded_cache(ir::cpu_attn_cache_dtype(p.dtype, p.kv), blocks,
                                      p.head_count_kv, p.block_size, p.head_size);
  HostTensor value_cache = key_cache;
  const InputKind cache_kind = fp8 && kind == InputKind::kAdversarial ? InputKind::kNormal : kind;
  fill(key_cache, cache_kind, seed + 3);
  fill(value_cache, cache_kind, seed + 4);
  HostTensor slopes, sinks;
  if (p.alibi) {
    // The power-of-two ALiBi slopes 2^(-8 (h + 1) / heads).
    std::vector<double> s;
    for (int64_t h = 0; h < p.head_count_q; ++h) {
      s.push_back(std::exp2(-8.0 * double(h + 1) / double(p.head_count_q)));
    }
    slopes = HostTensor::from_values(DType::kF32, {p.head_count_q}, s);
  }
  if (p.sinks) {
    sinks = HostTensor::zeros(DType::kBF16, {p.head_count_q});
    fill_uniform(sinks, seed + 5, 0.0, 5.0);
  }
  // A window of a bit more than one block: it trims the longer sequences.
  const int64_t window = p.sliding_window ? p.block_size + 3 : -1;
  const double left = p.sliding_window ? double(window - 1) : -1.0;
  const double right = !p.sliding_window ? -1.0 : p.causal ? 0.0 : double(window - 1);
  HostTensor qsl = HostTensor::from_values(DType::kI32, {requests + 1}, l.query_start_loc);
  HostTensor seq_lens = HostTensor::from_values(DType::kI32, {requests}, l.seq_lens);
  // The metadata from the ref's scheduler, with KV splitting on (as vLLM's builder does).
  const OpSpec sched =
      OpSpec::make(OpKind::kCpuAttnGetSchedulerMetadata,
                   ir::CpuAttnSchedulerParams{p.isa, p.dtype, p.head_size, p.head_count_q,
                                              p.head_count_kv, p.causal});
  HostTensor metadata = HostTensor::zeros(DType::kI8, {codegen::ref::cpu_attn_metadata_bytes()});
  KILN_RETURN_IF_ERROR(
      codegen::ref::run(sched, KernelArgs({metadata.tensor(), seq_lens.tensor(), qsl.tensor()},
                                          {double(requests), double(window), 1.0})));
  OpCase c;
  c.tensors = {query,       key_cache,
               value_cache, HostTensor::zeros(p.dtype, {l.tokens, p.head_count_q, p.head_size}),
               qsl,         seq_lens,
               slopes,      HostTensor::from_values(DType::kI32, {requests, max_blocks}, table),
               metadata,    sinks};
  c.present = {true, true, true, true, true, true, p.alibi, true, true, p.sinks};
  c.names = {
      "query",        "key_cache",   "value_cache",        "output", "query_start_loc", "seq_lens",
      "alibi_slopes", "block_table", "scheduler_metadata", "s_aux"};
  c.outputs = {3};
  c.tolerances = {attention_tolerance(p.dtype)};
  if (p.alibi && p.dtype == DType::kF32) {
    // Logits of slope·(j − i) over a request's whole context (alibi_f32_tolerance): the
    // largest slope is the first head's, the largest distance the longest sequence's.
    const double longest = *std::max_element(l.seq_lens.begin(), l.seq_lens.end());
    c.tolerances = {alibi_f32_tolerance(slopes.get(0) * (longest - 1))};
  }
  c.scalars = {1.0 / std::sqrt(double(p.head_size)), left, right, p.softcap ? 10.0 : 0.0};
  if (fp8) {
    c.scalars.push_back(kKScale);
    c.scalars.push_back(kVScale);
  }
  return c;
}

// ---- oneDNN GEMM ---------------------------------------------------------------------------

// vLLM passes layer.weight.t(): b [K, N] with strides (1, K).
HostTensor column_major(DType dtype, int64_t k, int64_t n) {
  return HostTensor::strided(dtype, {k, n}, {1, k});
}

HostTensor handler_for(const OpSpec& create) {
  return HostTensor::zeros(DType::kU8, {codegen::ref::onednn_handler_bytes(create)});
}

OpCase create_mm_case(const OpSpec& spec, InputKind kind, uint64_t seed) {
  const auto& p = spec.get<ir::GemmParams>();
  HostTensor b = column_major(p.dtype, p.k, p.n);
  fill(b, kind, seed);
  OpCase c;
  c.tensors = {handler_for(spec), b};
  c.present = {true, true};
  c.names = {"handler", "b"};
  c.outputs = {0};
  c.tolerances = {Tolerance::exact()};
  c.scalars = {128.0};
  return c;
}

Result<OpCase> mm_case(const OpSpec& spec, int64_t m, InputKind kind, uint64_t seed) {
  const auto& p = spec.get<ir::GemmParams>();
  const OpSpec create = OpSpec::make(OpKind::kCreateOnednnMm, p);
  OpCase made = create_mm_case(create, kind, seed);
  KILN_RETURN_IF_ERROR(codegen::ref::run(create, made.args()));
  // a[:, :K] of an [M, 2K] buffer, as vLLM's test slices it.
  HostTensor a = HostTensor::row_strided(p.dtype, {m, p.k}, 2 * p.k);
  fill(a, kind, seed + 1);
  HostTensor bias = HostTensor::zeros(p.dtype, {p.n});
  fill(bias, kind, seed + 2);
  OpCase c;
  c.tensors = {HostTensor::zeros(p.dtype, {m, p.n}), a, bias, made.tensors[0]};
  c.present = {true, true, true, true};
  c.names = {"c", "a", "bias", "handler"};
  c.outputs = {0};
  if (kind == InputKind::kSmallInt) {
    c.tolerances = {Tolerance::exact()};
  } else {
    const double rtol = p.dtype == DType::kBF16 ? 1e-2 : p.dtype == DType::kF16 ? 2e-3 : 1e-5;
    c.tolerances = {Tolerance::abs_rel(1e-6 * double(p.k), rtol)};
  }
  return c;
}

// int8 values N(0, 5) (vLLM: to_int8(randn · 5)) or small integers.
void fill_int8(HostTensor& t, InputKind kind, uint64_t seed) {
  if (kind == InputKind::kSmallInt) {
    fill_small_int(t, seed);
    return;
  }
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, 5.0);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.set(i, std::clamp(std::round(dist(rng)), -128.0, 127.0));
}

// Scales: random magnitude and sign (vLLM's test uses randn), or powers of two for small ints.
void fill_scales(HostTensor& t, InputKind kind, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mag(lo, hi);
  std::uniform_int_distribution<int> exponent(-4, 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double sign = rng() % 2 == 0 ? 1.0 : -1.0;
    t.set(i, sign * (kind == InputKind::kSmallInt ? std::exp2(exponent(rng)) : mag(rng)));
  }
}

OpCase create_scaled_mm_case(const OpSpec& spec, InputKind kind, uint64_t seed) {
  const auto& p = spec.get<ir::ScaledGemmParams>();
  HostTensor b = column_major(DType::kI8, p.k, p.n);
  fill_int8(b, kind, seed);
  HostTensor scales = HostTensor::zeros(DType::kF32, {1, p.per_channel ? p.n : 1});
  fill_scales(scales, kind, seed + 1, 0.005, 0.05);
  OpCase c;
  c.tensors = {handler_for(spec), b, scales};
  c.present = {true, true, true};
  c.names = {"handler", "b", "b_scales"};
  c.outputs = {0};
  c.tolerances = {Tolerance::exact()};
  c.scalars = {32.0};
  return c;
}

Result<OpCase> scaled_mm_case(const OpSpec& spec, int64_t m, InputKind kind, uint64_t seed) {
  const auto& p = spec.get<ir::ScaledGemmParams>();
  const OpSpec create = OpSpec::make(OpKind::kCreateOnednnScaledMm, p);
  OpCase made = create_scaled_mm_case(create, kind, seed);
  KILN_RETURN_IF_ERROR(codegen::ref::run(create, made.args()));
  const HostTensor& b = made.tensors[1];
  const HostTensor& b_scales = made.tensors[2];
  HostTensor a = HostTensor::zeros(DType::kI8, {m, p.k});
  fill_int8(a, kind, seed + 2);
  const int64_t rows = p.dynamic ? m : 1;
  HostTensor a_scales = HostTensor::zeros(DType::kF32, {rows, 1});
  fill_scales(a_scales, kind, seed + 3, 0.01, 0.1);
  HostTensor azp, azp_adj;
  int64_t max_zp = 0;
  if (p.azp) {
    azp = HostTensor::zeros(DType::kI32, {rows, 1});
    fill_small_int(azp, seed + 4, -20, 20);
    for (int64_t i = 0; i < rows; ++i) max_zp = std::max(max_zp, int64_t(std::fabs(azp.get(i))));
    if (p.dynamic) {
      // azp_adj[n] = s_b[n] · Σ_k b[k, n], as the layer (and vLLM's test) computes it.
      azp_adj = HostTensor::zeros(DType::kF32, {1, p.n});
      for (int64_t n = 0; n < p.n; ++n) {
        double sum = 0;
        for (int64_t k = 0; k < p.k; ++k) sum += b.get(k * p.n + n);
        azp_adj.set(n, b_scales.get(p.per_channel ? n : 0) * sum);
      }
    }
  }
  HostTensor bias = HostTensor::zeros(p.out_dtype, {p.n});
  fill_uniform(bias, seed + 5, 0.0, 10.0);
  // The largest term magnitude: max|s_a| · max|s_b| · K · max|a − zp| · max|b|.
  double max_sa = 0, max_sb = 0, max_a = 0, max_b = 0;
  for (int64_t i = 0; i < a_scales.numel(); ++i)
    max_sa = std::max(max_sa, std::fabs(a_scales.get(i)));
  for (int64_t i = 0; i < b_scales.numel(); ++i)
    max_sb = std::max(max_sb, std::fabs(b_scales.get(i)));
  for (int64_t i = 0; i < a.numel(); ++i) max_a = std::max(max_a, std::fabs(a.get(i)));
  for (int64_t i = 0; i < b.numel(); ++i) max_b = std::max(max_b, std::fabs(b.get(i)));
  const double term = max_sa * max_sb * double(p.k) * (max_a + double(max_zp)) * max_b;
  const double rtol = p.out_dtype == DType::kBF16 ? 1.0 / 128 : 1e-3;
  OpCase c;
  c.tensors = {
      HostTensor::zeros(p.out_dtype, {m, p.n}), a, a_scales, azp, azp_adj, bias, made.tensors[0]};
  c.present = {true, true, true, p.azp, p.azp && p.dynamic, true, true};
  c.names = {"c", "a", "a_scales", "azp", "azp_adj", "bias", "handler"};
  c.outputs = {0};
  c.tolerances = {Tolerance::abs_rel(1e-6 * term, rtol)};
  return c;
}

}  // namespace

Result<OpCase> make_cpu_case(const OpSpec& spec, int64_t size, InputKind kind, uint64_t seed) {
  KILN_RETURN_IF_ERROR(validate(spec));
  switch (spec.op) {
    case OpKind::kCpuAttnGetSchedulerMetadata: return scheduler_case(spec, size, seed);
    case OpKind::kCpuAttnReshapeAndCache: return cache_write_case(spec, size, kind, seed);
    case OpKind::kCpuAttentionWithKvCache: return attention_case(spec, size, kind, seed);
    case OpKind::kCreateOnednnMm: return create_mm_case(spec, kind, seed);
    case OpKind::kOnednnMm: return mm_case(spec, size, kind, seed);
    case OpKind::kCreateOnednnScaledMm: return create_scaled_mm_case(spec, kind, seed);
    case OpKind::kOnednnScaledMm: return scaled_mm_case(spec, size, kind, seed);
    default:
      return Status(StatusCode::kUnsupported,
                    fmt::format("no op case for {} (not a cpu-family op)", op_name(spec.op)));
  }
}

std::vector<InputKind> cpu_input_kinds(OpKind op) {
  switch (op) {
    case OpKind::kCpuAttnGetSchedulerMetadata: return {InputKind::kNormal};
    // Byte copies: every value, specials included, must arrive unchanged.
    case OpKind::kCpuAttnReshapeAndCache:
    case OpKind::kCreateOnednnMm:
      return {InputKind::kNormal, InputKind::kSmallInt, InputKind::kEqual, InputKind::kAdversarial};
    // Softmax and sums of specials are NaN/inf on both sides but say nothing about accuracy.
    case OpKind::kCpuAttentionWithKvCache:
    case OpKind::kOnednnMm: return {InputKind::kNormal, InputKind::kSmallInt, InputKind::kEqual};
    default: return {InputKind::kNormal, InputKind::kSmallInt};  // int8 operands
  }
}

}  // namespace test
}  // namespace jit
