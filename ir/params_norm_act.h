// Compile-time parameters of the norm, rotary and gated-activation ops.
//
// What is baked into the code and what stays a run-time argument:
//   rms_norm / fused_add_rms_norm: compile-time dtype, hidden, weight presence;
//     run-time: token count, row strides, epsilon, pointers.
//   rotary_embedding: compile-time dtype, cache dtype, head_size, rot_dim, style, head counts,
//     key presence; run-time: token count, positions, token/head strides, pointers.
//   *_and_mul: compile-time dtype and d (output width); run-time: token count, fatrelu
//     threshold, swigluoai alpha and limit, pointers.
#pragma once

#include <cstdint>

#include "ir/estimate.h"
#include "ir/field.h"
#include "ir/op_kind.h"
#include "ir/status.h"

namespace jit::ir {

/// rms_norm and fused_add_rms_norm: rows of `hidden` elements of `dtype`.
struct NormParams {
  DType dtype = DType::kBF16;  ///< input, output, residual and weight type (f32/f16/bf16)
  int64_t hidden = 0;          ///< H, the row length (>= 1)
  bool weight = true;          ///< false: vLLM's newest `weight=None` (no weight multiply)

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("hidden", s.hidden);
    v("weight", s.weight);
  }
  bool operator==(const NormParams&) const = default;
};

/// rotary_embedding, applied in place to query (and key when present).
struct RopeParams {
  DType dtype = DType::kBF16;        ///< query/key type (f32/f16/bf16)
  DType cache_dtype = DType::kBF16;  ///< cos_sin_cache type (classic vLLM: equal to dtype)
  int64_t head_size = 0;             ///< D
  int64_t rot_dim = 0;               ///< rotated prefix of each head: even, <= head_size
  RopeStyle style = RopeStyle::kNeox;
  int64_t head_count_q = 0;   ///< NH
  int64_t head_count_kv = 0;  ///< NKV (NH % NKV == 0); ignored when key is false
  bool key = true;            ///< false: key is None (rotate query only)

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("cache_dtype", s.cache_dtype);
    v("head_size", s.head_size);
    v("rot_dim", s.rot_dim);
    v("style", s.style);
    v("heads_q", s.head_count_q);
    v("heads_kv", s.head_count_kv);
    v("key", s.key);
  }
  bool operator==(const RopeParams&) const = default;
};

/// The six gated activations: input rows of 2*d, output rows of d.
struct ActivationParams {
  DType dtype = DType::kBF16;  ///< input and output type (f32/f16/bf16)
  int64_t d = 0;               ///< output width; input rows hold 2*d elements

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("d", s.d);
  }
  bool operator==(const ActivationParams&) const = default;
};

Status validate(OpKind op, const NormParams& p);
Status validate(OpKind op, const RopeParams& p);
Status validate(OpKind op, const ActivationParams& p);
Estimate estimate(OpKind op, const NormParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const RopeParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const ActivationParams& p, const ProblemSize& size);

}  // namespace jit::ir
