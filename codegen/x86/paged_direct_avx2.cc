// The direct kernel of paged_attention_v1 / v2 at the AVX2 level (attention_kernel.h,
// PagedDirectArgs): the AVX-512 kernel's plan (paged_direct.cc) on 16 ymm registers, for bf16
// and f16 elements read from the legacy layout (key [NB, H, D/8, BS, 8], value [NB, H, D, BS])
// or from the runner's stage. The text below describes bf16; f16 differs in its widening (see
// "f16" at the end). Same arguments, same probabilities buffer (groups x rows x 32 fp32) and
// accumulator layout (acc[dim][R'], R' the rows rounded up to 1, 2, 4 or 8), so the runner is
// shared; only the register tiles differ.
//
// Q·Kᵀ, keys in lanes, a quarter (8 keys) at a time. A quarter's key run of 8 dims is
// [8 tokens][8 dims]: four 32-byte rows of 2 tokens, one per 128-bit lane, each 4 dwords (dims
// 2i, 2i + 1). Two rounds of in-lane unpacks (vpunpckl/hdq, then vpunpckl/hqdq) transpose the
// 4 x 4 dwords of both lanes, so vector j holds dword j of the 8 tokens, lane i token tau(i) =
// 0, 2, 4, 6, 1, 3, 5, 7: dims 2j and 2j + 1, taken apart by parity (word << 16 and
// word & 0xFFFF0000). Each dim vector meets every row's query by a broadcast and an FMA:
//   S[r][quarter] += K[d][8 keys] * q[r][d]
// Accumulators R' x Q <= 8 (Q quarters per pass over the dims: 4 for 1 or 2 rows, 2 for 4, 1 for
// 8); a group of 32 keys takes 4 / Q passes, each reading its quarters' key runs.
//
// Softmax as at AVX-512, over the chunk's logits in memory; the probabilities of a half are
// written as P_e (its 8 even keys in order: the low lanes of its two quarters, one vperm2f128)
// and P_o (the high lanes).
//
// P·V, keys in lanes: a value row of a half (16 keys, one 32-byte load) taken apart by parity
// gives V[d][even keys] and V[d][odd keys], which meet P_e[r] and P_o[r] in 8-lane partial
// sums: A[d][r] += V_e·P_e + V_o·P_o. Eight accumulators (8 / R' dims x R' rows) walk the whole
// chunk, then three rounds of unpacks and adds (21 ops) sum each to one lane, in order, and
// acc[d][r] = α_r·acc[d][r] + Σ.
//
// f16. The key rows are transposed by words instead (vpunpckl/hwd, then vpunpckl/hdq): vector j
// then holds, per 128-bit lane, dim 2j of that lane's 4 tokens in its low quadword and dim
// 2j + 1 in its high one; a vpermq gathers each dim's two quadwords into one 128-bit half (lane
// order tau again) for vcvtph2ps. A value row's two 8-key halves are converted as they are, so
// the probabilities of a half are written in key order (one vpermps per quarter) instead of by
// parity.
#include <xbyak/xbyak.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>

#include "codegen/x86/attention_kernel.h"
#include "codegen/x86/generator.h"
#include "codegen/x86/paged_direct_generator.h"
#include "ir/params_attention.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;
using namespace Xbyak::util;

#define ARG(field) (rdi + int(offsetof(PagedDirectArgs, field)))

constexpr int kGroup = kPagedDirectGroup;  // 4 quarters
constexpr int kQuarter = 8;                // keys per ymm of logits
constexpr int kRowBytes = kPagedDirectRowBytes;
constexpr int kQuarterRunBytes = kQuarter * 8 * 2;  // a quarter's 8 tokens x 8 16-bit dims

// Lane i of a transposed quarter holds token tau(i) of the quarter.
constexpr int tau(int i) {
  return i < 4 ? 2 * i : 2 * (i - 4) + 1;
}

class PagedDirectAvx2Generator : public PagedDirectGeneratorBase {
 public:
  PagedDirectAvx2Generator(const ir::PagedAttentionParams& p, bool contiguous,
                           const std::vector<int>& row_counts, X86Isa isa)
      : PagedDirectGeneratorBase(p, contiguous, row_counts, isa) {}

