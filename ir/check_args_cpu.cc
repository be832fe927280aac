// Run-time argument checks of the CPU attention ops and the oneDNN GEMM ops
// (spec/norm_act_cpu_ops.md §3 and §4; argument order in docs/ops.md). Only shapes, dtypes,
// strides and scalar values are checked here; the data (slots, block ids, the metadata blob,
// the handler bytes) is validated by each backend before it writes.
//
// KILN: the handler of the GEMM ops is a u8 tensor (rank 1, contiguous). create_onednn_mm and
// create_onednn_scaled_mm take it as their first tensor and fill it (the way
// cpu_attn_get_scheduler_metadata fills its metadata tensor); onednn_mm and onednn_scaled_mm
// take it as their last tensor. Its contents are the backend's (see codegen/ref/ref_cpu.cc for
// the ref's), so its size is checked there.
#include <fmt/format.h>

#include <cmath>

#include "ir/check_args.h"

namespace jit::ir {
namespace {

// A dense 1-D tensor of `dtype` with `size` elements (size < 0: any).
Status expect_vector(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                     int64_t size) {
  KILN_RETURN_IF_ERROR(expect_tensor(op, arg, t, dtype, 1));
  if (size >= 0) KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 0, size));
  return expect_contiguous(op, arg, t);
}

Status expect_none(std::string_view op, std::string_view arg, const Tensor& t,
                   std::string_view why) {
  if (!t.defined()) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' must be None {}, got {}", op, arg, why, t.describe()));
}

// A scalar that carries an integer (scalars travel as doubles) in [lo, hi].
Status expect_int_scalar(std::string_view op, std::string_view arg, double v, double lo,
                         double hi) {
  if (v == std::floor(v) && v >= lo && v <= hi) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' = {} must be an integer in [{}, {}]", op, arg, v, lo, hi));
}

// Largest integer a double scalar carries exactly.
constexpr double kMaxExactInt = 9007199254740992.0;  // 2^53

// ---- CPU attention -------------------------------------------------------------------------

// key_cache / value_cache: [num_blocks, heads_kv, block_size, head_size] whose (block, head)
// slab of block_size·head_size elements is contiguous (its inner arrangement is the ISA's);
// only the block and head strides are free (vLLM's test uses a head stride of 2·BS·D).
// With an fp8 kv the cache holds fp8 codes: uint8 (what vLLM allocates) or the fp8 dtype.
Status check_kv_cache(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                      KvCacheDtype kv, int64_t heads_kv, int64_t block_size, int64_t head_size) {
  if (kv == KvCacheDtype::kAuto) {
    KILN_RETURN_IF_ERROR(expect_tensor(op, arg, t, dtype, 4));
  } else {
    const DType fp8 = cpu_attn_cache_dtype(dtype, kv);
    KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
    if (t.dtype() != DType::kU8 && t.dtype() != fp8) {
      return invalid_argument(
          fmt::format("{}: argument '{}' has dtype {}; expected u8 or {} for a spec with kv={}", op,
                      arg, dtype_name(t.dtype()), dtype_name(fp8), enum_name(kv)));
    }
    KILN_RETURN_IF_ERROR(expect_rank(op, arg, t, {4}));
  }
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 1, heads_kv));
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 2, block_size));
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 3, head_size));
  if (t.stride(3) != 1 || (block_size > 1 && t.stride(2) != head_size)) {
    return invalid_argument(fmt::format(
        "{}: argument '{}' ({}) must have contiguous (block, head) slabs of block_size * "
        "head_size = {} elements (strides [.., .., {}, 1])",
        op, arg, t.describe(), block_size * head_size, head_size));
  }
  return Status::ok();
}

// vLLM reads value_cache with key_cache's block and head strides: they must agree.
Status check_same_cache(std::string_view op, const Tensor& key_cache, const Tensor& value_cache) {
  for (int d = 0; d < 4; ++d) {
    if (key_cache.size(d) != value_cache.size(d) || key_cache.stride(d) != value_cache.stride(d)) {
      return invalid_argument(fmt::format(
          "{}: argument 'value_cache' ({}) must have the shape and strides of 'key_cache' ({})", op,
          value_cache.describe(), key_cache.describe()));
    }
  }
  return Status::ok();
}

