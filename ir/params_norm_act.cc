#include "ir/params_norm_act.h"

#include <fmt/format.h>

namespace jit::ir {
namespace {

// Largest row/width kiln accepts: rows are indexed with 32-bit element offsets inside a
// row by some backends, and no model comes close.
constexpr int64_t kMaxWidth = int64_t(1) << 24;

Status check_float_dtype(const char* field, DType dtype) {
  if (is_float_activation(dtype)) return Status::ok();
  return invalid_argument(
      fmt::format("{}={} is not supported (allowed: f32, f16, bf16)", field, dtype_name(dtype)));
}

Status check_range(const char* field, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return Status::ok();
  return invalid_argument(
      fmt::format("{}={} is out of range (allowed: {} .. {})", field, value, lo, hi));
}

}  // namespace

Status validate(OpKind, const NormParams& p) {
  KILN_RETURN_IF_ERROR(check_float_dtype("dtype", p.dtype));
  return check_range("hidden", p.hidden, 1, kMaxWidth);
}

Status validate(OpKind, const RopeParams& p) {
  KILN_RETURN_IF_ERROR(check_float_dtype("dtype", p.dtype));
  KILN_RETURN_IF_ERROR(check_float_dtype("cache_dtype", p.cache_dtype));
  KILN_RETURN_IF_ERROR(check_range("head_size", p.head_size, 1, 4096));
  KILN_RETURN_IF_ERROR(check_range("rot_dim", p.rot_dim, 2, p.head_size));
  if (p.rot_dim % 2 != 0) {
    return invalid_argument(fmt::format("rot_dim={} must be even (pairs are rotated)", p.rot_dim));
  }
  KILN_RETURN_IF_ERROR(check_range("heads_q", p.head_count_q, 1, 4096));
  if (p.key) {
    KILN_RETURN_IF_ERROR(check_range("heads_kv", p.head_count_kv, 1, p.head_count_q));
    if (p.head_count_q % p.head_count_kv != 0) {
      return invalid_argument(fmt::format("heads_q={} must be a multiple of heads_kv={}",
                                          p.head_count_q, p.head_count_kv));
    }
  } else if (p.head_count_kv != 0) {
    return invalid_argument(
        fmt::format("heads_kv={} must be 0 when key=false (no key is rotated)", p.head_count_kv));
  }
  return Status::ok();
}

Status validate(OpKind, const ActivationParams& p) {
  KILN_RETURN_IF_ERROR(check_float_dtype("dtype", p.dtype));
  return check_range("d", p.d, 1, kMaxWidth);
}

Estimate estimate(OpKind op, const NormParams& p, const ProblemSize& size) {
  const double row_bytes = double(p.hidden) * double(dtype_size(p.dtype));
  const double weight_bytes = p.weight ? row_bytes : 0;
  // rms_norm: read x, write y. fused_add: read x and r, write r and x.
  const double per_row = op == OpKind::kFusedAddRmsNorm ? 4 * row_bytes : 2 * row_bytes;
  // square+add, then scale (and weight): ~4 flops per element (+1 for the residual add).
  const double flops_per_elem = op == OpKind::kFusedAddRmsNorm ? 5 : 4;
  return {per_row * double(size.tokens) + weight_bytes,
          flops_per_elem * double(p.hidden) * double(size.tokens)};
}

Estimate estimate(OpKind, const RopeParams& p, const ProblemSize& size) {
  const double heads = double(p.head_count_q + (p.key ? p.head_count_kv : 0));
  // Only the rotated prefix of each head is read and written; one cache row per token.
  const double rotated = heads * double(p.rot_dim) * double(dtype_size(p.dtype));
  const double cache_row = double(p.rot_dim) * double(dtype_size(p.cache_dtype));
  const double per_token = 2 * rotated + cache_row + 8 /* position */;
  // Each pair: 4 multiplies and 2 adds.
  return {per_token * double(size.tokens), 3.0 * heads * double(p.rot_dim) * double(size.tokens)};
}

Estimate estimate(OpKind op, const ActivationParams& p, const ProblemSize& size) {
  const double elem = double(dtype_size(p.dtype));
  const double per_token = 3.0 * double(p.d) * elem;  // read 2d, write d
  // A rough count of the activation math per output element (exp ~ 10 flops).
  double flops_per_elem = 12;
  if (op == OpKind::kFatreluAndMul) flops_per_elem = 2;
  if (op == OpKind::kGeluAndMul) flops_per_elem = 30;
  return {per_token * double(size.tokens), flops_per_elem * double(p.d) * double(size.tokens)};
}

}  // namespace jit::ir
