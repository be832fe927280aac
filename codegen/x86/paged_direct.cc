// The direct kernel of paged_attention_v1 / v2 on x86 (attention_kernel.h, PagedDirectArgs): Q·Kᵀ,
// the softmax and P·V of one chunk of keys read straight from the legacy cache of bf16 or f16
// elements (key [NB, H, D/8, BS, 8], value [NB, H, D, BS]), with no gather into slabs. The text
// below describes bf16; f16 differs only in its widening: a vpermw puts a transposed vector's
// even words (dim 2j) in its low half and the odd ones in its high half for two vcvtph2ps, and
// a value row's two halves are converted as they are (16 keys in order each), so the
// probabilities are written by half instead of by parity.
//
// The chunk is walked in groups of 32 keys, two halves of 16 (each inside one block: BS and the
// chunk's start are multiples of 16), one call per pass of up to 8 query rows of a GQA group.
//
// Q·Kᵀ, keys in lanes. A half's key run of 8 dims is [16 tokens][8 dims]: four 64-byte rows of
// 4 tokens, each a 128-bit lane of 4 dwords (dims 2i, 2i + 1). Two rounds of in-lane unpacks
// (vpunpckl/hdq, then vpunpckl/hqdq) transpose the 4 x 4 dwords of every lane, so vector j holds
// dword j of all 16 tokens: dims 2j and 2j + 1, taken apart by parity (word << 16 and
// word & 0xFFFF0000, bf16's widening to fp32). Lane 4l + k then holds token 4k + l (sigma,
// its own inverse), which the softmax ignores and the probabilities' permute undoes. Each dim
// vector meets every row's query by an embedded broadcast FMA:
//   S[r][half] += K[d][16 keys] * q[r][d]                                   8 rows x 2 halves
// Scaled, ALiBi's slope·(j − L + 1) added, and keys at or past `tokens` set to −inf, the logits
// are stored per group and row.
//
// Softmax, per row over the whole chunk (the chunk's logits are in memory): m' = max(m, max s),
// α = e^(m − m'), p = e^(s − m') (exp_ps clamps its argument at −104, where e^x is 0 in fp32,
// NaN passing: masked keys give p = 0 without a mask), l = α·l + Σ p, m = m'. The
// probabilities are written back in place as P_e / P_o: the 32 keys' even and odd ones in
// order (one vpermi2ps each).
//
// P·V, keys in lanes too. A value row of 32 keys (two 32-byte half rows, or one 64-byte line when
// the group lies in one block) taken apart by parity gives V[d][even keys] and V[d][odd keys],
// which meet P_e[r] and P_o[r] in 16-lane partial sums: A[d][r] += V_e·P_e + V_o·P_o. Sixteen
// accumulators (16 / R' dims x R' rows, R' the rows rounded up to 1, 2, 4 or 8) walk the whole
// chunk, then one transpose tree (45 ops) sums each to one lane and the call's state is
// acc[d][r] = α_r·acc[d][r] + Σ. The tree puts accumulator i's sum in lane sigma(i), so
// accumulator sigma(m) holds natural element m = dd·R' + r and the sums come out in order.
// Summing a chunk once per 16 accumulators, not once per group, is what makes keys-in-lanes
// P·V cheap: 45 ops per 16 (dims, row) pairs per chunk of up to 512 keys.
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

using namespace Xbyak;
using namespace Xbyak::util;

#define ARG(field) (rdi + int(offsetof(PagedDirectArgs, field)))

namespace {
constexpr int kHalf = kPagedDirectHalf;
constexpr int kGroup = kPagedDirectGroup;
constexpr int kRowBytes = kPagedDirectRowBytes;  // two zmm
}  // namespace

PagedDirectGeneratorBase::PagedDirectGeneratorBase(const ir::PagedAttentionParams& p,
                                                   bool contiguous,
                                                   const std::vector<int>& row_counts, X86Isa isa)
    : Generator(isa),
      p_(p),
      contiguous_(contiguous),
      f16_(p.dtype == DType::kF16),
      row_counts_(row_counts),
      k_step_(int(p.block_size) * 8 * 2),
      v_row_(int(p.block_size) * 2) {}

