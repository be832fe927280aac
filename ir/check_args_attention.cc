// Run-time argument checks of the attention family: paged_attention_v1/v2, merge_attn_states,
// convert_vertical_slash_indexes(_mergehead) and top_k_per_row_prefill/decode (argument order
// in docs/ops.md, semantics in spec/attention_ops.md). Only shapes, dtypes, strides and scalar
// values are checked here; data-dependent checks (block numbers, lengths, indices) are done by
// each backend before it writes anything.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "ir/check_args.h"
#include "ir/op_spec.h"
#include "ir/params_attention.h"
#include "ir/params_cache.h"

namespace jit::ir {
namespace {

// A present tensor of `dtype`, rank 1 with `size` elements, dense (seq_lens, row ranges, counts,
// alibi slopes).
Status expect_vector(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                     int64_t size) {
  KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
  KILN_RETURN_IF_ERROR(expect_dtype(op, arg, t, dtype));
  KILN_RETURN_IF_ERROR(expect_rank(op, arg, t, {1}));
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 0, size));
  return expect_contiguous(op, arg, t);
}

// A present, dense tensor of `dtype` with exactly `sizes`.
Status expect_dense(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                    std::initializer_list<int64_t> sizes) {
  KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
  KILN_RETURN_IF_ERROR(expect_dtype(op, arg, t, dtype));
  KILN_RETURN_IF_ERROR(expect_rank(op, arg, t, {int(sizes.size())}));
  int d = 0;
  for (int64_t size : sizes) KILN_RETURN_IF_ERROR(expect_size(op, arg, t, d++, size));
  return expect_contiguous(op, arg, t);
}

Status expect_absent(std::string_view op, std::string_view arg, const Tensor& t,
                     std::string_view why) {
  if (!t.defined()) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' must be None {}, got {}", op, arg, why, t.describe()));
}

// A per-tensor scale: one float32 element (k_scale, v_scale, output_scale).
Status expect_scalar_tensor(std::string_view op, std::string_view arg, const Tensor& t) {
  KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
  KILN_RETURN_IF_ERROR(expect_dtype(op, arg, t, DType::kF32));
  if (t.numel() == 1) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' ({}) must hold exactly one element", op, arg, t.describe()));
}

// Integers travel as doubles; `value` must be a whole number in [lo, hi].
Status expect_int_scalar(std::string_view op, std::string_view arg, double value, int64_t lo,
                         int64_t hi) {
  if (std::isfinite(value) && value == std::floor(value) && value >= double(lo) &&
      value <= double(hi)) {
    return Status::ok();
  }
  return invalid_argument(
      fmt::format("{}: argument '{}' = {} must be an integer in [{}, {}]", op, arg, value, lo, hi));
}

// Largest run-time integer scalar (lengths, strides, counts): exact in a double, fits int64.
constexpr int64_t kMaxInt = int64_t(1) << 52;

// The element type a paged cache of this spec holds: the query type for kv=auto, else one fp8
// byte, passed as uint8 (vLLM) or as the matching fp8 dtype.
Status expect_cache_dtype(std::string_view op, std::string_view arg, const Tensor& t,
                          const PagedAttentionParams& p) {
  if (p.kv == KvCacheDtype::kAuto) return expect_dtype(op, arg, t, p.dtype);
  const DType fp8 = p.kv == KvCacheDtype::kFp8E5m2 ? DType::kFp8E5m2 : DType::kFp8E4m3;
  if (t.dtype() == DType::kU8 || t.dtype() == fp8) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' has dtype {}; expected u8 or {} for "
                  "kv={}",
                  op, arg, dtype_name(t.dtype()), dtype_name(fp8), enum_name(p.kv)));
}

