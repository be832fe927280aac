// CacheGenerator: the Generator base of the KV-cache generators (cache_kernel.cc,
// mla_kernel.cc, indexer_kernel.cc): spans copied, quantised or dequantised with compile-time
// lengths, and the token loop of the cache writes (slot -> block, offset). Included only by
// generator .cc files (it brings in xbyak.h).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>

#include "codegen/x86/generator.h"
#include "codegen/x86/kernels.h"
#include "ir/numeric.h"
#include "ir/params_cache.h"

namespace jit::codegen::x86 {

// Units of a span fully unrolled up to this count; longer spans loop over kUnroll units.
inline constexpr int64_t kMaxUnrolled = 16;
inline constexpr int kUnroll = 4;

// The constants of CacheGenerator::quantise_pow2_unit per input type and fp8 format (see the
// derivation there).
struct Pow2Format {
  int min_k, max_k;    // the scales 2^k the steps serve
  int shift;           // B, so K2 = (k + B) << exponent_lsb
  int exponent_lsb;    // 7 (bf16) or 10 (f16)
  int dropped;         // D
  uint32_t offset;     // (R - B)·2^exponent_lsb
  uint32_t max_code;   // the largest finite code
  uint32_t magic;      // C as fp16 bits
  int to_fp16;         // the left shift from s' to the fp16 view: 3 (bf16) or 0 (f16)
  uint32_t max_input;  // the largest accepted a (NaN above; for f16 also inf)
};
// bf16 -> e4m3 / e5m2 and f16 -> e4m3 (the others: std::nullopt).
constexpr std::optional<Pow2Format> pow2_format(DType dtype, DType format) {
  const bool e5m2 = format == DType::kFp8E5m2;
  if (dtype == DType::kBF16) {
    return e5m2 ? Pow2Format{-100, 100, 102, 7, 5, (112 - 102) * 128, 0x7B, 0x4C00, 3, 0x7F80}
                : Pow2Format{-100, 100, 112, 7, 4, (120 - 112) * 128, 0x7E, 0x4000, 3, 0x7F80};
  }
  if (dtype == DType::kF16 && !e5m2) {
    return Pow2Format{0, 15, 0, 10, 7, (15 - 7) * 1024, 0x7E, 0x4000, 0, 0x7BFF};
  }
  return std::nullopt;
}
// The ranges of k (derived at quantise_pow2_unit): K2 >= 0, infinities that saturate (bf16).
static_assert(pow2_format(DType::kBF16, DType::kFp8E5m2)->min_k >= -102 &&
                  pow2_format(DType::kBF16, DType::kFp8E5m2)->max_k <= 112 &&
                  pow2_format(DType::kBF16, DType::kFp8E4m3)->min_k >= -112 &&
                  pow2_format(DType::kBF16, DType::kFp8E4m3)->max_k <= 119 &&
                  pow2_format(DType::kF16, DType::kFp8E4m3)->min_k >= 0,
              "see the range of k at quantise_pow2_unit");
// quantise_pow2_ymm_unit (AVX2, AVX-512 without AVX512-FP16) takes the same ranges. bf16: its words
// stay inside signed 16 bits for k + R >= 1 (R = 120 / 112) and k + R <= 256, and C' = 2^(14 + k)
// (e4m3) / 2^(7 + k) (e5m2) is a normal fp32 for k <= 113 / 120. f16 (e4m3): k >= 0 (an f16
// denormal must fall below the fp8 range), and round = 63 - 1024·(k + 8) stays above -2^15 for k
// <= 23.
static_assert(pow2_format(DType::kBF16, DType::kFp8E4m3)->min_k + 120 >= 1 &&
                  pow2_format(DType::kBF16, DType::kFp8E4m3)->max_k <= 113 &&
                  pow2_format(DType::kBF16, DType::kFp8E5m2)->min_k + 112 >= 1 &&
                  pow2_format(DType::kBF16, DType::kFp8E5m2)->max_k <= 120 &&
                  pow2_format(DType::kF16, DType::kFp8E4m3)->min_k >= 0 &&
                  pow2_format(DType::kF16, DType::kFp8E4m3)->max_k <= 23,
              "see the range of k at quantise_pow2_ymm_unit");

class CacheGenerator : public Generator {
 public:
  using Generator::Generator;

 protected:
  using Label = Xbyak::Label;

  // Lane-wise |x| in place (clears the sign bit; NaN stays NaN).
  void abs_ps(const Xmm& x) { uni_vpand(x, x, cst_bits(0x7FFFFFFF)); }

  // The largest lane of `x` into every lane of x, NaN lanes ignored (vmaxps returns its second
  // operand when either is NaN, and the accumulating operand is second here). Uses vmm14.
  void reduce_max(const Xmm& x) {
    const int i = x.getIdx();
    if (avx512()) {
      vshuff32x4(Xbyak::Zmm(14), Xbyak::Zmm(i), Xbyak::Zmm(i), 0x4E);  // swap 256-bit halves
      vmaxps(Xbyak::Zmm(i), Xbyak::Zmm(14), Xbyak::Zmm(i));
    }
    vperm2f128(Xbyak::Ymm(14), Xbyak::Ymm(i), Xbyak::Ymm(i), 0x01);  // swap 128-bit halves
    vmaxps(Xbyak::Ymm(i), Xbyak::Ymm(14), Xbyak::Ymm(i));
    vpermilps(Xmm(14), Xmm(i), 0x4E);  // swap 64-bit pairs
    vmaxps(Xmm(i), Xmm(14), Xmm(i));
    vpermilps(Xmm(14), Xmm(i), 0xB1);  // swap neighbours
    vmaxps(Xmm(i), Xmm(14), Xmm(i));
    vbroadcastss(vmm(i), Xmm(i));
  }

  // acc = max(acc, |x|) over `elements` values of `dtype` at [src] (src not advanced), NaN
  // ignored: the fmaxf reduction of the dynamic fp8 scales. acc starts at 0 (|x| >= 0, and
  // the zero lanes of a tail load cannot raise it). Uses vmm0..3 and vmm13..15.
  void amax_span(const Xmm& acc, const Reg64& src, int64_t elements, DType dtype) {
    const int esize = int(dtype_size(dtype));
    if (avx512() && esize == 2 && elements % kWordLanes == 0) {
      amax_span_words(acc, src, elements, dtype);
      return;
    }
    vxorps(acc, acc, acc);
    for (int64_t first = 0; first < elements; first += lanes()) {
      const int count = int(std::min<int64_t>(lanes(), elements - first));
      const Xmm x = vmm(int((first / lanes()) % 4));
      load_f32(x, dtype, src + int(first * esize), count);
      abs_ps(x);
      vmaxps(acc, x, acc);
    }
    reduce_max(acc);
  }

  // 16-bit values per 512-bit vector.
  static constexpr int64_t kWordLanes = 32;

  // The dword of two 16-bit lanes holding `w` (cst_bits of a word constant).
  static constexpr uint32_t words(uint32_t w) { return (w & 0xFFFF) * 0x00010001u; }

  // The 16-bit steps' sign: bit 7 of each code word from bit 15 of x's word. Clobbers tmp.
  void copy_word_sign(const Xbyak::Zmm& code, const Xbyak::Zmm& x, const Xbyak::Zmm& tmp) {
    constexpr uint8_t kBitSelect = 0xD8;  // vpternlogd: c ? b : a
    vpsrlw(tmp, x, 8);
    vpternlogd(code, tmp, cst_bits(words(0x80)), kBitSelect);
  }

  // amax_span for bf16 / f16 (AVX-512, elements % 32 == 0) on the values' own 16-bit lanes:
  // 32 values per vector in 3 instructions instead of 8 (two widening loads, shifts, |x| and
  // vmaxps per 16). With M the format's infinity bits (bf16 0x7F80, f16 0x7C00) and
  // C = 0x7FFF - M, t = (bits + C) mod 2^16 & 0x7FFF is |x|'s bits + C for every non-NaN x
  // (m = |x|'s bits <= M: m + C <= 0x7FFF, the sign bit alone carries out) and lands in
  // [0, C) for a NaN (m + C > 0x7FFF wraps past bit 15): t is monotonic in |x| with the NaNs
  // below every number, so max t - C is the bits of the largest non-NaN |x| (0 if none), as
  // vmaxps ignores NaN. The lanes hold u = ~t = ~(bits + C) | 0x8000 (one vpternlogd) so the
  // final reduction is vphminposuw's horizontal min: amax bits = K - min u, K = 0xFFFF - C
  // (u of |x| = 0, also the accumulator's start: all-NaN groups give 0). The result, widened
  // exactly to fp32, in every lane of acc. Uses vmm0..3 and vmm14.
  void amax_span_words(const Xmm& acc, const Reg64& src, int64_t elements, DType dtype) {
    amax_bits_words(acc, src, elements, dtype);
    const Xmm x_acc(acc.getIdx());
    if (dtype == DType::kBF16) {
      vpslld(x_acc, Xmm(14), 16);
    } else {
      vcvtph2ps(x_acc, Xmm(14));
    }
    vbroadcastss(vmm(acc.getIdx()), x_acc);
  }

  // amax_bits_words' constants (words(..) of a dword): C, K and the sign bit; for
  // pin_constants.
  static std::array<uint32_t, 3> amax_word_constants(DType dtype) {
    const uint32_t inf_bits = dtype == DType::kBF16 ? 0x7F80 : 0x7C00;
    const uint32_t c = 0x7FFF - inf_bits, k = 0xFFFF - c;
    return {words(c), words(k), words(0x8000)};
  }

  // The reduction of amax_span_words without the widening: word 0 of xmm14 = the bits of the
  // largest non-NaN |x| (0 if none); acc is clobbered. Uses vmm0..3 and vmm14.
  void amax_bits_words(const Xmm& acc, const Reg64& src, int64_t elements, DType dtype) {
    const auto [c, k, sign] = amax_word_constants(dtype);
    const Xbyak::Zmm z_acc(acc.getIdx());
    vmovdqu16(Xbyak::Zmm(14), cst_bits(c));
    amax_words_accumulate(z_acc, src, elements, dtype);
    const Xbyak::Ymm y_acc(acc.getIdx());
    const Xmm x_acc(acc.getIdx());
    vextracti64x4(Xbyak::Ymm(14), z_acc, 1);
    vpminuw(y_acc, y_acc, Xbyak::Ymm(14));
    vextracti128(Xmm(14), y_acc, 1);
    vpminuw(x_acc, x_acc, Xmm(14));
    vphminposuw(x_acc, x_acc);  // word 0 = min u
    vmovdqu16(Xbyak::Zmm(14), cst_bits(k));
    vpsubw(Xmm(14), Xmm(14), x_acc);  // word 0 = the amax bits
  }

  // The u lanes of amax_bits_words: acc = K, then the lane-wise minimum with every u of the
  // `elements` (a multiple of 32) 16-bit values at [src]; zmm14 must hold C. Uses vmm0..3.
  void amax_words_accumulate(const Xbyak::Zmm& acc, const Reg64& src, int64_t elements,
                             DType dtype) {
    const auto [c, k, sign] = amax_word_constants(dtype);
    const Xbyak::Zmm z_c(14);
    vmovdqu16(acc, cst_bits(k));
    for (int64_t first = 0; first < elements; first += kWordLanes) {
      const Xbyak::Zmm u(int((first / kWordLanes) % 4));
      vpaddw(u, z_c, ptr[src + int(first * 2)]);
      vpternlogd(u, u, cst_bits(sign), 0xAF);  // ~u | 0x8000
      vpminuw(acc, acc, u);
    }
  }

  // Emits body(i) for units i = 0 .. units-1 addressed from the current pointers: unrolled
  // when short, else a loop of kUnroll units that calls advance(kUnroll) after each step,
  // followed by the remaining units. reg_count_ is the loop counter.
  template <class Body, class Advance>
  void for_units(int64_t units, Body body, Advance advance) {
    if (units > kMaxUnrolled) {
      Label l_loop;
      mov(reg_count_, units / kUnroll);
      L(l_loop);
      for (int i = 0; i < kUnroll; ++i) body(int64_t(i));
      advance(kUnroll);
      dec(reg_count_);
      jnz(l_loop, T_NEAR);
      units %= kUnroll;
    }
    for (int64_t i = 0; i < units; ++i) body(i);
  }

  // The fp8 code format of a quantising kv mode (e4m3 unless e5m2).
  static DType fp8_format(ir::KvCacheDtype kv) {
    return kv == ir::KvCacheDtype::kFp8E5m2 ? DType::kFp8E5m2 : DType::kFp8E4m3;
  }

  // Writes `elements` input values of `dtype` at [src] into the cache at [dst]: a byte copy in
  // auto mode, else their fp8 codes (x / scale) in `format` (dst, src advanced). `recip` holds
  // scale_reciprocal(scale). Inside with_streaming_stores' streaming loop, a span whose dst is
  // 64-byte aligned at run time is written with streaming stores (the others as usual).
  void write_span(const Reg64& dst, const Reg64& src, int64_t elements, DType dtype, bool fp8,
                  DType format, const Xmm& scale, const Xmm& recip) {
    auto body = [&](bool streaming) {
      if (fp8) {
        quantise_span(dst, src, elements, dtype, format, scale, recip, streaming);
      } else {
        copy_span(dst, src, elements * int64_t(dtype_size(dtype)), reg_count_, streaming);
      }
    };
    const int64_t bytes = elements * (fp8 ? 1 : int64_t(dtype_size(dtype)));
    if (bytes < kStreamingMinSpan || (fp8 && !fast_quantise(dtype) && !ymm_quantise(dtype))) {
      body(false);
      return;
    }
    maybe_streaming(dst, body);
  }

  // ---- Transposed slabs: rows [dim][tokens] from token rows --------------------------------
  //
  // A slab that keeps a block's tokens as its fastest index (the legacy paged value layout
  // [D][BS], the CPU attention's K slab [D][bs]) is written from `tokens` token rows (a
  // multiple of 16, at most 128) by dword columns: per column (4 / c elements of every row),
  // one vpgatherdd per group g of 16 tokens (offsets column_index(g) = (16g + i)·stride), one
  // vpermw (c = 2) or vpermb (c = 1) into the column's 4 / c rows of those 16 tokens (16·c
  // bytes each; column_rows_permutation), stored at e·row_bytes + 16g·c. A column's stores
  // complete their rows' lines before the next column starts, so inside with_streaming_stores'
  // streaming loop they are streaming stores (the lines fill in the write-combining buffer);
  // with 16 tokens the column's rows are one 64-byte line and one store.
  static constexpr int kMaxColumnTokens = 128;  // eight offset vectors, zmm24..31
  static Xbyak::Zmm column_index(int g) { return Xbyak::Zmm(24 + g); }

  // Jumps to `l_not` unless the `count` int64 slots at `first` (a multiple of 8 of them) are
  // s, s + 1, .., s + count - 1 where s is the 64-bit register `s`: the whole-block writers'
  // test for a prefill's slot mapping. Uses vmm13, vmm14 (and k2 on AVX-512).
  void require_consecutive_slots(const Xbyak::RegExp& first, const Reg64& s, int64_t count,
                                 const Label& l_not) {
    using Xbyak::Zmm;
    if (!avx512()) {
      require_consecutive_slots_ymm(first, s, count, l_not);
      return;
    }
    vpbroadcastq(Zmm(13), s);
    for (int64_t i = 0; i < count; i += 8) {
      std::array<uint32_t, 16> iota{};
      for (int j = 0; j < 8; ++j) iota[size_t(2 * j)] = uint32_t(i + j);
      vpaddq(Zmm(14), Zmm(13), cst_table(iota));
      vpcmpeqq(k2, Zmm(14), ptr[first + int(8 * i)]);
      kortestb(k2, k2);
      jnc(l_not, T_NEAR);  // CF = 1: all eight equal
    }
  }

  // The vpermw (c = 2) or vpermb (c = 1) index table that turns a gathered column of 16
  // tokens' dwords (4 / c elements e of each) into 4 / c rows of the 16 tokens: output element
  // e·16 + t takes input element t·(4 / c) + e.
  static std::array<uint32_t, 16> column_rows_permutation(int c) {
    const int per_dword = 4 / c, width = 8 * c;  // elements per dword, bits per index
    std::array<uint32_t, 16> table{};
    for (int out = 0; out < 16 * per_dword; ++out) {
      const int e = out / 16, t = out % 16;
      table[size_t(out * width / 32)] |= uint32_t(t * per_dword + e) << (out * width % 32);
    }
    return table;
  }

  // column_index(g) for the groups of `tokens` rows `row_stride` bytes apart, or with
  // row_stride = 0 the run-time stride in the dword at `stride` (the caller has checked that
  // (tokens - 1)·stride fits 31 bits).
  void transposed_column_offsets(int tokens, int64_t row_stride, const Xbyak::Address& stride) {
    for (int g = tokens / 16 - 1; g >= 0; --g) {
      std::array<uint32_t, 16> rows{};
      for (int i = 0; i < 16; ++i) {
        rows[size_t(i)] = uint32_t((16 * g + i) * (row_stride > 0 ? row_stride : 1));
      }
      if (row_stride > 0) {
        vmovdqu32(column_index(g), cst_table(rows));
        continue;
      }
      if (g == tokens / 16 - 1) vpbroadcastd(column_index(0), stride);
      vpmulld(column_index(g), column_index(0), cst_table(rows));
    }
  }

  // The `columns` dword columns of the rows at [src] (advanced 4 bytes per column) to the slab
  // rows at [dst] (rows `tokens`·c bytes apart; advanced 4 / c rows per column), `c` bytes per
  // element, offsets from transposed_column_offsets. Uses `counter`, zmm0..2, zmm23, k2.
  void transposed_columns(const Reg64& dst, const Reg64& src, const Reg64& counter, int64_t columns,
                          int tokens, int c) {
    using Xbyak::Zmm;
    const int per_dword = 4 / c, piece = 16 * c;  // rows per column, bytes of 16 tokens
    const int64_t row_bytes = int64_t(tokens) * c;
    const Zmm perm(23), words(0), rows(1), part(2);
    if (per_dword > 1) vmovdqu32(perm, cst_table(column_rows_permutation(c)));
    Label l_column;
    mov(counter, columns);
    L(l_column);
    for (int g = 0; g < tokens / 16; ++g) {
      kxnorw(k2, k2, k2);
      vpgatherdd(words | k2, ptr[src + column_index(g)]);
      if (per_dword > 1) {
        if (c == 1) {
          vpermb(rows, perm, words);
        } else {
          vpermw(rows, perm, words);
        }
      }
      const Zmm column = per_dword > 1 ? rows : words;
      if (tokens == 16) {  // the column's rows are one line
        store_slab_piece(ptr[dst], column, 64);
        continue;
      }
      for (int e = 0; e < per_dword; ++e) {
        const Xbyak::Address at = ptr[dst + int(e * row_bytes + g * piece)];
        if (e == 0) {
          store_slab_piece(at, column, piece);
        } else if (c == 1) {
          vextracti32x4(Xbyak::Xmm(part.getIdx()), column, uint8_t(e));
          store_slab_piece(at, part, piece);
        } else {
          vextracti64x4(Xbyak::Ymm(part.getIdx()), column, 1);
          store_slab_piece(at, part, piece);
        }
      }
    }
    add(src, 4);
    add(dst, int(per_dword * row_bytes));
    dec(counter);
    jnz(l_column, T_NEAR);
  }

