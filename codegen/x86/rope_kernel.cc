// rotary_embedding, in place on query (and key).
//
// Per token t with position p, cache row c_j = cache[p, j], s_j = cache[p, E + j], E = rot_dim/2,
// and per head h (query heads, then key heads), for j < E:
//   NeoX:  (x, y) = (h[j], h[E + j]);   GPT-J: (x, y) = (h[2j], h[2j + 1])
//   x' = rnd_T(rnd_T(x c) - rnd_T(y s)),  y' = rnd_T(rnd_T(y c) + rnd_T(x s))
// with c, s rounded to T first (the classic kernel reads the cache as T). Products are not
// fused into FMAs: each is rounded, as the contract says. Elements rot_dim..D-1 are untouched.
// Vectorised over j; GPT-J pairs are split into even/odd lanes and interleaved back on store.
//
// bf16 on AVX-512 (the pairs path): a dword of the row holds two bf16, so one shift and one and
// give both as fp32 (NeoX: elements 2i and 2i+1 of each half, with the cos/sin row split the
// same way; GPT-J: x and y of pair i directly), every rounding is done on the fp32 bits and the
// halves are packed back with a shift and a vpternlogd (Generator's bf16 pairs helpers). That
// is ~30% fewer uops than widening with vpmovzxwd and rounding with vcvtneps2bf16 (2 cycles per
// vector here, plus a denormal guard per product), and the loop's constants stay in registers.
#include <array>
#include <cstddef>

#include "codegen/x86/generator.h"
#include "codegen/x86/kernels.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;

class RopeGenerator : public Generator {
 public:
  RopeGenerator(X86Isa isa, const ir::RopeParams& p)
      : Generator(isa),
        p_(p),
        esize_(int(dtype_size(p.dtype))),
        cache_esize_(int(dtype_size(p.cache_dtype))),
        hoist_cache_(avx512() && kHoisted + 2 * cache_vectors() <= 32),
        pairs_(pairs_path()) {}

  void generate() {
    prologue();
    mov(reg_positions_, ptr[rdi + offsetof(RopeCallArgs, positions)]);
    mov(reg_cache_, ptr[rdi + offsetof(RopeCallArgs, cos_sin_cache)]);
    mov(reg_row_, rsi);
    mov(reg_row_end_, rdx);
    mov(reg_args_, rdi);

    Label l_token, l_done;
    L(l_token);
    cmp(reg_row_, reg_row_end_);
    jge(l_done, T_NEAR);
    // reg_cache_row_ = cache + positions[t] * rot_dim * cache element size
    mov(reg_cache_row_, ptr[reg_positions_ + reg_row_ * 8]);
    imul(reg_cache_row_, reg_cache_row_, p_.rot_dim * cache_esize_);
    add(reg_cache_row_, reg_cache_);
    if (pairs_ && neox()) {
      // The token's cos/sin as pairs (bf16 cache: exact, nothing to round), in registers for
      // all its heads.
      for (int b = 0; b < half() / kPairs; ++b) {
        for (int k = 0; k < 2; ++k) {  // cos, sin
          const Xmm even = vmm(kHoisted + 4 * b + 2 * k), odd = vmm(kHoisted + 4 * b + 2 * k + 1);
          vmovdqu32(odd, ptr[reg_cache_row_ + (k * half() + b * kPairs) * 2]);
          split_bf16_pairs(even, odd, odd);
        }
      }
    } else if (hoist_cache_) {
      // The token's cos/sin, rounded to T once and kept in registers for all its heads.
      for (int v = 0; v < cache_vectors(); ++v)
        load_cache_vector(v, vmm(kHoisted + 2 * v), vmm(kHoisted + 2 * v + 1));
    }
    rotate_operand(offsetof(RopeCallArgs, query), offsetof(RopeCallArgs, query_token_stride),
                   offsetof(RopeCallArgs, query_head_stride), p_.head_count_q);
    if (p_.key) {
      rotate_operand(offsetof(RopeCallArgs, key), offsetof(RopeCallArgs, key_token_stride),
                     offsetof(RopeCallArgs, key_head_stride), p_.head_count_kv);
    }
    inc(reg_row_);
    jmp(l_token, T_NEAR);
    L(l_done);
    epilogue();
  }

