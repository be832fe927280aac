// The paged gather's and stage's copies (paged_copy.h): SSE2, AVX2 and AVX-512 transposes and
// copies of 16-bit tiles between the legacy cache layout and the tile kernel's slabs or the
// direct kernel's stage, and fp8 codes to 16-bit values by per-call tables (AVX512_VBMI,
// AVX512BW and AVX2 decoders). Host code: each function carries the target it needs; the caller
// picks by the ISA level.
#include "codegen/x86/paged_copy.h"

#include <immintrin.h>

#include <algorithm>

#include "ir/numeric.h"

namespace jit::codegen::x86 {

// An 8 x 8 tile of 16-bit elements transposed: dst row i, element j = src row j, element i
// (rows `src_stride` / `dst_stride` elements apart). Three rounds of SSE2 unpacks (every
// x86-64 CPU): pairs of rows interleaved by element, then by pairs, then by quads.
void transpose8x8_u16(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride) {
  __m128i r[8], a[8], b[8];
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j * src_stride));
  }
  for (int j = 0; j < 8; j += 2) {  // a[j]: elements 0-3 of rows j, j+1; a[j+1]: elements 4-7
    a[j] = _mm_unpacklo_epi16(r[j], r[j + 1]);
    a[j + 1] = _mm_unpackhi_epi16(r[j], r[j + 1]);
  }
  for (int j = 0; j < 8; j += 4) {  // b[j + e/2]: elements e, e+1 of rows j..j+3
    b[j] = _mm_unpacklo_epi32(a[j], a[j + 2]);
    b[j + 1] = _mm_unpackhi_epi32(a[j], a[j + 2]);
    b[j + 2] = _mm_unpacklo_epi32(a[j + 1], a[j + 3]);
    b[j + 3] = _mm_unpackhi_epi32(a[j + 1], a[j + 3]);
  }
  for (int e = 0; e < 8; e += 2) {  // element e of rows 0..7, then element e + 1
    __m128i* out = reinterpret_cast<__m128i*>(dst + e * dst_stride);
    _mm_storeu_si128(out, _mm_unpacklo_epi64(b[e / 2], b[4 + e / 2]));
    out = reinterpret_cast<__m128i*>(dst + (e + 1) * dst_stride);
    _mm_storeu_si128(out, _mm_unpackhi_epi64(b[e / 2], b[4 + e / 2]));
  }
}

// Two 8 x 8 tiles transposed at once, one per 128-bit lane, by the SSE2 tile's three rounds of
// unpacks on ymm (AVX2: half the unpacks and stores per element): tile k's source rows at
// src + k · src_tile + j · src_stride, its output row i at dst + k · dst_tile + i · dst_stride;
// where the tiles' output rows are adjacent (dst_tile == 8), one 32-byte store per row.
__attribute__((target("avx2"))) void transpose8x8x2_u16(const uint16_t* src, int64_t src_stride,
                                                        int64_t src_tile, uint16_t* dst,
                                                        int64_t dst_stride, int64_t dst_tile) {
  __m256i r[8], a[8], b[8];
  for (int j = 0; j < 8; ++j) {
    const uint16_t* row = src + j * src_stride;
    r[j] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(row + src_tile),
                               reinterpret_cast<const __m128i*>(row));
  }
  for (int j = 0; j < 8; j += 2) {
    a[j] = _mm256_unpacklo_epi16(r[j], r[j + 1]);
    a[j + 1] = _mm256_unpackhi_epi16(r[j], r[j + 1]);
  }
  for (int j = 0; j < 8; j += 4) {
    b[j] = _mm256_unpacklo_epi32(a[j], a[j + 2]);
    b[j + 1] = _mm256_unpackhi_epi32(a[j], a[j + 2]);
    b[j + 2] = _mm256_unpacklo_epi32(a[j + 1], a[j + 3]);
    b[j + 3] = _mm256_unpackhi_epi32(a[j + 1], a[j + 3]);
  }
  for (int e = 0; e < 8; ++e) {
    const __m256i row = e % 2 == 0 ? _mm256_unpacklo_epi64(b[e / 2], b[4 + e / 2])
                                   : _mm256_unpackhi_epi64(b[e / 2], b[4 + e / 2]);
    uint16_t* out = dst + e * dst_stride;
    if (dst_tile == 8) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), row);
    } else {
      _mm256_storeu2_m128i(reinterpret_cast<__m128i*>(out + dst_tile),
                           reinterpret_cast<__m128i*>(out), row);
    }
  }
}