  // `v` (an xmm or ymm; EVEX-encoded from register 16 on) to `dst`: a streaming store when
  // `streaming`.
  void store_vex(const Xbyak::Address& dst, const Xmm& v, bool streaming) {
    if (streaming) {
      vmovntdq(dst, v);  // EVEX-encoded for registers 16..31
    } else if (v.getIdx() >= 16) {
      vmovdqu32(dst, v);
    } else {
      vmovdqu(dst, v);
    }
  }

  // transposed_lanes' vector registers in the cache writers: clear of vmm4..7 (their fp8
  // scales) and of 13..15 (the helpers').
  static constexpr std::array<int, 9> kLaneRegs{0, 1, 2, 3, 8, 9, 10, 11, 12};
  // The same on AVX-512 where vmm8..12 hold pinned constants (the bf16 table steps of the
  // legacy writer's fp8 stage): ymm16..24, EVEX-encoded.
  static constexpr std::array<int, 9> kHighLaneRegs{16, 17, 18, 19, 20, 21, 22, 23, 24};

  // The low `bytes` (16, 32 or 64) of `v` to `dst`, streaming in the streaming loop.
  void store_slab_piece(const Xbyak::Address& dst, const Xbyak::Zmm& v, int bytes) {
    const Xmm src = bytes == 64   ? Xmm(v)
                    : bytes == 32 ? Xmm(Xbyak::Ymm(v.getIdx()))
                                  : Xbyak::Xmm(v.getIdx());
    if (streaming_) {
      vmovntdq(dst, src);
    } else {
      vmovdqu32(dst, src);
    }
  }

  // ---- The same slabs without gathers: in-register transposes ----------------------------
  //
  // AVX2 has no 16-lane gather and no vpermw / vpermb, so transposed_lanes moves 16 tokens ×
  // 16 bytes at a time through registers instead (as do the AVX-512 levels where it beats the
  // gathers or vpermb is missing: the callers' choice). Eight ymm are loaded as
  //   v[k] = [ row of token r(k), 16 bytes | row of token r(k) + 8, 16 bytes ],
  // r(k) = bit-reversal of k's three bits (0, 4, 2, 6, 1, 5, 3, 7), and rounds of in-lane
  // interleaves pair v[j] with v[j + 4] into v'[2j] = vpunpckl(v[j], v[j + 4]) and
  // v'[2j + 1] = vpunpckh(..) (a perfect shuffle): with element widths c, 2c, 4c bytes for
  // c = 1, 2 and 4, 8 for c = 4. Each round doubles the run of tokens that sit together, and
  // the perfect shuffle bit-reverses the token order, which r(k) undoes. What the rounds leave
  // (checked element by element when this was written, and by the tests against ref):
  //   c = 2: v[e] = row e of the column's 8 elements, tokens 0..15 (32 bytes, in order);
  //   c = 1: v[e] = [row 2e, tokens 0..7 | row 2e + 1, 0..7 | row 2e, 8..15 | row 2e + 1,
  //          8..15] (8 bytes each): vpermq 0xD8 makes it rows 2e and 2e + 1 (16 bytes each);
  //   c = 4: v[e] = [row e, tokens 0..3 | row e, 8..11], v[e + 4] = [row e, 4..7 | row e,
  //          12..15] (e < 4): vperm2i128 0x20 / 0x31 make row e's 64 bytes.
  // 24 interleaves (+ 8 vpermq / vperm2i128 for c = 1 / 4) per 256 bytes of rows.

  // The rows of 16 tokens (a group) from token 16g's row, for transposed_lanes' loads.
  struct LaneRows {
    std::array<Reg64, 4> rows;  // tokens 16g + 0, 4, 8, 12 (rows[0] is the caller's)
    Reg64 stride, stride3;      // the rows' stride, and 3 · stride
  };

  // The `row_bytes` (a multiple of 16) bytes of the `tokens` (16 .. 128, a multiple of 16) rows
  // from `r.rows[0]` into the slab [row_bytes / c][tokens · c] at `dst`: the AVX2 form of
  // transposed_columns. `r.stride` holds the rows' stride; r.rows[0] ends `row_bytes` on, dst
  // at the slab's end; r.rows[1..3], r.stride3 and `end` are scratch. Streaming stores in the
  // streaming loop when tokens = 16 (each 16-byte column's slab rows are then whole lines;
  // with more tokens a line is written in tokens / 16 passes, so it stays cached). Uses
  // `vregs` (nine vector registers).
  void transposed_lanes(const Reg64& dst, const LaneRows& r, const Reg64& end, int64_t row_bytes,
                        int tokens, int c, const std::array<int, 9>& vregs) {
    using Xbyak::Ymm;
    const int64_t slab_row = int64_t(tokens) * c, column_rows = 16 / c;
    const int64_t slab_bytes = row_bytes / c * slab_row;
    const bool streaming = streaming_ && tokens == 16;
    const auto store = [&](const Xbyak::Address& at, const Xmm& v) { store_vex(at, v, streaming); };
    lea(r.stride3, ptr[r.stride + r.stride * 2]);
    for (int g = 0; g < tokens / 16; ++g) {
      if (g > 0) {  // the next 16 tokens' rows; dst at their pieces of the slab's rows
        sub(r.rows[0], int(row_bytes));
        lea(r.rows[0], ptr[r.rows[0] + r.stride * 8]);
        lea(r.rows[0], ptr[r.rows[0] + r.stride * 8]);
        sub(dst, int(slab_bytes - 16 * c));
      }
      for (int q = 1; q < 4; ++q) lea(r.rows[q], ptr[r.rows[q - 1] + r.stride * 4]);
      lea(end, ptr[r.rows[0] + int(row_bytes)]);
      Label l_column;
      L(l_column);
      // v[k] holds tokens r(k) and r(k) + 8; phys[k]: v[k]'s register, spare: the free one.
      std::array<int, 8> phys{};
      for (int k = 0; k < 8; ++k) {
        constexpr int kReversed[8] = {0, 4, 2, 6, 1, 5, 3, 7};
        const int t = kReversed[k];
        const auto row = [&](int token) {
          const Reg64& base = r.rows[size_t(token / 4)];
          switch (token % 4) {
            case 0: return ptr[base];
            case 1: return ptr[base + r.stride];
            case 2: return ptr[base + r.stride * 2];
            default: return ptr[base + r.stride3];
          }
        };
        phys[size_t(k)] = vregs[size_t(k)];
        const Ymm v(vregs[size_t(k)]);
        if (v.getIdx() >= 16) {  // EVEX forms (ymm16..31 have no VEX encoding)
          vmovdqu32(Xmm(v.getIdx()), row(t));
          vinserti32x4(v, v, row(t + 8), 1);
        } else {
          vmovdqu(Xmm(v.getIdx()), row(t));
          vinserti128(v, v, row(t + 8), 1);
        }
      }
      int spare = vregs[8];
      const std::vector<int> widths =
          c == 4 ? std::vector<int>{4, 8} : std::vector<int>{c, 2 * c, 4 * c};
      for (int width : widths) {
        std::array<int, 8> next{};
        for (int j = 0; j < 4; ++j) {
          const Ymm a(phys[size_t(j)]), b(phys[size_t(j + 4)]), lo(spare);
          switch (width) {
            case 1:
              vpunpcklbw(lo, a, b);
              vpunpckhbw(b, a, b);
              break;
            case 2:
              vpunpcklwd(lo, a, b);
              vpunpckhwd(b, a, b);
              break;
            case 4:
              vpunpckldq(lo, a, b);
              vpunpckhdq(b, a, b);
              break;
            default:
              vpunpcklqdq(lo, a, b);
              vpunpckhqdq(b, a, b);
              break;
          }
          next[size_t(2 * j)] = spare;
          next[size_t(2 * j + 1)] = b.getIdx();
          spare = a.getIdx();
        }
        phys = next;
      }
      const auto v = [&](int k) { return Ymm(phys[size_t(k)]); };
      if (c == 2) {
        for (int e = 0; e < 8; ++e) store(ptr[dst + int(e * slab_row)], v(e));
      } else if (c == 1) {
        for (int e = 0; e < 8; ++e) {
          vpermq(v(e), v(e), 0xD8);
          if (tokens == 16) {  // rows 2e and 2e + 1 are adjacent
            store(ptr[dst + int(2 * e * slab_row)], v(e));
          } else {
            store(ptr[dst + int(2 * e * slab_row)], Xmm(phys[size_t(e)]));
            if (phys[size_t(e)] >= 16) {
              vextracti32x4(ptr[dst + int((2 * e + 1) * slab_row)], v(e), 1);
            } else {
              vextracti128(ptr[dst + int((2 * e + 1) * slab_row)], v(e), 1);
            }
          }
        }
      } else {
        const Ymm first(spare);
        for (int e = 0; e < 4; ++e) {
          if (first.getIdx() >= 16) {  // vshufi64x2 picks the same 128-bit halves
            vshufi64x2(first, v(e), v(e + 4), 0x0);
            vshufi64x2(v(e + 4), v(e), v(e + 4), 0x3);
          } else {
            vperm2i128(first, v(e), v(e + 4), 0x20);
            vperm2i128(v(e + 4), v(e), v(e + 4), 0x31);
          }
          store(ptr[dst + int(e * slab_row)], first);
          store(ptr[dst + int(e * slab_row + 32)], v(e + 4));
        }
      }
      for (const Reg64& row : r.rows) add(row, 16);
      add(dst, int(column_rows * slab_row));
      cmp(r.rows[0], end);
      jb(l_column, T_NEAR);
    }
    if (tokens > 16) {  // back to token 0's row end and the slab's end
      mov(end, r.stride);
      imul(end, end, tokens - 16);
      sub(r.rows[0], end);
      sub(dst, int((tokens / 16 - 1) * 16 * c));
    }
  }

  // require_consecutive_slots' AVX2 form: four slots per compare. Uses ymm13, ymm14.
  void require_consecutive_slots_ymm(const Xbyak::RegExp& first, const Reg64& s, int64_t count,
                                     const Label& l_not) {
    using Xbyak::Ymm;
    vmovq(Xmm(13), s);
    vpbroadcastq(Ymm(13), Xmm(13));
    for (int64_t i = 0; i < count; i += 4) {
      std::array<uint32_t, 16> iota{};
      for (int j = 0; j < 4; ++j) iota[size_t(2 * j)] = uint32_t(i + j);
      vpaddq(Ymm(14), Ymm(13), cst_table(iota));
      vpcmpeqq(Ymm(14), Ymm(14), ptr[first + int(8 * i)]);
      vptest(Ymm(14), cst_bits(0xFFFFFFFF));
      jnc(l_not, T_NEAR);  // CF = 1: ~ymm14 & ones == 0, all four equal
    }
  }

  // dst = rsp + `offset` rounded up to a multiple of 64: a stack stage for which the kernel
  // reserved 63 bytes of slack (its rows then start on cache lines).
  void aligned_stack_address(const Reg64& dst, int offset) {
    lea(dst, ptr[rsp + offset + 63]);
    and_(dst, -64);
  }

  // Whether the code being emitted is with_streaming_stores' streaming loop.
  bool in_streaming_loop() const { return streaming_; }

  // Emits body(streaming): inside with_streaming_stores' streaming loop, body(true) when dst is
  // 64-byte aligned at run time and body(false) otherwise; elsewhere body(false).
  template <class Body>
  void maybe_streaming(const Reg64& dst, Body body) {
    if (!streaming_) {
      body(false);
      return;
    }
    Label l_plain, l_done;
    test(dst, 63);
    jnz(l_plain, T_NEAR);
    body(true);
    jmp(l_done, T_NEAR);
    L(l_plain);
    body(false);
    L(l_done);
  }

  // ---- Streaming stores ------------------------------------------------------------------
  //
  // An ordinary store to a line that is not in the caches first reads the line from memory
  // (read for ownership), so a large cache write moves 3 bytes per byte written where a copy
  // with streaming stores (what memcpy does at these sizes, and the copy ceiling of the
  // benches) moves 2: measured on this machine, 2 KiB rows to random slots of a 64 MB cache
  // run at 17-18 GB/s with vmovdqu64 and at 27 GB/s with vmovntdq. A small call (decode) keeps
  // the ordinary stores: its lines stay in the caches for the attention that reads them next.
  // Calls that write at least Generator::kStreamingBytes (per thread) take the streaming loop.
  // Spans shorter than a line gain nothing from streaming stores.
  static constexpr int64_t kStreamingMinSpan = 64;

  // Emits `loop()` (the kernel's row loop, which reads rdi/rsi/rdx) twice: a streaming version
  // (write_span streams 64-byte aligned spans; sfence at its end, since streaming stores are
  // weakly ordered and the caller may read the cache right after the call) taken when the
  // call's rows times `bytes_per_row` reach kStreamingBytes, and the ordinary version.
  // `min_bytes`: the threshold instead of kStreamingBytes (Generator::jump_if_below_streaming).
  template <class Loop>
  void with_streaming_stores(int64_t bytes_per_row, Loop loop,
                             int64_t min_bytes = kStreamingBytes) {
    Label l_plain, l_done;
    jump_if_below_streaming(bytes_per_row, l_plain, min_bytes);
    streaming_ = true;
    loop();
    sfence();
    jmp(l_done, T_NEAR);
    L(l_plain);
    streaming_ = false;
    loop();
    L(l_done);
  }

  // ---- x / scale without the division (bit-exact fp8 codes) ------------------------------
  //
  // vdivps bounds the fp8 writes (one division per vector, several times the cost of the
  // memory traffic). With r = RN(1/s) (correctly rounded), q' = RN(x·r) = (x/s)(1 + e),
  // |e| <= 2^-23 + 2^-48, so q' lies within 2.5 ulp of RN(x/s), the ref's quotient. The fp8
  // code of an fp32 value changes only where it crosses an fp8 rounding midpoint: in the fp8
  // normal range, a value whose 23 - M dropped mantissa bits equal exactly half. So wherever
  // q' is more than kNearUlps ulp from such a midpoint, q' and RN(x/s) get the same code (ties
  // included: a tie is a midpoint). The other lanes, and those the argument does not cover
  // (0 < |q'| < the fp8 min normal: the subnormal grid; NaN: x or r NaN), make the whole vector
  // take the division: a few lanes in 2^16 for real data.
  static constexpr uint32_t kNearUlps = 8;  // > 2.5 ulp, with room for binade crossings

  // The fp32 bits the window tests read: the mask of the mantissa bits an fp8 code drops, the
  // midpoint of those bits, and the fp8 min normal (load_scaled, quantise_ymm_unit).
  struct MidpointWindow {
    uint32_t low, half, min_normal;
  };
  static MidpointWindow midpoint_window(DType format) {
    const Fp8Layout f = fp8_layout(format);
    const int dropped = 23 - f.mantissa_bits;
    return {(1u << dropped) - 1, 1u << (dropped - 1), uint32_t(f.rebias + 1) << 23};
  }

  // r = RN(1 / s) for load_scaled (s: a broadcast scale; lane 0 is read); an infinite
  // reciprocal (s zero or denormal: x·r would be inf where x/s is finite) becomes NaN, so that
  // every product takes the division. One scalar division and a broadcast: a 512-bit vdivps
  // occupies port 0 for ~10 cycles, and the dynamic-scale writers divide once per group.
  void scale_reciprocal(const Xmm& r, const Xmm& s) {
    const Xbyak::Xmm r0(r.getIdx());
    scalar_reciprocal(r0, Xbyak::Xmm(s.getIdx()));
    vbroadcastss(r, r0);
  }

  // Lane 0 of scale_reciprocal: r0 = RN(1 / s0), or NaN where that is infinite (uses k2, or
  // xmm13 on AVX2).
  void scalar_reciprocal(const Xbyak::Xmm& r0, const Xbyak::Xmm& s0) {
    vmovups(r0, cst(1.0f));
    vdivss(r0, r0, s0);
    if (avx512()) {
      vfpclassss(k2, r0, kInfClass);
      vmovups(r0 | k2, cst_bits(kReciprocalMarker));
    } else {
      const Xbyak::Xmm t(13);
      vandps(t, r0, cst_bits(0x7FFFFFFF));
      vcmpps(t, t, cst_bits(0x7F800000), 0 /* equal */);
      vblendvps(r0, r0, cst_bits(kReciprocalMarker), t);
    }
  }

  // scalar_reciprocal in every lane of r (AVX-512): r = RN(1 / s), NaN where infinite (uses k2).
  void lane_reciprocals(const Xmm& r, const Xmm& s) {
    vmovups(r, cst(1.0f));
    vdivps(r, r, s);
    vfpclassps(k2, r, kInfClass);
    vmovups(r | k2, cst_bits(kReciprocalMarker));
  }

  static constexpr uint8_t kInfClass = 0x18;  // vfpclass: +inf | -inf
  // The NaN an infinite reciprocal becomes (the marker load_scaled's products reject).
  static constexpr uint32_t kReciprocalMarker = 0x7FC00000u;

  // x = x/s as fp32 for `count` values of `dtype` at `addr`, as the fp8 `format` encoder will
  // see it: x·r, or the division when a lane is near a rounding midpoint (see above). Uses
  // vmm13..15 (and k2, k3 on AVX-512).
  void load_scaled(const Xmm& x, DType dtype, const RegExp& addr, int count, const Xmm& scale,
                   const Xmm& recip, DType format) {
    const auto [low, half, min_normal] = midpoint_window(format);
    const uint32_t half_minus = half - kNearUlps;
    Label l_done;
    load_f32(x, dtype, addr, count);
    vmulps(x, x, recip);
    const Xmm a = vmm(13), d = vmm(14), t = vmm(15);
    uni_vpand(a, x, cst_bits(0x7FFFFFFF));
    uni_vpand(d, a, cst_bits(low));
    vpsubd(d, d, cst_bits(half_minus));  // near a midpoint: 0 <= d <= 2 kNearUlps (unsigned)
    vpsubd(a, a, cst_bits(1));           // a - 1: subnormal grid 0 .. min_normal - 2, NaN above
    if (avx512()) {
      constexpr uint8_t kLe = 2, kLt = 1, kGt = 6;  // vpcmpud predicates
      vpcmpud(k2, d, cst_bits(2 * kNearUlps), kLe);
      vpcmpud(k3, a, cst_bits(min_normal - 1), kLt);
      korw(k2, k2, k3);
      vpcmpud(k3, a, cst_bits(0x7F7FFFFF), kGt);
      korw(k2, k2, k3);
      kortestw(k2, k2);
    } else {
      // Unsigned a <= b as min(a, b) == a.
      vpminud(t, d, cst_bits(2 * kNearUlps));
      vpcmpeqd(d, t, d);
      vpminud(t, a, cst_bits(min_normal - 2));
      vpcmpeqd(t, t, a);
      vpor(d, d, t);
      vpcmpgtd(t, a, cst_bits(0x7F7FFFFF));  // a >= 0: the signed compare is unsigned here
      vpor(d, d, t);
      vptest(d, d);
    }
    jz(l_done, T_NEAR);
    load_f32(x, dtype, addr, count);
    vdivps(x, x, scale);
    L(l_done);
  }

