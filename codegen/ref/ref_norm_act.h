// Internal entry point of the ref backend's norm, rotary and gated-activation family.
#pragma once

#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/status.h"

namespace jit::codegen::ref {

/// Runs rms_norm, fused_add_rms_norm, rotary_embedding or one of the six gated activations
/// on CPU tensors. `args` must already have passed jit::check_args for `spec`. The only
/// data-dependent check (rotary positions inside the cache) runs before anything is written,
/// so an error leaves every output untouched.
Status run_norm_act(const OpSpec& spec, const KernelArgs& args);

}  // namespace jit::codegen::ref