// The same copies 16 tokens at a time with AVX-512 word and qword permutes (the gather runs
// these where the target has AVX-512: two permutes per 64 elements against three rounds of
// unpacks per 64 in the SSE2 tile). GCC 12's cast intrinsics (_mm512_castsi256_si512 and the
// like) start from a self-initialised "undefined" vector that -Wuninitialized flags once they
// are inlined (GCC bug 105593, fixed in GCC 13): silenced for these functions only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
//
// A key run [16 tokens][8 dims] (256 contiguous bytes) into 8 dim rows of 16 tokens. in[j]
// holds tokens 4j .. 4j + 3 (word 8·(t % 4) + dim); a word permute of (in0:in1) / (in2:in3)
// gathers dims 0-3 / 4-7 of tokens 0-7 / 8-15 (word w: dim w / 8, token w % 8, index
// 8·token + dim); a qword permute interleaves the 16-byte lanes of tokens 0-7 and 8-15 into a
// dim pair's two rows.
alignas(64) static constexpr uint16_t kKeyDimsLow[32] = {0,  8,  16, 24, 32, 40, 48, 56, 1,  9,  17,
                                                         25, 33, 41, 49, 57, 2,  10, 18, 26, 34, 42,
                                                         50, 58, 3,  11, 19, 27, 35, 43, 51, 59};
alignas(64) static constexpr uint16_t kKeyDimsHigh[32] = {
    4, 12, 20, 28, 36, 44, 52, 60, 5, 13, 21, 29, 37, 45, 53, 61,
    6, 14, 22, 30, 38, 46, 54, 62, 7, 15, 23, 31, 39, 47, 55, 63};

// pairs[k]: dims 2k (low 256 bits) and 2k + 1 (high) of the run's 16 tokens.
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void key_run16_pairs(
    const uint16_t* run, __m512i (&pairs)[4]) {
  const __m512i in0 = _mm512_loadu_si512(run), in1 = _mm512_loadu_si512(run + 32);
  const __m512i in2 = _mm512_loadu_si512(run + 64), in3 = _mm512_loadu_si512(run + 96);
  const __m512i low = _mm512_load_si512(kKeyDimsLow), high = _mm512_load_si512(kKeyDimsHigh);
  const __m512i a_low = _mm512_permutex2var_epi16(in0, low, in1);    // dims 0-3, tokens 0-7
  const __m512i a_high = _mm512_permutex2var_epi16(in0, high, in1);  // dims 4-7, tokens 0-7
  const __m512i b_low = _mm512_permutex2var_epi16(in2, low, in3);    // dims 0-3, tokens 8-15
  const __m512i b_high = _mm512_permutex2var_epi16(in2, high, in3);  // dims 4-7, tokens 8-15
  const __m512i pair0 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i pair1 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  pairs[0] = _mm512_permutex2var_epi64(a_low, pair0, b_low);
  pairs[1] = _mm512_permutex2var_epi64(a_low, pair1, b_low);
  pairs[2] = _mm512_permutex2var_epi64(a_high, pair0, b_high);
  pairs[3] = _mm512_permutex2var_epi64(a_high, pair1, b_high);
}

__attribute__((target("avx512f,avx512bw"))) void transpose_key_run16(const uint16_t* run,
                                                                     uint16_t* dst,
                                                                     int64_t dst_stride) {
  __m512i pairs[4];
  key_run16_pairs(run, pairs);
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * k * dst_stride),
                        _mm512_castsi512_si256(pairs[k]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (2 * k + 1) * dst_stride),
                        _mm512_extracti64x4_epi64(pairs[k], 1));
  }
}

// Two key runs of 16 tokens (tokens 0-15 from `run_a`, 16-31 from `run_b`, e.g. two blocks)
// into 8 dim rows of 32 tokens: whole 64-byte rows, one store each instead of two (the
// 256-bit halves of a run's pairs joined by a 128-bit lane shuffle).
__attribute__((target("avx512f,avx512bw"))) void transpose_key_runs32(const uint16_t* run_a,
                                                                      const uint16_t* run_b,
                                                                      uint16_t* dst,
                                                                      int64_t dst_stride) {
  __m512i a[4], b[4];
  key_run16_pairs(run_a, a);
  key_run16_pairs(run_b, b);
  for (int k = 0; k < 4; ++k) {
    _mm512_storeu_si512(dst + 2 * k * dst_stride, _mm512_shuffle_i64x2(a[k], b[k], 0x44));
    _mm512_storeu_si512(dst + (2 * k + 1) * dst_stride, _mm512_shuffle_i64x2(a[k], b[k], 0xEE));
  }
}