// [tokens, heads, head_size] with unit stride along head_size.
Status check_token_heads(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                         int64_t heads, int64_t head_size) {
  KILN_RETURN_IF_ERROR(expect_tensor(op, arg, t, dtype, 3));
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 1, heads));
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 2, head_size));
  return expect_unit_last_stride(op, arg, t);
}

// get_scheduler_metadata: tensors {metadata (written), seq_lens, query_start_loc};
// scalars {num_req, window_size, enable_kv_split}.
Status check_scheduler(const OpSpec& spec, const KernelArgs& args) {
  const std::string_view op = op_name(spec.op);
  KILN_RETURN_IF_ERROR(expect_count(op, args, 3, 3));
  KILN_RETURN_IF_ERROR(expect_int_scalar(op, "num_req", args.scalar(0), 0, 2147483647.0));
  const auto num_req = int64_t(args.scalar(0));
  KILN_RETURN_IF_ERROR(expect_vector(op, "metadata", args.tensor(0), DType::kI8, -1));
  KILN_RETURN_IF_ERROR(expect_vector(op, "seq_lens", args.tensor(1), DType::kI32, num_req));
  KILN_RETURN_IF_ERROR(
      expect_vector(op, "query_start_loc", args.tensor(2), DType::kI32, num_req + 1));
  const double window = args.scalar(1);
  if (window != -1.0) {
    KILN_RETURN_IF_ERROR(expect_int_scalar(op, "window_size", window, 1, 2147483647.0));
  }
  return expect_int_scalar(op, "enable_kv_split", args.scalar(2), 0, 1);
}

// k_scale / v_scale of an fp8 cache (spec §3.6: > 0), scalars `first` and `first + 1`.
Status check_kv_scales(std::string_view op, const KernelArgs& args, int first) {
  const char* names[] = {"k_scale", "v_scale"};
  for (int i = 0; i < 2; ++i) {
    const double v = args.scalar(first + i);
    if (!(std::isfinite(v) && v > 0)) {
      return invalid_argument(fmt::format(
          "{}: argument '{}' = {} must be finite and > 0 for an fp8 KV cache", op, names[i], v));
    }
  }
  return Status::ok();
}

// cpu_attn_reshape_and_cache: tensors {key, value, key_cache, value_cache, slot_mapping};
// scalars {} for kv=auto, {k_scale, v_scale} for an fp8 kv.
Status check_cache_write(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<CpuAttnCacheWriteParams>();
  const std::string_view op = op_name(spec.op);
  const bool fp8 = p.kv != KvCacheDtype::kAuto;
  KILN_RETURN_IF_ERROR(expect_count(op, args, 5, fp8 ? 2 : 0));
  if (fp8) KILN_RETURN_IF_ERROR(check_kv_scales(op, args, 0));
  const Tensor& key = args.tensor(0);
  const Tensor& value = args.tensor(1);
  KILN_RETURN_IF_ERROR(check_token_heads(op, "key", key, p.dtype, p.head_count_kv, p.head_size));
  KILN_RETURN_IF_ERROR(
      check_token_heads(op, "value", value, p.dtype, p.head_count_kv, p.head_size));
  KILN_RETURN_IF_ERROR(expect_size(op, "value", value, 0, key.size(0)));
  KILN_RETURN_IF_ERROR(check_kv_cache(op, "key_cache", args.tensor(2), p.dtype, p.kv,
                                      p.head_count_kv, p.block_size, p.head_size));
  KILN_RETURN_IF_ERROR(check_kv_cache(op, "value_cache", args.tensor(3), p.dtype, p.kv,
                                      p.head_count_kv, p.block_size, p.head_size));
  KILN_RETURN_IF_ERROR(check_same_cache(op, args.tensor(2), args.tensor(3)));
  // The token count is key.size(0); slot_mapping may be longer (padding that is not read).
  const Tensor& slots = args.tensor(4);
  KILN_RETURN_IF_ERROR(expect_vector(op, "slot_mapping", slots, DType::kI64, -1));
  if (slots.size(0) < key.size(0)) {
    return invalid_argument(
        fmt::format("{}: argument 'slot_mapping' ({}) has fewer entries than key has tokens ({})",
                    op, slots.describe(), key.size(0)));
  }
  return Status::ok();
}

