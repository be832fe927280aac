// CacheGenerator: the Generator base of the KV-cache generators (cache_kernel.cc,
// mla_kernel.cc, indexer_kernel.cc): spans copied, quantised or dequantised with compile-time
// lengths, and the token loop of the cache writes (slot -> block, offset). Included only by
// generator .cc files (it brings in xbyak.h).
#pragma once

#include <bit>
#include <cstddef>

#include "codegen/x86/generator.h"
#include "codegen/x86/kernels.h"
#include "ir/params_cache.h"

namespace jit::codegen::x86 {

// Units of a span fully unrolled up to this count; longer spans loop over kUnroll units.
inline constexpr int64_t kMaxUnrolled = 16;
inline constexpr int kUnroll = 4;

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
  // scale_reciprocal(scale).
  void write_span(const Reg64& dst, const Reg64& src, int64_t elements, DType dtype, bool fp8,
                  DType format, const Xmm& scale, const Xmm& recip) {
    if (fp8) {
      quantise_span(dst, src, elements, dtype, format, scale, recip);
    } else {
      copy_span(dst, src, elements * int64_t(dtype_size(dtype)), reg_count_);
    }
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

  // r = RN(1 / s) for load_scaled; an infinite reciprocal (s zero or denormal: x·r would be
  // inf where x/s is finite) becomes NaN, so that every product takes the division.
  void scale_reciprocal(const Xmm& r, const Xmm& s) {
    constexpr uint8_t kInfClass = 0x18;  // vfpclassps: +inf | -inf
    vmovups(r, cst(1.0f));
    vdivps(r, r, s);
    if (avx512()) {
      vfpclassps(k2, r, kInfClass);
      vmovups(r | k2, cst_bits(0x7FC00000));
    } else {
      vandps(vmm(13), r, cst_bits(0x7FFFFFFF));
      vcmpps(vmm(13), vmm(13), cst_bits(0x7F800000), 0 /* equal */);
      vblendvps(r, r, cst_bits(0x7FC00000), vmm(13));
    }
  }

  // x = x/s as fp32 for `count` values of `dtype` at `addr`, as the fp8 `format` encoder will
  // see it: x·r, or the division when a lane is near a rounding midpoint (see above). Uses
  // vmm13..15 (and k2, k3 on AVX-512).
  void load_scaled(const Xmm& x, DType dtype, const RegExp& addr, int count, const Xmm& scale,
                   const Xmm& recip, DType format) {
    const int dropped = 23 - (format == DType::kFp8E5m2 ? 2 : 3);
    const uint32_t min_normal = format == DType::kFp8E5m2 ? 113u << 23 : 121u << 23;
    const uint32_t low = (1u << dropped) - 1, half_minus = (1u << (dropped - 1)) - kNearUlps;
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

  // Quantises `elements` values of `dtype` at [src] into fp8 codes at [dst] (dst, src
  // advanced): code = fp8(x / scale), through load_scaled (`recip` = scale_reciprocal(scale)).
  void quantise_span(const Reg64& dst, const Reg64& src, int64_t elements, DType dtype,
                     DType format, const Xmm& scale, const Xmm& recip) {
    const int esize = int(dtype_size(dtype));
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
  // src advanced): rnd_T(decode(code) * scale), the product in fp32 (spec §1.3). One vector
  // per unit; the helpers' scratch (vmm13..15) serialises the steps, out-of-order execution
  // overlaps the units.
  void dequantise_span(const Reg64& dst, const Reg64& src, int64_t elements, DType format,
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
    mov(reg_args_, rdi);
    mov(reg_row_, rsi);
    mov(reg_row_end_, rdx);
    mov(reg_slots_, ptr[rdi + slots_offset]);
    Label l_token, l_next, l_done;
    L(l_token);
    cmp(reg_row_, reg_row_end_);
    jge(l_done, T_NEAR);
    every_row(l_next);
    mov(rax, ptr[reg_slots_ + reg_row_ * 8]);
    test(rax, rax);
    js(l_next, T_NEAR);  // padding
    if ((block_size & (block_size - 1)) == 0) {
      mov(rcx, rax);
      and_(rcx, block_size - 1);
      shr(rax, std::countr_zero(uint64_t(block_size)));
    } else {
      xor_(edx, edx);
      mov(rcx, block_size);
      div(rcx);  // rax = slot / BS, rdx = slot % BS (slot >= 0)
      mov(rcx, rdx);
    }
    token();
    L(l_next);
    inc(reg_row_);
    jmp(l_token, T_NEAR);
    L(l_done);
  }

  // The row loop of the gathers (GatherCallArgs): for rows with src_offsets[row] >= 0,
  // reg_src_ = src + src_offsets[row] and reg_dst_ = dst + row * dst_row_stride, then `row()`
  // (which may clobber every scratch register but the loop's).
  template <class Row>
  void gather_loop(Row row) {
    mov(reg_args_, rdi);
    mov(reg_row_, rsi);
    mov(reg_row_end_, rdx);
    mov(reg_slots_, ptr[rdi + offsetof(GatherCallArgs, src_offsets)]);
    Label l_row, l_next, l_done;
    L(l_row);
    cmp(reg_row_, reg_row_end_);
    jge(l_done, T_NEAR);
    mov(reg_src_, ptr[reg_slots_ + reg_row_ * 8]);
    test(reg_src_, reg_src_);
    js(l_next, T_NEAR);  // a skipped row
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

  // ---- rotary_embedding's rotation (Generator::rotate_pair) of rows whose cos/sin table has
  // the operands' type (no rounding of c, s needed). Vector registers 0..7, and the hoisted
  // cos/sin from kHoistedCosSin (AVX-512 only: 16..31).
  struct RopeShape {
    DType dtype;
    int64_t rot_dim;
    ir::RopeStyle style;
  };
  static constexpr int kHoistedCosSin = 16;

  int cos_sin_vectors(const RopeShape& r) const {
    return int((r.rot_dim / 2 + lanes() - 1) / lanes());
  }
  // Whether a token's cos/sin fit in registers 16..31 (then load_cos_sin once per token).
  bool can_hoist_cos_sin(const RopeShape& r) const {
    return avx512() && 2 * cos_sin_vectors(r) <= 16;
  }

  // cos/sin vector v of the row at [cs]: into c, s (or the hoisted pair when `hoist`).
  void load_cos_sin(const RopeShape& r, const Reg64& cs, int v, const Xmm& c, const Xmm& s) {
    const int esize = int(dtype_size(r.dtype));
    const int64_t half = r.rot_dim / 2, j = int64_t(v) * lanes();
    const int count = int(std::min<int64_t>(lanes(), half - j));
    load_f32(c, r.dtype, cs + int(j * esize), count);
    load_f32(s, r.dtype, cs + int((half + j) * esize), count);
  }
  void hoist_cos_sin(const RopeShape& r, const Reg64& cs) {
    for (int v = 0; v < cos_sin_vectors(r); ++v) {
      load_cos_sin(r, cs, v, vmm(kHoistedCosSin + 2 * v), vmm(kHoistedCosSin + 2 * v + 1));
    }
  }

  // The rot_dim values at [row] rotated in place (NeoX halves or GPT-J pairs) with the cos/sin
  // row at [cs], or the hoisted registers when `hoisted`.
  void rotate_row(const RopeShape& r, const Reg64& row, const Reg64& cs, bool hoisted) {
    constexpr int kX = 0, kY = 1, kC = 2, kS = 3, kA = 4, kB = 5, kT0 = 6, kT1 = 7;
    const int esize = int(dtype_size(r.dtype));
    const int64_t half = r.rot_dim / 2;
    const bool neox = r.style == ir::RopeStyle::kNeox;
    for (int64_t j = 0; j < half; j += lanes()) {
      const int count = int(std::min<int64_t>(lanes(), half - j));
      const int v = int(j / lanes());
      const Xmm x = vmm(kX), y = vmm(kY);
      Xmm c = vmm(kC), s = vmm(kS);
      if (hoisted) {
        c = vmm(kHoistedCosSin + 2 * v);
        s = vmm(kHoistedCosSin + 2 * v + 1);
      } else {
        load_cos_sin(r, cs, v, c, s);
      }
      if (neox) {
        load_f32(x, r.dtype, row + int(j * esize), count);
        load_f32(y, r.dtype, row + int((half + j) * esize), count);
      } else {
        load_pairs(x, y, vmm(kT0), vmm(kT1), r.dtype, row + int(2 * j * esize), count);
      }
      rotate_pair(x, y, c, s, vmm(kA), vmm(kB), r.dtype);
      if (neox) {
        store_f32(x, r.dtype, row + int(j * esize), count);
        store_f32(y, r.dtype, row + int((half + j) * esize), count);
      } else {
        store_pairs(x, y, vmm(kT0), vmm(kT1), r.dtype, row + int(2 * j * esize), count);
      }
    }
  }

  // reg_src_ = src + row * row_stride for the operand whose pointer/stride are at `data`,
  // `stride` in the args.
  void load_row(size_t data, size_t stride) {
    mov(reg_src_, ptr[reg_args_ + stride]);
    imul(reg_src_, reg_row_);
    add(reg_src_, ptr[reg_args_ + data]);
  }

  const Reg64 reg_args_ = rbx, reg_row_ = r12, reg_row_end_ = r13, reg_slots_ = rbp;
  const Reg64 reg_src_ = r8, reg_dst_ = r9, reg_heads_ = r10, reg_p_ = r11, reg_q_ = r14;
  const Reg64 reg_count_ = r15, reg_offset_ = rsi, reg_scale_ = rdx, reg_o_ = rdi;
};

}  // namespace jit::codegen::x86
