// Checks a kernel call's run-time arguments against its spec, with messages that name the
// argument and the allowed values. Shared by every backend and by jit::ops.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/params_attention.h"
#include "ir/status.h"

namespace jit {

/// OK when `args` are a valid call of `spec` (count, dtypes, shapes, strides, devices);
/// otherwise an invalid-argument Status naming the op, the argument and what is allowed.
/// Nothing is read through the data pointers except where noted per op (none so far).
Status check_args(const OpSpec& spec, const KernelArgs& args);

namespace ir {

/// Building blocks for the per-family checks; each names `op` and `arg` in its message.
/// The call has exactly `tensors` tensor and `scalars` scalar arguments.
Status expect_count(std::string_view op, const KernelArgs& args, int tensors, int scalars);
/// A present tensor of `dtype` whose rank is one of `ranks` (or exactly `rank`).
Status expect_tensor(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                     std::initializer_list<int> ranks);
Status expect_tensor(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                     int rank);
Status expect_defined(std::string_view op, std::string_view arg, const Tensor& t);
Status expect_dtype(std::string_view op, std::string_view arg, const Tensor& t, DType dtype);
Status expect_rank(std::string_view op, std::string_view arg, const Tensor& t,
                   std::initializer_list<int> ranks);
Status expect_size(std::string_view op, std::string_view arg, const Tensor& t, int dim,
                   int64_t size);
Status expect_contiguous(std::string_view op, std::string_view arg, const Tensor& t);
Status expect_unit_last_stride(std::string_view op, std::string_view arg, const Tensor& t);
Status expect_cpu(std::string_view op, std::string_view arg, const Tensor& t);
/// All dimensions but the last merge into one row dimension with a single stride.
Status expect_rows_collapsible(std::string_view op, std::string_view arg, const Tensor& t);
/// The stride between consecutive rows of a collapsible tensor (its last dim is the row).
int64_t row_stride(const Tensor& t);

/// Strides (in elements) of a rotary_embedding query/key operand whose leading dims match a
/// positions tensor of rank `lead`: the token stride is the stride of the last positions dim
/// (batch and sequence merge); the head stride is stride(-2) with an explicit head dim, else
/// head_size (KILN: taken from this tensor, vLLM reuses query's for key).
struct RopeStrides {
  int64_t token = 0;
  int64_t head = 0;
};
RopeStrides rope_strides(const Tensor& operand, int lead, int64_t head_size);

/// The data-dependent check of rotary_embedding: every position inside [0, max_position).
/// Reads `positions` (int64, on the host).
Status check_rope_positions(const Tensor& positions, int64_t max_position);

/// The same check for the first `tokens` positions of a fused rope + cache op named `op`
/// (positions int64, contiguous, on the host): each inside the cos_sin_cache rows
/// [0, max_position). vLLM reads the row of every token unchecked.
Status check_positions(std::string_view op, const Tensor& positions, int64_t tokens,
                       int64_t max_position);

/// Data-dependent check shared by the backends' gathers: the rows [cu_seq_lens[r],
/// cu_seq_lens[r+1]) of request `r` (int32, read through the stride) must be non-decreasing,
/// start at or above 0 and lie inside dst's `dst_rows`. Sets `begin`/`end`.
Status check_request_rows(std::string_view op, const Tensor& cu_seq_lens, int64_t r,
                          int64_t dst_rows, int64_t& begin, int64_t& end);

/// Data-dependent check shared by the backends' gathers: position `pos` (>= 0) of request `r`
/// in a block table [B, max_blocks] (int32, read through its strides) resolves to a cache block
/// in [0, num_blocks). Sets `block`; the error names the missing column or the bad entry.
Status check_block_table_entry(std::string_view op, const Tensor& block_table, int64_t num_blocks,
                               int64_t block_size, int64_t r, int64_t pos, int64_t& block);

/// Data-dependent check of the cache writes: every slot of the first `tokens` entries of
/// `slots` (int64, read through the stride) is padding (< 0) or inside the cache's
/// num_blocks * block_size slots. The checked mode of the cache writes, always on, before the
/// kernel writes anything (vLLM would write out of bounds): one 8-byte read per token against
/// the 2·H·D·(input + cache element) bytes the token moves, under 0.1% of the traffic.
Status check_slots(std::string_view op, const Tensor& slots, int64_t tokens, int64_t num_blocks,
                   int64_t block_size);

/// Data-dependent check of swap_blocks: every entry of `mapping` [pairs, 2] (int64, read
/// through its strides) is a block id inside src (column 0) or dst (column 1), checked in
/// row-major order so the first bad entry is the one named.
Status check_block_mapping(std::string_view op, const Tensor& mapping, int64_t src_blocks,
                           int64_t dst_blocks);

/// Data-dependent check of the gathers: request `r`'s offset seq_starts[r] (int32; 0 when
/// `seq_starts` is undefined) is >= 0. Sets `start`.
Status check_seq_start(std::string_view op, const Tensor& seq_starts, int64_t r, int64_t& start);

/// Data-dependent check of gather_and_maybe_dequant_cache: token `tok` belongs to request
/// r = token_to_seq[tok] in [0, batch); a token at or past its request's end cu_seq_lens[r+1]
/// is skipped (`pos` = -1); otherwise its position tok - cu_seq_lens[r] + seq_starts[r] must be
/// >= 0. All int32, read through the stride. Sets `r` and `pos`.
Status check_token_position(std::string_view op, const Tensor& cu_seq_lens,
                            const Tensor& token_to_seq, const Tensor& seq_starts, int64_t batch,
                            int64_t tok, int64_t& r, int64_t& pos);

/// Data-dependent check of cp_gather_and_upconvert_fp8_kv_cache before its rows are resolved:
/// `batch` is not 0 when dst has `rows` > 0, and workspace_starts (int32) is non-decreasing.
Status check_workspace_starts(std::string_view op, const Tensor& starts, int64_t batch,
                              int64_t rows);

/// The request of dst row `o` of cp_gather_and_upconvert_fp8_kv_cache: advances `r` (start it
/// at 0, call for o = 0, 1, ...) to the last request with workspace_starts[r] <= o and sets
/// `pos` = o - workspace_starts[r], which must be >= 0 (workspace_starts[0] must be 0).
Status check_workspace_row(std::string_view op, const Tensor& starts, int64_t batch, int64_t o,
                           int64_t& r, int64_t& pos);

/// Data-dependent check of paged_attention v1/v2 (spec §1.3 KILN: validated on the host),
/// before anything is written: every sequence length L = seq_lens[s] is <= max_seq_len,
/// ceil(L / block_size) <= block_tables' width, and those table entries are cache blocks in
/// [0, blocks). Both tensors are int32 and dense. Slots past L and table entries past
/// ceil(L / block_size) are never read, so they are not checked.
Status check_paged_sequences(std::string_view op, const Tensor& seq_lens,
                             const Tensor& block_tables, int64_t block_size, int64_t blocks,
                             int64_t max_seq_len);

/// Per-head list lengths of the vertical/slash converters (spec attention_ops §5): for the
/// mergehead op the counts tensors' values, otherwise every head uses the whole list.
struct VerticalSlashCounts {
  std::vector<int64_t> vertical;  // [heads]
  std::vector<int64_t> slash;     // [heads]
};

/// Data-dependent check of convert_vertical_slash_indexes(_mergehead), before anything is
/// written (spec attention_ops §5 KILN): for the mergehead op each head's counts lie in
/// [1, nnz]; q_seqlens[b] lies in [0, context rows]; kv_seqlens[b] >= 0 (and >= q_seqlens[b]
/// when causal); every slash offset a head uses is >= 0 and every vertical column lies in
/// [0, kv_seqlens[b]), so that every walk ends inside its buffers (a vertical past the keys
/// makes vLLM's non-causal walk spin forever). Arguments in the op's order (docs/ops.md).
Result<VerticalSlashCounts> check_vertical_slash_indexes(std::string_view op,
                                                         const VerticalSlashParams& p,
                                                         bool mergehead, const KernelArgs& args);

/// The length part of check_cpu_attn_sequences over raw int32 arrays of `num_req` requests:
/// query_start_loc starts at 0 and never decreases, ending within `max_tokens` (< 0:
/// unbounded); seq_lens[r] >= 0 and, when `causal`, at least request r's query length.
Status check_cpu_attn_lengths(std::string_view op, const int32_t* query_start_loc,
                              const int32_t* seq_lens, int64_t num_req, bool causal,
                              int64_t max_tokens);

/// Data-dependent check of cpu_attention_with_kv_cache, before the first write:
/// query_start_loc (int32, dense, num_req + 1 entries) starts at 0, never decreases and ends
/// within the `max_tokens` query tokens; seq_lens[r] (int32, dense) is >= 0 and, when `causal`,
/// at least request r's query length; then each request's ceil(seq_lens[r] / block_size)
/// block_table entries (int32, unit last stride) exist and are cache blocks in [0, num_blocks).
Status check_cpu_attn_sequences(std::string_view op, const Tensor& query_start_loc,
                                const Tensor& seq_lens, const Tensor& block_table, bool causal,
                                int64_t block_size, int64_t max_tokens, int64_t num_blocks);

/// The per-family checks behind jit::check_args (one file each: ir/check_args_<family>.cc).
Status check_norm_act_args(const OpSpec& spec, const KernelArgs& args);
Status check_cache_args(const OpSpec& spec, const KernelArgs& args);
Status check_attention_args(const OpSpec& spec, const KernelArgs& args);
Status check_cpu_args(const OpSpec& spec, const KernelArgs& args);

}  // namespace ir
}  // namespace jit
