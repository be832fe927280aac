#include "ir/params_cache.h"

#include <fmt/format.h>

namespace jit::ir {
namespace {

// Largest cache block (and swap_blocks block) in bytes: 32-bit offsets inside a block.
constexpr int64_t kMaxBlockBytes = (int64_t(1) << 31) - 1;

// Bytes of the DeepSeek fp8_ds_mla entry and of its kv_c / rope parts (spec §2.4.b).
constexpr int64_t kDsMlaEntryBytes = 656;
constexpr int64_t kDsMlaRank = 512;
constexpr int64_t kDsMlaPeDim = 64;
// Width of the bf16 row cp_gather_and_upconvert_fp8_kv_cache writes (512 NoPE + 64 rope).
constexpr int64_t kUpconvertRow = 576;

bool is_fp8(KvCacheDtype kv) {
  return kv != KvCacheDtype::kAuto;
}

Status check_block_size(int64_t block_size) {
  return check_field_range("block_size", block_size, 1, kMaxBlockSize);
}

// The rules both indexer ops share: D, quant_block dividing D, BS, and the block extent
// BS * (D + 4 * D / quant_block) bytes.
Status check_indexer_layout(int64_t head_dim, int64_t quant_block, int64_t block_size) {
  KILN_RETURN_IF_ERROR(check_field_range("head_dim", head_dim, 1, kMaxHeadSize));
  KILN_RETURN_IF_ERROR(check_field_range("quant_block", quant_block, 1, head_dim, "head_dim"));
  if (head_dim % quant_block != 0) {
    return invalid_argument(
        fmt::format("quant_block={} must divide head_dim={}", quant_block, head_dim));
  }
  KILN_RETURN_IF_ERROR(check_block_size(block_size));
  return check_block_extent(1, head_dim + 4 * (head_dim / quant_block), block_size, 1);
}

// Bytes of one indexer cache entry: D e4m3 codes plus one fp32 scale per group.
double indexer_entry_bytes(int64_t head_dim, int64_t quant_block) {
  return double(head_dim) + 4.0 * double(head_dim / quant_block);
}

// Block-table entries a gather of `rows` tokens must read at least (one request).
double block_table_bytes(int64_t rows, int64_t block_size) {
  return 4.0 * double((rows + block_size - 1) / block_size);
}

// reshape_and_cache(_flash): read key and value rows, write both caches, read the slots and
// (fp8) the scales; fp8 quantisation costs one division per element.
Estimate kv_write_estimate(DType dtype, KvCacheDtype kv, int64_t heads, int64_t head_size,
                           double scale_bytes, const ProblemSize& size) {
  const double elems = double(size.tokens) * double(heads) * double(head_size);
  const double per_elem = double(dtype_size(dtype) + cache_element_size(dtype, kv));
  const double bytes =
      2 * elems * per_elem + 8.0 * double(size.tokens) + (is_fp8(kv) ? scale_bytes : 0.0);
  return {bytes, is_fp8(kv) ? 2 * elems : 0.0};
}

}  // namespace

size_t cache_element_size(DType dtype, KvCacheDtype kv) {
  return kv == KvCacheDtype::kAuto ? dtype_size(dtype) : 1;
}

int64_t paged_key_x(DType dtype, KvCacheDtype kv) {
  return 16 / int64_t(cache_element_size(dtype, kv));
}

Status check_field_range(const char* field, int64_t value, int64_t lo, int64_t hi,
                         std::string_view hi_name) {
  if (value >= lo && value <= hi) return Status::ok();
  return invalid_argument(fmt::format("{}={} is out of range (allowed: {} .. {}{}{})", field, value,
                                      lo, hi_name, hi_name.empty() ? "" : "=", hi));
}

Status check_field_float(const char* field, DType dtype) {
  if (is_float_activation(dtype)) return Status::ok();
  return invalid_argument(
      fmt::format("{}={} is not supported (allowed: f32, f16, bf16)", field, dtype_name(dtype)));
}

Status check_field_kv_plain(KvCacheDtype kv) {
  if (kv != KvCacheDtype::kFp8DsMla) return Status::ok();
  return invalid_argument(
      "kv=fp8_ds_mla is not supported (allowed: auto, fp8_e4m3, fp8_e5m2); fp8_ds_mla is a "
      "layout of concat_and_cache_mla only and means per-tensor e4m3 elsewhere: write "
      "kv=fp8_e4m3");
}

Status check_head_counts(int64_t head_count_q, int64_t head_count_kv) {
  KILN_RETURN_IF_ERROR(check_field_range("heads_q", head_count_q, 1, kMaxHeads));
  KILN_RETURN_IF_ERROR(check_field_range("heads_kv", head_count_kv, 1, head_count_q));
  if (head_count_q % head_count_kv != 0) {
    return invalid_argument(
        fmt::format("heads_q={} must be a multiple of heads_kv={}", head_count_q, head_count_kv));
  }
  return Status::ok();
}

Status check_block_extent(int64_t heads, int64_t head_size, int64_t block_size,
                          size_t element_size) {
  // Each factor is bounded by its own range check, so the product fits in a double exactly
  // enough to compare with 2^31.
  const double bytes =
      double(heads) * double(head_size) * double(block_size) * double(element_size);
  if (bytes <= double(kMaxBlockBytes)) return Status::ok();
  return invalid_argument(fmt::format(
      "block_size={} makes one cache block {} bytes (heads {} x head size {} x block_size x {} "
      "bytes); the limit is 2^31 - 1 bytes",
      block_size, bytes, heads, head_size, element_size));
}

Status validate(OpKind, const SwapBlocksParams& p) {
  return check_field_range("block_bytes", p.block_bytes, 1, kMaxBlockBytes);
}

Status validate(OpKind, const PagedCacheWriteParams& p) {
  KILN_RETURN_IF_ERROR(check_field_float("dtype", p.dtype));
  KILN_RETURN_IF_ERROR(check_field_kv_plain(p.kv));
  KILN_RETURN_IF_ERROR(check_field_range("heads_kv", p.head_count_kv, 1, kMaxHeads));
  KILN_RETURN_IF_ERROR(check_field_range("head_size", p.head_size, 1, kMaxHeadSize));
  KILN_RETURN_IF_ERROR(check_block_size(p.block_size));
  // The key cache groups x = 16 bytes of head dims per token; a remainder would not be written.
  const int64_t x = paged_key_x(p.dtype, p.kv);
  if (p.head_size % x != 0) {
    return invalid_argument(
        fmt::format("head_size={} must be a multiple of {} for {} caches (x = {}: the key cache is "
                    "[blocks, heads, head_size/x, block_size, x])",
                    p.head_size, x, is_fp8(p.kv) ? "fp8" : dtype_name(p.dtype), x));
  }
  return check_block_extent(p.head_count_kv, p.head_size, p.block_size,
                            cache_element_size(p.dtype, p.kv));
}

Status validate(OpKind, const FlashCacheWriteParams& p) {
  KILN_RETURN_IF_ERROR(check_field_float("dtype", p.dtype));
  KILN_RETURN_IF_ERROR(check_field_kv_plain(p.kv));
  KILN_RETURN_IF_ERROR(check_field_range("heads_kv", p.head_count_kv, 1, kMaxHeads));
  KILN_RETURN_IF_ERROR(check_field_range("head_size", p.head_size, 1, kMaxHeadSize));
  KILN_RETURN_IF_ERROR(check_block_size(p.block_size));
  if (p.per_head_scale && !is_fp8(p.kv)) {
    return invalid_argument(
        "per_head_scale=true requires kv=fp8_e4m3 or fp8_e5m2 (kv=auto reads no scale)");
  }
  return check_block_extent(p.head_count_kv, p.head_size, p.block_size,
                            cache_element_size(p.dtype, p.kv));
}

Status validate(OpKind, const MlaCacheWriteParams& p) {
  KILN_RETURN_IF_ERROR(check_field_float("dtype", p.dtype));
  KILN_RETURN_IF_ERROR(check_field_range("kv_lora_rank", p.kv_lora_rank, 1, kMaxEntry));
  KILN_RETURN_IF_ERROR(check_field_range("pe_dim", p.pe_dim, 1, kMaxEntry));
  KILN_RETURN_IF_ERROR(check_block_size(p.block_size));
  if (p.kv == KvCacheDtype::kFp8DsMla) {
    if (p.kv_lora_rank != kDsMlaRank || p.pe_dim != kDsMlaPeDim) {
      return invalid_argument(
          fmt::format("kv=fp8_ds_mla requires kv_lora_rank=512 and pe_dim=64 (got kv_lora_rank={}, "
                      "pe_dim={})",
                      p.kv_lora_rank, p.pe_dim));
    }
    if (p.dtype == DType::kF32) {
      return invalid_argument(
          "dtype=f32 is not supported with kv=fp8_ds_mla (allowed: f16, bf16: the rope part is "
          "stored as 16-bit values)");
    }
    return check_block_extent(1, kDsMlaEntryBytes, p.block_size, 1);
  }
  return check_block_extent(1, p.kv_lora_rank + p.pe_dim, p.block_size,
                            cache_element_size(p.dtype, p.kv));
}

Status validate(OpKind, const MlaRopeCacheWriteParams& p) {
  KILN_RETURN_IF_ERROR(check_field_float("dtype", p.dtype));
  if (p.kv == KvCacheDtype::kFp8DsMla) {
    return invalid_argument(
        "kv=fp8_ds_mla is not supported by the rope-fused op (allowed: auto, fp8_e4m3, "
        "fp8_e5m2): its 656-byte entry is not [kv_c | k_pe]; use concat_and_cache_mla");
  }
  KILN_RETURN_IF_ERROR(check_field_range("kv_lora_rank", p.kv_lora_rank, 1, kMaxEntry));
  KILN_RETURN_IF_ERROR(check_field_range("rot_dim", p.rot_dim, 2, kMaxHeadSize));
  if (p.rot_dim % 2 != 0) {
    return invalid_argument(fmt::format("rot_dim={} must be even (pairs are rotated)", p.rot_dim));
  }
  KILN_RETURN_IF_ERROR(check_field_range("heads_q", p.head_count_q, 1, kMaxHeads));
  KILN_RETURN_IF_ERROR(check_block_size(p.block_size));
  return check_block_extent(1, p.kv_lora_rank + p.rot_dim, p.block_size,
                            cache_element_size(p.dtype, p.kv));
}

Status validate(OpKind, const ConvertFp8Params& p) {
  if (is_float_activation(p.src)) {
    if (p.dst == DType::kFp8E4m3) return Status::ok();
    return invalid_argument(fmt::format(
        "dst={} is not supported for src={} (allowed: fp8_e4m3; convert_fp8 converts only e4m3, "
        "kv_cache_dtype fp8 or fp8_e4m3; a uint8 destination tensor is accepted at run time)",
        dtype_name(p.dst), dtype_name(p.src)));
  }
  if (p.src == DType::kFp8E4m3) {
    if (is_float_activation(p.dst)) return Status::ok();
    return invalid_argument(fmt::format(
        "dst={} is not supported for src=fp8_e4m3 (allowed: f32, f16, bf16)", dtype_name(p.dst)));
  }
  return invalid_argument(fmt::format(
      "src={} is not supported (allowed: f32, f16, bf16 to quantise into fp8_e4m3, or fp8_e4m3 "
      "to dequantise)",
      dtype_name(p.src)));
}

Status validate(OpKind, const GatherCacheParams& p) {
  KILN_RETURN_IF_ERROR(check_field_float("dtype", p.dtype));
  if (p.kv == KvCacheDtype::kFp8DsMla) {
    return invalid_argument(
        "kv=fp8_ds_mla is not supported (allowed: auto, fp8_e4m3, fp8_e5m2); gather 656-byte "
        "fp8_ds_mla entries with cp_gather_and_upconvert_fp8_kv_cache");
  }
  // vLLM serves only head_dim 320 and 576; kiln specialises any width.
  KILN_RETURN_IF_ERROR(check_field_range("head_dim", p.head_dim, 1, kMaxEntry));
  return check_block_size(p.block_size);
}

Status validate(OpKind, const CpGatherCacheParams& p) {
  const size_t width = dtype_size(p.dtype);
  if (width != 1 && width != 2 && width != 4) {
    return invalid_argument(fmt::format(
        "dtype={} is not supported (allowed: a 1-, 2- or 4-byte type: f32, f16, bf16, fp8_e4m3, "
        "fp8_e5m2, i8, u8, i32)",
        dtype_name(p.dtype)));
  }
  KILN_RETURN_IF_ERROR(check_field_range("entry_size", p.entry_size, 1, kMaxEntry));
  KILN_RETURN_IF_ERROR(check_block_size(p.block_size));
  return check_block_extent(1, p.entry_size, p.block_size, width);
}

Status validate(OpKind, const UpconvertGatherParams& p) {
  KILN_RETURN_IF_ERROR(check_block_size(p.block_size));
  return check_block_extent(1, kDsMlaEntryBytes, p.block_size, 1);
}

Status validate(OpKind, const IndexerQuantParams& p) {
  if (p.dtype != DType::kF16 && p.dtype != DType::kBF16) {
    return invalid_argument(
        fmt::format("dtype={} is not supported (allowed: f16, bf16)", dtype_name(p.dtype)));
  }
  return check_indexer_layout(p.head_dim, p.quant_block, p.block_size);
}

Status validate(OpKind, const IndexerGatherParams& p) {
  return check_indexer_layout(p.head_dim, p.quant_block, p.block_size);
}

Estimate estimate(OpKind, const SwapBlocksParams& p, const ProblemSize& size) {
  // Each pair reads and writes one block and reads its two int64 ids.
  const double pairs = double(size.tokens);
  return {pairs * (2.0 * double(p.block_bytes) + 16.0), 0.0};
}

Estimate estimate(OpKind, const PagedCacheWriteParams& p, const ProblemSize& size) {
  return kv_write_estimate(p.dtype, p.kv, p.head_count_kv, p.head_size, 8.0, size);
}

Estimate estimate(OpKind, const FlashCacheWriteParams& p, const ProblemSize& size) {
  const double scale_bytes = 8.0 * (p.per_head_scale ? double(p.head_count_kv) : 1.0);
  return kv_write_estimate(p.dtype, p.kv, p.head_count_kv, p.head_size, scale_bytes, size);
}

Estimate estimate(OpKind, const MlaCacheWriteParams& p, const ProblemSize& size) {
  const double tokens = double(size.tokens);
  const double width = double(p.kv_lora_rank + p.pe_dim);
  const double src = tokens * width * double(dtype_size(p.dtype)) + 8.0 * tokens;
  if (p.kv == KvCacheDtype::kFp8DsMla) {
    // Per element |x|, max and a division; one division per 128-element tile scale.
    const double flops = tokens * (3.0 * double(p.kv_lora_rank) + double(p.kv_lora_rank / 128));
    return {src + tokens * double(kDsMlaEntryBytes), flops};
  }
  const double dst = tokens * width * double(cache_element_size(p.dtype, p.kv));
  return {src + dst + (is_fp8(p.kv) ? 4.0 : 0.0), is_fp8(p.kv) ? tokens * width : 0.0};
}

Estimate estimate(OpKind, const MlaRopeCacheWriteParams& p, const ProblemSize& size) {
  const double tokens = double(size.tokens);
  const double elem = double(dtype_size(p.dtype));
  const double rot = double(p.rot_dim);
  const double rank = double(p.kv_lora_rank);
  // q_pe and k_pe are read and written in place; kv_c and one cos/sin row are read; the
  // entry [kv_c | k_pe] is written; positions and slots are int64.
  const double per_token = 2.0 * (double(p.head_count_q) + 1.0) * rot * elem + rank * elem +
                           rot * elem + (rank + rot) * double(cache_element_size(p.dtype, p.kv)) +
                           16.0;
  // A rotated pair costs 4 multiplies and 2 adds: 3 per element.
  double flops = 3.0 * rot * (double(p.head_count_q) + 1.0) * tokens;
  if (is_fp8(p.kv)) flops += (rank + rot) * tokens;
  return {per_token * tokens + (is_fp8(p.kv) ? 4.0 : 0.0), flops};
}

Estimate estimate(OpKind, const ConvertFp8Params& p, const ProblemSize& size) {
  const double elems = double(size.tokens);
  return {elems * double(dtype_size(p.src) + dtype_size(p.dst)), elems};
}

Estimate estimate(OpKind, const GatherCacheParams& p, const ProblemSize& size) {
  const double rows = double(size.tokens);
  const double row = double(p.head_dim);
  // Entries in, rows out; token_to_seq per row, cu_seq_lens per request, the block table.
  const double bytes =
      rows * row * double(cache_element_size(p.dtype, p.kv) + dtype_size(p.dtype)) + 4.0 * rows +
      4.0 * double(size.batch + 1) + block_table_bytes(size.tokens, p.block_size) +
      (is_fp8(p.kv) ? 4.0 : 0.0);
  return {bytes, is_fp8(p.kv) ? rows * row : 0.0};
}

Estimate estimate(OpKind, const CpGatherCacheParams& p, const ProblemSize& size) {
  const double rows = double(size.tokens);
  const double bytes = 2.0 * rows * double(p.entry_size) * double(dtype_size(p.dtype)) +
                       4.0 * double(size.batch + 1) + block_table_bytes(size.tokens, p.block_size);
  return {bytes, 0.0};
}

Estimate estimate(OpKind, const UpconvertGatherParams& p, const ProblemSize& size) {
  const double rows = double(size.tokens);
  // 656 bytes in, 576 bf16 out, workspace_starts per request; one multiply per NoPE element.
  const double bytes = rows * double(kDsMlaEntryBytes + 2 * kUpconvertRow) +
                       4.0 * double(size.batch) + block_table_bytes(size.tokens, p.block_size);
  return {bytes, rows * double(kDsMlaRank)};
}

Estimate estimate(OpKind, const IndexerQuantParams& p, const ProblemSize& size) {
  const double tokens = double(size.tokens);
  const double bytes = tokens * double(p.head_dim) * double(dtype_size(p.dtype)) +
                       tokens * indexer_entry_bytes(p.head_dim, p.quant_block) + 8.0 * tokens;
  // Per element |x|, max and a division.
  return {bytes, 3.0 * double(p.head_dim) * tokens};
}

Estimate estimate(OpKind, const IndexerGatherParams& p, const ProblemSize& size) {
  const double rows = double(size.tokens);
  const double bytes = 2.0 * rows * indexer_entry_bytes(p.head_dim, p.quant_block) +
                       4.0 * double(size.batch + 1) + block_table_bytes(size.tokens, p.block_size);
  return {bytes, 0.0};
}

Status validate(OpKind, const RopeFlashCacheWriteParams& p) {
  KILN_RETURN_IF_ERROR(check_field_float("dtype", p.dtype));
  KILN_RETURN_IF_ERROR(check_field_kv_plain(p.kv));
  KILN_RETURN_IF_ERROR(check_head_counts(p.head_count_q, p.head_count_kv));
  KILN_RETURN_IF_ERROR(check_field_range("head_size", p.head_size, 1, kMaxHeadSize));
  KILN_RETURN_IF_ERROR(check_field_range("rot_dim", p.rot_dim, 2, p.head_size));
  if (p.rot_dim % 2 != 0) {
    return invalid_argument(fmt::format("rot_dim={} must be even (pairs are rotated)", p.rot_dim));
  }
  KILN_RETURN_IF_ERROR(check_block_size(p.block_size));
  if (p.per_head_scale && !is_fp8(p.kv)) {
    return invalid_argument(
        "per_head_scale=true requires kv=fp8_e4m3 or fp8_e5m2 (kv=auto reads no scale)");
  }
  return check_block_extent(p.head_count_kv, p.head_size, p.block_size,
                            cache_element_size(p.dtype, p.kv));
}

Estimate estimate(OpKind, const RopeFlashCacheWriteParams& p, const ProblemSize& size) {
  // The cache write of every token (key and value read, both cache rows written, slot and
  // scales), plus the rope traffic the cache write does not already cover: the query's rotated
  // prefix read and written, the key's rotated prefix written back, one cos/sin row and the
  // position. A fused kernel reads the key once for both.
  const double tokens = double(size.tokens);
  const double elem = double(dtype_size(p.dtype));
  const double scale_bytes = 8.0 * (p.per_head_scale ? double(p.head_count_kv) : 1.0);
  Estimate e = kv_write_estimate(p.dtype, p.kv, p.head_count_kv, p.head_size, scale_bytes, size);
  const double rot = double(p.rot_dim);
  const double per_token =
      (2.0 * double(p.head_count_q) + double(p.head_count_kv)) * rot * elem + rot * elem + 8.0;
  e.bytes += per_token * tokens;
  e.flops += 3.0 * double(p.head_count_q + p.head_count_kv) * rot * tokens;
  return e;
}

}  // namespace jit::ir
