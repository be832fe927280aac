// The DeepSeek-V3.2 indexer K cache (spec/cache_ops.md §2.10, §2.11).
//
// indexer_k_quant_and_cache: per token t with slot s >= 0 (checked by the runner), b = s / BS,
//   o = s % BS, block = cache + b·BS·(D + 4G) (dense, G = D / qbs groups). Per group g:
//     amax = max |x|  over k[t, g·qbs .. (g+1)·qbs)   (vmaxps, accumulator second: NaN ignored)
//     sc   = max(amax, 1e-4) / 448                     (vdivps: the ref's IEEE division)
//     ue8m0: sc = 2^ceil(log2 sc), exactly, on the bits: for a positive normal sc,
//            (bits + 0x7FFFFF) & 0xFF800000 keeps a power of two (mantissa 0: no carry) and
//            otherwise carries into the exponent and clears the mantissa: the next power of two.
//            (sc >= 1e-4 / 448 is normal; +inf maps to +inf.)
//     codes e4m3(x / sc) (CacheGenerator::load_scaled) at block + o·D + g·qbs, sc (fp32) at block +
//     BS·D + 4(o·G + g).
//   Two passes over each group (max, then quantise); the second reads it from L1. Groups loop at
//   run time when there are many (small qbs), else they are unrolled.
// cp_gather_indexer_k_quant_cache: per run of destination rows that read consecutive positions
//   of one cache block (resolved and checked by the runner), D value bytes and 4G scale bytes
//   copied per row.
#include <cstddef>

#include "codegen/x86/cache_generator.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;

constexpr float kE4m3Max = 448.0f;
constexpr float kAmaxFloor = 1e-4f;
// Vector register of a group's scale (spans use 0..3, the helpers 13..15).
constexpr int kGroupScale = 8, kGroupRecip = 9;
// Groups unrolled up to this count; more loop at run time.
constexpr int64_t kMaxUnrolledGroups = 4;

class IndexerQuantGenerator : public CacheGenerator {
 public:
  IndexerQuantGenerator(X86Isa isa, const ir::IndexerQuantParams& p)
      : CacheGenerator(isa), p_(p), esize_(int64_t(dtype_size(p.dtype))) {}

  void generate() {
    prologue();
    const int64_t dim = p_.head_dim;
    const int64_t groups = dim / p_.quant_block;
    const int64_t block_bytes = p_.block_size * (dim + 4 * groups);
    token_loop(
        p_.block_size,
        [&] {
          // reg_q_ = block + o·D (values), reg_o_ = block + BS·D + 4·o·G (scales)
          imul(rax, rax, block_bytes);
          add(rax, ptr[reg_args_ + offsetof(IndexerQuantCallArgs, cache)]);
          imul(reg_q_, rcx, dim);
          add(reg_q_, rax);
          imul(reg_o_, rcx, 4 * groups);
          lea(reg_o_, ptr[reg_o_ + rax + int(p_.block_size * dim)]);
          // reg_p_ = k + t·D·esize
          imul(reg_p_, reg_row_, dim * esize_);
          add(reg_p_, ptr[reg_args_ + offsetof(IndexerQuantCallArgs, k)]);
          if (groups <= kMaxUnrolledGroups) {
            for (int64_t g = 0; g < groups; ++g) group();
            return;
          }
          Label l_group;
          mov(reg_heads_, groups);
          L(l_group);
          group();
          dec(reg_heads_);
          jnz(l_group, T_NEAR);
        },
        offsetof(IndexerQuantCallArgs, slots), [](const Label&) {});
    epilogue();
  }

 private:
  // One group at reg_p_ -> codes at reg_q_, scale at reg_o_; the three advance to the next.
  void group() {
    const Xmm sc = vmm(kGroupScale);
    amax_span(sc, reg_p_, p_.quant_block, p_.dtype);
    // The scale on 128 bits (a 512-bit vdivps occupies port 0 for ~10 cycles), then broadcast.
    const Xbyak::Xmm sc0(kGroupScale);
    vmaxps(sc0, sc0, cst(kAmaxFloor));
    vdivps(sc0, sc0, cst(kE4m3Max));
    if (p_.scale_fmt == ir::ScaleFormat::kUe8m0) {
      vpaddd(sc0, sc0, cst_bits(0x007FFFFF));
      uni_vpand(sc0, sc0, cst_bits(0xFF800000));
    }
    vmovss(ptr[reg_o_], sc0);
    vbroadcastss(sc, sc0);
    scale_reciprocal(vmm(kGroupRecip), sc);
    mov(reg_src_, reg_p_);
    mov(reg_dst_, reg_q_);
    quantise_span(reg_dst_, reg_src_, p_.quant_block, p_.dtype, DType::kFp8E4m3, sc,
                  vmm(kGroupRecip));
    add(reg_p_, int(p_.quant_block * esize_));
    add(reg_q_, int(p_.quant_block));
    add(reg_o_, 4);
  }

  const ir::IndexerQuantParams p_;
  const int64_t esize_;
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
