// The DeepSeek-V3.2 indexer K cache (spec/cache_ops.md §2.10, §2.11).
//
// indexer_k_quant_and_cache: per token t with slot s >= 0 (checked by the runner), b = s / BS,
//   o = s % BS, block = cache + b·BS·(D + 4G) (dense, G = D / qbs groups). Per group g:
//     amax = max |x|  over k[t, g·qbs .. (g+1)·qbs)   (amax_span: NaN ignored)
//     sc   = max(amax, 1e-4) / 448                     (vdivss: the ref's IEEE division)
//     ue8m0: sc = 2^ceil(log2 sc), exactly, on the bits: for a positive normal sc,
//            (bits + 0x7FFFFF) & 0xFF800000 keeps a power of two (mantissa 0: no carry) and
//            otherwise carries into the exponent and clears the mantissa: the next power of two.
//            (sc >= 1e-4 / 448 is normal; +inf maps to +inf.)
//     codes e4m3(x / sc) (CacheGenerator::load_scaled) at block + o·D + g·qbs, sc (fp32) at block +
//     BS·D + 4(o·G + g).
//   Rows go in chunks (CacheGenerator::chunked_token_loop): first every row's scales (and their
//   reciprocals) into stack scratch, then each row's codes, reading the row again from L1.
//   bf16 with ue8m0 on AVX-512 (AVX512-FP16, or VBMI for its zmm steps) takes the scale from a
//   table indexed by the amax's exponent (scale_table(), no division) and the 16-bit steps.
//   Groups loop at run time when there are many (small qbs), else they are unrolled.
// cp_gather_indexer_k_quant_cache: per run of destination rows that read consecutive positions
//   of one cache block (resolved and checked by the runner), D value bytes and 4G scale bytes
//   copied per row.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "codegen/x86/cache_generator.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;

constexpr float kE4m3Max = 448.0f;
constexpr float kAmaxFloor = 1e-4f;
// Vector register of a group's scale (spans use 0..3, the helpers 13..15).
constexpr int kGroupScale = 8, kGroupRecip = 9;
// Registers of the pinned constants (scale_table_): none of the spans' or helpers'.
constexpr std::array<int, 11> kPinnedRegs{10, 11, 12, 23, 24, 25, 26, 27, 28, 29, 30};
// Groups unrolled up to this count; more loop at run time.
constexpr int64_t kMaxUnrolledGroups = 4;

class IndexerQuantGenerator : public CacheGenerator {
 public:
  IndexerQuantGenerator(X86Isa isa, const ir::IndexerQuantParams& p)
      : CacheGenerator(isa),
        p_(p),
        esize_(int64_t(dtype_size(p.dtype))),
        groups_(p.head_dim / p.quant_block),
        scale_table_(p.dtype == DType::kBF16 && p.scale_fmt == ir::ScaleFormat::kUe8m0 &&
                     avx512() &&
                     (pow2_quantise(p.dtype, DType::kFp8E4m3) ||
                      (has_vbmi() && pow2_ymm_quantise(p.dtype, DType::kFp8E4m3))) &&
                     p.quant_block % kWordLanes == 0),
        zmm_steps_(scale_table_ && !pow2_quantise(p.dtype, DType::kFp8E4m3)),
        group_scratch_(scale_table_ ? 16 : 8),
        chunk_(chunk_rows(groups_ * group_scratch_)) {}

  void generate() {
    prologue();
    sub(rsp, scratch_bytes());
    if (scale_table_) {
      // The constants of the 16-bit steps and of the amax in registers: from the pool each is
      // a 64-byte load, and the two-per-cycle load ports bound the steps (the zmm steps' 9 and
      // the amax's sign and K fill the 11 registers; its C stays in the pool, one load a group).
      std::vector<uint32_t> constants;
      if (zmm_steps_) {
        constants = pow2_zmm_constants(p_.dtype, DType::kFp8E4m3).list();
      } else {
        const auto steps = pow2_step_constants(pow2_format(p_.dtype, DType::kFp8E4m3).value());
        const auto step_list = steps.list();
        constants.assign(step_list.begin(), step_list.end());
      }
      const auto [c, k, sign] = amax_word_constants(p_.dtype);
      for (uint32_t amax : {sign, k, c}) constants.push_back(amax);
      pin_leading_constants(constants, kPinnedRegs);
    }
    // Ordinary stores: streaming ones measured slower here (docs/decisions.md, tenth round).
    chunked_token_loop(
        p_.block_size, offsetof(IndexerQuantCallArgs, slots), chunk_, [&] { row_scales(); },
        [&] { write_row(); });
    if (scale_table_) unpin_constants();
    add(rsp, scratch_bytes());
    epilogue();
  }