  // ---- 256-bit quantiser: 32 values per step (AVX2, and AVX-512 without VBMI) ---------------
  //
  // AVX2 has no masks, no unsigned compares and no byte permutes, so the AVX-512 steps below do
  // not carry over; its per-vector path (load_scaled, fp8_encode, store_fp8) costs ~36 uops per
  // 8 codes (and the AVX-512 levels without VBMI, whose fast steps need vpermi2b, ran that path
  // on 16 lanes at about the same rate per value), and at a power-of-two scale (vLLM's default 1.0)
  // a bf16 value in 16 sits exactly on an fp8 midpoint, so load_scaled's window sends ~40% of its
  // vectors to vdivps through an unpredictable branch. These steps take 32 values (bf16 as even /
  // odd dword halves of two loads, no widening shuffles); the exact ones encode them with
  // fp8_encode_minmax, which has no select and is exact for every fp32 value, and four vectors of
  // codes become 32 bytes with 2-4 packs (bf16 / f16 with a power-of-two scale take the
  // 16-bit lanes of quantise_pow2_ymm_unit instead). Exact steps (x·r is the ref's quotient, see
  // exact_products_bound()) encode x·r as it is: no window, no branch. Window steps encode x·r by
  // the fast quantiser's integer rounding (ymm_window_encode), which also tests the window, and
  // redo a step that has a lane near a midpoint, or a nonzero lane outside the fp8 normal range, or
  // a NaN, on q = x/s (four vdivps, the ref's quotient itself). The steps use ymm0..3 and ymm13..15
  // at every level (VEX encodings; at AVX-512 a 256-bit op zeroes the upper halves of those
  // registers, which quantise_span clobbers anyway).
  static constexpr int kYmmUnit = 32;

  bool ymm_quantise(DType dtype) const {
    return !has_vbmi() && (dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32);
  }

  // In place: fp32 lanes (ymm) -> fp8 codes in the low byte of each dword, exactly fp8_encode's
  // (round to nearest even, subnormals, saturation, NaN), without its two blends (~17 uops
  // instead of ~20, all on the ALU ports). With a = |x|:
  //   n   = (a + lsb + 2^(s-1) - 1 - R·2^23) >> s   (arithmetic: negative below 2^(-R))
  //         clamped to max_code, plus (nan_code - max_code) where a > inf
  //   sub = min(bits(a + C) - bits(C), 2^M)          (the subnormal grid, C = 2^23 q)
  //   code = max(n, sub) | sign
  // For a >= the min normal 2^M q, n >= 2^M >= sub, so the normal rounding wins. Below it the
  // normal formula over-counts nothing: in the binade [2^(M-1) q, 2^M q) (fraction f) it gives
  // RNE(2^M f) <= RNE(2^(M-1) (1 + f)) = sub, and n < 0 in the binades under it, so the
  // subnormal rounding wins (zero included: sub = 0). Uses ymm13..15.
  void fp8_encode_minmax(const Xbyak::Ymm& x, DType format) {
    const Fp8Layout f = fp8_layout(format);
    const int m = f.mantissa_bits, s = 23 - m;
    const uint32_t max_code = f.max_code, nan_code = f.nan_code;
    const uint32_t bias_add = (1u << (s - 1)) - 1 - (uint32_t(f.rebias) << 23);  // mod 2^32
    const float magic = f.subnormal_magic;
    const Xbyak::Ymm a(13), n(14), t(15);
    uni_vpand(a, x, cst_bits(0x7FFFFFFF));
    vpsrld(n, a, s);
    uni_vpand(n, n, cst_bits(1));
    vpaddd(n, n, a);
    vpaddd(n, n, cst_bits(bias_add));
    vpsrad(n, n, s);
    vpminsd(n, n, cst_bits(max_code));
    vpcmpgtd(t, a, cst_bits(0x7F800000));  // NaN: all ones
    if (nan_code == max_code + 1) {
      vpsubd(n, n, t);
    } else {
      uni_vpand(t, t, cst_bits(nan_code - max_code));
      vpaddd(n, n, t);
    }
    vaddps(t, a, cst(magic));
    vpsubd(t, t, cst(magic));
    vpminsd(t, t, cst_bits(1u << m));
    vpmaxsd(n, n, t);
    vpsrld(x, x, 24);
    uni_vpand(x, x, cst_bits(0x80));
    uni_vpor(x, x, n);
  }

  // x[0..3] = the 32 values at [src + src_off] as fp32: bf16 as x0 / x2 the even values of
  // each 16, x1 / x3 the odd ones (their dword's top halves), else in order.
  void ymm_load(const Xbyak::Ymm (&x)[4], const Reg64& src, int src_off, DType dtype) {
    if (dtype == DType::kBF16) {
      for (int h = 0; h < 4; h += 2) {
        vmovdqu(x[h + 1], ptr[src + src_off + h * 16]);
        vpslld(x[h], x[h + 1], 16);
        vpand(x[h + 1], x[h + 1], cst_bits(0xFFFF0000));
      }
      return;
    }
    for (int h = 0; h < 4; ++h) {
      const Xbyak::Address at = ptr[src + src_off + h * 8 * int(dtype_size(dtype))];
      if (dtype == DType::kF16) {
        vcvtph2ps(x[h], at);
      } else {
        vmovups(x[h], at);
      }
    }
  }

  // The 32 codes of x[0..3] (ymm_load's order) as 32 ordered bytes at [dst + dst_off]. bf16:
  // odd codes shifted into byte 1 of the even ones' dwords (one word per pair), then the
  // words packed (vpackusdw interleaves the 128-bit lanes, vpermq puts them back); else dwords
  // to words to bytes, and vpermd undoes the two packs' lane interleave. Uses ymm13.
  void ymm_store_codes(const Xbyak::Ymm (&x)[4], const Reg64& dst, int dst_off, bool pairs,
                       bool streaming) {
    if (pairs) {
      for (int h = 0; h < 4; h += 2) {
        vpslld(x[h + 1], x[h + 1], 8);
        vpor(x[h], x[h], x[h + 1]);
      }
      vpackusdw(x[0], x[0], x[2]);
    } else {
      vpackusdw(x[0], x[0], x[1]);
      vpackusdw(x[2], x[2], x[3]);
      vpackuswb(x[0], x[0], x[2]);
    }
    store_lane_split_codes(x[0], dst, dst_off, /*quadwords=*/pairs, streaming);
  }

  // The 32 code bytes of `codes` to [dst + dst_off] once the 128-bit lane split of the packs
  // or shuffles that made them is undone: `quadwords`, lane 0 holds quadwords 0 and 2 of the
  // output (vpermq 0, 2, 1, 3), else dwords 0, 2, 4, 6 (vpermd 0, 4, 1, 5, 2, 6, 3, 7). Uses
  // ymm13.
  void store_lane_split_codes(const Xbyak::Ymm& codes, const Reg64& dst, int dst_off,
                              bool quadwords, bool streaming) {
    if (quadwords) {
      vpermq(codes, codes, 0xD8);
    } else {
      const Xbyak::Ymm index(13);
      vmovdqu(index, cst_table({0, 4, 1, 5, 2, 6, 3, 7, 0, 0, 0, 0, 0, 0, 0, 0}));
      vpermd(codes, index, codes);
    }
    if (streaming) {
      vmovntdq(ptr[dst + dst_off], codes);
    } else {
      vmovdqu(ptr[dst + dst_off], codes);
    }
  }

  // The window steps' encoder (AVX2): in place, the codes of the 32 quotients q = x·r of
  // x[0..3] in byte 3 of each dword, and ymm15 = the rejected lanes (all ones), whose step
  // must be redone on the ref's quotient. It is fast_encode's window rounding (see
  // quantise_fast_unit) with AVX2's signed compares, ~16 uops per 8 codes against the ~26 of
  // a window test plus fp8_encode_minmax:
  //   t = 2a + add + 2^31   (mod 2^32, 2a = q + q: the integer add drops the sign; t's signed
  //                          order is u = t - 2^31's unsigned one)
  //   rejected: u >= limit (zero, fp8 subnormal, saturation, inf, NaN), or a's dropped bits
  //             within [half - W, half + W) (then u's low S + 1 bits are below 4W:
  //             (u & near) == 0)
  //   code = ((t << (24 - S - 1)) + 2^M·2^24) | sign   (accepted: u < limit < 2^(31 - 24 + S
  //                          + 1), so the shift clears bit 31 and bits 24..30 hold code - 2^M)
  // A zero lane would be rejected (2a = 0: u = add, far out of range), and zeros are most of
  // some inputs (a ReLU's output). So t = Z0 (the zero lanes' t) becomes ACC = 2^31 + 4W + 1,
  // accepted (u = 4W + 1: in range, not near) and odd where every other lane's t is even (add
  // is even), and a lane whose t is ACC gets the code 0 | sign. Checked for every fp32 value
  // and both formats: an accepted lane's code is the ref's, and the ref's for every value
  // within 3 ulp of it. Uses ymm13..15.
  void ymm_window_encode(const Xbyak::Ymm (&x)[4], DType format) {
    using Xbyak::Ymm;
    const WindowStepConstants w = window_step_constants(format);
    const Fp8Layout f = fp8_layout(format);
    const int s = 23 - f.mantissa_bits;
    const uint32_t add = w.add + 0x80000000u, zero_t = add;
    const uint32_t accepted_odd = 0x80000000u + 4 * kNearUlps + 1;
    const Ymm t(13), tmp(14), reject(15);
    for (int v = 0; v < 4; ++v) {
      vpaddd(t, x[v], x[v]);
      vpaddd(t, t, cst_bits(add));
      vpcmpeqd(tmp, t, cst_bits(zero_t));
      vpand(tmp, tmp, cst_bits(zero_t ^ accepted_odd));
      vpxor(t, t, tmp);
      // Rejected: t > limit - 2^31 - 1 (signed), or (t & near) == 0.
      const Ymm out_of_range = v == 0 ? reject : tmp;
      vpcmpgtd(out_of_range, t, cst_bits(w.limit + 0x7FFFFFFFu));
      if (v > 0) vpor(reject, reject, tmp);
      vpand(tmp, t, cst_bits(w.near));
      vpcmpeqd(tmp, tmp, cst_bits(0));
      vpor(reject, reject, tmp);
      vpand(tmp, x[v], cst_bits(w.sign));
      vpslld(x[v], t, 24 - (s + 1));
      vpaddd(x[v], x[v], cst_bits((1u << f.mantissa_bits) << 24));  // + 2^M in byte 3
      vpcmpeqd(t, t, cst_bits(accepted_odd));                       // the zero lanes
      vpandn(x[v], t, x[v]);
      vpor(x[v], x[v], tmp);
    }
  }

  // The 32 codes in byte 3 of x[0..3]'s dwords (ymm_load's order) as 32 ordered bytes at
  // [dst + dst_off]: one vpshufb per vector puts its codes at their places in each 128-bit
  // lane (bf16: the even values' at even bytes, the odd values' at odd ones; else 4 in a row),
  // three vpor join them, and a vpermq (bf16) or vpermd undoes the lane split. Uses ymm13.
  void ymm_store_top_bytes(const Xbyak::Ymm (&x)[4], const Reg64& dst, int dst_off, bool pairs,
                           bool streaming) {
    for (int v = 0; v < 4; ++v) {
      // Byte 3 of dword j (of each 128-bit lane) to byte `first + stride·j`; the rest zero.
      const int first = pairs ? (v / 2) * 8 + v % 2 : 4 * v, stride = pairs ? 2 : 1;
      std::array<uint8_t, 16> lane{};
      lane.fill(0x80);
      for (int j = 0; j < 4; ++j) lane[size_t(first + stride * j)] = uint8_t(4 * j + 3);
      std::array<uint32_t, 16> table{};
      for (int i = 0; i < 32; ++i)
        table[size_t(i / 4)] |= uint32_t(lane[size_t(i % 16)]) << (8 * (i % 4));
      vpshufb(x[v], x[v], cst_table(table));
    }
    vpor(x[0], x[0], x[1]);
    vpor(x[2], x[2], x[3]);
    vpor(x[0], x[0], x[2]);
    // bf16: quadwords of values 0-7, 16-23 | 8-15, 24-31
    store_lane_split_codes(x[0], dst, dst_off, /*quadwords=*/pairs, streaming);
  }

  // 32 codes of the values at [src + src_off] to [dst + dst_off] (see above); `exact`: x·r is
  // the ref's quotient for every x of `dtype` (the exact or exact-products steps), encoded as
  // it is by fp8_encode_minmax: no test, no branch. Window steps encode x·r by
  // ymm_window_encode, and a step with a rejected lane is redone on q = x/s (four vdivps, the
  // ref's quotient itself) by fp8_encode_minmax. Uses ymm0..3 and ymm13..15.
  void quantise_ymm_unit(const Reg64& dst, const Reg64& src, int dst_off, int src_off, DType dtype,
                         DType format, const Xmm& scale, const Xmm& recip, bool streaming,
                         bool exact) {
    using Xbyak::Ymm;
    if (avx512() && constants_pinned()) {
      // A pinned constant is a zmm register there, which 256-bit operations cannot take.
      throw std::logic_error("quantise_ymm_unit: constants pinned at a 512-bit level");
    }
    const Ymm x[4] = {Ymm(0), Ymm(1), Ymm(2), Ymm(3)};
    const bool pairs = dtype == DType::kBF16;
    ymm_load(x, src, src_off, dtype);
    for (const Ymm& v : x) vmulps(v, v, Ymm(recip.getIdx()));
    if (exact) {
      for (const Ymm& v : x) fp8_encode_minmax(v, format);
      ymm_store_codes(x, dst, dst_off, pairs, streaming);
      return;
    }
    Label l_divide, l_done;
    ymm_window_encode(x, format);
    vptest(Ymm(15), Ymm(15));
    jnz(l_divide, T_NEAR);
    ymm_store_top_bytes(x, dst, dst_off, pairs, streaming);
    jmp(l_done, T_NEAR);
    L(l_divide);
    ymm_load(x, src, src_off, dtype);
    for (const Ymm& v : x) vdivps(v, v, Ymm(scale.getIdx()));
    for (const Ymm& v : x) fp8_encode_minmax(v, format);
    ymm_store_codes(x, dst, dst_off, pairs, streaming);
    L(l_done);
  }

  // ---- Power-of-two scales without AVX512-FP16: bf16 / f16 -> fp8 on 16-bit lanes ----------
  //
  // A scale s = 2^k (vLLM's default 1.0) makes the ref's quotient q = x·2^-k exact, so the
  // exact steps' fp32 lanes are not needed for the normal range: with a = bits(|x|) as a
  // 16-bit integer (bits(|q|) = a - 128k as a bf16), D = 7 - M dropped bits and R = 127 - the
  // fp8 bias, the normal-range code is fp8_encode_minmax's formula on bf16 bits,
  //   n = (a + round + lsb) >> D   (arithmetic: negative below the fp8 normal range),
  //   round = 2^(D-1) - 1 - 128·(k + R),  lsb = bit D of a (128·(k + R) leaves it alone),
  // clamped to the largest code, plus (nan_code - max_code) where a > 0x7F80 (NaN). The fp8
  // subnormal grid (quantum Q) comes from the values as fp32 halves of their dwords (exact:
  // a bf16 is a truncated fp32) by the magic add with C' = 2^23·Q·2^k (so RNE(|x| / (Q·2^k)) =
  // RNE(|q| / Q)): sub = min(bits(|x| + C') - bits(C'), 2^M), and code = max(n, sub) | sign as
  // in fp8_encode_minmax (the normal formula never exceeds sub below the min normal, and sub
  // never exceeds it above). ~24 uops per 16 values against ~37 per 16 on the exact fp32 steps
  // (two dword halves, two products, two fp8_encode_minmax). Every intermediate stays inside
  // signed 16 bits for k + R in [1, 256], and C' is a normal fp32 for k <= 113 (e4m3, 2^(14+k))
  // / 120 (e5m2, 2^(7+k)): the steps take pow2_format's range of k for bf16, [-100, 100].
  // bf16 denormals, infinities (saturated), NaN and quotients that overflow or underflow fp32
  // need no other path.
  // f16 -> e4m3 (x86-111) is the same on f16 bits: bits(|q|) = a - 1024k, D = 10 - M, R
  // relative to f16's bias (R - 112), so round = 2^(D-1) - 1 - 1024·(k + R - 112); the
  // subnormal grid from the values converted by vcvtph2ps (exact, in order, repacked to words
  // by vpackusdw + vpermq); k in pow2_format's [0, 15] (an f16 denormal x reads as a normal
  // number under the formula only for k < 0, and it is below the fp8 range for k >= 0, where
  // max(n, sub) takes sub). f16's infinity would read as 2^(16 - k), inside e4m3's range for
  // k > 7, so lanes with a >= 0x7C00 are raised to the largest code before the clamp. ~28 uops
  // per 16 values against ~42 on the fp32 steps.
  // AVX-512 without AVX512-FP16 (x86-128) runs these steps too: 256-bit ones two per 64 values,
  // and at VBMI the same steps on 512-bit vectors (quantise_pow2_zmm_unit: bf16 x86-130, f16
  // x86-139). The exact fp32 steps there (quantise_fast_unit with its subnormal fix-up) cost ~70
  // vector uops per 64 values, and Zen 4 issues a 512-bit uop as two 256-bit halves. Zen 4, bf16 at
  // scale 1.0, x86-127 -> x86-130 (two alternated rounds, 1 thread): convert_fp8 13.2-13.3 ->
  // 20.8-21.6 GB/s at 64 MB, 3.3 -> 1.8 us at 16 K values; the flash fp8 write 9.5-11.0 ->
  // 20.5-21.7 GB/s (random slots) and 11.3-12.1 -> 22.7-23.7 (a prefill's);
  // indexer_k_quant_and_cache (ue8m0) 5.4-5.5 -> 7.7-7.8 GB/s, 16 rows 0.51 -> 0.35 us.

  bool pow2_ymm_quantise(DType dtype, DType format) const {
    return !pow2_quantise(dtype, format) && pow2_format(dtype, format).has_value();
  }

