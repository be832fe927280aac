// Run-time argument checks of rms_norm, fused_add_rms_norm, rotary_embedding and the gated
// activations (see ir/kernel_args.h for the argument order).
#include <fmt/format.h>

#include "ir/check_args.h"

namespace jit::ir {
namespace {

// A [..., width] activation tensor of the spec's dtype on the CPU.
Status expect_rows(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                   int64_t width) {
  KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
  KILN_RETURN_IF_ERROR(expect_dtype(op, arg, t, dtype));
  if (t.dim() < 1) {
    return invalid_argument(
        fmt::format("{}: argument '{}' must have at least one dimension", op, arg));
  }
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, -1, width));
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, arg, t));
  return expect_rows_collapsible(op, arg, t);
}

Status expect_same_rows(std::string_view op, std::string_view a_name, const Tensor& a,
                        std::string_view b_name, const Tensor& b) {
  // A zero width (a spec that was never validated) has no rows rather than a division by 0.
  const auto rows = [](const Tensor& t) { return t.size(-1) > 0 ? t.numel() / t.size(-1) : 0; };
  if (rows(a) == rows(b)) return Status::ok();
  return invalid_argument(fmt::format("{}: '{}' ({}) and '{}' ({}) have different row counts", op,
                                      a_name, a.describe(), b_name, b.describe()));
}

Status check_norm(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<NormParams>();
  const std::string_view op = op_name(spec.op);
  KILN_RETURN_IF_ERROR(expect_count(op, args, 3, 1));
  const bool fused = spec.op == OpKind::kFusedAddRmsNorm;
  // rms_norm(out, input, weight, eps); fused_add_rms_norm(input, residual, weight, eps).
  const char* first = fused ? "input" : "out";
  const char* second = fused ? "residual" : "input";
  KILN_RETURN_IF_ERROR(expect_rows(op, first, args.tensor(0), p.dtype, p.hidden));
  KILN_RETURN_IF_ERROR(expect_rows(op, second, args.tensor(1), p.dtype, p.hidden));
  KILN_RETURN_IF_ERROR(expect_same_rows(op, first, args.tensor(0), second, args.tensor(1)));
  if (!fused) KILN_RETURN_IF_ERROR(expect_contiguous(op, "out", args.tensor(0)));
  const Tensor& weight = args.tensor(2);
  if (p.weight) {
    KILN_RETURN_IF_ERROR(expect_defined(op, "weight", weight));
    KILN_RETURN_IF_ERROR(expect_dtype(op, "weight", weight, p.dtype));
    KILN_RETURN_IF_ERROR(expect_rank(op, "weight", weight, {1}));
    KILN_RETURN_IF_ERROR(expect_size(op, "weight", weight, 0, p.hidden));
    KILN_RETURN_IF_ERROR(expect_contiguous(op, "weight", weight));
  } else if (weight.defined()) {
    return invalid_argument(
        fmt::format("{}: argument 'weight' must be None for a spec with "
                    "weight=false, got {}",
                    op, weight.describe()));
  }
  const double eps = args.scalar(0);
  if (!(eps >= 0)) {
    return invalid_argument(fmt::format("{}: argument 'epsilon' = {} must be >= 0", op, eps));
  }
  return Status::ok();
}

// Positions [T] or [B, S]; query/key [*lead, heads*D] or [*lead, heads, D].
Status check_rope_operand(std::string_view op, std::string_view arg, const Tensor& t,
                          const Tensor& positions, DType dtype, int64_t heads, int64_t head_size) {
  KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
  KILN_RETURN_IF_ERROR(expect_dtype(op, arg, t, dtype));
  const int lead = positions.dim();
  if (t.dim() != lead + 1 && t.dim() != lead + 2) {
    return invalid_argument(fmt::format(
        "{}: argument '{}' ({}) must have rank {} ([..., heads*head_size]) or {} ([..., heads, "
        "head_size]) to match positions {}",
        op, arg, t.describe(), lead + 1, lead + 2, positions.describe()));
  }
  for (int d = 0; d < lead; ++d) {
    if (t.size(d) != positions.size(d)) {
      return invalid_argument(
          fmt::format("{}: argument '{}' ({}) must start with the positions' "
                      "shape {}",
                      op, arg, t.describe(), positions.describe()));
    }
  }
  if (lead == 2 && t.size(0) > 1 && t.stride(0) != t.size(1) * t.stride(1)) {
    return invalid_argument(fmt::format(
        "{}: argument '{}' ({}) must have mergeable batch and sequence dims (stride[0] == "
        "size[1] * stride[1])",
        op, arg, t.describe()));
  }
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, arg, t));
  if (t.dim() == lead + 2) {
    KILN_RETURN_IF_ERROR(expect_size(op, arg, t, -2, heads));
    KILN_RETURN_IF_ERROR(expect_size(op, arg, t, -1, head_size));
  } else {
    KILN_RETURN_IF_ERROR(expect_size(op, arg, t, -1, heads * head_size));
  }
  return Status::ok();
}

