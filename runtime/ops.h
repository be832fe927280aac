// jit::ops: vLLM's custom ops with vLLM's signatures and argument order. Each call derives
// the spec from its arguments, compiles it on first use (then finds it in memory), checks the
// arguments and runs. Errors throw jit::Error whose message names the argument and the
// allowed values; nothing is written when an argument is rejected.
#pragma once

#include <cstdint>

#include "ir/dtype.h"
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

// ---- GEMM (vLLM's oneDNN ops; runtime/ops_gemm.cc) ---------------------------------------------
//
// A handler is an opaque int64 (vLLM's model) naming a kiln object that owns the handler tensor
// (docs/ops.md) made by create_onednn_mm / create_onednn_scaled_mm; the backend that serves the
// spec (onednn, else ref) keeps the weight in its preferred layout. Free it with
// release_onednn_handler. Handlers may be used from several threads at once.

/// Packs b [K, N] (any strides; vLLM passes weight.t()) of f32/f16/bf16 for onednn_mm and
/// returns the handler. `primitive_cache_size` (>= 1) bounds the primitives kept for its
/// (K, N, dtype) class.
int64_t create_onednn_mm(Tensor b, int64_t primitive_cache_size = 128);

/// c [M, N] = a [M, K] @ b + bias with fp32 accumulation and one rounding; a has b's dtype and
/// a unit last stride (any row stride), c is contiguous, bias [N] (same dtype) may be absent.
void onednn_mm(Tensor c, Tensor a, Tensor bias, int64_t handler);

/// Packs an int8 b [K, N] (column-major: weight.t()) and its fp32 scales b_scales (1 element:
/// per tensor, or N: per output channel) for onednn_scaled_mm. `output_type`: f32/f16/bf16;
/// `dynamic_act_quant`: per-token activation scales; `use_azp`: activation zero points.
int64_t create_onednn_scaled_mm(Tensor b, Tensor b_scales, DType output_type,
                                bool dynamic_act_quant, bool use_azp,
                                int64_t primitive_cache_size = 128);

/// int8 a [M, K] (contiguous) times the handler's b, exact in int32, then
/// static:  c = rnd(s_a · s_b[n] · Σ_k (a − azp)·b + bias[n])       (a_scales, azp: 1 element)
/// dynamic: c = rnd(s_a[m] · s_b[n] · Σ_k a·b − s_a[m]·azp[m]·azp_adj[n] + bias[n])
/// (a_scales, azp [M] or [M, 1]; azp_adj [N] or [1, N], required with azp). azp/azp_adj/bias
/// may be absent as the handler's use_azp allows; c [M, N] of output_type.
void onednn_scaled_mm(Tensor c, Tensor a, Tensor a_scales, Tensor azp, Tensor azp_adj, Tensor bias,
                      int64_t handler);

/// Frees a handler (vLLM's release_dnnl_matmul_handler); unknown handlers are an error.
void release_onednn_handler(int64_t handler);

}  // namespace jit::ops