// cpu_attention_with_kv_cache: tensors {query, key_cache, value_cache, output, query_start_loc,
// seq_lens, alibi_slopes, block_table, scheduler_metadata, s_aux}; scalars {scale,
// sliding_window_left, sliding_window_right, softcap}, then {k_scale, v_scale} for an fp8 kv.
Status check_attention(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<CpuAttentionParams>();
  const std::string_view op = op_name(spec.op);
  const bool fp8 = p.kv != KvCacheDtype::kAuto;
  KILN_RETURN_IF_ERROR(expect_count(op, args, 10, fp8 ? 6 : 4));
  if (fp8) KILN_RETURN_IF_ERROR(check_kv_scales(op, args, 4));
  const Tensor& query = args.tensor(0);
  KILN_RETURN_IF_ERROR(check_token_heads(op, "query", query, p.dtype, p.head_count_q, p.head_size));
  KILN_RETURN_IF_ERROR(check_kv_cache(op, "key_cache", args.tensor(1), p.dtype, p.kv,
                                      p.head_count_kv, p.block_size, p.head_size));
  KILN_RETURN_IF_ERROR(check_kv_cache(op, "value_cache", args.tensor(2), p.dtype, p.kv,
                                      p.head_count_kv, p.block_size, p.head_size));
  KILN_RETURN_IF_ERROR(check_same_cache(op, args.tensor(1), args.tensor(2)));
  // The output is written densely at (token * heads + head) * head_size.
  const Tensor& output = args.tensor(3);
  KILN_RETURN_IF_ERROR(
      check_token_heads(op, "output", output, p.dtype, p.head_count_q, p.head_size));
  KILN_RETURN_IF_ERROR(expect_size(op, "output", output, 0, query.size(0)));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "output", output));
  const Tensor& qsl = args.tensor(4);
  KILN_RETURN_IF_ERROR(expect_vector(op, "query_start_loc", qsl, DType::kI32, -1));
  if (qsl.size(0) < 1) {
    return invalid_argument(fmt::format(
        "{}: argument 'query_start_loc' ({}) needs num_reqs + 1 >= 1 entries", op, qsl.describe()));
  }
  const int64_t num_req = qsl.size(0) - 1;
  KILN_RETURN_IF_ERROR(expect_vector(op, "seq_lens", args.tensor(5), DType::kI32, num_req));
  const Tensor& slopes = args.tensor(6);
  if (p.alibi) {
    KILN_RETURN_IF_ERROR(expect_vector(op, "alibi_slopes", slopes, DType::kF32, p.head_count_q));
  } else {
    KILN_RETURN_IF_ERROR(expect_none(op, "alibi_slopes", slopes, "for a spec with alibi=false"));
  }
  // Row stride honoured, column stride 1 (vLLM assumes it).
  const Tensor& table = args.tensor(7);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "block_table", table, DType::kI32, 2));
  KILN_RETURN_IF_ERROR(expect_size(op, "block_table", table, 0, num_req));
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, "block_table", table));
  KILN_RETURN_IF_ERROR(expect_vector(op, "scheduler_metadata", args.tensor(8), DType::kI8, -1));
  // s_aux: bf16 in the baseline, bf16 or f32 in newer vLLM (KILN accepts both).
  const Tensor& sinks = args.tensor(9);
  if (p.sinks) {
    KILN_RETURN_IF_ERROR(expect_defined(op, "s_aux", sinks));
    if (sinks.dtype() != DType::kBF16 && sinks.dtype() != DType::kF32) {
      return invalid_argument(fmt::format("{}: argument 's_aux' has dtype {}; expected bf16 or f32",
                                          op, dtype_name(sinks.dtype())));
    }
    KILN_RETURN_IF_ERROR(expect_vector(op, "s_aux", sinks, sinks.dtype(), p.head_count_q));
  } else {
    KILN_RETURN_IF_ERROR(expect_none(op, "s_aux", sinks, "for a spec with sinks=false"));
  }
  const double scale = args.scalar(0);
  if (!std::isfinite(scale)) {
    return invalid_argument(fmt::format("{}: argument 'scale' = {} must be finite", op, scale));
  }
  // Windows: -1 = unbounded; a spec without sliding_window has both edges unbounded.
  const char* edge_names[] = {"sliding_window_left", "sliding_window_right"};
  for (int e = 0; e < 2; ++e) {
    const double edge = args.scalar(1 + e);
    if (!p.sliding_window && edge != -1.0) {
      return invalid_argument(
          fmt::format("{}: argument '{}' = {} must be -1 for a spec with sliding_window=false", op,
                      edge_names[e], edge));
    }
    KILN_RETURN_IF_ERROR(expect_int_scalar(op, edge_names[e], edge, -1, 2147483647.0));
  }
  const double softcap = args.scalar(3);
  if (p.softcap ? !(std::isfinite(softcap) && softcap > 0) : softcap != 0.0) {
    return invalid_argument(
        fmt::format("{}: argument 'softcap' = {} must be {} for a spec with softcap={}", op,
                    softcap, p.softcap ? "finite and > 0" : "0", p.softcap));
  }
  return Status::ok();
}