// 8 value dim rows of 16 tokens (src_stride elements apart) into 16 token rows of 8 dims. in[j]
// holds dims 2j and 2j + 1 (16-byte lanes: tokens 0-7 and 8-15 of each); a qword permute
// gathers dims 0-3 / 4-7 of tokens 0-7 / 8-15 (word 8·dim + token), and a word permute of
// (a:a4) / (b:b4) makes 4 token rows (word w: token w / 8 of the 4, dim w % 8, index
// 32·(dim / 4) + 8·(dim % 4) + token): the key tables again.
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void value_dims8_quads(
    const uint16_t* src, int64_t src_stride, __m512i (&quads)[4]) {
  __m512i in[4];
  for (int j = 0; j < 4; ++j) {
    const auto* lo = reinterpret_cast<const __m256i*>(src + 2 * j * src_stride);
    const auto* hi = reinterpret_cast<const __m256i*>(src + (2 * j + 1) * src_stride);
    in[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(lo)),
                               _mm256_loadu_si256(hi), 1);
  }
  const __m512i first = _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13);     // tokens 0-7
  const __m512i second = _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15);  // tokens 8-15
  const __m512i a = _mm512_permutex2var_epi64(in[0], first, in[1]);
  const __m512i b = _mm512_permutex2var_epi64(in[0], second, in[1]);
  const __m512i a4 = _mm512_permutex2var_epi64(in[2], first, in[3]);
  const __m512i b4 = _mm512_permutex2var_epi64(in[2], second, in[3]);
  const __m512i rows0 = _mm512_load_si512(kKeyDimsLow), rows1 = _mm512_load_si512(kKeyDimsHigh);
  quads[0] = _mm512_permutex2var_epi16(a, rows0, a4);
  quads[1] = _mm512_permutex2var_epi16(a, rows1, a4);
  quads[2] = _mm512_permutex2var_epi16(b, rows0, b4);
  quads[3] = _mm512_permutex2var_epi16(b, rows1, b4);
}

__attribute__((target("avx512f,avx512bw"))) void transpose_value_dims8(const uint16_t* src,
                                                                       int64_t src_stride,
                                                                       uint16_t* dst,
                                                                       int64_t dst_stride) {
  __m512i quads[4];
  value_dims8_quads(src, src_stride, quads);
  for (int q = 0; q < 4; ++q) {
    const auto row = [&](int k) {
      return reinterpret_cast<__m128i*>(dst + (4 * q + k) * dst_stride);
    };
    _mm_storeu_si128(row(0), _mm512_castsi512_si128(quads[q]));
    _mm_storeu_si128(row(1), _mm512_extracti32x4_epi32(quads[q], 1));
    _mm_storeu_si128(row(2), _mm512_extracti32x4_epi32(quads[q], 2));
    _mm_storeu_si128(row(3), _mm512_extracti32x4_epi32(quads[q], 3));
  }
}

// 32 value dim rows of 16 tokens into 16 token rows of 32 dims: whole 64-byte rows, 16 stores
// instead of the 64 of four dims8 copies. The four dims8 quads of token quad q hold, in their
// 128-bit lane k, token 4q + k's dims 8g .. 8g + 7 (g: the quad's dim group); a 4 x 4
// transpose of those lanes (two rounds of vshufi64x2) gives each token its 32 dims in order.
__attribute__((target("avx512f,avx512bw"))) void transpose_value_dims32(const uint16_t* src,
                                                                        int64_t src_stride,
                                                                        uint16_t* dst,
                                                                        int64_t dst_stride) {
  __m512i quads[4][4];  // [dim group][token quad]
  for (int g = 0; g < 4; ++g) value_dims8_quads(src + 8 * g * src_stride, src_stride, quads[g]);
  for (int q = 0; q < 4; ++q) {
    // lanes: t01 = (g0 k0, g0 k1, g1 k0, g1 k1), t23 the same for g2, g3; u for k2, k3.
    const __m512i t01 = _mm512_shuffle_i64x2(quads[0][q], quads[1][q], 0x44);
    const __m512i u01 = _mm512_shuffle_i64x2(quads[0][q], quads[1][q], 0xEE);
    const __m512i t23 = _mm512_shuffle_i64x2(quads[2][q], quads[3][q], 0x44);
    const __m512i u23 = _mm512_shuffle_i64x2(quads[2][q], quads[3][q], 0xEE);
    uint16_t* rows = dst + 4 * q * dst_stride;
    _mm512_storeu_si512(rows, _mm512_shuffle_i64x2(t01, t23, 0x88));
    _mm512_storeu_si512(rows + dst_stride, _mm512_shuffle_i64x2(t01, t23, 0xDD));
    _mm512_storeu_si512(rows + 2 * dst_stride, _mm512_shuffle_i64x2(u01, u23, 0x88));
    _mm512_storeu_si512(rows + 3 * dst_stride, _mm512_shuffle_i64x2(u01, u23, 0xDD));
  }
}

// The destinations of consecutive segments of rows of `count` elements (count a multiple of the
// segments' width), the rows `stride` elements apart: the rows-to-rows copies below read rows that
// lie back to back and store each segment where its row goes.
struct SegmentCursor {
  uint16_t* row;
  int64_t count, stride;
  int64_t column = 0;
  // The next segment's destination; moves past its `width` elements.
  uint16_t* next(int64_t width) {
    uint16_t* at = row + column;
    column += width;
    if (column == count) {
      column = 0;
      row += stride;
    }
    return at;
  }
};

// `n` words copied by zmm loads and stores, the tail masked.
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void copy_words(
    const uint16_t* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; i += 32) {
    const int64_t m = std::min<int64_t>(32, n - i);
    const __mmask32 mask = m == 32 ? ~__mmask32(0) : (__mmask32(1) << m) - 1;
    _mm512_mask_storeu_epi16(dst + i, mask, _mm512_maskz_loadu_epi16(mask, src + i));
  }
}