 private:
  // A chunk's scales live on the stack: (scale, 1/scale) per group of each row, at most
  // kScratchBytes, at most kMaxChunk rows (a power of two: a row's scratch is found by
  // row % chunk). bench_cache, 1 thread, 16 tokens: 0.86-0.88 us per call before the chunks,
  // 0.58-0.63 with chunks of 2 to 16 rows (8: no worse than any other at 64 MB).
  static constexpr int64_t kScratchBytes = 1024, kMaxChunk = 8;
  static int64_t chunk_rows(int64_t row_scratch) {
    return int64_t(
        std::bit_floor(uint64_t(std::clamp<int64_t>(kScratchBytes / row_scratch, 1, kMaxChunk))));
  }
  int scratch_bytes() const { return int((chunk_ * groups_ * group_scratch_ + 15) / 16 * 16); }

  // Emits body() for each group: unrolled when few, else a loop (reg_heads_ counts).
  template <class Body>
  void for_groups(Body body) {
    if (groups_ <= kMaxUnrolledGroups) {
      for (int64_t g = 0; g < groups_; ++g) body();
      return;
    }
    Label l_group;
    mov(reg_heads_, groups_);
    L(l_group);
    body();
    dec(reg_heads_);
    jnz(l_group, T_NEAR);
  }

  // ---- bf16, ue8m0: the scale from the amax's bits through a table -----------------------
  //
  // With amax = (1 + m/128)·2^(E-127) a bf16 (E its exponent field, m its 7 mantissa bits)
  // and amax >= 1e-4, sc = 2^ceil(log2 RN(amax / 448)) depends on E and on m > 96 alone:
  // amax / 448 = (1 + m/128) / 1.75 · 2^(E-135), and the factor lies in (0.5, 1] for m <= 96
  // and in (1, 1.15) above. The division's rounding cannot cross the power of two: 2^j is
  // representable (fl is monotonic, so fl(q) <= 2^j iff q <= 2^j(1 + 2^-24)), and no bf16
  // lies in (448·2^j, 448·2^j(1 + 2^-24)]. So sc = 2^(E' - 135) with
  //   E' = (bits + 0x1F) >> 7     (m > 96 = 0x60 carries into the exponent),
  // for bits above the floor's (amax < 1e-4 takes max(amax, 1e-4) = 1e-4: one more entry),
  // and amax = inf gives sc = inf (a last entry; its E' is the largest finite amax's).
  // Each entry holds (sc, 1/sc as scalar_reciprocal gives it, K2 | kPow2Flag or 0, 0) at
  // AVX512-FP16, (sc, 1/sc, round | kPow2Flag or 0, C') for the zmm steps at VBMI, computed
  // here by the formula the generic path runs (max, IEEE division, round up on the bits) on a
  // representative amax of its class; K2 = load_pow2_bias's word where sc = 2^k lies in the
  // 16-bit steps' range (every entry but inf and sc > 2^100). Per group: ~12 scalar
  // instructions and one 16-byte copy, instead of two divisions in pass 1 and the scale's
  // tests in pass 2.
  static constexpr uint32_t kBf16Inf = 0x7F80, kPow2Flag = 0x10000;
  static constexpr uint32_t kMantissaCarry = 0x1F;  // 0x7F - 0x60
  static uint32_t floor_bits() {
    // the largest bf16 below 1e-4 (bf16 bits order as the magnitudes)
    uint32_t bits = std::bit_cast<uint32_t>(kAmaxFloor) >> 16;
    while (std::bit_cast<float>(bits << 16) >= kAmaxFloor) --bits;
    return bits;
  }
  static uint32_t rounded_exponent(uint32_t bits) { return (bits + kMantissaCarry) >> 7; }
  uint32_t first_exponent() const { return rounded_exponent(floor_bits() + 1); }