void PagedDirectGeneratorBase::generate() {
  prologue();
  Label l_done;
  cmp(qword[ARG(tokens)], 0);  // nothing to do (the loops below run at least once)
  jle(l_done, T_NEAR);
  mov(rax, ptr[ARG(rows)]);
  std::vector<Label> variants(row_counts_.size());
  for (size_t i = 0; i < row_counts_.size(); ++i) {
    cmp(rax, row_counts_[i]);
    je(variants[i], T_NEAR);
  }
  jmp(l_done, T_NEAR);
  for (size_t i = 0; i < row_counts_.size(); ++i) {
    L(variants[i]);
    emit_variant(row_counts_[i]);
    jmp(l_done, T_NEAR);
  }
  L(l_done);
  epilogue();
}

void PagedDirectGeneratorBase::begin_group_walk() {
  mov(r12, ptr[ARG(k_half)]);
  mov(r13, ptr[ARG(tokens)]);
  xor_(r14, r14);
  mov(r15, ptr[ARG(probs)]);
}

void PagedDirectGeneratorBase::load_prefetch_cursors() {
  mov(rax, ptr[r12 + 16]);
  mov(rcx, ptr[r12 + 24]);
  mov(rdx, ptr[ARG(v_half)]);
  sub(rdx, ptr[ARG(k_half)]);
  mov(rsi, ptr[r12 + rdx]);
  mov(rdx, ptr[r12 + rdx + 8]);
}

void PagedDirectGeneratorBase::prefetch_half(int h) {
  const Reg64& next = h == 0 ? rax : rcx;
  for (int line = 0; line < 4; ++line) prefetcht0(ptr[next + line * 64]);
  add(next, k_step_);
  // Value rows 8c .. 8c + 7 of this half: one prefetch per line.
  if (h == 0 || !contiguous_) {
    const Reg64& values = h == 0 ? rsi : rdx;
    for (int row = 0; row < 8; row += std::max(1, 64 / v_row_)) {
      prefetcht1(ptr[values + row * v_row_]);
    }
    add(values, 8 * v_row_);
  }
}

void PagedDirectGeneratorBase::next_group(int rows, const Label& l_group) {
  add(r12, 2 * 8);
  add(r15, rows * kRowBytes);
  add(r14, kGroup);
  cmp(r14, r13);
  jl(l_group, T_NEAR);
}

void PagedDirectGeneratorBase::count_groups() {
  mov(rbx, ptr[ARG(tokens)]);
  add(rbx, kGroup - 1);
  shr(rbx, 5);
}

void PagedDirectGeneratorBase::start_row(int r) {
  mov(r12, ptr[ARG(probs)]);
  add(r12, r * kRowBytes);
  mov(r11, rbx);
}

void PagedDirectGeneratorBase::update_row_max(int r, int rows, const Xmm& m_new, const Xmm& alpha,
                                              const Xmm& t0, const Xmm& t1) {
  Label l_max;
  vbroadcastss(m_new, ptr[ARG(m) + r * 4]);
  start_row(r);
  L(l_max);
  for (int offset = 0; offset < kRowBytes; offset += lanes() * 4) {
    vmaxps(m_new, m_new, ptr[r12 + offset]);
  }
  add(r12, rows * kRowBytes);
  dec(r11);
  jnz(l_max, T_NEAR);
  broadcast_max(m_new);
  vbroadcastss(alpha, ptr[ARG(m) + r * 4]);
  vmovss(ptr[ARG(m) + r * 4], Xmm(m_new.getIdx()));
  vsubps(alpha, alpha, m_new);
  exp_ps({alpha}, {t0}, {t1}, /*bounded=*/true);
  vmovss(ptr[ARG(alpha) + r * 4], Xmm(alpha.getIdx()));
}