// Contiguous rows of a multiple of 8 words (a whole value block's dim rows, src_stride == count)
// are copied 32 words at a time across rows, each 8-word segment stored from its 128-bit lane (a
// block of 8 keys: four rows per load instead of a load and a store per row); other rows one
// by one.
__attribute__((target("avx512f,avx512bw"))) void copy_rows_u16(const uint16_t* src,
                                                               int64_t src_stride, int64_t rows,
                                                               int64_t count, uint16_t* dst,
                                                               int64_t dst_stride) {
  if (src_stride != count || count % 8 != 0) {
    for (int64_t r = 0; r < rows; ++r)
      copy_words(src + r * src_stride, count, dst + r * dst_stride);
    return;
  }
  const int64_t total = rows * count;
  SegmentCursor to{dst, count, dst_stride};
  for (int64_t i = 0; i < total; i += 32) {
    const int64_t m = std::min<int64_t>(32, total - i);
    const __m512i v =
        _mm512_maskz_loadu_epi16(m == 32 ? ~__mmask32(0) : (__mmask32(1) << m) - 1, src + i);
    const __m128i segment[4] = {_mm512_castsi512_si128(v), _mm512_extracti32x4_epi32(v, 1),
                                _mm512_extracti32x4_epi32(v, 2), _mm512_extracti32x4_epi32(v, 3)};
    for (int64_t k = 0; k < m / 8; ++k) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(to.next(8)), segment[k]);
    }
  }
}

// fp8 codes to 16-bit values by table. fp8 is sign-magnitude and rounding to nearest even is
// odd-symmetric (rnd_T(−x · s) = −rnd_T(x · s), ±0 and ±inf included; a NaN stays a NaN,
// though its sign bit may differ from the ref's), so code c's value is
// value(c & 127) with its sign bit flipped by c's bit 7 (Fp8Tables16, made per call from the
// ref's rnd_T(fp8 · scale) of the 128 magnitudes). Three decoders:
//
// AVX512_VBMI, 64 codes per step: each byte plane is one 128-entry vpermi2b lookup, which reads
// index bits 0-6 only; one vpternlogd flips the high byte's sign by the code's bit 7;
// vpunpckl/hbw interleave the planes into words within each 128-bit lane: lane k's codes 0-7
// to words[0]'s lane k, codes 8-15 to words[1]'s lane k. (vpermi2b occupies the shuffle port for
// two cycles on Sapphire / Emerald Rapids: one lookup per plane instead of two halved the
// decode's shuffle-port time.)
//
// AVX512BW (Skylake-SP, Cascade Lake), 32 codes per step: the codes widened to words index two
// 64-entry vpermi2w lookups of the word table (magnitudes 0-63 and 64-127, index bits 0-5),
// joined by bit 6; one vpternlogd flips the sign by bit 7 moved to bit 15. The words come out in
// order.
//
// AVX2 (Zen 2/3, Haswell to Alder Lake) has no variable permute of 16-bit lanes, and vpshufb
// looks up 16 bytes. But the values of the normal magnitudes are one row's shifted: x = 2^(e−1) ·
// x(1, f), and rnd_T(2^k · y) = 2^k · rnd_T(y) wherever the result is a normal T, so value(e, f)
// = normal[f] + ((e − 1) << shift) as 16-bit integers (the exponent field moves). With the
// subnormal row (e = 0) and the top row (e = 15: the largest normals and NaN; e = 31: inf and
// NaN) as tables of their own, 16 codes per step are a widening, three vpshufb of 8-word
// tables, two compares and blends and the sign's XOR (prepare_fp8_exponent_steps checks every
// magnitude against the exact table; a call whose scale breaks the identity, e.g. a product
// that overflows or is subnormal in f16, takes the fallback). The fallback, 8 codes per step:
// vpgatherdd reads each code's value from the 256-entry dword table, and vpackusdw narrows the
// dwords to words.

// The tables in registers, loaded once per function: the stores to 16-bit words may alias the
// tables' bytes as far as the compiler knows, so lookups that read them from memory would reload
// them after every store.
struct Fp8Lut {
  __m512i lo[2], hi[2];
};

__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) static inline Fp8Lut
load_fp8_lut(const Fp8Tables16& t) {
  return {{_mm512_load_si512(t.lo), _mm512_load_si512(t.lo + 64)},
          {_mm512_load_si512(t.hi), _mm512_load_si512(t.hi + 64)}};
}

// 64 codes to 64 words, in-lane order (above).
__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) static inline void
fp8_to_words64_in_lanes(__m512i codes, const Fp8Lut& lut, __m512i (&words)[2]) {
  const __m512i lo = _mm512_permutex2var_epi8(lut.lo[0], codes, lut.lo[1]);
  __m512i hi = _mm512_permutex2var_epi8(lut.hi[0], codes, lut.hi[1]);
  // hi ^= codes & 0x80 (ternary logic A ^ (B & C): 0x78).
  hi = _mm512_ternarylogic_epi32(hi, codes, _mm512_set1_epi8(char(0x80)), 0x78);
  words[0] = _mm512_unpacklo_epi8(lo, hi);
  words[1] = _mm512_unpackhi_epi8(lo, hi);
}

