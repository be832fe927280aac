// Op cases of the attention family (spec/attention_ops.md, tolerances from spec/testing.md).
// The `size` argument of make_attention_case is, per op:
//   paged_attention_v1/v2            sequences (num_seqs)
//   merge_attn_states                tokens (T)
//   convert_vertical_slash_indexes*  batch entries (B), with 2 heads and 4 row blocks each
//   top_k_per_row_prefill/decode     rows (numRows)
#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "ir/params_attention.h"
#include "ir/params_cache.h"
#include "tests/harness/op_case_families.h"

namespace jit::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

void fill(HostTensor& t, InputKind kind, uint64_t seed) {
  switch (kind) {
    case InputKind::kNormal: fill_normal(t, seed); break;
    case InputKind::kSmallInt: fill_small_int(t, seed, -2, 2); break;
    case InputKind::kEqual: fill_equal(t, 0.75); break;
    case InputKind::kAdversarial: fill_adversarial(t, seed); break;
  }
}

}  // namespace

// The kernels form each logit scale·(q·k) + slope·(j − i) in fp32 (as vLLM's do), the ref in
// double. With ALiBi the logits reach B = max|slope|·(the largest key distance), hundreds at
// contexts of ~1000 keys (a negative slope puts a row's largest logits at its oldest keys, a
// bidirectional CPU attention's positive slopes at its newest), and their fp32 roundings (a
// few of 2^-24·B each) move every weight e^(s − m) by as much relative: the output by
// ~2^-24·B times the spread of the values. 1e-5 alone failed at 1.1-4x (randomized sweeps:
// session 27, paged attention at contexts of 450-1000 keys, |diff| up to 3e-5 at B ~ 300;
// session 28, bidirectional cpu_attention_with_kv_cache at heads 240-3648 and 128-256 tokens,
// |diff| up to 4.3e-5; head 240, the unrolled kernel, as the looped ones), so atol grows by
// 8·2^-24·B (1.4e-4 at B = 300; vLLM's own tests allow 1e-3).
Tolerance alibi_f32_tolerance(double bias) {
  return Tolerance::abs_rel(1e-5 + 8 * std::ldexp(bias, -24), 1e-5);
}

