// Compile-time parameters of the KV-cache writes, gathers and quantisers (spec/cache_ops.md).
//
// What is baked into the code and what stays a run-time argument:
//   swap_blocks: compile-time block_bytes (block_size_in_bytes); run-time: src, dst, the block
//     mapping and its length, devices.
//   reshape_and_cache: compile-time input dtype, kv (kv_cache_dtype mode), heads_kv, head_size,
//     block_size (hence x = 16 / cache element size); run-time: token count
//     (slot_mapping.size(0)), block count, key/value row strides, slots, k_scale/v_scale.
//   reshape_and_cache_flash: as reshape_and_cache plus layout (NHD/HND) and per_head_scale
//     (k_scale/v_scale of [heads] instead of [1]); run-time: also the cache block stride.
//   concat_and_cache_mla: compile-time dtype, kv (fp8_ds_mla selects the 656-byte DeepSeek
//     entry), kv_lora_rank, pe_dim, block_size; run-time: token count, row/block/entry strides,
//     slots, scale.
//   concat_and_cache_mla_rope_fused: compile-time dtype (q_pe, k_pe, kv_c and cos_sin_cache),
//     kv, kv_lora_rank, rot_dim, heads_q, style (is_neox), block_size; run-time: token count,
//     positions, strides, slots, kv_cache_scale.
//   convert_fp8: compile-time src and dst dtypes (direction: exactly one side is fp8_e4m3);
//     run-time: element count, scale (a float).
//   gather_and_maybe_dequant_cache: compile-time dtype (dst), kv, head_dim (entry elements
//     copied), block_size; run-time: num_tokens, batch, block table, cu_seq_lens, token_to_seq,
//     scale, optional seq_starts.
//   cp_gather_cache: compile-time dtype, entry_size, block_size; run-time: batch_size, block
//     table, cu_seq_lens, optional seq_starts, strides.
//   cp_gather_and_upconvert_fp8_kv_cache: compile-time block_size (the 656-byte fp8_ds_mla entry
//     and the bf16 [576] row are fixed by the format); run-time: row count, batch_size, block
//     table, seq_lens, workspace_starts.
//   indexer_k_quant_and_cache: compile-time dtype, head_dim, quant_block, block_size, scale_fmt
//     (vLLM's fifth string argument); run-time: token count, slots.
//   cp_gather_indexer_k_quant_cache: compile-time head_dim, quant_block, block_size; run-time:
//     batch, block table, cu_seq_lens, destination row count.
//   rotary_embedding_and_cache_flash (kiln): compile-time dtype, kv, heads_q, heads_kv,
//     head_size, rot_dim, style, block_size, layout, per_head_scale; run-time: token count,
//     slot count (<= tokens), positions, strides, slots, k_scale/v_scale, the cos/sin rows.
#pragma once

#include <cstdint>
#include <string_view>

#include "ir/estimate.h"
#include "ir/field.h"
#include "ir/op_kind.h"
#include "ir/status.h"

namespace jit::ir {

/// swap_blocks: copies whole blocks of `block_bytes` bytes from src to dst.
struct SwapBlocksParams {
  int64_t block_bytes = 0;  ///< bytes per block (vLLM's block_size_in_bytes), >= 1

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("block_bytes", s.block_bytes);
  }
  bool operator==(const SwapBlocksParams&) const = default;
};

/// reshape_and_cache: legacy paged layout, key cache [NB, H, D/x, BS, x], value cache
/// [NB, H, D, BS], x = 16 / cache element size.
struct PagedCacheWriteParams {
  DType dtype = DType::kBF16;             ///< key/value input type (f32/f16/bf16)
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< cache storage: auto (= dtype), fp8_e4m3, fp8_e5m2
  int64_t head_count_kv = 0;              ///< H
  int64_t head_size = 0;                  ///< D, a multiple of x
  int64_t block_size = 0;                 ///< BS, tokens per cache block

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("kv", s.kv);
    v("heads_kv", s.head_count_kv);
    v("head_size", s.head_size);
    v("block_size", s.block_size);
  }
  bool operator==(const PagedCacheWriteParams&) const = default;
};

