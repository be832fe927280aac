// Compile-time parameters of the KV-cache writes, gathers and quantisers ops.
// PROVISIONAL field lists; see the spec for which are compile-time.
#pragma once

#include <cstdint>

#include "ir/estimate.h"
#include "ir/field.h"
#include "ir/op_kind.h"
#include "ir/status.h"

namespace jit::ir {

/// swap_blocks: copies whole blocks of block_bytes bytes.
struct SwapBlocksParams {
  int64_t block_bytes = 0;  ///< bytes per block (block_size_in_bytes)

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("block_bytes", s.block_bytes);
  }
  bool operator==(const SwapBlocksParams&) const = default;
};

/// reshape_and_cache: legacy paged layout key [NB,H,D/x,BS,x], value [NB,H,D,BS].
struct PagedCacheWriteParams {
  DType dtype = DType::kBF16;  ///< key/value input type
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< cache storage
  int64_t heads = 0;  ///< H
  int64_t head_size = 0;  ///< D
  int64_t block_size = 0;  ///< BS

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("kv", s.kv);
    v("heads", s.heads);
    v("head_size", s.head_size);
    v("block_size", s.block_size);
  }
  bool operator==(const PagedCacheWriteParams&) const = default;
};

/// reshape_and_cache_flash: flash layout NHD or HND.
struct FlashCacheWriteParams {
  DType dtype = DType::kBF16;  ///< key/value input type
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< cache storage
  int64_t heads = 0;  ///< H
  int64_t head_size = 0;  ///< D
  int64_t block_size = 0;  ///< BS
  CacheLayout layout = CacheLayout::kNhd;  ///< cache layout
  bool per_head_scale = false;  ///< k_scale/v_scale hold one scale per head

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("kv", s.kv);
    v("heads", s.heads);
    v("head_size", s.head_size);
    v("block_size", s.block_size);
    v("layout", s.layout);
    v("per_head_scale", s.per_head_scale);
  }
  bool operator==(const FlashCacheWriteParams&) const = default;
};

/// concat_and_cache_mla.
struct MlaCacheWriteParams {
  DType dtype = DType::kBF16;  ///< kv_c/k_pe type
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< cache storage
  int64_t kv_lora_rank = 0;  ///< latent width
  int64_t pe_dim = 0;  ///< rope part width
  int64_t block_size = 0;  ///< BS

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

/// concat_and_cache_mla_rope_fused.
struct MlaRopeCacheWriteParams {
  DType dtype = DType::kBF16;  ///< q/kv type
  DType cache_dtype = DType::kBF16;  ///< cos_sin_cache type
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< cache storage
  int64_t kv_lora_rank = 0;  ///< latent width
  int64_t rot_dim = 0;  ///< rope width
  int64_t heads_q = 0;  ///< query heads
  RopeStyle style = RopeStyle::kGptj;  ///< pairing
  int64_t block_size = 0;  ///< BS

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("cache_dtype", s.cache_dtype);
    v("kv", s.kv);
    v("kv_lora_rank", s.kv_lora_rank);
    v("rot_dim", s.rot_dim);
    v("heads_q", s.heads_q);
    v("style", s.style);
    v("block_size", s.block_size);
  }
  bool operator==(const MlaRopeCacheWriteParams&) const = default;
};

/// convert_fp8.
struct ConvertFp8Params {
  DType dst = DType::kU8;  ///< destination type
  DType src = DType::kBF16;  ///< source type
  KvCacheDtype kv = KvCacheDtype::kFp8E4m3;  ///< fp8 flavour

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dst", s.dst);
    v("src", s.src);
    v("kv", s.kv);
  }
  bool operator==(const ConvertFp8Params&) const = default;
};

/// gather_and_maybe_dequant_cache.
struct GatherCacheParams {
  DType dst = DType::kBF16;  ///< output type
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< cache storage
  int64_t entry_size = 0;  ///< elements per cache entry
  int64_t block_size = 0;  ///< BS

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dst", s.dst);
    v("kv", s.kv);
    v("entry_size", s.entry_size);
    v("block_size", s.block_size);
  }
  bool operator==(const GatherCacheParams&) const = default;
};

/// cp_gather_cache.
struct CpGatherCacheParams {
  DType dtype = DType::kBF16;  ///< element type
  int64_t entry_size = 0;  ///< elements per cache entry
  int64_t block_size = 0;  ///< BS

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("entry_size", s.entry_size);
    v("block_size", s.block_size);
  }
  bool operator==(const CpGatherCacheParams&) const = default;
};

/// cp_gather_and_upconvert_fp8_kv_cache.
struct UpconvertGatherParams {
  int64_t block_size = 0;  ///< BS

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("block_size", s.block_size);
  }
  bool operator==(const UpconvertGatherParams&) const = default;
};

/// indexer_k_quant_and_cache and cp_gather_indexer_k_quant_cache.
struct IndexerQuantParams {
  DType dtype = DType::kBF16;  ///< k type
  int64_t head_dim = 0;  ///< D
  int64_t quant_block = 128;  ///< qbs
  int64_t block_size = 0;  ///< BS
  ScaleFormat scale_fmt = ScaleFormat::kPlain;  ///< scale format

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

}  // namespace jit::ir