 private:
  void emit_variant(int rows) override {
    const std::array<uint32_t, 1> odd_mask{0xFFFF0000u};  // split_bf16_pairs' constant
    const std::array<int, 1> odd_mask_reg{15};
    if (!f16_) pin_constants(odd_mask, odd_mask_reg);
    emit_qk(rows);
    unpin_constants();  // the softmax's exp reads its own constants
    emit_softmax(rows);
    if (!f16_) pin_constants(odd_mask, odd_mask_reg);
    emit_pv(rows);
    unpin_constants();
  }

  // ---- Q·Kᵀ ----------------------------------------------------------------------------------
  // GPRs: r12 half-pointer cursor, r13 tokens, r14 first key of the group, r15 logits cursor,
  // r8 / r9 the halves' key runs, r10 query cursor, r11 dim-run counter, rax / rcx the next
  // group's key runs (prefetch), rsi / rdx this group's value rows (prefetch); the prefetches
  // are the first pass's, and its mask check reuses rax after them.
  // ymm: S[r][i] = ymm(r · Q + i) (0..7); 8..13 a quarter's key rows, transposed in place, and
  // its even and odd dims; 14 a query element; 15 the odd mask (pinned).
  void emit_qk(int rows) {
    const int d = int(p_.head_size);
    const int row_pad = int(paged_direct_row_pad(rows));
    const int per_pass = std::min(4, 8 / row_pad);  // quarters per pass over the dims (Q)
    const auto s_reg = [&](int r, int i) { return Ymm(r * per_pass + i); };
    begin_group_walk();
    Label l_group;
    L(l_group);
    // The next group's key runs (prefetched into L1) and this group's value rows (into L2, for
    // P·V, which walks them a few dims at a time), by the first pass.
    load_prefetch_cursors();
    for (int pass = 0; pass < 4 / per_pass; ++pass) {
      Label l_dims, l_full;
      mov(r8, ptr[r12]);
      mov(r9, ptr[r12 + 8]);
      mov(r10, ptr[ARG(q)]);
      for (int r = 0; r < rows; ++r) {
        for (int i = 0; i < per_pass; ++i) vxorps(s_reg(r, i), s_reg(r, i), s_reg(r, i));
      }
      mov(r11, d / 8);
      L(l_dims);
      for (int i = 0; i < per_pass; ++i) {
        const int quarter = pass * per_pass + i;
        const Reg64& run = quarter < 2 ? r8 : r9;
        const int offset = (quarter % 2) * kQuarterRunBytes;
        for (int k = 0; k < 4; ++k) vmovdqu(Ymm(8 + k), ptr[run + offset + k * 32]);
        // ymm8..11 = tokens (0, 1), (2, 3), (4, 5), (6, 7). bf16: w[j] = dword j of the 8
        // tokens; f16: dims 2j and 2j + 1 of each lane's 4 tokens.
        if (f16_) {
          vpunpcklwd(ymm12, ymm8, ymm9);
          vpunpckhwd(ymm13, ymm8, ymm9);
          vpunpcklwd(ymm8, ymm10, ymm11);
          vpunpckhwd(ymm9, ymm10, ymm11);
          vpunpckldq(ymm10, ymm12, ymm8);
          vpunpckhdq(ymm11, ymm12, ymm8);
          vpunpckldq(ymm12, ymm13, ymm9);
          vpunpckhdq(ymm8, ymm13, ymm9);
        } else {
          vpunpckldq(ymm12, ymm8, ymm9);
          vpunpckhdq(ymm13, ymm8, ymm9);
          vpunpckldq(ymm8, ymm10, ymm11);
          vpunpckhdq(ymm9, ymm10, ymm11);
          vpunpcklqdq(ymm10, ymm12, ymm8);
          vpunpckhqdq(ymm11, ymm12, ymm8);
          vpunpcklqdq(ymm12, ymm13, ymm9);
          vpunpckhqdq(ymm8, ymm13, ymm9);
        }
        const Ymm w[4] = {ymm10, ymm11, ymm12, ymm8};
        for (int j = 0; j < 4; ++j) {
          // Dim 2j to `even`, dim 2j + 1 to `odd`, fp32 of the 8 tokens in lane order.
          const Ymm even = f16_ ? ymm9 : ymm13, odd = f16_ ? ymm13 : ymm9;
          if (f16_) {
            vpermq(ymm13, w[j], 0xD8);  // quadwords 0, 2, 1, 3: dim 2j low, 2j + 1 high
            vcvtph2ps(even, xmm13);
            vextracti128(xmm13, ymm13, 1);
            vcvtph2ps(odd, xmm13);
          } else {
            split_bf16_pairs(even, odd, w[j]);
          }
          for (int r = 0; r < rows; ++r) {
            vbroadcastss(ymm14, ptr[r10 + (r * d + 2 * j) * 4]);
            vfmadd231ps(s_reg(r, i), even, ymm14);
            vbroadcastss(ymm14, ptr[r10 + (r * d + 2 * j + 1) * 4]);
            vfmadd231ps(s_reg(r, i), odd, ymm14);
          }
        }
      }
      add(r8, k_step_);
      add(r9, k_step_);
      if (pass == 0) {
        for (int h = 0; h < 2; ++h) prefetch_half(h);
      }
      add(r10, 8 * 4);
      dec(r11);
      jnz(l_dims, T_NEAR);

      // s = scale·S (+ slope·(j − L + 1)); −inf at keys >= tokens.
      vbroadcastss(ymm14, ptr[ARG(scale)]);
      for (int r = 0; r < rows; ++r) {
        for (int i = 0; i < per_pass; ++i) vmulps(s_reg(r, i), s_reg(r, i), ymm14);
      }
      vmovd(xmm8, r14d);
      vpbroadcastd(ymm8, xmm8);                              // the group's first key
      const auto key_indices = [&](const Ymm& dst, int i) {  // in the chunk, lane order
        vpaddd(dst, ymm8, key_table(pass * per_pass + i));
      };
      if (p_.alibi) {
        vpbroadcastd(ymm10, ptr[ARG(alibi_offset)]);
        for (int i = 0; i < per_pass; ++i) {
          key_indices(ymm9, i);
          vpaddd(ymm9, ymm9, ymm10);
          vcvtdq2ps(ymm9, ymm9);
          for (int r = 0; r < rows; ++r) {
            vbroadcastss(ymm14, ptr[ARG(slope) + r * 4]);
            vfmadd231ps(s_reg(r, i), ymm9, ymm14);
          }
        }
      }
      lea(rax, ptr[r14 + kGroup]);
      cmp(rax, r13);
      jle(l_full, T_NEAR);
      vmovd(xmm10, r13d);
      vpbroadcastd(ymm10, xmm10);
      vmovups(ymm11, cst(-std::numeric_limits<float>::infinity()));
      for (int i = 0; i < per_pass; ++i) {
        key_indices(ymm9, i);
        vpcmpgtd(ymm9, ymm10, ymm9);  // tokens > j: the key is in the chunk
        for (int r = 0; r < rows; ++r) vblendvps(s_reg(r, i), ymm11, s_reg(r, i), ymm9);
      }
      L(l_full);
      for (int r = 0; r < rows; ++r) {
        for (int i = 0; i < per_pass; ++i) {
          const int quarter = pass * per_pass + i;
          vmovaps(ptr[r15 + r * kRowBytes + quarter * kQuarter * 4], s_reg(r, i));
        }
      }
    }
    next_group(rows, l_group);
  }