  // The two constants of the power-of-two ymm / zmm steps at the scale 2^k (k in
  // pow2_format's range), as load_pow2_ymm_constants computes them at run time: C' =
  // 2^(23 + log2 Q + k) (fp32 bits) and round (a word) = 2^(D-1) - 1 - 2^L·(R - 127) -
  // (127 + k)·2^L, L the input's exponent lsb, R relative to the input's bias.
  struct Pow2StepScale {
    uint16_t round;
    uint32_t magic;
  };
  static Pow2StepScale pow2_step_scale(int k, DType dtype, DType format) {
    const Pow2Format range = pow2_format(dtype, format).value();
    const Fp8Layout f = fp8_layout(format);
    const int lsb = range.exponent_lsb, d = lsb - f.mantissa_bits;
    const int rebias = f.rebias - (dtype == DType::kF16 ? 112 : 0);
    const int log2_quantum = std::ilogb(f.quantum);
    const int round = (1 << (d - 1)) - 1 - (1 << lsb) * (rebias - 127) - (127 + k) * (1 << lsb);
    return {uint16_t(round & 0xFFFF), uint32_t(127 + k + 23 + log2_quantum) << 23};
  }

  // Jumps to `l_other` unless lane 0 of `scale` is 2^k with k in pow2_format's range; else
  // ymm14 = round (words) and ymm15 = C' (dwords) for quantise_pow2_ymm_unit, or zmm14 / zmm15
  // for quantise_pow2_zmm_unit (`zmm`) (uses eax; pow2_step_scale gives the same values).
  void load_pow2_ymm_constants(const Xmm& scale, DType dtype, DType format, const Label& l_other,
                               bool zmm = false) {
    const auto wide = [&](int idx) -> Xmm { return zmm ? Xmm(Xbyak::Zmm(idx)) : Xbyak::Ymm(idx); };
    const Pow2Format range = pow2_format(dtype, format).value();
    const Fp8Layout f = fp8_layout(format);
    const int lsb = range.exponent_lsb, d = lsb - f.mantissa_bits;
    // R relative to the input's bias (f16's is 127 - 112)
    const int rebias = f.rebias - (dtype == DType::kF16 ? 112 : 0);
    const int log2_quantum = std::ilogb(f.quantum);
    vmovd(eax, Xbyak::Xmm(scale.getIdx()));
    test(eax, 0x807FFFFF);  // sign and mantissa clear
    jnz(l_other, T_NEAR);
    sub(eax, uint32_t(127 + range.min_k) << 23);
    cmp(eax, uint32_t(range.max_k - range.min_k) << 23);
    ja(l_other, T_NEAR);  // unsigned: also a zero scale (exponent 0 wraps)
    add(eax, uint32_t(127 + range.min_k) << 23);
    // C' = 2^(23 + log2 Q + k): the scale's bits with 23 + log2 Q added to the exponent.
    add(eax, (23 + log2_quantum) << 23);
    vmovd(Xbyak::Xmm(15), eax);
    vpbroadcastd(wide(15), Xbyak::Xmm(15));
    // round = 2^(D-1) - 1 - 2^L·(k + R) = 2^(D-1) - 1 - 2^L·(R - 127) - (127 + k)·2^L, with L
    // the input's exponent lsb (bf16 7, f16 10).
    shr(eax, 23);
    sub(eax, 23 + log2_quantum);  // 127 + k
    shl(eax, lsb);
    neg(eax);
    add(eax, (1 << (d - 1)) - 1 - (1 << lsb) * (rebias - 127));
    vmovd(Xbyak::Xmm(14), eax);
    vpbroadcastw(wide(14), Xbyak::Xmm(14));
  }

  // 32 codes of the bf16 / f16 values at [src + src_off] to [dst + dst_off] (see above; ymm14
  // and ymm15 from load_pow2_ymm_constants). Uses ymm0..3 and ymm13.
  void quantise_pow2_ymm_unit(const Reg64& dst, const Reg64& src, int dst_off, int src_off,
                              DType dtype, DType format, bool streaming) {
    using Xbyak::Ymm;
    const Fp8Layout f = fp8_layout(format);
    const bool f16 = dtype == DType::kF16;
    const int m = f.mantissa_bits, d = pow2_format(dtype, format)->exponent_lsb - m;
    const uint32_t inf_bits = f16 ? 0x7C00 : 0x7F80;
    const Ymm round(14), magic(15), w(2), a(3), t(13);
    // Constants from the pool at AVX-512: a pinned one is a zmm register there (zmm8..12 or
    // zmm16+), which these VEX instructions cannot take.
    const auto pool_or_cst = [&](uint32_t bits) -> const Xbyak::Operand& {
      return avx512() ? pool_bits(bits) : cst_bits(bits);
    };
    for (int h = 0; h < 2; ++h) {
      const Ymm code(h);
      vmovdqu(w, ptr[src + src_off + 32 * h]);
      vpand(a, w, pool_or_cst(words(0x7FFF)));
      // the normal range: n = (a + round + lsb) >> D, clamped, NaN moved to its code
      vpsrlw(t, a, d);
      vpand(t, t, pool_or_cst(words(1)));
      vpaddw(code, a, round);
      vpaddw(code, code, t);
      vpsraw(code, code, d);
      if (f16) {
        // f16's inf would read as 2^(16 - k), inside e4m3's range for k > 7: saturate it (and
        // NaN, moved on below) first. bf16's reads as 2^(128 - k), which the clamp saturates.
        vpcmpgtw(t, a, pool_or_cst(words(inf_bits - 1)));
        vpand(t, t, pool_or_cst(words(f.max_code)));
        vpmaxsw(code, code, t);
      }
      vpminsw(code, code, pool_or_cst(words(f.max_code)));
      vpcmpgtw(t, a, pool_or_cst(words(inf_bits)));
      if (f.nan_code == f.max_code + 1) {
        vpsubw(code, code, t);
      } else {
        vpand(t, t, pool_or_cst(words(f.nan_code - f.max_code)));
        vpaddw(code, code, t);
      }
      // the subnormal grid on the values as fp32: bf16's even (low word) and odd (high word)
      // values as dword halves, f16's converted in order
      if (f16) {
        vcvtph2ps(t, Xbyak::Xmm(a.getIdx()));
        vextracti128(Xbyak::Xmm(a.getIdx()), a, 1);
        vcvtph2ps(a, Xbyak::Xmm(a.getIdx()));
      } else {
        vpslld(t, a, 16);
        vpand(a, a, pool_or_cst(0xFFFF0000u));
      }
      for (const Ymm& v : {t, a}) subnormal_code(v, magic, pool_or_cst(1u << m));
      if (f16) {
        vpackusdw(t, t, a);  // values 0-3, 8-11 | 4-7, 12-15
        vpermq(t, t, 0xD8);
      } else {
        vpslld(a, a, 16);
        vpblendw(t, t, a, 0xAA);
      }
      vpmaxsw(code, code, t);
      vpsrlw(t, w, 8);
      vpand(t, t, pool_or_cst(words(0x80)));
      vpor(code, code, t);
    }
    // Words to bytes: vpackuswb interleaves the 128-bit lanes (0-7, 16-23 | 8-15, 24-31).
    vpackuswb(Ymm(0), Ymm(0), Ymm(1));
    store_lane_split_codes(Ymm(0), dst, dst_off, /*quadwords=*/true, streaming);
  }

  // The power-of-two steps' subnormal grid on fp32 lanes v >= 0: v = min(bits(v + C') -
  // bits(C'), 2^M) (the magic add rounds v to the grid; C' = `magic`, `max_sub` = 2^M).
  void subnormal_code(const Xmm& v, const Xmm& magic, const Xbyak::Operand& max_sub) {
    vaddps(v, v, magic);
    vpsubd(v, v, magic);
    vpminsd(v, v, max_sub);
  }

  // quantise_pow2_ymm_unit's steps for bf16 and f16 on 512-bit vectors (VBMI, without
  // AVX512-FP16): 64 values, one zmm of 32 words at a time, with masks for the lsb's increment,
  // f16's saturated infinities and the NaN code (vptestmw, vpcmpuw), a bit-select for the sign
  // and one vpermi2b packing the 64 codes' low bytes. The subnormal grid takes the values as
  // fp32: bf16's even (low word) and odd (high word) values in place, f16's 32 values by two
  // vcvtph2ps (exact) whose dwords' low words one vpermi2w puts back in order. ~22 vector uops
  // per 32 bf16 values and ~27 per 32 f16 values, against ~50 and ~56 on 256-bit vectors.
  // zmm14 and zmm15 hold round and C' (load_pow2_ymm_constants with `zmm`); its other
  // constants (pow2_zmm_constants) come from cst_bits, so a writer may pin them. Uses zmm0,
  // zmm1, zmm16..20, k2, k3.
  struct Pow2ZmmConstants {
    uint32_t magnitude, lsb, one, max_code, below_inf, inf, nan_code, max_sub, sign, high_words;
    bool f16;
    // In a list, for pin_constants (below_inf for f16 only, high_words for bf16 only).
    std::vector<uint32_t> list() const {
      std::vector<uint32_t> all{magnitude, lsb, one, max_code, inf, nan_code, max_sub, sign};
      all.push_back(f16 ? below_inf : high_words);
      return all;
    }
  };
  static Pow2ZmmConstants pow2_zmm_constants(DType dtype, DType format) {
    const Fp8Layout f = fp8_layout(format);
    const bool f16 = dtype == DType::kF16;
    const int d = pow2_format(dtype, format)->exponent_lsb - f.mantissa_bits;
    const uint32_t inf_bits = f16 ? 0x7C00 : 0x7F80;
    return {words(0x7FFF),
            words(1u << d),
            words(1),
            words(f.max_code),
            words(inf_bits - 1),
            words(inf_bits),
            words(f.nan_code),
            1u << f.mantissa_bits,
            words(0x80),
            0xFFFF0000u,
            f16};
  }
  void quantise_pow2_zmm_unit(const Reg64& dst, const Reg64& src, int dst_off, int src_off,
                              DType dtype, DType format, bool streaming) {
    using Xbyak::Zmm;
    const Pow2ZmmConstants c = pow2_zmm_constants(dtype, format);
    const bool f16 = c.f16;
    const int d = pow2_format(dtype, format)->exponent_lsb - fp8_layout(format).mantissa_bits;
    constexpr uint8_t kGt = 6, kOrAnd = 0xF8;  // vpcmpuw predicate; vpternlogd: A | (B & C)
    const Zmm round(14), magic(15), w(16), a(17), t(18), u(19), sub(f16 ? 20 : 18);
    for (int h = 0; h < 2; ++h) {
      const Zmm code(h);
      vmovdqu16(w, ptr[src + src_off + 64 * h]);
      vpandd(a, w, cst_bits(c.magnitude));
      // the normal range: n = (a + round + lsb) >> D, clamped, NaN moved to its code
      vptestmw(k2, a, cst_bits(c.lsb));
      vpaddw(code, a, round);
      vpaddw(code | k2, code, cst_bits(c.one));
      vpsraw(code, code, d);
      vpminsw(code, code, cst_bits(c.max_code));
      if (f16) {
        // f16's inf reads as 2^(16 - k), inside e4m3's range for k > 7: saturate it (and NaN,
        // moved on below). bf16's reads as 2^(128 - k), which the clamp saturates.
        vpcmpuw(k3, a, cst_bits(c.below_inf), kGt);
        vmovdqu16(code | k3, cst_bits(c.max_code));
      }
      vpcmpuw(k3, a, cst_bits(c.inf), kGt);
      vmovdqu16(code | k3, cst_bits(c.nan_code));
      if (f16) {
        // the subnormal grid on values 0-15 and 16-31 as fp32, their dwords' low words in order
        vextracti32x8(Xbyak::Ymm(u.getIdx()), a, 1);
        vcvtph2ps(t, Xbyak::Ymm(a.getIdx()));
        vcvtph2ps(u, Xbyak::Ymm(u.getIdx()));
        for (const Zmm& v : {t, u}) subnormal_code(v, magic, cst_bits(c.max_sub));
        std::array<uint32_t, 16> low_words{};
        for (uint32_t i = 0; i < 32; ++i) {
          const uint32_t index = i < 16 ? 2 * i : 32 + 2 * (i - 16);
          low_words[i / 2] |= index << (16 * (i % 2));
        }
        vmovdqu32(sub, cst_table(low_words));
        vpermi2w(sub, t, u);
      } else {
        // the subnormal grid on the even (low word) and odd (high word) values as fp32
        vpslld(t, a, 16);
        vpandd(u, a, cst_bits(c.high_words));
        for (const Zmm& v : {t, u}) subnormal_code(v, magic, cst_bits(c.max_sub));
        vpslld(u, u, 16);
        vpord(sub, t, u);  // sub is t
      }
      vpmaxsw(code, code, sub);
      vpsrlw(t, w, 8);
      vpternlogd(code, t, cst_bits(c.sign), kOrAnd);
    }
    // bytes 0, 2, .. 126 of (zmm0, zmm1): the codes in order
    std::array<uint32_t, 16> low_bytes{};
    for (uint32_t i = 0; i < 64; ++i) low_bytes[i / 4] |= (2 * i) << (8 * (i % 4));
    vmovdqu32(t, cst_table(low_bytes));
    vpermi2b(t, Zmm(0), Zmm(1));
    if (streaming) {
      vmovntdq(ptr[dst + dst_off], t);
    } else {
      vmovdqu8(ptr[dst + dst_off], t);
    }
  }

  // ---- Fast quantiser (AVX-512 with VBMI) -------------------------------------------------
  //
  // 64 values per step, about 9 vector uops per 16 codes instead of the ~31 of load_scaled +
  // fp8_encode + store_fp8, exact for every lane it accepts and falling back to that path for
  // the whole step otherwise. With q = RN(x·r) (r = RN(1/s)) and a = |q| as an integer, the
  // generic encoder's normal-range rounding is code = (a + 2^(S-1) - 1 + lsb - R·2^23) >> S
  // (S = 23 - M dropped bits, R = 127 - B). The fast step instead works on 2a = q + q (the
  // integer add drops the sign) and adds one constant:
  //   u = 2a + 2^S + 2W - (R + 1)·2^24   (mod 2^32),  W = kNearUlps = 8
  //   (code - 2^M) = u >> (S + 1)        (2^M: the smallest normal code, 8 or 4)
  // It accepts a lane when both hold:
  //  * u < (max_code - 2^M + 1)·2^(S+1), unsigned. The add is a bijection of [0, 2^32), so
  //    this selects exactly the a whose unwrapped code lies in [2^M, max_code]: no zero, no fp8
  //    subnormal below the top sliver, no saturation, no inf or NaN (those wrap or exceed). In
  //    that sliver (a just below the min normal, rounding up to it) the subnormal grid's RNE
  //    also gives 2^M: a/q_sub >= 2^M - 1/4 there.
  //  * the dropped bits of a are not within [half - W, half + W) (u's low S + 1 bits, offset by
  //    2W, are not below 4W: one vptestmd with the mask ~(4W - 1) of those bits). Then a + half
  //    + W carries exactly when a rounds up (no tie can occur), and, as in load_scaled, q and
  //    the ref's RN(x/s) (within 2.5 ulp of each other) fall in the same fp8 rounding cell.
  // The code then sits at bits S+1 .. S+7 of u: shifted to bits 24..30, the sign of q put in
  // bit 31 (vpternlogd bit-select), the fourth byte of each lane gathered into 64 ordered bytes
  // by vpermi2b (which also undoes the even/odd split of the bf16 loads), plus 2^M per byte
  // (the code stays below 128: no carry into the sign). Any lane not accepted sends the
  // whole step to load_scaled + fp8_encode (a few steps in 10^4 for real data).
  static constexpr int kFastUnit = 64;

  // When x·r is exactly the ref's quotient for every x of `dtype` (the fast quantiser's exact
  // steps then apply, ties included): with mu = r·s - 1 and eta = 1/(r s) - 1, the real
  // quotient is x/s = x·r·(1 + eta). If x·r is exact (significand bits of x plus those of r
  // at most 24: bf16 8, f16 11) and |eta| < 2^-25, then |x/s - x·r| < |x·r|·2^-25 < ulp(x·r)/2
  // for every normal x·r, so RN(x/s) = x·r. |mu| <= 2^-25 (1 - 2^-20) (tested on the fused,
  // once-rounded mu) gives |eta| <= |mu| / (1 - |mu|) < 2^-25. Decimal scales hit this:
  // s = 0.1, 0.05, 0.02 give r = 10, 20, 50 and |mu| ~ 1.5e-8 / 1.5e-8 / 2.2e-8, so their
  // midpoint lanes (frequent: exact products put q on an fp8 midpoint for ~1 lane in 2^9) no
  // longer send the whole step to the division. Lanes that underflow, saturate or are not
  // finite are still rejected by the range test.
  static constexpr float exact_products_bound() { return 0x1p-25f * (1.0f - 0x1p-20f); }
  static int significand_bits(DType dtype) {
    return dtype == DType::kBF16 ? 8 : dtype == DType::kF16 ? 11 : 24;
  }

  bool fast_quantise(DType dtype) const {
    return has_vbmi() && (dtype == DType::kBF16 || dtype == DType::kF32 || dtype == DType::kF16);
  }

  // The 64-byte vpermi2b table: byte i = the fourth byte of the lane holding value i, from
  // tables t0 (indices 0..63) and t1 (64..127). `pairs`: t0 holds the even values, t1 the odd
  // ones (bf16 split); else t0 values 0..15, t1 16..31. Bytes 32..63 repeat 0..31.
  std::array<uint32_t, 16> fast_pack_table(bool pairs) const {
    std::array<uint32_t, 16> words{};
    for (int i = 0; i < 64; ++i) {
      const int v = i % 32;
      const int index = pairs ? (v % 2) * 64 + (v / 2) * 4 + 3 : (v / 16) * 64 + (v % 16) * 4 + 3;
      words[size_t(i / 4)] |= uint32_t(index) << (8 * (i % 4));
    }
    return words;
  }