void PagedDirectGeneratorBase::update_row_sum(int r, const Xmm& sum, const Xmm& alpha,
                                              const Xmm& tmp) {
  reduce_sum(sum);
  vmovss(tmp, ptr[ARG(l) + r * 4]);
  vfmadd231ss(Xmm(sum.getIdx()), tmp, Xmm(alpha.getIdx()));
  vmovss(ptr[ARG(l) + r * 4], Xmm(sum.getIdx()));
}

void PagedDirectGeneratorBase::walk_value_sets(int rows, int accumulators, int dims,
                                               const Xmm& alpha_lanes, const Xmm& tmp,
                                               const std::function<void()>& group_body,
                                               const std::function<void()>& reduce) {
  const int d = int(p_.head_size);
  mov(r14, ptr[ARG(acc)]);
  xor_(ebp, ebp);
  Label l_set, l_group;
  L(l_set);
  for (int i = 0; i < accumulators; ++i) uni_vpxor(vmm(i), vmm(i), vmm(i));
  mov(r12, ptr[ARG(v_half)]);
  mov(r15, ptr[ARG(probs)]);
  mov(r11, rbx);
  L(l_group);
  group_body();
  add(r12, 2 * 8);
  add(r15, rows * kRowBytes);
  dec(r11);
  jnz(l_group, T_NEAR);
  reduce();
  // acc = α·acc + Σ, lanes [dd][r].
  vmovups(tmp, ptr[r14]);
  vfmadd231ps(vmm(0), tmp, alpha_lanes);
  vmovups(ptr[r14], vmm(0));
  add(r14, lanes() * 4);
  add(rbp, dims * v_row_);
  cmp(rbp, d * v_row_);
  jl(l_set, T_NEAR);
}

namespace {

constexpr uint8_t kNotLess = 5;  // vpcmpd predicate: a >= b

// Lane 4l + k of a transposed half holds token 4k + l (and the reduction tree's lane 4q + k
// holds accumulator 4k + q): the 4 x 4 transpose of 16 indices.
constexpr int sigma(int i) {
  return 4 * (i % 4) + i / 4;
}

class PagedDirectGenerator : public PagedDirectGeneratorBase {
 public:
  PagedDirectGenerator(const ir::PagedAttentionParams& p, bool contiguous,
                       const std::vector<int>& row_counts, X86Isa isa)
      : PagedDirectGeneratorBase(p, contiguous, row_counts, isa) {}

 private:
  void emit_variant(int rows) override {
    emit_qk(rows);
    emit_softmax(rows);
    emit_pv(rows);
  }