  // The key index of each lane of quarter `quarter` of a group: 8 · quarter + tau(lane).
  Address key_table(int quarter) {
    std::array<uint32_t, 16> idx{};
    for (int i = 0; i < 8; ++i) idx[size_t(i)] = uint32_t(kQuarter * quarter + tau(i));
    return cst_table(idx);
  }

  // ---- softmax ------------------------------------------------------------------------------
  // GPRs: rbx groups, r12 the row's logits cursor, r11 group counter. ymm0 m', 1 α, 2 Σ p,
  // 3..6 a group's four quarters, 7..10 exp's temporaries (13..15 are the Generator's), then 7..9
  // the permutes.
  void emit_softmax(int rows) {
    count_groups();
    const Ymm m_new = ymm0, alpha = ymm1, sum = ymm2;
    const Ymm x[4] = {ymm3, ymm4, ymm5, ymm6};
    for (int r = 0; r < rows; ++r) {
      Label l_exp;
      update_row_max(r, rows, m_new, alpha, ymm7, ymm8);  // m' = max(m, max s), α = e^(m − m')
      // p = e^(s − m'); P_e / P_o of each half in place.
      vxorps(sum, sum, sum);
      start_row(r);
      L(l_exp);
      for (int i = 0; i < 4; ++i) {
        vmovaps(x[i], ptr[r12 + i * 32]);
        vsubps(x[i], x[i], m_new);
      }
      // Two quarters at a time: exp_ps's temporaries must avoid ymm13..15.
      exp_ps({x[0], x[1]}, {ymm7, ymm8}, {ymm9, ymm10}, /*bounded=*/true);
      exp_ps({x[2], x[3]}, {ymm7, ymm8}, {ymm9, ymm10}, /*bounded=*/true);
      if (f16_) vmovups(ymm9, key_order_index());
      for (int h = 0; h < 2; ++h) {
        const Ymm& a = x[2 * h];
        const Ymm& b = x[2 * h + 1];
        vaddps(sum, sum, a);
        vaddps(sum, sum, b);
        if (f16_) {
          vpermps(ymm7, ymm9, a);  // keys 0 .. 7 of the half in order
          vpermps(ymm8, ymm9, b);  // keys 8 .. 15
        } else {
          vperm2f128(ymm7, a, b, 0x20);  // keys 0, 2, .., 14 of the half
          vperm2f128(ymm8, a, b, 0x31);  // keys 1, 3, .., 15
        }
        vmovaps(ptr[r12 + h * 64], ymm7);
        vmovaps(ptr[r12 + h * 64 + 32], ymm8);
      }
      add(r12, rows * kRowBytes);
      dec(r11);
      jnz(l_exp, T_NEAR);
      update_row_sum(r, sum, alpha, xmm7);  // l = α·l + Σ p
    }
  }

