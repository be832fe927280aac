// Reference paged_attention_v1/v2, merge_attn_states, convert_vertical_slash_indexes(_mergehead)
// and top_k_per_row_prefill/decode, written from spec/attention_ops.md §2-§6. Scalar and naive:
// this is the oracle the generated kernels are compared with.
//
// Precision decisions (the spec fixes what is rounded where the data is stored; where it
// leaves room, the ref takes the more accurate side so that backends are measured against the
// math, not against another approximation):
//   paged attention  q read exactly; an fp8 cache element is dequantised exactly as §1.2 says,
//                    K = rnd_T(float(fp8(b)) * s) (fp32 product, then rounded to the query
//                    type); z_j = float(scale) * Σ_d q_d K_d + slope * (j - L + 1) in double;
//                    p_j = exp(z_j - m) and out = Σ p_j V_j / (S + 1e-6) in double, rounded
//                    once to T (vLLM rounds p_j to T before P·V; the tolerance covers that).
//                    v2 writes max_logits and exp_sums as fp32 and tmp_out rounded to T, and
//                    its reduce reads back exactly those stored values (§3.2).
//   merge            a = e^{p-M}, b = e^{s-M}, out = x·(a/Z) + y·(b/Z) and lse = log Z + M in
//                    double; one rounding to the output type (fp8: of x · float(1/scale),
//                    clamped to ±448).
//   index ops        exact integers.
// Rounding from double goes through round-to-odd fp32 so that f16/bf16/fp8 get the correctly
// rounded value (see round_to_odd_f32). Compiled with -ffp-contract=off (see CMakeLists.txt).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "codegen/ref/ref_elements.h"
#include "codegen/ref/ref_families.h"
#include "ir/check_args.h"
#include "ir/numeric.h"
#include "ir/params_attention.h"
#include "ir/params_cache.h"