// ---- oneDNN GEMM -----------------------------------------------------------------------------

Status check_handler(std::string_view op, const Tensor& handler) {
  return expect_vector(op, "handler", handler, DType::kU8, -1);
}

Status check_cache_size_scalar(std::string_view op, double v) {
  return expect_int_scalar(op, "primitive_cache_size", v, 1, kMaxExactInt);
}

// create_onednn_mm: tensors {handler (written), b [K, N] any strides};
// scalars {primitive_cache_size}.
Status check_create_mm(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<GemmParams>();
  const std::string_view op = op_name(spec.op);
  KILN_RETURN_IF_ERROR(expect_count(op, args, 2, 1));
  KILN_RETURN_IF_ERROR(check_handler(op, args.tensor(0)));
  const Tensor& b = args.tensor(1);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "b", b, p.dtype, 2));
  KILN_RETURN_IF_ERROR(expect_size(op, "b", b, 0, p.k));
  KILN_RETURN_IF_ERROR(expect_size(op, "b", b, 1, p.n));
  return check_cache_size_scalar(op, args.scalar(0));
}

// c [M, N] contiguous, a [M, K] with unit last stride (any row stride).
Status check_mm_operands(std::string_view op, const Tensor& c, DType c_dtype, const Tensor& a,
                         DType a_dtype, int64_t k, int64_t n, bool a_contiguous) {
  KILN_RETURN_IF_ERROR(expect_tensor(op, "c", c, c_dtype, 2));
  KILN_RETURN_IF_ERROR(expect_size(op, "c", c, 1, n));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "c", c));
  KILN_RETURN_IF_ERROR(expect_tensor(op, "a", a, a_dtype, 2));
  KILN_RETURN_IF_ERROR(expect_size(op, "a", a, 1, k));
  KILN_RETURN_IF_ERROR(expect_size(op, "a", a, 0, c.size(0)));
  return a_contiguous ? expect_contiguous(op, "a", a) : expect_unit_last_stride(op, "a", a);
}

// onednn_mm: tensors {c, a, bias?, handler}.
Status check_mm(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<GemmParams>();
  const std::string_view op = op_name(spec.op);
  KILN_RETURN_IF_ERROR(expect_count(op, args, 4, 0));
  KILN_RETURN_IF_ERROR(
      check_mm_operands(op, args.tensor(0), p.dtype, args.tensor(1), p.dtype, p.k, p.n, false));
  if (args.tensor(2).defined()) {
    KILN_RETURN_IF_ERROR(expect_vector(op, "bias", args.tensor(2), p.dtype, p.n));
  }
  return check_handler(op, args.tensor(3));
}

