// The peer every memory-bound kiln kernel must beat: the same op as a plain C++ loop,
// compiled with -O3 -march=native (the compiler's auto-vectorisation, no JIT), with OpenMP
// over rows like kiln. bf16 in and out, fp32 math, the same rounding steps as the contract.
#pragma once

#include <cstdint>

namespace jit::bench {

/// out[r] = rnd(rnd(x * inv) * w) per row, inv = 1/sqrt(mean(x^2) + eps).
void plain_rms_norm_bf16(uint16_t* out, const uint16_t* x, const uint16_t* w, int64_t rows,
                         int64_t hidden, float eps, int threads);

/// fused_add_rms_norm in place: residual[r] = z = rnd(x + residual), x[r] = rnd(rnd(z * inv) * w)
/// with inv = 1/sqrt(mean(z^2) + eps).
void plain_fused_add_rms_norm_bf16(uint16_t* x, uint16_t* residual, const uint16_t* w, int64_t rows,
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

/// convert_fp8 dequantise: dst[i] = bf16(decode_e4m3(src[i]) * scale).
void plain_convert_e4m3_to_bf16(uint16_t* dst, const uint8_t* src, int64_t elements, float scale,
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

/// concat_and_cache_mla, kv=fp8_ds_mla: bf16 kv_c [T, 512] and k_pe [T, 64] (dense) into
/// 656-byte entries of a dense [NB, BS, 656] cache: per 128-tile amax / 448 scale, e4m3 codes,
/// the 4 fp32 scales, then the rope bits.
void plain_ds_mla_bf16(uint8_t* cache, const uint16_t* kv_c, const uint16_t* k_pe,
                       const int64_t* slots, int64_t tokens, int64_t block_size, int threads);

/// concat_and_cache_mla_rope_fused, bf16, kv=auto, NeoX: q_pe [T, Hq, rot] and k_pe [T, rot]
/// rotated in place (the rotary rounding), entry [kv_c (R) | k_pe (rot)] of a dense
/// [NB, BS, R + rot] cache.
void plain_mla_rope_fused_bf16(uint16_t* cache, uint16_t* q_pe, uint16_t* k_pe,
                               const uint16_t* kv_c, const uint16_t* cos_sin,
                               const int64_t* positions, const int64_t* slots, int64_t tokens,
                               int64_t heads_q, int64_t rot, int64_t rank, int64_t block_size,
                               int threads);

/// cp_gather_and_upconvert_fp8_kv_cache for one request: dst row o (bf16 [576]) from the
/// fp8_ds_mla entry (block_table[o / BS], o % BS) of a dense [NB, BS, 656] cache.
void plain_upconvert_gather(uint16_t* dst, const uint8_t* cache, const int32_t* block_table,
                            int64_t rows, int64_t block_size, int threads);

/// indexer_k_quant_and_cache, bf16 k [T, D] dense, one group per 128 elements, ue8m0 scales,
/// into the indexer block layout (values then fp32 scales per block).
void plain_indexer_quant_bf16(uint8_t* cache, const uint16_t* k, const int64_t* slots,
                              int64_t tokens, int64_t head_dim, int64_t block_size, int threads);

/// cp_gather_indexer_k_quant_cache: dst row i copies D value bytes and 4·D/128 scale bytes of
/// the cache entry (block_table[r, p / BS], p % BS), rows over threads.
void plain_indexer_gather(uint8_t* dst_k, uint8_t* dst_scale, const uint8_t* cache,
                          const int32_t* block_table, int64_t table_stride,
                          const int32_t* cu_seq_lens, int64_t batch, int64_t head_dim,
                          int64_t block_size, int threads);

/// merge_attn_states, bf16 [T, H, D] dense, LSE [H, T]: fp32 weights from expf, output_lse.
void plain_merge_attn_states_bf16(uint16_t* out, float* out_lse, const uint16_t* prefix,
                                  const float* prefix_lse, const uint16_t* suffix,
                                  const float* suffix_lse, int64_t tokens, int64_t heads,
                                  int64_t head_size, int threads);

}  // namespace jit::bench
