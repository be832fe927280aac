// rotary_embedding's rotation of one head, shared by the rope kernel and the fused cache writers
// (rotary_embedding_and_cache_flash, concat_and_cache_mla_rope_fused).
//
// With the token's cos/sin row c_j = cache[p, j], s_j = cache[p, E + j], E = rot_dim/2, and
// for j < E:
//   NeoX:  (x, y) = (h[j], h[E + j]);   GPT-J: (x, y) = (h[2j], h[2j + 1])
//   x' = rnd_T(rnd_T(x c) - rnd_T(y s)),  y' = rnd_T(rnd_T(y c) + rnd_T(x s))
// with c, s rounded to T first (the classic kernel reads the cache as T). Products are not
// fused into FMAs: each is rounded, as the contract says. Vectorised over j; GPT-J pairs are
// split into even/odd lanes and interleaved back on store.
//
// bf16 on AVX-512 (the pairs path): a dword of the row holds two bf16, so one shift and one and
// give both as fp32 (NeoX: elements 2i and 2i+1 of each half, with the cos/sin row split the
// same way; GPT-J: x and y of pair i directly), every rounding is done on the fp32 bits and the
// halves are packed back with a shift and a vpternlogd (Generator's bf16 pairs helpers). That
// is ~30% fewer uops than widening with vpmovzxwd and rounding with vcvtneps2bf16 (2 cycles per
// vector here, plus a denormal guard per product), and the constants stay in registers
// (llvm-mca, Sapphire Rapids: 108 -> 49 cycles per 128-wide NeoX head; docs/decisions.md).
// AVX2 has no registers for the token's cos/sin or the constants: its pairs path
// (rotate_rope_head_ymm_pairs, bf16 rows with a bf16 cos/sin table) reads them per head from
// the row at [cs], 16 elements of each half per NeoX step, 8 pairs per GPT-J step.
#include <algorithm>

#include "codegen/x86/generator.h"