namespace jit::codegen::ref {
namespace {

// ---- element access ------------------------------------------------------------------------

int32_t load_i32(const Tensor& t, int64_t index) {
  int32_t value;
  std::memcpy(&value, bytes(t) + index * 4, 4);
  return value;
}

void store_i32(const Tensor& t, int64_t index, int64_t value) {
  const auto v = int32_t(value);
  std::memcpy(bytes(t) + index * 4, &v, 4);
}

// ---- paged attention ------------------------------------------------------------------------

// Everything one (sequence, query head) needs to read its keys and values.
struct PagedCall {
  ir::PagedAttentionParams p;
  const Tensor* query = nullptr;
  const Tensor* key_cache = nullptr;
  const Tensor* value_cache = nullptr;
  const Tensor* block_tables = nullptr;
  const Tensor* alibi_slopes = nullptr;
  float k_scale = 1;
  float v_scale = 1;
  float scale = 1;
  int64_t x = 0;  // key layout: x consecutive head dims per 16 bytes
  // Block-sparse integers (§2.5); vert == 0 when the mode is off.
  int64_t tp_rank = 0, local = 0, vert = 0, sparse_block = 0, step = 0;
};

// Cache element `offset` (elements), dequantised per §1.2: exact for kv=auto, else
// rnd_T(float(fp8(b)) * s).
float load_cache(const PagedCall& c, const Tensor& cache, int64_t offset, float s) {
  if (c.p.kv == ir::KvCacheDtype::kAuto) return load(c.p.dtype, bytes(cache), offset);
  const auto code = static_cast<uint8_t>(bytes(cache)[offset]);
  const float f = c.p.kv == ir::KvCacheDtype::kFp8E5m2 ? numeric::fp8_e5m2_to_f32(code)
                                                       : numeric::fp8_e4m3_to_f32(code);
  return rnd(c.p.dtype, f * s);
}

// Block-sparse visibility of token j (§2.5): sparse block kb = j / bs is attended iff
// (kb + off) % vert == 0 or kb > qb - local, qb = (L - 1) / bs the query's sparse block, and
// off = global query head * step + 1 (step >= 0) or global kv head * -step + 1 (step < 0).
bool attended(const PagedCall& c, int64_t h, int64_t g, int64_t seq_len, int64_t j) {
  if (c.vert == 0) return true;
  const int64_t qb = (seq_len - 1) / c.sparse_block;
  const int64_t off = c.step >= 0 ? (c.tp_rank * c.p.head_count_q + h) * c.step + 1
                                  : (c.tp_rank * c.p.head_count_kv + g) * -c.step + 1;
  const int64_t kb = j / c.sparse_block;
  return (kb + off) % c.vert == 0 || kb > qb - c.local;
}

// One partition's softmax state over tokens [t0, t1) of a sequence of length L:
//   m = max_j z_j (from -FLT_MAX; masked tokens have z = -FLT_MAX),
//   S = Σ_j e^{z_j - m} (masked tokens included: e^0 = 1 when everything is masked, QUIRK),
//   acc[d] = Σ_{attended j} e^{z_j - m} V_j[d].
struct Partial {
  double max_logit = -double(FLT_MAX);
  double exp_sum = 0;
  std::vector<double> acc;
};

Partial attend(const PagedCall& c, int64_t s, int64_t h, int64_t seq_len, int64_t t0, int64_t t1) {
  const int64_t d_count = c.p.head_size;
  const int64_t bs = c.p.block_size;
  const int64_t g = h / (c.p.head_count_q / c.p.head_count_kv);
  const int64_t block_stride = c.key_cache->stride(0);
  const int64_t head_stride = c.key_cache->stride(1);
  const std::byte* q =
      bytes(*c.query) + (s * c.query->stride(0) + h * d_count) * int64_t(dtype_size(c.p.dtype));
  const double slope = c.p.alibi ? double(load(DType::kF32, bytes(*c.alibi_slopes), h)) : 0.0;
  const auto* table = c.block_tables->data_as<const int32_t>() + s * c.block_tables->size(1);

  // Base offset (elements) of token j's block and kv head; pb widened to int64.
  const auto token_base = [&](int64_t j) {
    return int64_t(table[j / bs]) * block_stride + g * head_stride;
  };
  std::vector<double> logits(size_t(t1 - t0));
  std::vector<bool> visible(size_t(t1 - t0));
  Partial part;
  for (int64_t j = t0; j < t1; ++j) {
    const size_t i = size_t(j - t0);
    visible[i] = attended(c, h, g, seq_len, j);
    if (!visible[i]) {
      logits[i] = -double(FLT_MAX);  // keys of a masked block are not read
    } else {
      const int64_t base = token_base(j);
      const int64_t t = j % bs;
      double dot = 0;
      for (int64_t d = 0; d < d_count; ++d) {
        // key: [.., d / x, t, d % x]
        const int64_t offset = base + (d / c.x) * bs * c.x + t * c.x + d % c.x;
        dot +=
            double(load(c.p.dtype, q, d)) * double(load_cache(c, *c.key_cache, offset, c.k_scale));
      }
      // ALiBi distance term: 0 for the newest token, negative for older ones.
      logits[i] = double(c.scale) * dot + slope * double(j - seq_len + 1);
    }
    part.max_logit = std::max(part.max_logit, logits[i]);
  }
  part.acc.assign(size_t(d_count), 0.0);
  for (int64_t j = t0; j < t1; ++j) {
    const size_t i = size_t(j - t0);
    const double weight = std::exp(logits[i] - part.max_logit);
    part.exp_sum += weight;
    if (!visible[i]) continue;  // values of masked blocks are not read
    const int64_t base = token_base(j);
    for (int64_t d = 0; d < d_count; ++d) {
      // value: [.., d, t]
      part.acc[size_t(d)] +=
          weight * double(load_cache(c, *c.value_cache, base + d * bs + j % bs, c.v_scale));
    }
  }
  return part;
}

// paged_attention_v1 (§2.3) and v2 (§3.2).
Status paged_attention(const OpSpec& spec, const KernelArgs& args) {
  const bool v2 = spec.op == OpKind::kPagedAttentionV2;
  const int first = v2 ? 4 : 1;
  PagedCall c;
  c.p = spec.get<ir::PagedAttentionParams>();
  c.query = &args.tensor(first);
  c.key_cache = &args.tensor(first + 1);
  c.value_cache = &args.tensor(first + 2);
  c.block_tables = &args.tensor(first + 3);
  const Tensor& seq_lens = args.tensor(first + 4);
  c.alibi_slopes = &args.tensor(first + 5);
  if (c.p.kv != ir::KvCacheDtype::kAuto) {
    c.k_scale = load(DType::kF32, bytes(args.tensor(first + 6)), 0);
    c.v_scale = load(DType::kF32, bytes(args.tensor(first + 7)), 0);
  }
  c.scale = static_cast<float>(args.scalar(0));  // a double in the schema, used as float
  const auto max_seq_len = int64_t(args.scalar(1));
  if (c.p.blocksparse) {
    c.tp_rank = int64_t(args.scalar(2));
    c.local = int64_t(args.scalar(3));
    c.vert = int64_t(args.scalar(4));
    c.sparse_block = int64_t(args.scalar(5));
    c.step = int64_t(args.scalar(6));
  }
  c.x = ir::paged_key_x(c.p.dtype, c.p.kv);
  KILN_RETURN_IF_ERROR(ir::check_paged_sequences(op_name(spec.op), seq_lens, *c.block_tables,
                                                 c.p.block_size, c.key_cache->size(0),
                                                 max_seq_len));

  const DType dt = c.p.dtype;
  const int64_t heads = c.p.head_count_q;
  const int64_t d_count = c.p.head_size;
  const int64_t part_size = c.p.partition_size;
  const int64_t parts = v2 ? (max_seq_len + part_size - 1) / part_size : 0;
  std::byte* out = bytes(args.tensor(0));
  for (int64_t s = 0; s < seq_lens.size(0); ++s) {
    const int64_t len = load_i32(seq_lens, s);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t row = s * heads + h;
      std::vector<double> result(size_t(d_count), 0.0);  // L <= 0: zeros (KILN)
      if (!v2 && len > 0) {
        const Partial part = attend(c, s, h, len, 0, len);
        for (int64_t d = 0; d < d_count; ++d) {
          result[size_t(d)] = part.acc[size_t(d)] / (part.exp_sum + 1e-6);
        }
      } else if (v2 && len > 0) {
        // Phase 1: partitions [p·P, min((p+1)·P, L)) for p < n = ceil(L / P); entries p >= n
        // are neither written nor read.
        const int64_t n = (len + part_size - 1) / part_size;
        std::byte* exp_sums = bytes(args.tensor(1));
        std::byte* max_logits = bytes(args.tensor(2));
        std::byte* tmp_out = bytes(args.tensor(3));
        for (int64_t pi = 0; pi < n; ++pi) {
          const Partial part =
              attend(c, s, h, len, pi * part_size, std::min((pi + 1) * part_size, len));
          store_rounded(DType::kF32, max_logits, row * parts + pi, part.max_logit);
          store_rounded(DType::kF32, exp_sums, row * parts + pi, part.exp_sum);
          for (int64_t d = 0; d < d_count; ++d) {
            store_rounded(dt, tmp_out, (row * parts + pi) * d_count + d,
                          part.acc[size_t(d)] / (part.exp_sum + 1e-6));
          }
        }
        // Phase 2, from the stored values: one partition is copied; otherwise
        // w_p = S_p e^{m_p - M}, out = Σ_p tmp_p w_p / (Σ_p w_p + 1e-6).
        if (n == 1) {
          for (int64_t d = 0; d < d_count; ++d) {
            result[size_t(d)] = load(dt, tmp_out, row * parts * d_count + d);
          }
        } else {
          double max_all = -std::numeric_limits<double>::infinity();
          for (int64_t pi = 0; pi < n; ++pi) {
            max_all = std::max(max_all, double(load(DType::kF32, max_logits, row * parts + pi)));
          }
          double weight_sum = 0;
          for (int64_t pi = 0; pi < n; ++pi) {
            const double w =
                double(load(DType::kF32, exp_sums, row * parts + pi)) *
                std::exp(double(load(DType::kF32, max_logits, row * parts + pi)) - max_all);
            weight_sum += w;
            for (int64_t d = 0; d < d_count; ++d) {
              result[size_t(d)] += w * double(load(dt, tmp_out, (row * parts + pi) * d_count + d));
            }
          }
          for (double& v : result) v /= weight_sum + 1e-6;
        }
      }
      for (int64_t d = 0; d < d_count; ++d)
        store_rounded(dt, out, row * d_count + d, result[size_t(d)]);
    }
  }
  return Status::ok();
}

// ---- merge_attn_states ----------------------------------------------------------------------

// §4.3 per (token t, head h); tensors {output, output_lse, prefix_output, prefix_lse,
// suffix_output, suffix_lse, output_scale}, scalar prefill_tokens_with_context (< 0: None).
Status merge_attn_states(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ir::MergeAttnStatesParams>();
  const Tensor& output = args.tensor(0);
  const Tensor& output_lse = args.tensor(1);
  const Tensor& prefix = args.tensor(2);
  const Tensor& suffix = args.tensor(4);
  const std::byte* prefix_lse = bytes(args.tensor(3));
  const std::byte* suffix_lse = bytes(args.tensor(5));
  const int64_t tokens = prefix.size(0);
  const int64_t heads = p.head_count;
  const bool fp8 = p.out_dtype == DType::kFp8E4m3;
  // fp8: q = fp8(clamp(x · (1/scale), ±448)), 1/scale formed once in fp32.
  const double inv_scale = fp8 ? double(1.0f / load(DType::kF32, bytes(args.tensor(6)), 0)) : 1.0;
  const double with_context = args.scalar(0) < 0 ? double(tokens) : args.scalar(0);
  const auto put = [&](int64_t t, int64_t h, int64_t d, double v) {
    if (fp8) v = std::clamp(v * inv_scale, -448.0, 448.0);  // NaN passes through
    store_rounded(p.out_dtype, bytes(output), t * output.stride(0) + h * output.stride(1) + d, v);
  };
  const auto input = [&](const Tensor& t, int64_t token, int64_t h, int64_t d) {
    return double(load(p.dtype, bytes(t), token * t.stride(0) + h * t.stride(1) + d));
  };
  // +inf means "empty" (FlashAttention-2 for zero-length sequences), like -inf.
  const auto sanitize = [](double lse) {
    return std::isinf(lse) ? -std::numeric_limits<double>::infinity() : lse;
  };
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t lse_index = h * tokens + t;
      const double raw_s = load(DType::kF32, suffix_lse, lse_index);
      double lse = 0;
      if (double(t) >= with_context) {
        // No prefix for this token: copy the suffix, and its LSE raw (not sanitized).
        for (int64_t d = 0; d < p.head_size; ++d) put(t, h, d, input(suffix, t, h, d));
        lse = raw_s;
      } else {
        const double lp = sanitize(load(DType::kF32, prefix_lse, lse_index));
        const double ls = sanitize(raw_s);
        const double m = std::fmax(lp, ls);  // a NaN operand is ignored if the other is not
        if (m == -std::numeric_limits<double>::infinity()) {
          // Both empty: the prefix (zeros by contract) and an empty LSE.
          for (int64_t d = 0; d < p.head_size; ++d) put(t, h, d, input(prefix, t, h, d));
          lse = m;
        } else {
          const double a = std::exp(lp - m);
          const double b = std::exp(ls - m);
          const double z = a + b;
          for (int64_t d = 0; d < p.head_size; ++d) {
            put(t, h, d, input(prefix, t, h, d) * (a / z) + input(suffix, t, h, d) * (b / z));
          }
          lse = std::log(z) + m;
        }
      }
      if (p.output_lse) store_rounded(DType::kF32, bytes(output_lse), lse_index, lse);
    }
  }
  return Status::ok();
}

