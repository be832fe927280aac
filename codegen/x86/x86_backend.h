// The x86 backend: Xbyak generators for AVX-512 and AVX2.
#pragma once

#include <memory>

#include "codegen/backend.h"

namespace jit::codegen::x86 {

/// Creates the x86 backend. Ops served: rms_norm, fused_add_rms_norm, rotary_embedding and the
/// six gated activations, for f32/f16/bf16 and any hidden/head size; the cache ops
/// reshape_and_cache, reshape_and_cache_flash, concat_and_cache_mla (incl. fp8_ds_mla),
/// concat_and_cache_mla_rope_fused, swap_blocks, convert_fp8, cp_gather_cache,
/// gather_and_maybe_dequant_cache, cp_gather_and_upconvert_fp8_kv_cache,
/// indexer_k_quant_and_cache, cp_gather_indexer_k_quant_cache and kiln's
/// rotary_embedding_and_cache_flash; merge_attn_states; all at AVX2 and above.
std::unique_ptr<Backend> make_backend();

/// Version of the generated code; part of every disk-cache key. Bump on any codegen change.
inline constexpr std::string_view kCodegenVersion = "x86-145";

}  // namespace jit::codegen::x86
