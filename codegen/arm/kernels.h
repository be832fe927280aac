// The arm generators: each fills the body of a KernelBuilder's function for one op family.
#pragma once

#include "ir/op_spec.h"
#include "ir/status.h"

namespace jit::codegen::arm {

class KernelBuilder;

/// rms_norm / fused_add_rms_norm (NormParams); call block: norm_words.
Status generate_norm(KernelBuilder& k, const OpSpec& spec);
/// The six gated activations (ActivationParams); call block: act_words.
Status generate_activation(KernelBuilder& k, const OpSpec& spec);
/// rotary_embedding (RopeParams); call block: rope_words.
Status generate_rope(KernelBuilder& k, const OpSpec& spec);

/// reshape_and_cache(_flash), concat_and_cache_mla (cache_write_words), swap_blocks
/// (swap_words), convert_fp8 (convert_words), cp_gather_cache and
/// gather_and_maybe_dequant_cache (gather_words).
Status generate_cache(KernelBuilder& k, const OpSpec& spec);

/// cpu_attention_with_kv_cache with isa=neon (attention_words); `bf16_dot`: bf16 through
/// BFMLALB/BFMLALT and BFDOT (else fp32 FMLA).
Status generate_attention(KernelBuilder& k, const OpSpec& spec, bool bf16_dot);

}  // namespace jit::codegen::arm