  // ---- Q·Kᵀ ----------------------------------------------------------------------------------
  // GPRs: r12 half-pointer cursor, r13 tokens, r14 first key of the group, r15 logits cursor,
  // r8 / r9 the halves' key runs, r10 query cursor, r11 dim-run counter, rax / rcx the next
  // group's key runs (prefetch), rsi / rdx this group's value rows (prefetch).
  // zmm: S[r][h] = zmm(2r + h); 16..19 / 24..27 the halves' key rows, then their dim pairs;
  // 20..23 the first round, then the even and odd dims of both halves; 28 the odd mask
  // 0xFFFF0000 (f16: the vpermw index); 29 a query element.
  void emit_qk(int rows) {
    const int d = int(p_.head_size);
    const std::array<uint32_t, 1> odd_mask{0xFFFF0000u};  // split_bf16_pairs' constant
    const std::array<int, 1> odd_mask_reg{28};
    if (f16_) {
      vmovdqu32(zmm28, word_split_index());
    } else {
      pin_constants(odd_mask, odd_mask_reg);
    }
    begin_group_walk();
    Label l_group, l_dims, l_full;
    L(l_group);
    mov(r8, ptr[r12]);
    mov(r9, ptr[r12 + 8]);
    // The next group's key runs (prefetched into L1) and this group's value rows (into L2,
    // for P·V, which walks them a few dims at a time).
    load_prefetch_cursors();
    mov(r10, ptr[ARG(q)]);
    for (int i = 0; i < 2 * rows; ++i) vpxord(Zmm(i), Zmm(i), Zmm(i));
    mov(r11, d / 8);
    L(l_dims);
    // w[h][j]: dword j (dims 2j, 2j + 1) of half h's 16 tokens.
    const Zmm w[2][4] = {{zmm16, zmm17, zmm18, zmm19}, {zmm24, zmm25, zmm26, zmm27}};
    const Zmm u[4] = {zmm20, zmm21, zmm22, zmm23};
    for (int h = 0; h < 2; ++h) {
      const Reg64& run = h == 0 ? r8 : r9;
      const Zmm* z = w[h];  // the key rows, transposed in place
      for (int k = 0; k < 4; ++k) vmovdqu32(z[k], ptr[run + k * 64]);
      vpunpckldq(u[0], z[0], z[1]);
      vpunpckhdq(u[1], z[0], z[1]);
      vpunpckldq(u[2], z[2], z[3]);
      vpunpckhdq(u[3], z[2], z[3]);
      vpunpcklqdq(w[h][0], u[0], u[2]);
      vpunpckhqdq(w[h][1], u[0], u[2]);
      vpunpcklqdq(w[h][2], u[1], u[3]);
      vpunpckhqdq(w[h][3], u[1], u[3]);
      add(run, k_step_);
      prefetch_half(h);
    }
    // Each query element is broadcast once for both halves: even dims (zmm20 / 22), odd dims
    // (zmm21 / 23), the query in zmm29.
    for (int j = 0; j < 4; ++j) {
      for (int h = 0; h < 2; ++h) {
        if (f16_) {
          // Even words (dim 2j) to the low half, odd ones to the high half, then converted.
          vpermw(u[2 * h + 1], zmm28, w[h][j]);
          vcvtph2ps(u[2 * h], Ymm(u[2 * h + 1].getIdx()));
          vextracti64x4(Ymm(u[2 * h + 1].getIdx()), u[2 * h + 1], 1);
          vcvtph2ps(u[2 * h + 1], Ymm(u[2 * h + 1].getIdx()));
        } else {
          split_bf16_pairs(u[2 * h], u[2 * h + 1], w[h][j]);
        }
      }
      for (int r = 0; r < rows; ++r) {
        for (int parity = 0; parity < 2; ++parity) {
          vbroadcastss(zmm29, ptr[r10 + ((r * d + 2 * j + parity) * 4)]);
          vfmadd231ps(Zmm(2 * r), u[parity], zmm29);
          vfmadd231ps(Zmm(2 * r + 1), u[2 + parity], zmm29);
        }
      }
    }
    add(r10, 8 * 4);
    dec(r11);
    jnz(l_dims, T_NEAR);

    // s = scale·S (+ slope·(j − L + 1)); −inf at keys >= tokens.
    vbroadcastss(zmm24, ptr[ARG(scale)]);
    for (int i = 0; i < 2 * rows; ++i) vmulps(Zmm(i), Zmm(i), zmm24);
    // zmm16 / 17: the halves' key indices in the chunk, in lane order (sigma).
    vpbroadcastd(zmm18, r14d);
    vpaddd(zmm16, zmm18, sigma_iota(0));
    vpaddd(zmm17, zmm18, sigma_iota(kHalf));
    if (p_.alibi) {
      vpbroadcastd(zmm18, ptr[ARG(alibi_offset)]);
      vpaddd(zmm20, zmm16, zmm18);
      vpaddd(zmm21, zmm17, zmm18);
      vcvtdq2ps(zmm20, zmm20);
      vcvtdq2ps(zmm21, zmm21);
      for (int r = 0; r < rows; ++r) {
        vbroadcastss(zmm22, ptr[ARG(slope) + r * 4]);
        vfmadd231ps(Zmm(2 * r), zmm20, zmm22);
        vfmadd231ps(Zmm(2 * r + 1), zmm21, zmm22);
      }
    }
    lea(rax, ptr[r14 + kGroup]);
    cmp(rax, r13);
    jle(l_full, T_NEAR);
    vpbroadcastd(zmm18, r13d);
    vpcmpd(k2, zmm16, zmm18, kNotLess);  // j >= tokens
    vpcmpd(k3, zmm17, zmm18, kNotLess);
    vmovups(zmm19, cst(-std::numeric_limits<float>::infinity()));
    for (int r = 0; r < rows; ++r) {
      vmovaps(Zmm(2 * r) | k2, zmm19);
      vmovaps(Zmm(2 * r + 1) | k3, zmm19);
    }
    L(l_full);
    for (int r = 0; r < rows; ++r) {
      vmovaps(ptr[r15 + r * kRowBytes], Zmm(2 * r));
      vmovaps(ptr[r15 + r * kRowBytes + 64], Zmm(2 * r + 1));
    }
    next_group(rows, l_group);
    if (!f16_) unpin_constants();
  }