namespace {

// spec/testing.md: attention fp16 1e-3/1e-3, bf16 1e-2/1e-2, fp8 KV 3e-2/1e-2; f32 1e-5/1e-5.
Tolerance attention_tolerance(DType dtype, bool fp8_cache) {
  if (fp8_cache) return Tolerance::abs_rel(3e-2, 1e-2);
  switch (dtype) {
    case DType::kF16: return Tolerance::abs_rel(1e-3, 1e-3);
    case DType::kBF16: return Tolerance::abs_rel(1e-2, 1e-2);
    default: return Tolerance::abs_rel(1e-5, 1e-5);
  }
}

HostTensor i32_vector(const std::vector<int64_t>& values) {
  std::vector<double> v(values.begin(), values.end());
  return HostTensor::from_values(DType::kI32, {int64_t(values.size())}, v);
}

// ---- paged attention ------------------------------------------------------------------------

// num_seqs = size sequences with random lengths in [1, max_len], and the special ones first:
// a single-token sequence, a partial last page, an exact page multiple, an empty sequence (L = 0,
// zeros). Blocks are handed out in a shuffled order; block-table entries past a sequence's
// blocks are -1 and every cache slot no sequence owns (unused blocks, slots >= L of a last page)
// holds NaN, so reading one shows up as a NaN output. The query is a strided slice of a fused
// QKV buffer; q, k, v ~ N(0, 1) give the logits real spread (vLLM's U(-1/√D, 1/√D) would give
// an almost uniform softmax).
OpCase paged_attention_case(const OpSpec& spec, int64_t seqs, InputKind kind, uint64_t seed) {
  const auto& p = spec.get<ir::PagedAttentionParams>();
  const bool v2 = spec.op == OpKind::kPagedAttentionV2;
  const bool fp8 = p.kv != ir::KvCacheDtype::kAuto;
  const int64_t bs = p.block_size;
  const int64_t d = p.head_size;
  const int64_t x = ir::paged_key_x(p.dtype, p.kv);
  // Long enough for two or three v2 partitions, a few pages for v1.
  const int64_t max_len = v2 ? 2 * p.partition_size + bs / 2 + 1 : 3 * bs + bs / 2 + 1;
  std::mt19937_64 rng(seed);
  std::vector<int64_t> lens(static_cast<size_t>(seqs));
  for (int64_t s = 0; s < seqs; ++s) {
    switch (s) {
      case 0: lens[0] = 1; break;                                     // single token
      case 1: lens[1] = std::min(bs + (bs + 1) / 2, max_len); break;  // partial last page
      case 2: lens[2] = max_len - max_len % bs; break;                // whole pages
      case 3: lens[3] = 0; break;                                     // empty: zeros
      default: lens[size_t(s)] = std::uniform_int_distribution<int64_t>(1, max_len)(rng);
    }
  }
  if (seqs == 1) lens[0] = max_len;  // one sequence: make it long (v2: several partitions)
  const int64_t max_seq_len = std::max<int64_t>(*std::max_element(lens.begin(), lens.end()), 1);
  const int64_t width = (max_seq_len + bs - 1) / bs + 1;  // one spare entry per row
  int64_t used_blocks = 0;
  for (int64_t len : lens) used_blocks += (len + bs - 1) / bs;
  const int64_t blocks = used_blocks + 3;  // spare blocks that nobody owns
  std::vector<int64_t> order(static_cast<size_t>(blocks));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::shuffle(order.begin(), order.end(), rng);
  HostTensor tables = HostTensor::zeros(DType::kI32, {seqs, width});
  fill_equal(tables, -1);
  // owner[block * bs + t]: whether cache slot t of `block` holds a token.
  std::vector<bool> owned(size_t(blocks * bs), false);
  int64_t next = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t j = 0; j < lens[size_t(s)]; ++j) {
      if (j % bs == 0) tables.set(s * width + j / bs, double(order[size_t(next++)]));
      owned[size_t(int64_t(tables.get(s * width + j / bs)) * bs + j % bs)] = true;
    }
  }

  const DType cache_dtype =
      !fp8 ? p.dtype : (p.kv == ir::KvCacheDtype::kFp8E5m2 ? DType::kFp8E5m2 : DType::kFp8E4m3);
  const int64_t hkv = p.head_count_kv;
  HostTensor key_cache = HostTensor::zeros(cache_dtype, {blocks, hkv, d / x, bs, x});
  HostTensor value_cache = HostTensor::zeros(cache_dtype, {blocks, hkv, d, bs});
  fill(key_cache, kind, seed + 1);
  fill(value_cache, kind, seed + 2);
  // Flat index -> (block, slot): key [NB, H, D/x, BS, x], value [NB, H, D, BS].
  const int64_t per_block = hkv * d * bs;
  for (int64_t i = 0; i < key_cache.numel(); ++i) {
    if (!owned[size_t((i / per_block) * bs + (i / x) % bs)]) key_cache.set(i, kNan);
    if (!owned[size_t((i / per_block) * bs + i % bs)]) value_cache.set(i, kNan);
  }
  // The query as a slice of a fused [S, (Hq + 2 Hkv) * D] QKV buffer.
  const int64_t hq = p.head_count_q;
  HostTensor query = HostTensor::strided(p.dtype, {seqs, hq, d}, {(hq + 2 * hkv) * d, d, 1});
  fill(query, kind, seed + 3);
  HostTensor slopes;
  if (p.alibi) {
    slopes = HostTensor::zeros(DType::kF32, {hq});
    fill_normal(slopes, seed + 4, 0.0, 0.5);  // arbitrary, possibly negative (vLLM: N(0, 1))
  }
  // vLLM's ROCm test scales; with kv=auto they are passed but not read.
  HostTensor k_scale = HostTensor::from_values(DType::kF32, {1}, {fp8 ? 0.5 : 1.0});
  HostTensor v_scale = HostTensor::from_values(DType::kF32, {1}, {fp8 ? 0.25 : 1.0});

  OpCase c;
  c.tensors = {HostTensor::zeros(p.dtype, {seqs, hq, d})};
  c.names = {"out"};
  Tolerance tol = attention_tolerance(p.dtype, fp8);
  if (p.alibi && p.dtype == DType::kF32 && !fp8) {
    double max_slope = 0;
    for (int64_t h = 0; h < hq; ++h) max_slope = std::max(max_slope, std::abs(slopes.get(h)));
    tol = alibi_f32_tolerance(max_slope * double(max_seq_len - 1));
  }
  if (v2) {
    const int64_t parts = (max_seq_len + p.partition_size - 1) / p.partition_size;
    c.tensors.push_back(HostTensor::zeros(DType::kF32, {seqs, hq, parts}));
    c.tensors.push_back(HostTensor::zeros(DType::kF32, {seqs, hq, parts}));
    c.tensors.push_back(HostTensor::zeros(p.dtype, {seqs, hq, parts, d}));
    c.names.insert(c.names.end(), {"exp_sums", "max_logits", "tmp_out"});
    // The scratch is compared too (partitions p >= ceil(L / P) stay untouched in both); the
    // logits and exp sums are fp32 values of the same computation, held to the output's
    // tolerance.
    c.outputs = {0, 1, 2, 3};
    c.tolerances = {tol, tol, tol, tol};
  } else {
    c.outputs = {0};
    c.tolerances = {tol};
  }
  c.tensors.insert(c.tensors.end(), {query, key_cache, value_cache, tables, i32_vector(lens),
                                     slopes, k_scale, v_scale});
  c.names.insert(c.names.end(), {"query", "key_cache", "value_cache", "block_tables", "seq_lens",
                                 "alibi_slopes", "k_scale", "v_scale"});
  c.present.assign(c.tensors.size(), true);
  c.present[c.tensors.size() - 3] = p.alibi;
  // scale, max_seq_len, then the block-sparse integers: tp_rank 0, 2 local sparse blocks,
  // vertical stride 3, sparse blocks of two cache blocks, sliding step +1 or -1 (per kv head).
  const double sliding_step = seed % 2 == 0 ? 1.0 : -1.0;
  c.scalars = {
      1.0 / std::sqrt(double(d)), double(max_seq_len), 0.0, 2.0, 3.0, double(2 * bs), sliding_step};
  return c;
}