  // 64 codes of the values at [src + src_off] to [dst + dst_off] (see above). Uses zmm0..3,
  // zmm16..21, k2..k7 and the generic path's registers. `exact`: the caller has checked that
  // r = 1/s exactly (s a power of two), so q = x/s exactly for every accepted lane (no
  // underflow: those lanes are not accepted), or that x·r = RN(x/s) for every x of the type
  // (exact_products_bound()); either way q is the ref's quotient itself: no window is
  // needed, but exact ties occur (scale 1.0, the common default, makes every bf16 value with
  // the dropped bits 1000b one), so the rounding is the generic encoder's exact RNE:
  //   u = 2a + 2^S - 2 + 2·lsb - (R + 1)·2^24,  2·lsb = (2a >> S) & 2,
  // with the same range test (adding 0 or 2 cannot move a rejected lane into the accepted
  // range except at its lower end, where the formula's code is the min normal, which is also
  // the ref's: the sliver argument above).
  // A window step rejected only for lanes whose quotient is tiny (|q'| < 2^-11 for e4m3, zero
  // included, whose code is the signed zero: repair_tiny_lanes) keeps its products; any other
  // rejected step is redone on q = RN(x/s) (four vdivps: the ref's quotient itself) with the
  // exact rounding; only a step rejected again (zero, fp8 subnormal, saturation, NaN, or a
  // zero/denormal scale) takes load_scaled + fp8_encode. Exact products
  // (8-bit bf16 significands times a reciprocal with few significant bits, e.g. 1/0.02 = 50)
  // put many q exactly on a midpoint, which the window rejects: the division keeps those
  // steps at a few dozen cycles instead of the generic path's ~200.
  void quantise_fast_unit(const Reg64& dst, const Reg64& src, int dst_off, int src_off, DType dtype,
                          DType format, const Xmm& scale, const Xmm& recip, bool streaming,
                          bool exact, bool skip_absent_subnormals = false) {
    using Xbyak::Zmm;
    const Zmm x[4] = {Zmm(0), Zmm(1), Zmm(2), Zmm(3)};
    Label l_divide, l_generic, l_store, l_done;
    fast_load(x, src, src_off, dtype);
    for (int v = 0; v < 4; ++v) vmulps(x[v], x[v], Zmm(recip.getIdx()));
    fast_encode(x, format, dtype == DType::kBF16, exact, skip_absent_subnormals);
    kortestw(k3, k3);
    jc(l_store, T_NEAR);  // CF = 1: every lane accepted
    if (!exact) {
      repair_tiny_lanes(x, format, dtype == DType::kBF16);
      jc(l_store, T_NEAR);
    }
    L(l_divide);
    fast_load(x, src, src_off, dtype);
    for (int v = 0; v < 4; ++v) vdivps(x[v], x[v], Zmm(scale.getIdx()));
    fast_encode(x, format, dtype == DType::kBF16, true);
    kortestw(k3, k3);
    jc(l_store, T_NEAR);
    L(l_generic);
    quantise_generic_unit(dst, src, dst_off, src_off, dtype, format, scale, recip);
    jmp(l_done, T_NEAR);
    L(l_store);
    store_fast_packed(dst, dst_off, streaming);
    L(l_done);
  }

  // After fast_encode's window steps rejected a step (x[0..3] the products q', zmm20 the
  // packed codes): CF = 1 when every rejected lane is tiny, |q'| < 2^-11 (e4m3; e5m2: 2^-19),
  // zmm20 then holding their codes too. A tiny lane's code is the signed zero: the ref's
  // quotient q = RN(x/s) is within 2.5 ulp of q', so |q| < 2^-10 (e5m2: 2^-17), at most half
  // the smallest fp8 subnormal, which rounds to zero (ties to even). Zeros are the common case:
  // a zero lane sits below the fp8 normal range, which the window rejects, and without this
  // every step holding one paid four vdivps and a second encode (one value in 2001 of the
  // bench's data; most values of a ReLU's output).
  //   per vector: accepted = (t < limit and t not near a midpoint) or 2|q'| < 2B·2^24, with
  //               t = 2|q'| + add as in fast_encode and B = 58 (e4m3) or 54 (e5m2);
  //   codes:      the packed top bytes w of q' (the same table as the codes): a byte with
  //               (w & 0x7F) < B is a tiny lane's, whose code is w & 0x80.
  // x preserved; uses zmm16..19, zmm21 and k2..k4.
  void repair_tiny_lanes(const Xbyak::Zmm (&x)[4], DType format, bool pairs) {
    using Xbyak::Zmm;
    constexpr uint8_t kLt = 1;
    const bool e5m2 = format == DType::kFp8E5m2;
    const uint32_t tiny_byte = e5m2 ? 54 : 58;
    const WindowStepConstants w = window_step_constants(format);
    const Zmm t[4] = {Zmm(16), Zmm(17), Zmm(18), Zmm(19)};
    const Zmm p(kFastPacked), top(21);
    for (int v = 0; v < 4; ++v) {
      vpaddd(t[v], x[v], x[v]);
      vpcmpud(k2, t[v], cst_bits((2 * tiny_byte) << 24), kLt);
      vpaddd(t[v], t[v], cst_bits(w.add));
      if (v == 0) {
        vpcmpud(k3, t[v], cst_bits(w.limit), kLt);
      } else {
        vpcmpud(Xbyak::Opmask(4), t[v], cst_bits(w.limit), kLt);
      }
      const Xbyak::Opmask accepted = v == 0 ? k3 : Xbyak::Opmask(4);
      vptestmd(accepted | accepted, t[v], cst_bits(w.near));
      korw(accepted, accepted, k2);
      if (v > 0) kandw(k3, k3, accepted);
    }
    const auto table = fast_pack_table(pairs);
    vmovdqu32(top, cst_table(table));
    vpermi2b(top, x[0], x[1]);
    vmovdqu32(t[0], cst_table(table));
    vpermi2b(t[0], x[2], x[3]);
    vinserti64x4(top, top, Xbyak::Ymm(t[0].getIdx()), 1);
    vpandd(t[1], top, cst_bits(0x7F7F7F7Fu));
    vpcmpub(k2, t[1], cst_bits(tiny_byte * 0x01010101u), kLt);
    vpandd(top, top, cst_bits(0x80808080u));
    vmovdqu8(p | k2, top);
    kortestw(k3, k3);  // CF = 1: every lane accepted or tiny
  }

  // `vectors` x 16 values at [src + src_off] through load_scaled + fp8_encode + store_fp8
  // (zmm0..3, AVX-512): the steps the fast units reject, and the window steps of the AVX-512
  // levels without VBMI.
  void quantise_generic_unit(const Reg64& dst, const Reg64& src, int dst_off, int src_off,
                             DType dtype, DType format, const Xmm& scale, const Xmm& recip,
                             int vectors = 4) {
    const int esize = int(dtype_size(dtype));
    for (int v = 0; v < vectors; ++v) {
      load_scaled(vmm(v), dtype, src + src_off + v * 16 * esize, 16, scale, recip, format);
      fp8_encode(vmm(v), format);
      store_fp8(vmm(v), dst + dst_off + v * 16, 16);
    }
  }

  // The 64 codes in zmm20 (kFastPacked) to [dst + dst_off], streaming or not.
  void store_fast_packed(const Reg64& dst, int dst_off, bool streaming) {
    if (streaming) {
      vmovntdq(ptr[dst + dst_off], Xbyak::Zmm(kFastPacked));
    } else {
      vmovdqu8(ptr[dst + dst_off], Xbyak::Zmm(kFastPacked));
    }
  }

  // zmm20: the 64 packed codes of fast_encode.
  static constexpr int kFastPacked = 20;

  // x[0..3] = the 64 values at [src + src_off] as fp32: bf16 split into even (x0, x2) and
  // odd (x1, x3) values of each 32, else in order.
  void fast_load(const Xbyak::Zmm (&x)[4], const Reg64& src, int src_off, DType dtype) {
    using Xbyak::Zmm;
    if (dtype == DType::kBF16) {
      for (int h = 0; h < 2; ++h) {
        vmovdqu16(Zmm(16 + h), ptr[src + src_off + 64 * h]);
        vpslld(x[2 * h], Zmm(16 + h), 16);
        vpandd(x[2 * h + 1], Zmm(16 + h), cst_bits(0xFFFF0000));
      }
      return;
    }
    for (int v = 0; v < 4; ++v) {
      if (dtype == DType::kF32) {
        vmovups(x[v], ptr[src + src_off + v * 64]);
      } else {
        vcvtph2ps(x[v], ptr[src + src_off + v * 32]);
      }
    }
  }

  // The dword constants of the window steps (quantise_fast_unit's first try): fast_load's
  // bf16 split, fast_encode's add, range limit and window mask, the sign select and the
  // bytes' code offset. For pin_constants: each is otherwise a 64-byte load per use.
  struct WindowStepConstants {
    uint32_t high_half, add, limit, near, sign, min_code_bytes;
    std::array<uint32_t, 6> list() const {
      return {high_half, add, limit, near, sign, min_code_bytes};
    }
  };
  static WindowStepConstants window_step_constants(DType format) {
    const bool e5m2 = format == DType::kFp8E5m2;
    const int m = e5m2 ? 2 : 3, s = 23 - m, rebias = e5m2 ? 112 : 120;
    const uint32_t max_code = e5m2 ? 0x7B : 0x7E, min_code = 1u << m;
    return {0xFFFF0000u,
            (1u << s) + 2 * kNearUlps - uint32_t(rebias + 1) * (1u << 24),
            (max_code - min_code + 1) << (s + 1),
            ((1u << (s + 1)) - 1) & ~(4 * kNearUlps - 1),
            0x80000000u,
            min_code * 0x01010101u};
  }

  // The 64 codes of the quotients x[0..3] into zmm20 (kFastPacked) and k3 = the lanes
  // accepted (all ones: every code is right); `exact` as in quantise_fast_unit. x preserved.
  // In exact mode the fp8 subnormal range and zero are accepted too: the generic encoder's
  // magic add (bits(a + C) - bits(C) = RNE(a / q_sub), C = 2^23 q_sub) gives their codes
  // 0 .. 2^M, carried as byte values idx_base + code (idx_base = max_code - 2^M + 1, the first
  // value the normal lanes' code - 2^M cannot take) and mapped back with the normal lanes'
  // code - 2^M -> code by one 128-entry vpermt2b table; exact mode then accepts exactly the
  // lanes that do not saturate or overflow: a < the first value that rounds past max_code
  // (e4m3: a <= 464, which ties to 448; e5m2: a < 59392, whose tie would round to 0x7C).
  //
  // `skip_absent_subnormals` (exact mode): the subnormal fix-up (16 of the step's vector uops)
  // is jumped over when no lane needs it. Worth it where such lanes are rare: the exact
  // products of a scale like 0.02 put a lane below the fp8 min normal only for |x| < 3e-4, while
  // at scale 1 (f16/f32 inputs) about half the steps of N(0, 1) data hold one and the branch
  // mispredicts (measured: 64 MB 14.5-15.3 -> 10.5-11.8 GB/s), so the r = 1/s steps keep it
  // unconditional.
  void fast_encode(const Xbyak::Zmm (&x)[4], DType format, bool pairs, bool exact,
                   bool skip_absent_subnormals = false) {
    using Xbyak::Zmm;
    const bool e5m2 = format == DType::kFp8E5m2;
    const int m = e5m2 ? 2 : 3, s = 23 - m, rebias = e5m2 ? 112 : 120;
    const uint32_t max_code = e5m2 ? 0x7B : 0x7E, min_code = 1u << m;
    const WindowStepConstants w = window_step_constants(format);
    const uint32_t add = exact ? (1u << s) - 2 - uint32_t(rebias + 1) * (1u << 24) : w.add;
    const uint32_t limit = w.limit, near = w.near;
    // exact mode: 2a below these
    const uint32_t accept2 = e5m2 ? 0x8ED00000u : 0x87D00001u;  // 2·bits(59392), 2·bits(464)+1
    const uint32_t min_normal2 = uint32_t(rebias + 1) << 24;
    const uint32_t idx_base = max_code - min_code + 1;
    const float magic = e5m2 ? 128.0f : 16384.0f;  // C = 2^23 q_sub
    constexpr uint8_t kLt = 1, kBitSelect = 0xD8;  // vpternlogd: c ? b : a
    const Zmm t[4] = {Zmm(16), Zmm(17), Zmm(18), Zmm(19)};
    const Zmm p(kFastPacked), q(21);
    for (int v = 0; v < 4; ++v) vpaddd(t[v], x[v], x[v]);
    if (exact) {
      for (int v = 0; v < 4; ++v) {
        if (v == 0) {
          vpcmpud(k3, t[v], cst_bits(accept2), kLt);
        } else {
          vpcmpud(k3 | k3, t[v], cst_bits(accept2), kLt);
        }
      }
      // k4..k7 = the subnormal (or zero) lanes of each vector: a < min normal.
      for (int v = 0; v < 4; ++v) vpcmpud(Xbyak::Opmask(4 + v), t[v], cst_bits(min_normal2), kLt);
      // p, q hold 2·lsb (they are free until the pack).
      for (int v = 0; v < 4; ++v) {
        const Zmm lsb = v % 2 == 0 ? p : q;
        vpsrld(lsb, t[v], s);
        vpandd(lsb, lsb, cst_bits(2));
        vpaddd(t[v], t[v], lsb);
      }
    }
    for (int v = 0; v < 4; ++v) vpaddd(t[v], t[v], cst_bits(add));
    if (!exact) {
      for (int v = 0; v < 4; ++v) {
        if (v == 0) {
          vpcmpud(k3, t[v], cst_bits(limit), kLt);
        } else {
          vpcmpud(k3 | k3, t[v], cst_bits(limit), kLt);
        }
        vptestmd(k3 | k3, t[v], cst_bits(near));
      }
    }
    for (int v = 0; v < 4; ++v) vpslld(t[v], t[v], 24 - (s + 1));
    if (exact) {
      Label l_normal_only;
      if (skip_absent_subnormals) {
        korw(k2, k4, k5);
        korw(k2, k2, k6);
        korw(k2, k2, k7);
        kortestw(k2, k2);
        jz(l_normal_only, T_NEAR);
      }
      for (int v = 0; v < 4; ++v) {
        // subnormal range (or zero): t = (idx_base + RNE(a / q_sub)) << 24
        const Zmm sub = v % 2 == 0 ? p : q;
        vpandd(sub, x[v], cst_bits(0x7FFFFFFF));
        vaddps(sub, sub, cst(magic));
        vpaddd(sub, sub, cst_bits(idx_base - std::bit_cast<uint32_t>(magic)));
        vpslld(t[v] | Xbyak::Opmask(4 + v), sub, 24);
      }
      L(l_normal_only);
    }
    for (int v = 0; v < 4; ++v) vpternlogd(t[v], x[v], cst_bits(w.sign), kBitSelect);
    const auto table = fast_pack_table(pairs);
    vmovdqu32(p, cst_table(table));
    vpermi2b(p, t[0], t[1]);
    vmovdqu32(q, cst_table(table));
    vpermi2b(q, t[2], t[3]);
    vinserti64x4(p, p, Xbyak::Ymm(q.getIdx()), 1);
    if (!exact) {
      vpaddb(p, p, cst_bits(w.min_code_bytes));
      return;
    }
    // byte & 0x7F -> code (table), the sign bit kept.
    std::array<uint32_t, 16> lut[2]{};
    for (uint32_t i = 0; i < 128; ++i) {
      const uint32_t code = i < idx_base ? i + min_code : i - idx_base;
      lut[i / 64][(i % 64) / 4] |= (code & 0xFF) << (8 * (i % 4));
    }
    vmovdqu32(q, cst_table(lut[0]));
    vpermt2b(q, p, cst_table(lut[1]));
    vpternlogd(p, q, cst_bits(0x7F7F7F7F), kBitSelect);
  }

  // ---- Power-of-two scales: bf16 / f16 -> fp8 in 16-bit lanes (AVX512-FP16) ---------------
  //
  // A scale s = 2^k (vLLM's default 1.0, and every ue8m0 scale) makes the ref's quotient
  // q = x/s exact, and for bf16 x a bf16 itself (or an underflow, whose code is 0): with
  // a = bits(|x|) as a 16-bit integer, bits(|q|) = a - 128k. So the code needs no fp32 lanes,
  // and a vector holds 32 values. For a format with R = 127 - its bias, D = 7 - its mantissa
  // bits dropped from a bf16, and a shift B (below), s' = max(a - K2, 0) with K2 = 128·(k + B):
  //  * normal codes (bits(|q|) >= (R + 1)·128, i.e. s' >= (R - B + 1)·128): the exponent
  //    rebias and the D dropped mantissa bits as integers,
  //    code = RNE((bits(|q|) - R·128) / 2^D) = (s' - (R - B)·128 + 2^(D-1) - 1 + lsb) >> D,
  //    lsb = bit D of s' (K2 is a multiple of 128, so it is that bit of bits(|q|)), then
  //    min(code, max finite): the ref saturates (inf included);
  //  * the fp8 subnormal range: for s' >= 128, s' << 3 is v = |q|·2^(112-B) as an fp16 (fp16's
  //    bias is 127 - 112, and its significand holds a bf16's); B puts the whole subnormal grid
  //    (quantum Q) in fp16's normal range: e4m3 B = 112 (v = |q|; Q = 2^-9), e5m2 B = 102
  //    (v = |q|·2^10; Q = 2^-16). Below s' = 128 it is an fp16 denormal and a value far below
  //    half the grid's step: code 0, as the ref's. The code RNE(|q| / Q) is then
  //    bits(v + C) - bits(C) in fp16 (vaddph) with C = 2.0 (0x4000) for e4m3, 16.0 (0x4C00) for
  //    e5m2, whose fp16 ulp (2^-9, 2^-6) is the grid's step Q·2^(112-B): the fp32 encoder's
  //    magic add;
  //  * the sign bit copied from x; a NaN lane (a > 0x7F80) sends the step to the generic path.
  // ~16 uops per 32 values, against ~16 per 16 in fp32 lanes (quantise_fast_unit's exact
  // steps). The range of k: K2 >= 0 needs k >= -B (-102 for e5m2); an infinite x reads as
  // 2^(128-k), which saturates while k <= 112 (e5m2; e4m3 119); for k < 0 a bf16 denormal x
  // (no implicit bit) reads as a normal number, but one below 2^(-k-126) <= 2^-26, where both
  // codes are 0. Every intermediate stays inside 16 bits (a + 128·|k| < 2^16).
  //
  // f16 input (e4m3 only), the same steps on f16 bits: bits(|q|) = a - 1024k, so K2 = 1024k,
  // D = 7 dropped bits, offset (15 - 7)·1024, and the subnormal range is |q| itself (no
  // shift), for k in [0, 15] only: with k < 0 an f16 denormal x (no implicit bit) would read as
  // a normal number of the same order as its true quotient, and with k >= 0 every quotient
  // below fp16's normal range is below 2^-14, code 0 either way. Infinities go to the generic
  // path with the NaNs (they would read as 2^(16-k), which need not saturate).
  static constexpr int kPow2Bias = 22;  // zmm22: K2 in every word

  bool pow2_quantise(DType dtype, DType format) const {
    return has_fp16() && pow2_format(dtype, format).has_value();
  }

  // Jumps to `l_other` unless lane 0 of `scale` is 2^k with k in the format's range (zero,
  // denormal, negative, inf and NaN scales all fail); else zmm22 = K2 (uses eax).
  void load_pow2_bias(const Xmm& scale, const Pow2Format& f, const Label& l_other) {
    vmovd(eax, Xbyak::Xmm(scale.getIdx()));
    test(eax, 0x807FFFFF);  // sign and mantissa clear
    jnz(l_other, T_NEAR);
    shr(eax, 23);  // 127 + k
    sub(eax, 127 + f.min_k);
    cmp(eax, f.max_k - f.min_k);
    ja(l_other, T_NEAR);  // unsigned: also a zero scale (exponent 0 wraps)
    add(eax, f.min_k + f.shift);
    shl(eax, f.exponent_lsb);
    vpbroadcastw(Xbyak::Zmm(kPow2Bias), ax);
  }

