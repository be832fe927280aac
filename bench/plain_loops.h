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

/// reshape_and_cache_flash, bf16 key/value [T, H, D] dense, caches [NB, BS, H, D] (NHD) or
/// [NB, H, BS, D] (HND) each; `fp8`: e4m3 codes of x / scale (one byte each), else bf16 bits.
void plain_reshape_and_cache_flash_bf16(void* key_cache, void* value_cache, const uint16_t* key,
                                        const uint16_t* value, const int64_t* slots, int64_t tokens,
                                        int64_t heads, int64_t head_size, int64_t block_size,
                                        bool hnd, bool fp8, float k_scale, float v_scale,
                                        int threads);

/// reshape_and_cache (paged): key cache [NB, H, D/x, BS, x], value cache [NB, H, D, BS],
/// x = 16 / cache element size; bf16 input, bf16 or e4m3 cache.
void plain_reshape_and_cache_bf16(void* key_cache, void* value_cache, const uint16_t* key,
                                  const uint16_t* value, const int64_t* slots, int64_t tokens,
                                  int64_t heads, int64_t head_size, int64_t block_size, bool fp8,
                                  float k_scale, float v_scale, int threads);

/// swap_blocks: memcpy of `block_bytes` per (src, dst) block pair, pairs over threads.
void plain_swap_blocks(uint8_t* dst, const uint8_t* src, const int64_t* mapping, int64_t pairs,
                       int64_t block_bytes, int threads);

/// convert_fp8 quantise: dst[i] = e4m3(bf16 src[i] / scale).
void plain_convert_fp8_bf16(uint8_t* dst, const uint16_t* src, int64_t elements, float scale,
                            int threads);

/// cp_gather_cache of bf16 entries: for request r < batch and row p of its rows
/// [cu[r], cu[r+1]), dst row cu[r] + p = cache entry (block_table[r, p / BS], p % BS); cache
/// [NB, BS, entry] dense, block table rows `table_stride` apart. Rows over threads.
void plain_cp_gather_bf16(uint16_t* dst, const uint16_t* cache, const int32_t* block_table,
                          int64_t table_stride, const int32_t* cu_seq_lens, int64_t batch,
                          int64_t entry, int64_t block_size, int threads);

/// gather_and_maybe_dequant_cache, e4m3 cache [NB, BS, head_dim] into bf16 rows: dst[tok] =
/// bf16(e4m3(code) * scale) for the entry at position tok - cu[r] of r = token_to_seq[tok].
void plain_gather_dequant_e4m3_bf16(uint16_t* dst, const uint8_t* cache, const int32_t* block_table,
                                    int64_t table_stride, const int32_t* cu_seq_lens,
                                    const int32_t* token_to_seq, int64_t tokens, int64_t head_dim,
                                    int64_t block_size, float scale, int threads);

}  // namespace jit::bench