// ---- merge_attn_states ----------------------------------------------------------------------

// T tokens; the inputs have a head stride of D + 4 (an MLA-style slice); LSEs ~ N(0, 1) with
// about 10% +inf in each of prefix and suffix, a few -inf, and token 0 of head 0 empty on both
// sides (the both-empty path); adversarial inputs add NaN LSEs with payloads.
// prefill_tokens_with_context cycles over None, T/2 and T by seed.
OpCase merge_case(const OpSpec& spec, int64_t tokens, InputKind kind, uint64_t seed) {
  const auto& p = spec.get<ir::MergeAttnStatesParams>();
  const int64_t h = p.head_count;
  const int64_t d = p.head_size;
  const int64_t head_stride = d + 4;
  HostTensor prefix =
      HostTensor::strided(p.dtype, {tokens, h, d}, {h * head_stride, head_stride, 1});
  HostTensor suffix =
      HostTensor::strided(p.dtype, {tokens, h, d}, {h * head_stride, head_stride, 1});
  fill(prefix, kind, seed);
  fill(suffix, kind, seed + 1);
  HostTensor prefix_lse = HostTensor::zeros(DType::kF32, {h, tokens});
  HostTensor suffix_lse = HostTensor::zeros(DType::kF32, {h, tokens});
  fill_normal(prefix_lse, seed + 2);
  fill_normal(suffix_lse, seed + 3);
  std::mt19937_64 rng(seed + 4);
  std::uniform_int_distribution<int> pick(0, 19);
  for (int64_t i = 0; i < h * tokens; ++i) {
    const int a = pick(rng);
    if (a < 2) prefix_lse.set(i, kInf);
    if (a >= 2 && a < 4) suffix_lse.set(i, kInf);
    if (a == 4) prefix_lse.set(i, -kInf);
    if (a == 5) suffix_lse.set(i, -kInf);
  }
  if (tokens > 0) {
    prefix_lse.set(0, kInf);
    suffix_lse.set(0, -kInf);
  }
  if (kind == InputKind::kAdversarial) {
    // NaN LSEs with a full, a tiny and a negative payload on either side (the head's weights
    // and outputs are NaN then; a payload must not leak into a rounding on the bits).
    const uint64_t nans[] = {0x7FFFFFFF, 0x7F800001, 0xFFFFFFFF, 0x7FC00001};
    for (int64_t i = 3, n = 0; i < h * tokens; i += 7, ++n) {
      (n % 2 == 0 ? prefix_lse : suffix_lse).set_bits(i, nans[n % 4]);
    }
  }
  const bool fp8 = p.out_dtype == DType::kFp8E4m3;
  OpCase c;
  c.tensors = {HostTensor::zeros(p.out_dtype, {tokens, h, d}),
               HostTensor::zeros(DType::kF32, {h, tokens}),
               prefix,
               prefix_lse,
               suffix,
               suffix_lse,
               HostTensor::from_values(DType::kF32, {1}, {0.05})};  // vLLM's test scale
  c.names = {"output",        "output_lse", "prefix_output", "prefix_lse",
             "suffix_output", "suffix_lse", "output_scale"};
  c.present = {true, p.output_lse, true, true, true, true, fp8};
  // fp8: one ulp of e4m3 (x / scale may sit at a rounding boundary that an fp32 kernel and
  // the double ref resolve differently); the LSE is fp32 math on fp32 inputs.
  const Tolerance out_tol = fp8 ? Tolerance::ulp(1) : attention_tolerance(p.dtype, false);
  if (p.output_lse) {
    c.outputs = {0, 1};
    c.tolerances = {out_tol, Tolerance::abs_rel(1e-5, 1e-5)};
  } else {
    c.outputs = {0};
    c.tolerances = {out_tol};
  }
  const int64_t choices[] = {-1, tokens / 2, tokens};
  c.scalars = {double(choices[seed % 3])};
  return c;
}