  // The table's entries in order: the floor, E' = first_exponent() .. 255, inf.
  std::vector<uint32_t> scale_table() const {
    const Pow2Format f = pow2_format(DType::kBF16, DType::kFp8E4m3).value();
    std::vector<uint32_t> table;
    auto entry = [&](float amax) {
      const float sc = std::bit_cast<float>(
          std::isinf(amax)
              ? 0x7F800000u
              : (std::bit_cast<uint32_t>(std::max(amax, kAmaxFloor) / kE4m3Max) + 0x007FFFFF) &
                    0xFF800000u);
      const float recip = 1.0f / sc;
      const int k = int(std::bit_cast<uint32_t>(sc) >> 23) - 127;
      const bool steps = !std::isinf(sc) && k >= f.min_k && k <= f.max_k;
      uint32_t step_word = 0, magic = 0;
      if (steps && zmm_steps_) {
        const Pow2StepScale zmm = pow2_step_scale(k, p_.dtype, DType::kFp8E4m3);
        step_word = zmm.round | kPow2Flag;
        magic = zmm.magic;
      } else if (steps) {
        step_word = (uint32_t(k + f.shift) << f.exponent_lsb) | kPow2Flag;
      }
      table.insert(table.end(), {std::bit_cast<uint32_t>(sc),
                                 std::isinf(recip) ? 0x7FC00000u : std::bit_cast<uint32_t>(recip),
                                 step_word, magic});
    };
    entry(0.0f);
    for (uint32_t e = first_exponent(); e <= 255; ++e) {
      // the class's smallest amax: (e - 1, m = 0x61), or the first bf16 above the floor
      const uint32_t bits = std::max(floor_bits() + 1, (e << 7) - kMantissaCarry);
      entry(std::bit_cast<float>(bits << 16));
    }
    entry(std::numeric_limits<float>::infinity());
    return table;
  }

  // Pass 1 (scale_table_), reg_p_ = the row, reg_o_ = its scratch: each group's entry.
  void row_scales_from_table() {
    lea(reg_src_, cst_block(scale_table()));
    const uint32_t entries = 255 - first_exponent() + 3;
    for_groups([&] {
      amax_bits_words(vmm(kGroupScale), reg_p_, p_.quant_block, p_.dtype);
      vmovd(eax, Xbyak::Xmm(14));
      movzx(eax, ax);
      lea(ecx, ptr[rax + kMantissaCarry]);
      shr(ecx, 7);
      sub(ecx, first_exponent() - 1);  // entry index: E' - first + 1
      xor_(edx, edx);
      cmp(eax, floor_bits());
      cmovbe(ecx, edx);
      mov(edx, entries - 1);
      cmp(eax, kBf16Inf);
      cmovae(ecx, edx);
      shl(ecx, 4);
      vmovdqu(Xbyak::Xmm(kGroupRecip), ptr[reg_src_ + rcx]);
      vmovdqu(ptr[reg_o_], Xbyak::Xmm(kGroupRecip));
      add(reg_p_, int(p_.quant_block * esize_));
      add(reg_o_, int(group_scratch_));
    });
  }

  // Pass 2 (scale_table_), after write_row's pointers: the scales into the cache, the codes of each
  // group: the 16-bit steps with the entry's K2, else quantise_span with its sc and 1/sc.
  void write_row_from_table() {
    for_groups([&] {
      const Xmm sc = vmm(kGroupScale), recip = vmm(kGroupRecip);
      Label l_other, l_done;
      mov(eax, ptr[reg_scale_]);
      mov(ptr[reg_o_], eax);
      vbroadcastss(sc, ptr[reg_scale_]);
      vbroadcastss(recip, ptr[reg_scale_ + 4]);
      mov(reg_src_, reg_p_);
      mov(reg_dst_, reg_q_);
      cmp(dword[reg_scale_ + 8], 0);
      je(l_other, T_NEAR);
      if (zmm_steps_) {
        vpbroadcastw(Xbyak::Zmm(14), ptr[reg_scale_ + 8]);
        vpbroadcastd(Xbyak::Zmm(15), ptr[reg_scale_ + 12]);
        quantise_span_pow2_zmm(reg_dst_, reg_src_, p_.quant_block, p_.dtype, DType::kFp8E4m3, sc,
                               recip);
      } else {
        vpbroadcastw(Xbyak::Zmm(kPow2Bias), ptr[reg_scale_ + 8]);
        quantise_span_pow2(reg_dst_, reg_src_, p_.quant_block, p_.dtype, DType::kFp8E4m3, sc,
                           recip);
      }
      jmp(l_done, T_NEAR);
      L(l_other);
      quantise_span(reg_dst_, reg_src_, p_.quant_block, p_.dtype, DType::kFp8E4m3, sc, recip);
      L(l_done);
      add(reg_p_, int(p_.quant_block * esize_));
      add(reg_q_, int(p_.quant_block));
      add(reg_o_, 4);
      add(reg_scale_, int(group_scratch_));
    });
  }