  // The word constants of quantise_pow2_unit's steps (each as words(..) of a dword).
  struct Pow2StepConstants {
    uint32_t magnitude, max_input, one, round, max_code, magic, subnormal_end, sign;
    // In a list, for pin_constants.
    std::array<uint32_t, 8> list() const {
      return {magnitude, max_input, one, round, max_code, magic, subnormal_end, sign};
    }
  };
  static Pow2StepConstants pow2_step_constants(const Pow2Format& f) {
    return {words(0x7FFF),
            words(f.max_input),
            words(1),
            words((1u << (f.dropped - 1)) - 1 - f.offset),
            words(f.max_code),
            words(f.magic),
            words(f.offset + (1u << f.exponent_lsb)),
            words(0x80)};
  }

  // 64 codes of the bf16 / f16 values at [src + src_off] to [dst + dst_off] (see above; zmm22
  // from load_pow2_bias). Uses zmm0..3, zmm16..20, k3, k4 and the generic path's registers
  // (vmm0..3, vmm13..15, k1, k2).
  void quantise_pow2_unit(const Reg64& dst, const Reg64& src, int dst_off, int src_off, DType dtype,
                          DType format, const Xmm& scale, const Xmm& recip, bool streaming) {
    using Xbyak::Zmm;
    constexpr uint8_t kLt = 1, kLe = 2;  // vpcmpuw predicates
    const Pow2Format f = pow2_format(dtype, format).value();
    const Pow2StepConstants c = pow2_step_constants(f);
    const Zmm bias(kPow2Bias);
    for (int h = 0; h < 2; ++h) {
      const Zmm x(16 + h), a(h), s(2 + h), code(18 + h);
      vmovdqu16(x, ptr[src + src_off + 64 * h]);
      vpandd(a, x, cst_bits(c.magnitude));
      vpcmpuw(h == 0 ? k3 : k3 | k3, a, cst_bits(c.max_input), kLe);  // not NaN
      vpsubusw(s, a, bias);
      vpsrlw(code, s, f.dropped);
      vpandd(code, code, cst_bits(c.one));
      vpaddw(code, code, s);
      vpaddw(code, code, cst_bits(c.round));
      vpsrlw(code, code, f.dropped);
      vpminuw(code, code, cst_bits(c.max_code));
      if (f.to_fp16 > 0) {
        vpsllw(a, s, uint8_t(f.to_fp16));
        vaddph(a, a, cst_bits(c.magic));
      } else {
        vaddph(a, s, cst_bits(c.magic));
      }
      vpcmpuw(k4, s, cst_bits(c.subnormal_end), kLt);  // subnormal
      vpsubw(code | k4, a, cst_bits(c.magic));
      copy_word_sign(code, x, s);
    }
    // k3 clear: a NaN lane.
    store_word_codes(Zmm(18), Zmm(19), dst, src, dst_off, src_off, dtype, format, scale, recip,
                     streaming);
  }

  // The end of the 16-bit steps: the low bytes of the code words in `lo` (values 0..31) and
  // `hi` (32..63) packed in order into zmm20 and stored when every lane of k3 is set, else the
  // 64 values at [src + src_off] through the generic path.
  void store_word_codes(const Xbyak::Zmm& lo, const Xbyak::Zmm& hi, const Reg64& dst,
                        const Reg64& src, int dst_off, int src_off, DType dtype, DType format,
                        const Xmm& scale, const Xmm& recip, bool streaming) {
    const Xbyak::Zmm packed(kFastPacked);
    Label l_generic, l_done;
    std::array<uint32_t, 16> low_bytes{};
    for (uint32_t i = 0; i < 64; ++i) low_bytes[i / 4] |= (2 * i) << (8 * (i % 4));
    vmovdqu32(packed, cst_table(low_bytes));
    vpermi2b(packed, lo, hi);
    kortestd(k3, k3);
    jnc(l_generic, T_NEAR);  // CF = 0: a lane the steps do not cover
    store_fast_packed(dst, dst_off, streaming);
    jmp(l_done, T_NEAR);
    L(l_generic);
    quantise_generic_unit(dst, src, dst_off, src_off, dtype, format, scale, recip);
    L(l_done);
  }

  // ---- Other scales: bf16 -> fp8 through a table of the mantissa (AVX-512 VBMI) ------------
  //
  // For bf16 x with exponent field e in [1, 254] and mantissa field m (7 bits),
  // x = (1 + m/128)·2^(e-127), and while the quotients stay normal fp32 the ref's
  // RN32(x / s) = 2^(e-127)·RN32(x_m / s) with x_m = 1 + m/128. An fp8 code of the normal
  // range, c(q) = RNE(bits(q) / 2^(23-M)) - 2^M·R (M mantissa bits, R = 127 - the fp8 bias),
  // then moves by 2^M per binade: c(x/s) = c(x_m/s) + 2^M·(e - 127). With h = |x|'s bits
  // >> (7 - M) = 2^M·e + (m >> (7 - M)) that is
  //   c = h + T'(m),   T'(m) = c(RN32(x_m / s)) - 2^M·127 - (m >> (7 - M)),
  // a function of the 7 mantissa bits alone for a given scale. build_quantise_table computes
  // T' with the ref's own division for the 128 mantissas once per call and stores
  // T(m) = T'(m) - Tmin (at most 2^(M+1): q spans less than a binade over m) as bytes and the
  // bias Tmin·2^(7-M) as words (added to |x|'s bits before the shift, exact since it is a
  // multiple of 2^(7-M); for scales in [2^-60, 2^60] it lies in about [-23200, -6500], so the sum
  // stays a signed 16-bit number, and the arithmetic shift keeps its sign). A step is, per 32
  // values on 16-bit lanes: |x|, the bias, the shift, one vpermt2b (x's low byte indexes the table
  // by its 7 mantissa bits; byte zero-masking clears the high byte), an add, the clamp to [0, max
  // code] (the ref saturates: an infinity, or a quotient past the largest code), the sign bit from
  // x: ~29 vector uops per 64 values against ~39 on the fp32 window steps. Lanes the formula does
  // not cover send the 64-value step to the generic path: a NaN, and a nonzero exponent whose code
  // falls below 2^M (an fp8-subnormal or zero code: its rounding depends on e). Zero and denormal x
  // (e = 0) give code 0 (signed), exactly the ref's since the scale is at least 2^-60 (|x / s| <
  // 2^-66). The table serves scales in [2^-60, 2^60] that are not powers of two (those keep the
  // 16-bit power-of-two steps or the exact steps, with no fallback on the fp8 subnormal range);
  // other scales, NaN and negative ones included, clear the table's flag and take the other steps.
  static constexpr int kQuantiseTableBytes = 256;  // T[0..63], T[64..127], bias words, flag
  static constexpr int kTableHigh = 64, kTableBias = 128, kTableFlag = 192;

  // Builds the table of the broadcast scale `scale` for `format` at [rsp + offset] (stack the
  // caller reserved: reserve_quantise_tables) and registers it for `scale`'s register:
  // quantise_span of bf16 values with that scale register uses it while rsp is unchanged.
  // Uses zmm0..2, zmm13..15 and eax.
  void build_quantise_table(const Xmm& scale, DType format, int offset) {
    using Xbyak::Zmm;
    const QuantiseTableFormat f = table_format(format);
    const Zmm m(0), q(1), t(2), tmin(15), sc(scale.getIdx());
    // The flag: a scale in [2^-60, 2^60] (positive, normal) that is not a power of two; no
    // table is built for the others (a decode call would pay ~0.1 us for it).
    Label l_no_table, l_done;
    vmovd(eax, Xbyak::Xmm(scale.getIdx()));
    test(eax, 0x007FFFFF);
    jz(l_no_table, T_NEAR);
    sub(eax, std::bit_cast<uint32_t>(0x1p-60f));
    cmp(eax, std::bit_cast<uint32_t>(0x1p60f) - std::bit_cast<uint32_t>(0x1p-60f));
    ja(l_no_table, T_NEAR);  // unsigned: below 2^-60 wraps, negative and NaN are above
    std::array<uint32_t, 16> iota{};
    for (uint32_t i = 0; i < 16; ++i) iota[i] = i;
    // T'(m) of the 16 mantissas 16v .. 16v + 15 into q.
    auto table_entries = [&](int v) {
      vmovdqu32(m, cst_table(iota));
      if (v > 0) vpaddd(m, m, cst_bits(uint32_t(16 * v)));
      vpord(q, m, cst_bits(0x3F80));
      vpslld(q, q, 16);
      vdivps(q, q, sc);  // RN32(x_m / s), the ref's quotient
      vpsrld(t, q, uint8_t(f.dropped));
      vpandd(t, t, cst_bits(1));
      vpaddd(q, q, t);
      vpaddd(q, q, cst_bits((1u << (f.dropped - 1)) - 1));
      vpsrld(q, q, uint8_t(f.dropped));
      vpsrld(t, m, uint8_t(7 - f.mantissa));
      vpsubd(q, q, t);
      vpsubd(q, q, cst_bits(uint32_t(f.code_offset + 127 * (1 << f.mantissa))));
    };
    // T' (in [-1447, -471] for these scales: words) parked in the table's own 256 bytes.
    for (int v = 0; v < 8; ++v) {
      table_entries(v);
      if (v == 0) {
        vmovdqa32(tmin, q);
      } else {
        vpminsd(tmin, tmin, q);
      }
      vpmovdw(ptr[rsp + offset + 32 * v], q);
    }
    vshufi32x4(t, tmin, tmin, 0x4E);
    vpminsd(tmin, tmin, t);
    vshufi32x4(t, tmin, tmin, 0xB1);
    vpminsd(tmin, tmin, t);
    vpshufd(t, tmin, 0x4E);
    vpminsd(tmin, tmin, t);
    vpshufd(t, tmin, 0xB1);
    vpminsd(tmin, tmin, t);  // Tmin in every dword
    // T - Tmin as bytes over the words, front to back: the bytes of v land below the words of
    // v, which are read first.
    for (int v = 0; v < 8; ++v) {
      vpmovsxwd(q, ptr[rsp + offset + 32 * v]);
      vpsubd(q, q, tmin);
      vpmovdb(ptr[rsp + offset + 16 * v], q);
    }
    vpslld(tmin, tmin, uint8_t(7 - f.mantissa));
    vpmovdw(ptr[rsp + offset + kTableBias], tmin);
    vpmovdw(ptr[rsp + offset + kTableBias + 32], tmin);
    mov(dword[rsp + offset + kTableFlag], 1);
    jmp(l_done, T_NEAR);
    L(l_no_table);
    mov(dword[rsp + offset + kTableFlag], 0);
    L(l_done);
    quantise_tables_[scale.getIdx()] = offset;
  }

  // For bf16 input with AVX512_VBMI (avx512_vbmi and up): reserves kQuantiseTableBytes of stack per
  // register of `scales` (loaded, broadcast) at [rsp + above + 256·i] after the reservation,
  // `above` being the bytes the kernel keeps at [rsp] (at least the staging buffer), and builds
  // their tables when the call quantises at least kTableMinValues values per scale:
  // `count_values()` emits code leaving that count in rax (it may clobber rax only). A table
  // costs ~50 ns to build and saves ~1.4 ns per 64 values, so a one-token decode call (1024
  // values per scale) is faster without (measured: flash at a calibrated scale 0.21-0.23 us
  // without, 0.25-0.28 with). release_quantise_tables() before the epilogue; rsp must not move
  // in between.
  template <class CountValues>
  void reserve_quantise_tables(DType dtype, DType format, std::initializer_list<Xmm> scales,
                               CountValues count_values, int above = kStageBytes) {
    if (dtype != DType::kBF16 || !has_vbmi()) return;
    quantise_table_bytes_ = int(scales.size()) * kQuantiseTableBytes;
    sub(rsp, quantise_table_bytes_);
    Label l_small, l_done;
    count_values();
    cmp(rax, kTableMinValues);
    jl(l_small, T_NEAR);
    int offset = above;
    for (const Xmm& scale : scales) {
      build_quantise_table(scale, format, offset);
      offset += kQuantiseTableBytes;
    }
    jmp(l_done, T_NEAR);
    L(l_small);
    for (int i = 0; i < int(scales.size()); ++i) {
      mov(dword[rsp + above + i * kQuantiseTableBytes + kTableFlag], 0);
    }
    L(l_done);
  }
  static constexpr int kTableMinValues = 4096;

  // count_values for reserve_quantise_tables in the row kernels (rows [rsi, rdx)):
  // rax = (rdx - rsi) · values_per_row.
  auto rows_times(int64_t values_per_row) {
    return [this, values_per_row] {
      mov(rax, rdx);
      sub(rax, rsi);
      imul(rax, rax, int(values_per_row));
    };
  }

  // Releases reserve_quantise_tables' stack (nothing when it reserved none).
  void release_quantise_tables() {
    if (quantise_table_bytes_ == 0) return;
    add(rsp, quantise_table_bytes_);
    quantise_table_bytes_ = 0;
    quantise_tables_.clear();
  }

  // 64 codes of the bf16 values at [src + src_off] to [dst + dst_off] through the table at
  // [rsp + table] (see above). Uses zmm0..3, zmm13, zmm14, zmm16..20, rax, k1, k3..k5 and the
  // generic path's registers.
  void quantise_table_unit(const Reg64& dst, const Reg64& src, int dst_off, int src_off,
                           DType format, int table, const Xmm& scale, const Xmm& recip,
                           bool streaming) {
    using Xbyak::Zmm;
    constexpr uint8_t kLt = 1, kLe = 2, kNle = 6;  // vpcmpuw / vpcmpw predicates
    const QuantiseTableFormat f = table_format(format);
    const TableStepConstants w = table_step_constants(format);
    mov(rax, 0x5555555555555555);  // the low byte of every word
    kmovq(k1, rax);
    for (int h = 0; h < 2; ++h) {
      const Zmm x(16 + h), a(h), c(2 + h), lookup(18 + h), sign(13 + h);
      vmovdqu16(x, ptr[src + src_off + 64 * h]);
      vpandd(a, x, cst_bits(w.magnitude));
      vpcmpuw(h == 0 ? k3 : k3 | k3, a, cst_bits(w.max_input), kLe);  // not NaN
      vpcmpuw(k4, a, cst_bits(w.mantissa_mask), kNle);                // e > 0
      vpaddw(c, a, ptr[rsp + table + kTableBias]);
      vpsraw(c, c, uint8_t(7 - f.mantissa));
      vmovdqu8(lookup, ptr[rsp + table]);
      vpermt2b(lookup | k1 | T_z, x, ptr[rsp + table + kTableHigh]);
      vpaddw(c, c, lookup);
      vpcmpw(k5 | k4, c, cst_bits(w.min_normal_code), kLt);  // an fp8-subnormal code
      kandnd(k3, k5, k3);
      vpmaxsw(c, c, cst_bits(w.zero));
      vpminsw(c, c, cst_bits(w.max_code));
      copy_word_sign(c, x, sign);
    }
    // k3 clear: a lane the table does not cover.
    store_word_codes(Zmm(2), Zmm(3), dst, src, dst_off, src_off, DType::kBF16, format, scale, recip,
                     streaming);
  }

  // The word constants quantise_table_unit reads (each as words(..) of a dword), for
  // pin_constants.
  struct TableStepConstants {
    uint32_t magnitude, max_input, mantissa_mask, min_normal_code, zero, max_code, sign;
    // A writer short of registers pins a prefix.
    std::array<uint32_t, 7> list() const {
      return {magnitude, max_input, mantissa_mask, min_normal_code, max_code, zero, sign};
    }
  };
  static TableStepConstants table_step_constants(DType format) {
    const QuantiseTableFormat f = table_format(format);
    return {words(0x7FFF),     words(0x7F80), words(0x007F), words(1u << f.mantissa), 0u,
            words(f.max_code), words(0x80)};
  }

  // pin_constants for the first constants of `constants` that `regs` has room for (the
  // writers short of registers pin the most-used ones, listed first).
  void pin_leading_constants(std::span<const uint32_t> constants, std::span<const int> regs) {
    pin_constants(constants.first(std::min(constants.size(), regs.size())), regs);
  }

  // The constants of the 16-bit steps that quantise `dtype` into `format` at this level, each
  // once, the table steps' first: for a writer that pins them around its spans (from the pool
  // each is a 64-byte load per use, ~16 per 64 codes). bf16: the table steps' and the
  // power-of-two steps' (quantise_pow2_unit at AVX512-FP16, quantise_pow2_zmm_unit below it);
  // f16 into e4m3 below AVX512-FP16: quantise_pow2_zmm_unit's; otherwise none. Pinned, the f16
  // steps at scale 1.0 read from DRAM at the rate they run in the caches: on Zen 5 convert_fp8
  // of 32 M values 15 -> 34 GB/s (the loads of the pool's constants, ~24 per 64 values, held up
  // the source's misses; docs/decisions.md, "Thirty-first round").
  std::vector<uint32_t> quantise_step_constants(DType dtype, DType format) const {
    std::vector<uint32_t> all;
    auto add = [&](auto list) {
      for (uint32_t c : list) {
        if (std::find(all.begin(), all.end(), c) == all.end()) all.push_back(c);
      }
    };
    if (!has_vbmi()) return all;
    if (dtype == DType::kBF16) {
      add(table_step_constants(format).list());
      if (pow2_quantise(dtype, format)) {
        add(pow2_step_constants(pow2_format(dtype, format).value()).list());
      } else {
        add(pow2_zmm_constants(dtype, format).list());
      }
    } else if (dtype == DType::kF16 && pow2_ymm_quantise(dtype, format)) {
      add(pow2_zmm_constants(dtype, format).list());
    }
    return all;
  }

  // The constants of the table steps per fp8 format.
  struct QuantiseTableFormat {
    int mantissa;     // M
    int dropped;      // 23 - M: fp32 mantissa bits below the code's
    int code_offset;  // 2^M·R: c(q) = RNE(bits(q) >> dropped) - code_offset
    uint32_t max_code;
  };
  static QuantiseTableFormat table_format(DType format) {
    return format == DType::kFp8E5m2 ? QuantiseTableFormat{2, 21, 112 * 4, 0x7B}
                                     : QuantiseTableFormat{3, 20, 120 * 8, 0x7E};
  }

  // Scale register -> rsp offset of its table (build_quantise_table).
  std::map<int, int> quantise_tables_;
  int quantise_table_bytes_ = 0;

