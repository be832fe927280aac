// paged_attention_v1/v2 on the CUDA backend: what render.cc and launch.cc call for the two
// ops (templates/paged_attention.cuh is the kernel). Kept apart from the shared renderer so
// that the attention-specific rules (heads per CTA, shared-memory budget, the v2 reduce launch)
// live in one place.
#pragma once

#include <cstdint>

#include "codegen/backend.h"
#include "codegen/cuda/launch.h"
#include "codegen/cuda/render.h"
#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/params_attention.h"

namespace jit::codegen::cuda {

/// Default threads per CTA (4 warps, vLLM's NUM_THREADS): tokens per chunk of the online softmax.
inline constexpr int64_t kPagedAttentionThreads = 128;

/// Whether the template serves `spec` (validated params): every valid spec, block-sparse too.
Support paged_attention_support(const OpSpec& spec);

/// Query heads one CTA serves (all share one kv head): the largest divisor of
/// heads_q / heads_kv that is <= 8 and keeps the CTA's static shared memory (query, chunk
/// probabilities, offsets) under 44 KiB at `threads`.
int64_t paged_attention_heads_per_cta(const ir::PagedAttentionParams& p, int64_t threads);

/// Fills header, template, args type and the config members (all but kThreads) of `r`.
void render_paged_attention(const OpSpec& spec, int64_t threads, RenderedKernel& r);

/// The launch of phase 0 (grid heads_q / heads_per_cta x seqs x partitions) and, for v2, the
/// reduce as `then` (grid heads_q x seqs, partitions x 4 bytes of dynamic shared memory).
/// `host_data`: checks seq_lens <= max_seq_len, the table width and the block numbers first.
Result<LaunchPlan> plan_paged_attention(const OpSpec& spec, const Config& config,
                                        const KernelArgs& args, bool host_data);

}  // namespace jit::codegen::cuda