// ---- convert_vertical_slash_indexes(_mergehead) ----------------------------------------------

// B = size batch entries, 2 heads, context_size of 3.5 row blocks (R = 4, a partial last one).
// Entry 0 has the full query length, entry 1 (when B >= 3) none (its rows stay untouched);
// causal: kv = q + a random prefix; non-causal: a random kv length. Verticals are sorted,
// distinct where the keys allow it, inside [0, kv); slashes sorted descending, >= 0, with the
// main diagonal 0 in even entries. The outputs start as -7 everywhere, so a write to an
// untouched row or past a row's count shows up in the exact comparison.
OpCase vertical_slash_case(const OpSpec& spec, int64_t batch, uint64_t seed) {
  const auto& p = spec.get<ir::VerticalSlashParams>();
  const bool mergehead = spec.op == OpKind::kConvertVerticalSlashIndexesMergehead;
  constexpr int64_t kHeads = 2;
  constexpr int64_t kNnzV = 6;
  constexpr int64_t kNnzS = 4;
  const int64_t bm = p.block_m;
  const int64_t context = 3 * bm + bm / 2;
  const int64_t rows = (context + bm - 1) / bm;
  std::mt19937_64 rng(seed);
  const auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<int64_t> q_lens(static_cast<size_t>(batch)), kv_lens(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q = b == 0 ? context : (b == 1 && batch >= 3 ? 0 : uniform(1, context));
    q_lens[size_t(b)] = q;
    kv_lens[size_t(b)] = p.causal ? q + uniform(0, 2 * bm) : uniform(1, 3 * bm);
  }
  HostTensor vertical = HostTensor::zeros(DType::kI32, {batch, kHeads, kNnzV});
  HostTensor slash = HostTensor::zeros(DType::kI32, {batch, kHeads, kNnzS});
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t kv = std::max<int64_t>(kv_lens[size_t(b)], 1);
    for (int64_t h = 0; h < kHeads; ++h) {
      std::vector<int64_t> v(kNnzV), s(kNnzS);
      if (kv >= kNnzV) {
        // Distinct columns: a sorted sample of [0, kv).
        std::vector<int64_t> all(static_cast<size_t>(kv));
        std::iota(all.begin(), all.end(), int64_t(0));
        std::shuffle(all.begin(), all.end(), rng);
        std::copy(all.begin(), all.begin() + kNnzV, v.begin());
      } else {
        for (int64_t& col : v) col = uniform(0, kv - 1);
      }
      std::sort(v.begin(), v.end());
      for (int64_t& offset : s) offset = uniform(0, kv + bm);
      if (b % 2 == 0) s[0] = 0;
      std::sort(s.begin(), s.end(), std::greater<>());
      for (int64_t i = 0; i < kNnzV; ++i)
        vertical.set((b * kHeads + h) * kNnzV + i, double(v[size_t(i)]));
      for (int64_t i = 0; i < kNnzS; ++i)
        slash.set((b * kHeads + h) * kNnzS + i, double(s[size_t(i)]));
    }
  }
  OpCase c;
  const auto untouched = [](std::vector<int64_t> sizes) {
    HostTensor t = HostTensor::zeros(DType::kI32, std::move(sizes));
    fill_equal(t, -7);
    return t;
  };
  c.tensors = {untouched({batch, kHeads, rows}),
               untouched({batch, kHeads, rows, kNnzS}),
               untouched({batch, kHeads, rows}),
               untouched({batch, kHeads, rows, kNnzV}),
               i32_vector(q_lens),
               i32_vector(kv_lens),
               vertical,
               slash};
  c.names = {"block_count", "block_offset", "column_count",     "column_index",
             "q_seqlens",   "kv_seqlens",   "vertical_indexes", "slash_indexes"};
  if (mergehead) {
    c.tensors.push_back(i32_vector({kNnzV, 1 + int64_t(seed % kNnzV)}));
    c.tensors.push_back(i32_vector({1 + int64_t(seed % kNnzS), kNnzS}));
    c.names.insert(c.names.end(), {"vertical_indices_count", "slash_indices_count"});
  }
  c.present.assign(c.tensors.size(), true);
  c.outputs = {0, 1, 2, 3};
  c.tolerances.assign(4, Tolerance::exact());
  c.scalars = {double(context)};
  return c;
}