/// reshape_and_cache_flash: flash layout, logical [NB, BS, H, D] stored NHD or HND.
struct FlashCacheWriteParams {
  DType dtype = DType::kBF16;              ///< key/value input type (f32/f16/bf16)
  KvCacheDtype kv = KvCacheDtype::kAuto;   ///< cache storage: auto, fp8_e4m3, fp8_e5m2
  int64_t head_count_kv = 0;               ///< H
  int64_t head_size = 0;                   ///< D
  int64_t block_size = 0;                  ///< BS
  CacheLayout layout = CacheLayout::kNhd;  ///< physical order of a block
  bool per_head_scale = false;             ///< k_scale/v_scale hold one scale per head (fp8 only)

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("kv", s.kv);
    v("heads_kv", s.head_count_kv);
    v("head_size", s.head_size);
    v("block_size", s.block_size);
    v("layout", s.layout);
    v("per_head_scale", s.per_head_scale);
  }
  bool operator==(const FlashCacheWriteParams&) const = default;
};

/// concat_and_cache_mla: cache entries [kv_c (R) | k_pe (P)], or the 656-byte fp8_ds_mla entry.
struct MlaCacheWriteParams {
  DType dtype = DType::kBF16;             ///< kv_c/k_pe type (f32/f16/bf16; f16/bf16 for ds_mla)
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< auto, fp8_e4m3, fp8_e5m2 or fp8_ds_mla
  int64_t kv_lora_rank = 0;               ///< R, latent width (512 for fp8_ds_mla)
  int64_t pe_dim = 0;                     ///< P, rope part width (64 for fp8_ds_mla)
  int64_t block_size = 0;                 ///< BS

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("kv", s.kv);
    v("kv_lora_rank", s.kv_lora_rank);
    v("pe_dim", s.pe_dim);
    v("block_size", s.block_size);
  }
  bool operator==(const MlaCacheWriteParams&) const = default;
};

/// concat_and_cache_mla_rope_fused: rotates q_pe and k_pe, then writes [kv_c | rotated k_pe].
struct MlaRopeCacheWriteParams {
  DType dtype = DType::kBF16;  ///< q_pe, k_pe, kv_c and cos_sin_cache type (f32/f16/bf16)
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< auto, fp8_e4m3, fp8_e5m2
  int64_t kv_lora_rank = 0;               ///< R
  int64_t rot_dim = 0;                    ///< rope width of q_pe/k_pe, even
  int64_t head_count_q = 0;               ///< Hq, heads of q_pe
  RopeStyle style = RopeStyle::kGptj;     ///< pairing (is_neox)
  int64_t block_size = 0;                 ///< BS

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("kv", s.kv);
    v("kv_lora_rank", s.kv_lora_rank);
    v("rot_dim", s.rot_dim);
    v("heads_q", s.head_count_q);
    v("style", s.style);
    v("block_size", s.block_size);
  }
  bool operator==(const MlaRopeCacheWriteParams&) const = default;
};

/// convert_fp8: element-wise e4m3 quantise (src float, dst fp8_e4m3) or dequantise (src
/// fp8_e4m3, dst float).
struct ConvertFp8Params {
  DType dst = DType::kFp8E4m3;  ///< destination element type
  DType src = DType::kBF16;     ///< source element type

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dst", s.dst);
    v("src", s.src);
  }
  bool operator==(const ConvertFp8Params&) const = default;
};

/// gather_and_maybe_dequant_cache: gathers the first head_dim elements of cache entries into
/// dst rows, dequantising fp8 caches.
struct GatherCacheParams {
  DType dtype = DType::kBF16;             ///< dst type (f32/f16/bf16); the cache type when auto
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< auto, fp8_e4m3, fp8_e5m2
  int64_t head_dim = 0;                   ///< HD, elements per gathered row
  int64_t block_size = 0;                 ///< BS

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("kv", s.kv);
    v("head_dim", s.head_dim);
    v("block_size", s.block_size);
  }
  bool operator==(const GatherCacheParams&) const = default;
};