// paged_attention_v1: tensors {out, query, key_cache, value_cache, block_tables, seq_lens,
// alibi_slopes, k_scale, v_scale}; v2 inserts {exp_sums, max_logits, tmp_out} after out.
// Scalars {scale, max_seq_len, tp_rank, blocksparse_local_blocks, blocksparse_vert_stride,
// blocksparse_block_size, blocksparse_head_sliding_step}.
Status check_paged_attention(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<PagedAttentionParams>();
  const std::string_view op = op_name(spec.op);
  const bool v2 = spec.op == OpKind::kPagedAttentionV2;
  const int first = v2 ? 4 : 1;  // index of query
  KILN_RETURN_IF_ERROR(expect_count(op, args, first + 8, 7));
  const Tensor& out = args.tensor(0);
  const Tensor& query = args.tensor(first);
  const Tensor& key_cache = args.tensor(first + 1);
  const Tensor& value_cache = args.tensor(first + 2);
  const Tensor& block_tables = args.tensor(first + 3);
  const Tensor& seq_lens = args.tensor(first + 4);
  const Tensor& alibi_slopes = args.tensor(first + 5);
  const Tensor& k_scale = args.tensor(first + 6);
  const Tensor& v_scale = args.tensor(first + 7);
  const int64_t d = p.head_size;
  const int64_t bs = p.block_size;
  const int64_t x = paged_key_x(p.dtype, p.kv);

  // query [S, Hq, D]: dim 0 may be strided (a slice of a fused QKV), heads and dims dense.
  KILN_RETURN_IF_ERROR(expect_defined(op, "query", query));
  KILN_RETURN_IF_ERROR(expect_dtype(op, "query", query, p.dtype));
  KILN_RETURN_IF_ERROR(expect_rank(op, "query", query, {3}));
  KILN_RETURN_IF_ERROR(expect_size(op, "query", query, 1, p.head_count_q));
  KILN_RETURN_IF_ERROR(expect_size(op, "query", query, 2, d));
  if (query.stride(2) != 1 || (p.head_count_q > 1 && query.stride(1) != d)) {
    return invalid_argument(
        fmt::format("{}: argument 'query' ({}) must be dense in its head and "
                    "head_size dims (stride[1] == {}, stride[2] == 1)",
                    op, query.describe(), d));
  }
  const int64_t seqs = query.size(0);
  KILN_RETURN_IF_ERROR(expect_dense(op, "out", out, p.dtype, {seqs, p.head_count_q, d}));

  // key_cache [NB, Hkv, D/x, BS, x], value_cache [NB, Hkv, D, BS]: innermost dims dense, and
  // (QUIRK) the value cache is addressed with the key cache's block and head strides.
  KILN_RETURN_IF_ERROR(expect_defined(op, "key_cache", key_cache));
  KILN_RETURN_IF_ERROR(expect_cache_dtype(op, "key_cache", key_cache, p));
  KILN_RETURN_IF_ERROR(expect_rank(op, "key_cache", key_cache, {5}));
  const int64_t blocks = key_cache.size(0);
  KILN_RETURN_IF_ERROR(expect_size(op, "key_cache", key_cache, 1, p.head_count_kv));
  KILN_RETURN_IF_ERROR(expect_size(op, "key_cache", key_cache, 2, d / x));
  KILN_RETURN_IF_ERROR(expect_size(op, "key_cache", key_cache, 3, bs));
  KILN_RETURN_IF_ERROR(expect_size(op, "key_cache", key_cache, 4, x));
  if (key_cache.stride(4) != 1 || key_cache.stride(3) != x || key_cache.stride(2) != bs * x) {
    return invalid_argument(fmt::format(
        "{}: argument 'key_cache' ({}) must be dense in its last three dims (strides [{}, {}, 1])",
        op, key_cache.describe(), bs * x, x));
  }
  KILN_RETURN_IF_ERROR(expect_defined(op, "value_cache", value_cache));
  KILN_RETURN_IF_ERROR(expect_cache_dtype(op, "value_cache", value_cache, p));
  if (value_cache.dtype() != key_cache.dtype()) {
    return invalid_argument(
        fmt::format("{}: argument 'value_cache' has dtype {} but key_cache "
                    "has {}",
                    op, dtype_name(value_cache.dtype()), dtype_name(key_cache.dtype())));
  }
  KILN_RETURN_IF_ERROR(expect_rank(op, "value_cache", value_cache, {4}));
  KILN_RETURN_IF_ERROR(expect_size(op, "value_cache", value_cache, 0, blocks));
  KILN_RETURN_IF_ERROR(expect_size(op, "value_cache", value_cache, 1, p.head_count_kv));
  KILN_RETURN_IF_ERROR(expect_size(op, "value_cache", value_cache, 2, d));
  KILN_RETURN_IF_ERROR(expect_size(op, "value_cache", value_cache, 3, bs));
  if (value_cache.stride(3) != 1 || value_cache.stride(2) != bs) {
    return invalid_argument(fmt::format(
        "{}: argument 'value_cache' ({}) must be dense in its last two dims (strides [{}, 1])", op,
        value_cache.describe(), bs));
  }
  if (value_cache.stride(0) != key_cache.stride(0) ||
      value_cache.stride(1) != key_cache.stride(1)) {
    return invalid_argument(fmt::format(
        "{}: argument 'value_cache' ({}) must have key_cache's block and head strides [{}, {}] "
        "(the kernel addresses both caches with key_cache's strides)",
        op, value_cache.describe(), key_cache.stride(0), key_cache.stride(1)));
  }

  KILN_RETURN_IF_ERROR(expect_defined(op, "block_tables", block_tables));
  KILN_RETURN_IF_ERROR(expect_dtype(op, "block_tables", block_tables, DType::kI32));
  KILN_RETURN_IF_ERROR(expect_rank(op, "block_tables", block_tables, {2}));
  KILN_RETURN_IF_ERROR(expect_size(op, "block_tables", block_tables, 0, seqs));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "block_tables", block_tables));
  KILN_RETURN_IF_ERROR(expect_vector(op, "seq_lens", seq_lens, DType::kI32, seqs));
  if (p.alibi) {
    KILN_RETURN_IF_ERROR(
        expect_vector(op, "alibi_slopes", alibi_slopes, DType::kF32, p.head_count_q));
  } else {
    KILN_RETURN_IF_ERROR(
        expect_absent(op, "alibi_slopes", alibi_slopes, "for a spec with alibi=false"));
  }
  // With kv=auto the scales are not read, so they may be None or anything.
  if (p.kv != KvCacheDtype::kAuto) {
    KILN_RETURN_IF_ERROR(expect_scalar_tensor(op, "k_scale", k_scale));
    KILN_RETURN_IF_ERROR(expect_scalar_tensor(op, "v_scale", v_scale));
  }

  const double scale = args.scalar(0);
  if (!std::isfinite(scale)) {
    return invalid_argument(fmt::format("{}: argument 'scale' = {} must be finite", op, scale));
  }
  KILN_RETURN_IF_ERROR(expect_int_scalar(op, "max_seq_len", args.scalar(1), 0, kMaxInt));
  const auto max_seq_len = int64_t(args.scalar(1));
  if (p.blocksparse) {
    KILN_RETURN_IF_ERROR(expect_int_scalar(op, "tp_rank", args.scalar(2), 0, kMaxInt));
    KILN_RETURN_IF_ERROR(
        expect_int_scalar(op, "blocksparse_local_blocks", args.scalar(3), 0, kMaxInt));
    // Block-sparse mode is vLLM's vert_stride > 1.
    KILN_RETURN_IF_ERROR(
        expect_int_scalar(op, "blocksparse_vert_stride", args.scalar(4), 2, kMaxInt));
    KILN_RETURN_IF_ERROR(
        expect_int_scalar(op, "blocksparse_block_size", args.scalar(5), 1, kMaxInt));
    if (int64_t(args.scalar(5)) % bs != 0) {
      return invalid_argument(fmt::format(
          "{}: argument 'blocksparse_block_size' = {} must be a multiple of block_size={} (each "
          "cache block lies in one sparse block)",
          op, args.scalar(5), bs));
    }
    KILN_RETURN_IF_ERROR(
        expect_int_scalar(op, "blocksparse_head_sliding_step", args.scalar(6), -kMaxInt, kMaxInt));
  }

  if (v2) {
    // Scratch buffers with exactly P = ceil(max_seq_len / partition_size) partitions.
    const int64_t parts = (max_seq_len + p.partition_size - 1) / p.partition_size;
    KILN_RETURN_IF_ERROR(
        expect_dense(op, "exp_sums", args.tensor(1), DType::kF32, {seqs, p.head_count_q, parts}));
    KILN_RETURN_IF_ERROR(
        expect_dense(op, "max_logits", args.tensor(2), DType::kF32, {seqs, p.head_count_q, parts}));
    KILN_RETURN_IF_ERROR(
        expect_dense(op, "tmp_out", args.tensor(3), p.dtype, {seqs, p.head_count_q, parts, d}));
  }
  return Status::ok();
}