  // vpermw index: words 2i to word i, words 2i + 1 to word 16 + i.
  Address word_split_index() {
    std::array<uint32_t, 16> idx{};
    for (uint32_t i = 0; i < 16; ++i) {
      const uint32_t lo = i < 8 ? 4 * i : 4 * (i - 8) + 1;  // the words of dword i
      idx[i] = lo | (lo + 2) << 16;
    }
    return cst_table(idx);
  }

  // ---- softmax ------------------------------------------------------------------------------
  // GPRs: rbx groups, r12 the row's logits cursor, r11 group counter.
  void emit_softmax(int rows) {
    count_groups();
    const Zmm m_new = zmm0, alpha = zmm1, sum = zmm2, x0 = zmm3, x1 = zmm4;
    const Zmm idx_even = zmm28, idx_odd = zmm29;
    vmovdqu32(idx_even, probability_index(0));
    vmovdqu32(idx_odd, probability_index(1));
    for (int r = 0; r < rows; ++r) {
      Label l_exp;
      update_row_max(r, rows, m_new, alpha, zmm5, zmm6);  // m' = max(m, max s), α = e^(m − m')
      // p = e^(s − m'); P_e / P_o in place.
      vpxord(sum, sum, sum);
      start_row(r);
      L(l_exp);
      vmovaps(x0, ptr[r12]);
      vmovaps(x1, ptr[r12 + 64]);
      vsubps(x0, x0, m_new);
      vsubps(x1, x1, m_new);
      exp_ps({x0, x1}, {zmm5, zmm6}, {zmm7, zmm8}, /*bounded=*/true);
      vaddps(sum, sum, x0);
      vaddps(sum, sum, x1);
      vmovaps(zmm5, idx_even);
      vpermi2ps(zmm5, x0, x1);
      vmovaps(zmm6, idx_odd);
      vpermi2ps(zmm6, x0, x1);
      vmovaps(ptr[r12], zmm5);
      vmovaps(ptr[r12 + 64], zmm6);
      add(r12, rows * kRowBytes);
      dec(r11);
      jnz(l_exp, T_NEAR);
      update_row_sum(r, sum, alpha, xmm5);  // l = α·l + Σ p
    }
  }

  // The probabilities P·V multiplies the value vectors `which` = 0 and 1 with, from the
  // halves' probabilities [x0 | x1] (lane sigma(t) = key t of the half): bf16 P_e / P_o, lane
  // i key 2i + which of the group (the values split by parity); f16 the keys of half `which`
  // in order (each half's values converted as they are).
  Address probability_index(int which) {
    std::array<uint32_t, 16> idx{};
    for (int i = 0; i < 16; ++i) {
      const int key = f16_ ? kHalf * which + i : 2 * i + which;
      idx[size_t(i)] = uint32_t(key < kHalf ? sigma(key) : kHalf + sigma(key - kHalf));
    }
    return cst_table(idx);
  }