// 64 codes to 64 words in order: words[0] codes 0-31, words[1] codes 32-63 (the qword permute
// puts codes 8k .. 8k + 7 where the in-lane unpacks take them to words 8k .. 8k + 7).
__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) static inline void
fp8_to_words64(__m512i codes, const Fp8Lut& lut, __m512i (&words)[2]) {
  const __m512i order = _mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7);
  fp8_to_words64_in_lanes(_mm512_permutexvar_epi64(order, codes), lut, words);
}

// n codes (contiguous) to n words (contiguous), the tail masked.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void vbmi_to_words(
    const uint8_t* codes, int64_t n, const Fp8Tables16& t, uint16_t* words) {
  const Fp8Lut lut = load_fp8_lut(t);
  for (int64_t i = 0; i < n; i += 64) {
    const int64_t m = std::min<int64_t>(64, n - i);
    const __mmask64 in = m == 64 ? ~__mmask64(0) : (__mmask64(1) << m) - 1;
    __m512i w[2];
    fp8_to_words64(_mm512_maskz_loadu_epi8(in, codes + i), lut, w);
    _mm512_mask_storeu_epi16(words + i, __mmask32(in), w[0]);
    _mm512_mask_storeu_epi16(words + i + 32, __mmask32(in >> 32), w[1]);
  }
}

// `rows` rows of `count` codes (a multiple of 16) that lie back to back (a whole value block's
// dim rows) to rows of 16-bit values `dst_stride` apart: decoded 64 codes at a time across rows,
// so short rows (16 keys) fill whole vectors; each 16-code segment's words are one 32-byte store
// where its row goes (SegmentCursor; masked 64-byte stores at an offset ran 1.8x slower).
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void vbmi_rows_to_words(
    const uint8_t* codes, int64_t rows, int64_t count, const Fp8Tables16& t, uint16_t* words,
    int64_t dst_stride) {
  const Fp8Lut lut = load_fp8_lut(t);
  const int64_t total = rows * count;
  SegmentCursor to{words, count, dst_stride};
  for (int64_t i = 0; i < total; i += 64) {
    const int64_t m = std::min<int64_t>(64, total - i);
    __m512i w[2];  // codes i .. i + 31, i + 32 .. i + 63
    fp8_to_words64(
        _mm512_maskz_loadu_epi8(m == 64 ? ~__mmask64(0) : (__mmask64(1) << m) - 1, codes + i), lut,
        w);
    const __m256i segment[4] = {_mm512_castsi512_si256(w[0]), _mm512_extracti64x4_epi64(w[0], 1),
                                _mm512_castsi512_si256(w[1]), _mm512_extracti64x4_epi64(w[1], 1)};
    for (int64_t k = 0; k < m / 16; ++k) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to.next(16)), segment[k]);
    }
  }
}

// A key run of an fp8 cache, `count` tokens of 16 dims ([count][16] codes), to two 16-bit runs
// [count][8] (dims 0-7 to `run_lo`, 8-15 to `run_hi`): the layout of a 16-bit legacy cache.
// Four tokens per vector, one per 128-bit lane, so the in-lane unpacks give run_lo's and
// run_hi's four tokens as they are.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void vbmi_key_run_to_words(
    const uint8_t* codes, int64_t count, const Fp8Tables16& t, uint16_t* run_lo, uint16_t* run_hi) {
  const Fp8Lut lut = load_fp8_lut(t);
  for (int64_t i = 0; i < count; i += 4) {
    const int64_t m = std::min<int64_t>(4, count - i);
    const __mmask64 in = m == 4 ? ~__mmask64(0) : (__mmask64(1) << (16 * m)) - 1;
    const __mmask32 out = m == 4 ? ~__mmask32(0) : (__mmask32(1) << (8 * m)) - 1;
    __m512i w[2];
    fp8_to_words64_in_lanes(_mm512_maskz_loadu_epi8(in, codes + 16 * i), lut, w);
    _mm512_mask_storeu_epi16(run_lo + 8 * i, out, w[0]);
    _mm512_mask_storeu_epi16(run_hi + 8 * i, out, w[1]);
  }
}

// The word table in registers (as Fp8Lut).
struct Fp8WordLut {
  __m512i w[4];  // magnitudes 0-31, 32-63, 64-95, 96-127
};

__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static inline Fp8WordLut
load_fp8_word_lut(const Fp8Tables16& t) {
  return {{_mm512_load_si512(t.words), _mm512_load_si512(t.words + 32),
           _mm512_load_si512(t.words + 64), _mm512_load_si512(t.words + 96)}};
}