// A [T, H, D] attention output: last dim dense, tokens and heads merge (stride[0] ==
// H * stride[1]), and a head stride of at least D (MLA slices give a larger one).
Status expect_merge_operand(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                            int64_t heads, int64_t head_size) {
  KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
  KILN_RETURN_IF_ERROR(expect_dtype(op, arg, t, dtype));
  KILN_RETURN_IF_ERROR(expect_rank(op, arg, t, {3}));
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 1, heads));
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 2, head_size));
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, arg, t));
  const bool heads_ok = heads == 1 || t.stride(1) >= head_size;
  const bool tokens_ok = t.size(0) <= 1 || t.stride(0) == heads * t.stride(1);
  if (heads_ok && tokens_ok) return Status::ok();
  return invalid_argument(fmt::format(
      "{}: argument '{}' ({}) must have a head stride >= {} and a token stride of heads * head "
      "stride",
      op, arg, t.describe(), head_size));
}

// merge_attn_states: tensors {output, output_lse, prefix_output, prefix_lse, suffix_output,
// suffix_lse, output_scale}; scalars {prefill_tokens_with_context} (negative = None).
Status check_merge(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<MergeAttnStatesParams>();
  const std::string_view op = op_name(spec.op);
  KILN_RETURN_IF_ERROR(expect_count(op, args, 7, 1));
  const Tensor& output = args.tensor(0);
  const Tensor& prefix = args.tensor(2);
  const Tensor& suffix = args.tensor(4);
  const int64_t h = p.head_count;
  const int64_t d = p.head_size;
  KILN_RETURN_IF_ERROR(expect_merge_operand(op, "prefix_output", prefix, p.dtype, h, d));
  const int64_t tokens = prefix.size(0);
  KILN_RETURN_IF_ERROR(expect_merge_operand(op, "suffix_output", suffix, p.dtype, h, d));
  KILN_RETURN_IF_ERROR(expect_size(op, "suffix_output", suffix, 0, tokens));
  // One head stride serves both inputs (the Python wrapper asserts it).
  if (h > 1 && suffix.stride(1) != prefix.stride(1)) {
    return invalid_argument(
        fmt::format("{}: argument 'suffix_output' ({}) must have "
                    "prefix_output's head stride {}",
                    op, suffix.describe(), prefix.stride(1)));
  }
  KILN_RETURN_IF_ERROR(expect_merge_operand(op, "output", output, p.out_dtype, h, d));
  KILN_RETURN_IF_ERROR(expect_size(op, "output", output, 0, tokens));
  KILN_RETURN_IF_ERROR(expect_dense(op, "prefix_lse", args.tensor(3), DType::kF32, {h, tokens}));
  KILN_RETURN_IF_ERROR(expect_dense(op, "suffix_lse", args.tensor(5), DType::kF32, {h, tokens}));
  if (p.output_lse) {
    KILN_RETURN_IF_ERROR(expect_dense(op, "output_lse", args.tensor(1), DType::kF32, {h, tokens}));
  } else {
    KILN_RETURN_IF_ERROR(
        expect_absent(op, "output_lse", args.tensor(1), "for a spec with output_lse=false"));
  }
  if (p.out_dtype == DType::kFp8E4m3) {
    KILN_RETURN_IF_ERROR(expect_scalar_tensor(op, "output_scale", args.tensor(6)));
  } else {
    KILN_RETURN_IF_ERROR(
        expect_absent(op, "output_scale", args.tensor(6), "unless out_dtype=fp8_e4m3"));
  }
  const double with_context = args.scalar(0);
  if (with_context < 0) return Status::ok();  // None: every token has a prefix
  return expect_int_scalar(op, "prefill_tokens_with_context", with_context, 0, tokens);
}