  // The key index of each lane of a transposed half: first + sigma(lane).
  Address sigma_iota(int first) {
    std::array<uint32_t, 16> idx{};
    for (int i = 0; i < 16; ++i) idx[size_t(i)] = uint32_t(first + sigma(i));
    return cst_table(idx);
  }

  // ---- P·V ----------------------------------------------------------------------------------
  // GPRs: rbx groups, rbp the set's first value row in bytes (dd0 · BS · 2), r14 acc cursor,
  // r12 half-pointer cursor, r15 probabilities cursor, r11 group counter, r8 / r9 the halves'
  // value rows. zmm0..15 the accumulators; 16..19 probabilities; 20..27 the value rows' even
  // and odd keys; 30 the odd mask (pinned); 31 the α of each accumulator lane. Every
  // probability and value vector is loaded once per group and set: with 3 or more rows (padded
  // to 4 or 8) the set's (at most 4) value rows are split first and each row's P_e / P_o meets
  // them all; with 1 or 2 rows the rows' probabilities stay in registers while the (up to 16)
  // value rows pass.
  void emit_pv(int rows) {
    const int row_pad = int(paged_direct_row_pad(rows));
    const int dims = 16 / row_pad;  // dims per set of 16 accumulators
    const Zmm alpha_lanes = zmm31;
    const std::array<uint32_t, 1> odd_mask{0xFFFF0000u};  // split_bf16_pairs' constant
    const std::array<int, 1> odd_mask_reg{30};
    if (!f16_) pin_constants(odd_mask, odd_mask_reg);
    {
      std::array<uint32_t, 16> idx{};
      for (int i = 0; i < 16; ++i) idx[size_t(i)] = uint32_t(i % row_pad);
      vmovups(ymm28, ptr[ARG(alpha)]);
      vmovdqu32(zmm29, cst_table(idx));
      vpermps(alpha_lanes, zmm29, zmm28);
    }
    const auto acc = [&](int dd, int r) { return Zmm(sigma(dd * row_pad + r)); };
    // Value row dd of the set as two fp32 vectors: bf16 its even and odd keys, f16 its halves.
    const auto split_row = [&](int dd, const Zmm& even, const Zmm& odd) {
      if (f16_) {
        vcvtph2ps(even, ptr[r8 + dd * v_row_]);
        vcvtph2ps(odd, contiguous_ ? ptr[r8 + dd * v_row_ + 32] : ptr[r9 + dd * v_row_]);
        return;
      }
      if (contiguous_) {
        vmovdqu32(odd, ptr[r8 + dd * v_row_]);
      } else {
        vmovdqu32(Ymm(odd.getIdx()), ptr[r8 + dd * v_row_]);
        vinserti64x4(odd, odd, ptr[r9 + dd * v_row_], 1);
      }
      split_bf16_pairs(even, odd, odd);
    };
    const auto p_even = [&](int r) { return ptr[r15 + r * kRowBytes]; };
    const auto p_odd = [&](int r) { return ptr[r15 + r * kRowBytes + 64]; };
    const auto group_body = [&] {
      mov(r8, ptr[r12]);
      add(r8, rbp);
      if (!contiguous_) {
        mov(r9, ptr[r12 + 8]);
        add(r9, rbp);
      }
      if (row_pad >= 4) {
        for (int dd = 0; dd < dims; ++dd) split_row(dd, Zmm(20 + 2 * dd), Zmm(21 + 2 * dd));
        for (int r = 0; r < rows; ++r) {
          vmovaps(zmm16, p_even(r));
          vmovaps(zmm17, p_odd(r));
          for (int dd = 0; dd < dims; ++dd) {
            vfmadd231ps(acc(dd, r), Zmm(20 + 2 * dd), zmm16);
            vfmadd231ps(acc(dd, r), Zmm(21 + 2 * dd), zmm17);
          }
        }
      } else {
        for (int r = 0; r < rows; ++r) {
          vmovaps(Zmm(16 + 2 * r), p_even(r));
          vmovaps(Zmm(17 + 2 * r), p_odd(r));
        }
        for (int dd = 0; dd < dims; ++dd) {
          const Zmm even = Zmm(20 + 2 * (dd % 4)), odd = Zmm(21 + 2 * (dd % 4));
          split_row(dd, even, odd);
          for (int r = 0; r < rows; ++r) {
            vfmadd231ps(acc(dd, r), even, Zmm(16 + 2 * r));
            vfmadd231ps(acc(dd, r), odd, Zmm(17 + 2 * r));
          }
        }
      }
    };
    walk_value_sets(rows, 16, dims, alpha_lanes, zmm17, group_body,
                    [&] { reduce16(zmm16, zmm17); });
    if (!f16_) unpin_constants();
  }

