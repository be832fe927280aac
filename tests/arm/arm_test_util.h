// Shared by the arm test programs: the specs every arm test sweeps.
#pragma once

#include <vector>

#include "ir/op_spec.h"

namespace jit::test {

/// The norm and activation ops the arm backend generates.
inline constexpr OpKind kArmRowOps[] = {OpKind::kRmsNorm,       OpKind::kFusedAddRmsNorm,
                                        OpKind::kSiluAndMul,    OpKind::kMulAndSilu,
                                        OpKind::kGeluAndMul,    OpKind::kGeluTanhAndMul,
                                        OpKind::kFatreluAndMul, OpKind::kSwigluoaiAndMul};
inline constexpr DType kArmDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

/// A norm or activation spec of `width` (hidden or d).
inline OpSpec arm_row_spec(OpKind op, DType dtype, int64_t width, bool weight = true) {
  if (op == OpKind::kRmsNorm || op == OpKind::kFusedAddRmsNorm) {
    return OpSpec::make(op, ir::NormParams{dtype, width, weight});
  }
  return OpSpec::make(op, ir::ActivationParams{dtype, width});
}

/// A rotary spec: 4 query heads, 2 key heads (or none).
inline OpSpec arm_rope_spec(DType dtype, DType cache_dtype, int64_t head_size, int64_t rot_dim,
                            ir::RopeStyle style, bool key) {
  return OpSpec::make(
      OpKind::kRotaryEmbedding,
      ir::RopeParams{dtype, cache_dtype, head_size, rot_dim, style, 4, key ? 2 : 0, key});
}

}  // namespace jit::test