// create_onednn_scaled_mm: tensors {handler (written), b int8 [K, N] column-major, b_scales};
// scalars {primitive_cache_size}.
Status check_create_scaled_mm(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ScaledGemmParams>();
  const std::string_view op = op_name(spec.op);
  KILN_RETURN_IF_ERROR(expect_count(op, args, 3, 1));
  KILN_RETURN_IF_ERROR(check_handler(op, args.tensor(0)));
  const Tensor& b = args.tensor(1);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "b", b, DType::kI8, 2));
  KILN_RETURN_IF_ERROR(expect_size(op, "b", b, 0, p.k));
  KILN_RETURN_IF_ERROR(expect_size(op, "b", b, 1, p.n));
  if (b.stride(0) != 1 && p.k > 1) {
    return invalid_argument(
        fmt::format("{}: argument 'b' ({}) must be column-major (stride[0] == 1), e.g. weight.t()",
                    op, b.describe()));
  }
  const Tensor& scales = args.tensor(2);
  KILN_RETURN_IF_ERROR(expect_defined(op, "b_scales", scales));
  KILN_RETURN_IF_ERROR(expect_dtype(op, "b_scales", scales, DType::kF32));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "b_scales", scales));
  const int64_t want = p.per_channel ? p.n : 1;
  if (scales.numel() != want) {
    return invalid_argument(fmt::format(
        "{}: argument 'b_scales' ({}) must have {} element{} for a spec with per_channel={}", op,
        scales.describe(), want, want == 1 ? "" : "s", p.per_channel));
  }
  return check_cache_size_scalar(op, args.scalar(0));
}

// A per-token [M] or [M, 1] tensor, or a per-tensor one of one element.
Status check_scale_like(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                        bool per_token, int64_t m) {
  KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
  KILN_RETURN_IF_ERROR(expect_dtype(op, arg, t, dtype));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, arg, t));
  if (!per_token) {
    if (t.numel() == 1) return Status::ok();
    return invalid_argument(
        fmt::format("{}: argument '{}' ({}) must have 1 element for a spec with dynamic=false", op,
                    arg, t.describe()));
  }
  const bool shape_ok =
      (t.dim() == 1 && t.size(0) == m) || (t.dim() == 2 && t.size(0) == m && t.size(1) == 1);
  if (shape_ok) return Status::ok();
  return invalid_argument(fmt::format(
      "{}: argument '{}' ({}) must be [M] or [M, 1] with M = {} for a spec with dynamic=true", op,
      arg, t.describe(), m));
}

// onednn_scaled_mm: tensors {c, a, a_scales, azp?, azp_adj?, bias?, handler}.
Status check_scaled_mm(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ScaledGemmParams>();
  const std::string_view op = op_name(spec.op);
  KILN_RETURN_IF_ERROR(expect_count(op, args, 7, 0));
  const Tensor& c = args.tensor(0);
  KILN_RETURN_IF_ERROR(
      check_mm_operands(op, c, p.out_dtype, args.tensor(1), DType::kI8, p.k, p.n, true));
  const int64_t m = c.size(0);
  KILN_RETURN_IF_ERROR(check_scale_like(op, "a_scales", args.tensor(2), DType::kF32, p.dynamic, m));
  const Tensor& azp = args.tensor(3);
  const Tensor& azp_adj = args.tensor(4);
  if (!p.azp) {
    KILN_RETURN_IF_ERROR(expect_none(op, "azp", azp, "for a spec with azp=false"));
    KILN_RETURN_IF_ERROR(expect_none(op, "azp_adj", azp_adj, "for a spec with azp=false"));
  } else {
    KILN_RETURN_IF_ERROR(check_scale_like(op, "azp", azp, DType::kI32, p.dynamic, m));
    // The dynamic epilogue subtracts s_a·zp·azp_adj; the static path folds the zero point into
    // the integer product and ignores azp_adj (vLLM layers may still pass it).
    if (p.dynamic || azp_adj.defined()) {
      KILN_RETURN_IF_ERROR(expect_defined(op, "azp_adj", azp_adj));
      KILN_RETURN_IF_ERROR(expect_dtype(op, "azp_adj", azp_adj, DType::kF32));
      KILN_RETURN_IF_ERROR(expect_contiguous(op, "azp_adj", azp_adj));
      const bool shape_ok = (azp_adj.dim() == 1 && azp_adj.size(0) == p.n) ||
                            (azp_adj.dim() == 2 && azp_adj.size(0) == 1 && azp_adj.size(1) == p.n);
      if (!shape_ok) {
        return invalid_argument(
            fmt::format("{}: argument 'azp_adj' ({}) must be [N] or [1, N] with N = {}", op,
                        azp_adj.describe(), p.n));
      }
    }
  }
  if (args.tensor(5).defined()) {
    KILN_RETURN_IF_ERROR(expect_vector(op, "bias", args.tensor(5), p.out_dtype, p.n));
  }
  return check_handler(op, args.tensor(6));
}

}  // namespace