// 32 codes to 32 words in order.
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static inline __m512i
bw_to_words32(__m256i codes, const Fp8WordLut& lut) {
  const __m512i w = _mm512_cvtepu8_epi16(codes);
  const __m512i low = _mm512_permutex2var_epi16(lut.w[0], w, lut.w[1]);
  const __m512i high = _mm512_permutex2var_epi16(lut.w[2], w, lut.w[3]);
  const __m512i value =
      _mm512_mask_blend_epi16(_mm512_test_epi16_mask(w, _mm512_set1_epi16(0x40)), low, high);
  // value ^= (w << 8) & 0x8000 (ternary logic A ^ (B & C): 0x78).
  return _mm512_ternarylogic_epi32(value, _mm512_slli_epi16(w, 8),
                                   _mm512_set1_epi16(int16_t(0x8000)), 0x78);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void bw_to_words(const uint8_t* codes,
                                                                             int64_t n,
                                                                             const Fp8Tables16& t,
                                                                             uint16_t* words) {
  const Fp8WordLut lut = load_fp8_word_lut(t);
  for (int64_t i = 0; i < n; i += 32) {
    const int64_t m = std::min<int64_t>(32, n - i);
    const __mmask32 mask = m == 32 ? ~__mmask32(0) : (__mmask32(1) << m) - 1;
    _mm512_mask_storeu_epi16(words + i, mask,
                             bw_to_words32(_mm256_maskz_loadu_epi8(mask, codes + i), lut));
  }
}

// As vbmi_rows_to_words, 32 codes (two 16-code segments) per step.
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void bw_rows_to_words(
    const uint8_t* codes, int64_t rows, int64_t count, const Fp8Tables16& t, uint16_t* words,
    int64_t dst_stride) {
  const Fp8WordLut lut = load_fp8_word_lut(t);
  const int64_t total = rows * count;
  SegmentCursor to{words, count, dst_stride};
  for (int64_t i = 0; i < total; i += 32) {  // total is a multiple of 16
    const bool both = i + 32 <= total;
    const __m512i w =
        bw_to_words32(_mm256_maskz_loadu_epi8(both ? ~__mmask32(0) : 0xFFFFu, codes + i), lut);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to.next(16)), _mm512_castsi512_si256(w));
    if (both) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to.next(16)), _mm512_extracti64x4_epi64(w, 1));
    }
  }
}

// As vbmi_key_run_to_words: two tokens per 32-code step, their lanes (t lo, t hi, t' lo, t' hi)
// regrouped by vshufi64x2 into four tokens' run_lo and run_hi.
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void bw_key_run_to_words(
    const uint8_t* codes, int64_t count, const Fp8Tables16& t, uint16_t* run_lo, uint16_t* run_hi) {
  const Fp8WordLut lut = load_fp8_word_lut(t);
  for (int64_t i = 0; i < count; i += 4) {
    const int64_t m = std::min<int64_t>(4, count - i);
    const __mmask64 in = m == 4 ? ~__mmask64(0) : (__mmask64(1) << (16 * m)) - 1;
    const __mmask32 out = m == 4 ? ~__mmask32(0) : (__mmask32(1) << (8 * m)) - 1;
    const __m512i a = bw_to_words32(_mm256_maskz_loadu_epi8(__mmask32(in), codes + 16 * i), lut);
    const __m512i b =
        bw_to_words32(_mm256_maskz_loadu_epi8(__mmask32(in >> 32), codes + 16 * i + 32), lut);
    _mm512_mask_storeu_epi16(run_lo + 8 * i, out, _mm512_shuffle_i64x2(a, b, 0x88));
    _mm512_mask_storeu_epi16(run_hi + 8 * i, out, _mm512_shuffle_i64x2(a, b, 0xDD));
  }
}

// The exponent steps' tables and constants in registers.
struct Fp8Steps {
  __m256i normal, subnormal, top_row;
  __m256i mantissa_mask;   // f in both bytes of a word of (c, c)
  __m256i exponent_mask;   // top << shift: e << shift from (c, c) << (shift − mantissa bits)
  __m128i exponent_shift;  // shift − mantissa bits
};

__attribute__((target("avx2"), always_inline)) static inline Fp8Steps load_fp8_steps(
    const Fp8Tables16& t) {
  const int fields = 1 << t.mantissa_bits;
  return {_mm256_load_si256(reinterpret_cast<const __m256i*>(t.normal)),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(t.subnormal)),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(t.top_row)),
          _mm256_set1_epi16(int16_t((fields - 1) * 0x0101)),
          _mm256_set1_epi16(int16_t(t.top << t.exponent_shift)),
          _mm_cvtsi32_si128(t.exponent_shift - t.mantissa_bits)};
}