// ---- top_k_per_row_prefill / decode -----------------------------------------------------------

// `count` distinct fp32 values in a random order. kNormal: N(0, 1) with duplicates nudged apart
// (so the top-k set is unique and the element-wise comparison of the canonical ascending-index
// output is exact). kAdversarial: a narrow band [10, 10.2) (about 2e5 representable values)
// plus one each of +inf, -inf, -0, the smallest subnormal and ±FLT_MAX when the row has room.
std::vector<float> distinct_values(int64_t count, InputKind kind, std::mt19937_64& rng) {
  std::vector<float> values(static_cast<size_t>(count));
  if (kind == InputKind::kAdversarial) {
    std::uniform_real_distribution<float> band(10.0f, 10.2f);
    for (float& v : values) v = band(rng);
  } else {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : values) v = normal(rng);
  }
  std::sort(values.begin(), values.end());
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] <= values[i - 1]) values[i] = std::nextafter(values[i - 1], float(kInf));
  }
  if (kind == InputKind::kAdversarial) {
    const float specials[] = {float(kInf), -float(kInf), -0.0f, std::ldexp(1.0f, -149),
                              FLT_MAX,     -FLT_MAX};
    for (size_t i = 0; i < std::size(specials) && i < values.size(); ++i) {
      values[i] = specials[i];
    }
  }
  std::shuffle(values.begin(), values.end(), rng);
  return values;
}