/// cp_gather_cache: copies cache entries of entry_size elements into dst rows (no conversion).
struct CpGatherCacheParams {
  DType dtype = DType::kBF16;  ///< element type: any 1-, 2- or 4-byte type
  int64_t entry_size = 0;      ///< E, elements per cache entry (product of dims 2..)
  int64_t block_size = 0;      ///< BS

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("entry_size", s.entry_size);
    v("block_size", s.block_size);
  }
  bool operator==(const CpGatherCacheParams&) const = default;
};

/// cp_gather_and_upconvert_fp8_kv_cache: 656-byte fp8_ds_mla entries -> bf16 rows of 576.
struct UpconvertGatherParams {
  int64_t block_size = 0;  ///< BS

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("block_size", s.block_size);
  }
  bool operator==(const UpconvertGatherParams&) const = default;
};

/// indexer_k_quant_and_cache: per-group e4m3 quantisation of k into the indexer block layout
/// (block = BS*D value bytes, then BS*(D/quant_block) fp32 scales).
struct IndexerQuantParams {
  DType dtype = DType::kBF16;                   ///< k type (f16/bf16)
  int64_t head_dim = 0;                         ///< D
  int64_t quant_block = 128;                    ///< elements per scale group; divides D
  int64_t block_size = 0;                       ///< BS
  ScaleFormat scale_fmt = ScaleFormat::kPlain;  ///< plain fp32 scales or powers of two (ue8m0)

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("head_dim", s.head_dim);
    v("quant_block", s.quant_block);
    v("block_size", s.block_size);
    v("scale_fmt", s.scale_fmt);
  }
  bool operator==(const IndexerQuantParams&) const = default;
};

/// cp_gather_indexer_k_quant_cache: gathers the value bytes and scales written by
/// indexer_k_quant_and_cache (a byte copy: the k dtype and scale format do not matter).
struct IndexerGatherParams {
  int64_t head_dim = 0;       ///< D
  int64_t quant_block = 128;  ///< elements per scale group; divides D
  int64_t block_size = 0;     ///< BS

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("head_dim", s.head_dim);
    v("quant_block", s.quant_block);
    v("block_size", s.block_size);
  }
  bool operator==(const IndexerGatherParams&) const = default;
};

/// rotary_embedding_and_cache_flash (a kiln op, not in vLLM): rotary_embedding on query and
/// key in place, then reshape_and_cache_flash of the rotated key and the value, in one pass
/// over each token. The cos/sin table has the query/key type (classic vLLM rope).
struct RopeFlashCacheWriteParams {
  DType dtype = DType::kBF16;              ///< query/key/value and cos_sin_cache type
  KvCacheDtype kv = KvCacheDtype::kAuto;   ///< cache storage: auto, fp8_e4m3, fp8_e5m2
  int64_t head_count_q = 0;                ///< heads of query
  int64_t head_count_kv = 0;               ///< heads of key and value (heads_q % heads_kv == 0)
  int64_t head_size = 0;                   ///< D
  int64_t rot_dim = 0;                     ///< rotated prefix of each head: even, <= head_size
  RopeStyle style = RopeStyle::kNeox;      ///< pairing (is_neox)
  int64_t block_size = 0;                  ///< BS
  CacheLayout layout = CacheLayout::kNhd;  ///< physical order of a block
  bool per_head_scale = false;             ///< k_scale/v_scale hold one scale per head (fp8 only)

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("kv", s.kv);
    v("heads_q", s.head_count_q);
    v("heads_kv", s.head_count_kv);
    v("head_size", s.head_size);
    v("rot_dim", s.rot_dim);
    v("style", s.style);
    v("block_size", s.block_size);
    v("layout", s.layout);
    v("per_head_scale", s.per_head_scale);
  }
  bool operator==(const RopeFlashCacheWriteParams&) const = default;
};

