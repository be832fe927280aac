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
//   Groups loop at run time when there are many (small qbs), else they are unrolled.
// cp_gather_indexer_k_quant_cache: per run of destination rows that read consecutive positions
//   of one cache block (resolved and checked by the runner), D value bytes and 4G scale bytes
//   copied per row.
#include <algorithm>
#include <bit>
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
      : CacheGenerator(isa),
        p_(p),
        esize_(int64_t(dtype_size(p.dtype))),
        groups_(p.head_dim / p.quant_block),
        chunk_(chunk_rows(groups_)) {}

  void generate() {
    prologue();
    sub(rsp, scratch_bytes());
    chunked_token_loop(
        p_.block_size, offsetof(IndexerQuantCallArgs, slots), chunk_, [&] { row_scales(); },
        [&] { write_row(); });
    add(rsp, scratch_bytes());
    epilogue();
  }

 private:
  // A chunk's scales live on the stack: (scale, 1/scale) per group of each row, at most
  // kScratchBytes, at most kMaxChunk rows (a power of two: a row's scratch is found by
  // row % chunk). bench_cache, 1 thread, 16 tokens: 0.86-0.88 us per call before the chunks,
  // 0.58-0.63 with chunks of 2 to 16 rows (8: no worse than any other at 64 MB).
  static constexpr int64_t kScratchBytes = 1024, kMaxChunk = 8;
  static int64_t chunk_rows(int64_t groups) {
    return int64_t(
        std::bit_floor(uint64_t(std::clamp<int64_t>(kScratchBytes / (8 * groups), 1, kMaxChunk))));
  }
  int scratch_bytes() const { return int((chunk_ * groups_ * 8 + 15) / 16 * 16); }

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

  // Pass 1, row reg_q_: each group's scale and its reciprocal (scalar_reciprocal) into the
  // row's scratch.
  void row_scales() {
    imul(reg_p_, reg_q_, int(p_.head_dim * esize_));
    add(reg_p_, ptr[reg_args_ + offsetof(IndexerQuantCallArgs, k)]);
    chunk_scratch(reg_o_, reg_q_, chunk_, 8 * groups_);
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
    chunk_scratch(reg_scale_, reg_row_, chunk_, 8 * groups_);
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
  const int64_t esize_, groups_, chunk_;
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