// convert_vertical_slash_indexes(_mergehead): tensors {block_count, block_offset, column_count,
// column_index, q_seqlens, kv_seqlens, vertical_indexes, slash_indexes[, vertical_indices_count,
// slash_indices_count]}; scalars {context_size}. B, H, NNZ_S come from slash_indexes, NNZ_V from
// vertical_indexes, R = ceil(context_size / block_m).
Status check_vertical_slash(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<VerticalSlashParams>();
  const std::string_view op = op_name(spec.op);
  const bool mergehead = spec.op == OpKind::kConvertVerticalSlashIndexesMergehead;
  KILN_RETURN_IF_ERROR(expect_count(op, args, mergehead ? 10 : 8, 1));
  const Tensor& slash = args.tensor(7);
  const Tensor& vertical = args.tensor(6);
  KILN_RETURN_IF_ERROR(expect_defined(op, "slash_indexes", slash));
  KILN_RETURN_IF_ERROR(expect_rank(op, "slash_indexes", slash, {3}));
  const int64_t b = slash.size(0);
  const int64_t h = slash.size(1);
  const int64_t nnz_s = slash.size(2);
  KILN_RETURN_IF_ERROR(expect_dense(op, "slash_indexes", slash, DType::kI32, {b, h, nnz_s}));
  KILN_RETURN_IF_ERROR(expect_defined(op, "vertical_indexes", vertical));
  KILN_RETURN_IF_ERROR(expect_rank(op, "vertical_indexes", vertical, {3}));
  const int64_t nnz_v = vertical.size(2);
  KILN_RETURN_IF_ERROR(expect_dense(op, "vertical_indexes", vertical, DType::kI32, {b, h, nnz_v}));
  // The first entry of each list is read unconditionally.
  if (nnz_s < 1 || nnz_v < 1) {
    return invalid_argument(
        fmt::format("{}: arguments 'vertical_indexes' ({}) and "
                    "'slash_indexes' ({}) need at least one entry per head",
                    op, vertical.describe(), slash.describe()));
  }
  KILN_RETURN_IF_ERROR(expect_int_scalar(op, "context_size", args.scalar(0), 0, kMaxInt));
  const int64_t rows = (int64_t(args.scalar(0)) + p.block_m - 1) / p.block_m;
  KILN_RETURN_IF_ERROR(expect_dense(op, "block_count", args.tensor(0), DType::kI32, {b, h, rows}));
  KILN_RETURN_IF_ERROR(
      expect_dense(op, "block_offset", args.tensor(1), DType::kI32, {b, h, rows, nnz_s}));
  KILN_RETURN_IF_ERROR(expect_dense(op, "column_count", args.tensor(2), DType::kI32, {b, h, rows}));
  KILN_RETURN_IF_ERROR(
      expect_dense(op, "column_index", args.tensor(3), DType::kI32, {b, h, rows, nnz_v}));
  KILN_RETURN_IF_ERROR(expect_vector(op, "q_seqlens", args.tensor(4), DType::kI32, b));
  KILN_RETURN_IF_ERROR(expect_vector(op, "kv_seqlens", args.tensor(5), DType::kI32, b));
  if (mergehead) {
    KILN_RETURN_IF_ERROR(
        expect_vector(op, "vertical_indices_count", args.tensor(8), DType::kI32, h));
    KILN_RETURN_IF_ERROR(expect_vector(op, "slash_indices_count", args.tensor(9), DType::kI32, h));
  }
  return Status::ok();
}

