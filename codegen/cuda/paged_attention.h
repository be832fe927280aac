// paged_attention_v1/v2 on the CUDA backend: what render.cc and launch.cc call for the two
// ops (templates/paged_attention.cuh is the kernel). Kept apart from the shared renderer so
// that the attention-specific rules (heads per CTA, shared-memory budget, the v2 reduce launch)
// live in one place.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "codegen/backend.h"
#include "codegen/cuda/launch.h"
#include "codegen/cuda/render.h"
#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/params_attention.h"

namespace jit::codegen::cuda {

/// Default threads per CTA (tokens per chunk of the online softmax): 512 for v1, 256 for v2.
/// vLLM's kernel has 128 (NUM_THREADS). On an H200 (`bench_cuda --sweep`, head 128, GQA 8,
/// batch 1-32 x context 2048-8192, one binary) v1's grid is heads_q / heads_per_cta CTAs per
/// sequence, too few to keep loads in flight unless each CTA is wide: 512 threads with 4 heads
/// ran at 0.63 (bf16) / 0.67 (fp8) of each shape's best point, 128 with 8 at 0.22 / 0.29. v2
/// multiplies the grid by its partitions: 256 threads with 4 heads at 0.80 / 0.76, 128 with 8
/// at 0.66 / 0.75. vLLM runs v2 for small grids and v1 for large ones (num_seqs x heads >
/// 512), where these two points are strongest (docs/cuda.md, "Default threads and heads per
/// CTA").
int64_t paged_attention_default_threads(const ir::PagedAttentionParams& p);

/// Config knob: query heads one CTA serves (a divisor of heads_q / heads_kv, <= 8, whose static
/// shared memory fits). More heads read each key and value once for more queries; fewer heads
/// make more CTAs (heads_q / heads_per_cta per sequence and partition), which small batches need
/// to fill the SMs. Default: paged_attention_heads_per_cta.
inline constexpr std::string_view kHeadsPerCta = "heads_per_cta";

/// Whether the template serves `spec` (validated params): every valid spec, block-sparse too.
Support paged_attention_support(const OpSpec& spec);

/// The default query heads per CTA (all share one kv head): the largest divisor of
/// heads_q / heads_kv that is <= 4, keeps the CTA's static shared memory (query, chunk
/// probabilities, offsets) under 44 KiB at `threads`, and keeps heads x (head dims per thread
/// in P·V) <= 8 accumulators.
int64_t paged_attention_heads_per_cta(const ir::PagedAttentionParams& p, int64_t threads);

/// The `heads_per_cta` values allowed at `threads`: the divisors of heads_q / heads_kv up to 8
/// whose static shared memory fits, ascending (never empty: 1 fits any valid head size).
std::vector<int64_t> paged_attention_heads_choices(const ir::PagedAttentionParams& p,
                                                   int64_t threads);

/// The heads per CTA of `config` at `threads`: its heads_per_cta knob, checked against
/// paged_attention_heads_choices (an error names the allowed values), or the default
/// paged_attention_heads_per_cta. What render and the launch plan both use.
Result<int64_t> paged_attention_heads_of(const OpSpec& spec, const Config& config, int64_t threads);

/// Resolves the paged attention knobs of `config` into `resolved` (threads already there):
/// heads_per_cta as paged_attention_heads_of gives it.
Status resolve_paged_attention_config(const OpSpec& spec, const Config& config, Config& resolved);

/// Fills header, template, args type and the config members (all but kThreads) of `r`;
/// `config` is resolved (threads and heads_per_cta set).
void render_paged_attention(const OpSpec& spec, const Config& config, RenderedKernel& r);

/// The launch of phase 0 (grid heads_q / heads_per_cta x seqs x partitions) and, for v2, the
/// reduce as `then` (grid heads_q x seqs, partitions x 4 bytes of dynamic shared memory).
/// `host_data`: checks seq_lens <= max_seq_len, the table width and the block numbers first.
Result<LaunchPlan> plan_paged_attention(const OpSpec& spec, const Config& config,
                                        const KernelArgs& args, bool host_data);

}  // namespace jit::codegen::cuda
