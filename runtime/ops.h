// jit::ops: vLLM's custom ops with vLLM's signatures and argument order. Each call derives
// the spec from its arguments, compiles it on first use (then finds it in memory), checks the
// arguments and runs. Errors throw jit::Error whose message names the argument and the
// allowed values; nothing is written when an argument is rejected.
#pragma once

#include <cstdint>

#include "ir/tensor.h"

namespace jit::ops {

/// out[r, :] = rnd(rnd(x * 1/sqrt(mean(x^2) + epsilon)) * weight) per row of input [..., H].
/// `out` is contiguous with input's shape; `weight` [H] may be absent (Tensor{}) for no weight.
void rms_norm(Tensor out, Tensor input, Tensor weight, double epsilon);

/// In place: residual = rnd(input + residual); input = rms_norm(residual) (see rms_norm).
void fused_add_rms_norm(Tensor input, Tensor residual, Tensor weight, double epsilon);

/// In place rotary embedding of query (and key unless it is absent) with rows of
/// cos_sin_cache [max_position, rot_dim] selected by positions ([T] or [B, S], int64).
void rotary_embedding(Tensor positions, Tensor query, Tensor key, int64_t head_size,
                      Tensor cos_sin_cache, bool is_neox);

/// out [..., d] = act(x) * y with x = input[..., :d], y = input[..., d:] (both contiguous).
void silu_and_mul(Tensor out, Tensor input);
/// out = x * silu(y).
void mul_and_silu(Tensor out, Tensor input);
/// out = gelu(x) * y with the exact (erf) GELU.
void gelu_and_mul(Tensor out, Tensor input);
/// out = gelu_tanh(x) * y (tanh approximation).
void gelu_tanh_and_mul(Tensor out, Tensor input);
/// out = (x > threshold ? x : 0) * y.
void fatrelu_and_mul(Tensor out, Tensor input, double threshold = 0.0);
/// GPT-OSS SwiGLU on interleaved (gate, up) pairs: (clamp(up) + 1) * g * sigmoid(alpha g),
/// g = min(gate, limit).
void swigluoai_and_mul(Tensor out, Tensor input, double alpha = 1.702, double limit = 7.0);

}  // namespace jit::ops