namespace jit::codegen::x86 {
namespace {

// Work registers of one step, and the first hoisted cos/sin register (AVX-512: 16..31).
constexpr int kX = 0, kY = 1, kC = 2, kS = 3, kA = 4, kB = 5, kT0 = 6, kT1 = 7;
constexpr int kHoisted = 16;
// Elements of a half per NeoX pairs vector (32 bf16 = 16 dwords; AVX2: 16 = 8 dwords).
constexpr int64_t kPairs = 32, kYmmPairs = 16;

// Steps of a head's rotation (vectors of each half, or of pairs) emitted in line up to this
// count: every rot_dim up to 256 at every level (AVX2 f32: 16 vectors of 8). Longer rotations
// loop over one step's code (Generator::emit_steps): unrolled, bf16 rotations of rot_dim ~850-2300
// (by op and level; the IR allows 4096) outgrew the 128 KiB code buffer.
constexpr int64_t kMaxUnrolledRopeSteps = 16;

// Hoisted registers the token's cos/sin take: 4 per pairs vector (c even/odd, s even/odd) on
// the NeoX pairs path, else 2 per fp32 vector of E lanes.
int hoisted_registers(int64_t half, int lanes, bool neox_pairs) {
  return neox_pairs ? int(4 * (half / kPairs)) : int(2 * ((half + lanes - 1) / lanes));
}

}  // namespace

Generator::RopeRotation Generator::plan_rope(DType dtype, DType cache_dtype, int64_t rot_dim,
                                             ir::RopeStyle style,
                                             std::array<int, 4> constant_regs) const {
  RopeRotation r{dtype, cache_dtype, rot_dim, style, constant_regs};
  const int64_t half = rot_dim / 2;
  const bool neox = style == ir::RopeStyle::kNeox;
  r.hoisted = avx512() && kHoisted + hoisted_registers(half, lanes(), false) <= 32;
  // The pairs path: bf16 rows in whole pairs vectors (NeoX also needs a bf16 table, loaded as
  // pairs; GPT-J takes the hoisted fp32 cos/sin), with the constants clear of the hoisted ones.
  if (!avx512() && dtype == DType::kBF16) {
    r.pairs = cache_dtype == DType::kBF16 && half % (neox ? kYmmPairs : kYmmPairs / 2) == 0;
  } else if (avx512() && dtype == DType::kBF16) {
    const bool shape_fits =
        neox ? cache_dtype == DType::kBF16 && half % kPairs == 0 : r.hoisted && half % lanes() == 0;
    const int end = kHoisted + hoisted_registers(half, lanes(), neox);
    const bool constants_clear =
        std::none_of(constant_regs.begin(), constant_regs.end(),
                     [&](int reg) { return reg >= kHoisted && reg < end; });
    r.pairs = shape_fits && end <= 32 && constants_clear;
  }
  return r;
}

bool Generator::pins_rope_constants(const RopeRotation& r) const {
  if (!r.pairs) return false;
  if (avx512()) return true;
  // AVX2: where the caller's registers are clear of the pairs step's (0..7, 13, 14): the rope
  // kernel's 8..11; the fused writers' 28..31 exist only on AVX-512.
  return std::all_of(r.constant_regs.begin(), r.constant_regs.end(),
                     [](int reg) { return reg >= 8 && reg <= 12; });
}

void Generator::begin_rope_token(const RopeRotation& r, const Reg64& cs) {
  const int64_t half = r.rot_dim / 2;
  const int cache_esize = int(dtype_size(r.cache_dtype));
  if (r.pairs && avx512() && r.style == ir::RopeStyle::kNeox) {
    // The cos/sin row as pairs (bf16 table: exact, nothing to round).
    for (int b = 0; b < half / kPairs; ++b) {
      for (int k = 0; k < 2; ++k) {  // cos, sin
        const Xmm even = vmm(kHoisted + 4 * b + 2 * k), odd = vmm(kHoisted + 4 * b + 2 * k + 1);
        vmovdqu32(odd, ptr[cs + (k * half + b * kPairs) * 2]);
        split_bf16_pairs(even, odd, odd);
      }
    }
  } else if (r.hoisted) {
    // The cos/sin row, rounded to T once, for all the token's heads.
    for (int64_t j = 0; j < half; j += lanes()) {
      const int v = int(j / lanes()), count = int(std::min<int64_t>(lanes(), half - j));
      const Xmm c = vmm(kHoisted + 2 * v), s = vmm(kHoisted + 2 * v + 1);
      load_f32(c, r.cache_dtype, cs + int(j * cache_esize), count);
      load_f32(s, r.cache_dtype, cs + int((half + j) * cache_esize), count);
      if (r.cache_dtype != r.dtype) {
        round_to(c, r.dtype);
        round_to(s, r.dtype);
      }
    }
  }
  if (pins_rope_constants(r)) pin_constants(kBf16PairsConstants, r.constant_regs);
}

void Generator::end_rope_token(const RopeRotation& r) {
  if (pins_rope_constants(r)) unpin_constants();
}

void Generator::rotate_rope_head_ymm_pairs(const RopeRotation& r, const Reg64& head,
                                           const Reg64& cs) {
  const int64_t half = r.rot_dim / 2;
  const Xmm xe = vmm(kX), xo = vmm(kY), ye = vmm(kC), yo = vmm(kS), a = vmm(kA), b = vmm(kB);
  const Xmm c = vmm(13), s = vmm(14);  // the helpers' scratch: no helper runs in between
  if (r.style == ir::RopeStyle::kNeox) {
    const Xmm c_row = vmm(kT0), s_row = vmm(kT1);  // 16 bf16 of cos / sin, split twice
    // rax counts a long rotation's loop: no step touches a general register but head and cs
    // (whole vectors: no tail staging or mask), and no caller holds rax across a rotation.
    emit_steps(half / kYmmPairs, kMaxUnrolledRopeSteps, rax,
               {{head, kYmmPairs * 2}, {cs, kYmmPairs * 2}}, [&](int64_t step) {
                 const int64_t j = step * kYmmPairs;  // per 16 elements of each half
                 const auto x_at = ptr[head + j * 2], y_at = ptr[head + (half + j) * 2];
                 vmovdqu(xo, x_at);
                 split_bf16_pairs(xe, xo, xo);
                 vmovdqu(yo, y_at);
                 split_bf16_pairs(ye, yo, yo);
                 vmovdqu(c_row, ptr[cs + j * 2]);
                 vmovdqu(s_row, ptr[cs + (half + j) * 2]);
                 vpslld(c, c_row, 16);  // the even halves
                 vpslld(s, s_row, 16);
                 rotate_pair(xe, ye, c, s, a, b, r.dtype, /*on_bits=*/true);
                 vpand(c, c_row, cst_bits(0xFFFF0000));  // the odd halves (rotate_pair clobbered c)
                 vpand(s, s_row, cst_bits(0xFFFF0000));
                 rotate_pair(xo, yo, c, s, a, b, r.dtype, /*on_bits=*/true);
                 pack_bf16_pairs(xo, xe, a);
                 vmovdqu(x_at, xo);
                 pack_bf16_pairs(yo, ye, a);
                 vmovdqu(y_at, yo);
               });
    return;
  }
  emit_steps(half / (kYmmPairs / 2), kMaxUnrolledRopeSteps, rax,
             {{head, kYmmPairs * 2}, {cs, kYmmPairs}}, [&](int64_t step) {
               const int64_t j = step * (kYmmPairs / 2);  // GPT-J: per 8 (x, y) pairs
               const auto at = ptr[head + j * 4];         // pair j = elements 2j, 2j + 1
               vmovdqu(xo, at);
               split_bf16_pairs(xe, xo, xo);  // xe = x, xo = y
               vpmovzxwd(c, ptr[cs + j * 2]);
               vpslld(c, c, 16);
               vpmovzxwd(s, ptr[cs + (half + j) * 2]);
               vpslld(s, s, 16);
               rotate_pair(xe, xo, c, s, a, b, r.dtype, /*on_bits=*/true);
               pack_bf16_pairs(xo, xe, a);
               vmovdqu(at, xo);
             });
}

void Generator::rotate_rope_head(const RopeRotation& r, const Reg64& head, const Reg64& cs) {
  const int64_t half = r.rot_dim / 2;
  const bool neox = r.style == ir::RopeStyle::kNeox;
  if (r.pairs && !avx512()) {
    rotate_rope_head_ymm_pairs(r, head, cs);
    return;
  }
  if (r.pairs) {
    const Xmm xe = vmm(kX), xo = vmm(kY), ye = vmm(kC), yo = vmm(kS);
    if (neox) {  // per 32 elements of each half: x pairs, y pairs
      for (int64_t j = 0; j < half; j += kPairs) {
        const int b = int(j / kPairs);
        const auto x_at = ptr[head + j * 2], y_at = ptr[head + (half + j) * 2];
        vmovdqu32(xo, x_at);
        split_bf16_pairs(xe, xo, xo);
        vmovdqu32(yo, y_at);
        split_bf16_pairs(ye, yo, yo);
        rotate_pair(xe, ye, vmm(kHoisted + 4 * b), vmm(kHoisted + 4 * b + 2), vmm(kA), vmm(kB),
                    r.dtype, /*on_bits=*/true);
        rotate_pair(xo, yo, vmm(kHoisted + 4 * b + 1), vmm(kHoisted + 4 * b + 3), vmm(kA), vmm(kB),
                    r.dtype, /*on_bits=*/true);
        pack_bf16_pairs(xo, xe, k2);
        vmovdqu32(x_at, xo);
        pack_bf16_pairs(yo, ye, k2);
        vmovdqu32(y_at, yo);
      }
      return;
    }
    for (int64_t j = 0; j < half; j += lanes()) {  // GPT-J: per 16 (x, y) pairs
      const int v = int(j / lanes());
      const auto at = ptr[head + j * 4];  // pair j = elements 2j, 2j + 1
      vmovdqu32(xo, at);
      split_bf16_pairs(xe, xo, xo);  // xe = x, xo = y
      rotate_pair(xe, xo, vmm(kHoisted + 2 * v), vmm(kHoisted + 2 * v + 1), vmm(kA), vmm(kB),
                  r.dtype, /*on_bits=*/true);
      pack_bf16_pairs(xo, xe, k2);
      vmovdqu32(at, xo);
    }
    return;
  }
  const int esize = int(dtype_size(r.dtype)), cache_esize = int(dtype_size(r.cache_dtype));
  // Vector v of each half (elements j = v·lanes ..), `count` of them.
  const auto step = [&](int64_t v_index, int count) {
    const int64_t j = v_index * lanes();
    const int v = int(v_index);
    const Xmm x = vmm(kX), y = vmm(kY);
    Xmm c = vmm(kC), s = vmm(kS);
    if (r.hoisted) {
      c = vmm(kHoisted + 2 * v);
      s = vmm(kHoisted + 2 * v + 1);
    } else {
      load_f32(c, r.cache_dtype, cs + int(j * cache_esize), count);
      load_f32(s, r.cache_dtype, cs + int((half + j) * cache_esize), count);
      if (r.cache_dtype != r.dtype) {
        round_to(c, r.dtype);
        round_to(s, r.dtype);
      }
    }
    if (neox) {
      load_f32(x, r.dtype, head + int(j * esize), count);
      load_f32(y, r.dtype, head + int((half + j) * esize), count);
    } else {
      load_pairs(x, y, vmm(kT0), vmm(kT1), r.dtype, head + int(2 * j * esize), count);
    }
    // bf16 on AVX-512: the roundings on the bits here too (exact: x, y, c, s are bf16 values,
    // so every NaN has a zero low half), not vcvtneps2bf16 behind a denormal guard.
    rotate_pair(x, y, c, s, vmm(kA), vmm(kB), r.dtype, avx512() && r.dtype == DType::kBF16);
    if (neox) {
      store_f32(x, r.dtype, head + int(j * esize), count);
      store_f32(y, r.dtype, head + int((half + j) * esize), count);
    } else {
      store_pairs(x, y, vmm(kT0), vmm(kT1), r.dtype, head + int(2 * j * esize), count);
    }
  };
  // A whole vector per step: x (NeoX) or the pairs (GPT-J) and the cos/sin row move on (rax
  // counting, as above); a hoisted rotation (at most 8 vectors) stays in line. The tail after.
  const int64_t whole = half / lanes();
  const int tail = int(half % lanes());
  const int head_bytes = lanes() * esize * (neox ? 1 : 2);
  emit_steps(whole, r.hoisted ? whole : kMaxUnrolledRopeSteps, rax,
             {{head, head_bytes}, {cs, lanes() * cache_esize}},
             [&](int64_t v) { step(v, lanes()); });
  if (tail > 0) step(whole, tail);
}

}  // namespace jit::codegen::x86
