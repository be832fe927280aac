// Compile-time parameters of the CPU attention and oneDNN GEMM ops.
// PROVISIONAL field lists; see the spec for which are compile-time.
#pragma once

#include <cstdint>

#include "ir/estimate.h"
#include "ir/field.h"
#include "ir/op_kind.h"
#include "ir/status.h"

namespace jit::ir {

/// cpu_attn_get_scheduler_metadata.
struct CpuAttnSchedulerParams {
  DType dtype = DType::kBF16;  ///< query type
  int64_t head_size = 0;  ///< D
  int64_t heads_q = 0;  ///< query heads
  int64_t heads_kv = 0;  ///< kv heads
  bool causal = true;  ///< causal

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("head_size", s.head_size);
    v("heads_q", s.heads_q);
    v("heads_kv", s.heads_kv);
    v("causal", s.causal);
  }
  bool operator==(const CpuAttnSchedulerParams&) const = default;
};

/// cpu_attn_reshape_and_cache.
struct CpuAttnCacheWriteParams {
  DType dtype = DType::kBF16;  ///< key/value type
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< cache storage
  int64_t heads_kv = 0;  ///< kv heads
  int64_t head_size = 0;  ///< D
  int64_t block_size = 0;  ///< BS

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("kv", s.kv);
    v("heads_kv", s.heads_kv);
    v("head_size", s.head_size);
    v("block_size", s.block_size);
  }
  bool operator==(const CpuAttnCacheWriteParams&) const = default;
};

/// cpu_attention_with_kv_cache.
struct CpuAttentionParams {
  DType dtype = DType::kBF16;  ///< query type
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< cache storage
  int64_t head_size = 0;  ///< D
  int64_t block_size = 0;  ///< BS
  int64_t heads_q = 0;  ///< query heads
  int64_t heads_kv = 0;  ///< kv heads
  bool causal = true;  ///< causal
  bool sliding_window = false;  ///< window
  bool alibi = false;  ///< alibi
  bool softcap = false;  ///< softcap
  bool sinks = false;  ///< sinks

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("kv", s.kv);
    v("head_size", s.head_size);
    v("block_size", s.block_size);
    v("heads_q", s.heads_q);
    v("heads_kv", s.heads_kv);
    v("causal", s.causal);
    v("sliding_window", s.sliding_window);
    v("alibi", s.alibi);
    v("softcap", s.softcap);
    v("sinks", s.sinks);
  }
  bool operator==(const CpuAttentionParams&) const = default;
};

/// create_onednn_mm / onednn_mm.
struct GemmParams {
  DType dtype = DType::kBF16;  ///< a/b/c type
  int64_t k = 0;  ///< K
  int64_t n = 0;  ///< N
  bool bias = false;  ///< bias given

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("k", s.k);
    v("n", s.n);
    v("bias", s.bias);
  }
  bool operator==(const GemmParams&) const = default;
};

/// create_onednn_scaled_mm / onednn_scaled_mm.
struct ScaledGemmParams {
  DType out = DType::kBF16;  ///< output type
  int64_t k = 0;  ///< K
  int64_t n = 0;  ///< N
  bool dynamic = true;  ///< per-token activation scales
  bool azp = false;  ///< asymmetric zero points
  bool per_channel = false;  ///< per-channel weight scales
  bool bias = false;  ///< bias given

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("out", s.out);
    v("k", s.k);
    v("n", s.n);
    v("dynamic", s.dynamic);
    v("azp", s.azp);
    v("per_channel", s.per_channel);
    v("bias", s.bias);
  }
  bool operator==(const ScaledGemmParams&) const = default;
};

Status validate(OpKind op, const CpuAttnSchedulerParams& p);
Status validate(OpKind op, const CpuAttnCacheWriteParams& p);
Status validate(OpKind op, const CpuAttentionParams& p);
Status validate(OpKind op, const GemmParams& p);
Status validate(OpKind op, const ScaledGemmParams& p);
Estimate estimate(OpKind op, const CpuAttnSchedulerParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const CpuAttnCacheWriteParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const CpuAttentionParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const GemmParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const ScaledGemmParams& p, const ProblemSize& size);

}  // namespace jit::ir