/// Checks the params of `op` against its contract (target-independent); an invalid-argument
/// Status names the field and the allowed values or range.
Status validate(OpKind op, const SwapBlocksParams& p);
Status validate(OpKind op, const PagedCacheWriteParams& p);
Status validate(OpKind op, const FlashCacheWriteParams& p);
Status validate(OpKind op, const MlaCacheWriteParams& p);
Status validate(OpKind op, const MlaRopeCacheWriteParams& p);
Status validate(OpKind op, const ConvertFp8Params& p);
Status validate(OpKind op, const GatherCacheParams& p);
Status validate(OpKind op, const CpGatherCacheParams& p);
Status validate(OpKind op, const UpconvertGatherParams& p);
Status validate(OpKind op, const IndexerQuantParams& p);
Status validate(OpKind op, const IndexerGatherParams& p);
Status validate(OpKind op, const RopeFlashCacheWriteParams& p);

/// Estimates use ProblemSize.tokens as: block pairs copied (swap_blocks), tokens written
/// (cache writes, indexer quantiser), elements converted (convert_fp8), rows gathered (gathers);
/// `batch` is the request count of the gathers.
Estimate estimate(OpKind op, const SwapBlocksParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const PagedCacheWriteParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const FlashCacheWriteParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const MlaCacheWriteParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const MlaRopeCacheWriteParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const ConvertFp8Params& p, const ProblemSize& size);
Estimate estimate(OpKind op, const GatherCacheParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const CpGatherCacheParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const UpconvertGatherParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const IndexerQuantParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const IndexerGatherParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const RopeFlashCacheWriteParams& p, const ProblemSize& size);

// ---- KV-cache rules shared by the cache, attention and CPU-attention families.

/// Bytes of one cache element: the input dtype's size when kv=auto, else 1 (an fp8 code).
size_t cache_element_size(DType dtype, KvCacheDtype kv);

/// x of the legacy paged key layout [NB, H, D/x, BS, x]: cache elements per 16 bytes.
int64_t paged_key_x(DType dtype, KvCacheDtype kv);

/// OK when `value` is in [lo, hi]; else "<field>=<value> is out of range (allowed: lo .. hi)",
/// or "(allowed: lo .. <hi_name>=hi)" when the bound is another field's value `hi_name`.
Status check_field_range(const char* field, int64_t value, int64_t lo, int64_t hi,
                         std::string_view hi_name = {});

/// OK for f32, f16 and bf16; else "<field>=<name> is not supported (allowed: f32, f16, bf16)".
Status check_field_float(const char* field, DType dtype);

/// OK for kv=auto, fp8_e4m3 and fp8_e5m2. fp8_ds_mla is a layout of concat_and_cache_mla only;
/// everywhere else it means per-tensor e4m3, so the canonical spec spells it fp8_e4m3.
Status check_field_kv_plain(KvCacheDtype kv);

/// heads_q >= 1, heads_kv in [1, heads_q] and heads_q % heads_kv == 0 (GQA groups).
Status check_head_counts(int64_t head_count_q, int64_t head_count_kv);

/// One cache block (heads * head_size * block_size elements of `element_size` bytes) must stay
/// below 2 GiB: backends index inside a block with 32-bit offsets.
Status check_block_extent(int64_t heads, int64_t head_size, int64_t block_size,
                          size_t element_size);

/// Limits shared by the families (KILN choices; no model comes close to them).
inline constexpr int64_t kMaxHeads = 4096;
inline constexpr int64_t kMaxHeadSize = 4096;
inline constexpr int64_t kMaxBlockSize = int64_t(1) << 16;
inline constexpr int64_t kMaxEntry = int64_t(1) << 24;

}  // namespace jit::ir