  // Pass 1, row reg_q_: each group's scale and its reciprocal (scalar_reciprocal) into the
  // row's scratch.
  void row_scales() {
    imul(reg_p_, reg_q_, int(p_.head_dim * esize_));
    add(reg_p_, ptr[reg_args_ + offsetof(IndexerQuantCallArgs, k)]);
    chunk_scratch(reg_o_, reg_q_, chunk_, group_scratch_ * groups_);
    if (scale_table_) {
      row_scales_from_table();
      return;
    }
    for_groups([&] {
      const Xbyak::Xmm sc(kGroupScale), recip(kGroupRecip);
      amax_span(vmm(kGroupScale), reg_p_, p_.quant_block, p_.dtype);
      vmaxss(sc, sc, cst(kAmaxFloor));
      vdivss(sc, sc, cst(kE4m3Max));
      if (p_.scale_fmt == ir::ScaleFormat::kUe8m0) {
        vpaddd(sc, sc, cst_bits(0x007FFFFF));
        uni_vpand(sc, sc, cst_bits(0xFF800000));
      }
      vmovss(ptr[reg_o_], sc);
      scalar_reciprocal(recip, sc);
      vmovss(ptr[reg_o_ + 4], recip);
      add(reg_p_, int(p_.quant_block * esize_));
      add(reg_o_, 8);
    });
  }

  // Pass 2, rax = b, rcx = o: the scales into the cache, the codes of each group.
  void write_row() {
    // reg_q_ = block + o·D (values), reg_o_ = block + BS·D + 4·o·G (scales)
    const int64_t dim = p_.head_dim;
    imul(rax, rax, p_.block_size * (dim + 4 * groups_));
    add(rax, ptr[reg_args_ + offsetof(IndexerQuantCallArgs, cache)]);
    imul(reg_q_, rcx, dim);
    add(reg_q_, rax);
    imul(reg_o_, rcx, 4 * groups_);
    lea(reg_o_, ptr[reg_o_ + rax + int(p_.block_size * dim)]);
    // reg_p_ = k + t·D·esize, reg_scale_ = the row's scratch
    imul(reg_p_, reg_row_, dim * esize_);
    add(reg_p_, ptr[reg_args_ + offsetof(IndexerQuantCallArgs, k)]);
    chunk_scratch(reg_scale_, reg_row_, chunk_, group_scratch_ * groups_);
    if (scale_table_) {
      write_row_from_table();
      return;
    }
    for_groups([&] {
      const Xmm sc = vmm(kGroupScale), recip = vmm(kGroupRecip);
      vbroadcastss(sc, ptr[reg_scale_]);
      vbroadcastss(recip, ptr[reg_scale_ + 4]);
      vmovss(ptr[reg_o_], Xbyak::Xmm(kGroupScale));
      mov(reg_src_, reg_p_);
      mov(reg_dst_, reg_q_);
      quantise_span(reg_dst_, reg_src_, p_.quant_block, p_.dtype, DType::kFp8E4m3, sc, recip);
      add(reg_p_, int(p_.quant_block * esize_));
      add(reg_q_, int(p_.quant_block));
      add(reg_o_, 4);
      add(reg_scale_, 8);
    });
  }

  const ir::IndexerQuantParams p_;
  const int64_t esize_, groups_;
  const bool scale_table_;
  // The table's steps are the zmm power-of-two steps (VBMI without AVX512-FP16): its entries
  // hold their round and C' instead of quantise_pow2_unit's K2.
  const bool zmm_steps_;
  const int64_t group_scratch_, chunk_;
};