// top_k_per_row_prefill: tensors {logits, rowStarts, rowEnds, indices}, scalars {numRows,
// stride0, stride1}; top_k_per_row_decode: tensors {logits, seq_lens, indices}, scalars
// {next_n, numRows, stride0, stride1}.
Status check_top_k(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<TopKParams>();
  const std::string_view op = op_name(spec.op);
  const bool decode = spec.op == OpKind::kTopKPerRowDecode;
  KILN_RETURN_IF_ERROR(expect_count(op, args, decode ? 3 : 4, decode ? 4 : 3));
  const int s = decode ? 1 : 0;  // first of numRows, stride0, stride1
  KILN_RETURN_IF_ERROR(expect_int_scalar(op, "numRows", args.scalar(s), 0, kMaxInt));
  KILN_RETURN_IF_ERROR(expect_int_scalar(op, "stride0", args.scalar(s + 1), 0, kMaxInt));
  KILN_RETURN_IF_ERROR(expect_int_scalar(op, "stride1", args.scalar(s + 2), 0, kMaxInt));
  const auto rows = int64_t(args.scalar(s));
  const Tensor& logits = args.tensor(0);
  KILN_RETURN_IF_ERROR(expect_defined(op, "logits", logits));
  KILN_RETURN_IF_ERROR(expect_dtype(op, "logits", logits, DType::kF32));
  KILN_RETURN_IF_ERROR(expect_rank(op, "logits", logits, {2}));
  KILN_RETURN_IF_ERROR(expect_size(op, "logits", logits, 0, rows));
  // The kernel addresses logits with the scalar strides; they must describe this tensor.
  const bool strides_ok = (rows <= 1 || logits.stride(0) == int64_t(args.scalar(s + 1))) &&
                          (logits.size(1) <= 1 || logits.stride(1) == int64_t(args.scalar(s + 2)));
  if (!strides_ok) {
    return invalid_argument(
        fmt::format("{}: arguments 'stride0' = {} and 'stride1' = {} must be "
                    "the strides of 'logits' ({})",
                    op, args.scalar(s + 1), args.scalar(s + 2), logits.describe()));
  }
  const Tensor& indices = args.tensor(decode ? 2 : 3);
  KILN_RETURN_IF_ERROR(expect_dense(op, "indices", indices, DType::kI32, {rows, p.top_k}));
  if (!decode) {
    KILN_RETURN_IF_ERROR(expect_vector(op, "rowStarts", args.tensor(1), DType::kI32, rows));
    return expect_vector(op, "rowEnds", args.tensor(2), DType::kI32, rows);
  }
  KILN_RETURN_IF_ERROR(expect_int_scalar(op, "next_n", args.scalar(0), 1, kMaxInt));
  const auto next_n = int64_t(args.scalar(0));
  // Rows are next_n consecutive query tokens per request.
  if (rows % next_n != 0) {
    return invalid_argument(
        fmt::format("{}: argument 'numRows' = {} must be a multiple of "
                    "next_n = {}",
                    op, rows, next_n));
  }
  return expect_vector(op, "seq_lens", args.tensor(1), DType::kI32, rows / next_n);
}