// 16 codes to 16 words in order (the exponent steps). Each code c is widened to the word
// (c, c): its bit 15 is the sign, (c, c) & (f mask in both bytes) + 0x0800 the table index
// (f, f + 8), and ((c, c) << (shift − mantissa bits)) & (exponent mask) is e << shift (the high
// byte's copy lands above the mask).
__attribute__((target("avx2"), always_inline)) static inline __m256i avx2_step16(
    const uint8_t* codes, const Fp8Steps& s) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  const __m256i halves = _mm256_permute4x64_epi64(_mm256_castsi128_si256(raw), 0x50);
  const __m256i cc = _mm256_unpacklo_epi8(halves, halves);  // codes 0-7, then 8-15
  const __m256i sign = _mm256_and_si256(cc, _mm256_set1_epi16(-0x8000));
  const __m256i index =
      _mm256_add_epi16(_mm256_and_si256(cc, s.mantissa_mask), _mm256_set1_epi16(0x0800));
  const __m256i exponent =
      _mm256_and_si256(_mm256_sll_epi16(cc, s.exponent_shift), s.exponent_mask);
  __m256i v = _mm256_add_epi16(_mm256_shuffle_epi8(s.normal, index), exponent);
  v = _mm256_blendv_epi8(v, _mm256_shuffle_epi8(s.subnormal, index),
                         _mm256_cmpeq_epi16(exponent, _mm256_setzero_si256()));
  v = _mm256_blendv_epi8(v, _mm256_shuffle_epi8(s.top_row, index),
                         _mm256_cmpeq_epi16(exponent, s.exponent_mask));  // e = top
  return _mm256_xor_si256(v, sign);
}

// 8 codes to 8 words in order (the fallback).
__attribute__((target("avx2"), always_inline)) static inline __m128i avx2_to_words8(
    const uint8_t* codes, const Fp8Tables16& t) {
  const __m256i index =
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  const __m256i values = _mm256_i32gather_epi32(reinterpret_cast<const int*>(t.by_code), index, 4);
  return _mm_packus_epi32(_mm256_castsi256_si128(values), _mm256_extracti128_si256(values, 1));
}

// `n` codes: 16 at a time by the exponent `steps` where given, the rest 8 at a time by the
// fallback, the tail element by element.
__attribute__((target("avx2"), always_inline)) static inline void avx2_codes_to_words(
    const uint8_t* codes, int64_t n, const Fp8Steps* steps, const Fp8Tables16& t, uint16_t* words) {
  int64_t i = 0;
  if (steps != nullptr) {
    for (; i + 16 <= n; i += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + i), avx2_step16(codes + i, *steps));
    }
  }
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(words + i), avx2_to_words8(codes + i, t));
  }
  for (; i < n; ++i) words[i] = uint16_t(t.by_code[codes[i]]);
}

__attribute__((target("avx2"))) static void avx2_to_words(const uint8_t* codes, int64_t n,
                                                          const Fp8Tables16& t, uint16_t* words) {
  if (!t.exponent_steps) {
    avx2_codes_to_words(codes, n, nullptr, t, words);
    return;
  }
  const Fp8Steps steps = load_fp8_steps(t);
  avx2_codes_to_words(codes, n, &steps, t, words);
}

// Rows of codes by the exponent steps, the tables loaded once (a block's value rows are often
// a single step each); a row's last count % 16 codes by the fallback.
__attribute__((target("avx2"))) static void avx2_step_rows_to_words(
    const uint8_t* codes, int64_t src_stride, int64_t rows, int64_t count, const Fp8Tables16& t,
    uint16_t* words, int64_t dst_stride) {
  const Fp8Steps steps = load_fp8_steps(t);
  if (count == 16) {  // a block of 16 keys: one step per row, no tail
    for (int64_t r = 0; r < rows; ++r) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + r * dst_stride),
                          avx2_step16(codes + r * src_stride, steps));
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    avx2_codes_to_words(codes + r * src_stride, count, &steps, t, words + r * dst_stride);
  }
}

__attribute__((target("avx2"))) static void avx2_key_run_to_words(
    const uint8_t* codes, int64_t count, const Fp8Tables16& t, uint16_t* run_lo, uint16_t* run_hi) {
  if (t.exponent_steps) {
    const Fp8Steps steps = load_fp8_steps(t);
    for (int64_t i = 0; i < count; ++i) {
      const __m256i v = avx2_step16(codes + 16 * i, steps);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(run_lo + 8 * i), _mm256_castsi256_si128(v));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(run_hi + 8 * i), _mm256_extracti128_si256(v, 1));
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(run_lo + 8 * i), avx2_to_words8(codes + 16 * i, t));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(run_hi + 8 * i),
                     avx2_to_words8(codes + 16 * i + 8, t));
  }
}

#pragma GCC diagnostic pop

