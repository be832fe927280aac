// Compile-time parameters of the CPU attention and oneDNN GEMM ops
// (spec/norm_act_cpu_ops.md sections 3 and 4).
//
// What is baked into the code and what stays a run-time argument:
//   cpu_attn_get_scheduler_metadata: compile-time isa (vLLM's isa_hint), dtype, head_size,
//     heads_q, heads_kv, causal; run-time: request count, seq_lens, query_start_loc,
//     window_size, enable_kv_split (and the thread count of the calling process).
//   cpu_attn_reshape_and_cache: compile-time isa (selects the K/V slab layout), dtype, heads_kv,
//     head_size, block_size; run-time: token count, key/value strides, cache block/head
//     strides, slots.
//   cpu_attention_with_kv_cache: compile-time isa, dtype, head_size, block_size, heads_q,
//     heads_kv, causal and the feature flags sliding_window, alibi, softcap, sinks; run-time:
//     query_start_loc, seq_lens, block table, scale, window left/right, softcap value, slopes,
//     sink logits, scheduler metadata, strides.
//   create_onednn_mm / onednn_mm: compile-time dtype, k, n; run-time: M, row strides, bias
//     (optional tensor), primitive_cache_size.
//   create_onednn_scaled_mm / onednn_scaled_mm: compile-time out_dtype, k, n, dynamic
//     (per-token activation scales), azp (activation zero points), per_channel (weight scales
//     per output column); run-time: M, scales, zero points, azp_adj, bias, primitive_cache_size.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "ir/estimate.h"
#include "ir/field.h"
#include "ir/op_kind.h"
#include "ir/status.h"

namespace jit::ir {

/// vLLM's CPU-attention ISA string. It fixes the K/V slab layout written by
/// cpu_attn_reshape_and_cache, the tiling units and the probability precision, so the same
/// value must be used by the scheduler, the cache write and the attention:
/// vec (AVX2/AVX-512: BlockSizeAlignment 32, any head size), vec16 (16, any head size),
/// amx (AMX-BF16, bf16 only: 32, head a multiple of 32), neon (AArch64 FMLA: 32, 32).
/// vLLM also requires head sizes that are multiples of 32 (16 for vec16); kiln's vec and vec16
/// layouts are defined for every head size and are served for all of them.
enum class CpuAttnIsa : uint8_t { kVec, kVec16, kAmx, kNeon };

template <>
struct EnumNames<CpuAttnIsa> {
  static constexpr std::array<std::string_view, 4> kNames = {"vec", "vec16", "amx", "neon"};
};

/// Tokens per BlockSizeAlignment unit of `isa` (block sizes must be multiples of it).
int64_t cpu_attn_block_alignment(CpuAttnIsa isa);
/// The head-size granule kiln requires for `isa` (head sizes must be multiples of it): 32 for
/// amx (tile layout) and neon (whole-vector kernels), 1 for vec and vec16 (any head size).
int64_t cpu_attn_head_alignment(CpuAttnIsa isa);

/// Visits the optional `kv` field of the CPU-attention params: always when `Self` is mutable
/// (parsing, so `kv=fp8_e4m3` is accepted), and only when it differs from kv=auto when `Self`
/// is const (canonical text and hashing). The field arrived after the specs without it were
/// pinned; omitting the default keeps their canonical text and hashes unchanged.
template <class Self, class V>
void visit_optional_kv(Self& s, V&& v) {
  if constexpr (std::is_const_v<Self>) {
    if (s.kv == KvCacheDtype::kAuto) return;
  }
  v("kv", s.kv);
}

/// cpu_attn_get_scheduler_metadata: partitions (request, query, kv) work across threads.
struct CpuAttnSchedulerParams {
  CpuAttnIsa isa = CpuAttnIsa::kVec;  ///< ISA of the attention it schedules
  DType dtype = DType::kBF16;         ///< query type (sizes the scratch buffers)
  int64_t head_size = 0;              ///< D
  int64_t head_count_q = 0;           ///< query heads
  int64_t head_count_kv = 0;          ///< kv heads
  bool causal = true;                 ///< queries are the last q_len positions

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("isa", s.isa);
    v("dtype", s.dtype);
    v("head_size", s.head_size);
    v("heads_q", s.head_count_q);
    v("heads_kv", s.head_count_kv);
    v("causal", s.causal);
  }
  bool operator==(const CpuAttnSchedulerParams&) const = default;
};