// Element `index` of a dense int32 tensor.
int64_t dense_i32(const Tensor& t, int64_t index) {
  int32_t value;
  std::memcpy(&value, static_cast<const std::byte*>(t.data()) + index * 4, 4);
  return value;
}

}  // namespace

Status check_paged_sequences(std::string_view op, const Tensor& seq_lens,
                             const Tensor& block_tables, int64_t block_size, int64_t blocks,
                             int64_t max_seq_len) {
  const int64_t width = block_tables.size(1);
  for (int64_t s = 0; s < seq_lens.size(0); ++s) {
    const int64_t len = dense_i32(seq_lens, s);
    if (len > max_seq_len) {
      return invalid_argument(
          fmt::format("{}: argument 'seq_lens' has seq_lens[{}] = {} > max_seq_len = {}", op, s,
                      len, max_seq_len));
    }
    const int64_t used = len > 0 ? (len + block_size - 1) / block_size : 0;
    if (used > width) {
      return invalid_argument(fmt::format(
          "{}: argument 'seq_lens' has seq_lens[{}] = {}, which needs {} blocks of {} tokens, "
          "but block_tables has {} per sequence",
          op, s, len, used, block_size, width));
    }
    for (int64_t i = 0; i < used; ++i) {
      const int64_t block = dense_i32(block_tables, s * width + i);
      if (block < 0 || block >= blocks) {
        return invalid_argument(
            fmt::format("{}: argument 'block_tables' has block_tables[{}, {}] = {}, outside "
                        "the cache's blocks [0, {})",
                        op, s, i, block, blocks));
      }
    }
  }
  return Status::ok();
}