// ---- convert_vertical_slash_indexes(_mergehead) ----------------------------------------------

// The outputs of one (batch, head, row block).
struct RowBlockIndexes {
  std::vector<int64_t> blocks;
  std::vector<int64_t> columns;
};

// §5.3 for the row block [r0, r0 + bm) of one (batch, head): a sequential walk that merges the
// ascending verticals `v` with the key ranges of the descending slashes `s`. shift = kv - q
// (causal) or kv (not causal); a slash offset o covers the columns ending at
// E(o) = max(r1 + shift - o, bm). Returns false if the walk does not terminate (impossible for
// verticals < kv_len, which the caller validated).
bool convert_row_block(const int32_t* v, int64_t nv, const int32_t* s, int64_t ns, int64_t q_len,
                       int64_t kv_len, int64_t r0, int64_t bm, int64_t bn, bool causal,
                       RowBlockIndexes& dst) {
  const int64_t r1 = r0 + bm;
  const int64_t shift = causal ? kv_len - q_len : kv_len;
  const auto range_end_of = [&](int64_t offset) { return std::max(r1 + shift - offset, bm); };
  // Emits block starts rs, rs + bn, ... below min(re, kv_len); nothing when rs >= kv_len.
  const auto flush = [&](int64_t rs, int64_t re) {
    for (int64_t start = rs; rs < kv_len && start < std::min(re, kv_len); start += bn) {
      dst.blocks.push_back(start);
    }
  };
  int64_t vi = 1, si = 1;  // entries consumed so far (the first of each is read up front)
  int64_t vert = v[0];
  int64_t slash = s[0];
  // Skip diagonals that lie entirely left of column 0 for these rows.
  while (slash >= r1 + shift && si < ns) slash = s[si++];
  int64_t rs = 0, re = 0;
  if (slash > r1 + shift) {
    // No usable slash: a sentinel range just right of the frontier (non-causal: of kv_len).
    rs = causal ? r1 + shift : kv_len;
    re = rs + bn;
  } else {
    re = range_end_of(slash);
    rs = re - bm;
  }
  bool slashes_done = false;
  // Every step consumes a vertical or a slash, or ends the walk, except the one reset of the
  // range in the non-causal case: nv + ns + 2 steps bound a terminating walk.
  for (int64_t steps = 0; steps <= nv + ns + 2; ++steps) {
    if (vert < re) {
      // A vertical inside the current range is already covered.
      if (vert < rs) dst.columns.push_back(vert);
      vert = vi < nv ? v[vi++] : r1 + bn + shift;  // the sentinel is past every range end
      continue;
    }
    // The next vertical is at/after the range end: bring in the next slash, if any.
    const bool slash_left = si < ns && (causal || s[si] >= r0);
    if (slash_left) {
      const int64_t end = range_end_of(s[si++]);
      if (slashes_done) continue;
      if (end > re + bm) {
        flush(rs, re);
        rs = end - bm;
        re = end;
      } else if (end > re) {
        re += bm;  // extend by one block, not to `end`
      }
      continue;
    }
    if (vi == nv || causal) {
      // Non-causal: the last vertical is kept as a column when it lies inside the keys.
      if (vi == nv && !causal && vert < kv_len) dst.columns.push_back(vert);
      flush(rs, re);
      return true;
    }
    // Non-causal, verticals remain: close the range and take the rest as single columns.
    flush(rs, re);
    rs = kv_len;
    re = kv_len + bn;
    slashes_done = true;
  }
  return false;
}