 private:
  // Vector registers: operands, cache values, products; hoisted cos/sin from kHoisted on
  // (AVX-512 only: 16..31).
  static constexpr int kX = 0, kY = 1, kC = 2, kS = 3, kA = 4, kB = 5, kT0 = 6, kT1 = 7;
  static constexpr int kHoisted = 16;

  // Rotates every head of one operand of token reg_row_.
  void rotate_operand(size_t data_offset, size_t token_stride_offset, size_t head_stride_offset,
                      int64_t heads) {
    // reg_head_ = data + t * token_stride; reg_head_stride_ = head stride (bytes)
    mov(reg_head_, ptr[reg_args_ + token_stride_offset]);
    imul(reg_head_, reg_row_);
    add(reg_head_, ptr[reg_args_ + data_offset]);
    mov(reg_head_stride_, ptr[reg_args_ + head_stride_offset]);
    mov(reg_heads_left_, heads);
    if (pairs_) pin_constants(kBf16PairsConstants, kConstantRegs);
    Label l_head;
    L(l_head);
    if (pairs_) {
      rotate_head_pairs();
    } else {
      rotate_head();
    }
    add(reg_head_, reg_head_stride_);
    dec(reg_heads_left_);
    jnz(l_head, T_NEAR);
    if (pairs_) unpin_constants();
  }

  // ---- The bf16 pairs path (see the file comment).
  static constexpr int64_t kPairs = 32;  // elements of a half per pairs vector (NeoX)
  static constexpr std::array<int, 4> kConstantRegs{8, 9, 10, 11};
  int64_t half() const { return p_.rot_dim / 2; }
  bool neox() const { return p_.style == ir::RopeStyle::kNeox; }
  // NeoX needs the halves in whole 32-element vectors and a bf16 cache (loaded as pairs); GPT-J
  // needs whole 16-pair vectors and takes its cos/sin from the hoisted fp32 registers.
  bool pairs_path() const {
    if (!avx512() || p_.dtype != DType::kBF16) return false;
    if (neox()) {
      return p_.cache_dtype == DType::kBF16 && half() % kPairs == 0 &&
             kHoisted + 4 * (half() / kPairs) <= 32;
    }
    return hoist_cache_ && half() % lanes() == 0;
  }

  // One head: NeoX per 32 elements of each half (x pairs, y pairs); GPT-J per 16 (x, y) pairs.
  void rotate_head_pairs() {
    const Xmm xe = vmm(kX), xo = vmm(kY), ye = vmm(kC), yo = vmm(kS);
    if (neox()) {
      for (int64_t j = 0; j < half(); j += kPairs) {
        const int b = int(j / kPairs);
        const auto x_at = ptr[reg_head_ + j * 2], y_at = ptr[reg_head_ + (half() + j) * 2];
        vmovdqu32(xo, x_at);
        split_bf16_pairs(xe, xo, xo);
        vmovdqu32(yo, y_at);
        split_bf16_pairs(ye, yo, yo);
        rotate_pair(xe, ye, vmm(kHoisted + 4 * b), vmm(kHoisted + 4 * b + 2), vmm(kA), vmm(kB),
                    p_.dtype, /*on_bits=*/true);
        rotate_pair(xo, yo, vmm(kHoisted + 4 * b + 1), vmm(kHoisted + 4 * b + 3), vmm(kA), vmm(kB),
                    p_.dtype, /*on_bits=*/true);
        pack_bf16_pairs(xo, xe, k2);
        vmovdqu32(x_at, xo);
        pack_bf16_pairs(yo, ye, k2);
        vmovdqu32(y_at, yo);
      }
      return;
    }
    for (int64_t j = 0; j < half(); j += lanes()) {
      const int v = int(j / lanes());
      const auto at = ptr[reg_head_ + j * 4];  // pair j = elements 2j, 2j + 1
      vmovdqu32(xo, at);
      split_bf16_pairs(xe, xo, xo);  // xe = x, xo = y
      rotate_pair(xe, xo, vmm(kHoisted + 2 * v), vmm(kHoisted + 2 * v + 1), vmm(kA), vmm(kB),
                  p_.dtype, /*on_bits=*/true);
      pack_bf16_pairs(xo, xe, k2);
      vmovdqu32(at, xo);
    }
  }