Result<VerticalSlashCounts> check_vertical_slash_indexes(std::string_view op,
                                                         const VerticalSlashParams& p,
                                                         bool mergehead, const KernelArgs& args) {
  const Tensor& q_seqlens = args.tensor(4);
  const Tensor& kv_seqlens = args.tensor(5);
  const Tensor& vertical = args.tensor(6);
  const Tensor& slash = args.tensor(7);
  const int64_t batch = slash.size(0), heads = slash.size(1);
  const int64_t nnz_s = slash.size(2), nnz_v = vertical.size(2);
  const int64_t rows = args.tensor(0).size(2);
  VerticalSlashCounts counts{std::vector<int64_t>(size_t(heads), nnz_v),
                             std::vector<int64_t>(size_t(heads), nnz_s)};
  for (int64_t h = 0; mergehead && h < heads; ++h) {
    const int64_t count_v = dense_i32(args.tensor(8), h);
    const int64_t count_s = dense_i32(args.tensor(9), h);
    if (count_v < 1 || count_v > nnz_v) {
      return invalid_argument(
          fmt::format("{}: argument 'vertical_indices_count' has [{}] = {}, outside [1, {}]", op, h,
                      count_v, nnz_v));
    }
    if (count_s < 1 || count_s > nnz_s) {
      return invalid_argument(
          fmt::format("{}: argument 'slash_indices_count' has [{}] = {}, outside [1, {}]", op, h,
                      count_s, nnz_s));
    }
    counts.vertical[size_t(h)] = count_v;
    counts.slash[size_t(h)] = count_s;
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q_len = dense_i32(q_seqlens, b);
    const int64_t kv_len = dense_i32(kv_seqlens, b);
    if (q_len < 0 || q_len > rows * p.block_m) {
      return invalid_argument(fmt::format(
          "{}: argument 'q_seqlens' has q_seqlens[{}] = {}, outside [0, {}] (context_size gives "
          "{} row blocks of {})",
          op, b, q_len, rows * p.block_m, rows, p.block_m));
    }
    if (kv_len < 0) {
      return invalid_argument(
          fmt::format("{}: argument 'kv_seqlens' has kv_seqlens[{}] = {} < 0", op, b, kv_len));
    }
    if (q_len == 0) continue;  // no row block reads this entry's lists
    // Causal (intra-chunk) attention needs kv_len >= q_len: the frontier shift kv - q is the
    // length of the cached prefix.
    if (p.causal && kv_len < q_len) {
      return invalid_argument(fmt::format(
          "{}: argument 'kv_seqlens' has kv_seqlens[{}] = {} < q_seqlens[{}] = {} (causal needs "
          "kv_len >= q_len)",
          op, b, kv_len, b, q_len));
    }
    for (int64_t h = 0; h < heads; ++h) {
      // Slash offsets are distances below the frontier; a negative one (a diagonal above it)
      // can push a range past the walk's sentinel column, and vLLM's walk then never ends.
      for (int64_t i = 0; i < counts.slash[size_t(h)]; ++i) {
        const int64_t offset = dense_i32(slash, (b * heads + h) * nnz_s + i);
        if (offset < 0) {
          return invalid_argument(fmt::format(
              "{}: argument 'slash_indexes' has [{}, {}, {}] = {}; offsets must be >= 0", op, b, h,
              i, offset));
        }
      }
      for (int64_t i = 0; i < counts.vertical[size_t(h)]; ++i) {
        const int64_t col = dense_i32(vertical, (b * heads + h) * nnz_v + i);
        if (col < 0 || col >= kv_len) {
          return invalid_argument(fmt::format(
              "{}: argument 'vertical_indexes' has [{}, {}, {}] = {}, outside the keys [0, {})", op,
              b, h, i, col, kv_len));
        }
      }
    }
  }
  return counts;
}

Status check_attention_args(const OpSpec& spec, const KernelArgs& args) {
  // The shapes below are derived from the spec (x = 16 / element size, partitions of
  // partition_size, row blocks of block_m): an invalid spec would divide by zero.
  KILN_RETURN_IF_ERROR(validate(spec));
  switch (spec.op) {
    case OpKind::kPagedAttentionV1:
    case OpKind::kPagedAttentionV2: return check_paged_attention(spec, args);
    case OpKind::kMergeAttnStates: return check_merge(spec, args);
    case OpKind::kConvertVerticalSlashIndexes:
    case OpKind::kConvertVerticalSlashIndexesMergehead: return check_vertical_slash(spec, args);
    case OpKind::kTopKPerRowPrefill:
    case OpKind::kTopKPerRowDecode: return check_top_k(spec, args);
    default:
      return {
          StatusCode::kInternal,
          fmt::format("check_attention_args: {} is not in the attention family", op_name(spec.op))};
  }
}

}  // namespace jit::ir
