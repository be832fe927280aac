// The paged gather's copies (paged_attention_v1/v2 on x86, attention_paged.cc): tiles of a
// 16-bit legacy cache (keys [.., D/8, BS, 8], values [.., D, BS]) transposed into the tile
// kernel's slabs (keys as dim rows of the chunk's tokens, values as token rows of the padded
// head), and fp8 codes turned into the slabs' 16-bit values by per-call tables. Strides are in
// elements. The AVX-512 functions need AVX512F/BW, the fp8 ones their decoder's level: the
// caller checks the ISA level.
#pragma once

#include <cstdint>

#include "codegen/target.h"
#include "ir/dtype.h"

namespace jit::codegen::x86 {

/// An 8 x 8 tile of 16-bit elements transposed (SSE2): dst row i, element j = src row j,
/// element i.
void transpose8x8_u16(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride);

/// Two 8 x 8 tiles transposed at once (AVX2): tile k (0, 1) reads rows src + k · src_tile +
/// j · src_stride and writes its row i to dst + k · dst_tile + i · dst_stride.
void transpose8x8x2_u16(const uint16_t* src, int64_t src_stride, int64_t src_tile, uint16_t* dst,
                        int64_t dst_stride, int64_t dst_tile);

/// A key run [16 tokens][8 dims] (256 contiguous bytes) into 8 dim rows of 16 tokens (AVX-512).
void transpose_key_run16(const uint16_t* run, uint16_t* dst, int64_t dst_stride);

/// Two key runs of 16 tokens (tokens 0-15 at `run_a`, 16-31 at `run_b`) into 8 dim rows of 32
/// tokens, one whole 64-byte row per store (AVX-512).
void transpose_key_runs32(const uint16_t* run_a, const uint16_t* run_b, uint16_t* dst,
                          int64_t dst_stride);

/// 8 value dim rows of 16 tokens into 16 token rows of 8 dims (AVX-512).
void transpose_value_dims8(const uint16_t* src, int64_t src_stride, uint16_t* dst,
                           int64_t dst_stride);

/// 32 value dim rows of 16 tokens into 16 token rows of 32 dims, one whole 64-byte row per
/// store (AVX-512).
void transpose_value_dims32(const uint16_t* src, int64_t src_stride, uint16_t* dst,
                            int64_t dst_stride);

/// `rows` rows of `count` 16-bit elements (row r at src + r · src_stride) copied to dst + r ·
/// dst_stride (AVX-512).
void copy_rows_u16(const uint16_t* src, int64_t src_stride, int64_t rows, int64_t count,
                   uint16_t* dst, int64_t dst_stride);

/// The 16-bit value of every fp8 magnitude m (0..127), value(m); code c's value is
/// value(c & 127) with the sign bit flipped by c's bit 7 (fp8 is sign-magnitude and rounding to
/// nearest even odd-symmetric: rnd_T(−x · s) = −rnd_T(x · s); a NaN stays a NaN, its sign bit
/// aside). Held as words (the AVX512BW
/// decoder's), as two byte planes, value(m) = lo[m] | hi[m] << 8 (the AVX512_VBMI decoder's),
/// and per code, sign included, in the low half of a dword (the AVX2 decoder's).
struct Fp8Tables16 {
  alignas(64) uint16_t words[128];
  alignas(64) uint8_t lo[128];
  alignas(64) uint8_t hi[128];
  alignas(64) uint32_t by_code[256];
  /// The AVX2 decoder's exponent steps (prepare_fp8_exponent_steps), valid where
  /// `exponent_steps`: a magnitude m = (e, f) (e its exponent field, f its mantissa field) has
  /// value(m) = normal[f] + (e << shift) for 0 < e < top (normal[f] = value(1, f) − (1 <<
  /// shift), 16-bit wrapping), subnormal[f] for e = 0 and top_row[f] for e = top. Each table is
  /// vpshufb's: per 128-bit lane (both the same) the low bytes of the format's (up to) 8 entries
  /// at bytes 0..7, their high bytes at 8..15, looked up by the index word (f, f + 8).
  alignas(32) uint8_t normal[32];
  alignas(32) uint8_t subnormal[32];
  alignas(32) uint8_t top_row[32];
  bool exponent_steps;
  uint8_t mantissa_bits;   ///< 3 (e4m3) or 2 (e5m2)
  uint8_t top;             ///< the largest exponent field: 15 or 31
  uint8_t exponent_shift;  ///< the 16-bit type's mantissa width: 7 (bf16) or 10 (f16)
};

/// Fills `tables`' exponent steps from its `words` for an fp8 format of `mantissa_bits` (3:
/// e4m3, 2: e5m2) decoding to a 16-bit type of `exponent_shift` mantissa bits (7: bf16, 10: f16),
/// and sets exponent_steps where they give every magnitude's word exactly. They do wherever
/// rnd_T(x · scale) = 2^k · rnd_T(2^-k · x · scale) for the normal values: no result
/// overflows, is subnormal in T, or is zero (a scale of 0, or one so small that T flushes).
/// Checked value by value, not assumed.
void prepare_fp8_exponent_steps(Fp8Tables16& tables, int mantissa_bits, int exponent_shift);

/// The tables of fp8 codes (e5m2 or e4m3) decoded to `dtype`, 16-bit (bf16 or f16):
/// value(m) = rnd_dtype(fp8(m) · scale), in every form above; the AVX2 exponent steps prepared
/// where `prepare_steps` (the kAvx2 decoder's). At scale 1 every e4m3 / e5m2 value is exact in
/// bf16, so the words are the fp8 values themselves.
Fp8Tables16 make_fp8_tables16(bool e5m2, DType dtype, float scale, bool prepare_steps);

/// How the fp8 functions below look the values up: vpermi2b on the byte planes (AVX512_VBMI, 64
/// codes per step), vpermi2w on the words (AVX512BW, 32 codes per step) or, at AVX2, the exponent
/// steps where the tables allow them (16 codes per step), else vpgatherdd on the dwords (8 codes
/// per step); the caller checks the ISA level.
enum class Fp8Decoder : uint8_t { kVbmi, kAvx512Bw, kAvx2 };

/// The fastest decoder `isa` runs.
inline Fp8Decoder fp8_decoder_for(X86Isa isa) {
  return isa >= X86Isa::kAvx512Vbmi ? Fp8Decoder::kVbmi
         : isa >= X86Isa::kAvx512   ? Fp8Decoder::kAvx512Bw
                                    : Fp8Decoder::kAvx2;
}

/// `n` contiguous fp8 codes to `n` contiguous 16-bit values by `tables`.
void fp8_to_words(Fp8Decoder decoder, const uint8_t* codes, int64_t n, const Fp8Tables16& tables,
                  uint16_t* words);

/// `rows` rows of `count` fp8 codes (row r at codes + r · src_stride) to 16-bit values (row r at
/// words + r · dst_stride) by `tables`.
void fp8_rows_to_words(Fp8Decoder decoder, const uint8_t* codes, int64_t src_stride, int64_t rows,
                       int64_t count, const Fp8Tables16& tables, uint16_t* words,
                       int64_t dst_stride);

/// A key run of an fp8 cache, `count` tokens of 16 dims ([count][16] codes), to two 16-bit
/// runs [count][8]: dims 0-7 to `run_lo`, 8-15 to `run_hi`.
void fp8_key_run_to_words(Fp8Decoder decoder, const uint8_t* codes, int64_t count,
                          const Fp8Tables16& tables, uint16_t* run_lo, uint16_t* run_hi);

}  // namespace jit::codegen::x86