// §5: tensors {block_count, block_offset, column_count, column_index, q_seqlens, kv_seqlens,
// vertical_indexes, slash_indexes[, vertical_indices_count, slash_indices_count]}, scalar
// context_size. Row blocks with r0 >= q_seqlens[b] are left untouched.
Status convert_vertical_slash(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ir::VerticalSlashParams>();
  const std::string_view op = op_name(spec.op);
  const bool mergehead = spec.op == OpKind::kConvertVerticalSlashIndexesMergehead;
  const Tensor& q_seqlens = args.tensor(4);
  const Tensor& kv_seqlens = args.tensor(5);
  const Tensor& vertical = args.tensor(6);
  const Tensor& slash = args.tensor(7);
  const int64_t batch = slash.size(0);
  const int64_t heads = slash.size(1);
  const int64_t nnz_s = slash.size(2);
  const int64_t nnz_v = vertical.size(2);
  const int64_t rows = args.tensor(0).size(2);

  // Validation before any write: lengths, per-head counts, the slashes each head uses >= 0 and
  // its verticals inside [0, kv_len) (a larger one makes vLLM's non-causal walk spin forever).
  Result<ir::VerticalSlashCounts> counts = ir::check_vertical_slash_indexes(op, p, mergehead, args);
  if (!counts) return counts.status();
  const std::vector<int64_t>& count_v = counts->vertical;
  const std::vector<int64_t>& count_s = counts->slash;

  // Compute everything first, then write: the walk's own failure leaves the outputs intact.
  struct Unit {
    int64_t index;  // (b * heads + h) * rows + m
    RowBlockIndexes result;
  };
  std::vector<Unit> units;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q_len = load_i32(q_seqlens, b);
    const int64_t kv_len = load_i32(kv_seqlens, b);
    for (int64_t h = 0; h < heads; ++h) {
      const int32_t* v = vertical.data_as<const int32_t>() + (b * heads + h) * nnz_v;
      const int32_t* s = slash.data_as<const int32_t>() + (b * heads + h) * nnz_s;
      for (int64_t m = 0; m < rows && m * p.block_m < q_len; ++m) {
        Unit unit{(b * heads + h) * rows + m, {}};
        if (!convert_row_block(v, count_v[size_t(h)], s, count_s[size_t(h)], q_len, kv_len,
                               m * p.block_m, p.block_m, p.block_n, p.causal, unit.result) ||
            int64_t(unit.result.blocks.size()) > nnz_s ||
            int64_t(unit.result.columns.size()) > nnz_v) {
          return {StatusCode::kInternal,
                  fmt::format("{}: the index walk of batch {}, head {}, row block {} did not fit "
                              "its buffers",
                              op, b, h, m)};
        }
        units.push_back(std::move(unit));
      }
    }
  }
  for (const Unit& unit : units) {
    store_i32(args.tensor(0), unit.index, int64_t(unit.result.blocks.size()));
    store_i32(args.tensor(2), unit.index, int64_t(unit.result.columns.size()));
    for (size_t i = 0; i < unit.result.blocks.size(); ++i) {
      store_i32(args.tensor(1), unit.index * nnz_s + int64_t(i), unit.result.blocks[i]);
    }
    for (size_t i = 0; i < unit.result.columns.size(); ++i) {
      store_i32(args.tensor(3), unit.index * nnz_v + int64_t(i), unit.result.columns[i]);
    }
  }
  return Status::ok();
}

