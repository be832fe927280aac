// Internal entry points of the ref backend, one pair per op family. Each run_* expects
// arguments that passed jit::check_args and a valid spec; data-dependent checks (indices
// inside the cache in checked mode, positions inside the rope cache) run before anything is
// written, so an error leaves every output untouched.
#pragma once

#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/status.h"

namespace jit::codegen::ref {

/// rms_norm, fused_add_rms_norm, rotary_embedding and the six gated activations.
Status run_norm_act(const OpSpec& spec, const KernelArgs& args);

/// The KV-cache writes, gathers, swaps and quantisers (family "cache").
bool implements_cache(OpKind op);
Status run_cache(const OpSpec& spec, const KernelArgs& args);

/// Paged attention v1/v2, merge_attn_states, the vertical/slash index converters, top-k.
bool implements_attention(OpKind op);
Status run_attention(const OpSpec& spec, const KernelArgs& args);

/// The CPU attention ops and the oneDNN GEMM ops (plain loops).
bool implements_cpu(OpKind op);
Status run_cpu(const OpSpec& spec, const KernelArgs& args);

}  // namespace jit::codegen::ref