  // The quantising loops are compute-bound (tens of uops per 64-byte line they read), so the
  // out-of-order window holds too few of their loads to keep enough lines in flight, and the
  // hardware prefetcher alone leaves them exposed: each loop iteration asks for the source
  // line kQuantisePrefetchBytes ahead (one line per iteration: the L2 streamer brings its
  // neighbour). Measured with bench_cache on 1 thread (64 MB, best of 2 runs each, same
  // session): convert_fp8 8.9-9.2 -> 12.3-13.6 GB/s; reshape_and_cache_flash NHD fp8 8.8-9.1
  // -> 9.6-10.1 GB/s (1024 bytes ahead was worse, 3072 and 4096 no better; a prefetchw of the
  // destination did not help). A prefetch past the end of the source does not fault.
  static constexpr int kQuantisePrefetchBytes = 2048;
  void prefetch_quantise_source(const Reg64& src) { prefetcht0(ptr[src + kQuantisePrefetchBytes]); }

  // Quantises `elements` values of `dtype` at [src] into fp8 codes at [dst] (dst, src
  // advanced): code = fp8(x / scale), through load_scaled (`recip` = scale_reciprocal(scale)),
  // in steps of 64 by quantise_pow2_unit (bf16 / f16 with a power-of-two scale, AVX512-FP16) or
  // quantise_fast_unit where fast_quantise(dtype), in steps of 32 by quantise_pow2_ymm_unit
  // (bf16 / f16 with a power-of-two scale, AVX2 and AVX-512 without AVX512-FP16; at VBMI in
  // steps of 64 by quantise_pow2_zmm_unit) or quantise_ymm_unit where
  // ymm_quantise(dtype)
  // (AVX2, AVX-512 without VBMI). `streaming`: the fast steps' stores are streaming (dst 64-byte
  // aligned). Clobbers vmm0..3, vmm13..15, zmm16..22, k1..k7, eax and reg_count_: callers keep
  // their scales in vmm4..12 (write_span's callers do).
  void quantise_span(const Reg64& dst, const Reg64& src, int64_t elements, DType dtype,
                     DType format, const Xmm& scale, const Xmm& recip, bool streaming = false) {
    emit_quantise_span(dst, src, elements, dtype, format, scale, recip, streaming,
                       SpanSteps::kChosenByScale);
  }

  // quantise_span where the caller knows the scale is 2^k with k in pow2_format's range and
  // has put its K2 in zmm22 (as load_pow2_bias would): the 16-bit steps without the scale's
  // tests. Requires pow2_quantise(dtype, format).
  void quantise_span_pow2(const Reg64& dst, const Reg64& src, int64_t elements, DType dtype,
                          DType format, const Xmm& scale, const Xmm& recip,
                          bool streaming = false) {
    emit_quantise_span(dst, src, elements, dtype, format, scale, recip, streaming,
                       SpanSteps::kPow2Loaded);
  }

  // quantise_span where the caller knows the scale is 2^k with k in pow2_format's range and
  // has put the power-of-two steps' round in zmm14 and C' in zmm15 (as
  // load_pow2_ymm_constants with `zmm`, or pow2_step_scale's values broadcast): the zmm steps
  // without the scale's tests. Requires pow2_ymm_quantise(dtype, format) and VBMI.
  void quantise_span_pow2_zmm(const Reg64& dst, const Reg64& src, int64_t elements, DType dtype,
                              DType format, const Xmm& scale, const Xmm& recip) {
    emit_quantise_span(dst, src, elements, dtype, format, scale, recip, false,
                       SpanSteps::kPow2ZmmLoaded);
  }

  // quantise_span with the window steps whatever the scale, without the tests that choose the
  // steps (~14 instructions per span): for spans of one dynamic scale each, such as
  // fp8_ds_mla's 128-value tiles, whose scales (amax / 448) are almost never the powers of two
  // or short reciprocals the other steps serve. The window steps are exact for every scale
  // (a power of two's exact ties and a zero or denormal scale's NaN marker are rejected and
  // divided). Where neither fast_quantise(dtype) nor, at AVX2, ymm_quantise(dtype) holds, the
  // per-vector path.
  void quantise_span_window(const Reg64& dst, const Reg64& src, int64_t elements, DType dtype,
                            DType format, const Xmm& scale, const Xmm& recip) {
    emit_quantise_span(dst, src, elements, dtype, format, scale, recip, false,
                       SpanSteps::kWindowOnly);
  }

  // How emit_quantise_span picks its fast steps.
  enum class SpanSteps {
    kChosenByScale,  // the scale's tests choose (quantise_span)
    kPow2Loaded,     // the 16-bit steps, K2 in zmm22 (quantise_span_pow2)
    kPow2ZmmLoaded,  // the 16-bit zmm steps, round / C' in zmm14 / zmm15 (quantise_span_pow2_zmm)
    kWindowOnly,     // the window steps (quantise_span_window)
  };

  // The body of the three.
  void emit_quantise_span(const Reg64& dst, const Reg64& src, int64_t elements, DType dtype,
                          DType format, const Xmm& scale, const Xmm& recip, bool streaming,
                          SpanSteps span_steps) {
    const int esize = int(dtype_size(dtype));
    // At AVX-512 without VBMI a span of window steps alone (fp8_ds_mla's tiles) keeps the
    // per-vector path, which is faster there (see the unit below).
    const bool ymm_steps =
        ymm_quantise(dtype) && !(avx512() && span_steps == SpanSteps::kWindowOnly);
    const int step = ymm_steps ? kYmmUnit : kFastUnit;
    if ((fast_quantise(dtype) || ymm_steps) && elements >= step) {
      const int64_t units = elements / step;
      constexpr int64_t kMaxFastUnrolled = 1;  // code size: each step carries its fallback
      enum class Steps { kWindow, kExact, kExactProducts, kPow2, kPow2Ymm, kTable };
      // The power-of-two steps on 512-bit vectors (bf16 and f16 in steps of 64: VBMI).
      const bool pow2_zmm = step == kFastUnit && (dtype == DType::kBF16 || dtype == DType::kF16);
      const auto table = quantise_tables_.find(scale.getIdx());
      const bool has_table = dtype == DType::kBF16 && table != quantise_tables_.end();
      auto unit = [&](Steps steps, int dst_off, int src_off) {
        if (steps == Steps::kPow2Ymm && pow2_zmm) {
          quantise_pow2_zmm_unit(dst, src, dst_off, src_off, dtype, format, streaming);
        } else if (steps == Steps::kPow2Ymm) {
          for (int off = 0; off < step; off += kYmmUnit) {
            quantise_pow2_ymm_unit(dst, src, dst_off + off, src_off + off * esize, dtype, format,
                                   streaming);
          }
        } else if (ymm_steps && avx512() && steps == Steps::kWindow) {
          // Without VBMI, AVX-512's per-vector window path (mask tests, 16 lanes, no blends)
          // runs ~20% faster than the 256-bit window steps (bench_cache, calibrated scales);
          // its exact steps are the 256-bit ones (1.5-2.3x).
          quantise_generic_unit(dst, src, dst_off, src_off, dtype, format, scale, recip,
                                kYmmUnit / 16);
        } else if (ymm_steps) {
          quantise_ymm_unit(dst, src, dst_off, src_off, dtype, format, scale, recip, streaming,
                            steps != Steps::kWindow);
        } else if (steps == Steps::kPow2) {
          quantise_pow2_unit(dst, src, dst_off, src_off, dtype, format, scale, recip, streaming);
        } else if (steps == Steps::kTable) {
          quantise_table_unit(dst, src, dst_off, src_off, format, table->second, scale, recip,
                              streaming);
        } else {
          quantise_fast_unit(dst, src, dst_off, src_off, dtype, format, scale, recip, streaming,
                             steps != Steps::kWindow, steps == Steps::kExactProducts);
        }
      };
      auto fast = [&](Steps steps) {
        if (units > kMaxFastUnrolled) {
          Label l_loop;
          mov(reg_count_, units);
          L(l_loop);
          prefetch_quantise_source(src);
          unit(steps, 0, 0);
          add(src, step * esize);
          add(dst, step);
          dec(reg_count_);
          jnz(l_loop, T_NEAR);
        } else {
          for (int64_t u = 0; u < units; ++u) unit(steps, int(u * step), int(u * step * esize));
          add(src, int(units * step * esize));
          add(dst, int(units * step));
        }
      };
      Label l_exact, l_window, l_fast_done;
      if (span_steps == SpanSteps::kPow2Loaded) {
        fast(Steps::kPow2);
      } else if (span_steps == SpanSteps::kPow2ZmmLoaded) {
        if (!pow2_zmm) throw std::logic_error("quantise_span_pow2_zmm: no zmm steps here");
        fast(Steps::kPow2Ymm);
      } else if (span_steps == SpanSteps::kWindowOnly) {
        fast(Steps::kWindow);
      } else {
        if (pow2_quantise(dtype, format)) {
          Label l_not_pow2;
          load_pow2_bias(scale, pow2_format(dtype, format).value(), l_not_pow2);
          fast(Steps::kPow2);
          jmp(l_fast_done, T_NEAR);
          L(l_not_pow2);
        }
        if (has_table) {
          Label l_no_table;
          cmp(dword[rsp + table->second + kTableFlag], 0);
          je(l_no_table, T_NEAR);
          fast(Steps::kTable);
          jmp(l_fast_done, T_NEAR);
          L(l_no_table);
        }
        // The exact steps serve every scale for which x·r is the ref's quotient RN(x/s) for
        // every input x (see exact_products_bound()): mu = r·s - 1 fused (one rounding) is zero
        // (r = 1/s exactly), or small with a short r (the exact products, which skip the
        // subnormal fix-up when no lane needs it). A NaN marker gives a NaN mu.
        Label l_exact_products;
        vmovaps(Xbyak::Xmm(13), Xbyak::Xmm(recip.getIdx()));
        vfmsub213ss(Xbyak::Xmm(13), Xbyak::Xmm(scale.getIdx()), cst(1.0f));
        vmovd(eax, Xbyak::Xmm(13));
        and_(eax, 0x7FFFFFFF);
        jz(l_exact, T_NEAR);
        if (const int bits = significand_bits(dtype); bits < 24) {
          cmp(eax, std::bit_cast<uint32_t>(exact_products_bound()));
          ja(l_window, T_NEAR);  // |mu| too large, or NaN (unsigned compare of the bits)
          vmovd(eax, Xbyak::Xmm(recip.getIdx()));
          test(eax, (1u << bits) - 1);  // r has at most 24 - bits significant bits
          jz(l_exact_products, T_NEAR);
        }
        L(l_window);
        fast(Steps::kWindow);
        jmp(l_fast_done, T_NEAR);
        if (significand_bits(dtype) < 24) {
          L(l_exact_products);
          fast(Steps::kExactProducts);
          jmp(l_fast_done, T_NEAR);
        }
        L(l_exact);
        if (pow2_ymm_quantise(dtype, format)) {
          Label l_fp32;
          load_pow2_ymm_constants(scale, dtype, format, l_fp32, pow2_zmm);
          fast(Steps::kPow2Ymm);
          jmp(l_fast_done, T_NEAR);
          L(l_fp32);
        }
        fast(Steps::kExact);
      }
      L(l_fast_done);
      elements %= step;
      if (elements == 0) return;
    }
    const int64_t vectors = elements / lanes();
    const int tail = int(elements % lanes());
    // Four vectors per unit: loads and products issue together, encodes follow.
    const int64_t units = vectors / kUnroll;
    auto convert = [&](int64_t first, int count, int n) {
      for (int v = 0; v < n; ++v) {
        load_scaled(vmm(v), dtype, src + int((first + v) * lanes() * esize), count, scale, recip,
                    format);
      }
      for (int v = 0; v < n; ++v) {
        fp8_encode(vmm(v), format);
        store_fp8(vmm(v), dst + int((first + v) * lanes()), count);
      }
    };
    if (units > 0) {
      Label l_loop;
      mov(reg_count_, units);
      L(l_loop);
      prefetch_quantise_source(src);
      convert(0, lanes(), kUnroll);
      add(src, kUnroll * lanes() * esize);
      add(dst, kUnroll * lanes());
      dec(reg_count_);
      jnz(l_loop, T_NEAR);
    }
    const int rest = int(vectors % kUnroll);
    if (rest > 0) convert(0, lanes(), rest);
    if (tail > 0) convert(rest, tail, 1);
  }

  // Dequantises `elements` fp8 codes of `format` at [src] into `dtype` values at [dst] (dst,
  // src advanced; where they end is not specified): rnd_T(decode(code) * scale), the product in
  // fp32 (spec §1.3). e4m3 to bf16 on AVX2 in steps of 16 on 16-bit lanes through two 8-word
  // tables of the scale (dequantise_word_steps) where the scale is in their range, else (and
  // for the rest) one vector per unit: the helpers' scratch (vmm13..15) serialises those steps,
  // out-of-order execution overlaps the units. Clobbers vmm0..3, vmm13..15 and reg_count_.
  void dequantise_span(const Reg64& dst, const Reg64& src, int64_t elements, DType format,
                       DType dtype, const Xmm& scale) {
    if (word_dequant(format, dtype) && elements >= kWordDequantStep) {
      Label l_vectors, l_done;
      const Xbyak::Reg32 bits = reg_count_.cvt32();
      vmovd(bits, Xmm(scale.getIdx()));
      shr(bits, 23);
      and_(bits, 0xFF);  // the biased exponent (the sign dropped)
      sub(bits, 127 - kMaxWordExponent);
      cmp(bits, 2 * kMaxWordExponent);
      ja(l_vectors, T_NEAR);  // unsigned: below the range too (zero, denormal), inf, NaN
      dequantise_word_steps(dst, src, elements / kWordDequantStep, scale);
      dequantise_vectors(dst, src, elements % kWordDequantStep, format, dtype, scale);
      jmp(l_done, T_NEAR);
      L(l_vectors);
      dequantise_vectors(dst, src, elements, format, dtype, scale);
      L(l_done);
      return;
    }
    dequantise_vectors(dst, src, elements, format, dtype, scale);
  }

  // ---- Dequantising e4m3 to bf16 on 16-bit lanes (AVX2) -------------------------------------
  //
  // A normal code c7 = c & 0x7F = 8E + m (E in 1..15, m in 0..7) decodes to 2^(E-7)·(1 + m/8),
  // and scaling by a power of two commutes with both roundings while every value stays a
  // normal number: rnd_bf16(RN32(decode(c)·s)) = 2^(E-1)·rnd_bf16(RN32(2^-6·(1 + m/8)·s)). As
  // bf16 bits that is a table of the 8 mantissas plus (E - 1)·2^7 in the exponent field:
  //   normal (c7 >= 8):   T[m] + E·2^7,  T[m] = bits(rnd(2^-6·(1 + m/8)·s)) - 2^7
  //   subnormal (< 8):    U[c7] = bits(rnd(decode(c7)·s)) (0: ±0, the sign of s)
  //   NaN (c7 = 0x7F):    0x7FC0 (decode's NaN; x·s keeps it)
  // and the code's sign xored into bit 15 (the sign of s is in the tables). Both tables are
  // computed once per span with the vector path's own product and rounding and looked up by
  // vpshufb (word m as the byte pair 2m, 2m + 1): ~18 uops per 16 codes for every scale,
  // against ~37 for the fp32 products of each step. The scale's exponent must keep every value
  // normal: |s| in [2^-100, 2^101) puts the products in [2^-109, 2^110] (decode spans 2^-9 ..
  // 448 = 1.75·2^8, its normal range from 2^-6); other scales (zero, denormal, inf, NaN, huge)
  // take the per-vector path.
  static constexpr int kWordDequantStep = 16;
  static constexpr int kMaxWordExponent = 100;

  bool word_dequant(DType format, DType dtype) const {
    return !avx512() && format == DType::kFp8E4m3 && dtype == DType::kBF16;
  }

  // The 8 words rnd_bf16(values[i]·s) - bias in both 128-bit lanes of `table` (s the
  // broadcast scale; finite nonzero products: the rounding adds 0x7FFF + lsb). Uses t.
  void scaled_word_table(const Xbyak::Ymm& table, const Xbyak::Ymm& t, const Xmm& scale,
                         const std::array<float, 8>& values, uint32_t bias) {
    std::array<uint32_t, 16> bits{};
    for (size_t i = 0; i < 8; ++i) bits[i] = std::bit_cast<uint32_t>(values[i]);
    vmulps(table, Xbyak::Ymm(scale.getIdx()), cst_table(bits));
    add_bf16_rounding_bias(table, t);
    vpsrld(table, table, 16);
    vpackusdw(table, table, table);  // per lane: words 0-3, 0-3 | 4-7, 4-7
    vpermq(table, table, 0x88);      // quadwords 0, 2, 0, 2: words 0-7 in both lanes
    if (bias != 0) vpsubw(table, table, cst_bits(words(bias)));
  }

  // `steps` steps of 16 codes at [src] to bf16 at [dst] (both advanced; see above). Uses
  // ymm0..3, ymm13..15 and reg_count_.
  void dequantise_word_steps(const Reg64& dst, const Reg64& src, int64_t steps, const Xmm& scale) {
    using Xbyak::Ymm;
    std::array<float, 8> normal{}, subnormal{};
    for (int m = 0; m < 8; ++m) {
      normal[size_t(m)] = numeric::fp8_e4m3_to_f32(uint8_t(8 + m));  // E = 1: 2^-6·(1 + m/8)
      subnormal[size_t(m)] = numeric::fp8_e4m3_to_f32(uint8_t(m));
    }
    const Ymm table(13), table_sub(14), w(0), c7(1), index(2), code(3), sub(15);
    scaled_word_table(table, index, scale, normal, 1u << 7);
    scaled_word_table(table_sub, index, scale, subnormal, 0);
    const uint16_t nan_word = numeric::f32_to_bf16(numeric::fp8_e4m3_to_f32(0x7F));
    auto step = [&](int off) {
      vpmovzxbw(w, ptr[src + off]);
      vpand(c7, w, cst_bits(words(0x7F)));
      vpand(index, c7, cst_bits(words(7)));
      vpmullw(index, index, cst_bits(words(0x0202)));  // byte indices 2m, 2m + 1 of word m
      vpaddw(index, index, cst_bits(words(0x0100)));
      vpshufb(code, table, index);
      vpshufb(sub, table_sub, index);
      vpsllw(index, c7, 4);
      vpand(index, index, cst_bits(words(0x0780)));  // E·2^7
      vpaddw(code, code, index);
      vpcmpgtw(index, c7, cst_bits(words(7)));
      vpblendvb(code, sub, code, index);
      vpcmpeqw(index, c7, cst_bits(words(0x7F)));
      vpblendvb(code, code, cst_bits(words(nan_word)), index);
      vpand(w, w, cst_bits(words(0x80)));
      vpsllw(w, w, 8);
      vpxor(code, code, w);
      vmovdqu(ptr[dst + off * 2], code);
    };
    for_units(
        steps, [&](int64_t i) { step(int(i * kWordDequantStep)); },
        [&](int k) {
          add(src, k * kWordDequantStep);
          add(dst, k * kWordDequantStep * 2);
        });
    // for_units leaves the pointers at the first remaining step; move past those.
    const int64_t rest = steps > kMaxUnrolled ? steps % kUnroll : steps;
    if (rest > 0) {
      add(src, int(rest * kWordDequantStep));
      add(dst, int(rest * kWordDequantStep * 2));
    }
  }