  // zmm0 lane sigma(i) = the sum of zmm(i)'s 16 lanes, i < 16 (zmm0..15 clobbered; ta, tb
  // temporaries). Rounds: 256-bit halves of pairs, 128-bit quarters of quads, element pairs
  // and single elements inside each 128-bit lane.
  void reduce16(const Zmm& ta, const Zmm& tb) {
    // b[i] (in zmm(i)): half 0 = zmm(2i)'s 8 partials, half 1 = zmm(2i + 1)'s.
    for (int i = 0; i < 8; ++i) {
      vshuff32x4(ta, Zmm(2 * i), Zmm(2 * i + 1), 0x44);
      vshuff32x4(tb, Zmm(2 * i), Zmm(2 * i + 1), 0xEE);
      vaddps(Zmm(i), ta, tb);
    }
    // c[i]: quarter q = zmm(4i + q)'s 4 partials.
    for (int i = 0; i < 4; ++i) {
      vshuff32x4(ta, Zmm(2 * i), Zmm(2 * i + 1), 0x88);
      vshuff32x4(tb, Zmm(2 * i), Zmm(2 * i + 1), 0xDD);
      vaddps(Zmm(i), ta, tb);
    }
    // e[i]: in quarter q, elements 0, 1 = zmm(8i + q)'s 2 partials, 2, 3 = zmm(8i + 4 + q)'s.
    for (int i = 0; i < 2; ++i) {
      vshufps(ta, Zmm(2 * i), Zmm(2 * i + 1), 0x44);
      vshufps(tb, Zmm(2 * i), Zmm(2 * i + 1), 0xEE);
      vaddps(Zmm(i), ta, tb);
    }
    // In quarter q, element k = zmm(4k + q)'s sum: lane 4q + k = sigma(4k + q).
    vshufps(ta, zmm0, zmm1, 0x88);
    vshufps(tb, zmm0, zmm1, 0xDD);
    vaddps(zmm0, ta, tb);
  }
};

#undef ARG

}  // namespace

bool paged_direct_serves(const ir::PagedAttentionParams& p, X86Isa isa) {
  // Any kv: fp8 and off-grid 16-bit caches go through the runner's stage.
  return (p.dtype == DType::kBF16 || p.dtype == DType::kF16) && !p.blocksparse &&
         isa >= X86Isa::kAvx2;
}

bool paged_direct_default(const ir::PagedAttentionParams& p, X86Isa isa) {
  return paged_direct_serves(p, isa) && p.block_size >= 8;
}

Result<std::vector<uint8_t>> generate_paged_direct(const ir::PagedAttentionParams& p,
                                                   bool contiguous,
                                                   const std::vector<int>& row_counts, X86Isa isa) {
  if (isa < X86Isa::kAvx512) return generate_paged_direct_avx2(p, contiguous, row_counts, isa);
  PagedDirectGenerator gen(p, contiguous, row_counts, isa);
  gen.generate();
  return gen.finish();
}

}  // namespace jit::codegen::x86