// ---- top_k_per_row_prefill / decode ----------------------------------------------------------

// §6: per row, positions relative to the row start. len <= k: 0..len-1, then -1. Otherwise the
// k positions of the largest values (torch.topk order: NaN above +inf; ties at the k-th value
// go to the lower position), written in ascending position order — the order is unspecified by
// the contract, and ascending positions is the canonical form that also covers len <= k.
Status top_k(const OpSpec& spec, const KernelArgs& args) {
  const int64_t k = spec.get<ir::TopKParams>().top_k;
  const std::string_view op = op_name(spec.op);
  const bool decode = spec.op == OpKind::kTopKPerRowDecode;
  const Tensor& logits = args.tensor(0);
  const Tensor& indices = args.tensor(decode ? 2 : 3);
  const int sc = decode ? 1 : 0;
  const auto rows = int64_t(args.scalar(sc));
  const auto stride0 = int64_t(args.scalar(sc + 1));
  const auto stride1 = int64_t(args.scalar(sc + 2));
  const int64_t columns = logits.size(1);

  // Row ranges, all validated before any write.
  std::vector<int64_t> starts(static_cast<size_t>(rows)), ends(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    if (decode) {
      // Query token r % next_n of request r / next_n sees its first L - next_n + i + 1 keys;
      // KILN clamps a negative end (L < next_n) to an empty row.
      const auto next_n = int64_t(args.scalar(0));
      const int64_t len = load_i32(args.tensor(1), r / next_n);
      ends[size_t(r)] = std::max<int64_t>(len - next_n + r % next_n + 1, 0);
      if (ends[size_t(r)] > columns) {
        return invalid_argument(
            fmt::format("{}: argument 'seq_lens' has seq_lens[{}] = {}, so "
                        "row {} ends at {}, past the {} logits columns",
                        op, r / next_n, len, r, ends[size_t(r)], columns));
      }
    } else {
      starts[size_t(r)] = load_i32(args.tensor(1), r);
      ends[size_t(r)] = load_i32(args.tensor(2), r);
      if (starts[size_t(r)] < 0 || starts[size_t(r)] > ends[size_t(r)] ||
          ends[size_t(r)] > columns) {
        return invalid_argument(fmt::format(
            "{}: arguments 'rowStarts'/'rowEnds' give row {} the range [{}, {}), not inside "
            "[0, {}] in order",
            op, r, starts[size_t(r)], ends[size_t(r)], columns));
      }
    }
  }
  const float* base = logits.data_as<const float>();
  // a ranks above b: NaN first, then by value; equal values keep position order (stable).
  const auto above = [](float a, float b) {
    if (std::isnan(b)) return false;
    return std::isnan(a) || a > b;
  };
  std::vector<int64_t> order;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t len = ends[size_t(r)] - starts[size_t(r)];
    const float* row = base + r * stride0 + starts[size_t(r)] * stride1;
    order.resize(size_t(len));
    std::iota(order.begin(), order.end(), int64_t(0));
    if (len > k) {
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return above(row[a * stride1], row[b * stride1]);
      });
      order.resize(size_t(k));
      std::sort(order.begin(), order.end());
    }
    for (int64_t i = 0; i < k; ++i) {
      store_i32(indices, r * k + i, i < int64_t(order.size()) ? order[size_t(i)] : -1);
    }
  }
  return Status::ok();
}

}  // namespace

bool implements_attention(OpKind op) {
  switch (op) {
    case OpKind::kPagedAttentionV1:
    case OpKind::kPagedAttentionV2:
    case OpKind::kMergeAttnStates:
    case OpKind::kConvertVerticalSlashIndexes:
    case OpKind::kConvertVerticalSlashIndexesMergehead:
    case OpKind::kTopKPerRowPrefill:
    case OpKind::kTopKPerRowDecode: return true;
    default: return false;
  }
}

Status run_attention(const OpSpec& spec, const KernelArgs& args) {
  switch (spec.op) {
    case OpKind::kPagedAttentionV1:
    case OpKind::kPagedAttentionV2: return paged_attention(spec, args);
    case OpKind::kMergeAttnStates: return merge_attn_states(spec, args);
    case OpKind::kConvertVerticalSlashIndexes:
    case OpKind::kConvertVerticalSlashIndexesMergehead: return convert_vertical_slash(spec, args);
    case OpKind::kTopKPerRowPrefill:
    case OpKind::kTopKPerRowDecode: return top_k(spec, args);
    default:
      return {StatusCode::kInternal,
              fmt::format("ref: {} is not in the attention family", op_name(spec.op))};
  }
}

}  // namespace jit::codegen::ref