Status check_rope(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<RopeParams>();
  const std::string_view op = op_name(spec.op);
  // rotary_embedding(positions, query, key?, cos_sin_cache)
  KILN_RETURN_IF_ERROR(expect_count(op, args, 4, 0));
  const Tensor& positions = args.tensor(0);
  KILN_RETURN_IF_ERROR(expect_defined(op, "positions", positions));
  KILN_RETURN_IF_ERROR(expect_dtype(op, "positions", positions, DType::kI64));
  KILN_RETURN_IF_ERROR(expect_rank(op, "positions", positions, {1, 2}));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "positions", positions));
  KILN_RETURN_IF_ERROR(check_rope_operand(op, "query", args.tensor(1), positions, p.dtype,
                                          p.head_count_q, p.head_size));
  if (p.key) {
    KILN_RETURN_IF_ERROR(check_rope_operand(op, "key", args.tensor(2), positions, p.dtype,
                                            p.head_count_kv, p.head_size));
  } else if (args.tensor(2).defined()) {
    return invalid_argument(
        fmt::format("{}: argument 'key' must be None for a spec with "
                    "key=false, got {}",
                    op, args.tensor(2).describe()));
  }
  const Tensor& cache = args.tensor(3);
  KILN_RETURN_IF_ERROR(expect_defined(op, "cos_sin_cache", cache));
  KILN_RETURN_IF_ERROR(expect_dtype(op, "cos_sin_cache", cache, p.cache_dtype));
  KILN_RETURN_IF_ERROR(expect_rank(op, "cos_sin_cache", cache, {2}));
  KILN_RETURN_IF_ERROR(expect_size(op, "cos_sin_cache", cache, 1, p.rot_dim));
  return expect_contiguous(op, "cos_sin_cache", cache);
}

Status check_activation(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ActivationParams>();
  const std::string_view op = op_name(spec.op);
  int scalars = 0;
  if (spec.op == OpKind::kFatreluAndMul) scalars = 1;    // threshold
  if (spec.op == OpKind::kSwigluoaiAndMul) scalars = 2;  // alpha, limit
  KILN_RETURN_IF_ERROR(expect_count(op, args, 2, scalars));
  const Tensor& out = args.tensor(0);
  const Tensor& input = args.tensor(1);
  KILN_RETURN_IF_ERROR(expect_rows(op, "out", out, p.dtype, p.d));
  KILN_RETURN_IF_ERROR(expect_rows(op, "input", input, p.dtype, 2 * p.d));
  KILN_RETURN_IF_ERROR(expect_same_rows(op, "out", out, "input", input));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "out", out));
  return expect_contiguous(op, "input", input);
}

}  // namespace

RopeStrides rope_strides(const Tensor& operand, int lead, int64_t head_size) {
  return {operand.stride(lead - 1), operand.dim() == lead + 2 ? operand.stride(-2) : head_size};
}

Status check_rope_positions(const Tensor& positions, int64_t max_position) {
  return check_positions("rotary_embedding", positions, positions.numel(), max_position);
}

Status check_positions(std::string_view op, const Tensor& positions, int64_t tokens,
                       int64_t max_position) {
  const auto* pos = positions.data_as<const int64_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    if (pos[t] < 0 || pos[t] >= max_position) {
      return invalid_argument(
          fmt::format("{}: argument 'positions' has positions[{}] = {}, outside the "
                      "cos_sin_cache rows [0, {})",
                      op, t, pos[t], max_position));
    }
  }
  return Status::ok();
}

Status check_norm_act_args(const OpSpec& spec, const KernelArgs& args) {
  switch (spec.op) {
    case OpKind::kRmsNorm:
    case OpKind::kFusedAddRmsNorm: return check_norm(spec, args);
    case OpKind::kRotaryEmbedding: return check_rope(spec, args);
    default: return check_activation(spec, args);
  }
}

}  // namespace jit::ir
