// Checks a kernel call's run-time arguments against its spec, with messages that name the
// argument and the allowed values. Shared by every backend and by jit::ops.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "ir/kernel_args.h"
#include "ir/op_spec.h"
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

/// The per-family checks behind jit::check_args (one file each: ir/check_args_<family>.cc).
Status check_norm_act_args(const OpSpec& spec, const KernelArgs& args);
Status check_cache_args(const OpSpec& spec, const KernelArgs& args);
Status check_attention_args(const OpSpec& spec, const KernelArgs& args);
Status check_cpu_args(const OpSpec& spec, const KernelArgs& args);

}  // namespace ir
}  // namespace jit