  // vpermps index: lane t takes the lane of a transposed quarter that holds token t.
  Address key_order_index() {
    std::array<uint32_t, 16> idx{};
    for (int lane = 0; lane < 8; ++lane) idx[size_t(tau(lane))] = uint32_t(lane);
    return cst_table(idx);
  }

  // ---- P·V ----------------------------------------------------------------------------------
  // GPRs: rbx groups, rbp the set's first value row in bytes (dd0 · BS · 2), r14 acc cursor,
  // r12 half-pointer cursor, r15 probabilities cursor, r11 group counter, r8 a half's value
  // rows. ymm0..7 the accumulators (ymm(dd · R' + r)); with 1 or 2 rows 8..11 the half's
  // P_e / P_o of each row and 12 / 13 a value row's even and odd keys; with 4 or 8 rows 8..11
  // the set's (1 or 2) value rows split, the probabilities read as memory operands; 14 the α
  // of each accumulator lane; 15 the odd mask (pinned). f16: "even" and "odd" are the half's
  // keys 0 .. 7 and 8 .. 15, and so are P_e and P_o.
  void emit_pv(int rows) {
    const int row_pad = int(paged_direct_row_pad(rows));
    const int dims = 8 / row_pad;  // dims per set of 8 accumulators
    const Ymm alpha_lanes = ymm14;
    {
      std::array<uint32_t, 16> idx{};
      for (int i = 0; i < 8; ++i) idx[size_t(i)] = uint32_t(i % row_pad);
      vmovups(ymm8, cst_table(idx));
      vpermps(alpha_lanes, ymm8, ptr[ARG(alpha)]);
    }
    const auto acc = [&](int dd, int r) { return Ymm(dd * row_pad + r); };
    const auto p_even = [&](int h, int r) { return ptr[r15 + r * kRowBytes + h * 64]; };
    const auto p_odd = [&](int h, int r) { return ptr[r15 + r * kRowBytes + h * 64 + 32]; };
    // Value row dd of the set (16 keys of a half) as two fp32 vectors.
    const auto split_row = [&](int dd, const Ymm& even, const Ymm& odd) {
      if (f16_) {
        vcvtph2ps(even, ptr[r8 + dd * v_row_]);
        vcvtph2ps(odd, ptr[r8 + dd * v_row_ + 16]);
        return;
      }
      vmovdqu(odd, ptr[r8 + dd * v_row_]);
      split_bf16_pairs(even, odd, odd);
    };
    const auto group_body = [&] {
      for (int h = 0; h < 2; ++h) {
        mov(r8, ptr[r12 + h * 8]);
        add(r8, rbp);
        if (row_pad >= 4) {
          for (int dd = 0; dd < dims; ++dd) {
            split_row(dd, Ymm(8 + 2 * dd), Ymm(9 + 2 * dd));
          }
          for (int r = 0; r < rows; ++r) {
            for (int dd = 0; dd < dims; ++dd) {
              vfmadd231ps(acc(dd, r), Ymm(8 + 2 * dd), p_even(h, r));
              vfmadd231ps(acc(dd, r), Ymm(9 + 2 * dd), p_odd(h, r));
            }
          }
        } else {
          for (int r = 0; r < rows; ++r) {
            vmovaps(Ymm(8 + 2 * r), p_even(h, r));
            vmovaps(Ymm(9 + 2 * r), p_odd(h, r));
          }
          for (int dd = 0; dd < dims; ++dd) {
            split_row(dd, ymm12, ymm13);
            for (int r = 0; r < rows; ++r) {
              vfmadd231ps(acc(dd, r), ymm12, Ymm(8 + 2 * r));
              vfmadd231ps(acc(dd, r), ymm13, Ymm(9 + 2 * r));
            }
          }
        }
      }
    };
    walk_value_sets(rows, 8, dims, alpha_lanes, ymm8, group_body, [&] { reduce8(); });
  }