/// cpu_attn_reshape_and_cache: writes key/value [T, Hkv, D] into [NB, Hkv, BS, D] caches whose
/// (block, head) slabs are arranged for `isa`. With an fp8 `kv` (spec §3.6) the caches hold
/// fp8 codes: stored = fp8(x / scale) with the run-time k_scale / v_scale.
struct CpuAttnCacheWriteParams {
  CpuAttnIsa isa = CpuAttnIsa::kVec;      ///< slab layout
  DType dtype = DType::kBF16;             ///< key/value type (and the cache's when kv=auto)
  int64_t head_count_kv = 0;              ///< Hkv
  int64_t head_size = 0;                  ///< D
  int64_t block_size = 0;                 ///< BS
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< cache storage: auto (= dtype), fp8_e4m3, fp8_e5m2

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("isa", s.isa);
    v("dtype", s.dtype);
    v("heads_kv", s.head_count_kv);
    v("head_size", s.head_size);
    v("block_size", s.block_size);
    visit_optional_kv(s, v);
  }
  bool operator==(const CpuAttnCacheWriteParams&) const = default;
};

/// cpu_attention_with_kv_cache: varlen prefill/decode attention over the ISA-specific cache.
/// With an fp8 `kv` (spec §3.6) the caches hold fp8 codes and k = fp8·k_scale, v = fp8·v_scale
/// with the run-time k_scale / v_scale.
struct CpuAttentionParams {
  CpuAttnIsa isa = CpuAttnIsa::kVec;      ///< cache layout and kernel family
  DType dtype = DType::kBF16;             ///< query and output type (and the cache's when kv=auto)
  int64_t head_size = 0;                  ///< D
  int64_t block_size = 0;                 ///< BS
  int64_t head_count_q = 0;               ///< query heads
  int64_t head_count_kv = 0;              ///< kv heads
  bool causal = true;                     ///< right window edge forced to 0
  bool sliding_window = false;            ///< window_left/right may be bounded (else both -1)
  bool alibi = false;                     ///< alibi_slopes given
  bool softcap = false;                   ///< softcap != 0
  bool sinks = false;                     ///< s_aux given
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< cache storage: auto (= dtype), fp8_e4m3, fp8_e5m2

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("isa", s.isa);
    v("dtype", s.dtype);
    v("head_size", s.head_size);
    v("block_size", s.block_size);
    v("heads_q", s.head_count_q);
    v("heads_kv", s.head_count_kv);
    v("causal", s.causal);
    v("sliding_window", s.sliding_window);
    v("alibi", s.alibi);
    v("softcap", s.softcap);
    v("sinks", s.sinks);
    visit_optional_kv(s, v);
  }
  bool operator==(const CpuAttentionParams&) const = default;
};

/// create_onednn_mm / onednn_mm: c[M, N] = a[M, K] @ b[K, N] (+ bias).
struct GemmParams {
  DType dtype = DType::kBF16;  ///< a, b, c and bias type (f32/f16/bf16)
  int64_t k = 0;               ///< K
  int64_t n = 0;               ///< N

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("k", s.k);
    v("n", s.n);
  }
  bool operator==(const GemmParams&) const = default;
};

/// create_onednn_scaled_mm / onednn_scaled_mm: int8 a[M, K] x int8 b[K, N] with scales.
struct ScaledGemmParams {
  DType out_dtype = DType::kBF16;  ///< c type (f32/f16/bf16), vLLM's output_type
  int64_t k = 0;                   ///< K
  int64_t n = 0;                   ///< N
  bool dynamic = true;             ///< per-token activation scales (dynamic_act_quant)
  bool azp = false;                ///< asymmetric activation zero points (use_azp)
  bool per_channel = false;        ///< b_scales has N entries (else 1)

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("out_dtype", s.out_dtype);
    v("k", s.k);
    v("n", s.n);
    v("dynamic", s.dynamic);
    v("azp", s.azp);
    v("per_channel", s.per_channel);
  }
  bool operator==(const ScaledGemmParams&) const = default;
};

/// The element type the caches of a CPU-attention spec hold: `dtype` for kv=auto, else the
/// fp8 format (DType::kFp8E4m3 / kFp8E5m2).
DType cpu_attn_cache_dtype(DType dtype, KvCacheDtype kv);

/// Checks the params of `op` against its contract (target-independent); an invalid-argument
/// Status names the field and the allowed values or range.
Status validate(OpKind op, const CpuAttnSchedulerParams& p);
Status validate(OpKind op, const CpuAttnCacheWriteParams& p);
Status validate(OpKind op, const CpuAttentionParams& p);
Status validate(OpKind op, const GemmParams& p);
Status validate(OpKind op, const ScaledGemmParams& p);

/// Estimates use ProblemSize as: scheduler: batch = requests; cache write: tokens written;
/// attention: tokens = query tokens of all requests, batch = requests, context = KV length per
/// request; GEMM: tokens = M (the create_* ops only move the weight).
Estimate estimate(OpKind op, const CpuAttnSchedulerParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const CpuAttnCacheWriteParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const CpuAttentionParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const GemmParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const ScaledGemmParams& p, const ProblemSize& size);

}  // namespace jit::ir