Status check_cpu_attn_lengths(std::string_view op, const int32_t* qsl, const int32_t* seq_lens,
                              int64_t num_req, bool causal, int64_t max_tokens) {
  if (qsl[0] != 0) {
    return invalid_argument(fmt::format(
        "{}: argument 'query_start_loc' has query_start_loc[0] = {}; expected 0", op, qsl[0]));
  }
  for (int64_t r = 0; r < num_req; ++r) {
    if (qsl[r + 1] < qsl[r]) {
      return invalid_argument(
          fmt::format("{}: argument 'query_start_loc' decreases at {} ({} after {})", op, r + 1,
                      qsl[r + 1], qsl[r]));
    }
    const int64_t q_len = qsl[r + 1] - qsl[r];
    if (seq_lens[r] < 0 || (causal && seq_lens[r] < q_len)) {
      return invalid_argument(
          fmt::format("{}: argument 'seq_lens' has seq_lens[{}] = {}; expected >= {}{}", op, r,
                      seq_lens[r], causal ? q_len : 0,
                      causal ? " (its query length: causal queries are its last tokens)" : ""));
    }
  }
  if (max_tokens >= 0 && qsl[num_req] > max_tokens) {
    return invalid_argument(
        fmt::format("{}: argument 'query_start_loc' ends at {}, beyond the {} query tokens", op,
                    qsl[num_req], max_tokens));
  }
  return Status::ok();
}

Status check_cpu_attn_sequences(std::string_view op, const Tensor& query_start_loc,
                                const Tensor& seq_lens_t, const Tensor& table, bool causal,
                                int64_t block_size, int64_t max_tokens, int64_t num_blocks) {
  const auto* qsl = query_start_loc.data_as<const int32_t>();
  const auto* seq_lens = seq_lens_t.data_as<const int32_t>();
  const int64_t num_req = query_start_loc.size(0) - 1;
  KILN_RETURN_IF_ERROR(check_cpu_attn_lengths(op, qsl, seq_lens, num_req, causal, max_tokens));
  for (int64_t r = 0; r < num_req; ++r) {
    const int64_t used = (int64_t(seq_lens[r]) + block_size - 1) / block_size;
    if (used > table.size(1)) {
      return invalid_argument(fmt::format(
          "{}: argument 'block_table' has {} columns; seq_lens[{}] = {} needs {} blocks", op,
          table.size(1), r, seq_lens[r], used));
    }
    const int32_t* row = table.data_as<const int32_t>() + r * table.stride(0);
    for (int64_t b = 0; b < used; ++b) {
      if (row[b] < 0 || row[b] >= num_blocks) {
        return invalid_argument(fmt::format(
            "{}: argument 'block_table' has block_table[{}, {}] = {}, outside the cache's {} "
            "blocks",
            op, r, b, row[b], num_blocks));
      }
    }
  }
  return Status::ok();
}

Status check_cpu_args(const OpSpec& spec, const KernelArgs& args) {
  switch (spec.op) {
    case OpKind::kCpuAttnGetSchedulerMetadata: return check_scheduler(spec, args);
    case OpKind::kCpuAttnReshapeAndCache: return check_cache_write(spec, args);
    case OpKind::kCpuAttentionWithKvCache: return check_attention(spec, args);
    case OpKind::kCreateOnednnMm: return check_create_mm(spec, args);
    case OpKind::kOnednnMm: return check_mm(spec, args);
    case OpKind::kCreateOnednnScaledMm: return check_create_scaled_mm(spec, args);
    case OpKind::kOnednnScaledMm: return check_scaled_mm(spec, args);
    default:
      return {
          StatusCode::kUnsupported,
          fmt::format("{}: no run-time argument checks (not a cpu-family op)", op_name(spec.op))};
  }
}

}  // namespace jit::ir
