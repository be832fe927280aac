// The x86 backend: Xbyak generators for AVX-512 and AVX2.
#pragma once

#include <memory>

#include "codegen/backend.h"

namespace jit::codegen::x86 {

/// Creates the x86 backend. Ops served so far: rms_norm, fused_add_rms_norm, rotary_embedding
/// and the six gated activations, for f32/f16/bf16 and any hidden/head size; the cache writes
/// reshape_and_cache and reshape_and_cache_flash (auto, fp8_e4m3, fp8_e5m2), swap_blocks,
/// convert_fp8, cp_gather_cache and gather_and_maybe_dequant_cache; all at AVX2 and above.
std::unique_ptr<Backend> make_backend();

/// Version of the generated code; part of every disk-cache key. Bump on any codegen change.
inline constexpr std::string_view kCodegenVersion = "x86-14";

}  // namespace jit::codegen::x86
