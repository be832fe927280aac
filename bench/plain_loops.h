// The peer every memory-bound kiln kernel must beat: the same op as a plain C++ loop,
// compiled with -O3 -march=native (the compiler's auto-vectorisation, no JIT), with OpenMP
// over rows like kiln. bf16 in and out, fp32 math, the same rounding steps as the contract.
#pragma once

#include <cstdint>

namespace jit::bench {

/// out[r] = rnd(rnd(x * inv) * w) per row, inv = 1/sqrt(mean(x^2) + eps).
void plain_rms_norm_bf16(uint16_t* out, const uint16_t* x, const uint16_t* w, int64_t rows,
                         int64_t hidden, float eps, int threads);

/// out[r, i] = rnd(rnd(silu(x_i)) * y_i), x = in[r, :d], y = in[r, d:].
void plain_silu_and_mul_bf16(uint16_t* out, const uint16_t* in, int64_t rows, int64_t d,
                             int threads);

/// NeoX rotary embedding in place on query [T, heads * head_size] (rot_dim = head_size).
void plain_rope_neox_bf16(uint16_t* query, const int64_t* positions, const uint16_t* cache,
                          int64_t tokens, int64_t heads, int64_t head_size, int threads);

}  // namespace jit::bench
