#include "ir/params_attention.h"

#include <fmt/format.h>

#include "ir/params_cache.h"

namespace jit::ir {
namespace {

// Largest v2 partition and vertical/slash block (KILN limits; vLLM uses 512 and 64).
constexpr int64_t kMaxPartition = int64_t(1) << 20;
constexpr int64_t kMaxSparseBlock = 4096;
constexpr int64_t kMaxTopK = int64_t(1) << 16;

double ceil_div(int64_t a, int64_t b) {
  return double((a + b - 1) / b);
}

}  // namespace

Status validate(OpKind op, const PagedAttentionParams& p) {
  KILN_RETURN_IF_ERROR(check_field_float("dtype", p.dtype));
  KILN_RETURN_IF_ERROR(check_field_kv_plain(p.kv));
  KILN_RETURN_IF_ERROR(check_field_range("head_size", p.head_size, 1, kMaxHeadSize));
  KILN_RETURN_IF_ERROR(check_field_range("block_size", p.block_size, 1, kMaxBlockSize));
  KILN_RETURN_IF_ERROR(check_head_counts(p.head_count_q, p.head_count_kv));
  // The key cache is [blocks, heads_kv, head_size/x, block_size, x] with x = 16 bytes of
  // cache elements; a head size that is not a multiple of x has no such layout.
  const int64_t x = paged_key_x(p.dtype, p.kv);
  if (p.head_size % x != 0) {
    return invalid_argument(
        fmt::format("head_size={} must be a multiple of {} for {} caches (x = {}: the key cache is "
                    "[blocks, heads_kv, head_size/x, block_size, x])",
                    p.head_size, x, p.kv == KvCacheDtype::kAuto ? dtype_name(p.dtype) : "fp8", x));
  }
  KILN_RETURN_IF_ERROR(check_block_extent(p.head_count_kv, p.head_size, p.block_size,
                                          cache_element_size(p.dtype, p.kv)));
  if (op == OpKind::kPagedAttentionV1) {
    if (p.partition_size != 0) {
      return invalid_argument(fmt::format(
          "partition_size={} must be 0 for paged_attention_v1 (only v2 partitions the context)",
          p.partition_size));
    }
    return Status::ok();
  }
  KILN_RETURN_IF_ERROR(
      check_field_range("partition_size", p.partition_size, p.block_size, kMaxPartition));
  if (p.partition_size % p.block_size != 0) {
    return invalid_argument(fmt::format(
        "partition_size={} must be a multiple of block_size={} (a cache block may not straddle "
        "two partitions)",
        p.partition_size, p.block_size));
  }
  return Status::ok();
}

Status validate(OpKind, const MergeAttnStatesParams& p) {
  KILN_RETURN_IF_ERROR(check_field_float("dtype", p.dtype));
  if (p.out_dtype != p.dtype && p.out_dtype != DType::kFp8E4m3) {
    return invalid_argument(
        fmt::format("out_dtype={} is not supported for dtype={} (allowed: {}, or fp8_e4m3 when "
                    "output_scale is given)",
                    dtype_name(p.out_dtype), dtype_name(p.dtype), dtype_name(p.dtype)));
  }
  KILN_RETURN_IF_ERROR(check_field_range("heads", p.head_count, 1, kMaxHeads));
  return check_field_range("head_size", p.head_size, 1, kMaxHeadSize);
}

Status validate(OpKind, const VerticalSlashParams& p) {
  KILN_RETURN_IF_ERROR(check_field_range("block_m", p.block_m, 1, kMaxSparseBlock));
  KILN_RETURN_IF_ERROR(check_field_range("block_n", p.block_n, 1, kMaxSparseBlock));
  if (p.block_n != p.block_m) {
    return invalid_argument(fmt::format(
        "block_n={} must equal block_m={} (KILN: only then do the block and column lists fit "
        "their NNZ_S / NNZ_V buffers)",
        p.block_n, p.block_m));
  }
  return Status::ok();
}

Status validate(OpKind, const TopKParams& p) {
  return check_field_range("top_k", p.top_k, 1, kMaxTopK);
}

Estimate estimate(OpKind op, const PagedAttentionParams& p, const ProblemSize& size) {
  const double seqs = double(size.batch);
  const double context = double(size.context);
  const double d = double(p.head_size);
  const double hq = double(p.head_count_q);
  const double elem = double(dtype_size(p.dtype));
  const bool fp8 = p.kv != KvCacheDtype::kAuto;
  // K and V of every cached token read once per kv head (GQA sharing), query in, out written,
  // one block-table entry per block, seq_lens, slopes and fp8 scales.
  double bytes = seqs * context * double(p.head_count_kv) * d * 2.0 *
                     double(cache_element_size(p.dtype, p.kv)) +
                 2.0 * seqs * hq * d * elem + seqs * 4.0 * ceil_div(size.context, p.block_size) +
                 4.0 * seqs + (p.alibi ? 4.0 * hq : 0.0) + (fp8 ? 8.0 : 0.0);
  if (op == OpKind::kPagedAttentionV2) {
    // exp_sums, max_logits and tmp_out of every partition are written, then read by the reduce.
    const double partitions = ceil_div(size.context, p.partition_size);
    bytes += 2.0 * seqs * hq * partitions * (8.0 + d * elem);
  }
  // Q.K and P.V: one multiply-add each per (head, token, dim); fp8 adds one dequant multiply
  // per cached K and V element.
  double flops = 4.0 * seqs * hq * context * d;
  if (fp8) flops += 2.0 * seqs * double(p.head_count_kv) * context * d;
  return {bytes, flops};
}

Estimate estimate(OpKind, const MergeAttnStatesParams& p, const ProblemSize& size) {
  const double pairs = double(size.tokens) * double(p.head_count);
  const double d = double(p.head_size);
  // Two partial outputs and two LSEs in, the output (and LSE) out.
  const double bytes = pairs * d * double(2 * dtype_size(p.dtype) + dtype_size(p.out_dtype)) +
                       8.0 * pairs + (p.output_lse ? 4.0 * pairs : 0.0) +
                       (p.out_dtype == DType::kFp8E4m3 ? 4.0 : 0.0);
  // out = prefix * a + suffix * b: three operations per element.
  return {bytes, 3.0 * pairs * d};
}

Estimate estimate(OpKind, const VerticalSlashParams& p, const ProblemSize& size) {
  // Each (batch entry, head) reads its vertical and slash lists once and writes a block count
  // and a column count per row block; the offsets and columns written depend on the data.
  const double units = double(size.batch);
  const double row_blocks = ceil_div(size.tokens, p.block_m);
  return {units * (4.0 * double(size.context) + 8.0 * row_blocks) + 8.0, 0.0};
}

Estimate estimate(OpKind, const TopKParams& p, const ProblemSize& size) {
  const double rows = double(size.tokens);
  // Every logit of a row read once, top_k indices written, the row's range (two int32s);
  // one comparison per logit.
  const double bytes = rows * (4.0 * double(size.context) + 4.0 * double(p.top_k) + 8.0);
  return {bytes, rows * double(size.context)};
}

}  // namespace jit::ir