  // ymm0 lane i = the sum of ymm(i)'s 8 lanes, i < 8 (ymm0..13 clobbered). Rounds: element pairs
  // of pairs, quadword pairs of quads, then the 128-bit lanes.
  void reduce8() {
    // ymm(i), i < 4: per lane [a0+a2, b0+b2, a1+a3, b1+b3] of a = ymm(2i), b = ymm(2i + 1).
    for (int i = 0; i < 4; ++i) {
      vunpcklps(ymm12, Ymm(2 * i), Ymm(2 * i + 1));
      vunpckhps(ymm13, Ymm(2 * i), Ymm(2 * i + 1));
      vaddps(Ymm(i), ymm12, ymm13);
    }
    // ymm(i), i < 2: per lane the 4 partials of ymm(4i) .. ymm(4i + 3), in order.
    for (int i = 0; i < 2; ++i) {
      vunpcklpd(ymm12, Ymm(2 * i), Ymm(2 * i + 1));
      vunpckhpd(ymm13, Ymm(2 * i), Ymm(2 * i + 1));
      vaddps(Ymm(i), ymm12, ymm13);
    }
    vperm2f128(ymm12, ymm0, ymm1, 0x20);
    vperm2f128(ymm13, ymm0, ymm1, 0x31);
    vaddps(ymm0, ymm12, ymm13);
  }
};

#undef ARG

}  // namespace

Result<std::vector<uint8_t>> generate_paged_direct_avx2(const ir::PagedAttentionParams& p,
                                                        bool contiguous,
                                                        const std::vector<int>& row_counts,
                                                        X86Isa isa) {
  PagedDirectAvx2Generator gen(p, contiguous, row_counts, isa);
  gen.generate();
  return gen.finish();
}

}  // namespace jit::codegen::x86