  // Vectors of E pairs, and whether their cos/sin fit in registers (kHoisted.. up to the
  // last register of the ISA) so that each token loads and rounds them once.
  int cache_vectors() const { return int((p_.rot_dim / 2 + lanes() - 1) / lanes()); }

  void load_cache_vector(int v, const Xmm& c, const Xmm& s) {
    const int64_t half = p_.rot_dim / 2, j = int64_t(v) * lanes();
    const int count = int(std::min<int64_t>(lanes(), half - j));
    load_f32(c, p_.cache_dtype, reg_cache_row_ + j * cache_esize_, count);
    load_f32(s, p_.cache_dtype, reg_cache_row_ + (half + j) * cache_esize_, count);
    round_to(c, p_.dtype);
    round_to(s, p_.dtype);
  }

  // The rotated prefix of one head at reg_head_, E pairs, vectors at constant offsets.
  void rotate_head() {
    const int64_t half = p_.rot_dim / 2;
    for (int64_t j = 0; j < half; j += lanes()) {
      const int count = int(std::min<int64_t>(lanes(), half - j));
      const int v = int(j / lanes());
      const Xmm x = vmm(kX), y = vmm(kY);
      Xmm c = vmm(kC), s = vmm(kS);
      if (hoist_cache_) {
        c = vmm(kHoisted + 2 * v);
        s = vmm(kHoisted + 2 * v + 1);
      } else {
        load_cache_vector(v, c, s);
      }
      const bool neox = p_.style == ir::RopeStyle::kNeox;
      if (neox) {
        load_f32(x, p_.dtype, reg_head_ + j * esize_, count);
        load_f32(y, p_.dtype, reg_head_ + (half + j) * esize_, count);
      } else {
        load_pairs(x, y, vmm(kT0), vmm(kT1), p_.dtype, reg_head_ + 2 * j * esize_, count);
      }
      rotate_pair(x, y, c, s, vmm(kA), vmm(kB), p_.dtype);
      if (neox) {
        store_f32(x, p_.dtype, reg_head_ + j * esize_, count);
        store_f32(y, p_.dtype, reg_head_ + (half + j) * esize_, count);
      } else {
        store_pairs(x, y, vmm(kT0), vmm(kT1), p_.dtype, reg_head_ + 2 * j * esize_, count);
      }
    }
  }

  const ir::RopeParams p_;
  const int esize_;
  const int cache_esize_;
  const bool hoist_cache_;
  const bool pairs_;  // pairs_path(), fixed at construction
  const Reg64 reg_positions_ = r8, reg_cache_ = r9, reg_cache_row_ = r10, reg_args_ = r11;
  const Reg64 reg_row_ = r12, reg_row_end_ = r13, reg_head_ = r14, reg_head_stride_ = r15;
  const Reg64 reg_heads_left_ = rbx;
};

}  // namespace

Result<std::vector<uint8_t>> generate_rope(const OpSpec& spec, X86Isa isa) {
  RopeGenerator gen(isa, spec.get<ir::RopeParams>());
  gen.generate();
  return gen.finish();
}

}  // namespace jit::codegen::x86