class IndexerGatherGenerator : public CacheGenerator {
 public:
  IndexerGatherGenerator(X86Isa isa, const ir::IndexerGatherParams& p)
      : CacheGenerator(isa), p_(p) {}

  void generate() {
    prologue();
    const int64_t dim = p_.head_dim;
    const int64_t scale_bytes = 4 * (dim / p_.quant_block);
    mov(reg_args_, rdi);
    mov(reg_row_, rsi);
    mov(reg_row_end_, rdx);
    mov(reg_slots_, ptr[rdi + offsetof(IndexerGatherCallArgs, runs)]);
    Label l_run, l_row, l_next, l_done;
    L(l_run);
    cmp(reg_row_, reg_row_end_);
    jge(l_done, T_NEAR);
    // reg_o_ = this run's 4 fields
    mov(reg_o_, reg_row_);
    shl(reg_o_, 5);
    add(reg_o_, reg_slots_);
    // reg_p_ / reg_q_ = the first destination rows of dst_k / dst_scale
    row_pointer(reg_p_, offsetof(IndexerGatherCallArgs, dst_k),
                offsetof(IndexerGatherCallArgs, dst_k_row_stride));
    row_pointer(reg_q_, offsetof(IndexerGatherCallArgs, dst_scale),
                offsetof(IndexerGatherCallArgs, dst_scale_row_stride));
    // reg_offset_ = block + o·D (values), reg_scale_ = block + BS·D + o·4G (scales)
    mov(reg_offset_, ptr[reg_o_ + 16]);
    add(reg_offset_, ptr[reg_args_ + offsetof(IndexerGatherCallArgs, cache)]);
    lea(reg_scale_, ptr[reg_offset_ + int(p_.block_size * dim)]);
    mov(rax, ptr[reg_o_ + 24]);
    imul(rcx, rax, int(scale_bytes));
    add(reg_scale_, rcx);
    imul(rax, rax, int(dim));
    add(reg_offset_, rax);
    mov(reg_heads_, ptr[reg_o_ + 8]);
    test(reg_heads_, reg_heads_);
    jz(l_next, T_NEAR);
    L(l_row);
    mov(reg_dst_, reg_p_);
    mov(reg_src_, reg_offset_);
    copy_span(reg_dst_, reg_src_, dim, reg_count_);
    if (scale_bytes == 4) {
      // One group (DeepSeek's D = quant_block = 128): a 4-byte scalar move, cheaper than the
      // masked vector tail copy_span would use.
      mov(eax, ptr[reg_scale_]);
      mov(ptr[reg_q_], eax);
    } else {
      mov(reg_dst_, reg_q_);
      mov(reg_src_, reg_scale_);
      copy_span(reg_dst_, reg_src_, scale_bytes, reg_count_);
    }
    add(reg_p_, ptr[reg_args_ + offsetof(IndexerGatherCallArgs, dst_k_row_stride)]);
    add(reg_q_, ptr[reg_args_ + offsetof(IndexerGatherCallArgs, dst_scale_row_stride)]);
    add(reg_offset_, int(dim));
    add(reg_scale_, int(scale_bytes));
    dec(reg_heads_);
    jnz(l_row, T_NEAR);
    L(l_next);
    inc(reg_row_);
    jmp(l_run, T_NEAR);
    L(l_done);
    epilogue();
  }

 private:
  // r = dst + runs[i].first_row · row stride.
  void row_pointer(const Reg64& r, size_t dst, size_t stride) {
    mov(r, ptr[reg_o_]);
    imul(r, ptr[reg_args_ + stride]);
    add(r, ptr[reg_args_ + dst]);
  }

  const ir::IndexerGatherParams p_;
};

}  // namespace

Result<std::vector<uint8_t>> generate_indexer_quant(const OpSpec& spec, X86Isa isa) {
  IndexerQuantGenerator gen(isa, spec.get<ir::IndexerQuantParams>());
  gen.generate();
  return gen.finish();
}

Result<std::vector<uint8_t>> generate_indexer_gather(const OpSpec& spec, X86Isa isa) {
  IndexerGatherGenerator gen(isa, spec.get<ir::IndexerGatherParams>());
  gen.generate();
  return gen.finish();
}

}  // namespace jit::codegen::x86