  // dequantise_span's per-vector path (see above).
  void dequantise_vectors(const Reg64& dst, const Reg64& src, int64_t elements, DType format,
                          DType dtype, const Xmm& scale) {
    const int dsize = int(dtype_size(dtype));
    const int64_t vectors = elements / lanes();
    const int tail = int(elements % lanes());
    auto convert = [&](int v, int count) {
      const Xmm x = vmm(v % kUnroll);
      load_fp8(x, src + v * lanes(), count);
      fp8_decode(x, format);
      vmulps(x, x, scale);
      store_f32(x, dtype, dst + v * lanes() * dsize, count);
    };
    for_units(
        vectors, [&](int64_t v) { convert(int(v), lanes()); },
        [&](int k) {
          add(src, k * lanes());
          add(dst, k * lanes() * dsize);
        });
    // After a loop the pointers sit at the first unrolled remainder unit.
    const int64_t tail_unit = vectors > kMaxUnrolled ? vectors % kUnroll : vectors;
    if (tail > 0) convert(int(tail_unit), tail);
  }

  // ---- Dequantising through a table (AVX-512, 16-bit outputs) -------------------------------
  //
  // With one scale per call, rnd_T(decode(c) · scale) is a function of the code alone, and it
  // is odd in the code's sign bit: decode(c ^ 0x80) = -decode(c) (±0, ±inf and NaN included),
  // and the product and the rounding to T are symmetric (round to nearest even), so
  // out(c ^ 0x80) = out(c) ^ 0x8000. build_dequant_table computes the 128 outputs of the codes
  // 0..127 once per call with the vector path above (so every value is that path's, by
  // construction) into zmm24..27; a step of 32 codes is then two vpermi2w lookups (codes 0..63
  // and 64..127, selected by bit 6) and the sign bit: ~9 uops instead of ~40.
  static constexpr int kDequantTable = 24;  // zmm24..27: outputs of codes 0..31, .., 96..127

  bool dequant_table(DType dtype) const {
    return avx512() && (dtype == DType::kBF16 || dtype == DType::kF16);
  }

  // zmm24..27 = rnd_T(decode(c) · scale) for c = 0..127 (uses vmm0, the helpers' registers
  // and 256 bytes of stack below the staging buffer, released before it returns).
  void build_dequant_table(DType format, DType dtype, const Xmm& scale) {
    using Xbyak::Zmm;
    constexpr int kScratch = 256;
    sub(rsp, kScratch);
    std::array<uint32_t, 16> iota{};
    for (uint32_t i = 0; i < 16; ++i) iota[i] = i;
    const Xmm x = vmm(0);
    for (int v = 0; v < 8; ++v) {
      vmovdqu32(Zmm(x.getIdx()), cst_table(iota));
      if (v > 0) vpaddd(x, x, cst_bits(uint32_t(16 * v)));
      fp8_decode(x, format);
      vmulps(x, x, scale);
      store_f32(x, dtype, rsp + kStageBytes + 32 * v, 16);
    }
    for (int t = 0; t < 4; ++t) vmovdqu16(Zmm(kDequantTable + t), ptr[rsp + kStageBytes + 64 * t]);
    add(rsp, kScratch);
  }

  // low = the words of a sign-symmetric 128-entry table for the 32 codes at `addr`: two
  // vpermi2w over (t0, t1) for codes 0..63 and (t2, t3) for 64..127 (t1, t3 registers or
  // 64-byte constants), the one selected by bit 6, then the code's sign bit (bit 7) xored into
  // bit 15. Clobbers code, high and k2.
  void lookup_sign_symmetric(const Xbyak::Zmm& low, const Xbyak::Zmm& code, const Xbyak::Zmm& high,
                             const Xbyak::Address& addr, const Xbyak::Zmm& t0,
                             const Xbyak::Operand& t1, const Xbyak::Zmm& t2,
                             const Xbyak::Operand& t3) {
    constexpr uint8_t kXorAnd = 0x78;  // vpternlogd: a ^ (b & c)
    vpmovzxbw(code, addr);
    vmovdqa64(low, code);
    vpermi2w(low, t0, t1);
    vmovdqa64(high, code);
    vpermi2w(high, t2, t3);
    vptestmw(k2, code, cst_bits(kSymmetricLookupConstants[0]));  // bit 6: codes 64..127
    vmovdqu16(low | k2, high);
    vpsllw(code, code, 8);  // the sign bit to bit 15
    vpternlogd(low, code, cst_bits(kSymmetricLookupConstants[1]), kXorAnd);
  }
  // lookup_sign_symmetric's constants (bit 6, the sign of each word), for pin_constants.
  static constexpr std::array<uint32_t, 2> kSymmetricLookupConstants{0x00400040u, 0x80008000u};

  // dequantise_span through the table of build_dequant_table (built for this format, dtype
  // and scale): steps of 32 codes, the rest (< 32) through dequantise_span.
  void dequantise_span_table(const Reg64& dst, const Reg64& src, int64_t elements, DType format,
                             DType dtype, const Xmm& scale, bool streaming = false) {
    using Xbyak::Zmm;
    constexpr int kStep = 32;
    const Zmm code(0), low(1), high(2);
    auto step = [&](int offset) {
      lookup_sign_symmetric(low, code, high, ptr[src + offset], Zmm(kDequantTable),
                            Zmm(kDequantTable + 1), Zmm(kDequantTable + 2), Zmm(kDequantTable + 3));
      if (streaming) {
        vmovntdq(ptr[dst + offset * 2], low);
      } else {
        vmovdqu16(ptr[dst + offset * 2], low);
      }
    };
    const int64_t steps = elements / kStep;
    if (steps > 0) {
      constexpr int64_t kMaxUnrolledSteps = 4;
      if (steps > kMaxUnrolledSteps) {
        Label l_loop;
        mov(reg_count_, steps);
        L(l_loop);
        step(0);
        add(src, kStep);
        add(dst, kStep * 2);
        dec(reg_count_);
        jnz(l_loop, T_NEAR);
      } else {
        for (int64_t i = 0; i < steps; ++i) step(int(i * kStep));
        add(src, int(steps * kStep));
        add(dst, int(steps * kStep * 2));
      }
    }
    if (elements % kStep > 0) dequantise_span(dst, src, elements % kStep, format, dtype, scale);
  }

  // ---- Dequantising to bf16 with a per-row scale (AVX-512) ----------------------------------
  //
  // Where the scale changes too often for build_dequant_table (a scale per 128-code tile), the
  // decode alone goes through a table: decode(c) has at most 3 significant bits and an
  // exponent within bf16's, so it is exact as a bf16 word, and decode(c ^ 0x80) = -decode(c).
  // A step of 32 codes looks the 32 decoded words up (two vpermi2w, a select on bit 6, the
  // sign), splits them into even/odd fp32 lanes (split_bf16_pairs), multiplies by the scale
  // and rounds and packs on the bits (pack_bf16_pairs): the fp32 product and the rounding of
  // dequantise_span, in ~22 uops instead of ~40. The four tables live in registers
  // (load_decode_tables): codes 0..31 and 64..95 in zmm26/zmm27, 32..63 and 96..127 in
  // zmm24/zmm25. The steps' other constants are `decoded_step_constants()`, for pin_constants.
  static constexpr int kDecodeTable = 26, kDecodeTableHigh = 24;
  static constexpr std::array<uint32_t, 6> decoded_step_constants() {
    // lookup_sign_symmetric's bit 6 and sign, split_bf16_pairs' and pack_bf16_pairs' masks,
    // add_bf16_rounding_bias' three
    return {kSymmetricLookupConstants[0],
            kSymmetricLookupConstants[1],
            0xFFFF0000u,
            0x00010000u,
            0x00007FFFu,
            0x00000001u};
  }

  bool decode_table(DType dtype) const { return avx512() && dtype == DType::kBF16; }

  // The bf16 words of decode(c), c = 32t .. 32t + 31, as one 64-byte constant.
  Xbyak::Address decode_table_part(DType format, int t) {
    std::array<uint32_t, 16> words{};
    for (int i = 0; i < 32; ++i) {
      const auto code = uint8_t(32 * t + i);
      const float value = format == DType::kFp8E5m2 ? numeric::fp8_e5m2_to_f32(code)
                                                    : numeric::fp8_e4m3_to_f32(code);
      words[size_t(i / 2)] |= uint32_t(numeric::f32_to_bf16(value)) << (16 * (i % 2));
    }
    return cst_table(words);
  }

  void load_decode_tables(DType format) {
    vmovdqu16(Xbyak::Zmm(kDecodeTable), decode_table_part(format, 0));
    vmovdqu16(Xbyak::Zmm(kDecodeTable + 1), decode_table_part(format, 2));
    vmovdqu16(Xbyak::Zmm(kDecodeTableHigh), decode_table_part(format, 1));
    vmovdqu16(Xbyak::Zmm(kDecodeTableHigh + 1), decode_table_part(format, 3));
  }

  // dequantise_span into bf16 through load_decode_tables' tables (loaded for this format):
  // steps of 32 codes, the rest (< 32) through dequantise_span. Uses zmm0..3 and k2.
  // `streaming`: the steps' stores are non-temporal (dst + 64·i must then be 64-byte aligned).
  void dequantise_span_decoded(const Reg64& dst, const Reg64& src, int64_t elements, DType format,
                               const Xmm& scale, bool streaming = false) {
    using Xbyak::Zmm;
    constexpr int kStep = 32;
    const Zmm code(0), low(1), high(2), even(3), scale_z(scale.getIdx());
    for (int64_t first = 0; first + kStep <= elements; first += kStep) {
      const int offset = int(first);
      lookup_sign_symmetric(low, code, high, ptr[src + offset], Zmm(kDecodeTable),
                            Zmm(kDecodeTableHigh), Zmm(kDecodeTable + 1),
                            Zmm(kDecodeTableHigh + 1));
      split_bf16_pairs(even, low, low);
      vmulps(even, even, scale_z);
      vmulps(low, low, scale_z);
      pack_bf16_pairs(low, even, k2);
      if (streaming) {
        vmovntdq(ptr[dst + offset * 2], low);
      } else {
        vmovdqu16(ptr[dst + offset * 2], low);
      }
    }
    const int64_t done = elements / kStep * kStep;
    if (done == elements) return;
    add(src, int(done));
    add(dst, int(done * 2));
    dequantise_span(dst, src, elements - done, format, DType::kBF16, scale);
  }

  // The token loop shared by the cache writes: for rows with a slot >= 0, b -> rax and
  // o -> rcx, then `token()` (which may clobber every scratch register but the loop's).
  template <class Token>
  void token_loop(int64_t block_size, Token token) {
    token_loop(block_size, token, offsetof(CacheWriteCallArgs, slots), [](const Label&) {});
  }

  // The same with the slots pointer at `slots_offset` in the args, and `every_row(l_skip)` run
  // for every row (padding included) before its slot is read; it may jump to l_skip to skip
  // the row's cache write.
  template <class Token, class EveryRow>
  void token_loop(int64_t block_size, Token token, size_t slots_offset, EveryRow every_row) {
    enter_row_loop(slots_offset);
    Label l_token, l_next, l_done;
    L(l_token);
    cmp(reg_row_, reg_row_end_);
    jge(l_done, T_NEAR);
    every_row(l_next);
    write_row_at_slot(block_size, l_next, token);
    L(l_next);
    inc(reg_row_);
    jmp(l_token, T_NEAR);
    L(l_done);
  }

  // token_loop in chunks of up to `chunk` rows: `pre_row()` first for every row of the chunk
  // (padding included; the row in reg_q_; it may clobber rax, rcx, rdx, reg_p_, reg_o_,
  // reg_src_, reg_dst_, reg_heads_ and reg_count_), then `token()` for the chunk's rows as in
  // token_loop (it must keep reg_offset_, the chunk's end). The quantisers with dynamic scales
  // compute a row's scales in pre_row: that chain (max over the row, a horizontal max, two
  // divisions, ~100 cycles) is independent from row to row, while the quantising steps that
  // wait for it would otherwise fill the scheduler and leave one row in flight at a time.
  template <class PreRow, class Token>
  void chunked_token_loop(int64_t block_size, size_t slots_offset, int64_t chunk, PreRow pre_row,
                          Token token) {
    enter_row_loop(slots_offset);
    Label l_chunk, l_pre, l_token, l_next, l_done;
    L(l_chunk);
    cmp(reg_row_, reg_row_end_);
    jge(l_done, T_NEAR);
    lea(reg_offset_, ptr[reg_row_ + int(chunk)]);
    cmp(reg_offset_, reg_row_end_);
    cmovg(reg_offset_, reg_row_end_);
    mov(reg_q_, reg_row_);
    L(l_pre);
    pre_row();
    inc(reg_q_);
    cmp(reg_q_, reg_offset_);
    jl(l_pre, T_NEAR);
    L(l_token);
    write_row_at_slot(block_size, l_next, token);
    L(l_next);
    inc(reg_row_);
    cmp(reg_row_, reg_offset_);
    jl(l_token, T_NEAR);
    jmp(l_chunk, T_NEAR);
    L(l_done);
  }

  // The row loops' registers from the call (rdi = args, rows [rsi, rdx)); reg_slots_ = the
  // args' pointer at `slots_offset`.
  void enter_row_loop(size_t slots_offset) {
    mov(reg_args_, rdi);
    mov(reg_row_, rsi);
    mov(reg_row_end_, rdx);
    mov(reg_slots_, ptr[rdi + slots_offset]);
  }

  // Row reg_row_'s slot: padding (< 0) jumps to l_next; else b -> rax, o -> rcx, then token().
  template <class Token>
  void write_row_at_slot(int64_t block_size, const Label& l_next, Token token) {
    mov(rax, ptr[reg_slots_ + reg_row_ * 8]);
    test(rax, rax);
    js(l_next, T_NEAR);  // padding
    split_slot(block_size);
    token();
  }

  // rax = slot (>= 0) -> rax = slot / BS, rcx = slot % BS. Clobbers rdx.
  void split_slot(int64_t block_size) {
    divide_unsigned(block_size);  // rax = slot / BS, rdx = slot % BS (slot >= 0)
    mov(rcx, rdx);
  }

  // The row loop of the gathers (GatherCallArgs): for rows with src_offsets[row] >= 0,
  // reg_src_ = src + src_offsets[row] and reg_dst_ = dst + row * dst_row_stride, then `row()`
  // (which may clobber every scratch register but the loop's). `prefetch_bytes` > 0: each row
  // first prefetches the first `prefetch_bytes` of the source row kGatherPrefetchRows ahead
  // (prefetch_gather_source).
  template <class Row>
  void gather_loop(Row row, int64_t prefetch_bytes = 0) {
    enter_row_loop(offsetof(GatherCallArgs, src_offsets));
    Label l_row, l_next, l_done;
    L(l_row);
    cmp(reg_row_, reg_row_end_);
    jge(l_done, T_NEAR);
    mov(reg_src_, ptr[reg_slots_ + reg_row_ * 8]);
    test(reg_src_, reg_src_);
    js(l_next, T_NEAR);  // a skipped row
    if (prefetch_bytes > 0) prefetch_gather_source(prefetch_bytes);
    add(reg_src_, ptr[reg_args_ + offsetof(GatherCallArgs, src)]);
    mov(reg_dst_, ptr[reg_args_ + offsetof(GatherCallArgs, dst_row_stride)]);
    imul(reg_dst_, reg_row_);
    add(reg_dst_, ptr[reg_args_ + offsetof(GatherCallArgs, dst)]);
    row();
    L(l_next);
    inc(reg_row_);
    jmp(l_row, T_NEAR);
    L(l_done);
  }

  // A gather's source rows are wherever the block table puts them, so the hardware prefetcher
  // cannot run ahead of them; a gather whose rows cost more than their memory time (a
  // dequantisation) then waits for each row's lines in turn. The row's offset is in the table,
  // so the row loop asks for the lines of the row kGatherPrefetchRows ahead. bench_cache on
  // Zen 5, cp_gather_and_upconvert_fp8_kv_cache at 64 MB, 1 thread, two alternated rounds:
  // 2.06-2.59 ms without, 1.42-1.53 with 4 rows ahead (8 and 16: 1.39-1.52); the copies and
  // gather_and_maybe_dequant_cache's table steps, at the copy's rate already, level.
  static constexpr int kGatherPrefetchRows = 4;

  // The prefetch of gather_loop: the first `bytes` of source row reg_row_ + kGatherPrefetchRows
  // (none past the call's rows or for a skipped row). Uses rax.
  void prefetch_gather_source(int64_t bytes) {
    Label l_none;
    lea(rax, ptr[reg_row_ + kGatherPrefetchRows]);
    cmp(rax, reg_row_end_);
    jge(l_none, T_NEAR);
    mov(rax, ptr[reg_slots_ + rax * 8]);
    test(rax, rax);
    js(l_none, T_NEAR);
    add(rax, ptr[reg_args_ + offsetof(GatherCallArgs, src)]);
    for (int64_t line = 0; line < (bytes + 63) / 64; ++line) prefetcht0(ptr[rax + int(64 * line)]);
    L(l_none);
  }

  // The registers where the fused writers pin the rope pairs path's constants (above the
  // hoisted cos/sin of every common rot_dim; the writers' own vectors are 0..12).
  static constexpr std::array<int, 4> kRopeConstantRegs{28, 29, 30, 31};

  // reg_src_ = src + row * row_stride for the operand whose pointer/stride are at `data`,
  // `stride` in the args.
  void load_row(size_t data, size_t stride) { load_row(data, stride, reg_row_); }
  // The same for row `row`.
  void load_row(size_t data, size_t stride, const Reg64& row) {
    mov(reg_src_, ptr[reg_args_ + stride]);
    imul(reg_src_, row);
    add(reg_src_, ptr[reg_args_ + data]);
  }

  // dst = the stack scratch of `row` in a chunked_token_loop: rsp + kStageBytes + (row % chunk)
  // · bytes_per_row (chunk a power of two; the kernel reserved chunk · bytes_per_row below
  // the staging buffer, see Generator::kStageBytes).
  void chunk_scratch(const Reg64& dst, const Reg64& row, int64_t chunk, int64_t bytes_per_row) {
    mov(dst, row);
    and_(dst, int(chunk - 1));
    imul(dst, dst, int(bytes_per_row));
    lea(dst, ptr[rsp + dst + kStageBytes]);
  }

  const Reg64 reg_args_ = rbx, reg_row_ = r12, reg_row_end_ = r13, reg_slots_ = rbp;
  const Reg64 reg_src_ = r8, reg_dst_ = r9, reg_heads_ = r10, reg_p_ = r11, reg_q_ = r14;
  const Reg64 reg_count_ = r15, reg_offset_ = rsi, reg_scale_ = rdx, reg_o_ = rdi;

 private:
  // Inside with_streaming_stores' streaming loop.
  bool streaming_ = false;
};

}  // namespace jit::codegen::x86