void prepare_fp8_exponent_steps(Fp8Tables16& tables, int mantissa_bits, int exponent_shift) {
  const int fields = 1 << mantissa_bits;  // mantissa values per exponent
  const int top = 128 / fields - 1;
  tables.mantissa_bits = uint8_t(mantissa_bits);
  tables.top = uint8_t(top);
  tables.exponent_shift = uint8_t(exponent_shift);
  // value(1, f) − (1 << shift): the normal rows' value(e, f) is this + (e << shift).
  const auto normal = [&](int f) {
    return uint16_t(tables.words[fields + f] - (1 << exponent_shift));
  };
  for (int lane = 0; lane < 2; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const int f = i % fields;  // entries past the format's fields repeat (never indexed)
      const uint16_t words[3] = {normal(f), tables.words[f], tables.words[top * fields + f]};
      uint8_t* planes[3] = {tables.normal, tables.subnormal, tables.top_row};
      for (int t = 0; t < 3; ++t) {
        planes[t][16 * lane + i] = uint8_t(words[t]);
        planes[t][16 * lane + 8 + i] = uint8_t(words[t] >> 8);
      }
    }
  }
  tables.exponent_steps = true;
  for (int m = fields; m < top * fields; ++m) {
    const int e = m / fields, f = m % fields;
    const auto stepped = uint16_t(normal(f) + (e << exponent_shift));
    if (stepped != tables.words[m]) tables.exponent_steps = false;
  }
}

Fp8Tables16 make_fp8_tables16(bool e5m2, DType dtype, float scale, bool prepare_steps) {
  Fp8Tables16 tables{};
  for (int code = 0; code < 256; ++code) {
    const float f =
        (e5m2 ? numeric::fp8_e5m2_to_f32(uint8_t(code)) : numeric::fp8_e4m3_to_f32(uint8_t(code))) *
        scale;
    const uint16_t word = dtype == DType::kBF16 ? numeric::f32_to_bf16(f) : numeric::f32_to_f16(f);
    tables.by_code[code] = word;
    if (code < 128) {  // the magnitudes (the sign comes from the code)
      tables.words[code] = word;
      tables.lo[code] = uint8_t(word);
      tables.hi[code] = uint8_t(word >> 8);
    }
  }
  if (prepare_steps) {
    prepare_fp8_exponent_steps(tables, e5m2 ? 2 : 3, dtype == DType::kBF16 ? 7 : 10);
  }
  return tables;
}

void fp8_to_words(Fp8Decoder decoder, const uint8_t* codes, int64_t n, const Fp8Tables16& tables,
                  uint16_t* words) {
  switch (decoder) {
    case Fp8Decoder::kVbmi: vbmi_to_words(codes, n, tables, words); break;
    case Fp8Decoder::kAvx512Bw: bw_to_words(codes, n, tables, words); break;
    case Fp8Decoder::kAvx2: avx2_to_words(codes, n, tables, words); break;
  }
}

void fp8_rows_to_words(Fp8Decoder decoder, const uint8_t* codes, int64_t src_stride, int64_t rows,
                       int64_t count, const Fp8Tables16& tables, uint16_t* words,
                       int64_t dst_stride) {
  if (src_stride == count && dst_stride == count) {  // one contiguous run on both sides
    fp8_to_words(decoder, codes, rows * count, tables, words);
    return;
  }
  const bool back_to_back = src_stride == count && decoder != Fp8Decoder::kAvx2;
  if (back_to_back && count % 16 == 0) {
    if (decoder == Fp8Decoder::kVbmi) {
      vbmi_rows_to_words(codes, rows, count, tables, words, dst_stride);
    } else {
      bw_rows_to_words(codes, rows, count, tables, words, dst_stride);
    }
    return;
  }
  constexpr int64_t kWords = 2048;
  if (back_to_back && count % 8 == 0 && count <= kWords) {
    // Rows of 8 + 16k codes (a whole block of 8 or 24 keys): decoded as one run into a buffer of
    // whole rows, then copied 8 words at a time (copy_rows_u16); row by row, a block of 8 keys
    // spent a masked decode step per 8 codes.
    alignas(64) uint16_t buffer[kWords];
    const int64_t per = kWords / count;  // rows per piece
    for (int64_t r = 0; r < rows; r += per) {
      const int64_t n = std::min(per, rows - r);
      fp8_to_words(decoder, codes + r * count, n * count, tables, buffer);
      copy_rows_u16(buffer, count, n, count, words + r * dst_stride, dst_stride);
    }
    return;
  }
  if (decoder == Fp8Decoder::kAvx2 && tables.exponent_steps) {
    avx2_step_rows_to_words(codes, src_stride, rows, count, tables, words, dst_stride);
    return;
  }
  // Rows apart (a block's partial run), or AVX2's fallback: row by row.
  for (int64_t r = 0; r < rows; ++r) {
    fp8_to_words(decoder, codes + r * src_stride, count, tables, words + r * dst_stride);
  }
}

void fp8_key_run_to_words(Fp8Decoder decoder, const uint8_t* codes, int64_t count,
                          const Fp8Tables16& tables, uint16_t* run_lo, uint16_t* run_hi) {
  switch (decoder) {
    case Fp8Decoder::kVbmi: vbmi_key_run_to_words(codes, count, tables, run_lo, run_hi); break;
    case Fp8Decoder::kAvx512Bw: bw_key_run_to_words(codes, count, tables, run_lo, run_hi); break;
    case Fp8Decoder::kAvx2: avx2_key_run_to_words(codes, count, tables, run_lo, run_hi); break;
  }
}

}  // namespace jit::codegen::x86