// numRows = size; N = 2k + 5 columns. Row lengths cycle over 0, 1, k - 1, k, k + 1 and a random
// one; prefill rows start at a random column. Logits outside a row's range are -inf (even rows)
// or NaN (odd rows): never read. Odd seeds use stride1 = 2. The indices start as -5, and the
// ref's output order (ascending positions, the same canonical order as a row with len <= k) is
// what a backend must produce to match element-wise; the distinct values make the set unique.
OpCase top_k_case(const OpSpec& spec, int64_t rows, InputKind kind, uint64_t seed) {
  const int64_t k = spec.get<ir::TopKParams>().top_k;
  const bool decode = spec.op == OpKind::kTopKPerRowDecode;
  const int64_t columns = 2 * k + 5;
  const int64_t stride1 = seed % 2 == 0 ? 1 : 2;
  const int64_t stride0 = columns * stride1 + 3;
  std::mt19937_64 rng(seed);
  const auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const auto length_for = [&](int64_t i, int64_t room) {
    const int64_t choices[] = {0, 1, k - 1, k, k + 1, uniform(0, room)};
    return std::min(choices[i % 6], room);
  };
  const int64_t next_n = decode && rows % 2 == 0 ? 2 : 1;
  std::vector<int64_t> starts(static_cast<size_t>(rows), 0), ends(static_cast<size_t>(rows), 0),
      seq_lens;
  if (decode) {
    // Request b's rows end at L - next_n + i + 1 (clamped at 0); L = 0 gives empty rows.
    for (int64_t b = 0; b < rows / next_n; ++b) {
      const int64_t len = length_for(b, columns);
      seq_lens.push_back(len);
      for (int64_t i = 0; i < next_n; ++i) {
        ends[size_t(b * next_n + i)] = std::max<int64_t>(len - next_n + i + 1, 0);
      }
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      starts[size_t(r)] = uniform(0, columns / 4);
      ends[size_t(r)] = starts[size_t(r)] + length_for(r, columns - starts[size_t(r)]);
    }
  }
  HostTensor logits = HostTensor::strided(DType::kF32, {rows, columns}, {stride0, stride1});
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> values =
        distinct_values(ends[size_t(r)] - starts[size_t(r)], kind, rng);
    for (int64_t j = 0; j < columns; ++j) {
      const bool inside = j >= starts[size_t(r)] && j < ends[size_t(r)];
      logits.set(r * columns + j, inside ? double(values[size_t(j - starts[size_t(r)])])
                                         : (r % 2 == 0 ? -kInf : kNan));
    }
  }
  HostTensor indices = HostTensor::zeros(DType::kI32, {rows, k});
  fill_equal(indices, -5);
  OpCase c;
  if (decode) {
    c.tensors = {logits, i32_vector(seq_lens), indices};
    c.names = {"logits", "seq_lens", "indices"};
    c.outputs = {2};
    c.scalars = {double(next_n), double(rows), double(stride0), double(stride1)};
  } else {
    c.tensors = {logits, i32_vector(starts), i32_vector(ends), indices};
    c.names = {"logits", "rowStarts", "rowEnds", "indices"};
    c.outputs = {3};
    c.scalars = {double(rows), double(stride0), double(stride1)};
  }
  c.present.assign(c.tensors.size(), true);
  c.tolerances = {Tolerance::exact()};
  return c;
}

}  // namespace

Result<OpCase> make_attention_case(const OpSpec& spec, int64_t size, InputKind kind,
                                   uint64_t seed) {
  if (Status s = validate(spec); !s.is_ok()) return s;
  if (size < 0)
    return invalid_argument(fmt::format("{}: negative case size {}", op_name(spec.op), size));
  switch (spec.op) {
    case OpKind::kPagedAttentionV1:
    case OpKind::kPagedAttentionV2: return paged_attention_case(spec, size, kind, seed);
    case OpKind::kMergeAttnStates: return merge_case(spec, size, kind, seed);
    case OpKind::kConvertVerticalSlashIndexes:
    case OpKind::kConvertVerticalSlashIndexesMergehead:
      return vertical_slash_case(spec, size, seed);
    case OpKind::kTopKPerRowPrefill:
    case OpKind::kTopKPerRowDecode: return top_k_case(spec, size, kind, seed);
    default:
      return Status(StatusCode::kInternal,
                    fmt::format("{} is not in the attention family", op_name(spec.op)));
  }
}

std::vector<InputKind> attention_input_kinds(OpKind op) {
  switch (op) {
    // Adversarial values (NaN, ±inf keys) make every output NaN: nothing to compare.
    case OpKind::kPagedAttentionV1:
    case OpKind::kPagedAttentionV2:
    case OpKind::kMergeAttnStates:
      return {InputKind::kNormal, InputKind::kSmallInt, InputKind::kEqual};
    // Top-k: distinct normals, and a narrow band with ±inf, -0, a subnormal and ±FLT_MAX. Ties
    // (all-equal rows) have more than one right answer, which an element-wise compare can't take.
    case OpKind::kTopKPerRowPrefill:
    case OpKind::kTopKPerRowDecode: return {InputKind::kNormal, InputKind::kAdversarial};
    // The index converters read only integers; the kind does not change their input.
    default: return {InputKind::kNormal};
  }
}

}  // namespace jit::test
