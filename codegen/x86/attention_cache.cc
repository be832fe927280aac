// cpu_attn_reshape_and_cache on x86 (spec §3.3). vec / vec16 / neon slabs: token t goes to
// K[d·bs + t] (transposed: one element store per dim, bs elements apart) and V[t·D + d] (one
// contiguous copy of the head's D elements). amx slabs (bf16): K[(t/16)·16D + (d/2)·32 +
// (t%16)·2 + d%2] (one dword store per dim pair) and V[(d/16)·16bs + (t/2)·32 + (d%16)·2 + t%2]
// (one word store per dim). Raw element copies, so the result is bit-exact for every value.
// Any head size for the vec layouts: the K element loop has a D % 4 rest, the V copy a masked
// (AVX-512) or scalar (AVX2) tail, and the fp8 encode a D % lanes tail vector.
// fp8 caches (kv=fp8_e4m3/fp8_e5m2, spec §3.6; vec layout only, supports() rejects amx): each
// head row is quantised by the cache writers' quantiser (CacheGenerator::quantise_span:
// fp8(x / scale) bit-exact with the ref, without a division; bf16 rows at a power-of-two scale
// such as the default 1.0 in 16-bit lanes); V codes are stored as one contiguous row, K codes
// go through a D-byte stack buffer and are stored one byte per dim, bs bytes apart.
#include <fmt/format.h>
#include <omp.h>
#include <xbyak/xbyak.h>

#include <algorithm>
#include <array>
#include <cstddef>

#include "codegen/x86/attention_kernel.h"
#include "codegen/x86/cache_generator.h"
#include "ir/estimate.h"
#include "ir/params_cache.h"
#include "ir/params_cpu.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;
using namespace Xbyak::util;

/// The call arguments of the cache write (strides in bytes). Rows are tokens.
struct CpuAttnCacheWriteArgs {
  const uint8_t* key;
  const uint8_t* value;
  uint8_t* key_cache;
  uint8_t* value_cache;
  const int64_t* slots;
  int64_t key_token_stride;
  int64_t key_head_stride;
  int64_t value_token_stride;
  int64_t value_head_stride;
  int64_t block_stride;  ///< cache stride(0) (key_cache and value_cache alike)
  int64_t head_stride;   ///< cache stride(1)
  float k_scale;         ///< fp8 caches: stored = fp8(key / k_scale)
  float v_scale;         ///< fp8 caches: stored = fp8(value / v_scale)
};

#define ARG(field) (rdi + int(offsetof(CpuAttnCacheWriteArgs, field)))

class CacheWriteGenerator : public CacheGenerator {
 public:
  CacheWriteGenerator(const ir::CpuAttnCacheWriteParams& p, X86Isa isa)
      : CacheGenerator(isa), p_(p) {}

  // rsi = token, rdx = end; r8 key_cache slab, r9 value_cache slab, r10 key src, r11 value src,
  // r12 head counter, r13 dim counter, r14 offset in block, r15/rbx copy pointers.
  void generate() {
    const int esize = int(dtype_size(p_.dtype));
    const int64_t d = p_.head_size;
    const bool fp8 = p_.kv != ir::KvCacheDtype::kAuto;
    const int csize = fp8 ? 1 : esize;  // bytes per cache element
    prologue();
    // fp8: the K codes of one head row at [rsp + kCodes] (D bytes, rounded up to 64), or of a
    // whole block's rows (block_stage_bytes()), above the Generator's tail staging at [rsp]
    // (used by the AVX2 tail loads and stores when D % lanes != 0).
    const int64_t stage = kCodes + std::max((d + 63) / 64 * 64, block_stage_bytes());
    if (fp8) {
      sub(rsp, stage);
      vbroadcastss(vmm(kKScale), ptr[ARG(k_scale)]);
      scale_reciprocal(vmm(kKRecip), vmm(kKScale));
      vbroadcastss(vmm(kVScale), ptr[ARG(v_scale)]);
      scale_reciprocal(vmm(kVRecip), vmm(kVScale));
      reserve_quantise_tables(p_.dtype, fp8_format(p_.kv), {vmm(kKScale), vmm(kVScale)},
                              rows_times(p_.head_count_kv * p_.head_size), int(stage));
    }
    // The 16-bit steps with their most-used constants in registers (quantise_step_constants
    // says why).
    const std::vector<uint32_t> steps =
        fp8 ? quantise_step_constants(p_.dtype, fp8_format(p_.kv)) : std::vector<uint32_t>{};
    const bool pinned = !steps.empty();
    if (pinned) pin_leading_constants(steps, kPinnedRegs);
    if (block_path()) {
      with_streaming_stores(2 * p_.head_count_kv * d * csize, [&] { token_loop(); });
    } else {
      token_loop();
    }
    if (pinned) unpin_constants();
    if (fp8) {
      release_quantise_tables();
      add(rsp, stage);
    }
    epilogue();
  }

 private:
  // The token loop: rows [rsi, rdx), whole blocks first where block_path() serves them.
  void token_loop() {
    const int esize = int(dtype_size(p_.dtype));
    const int64_t d = p_.head_size;
    const bool amx = p_.isa == ir::CpuAttnIsa::kAmx;
    const bool fp8 = p_.kv != ir::KvCacheDtype::kAuto;
    const int csize = fp8 ? 1 : esize;  // bytes per cache element
    Label l_token, l_next, l_done, l_head, l_dim;
    L(l_token);
    cmp(rsi, rdx);
    jge(l_done, T_NEAR);
    if (block_path()) whole_block(l_token);
    mov(rax, ptr[ARG(slots)]);
    mov(rax, ptr[rax + rsi * 8]);
    test(rax, rax);
    js(l_next, T_NEAR);              // padding token
    mov(rbp, rdx);                   // keep row_end across the division
    divide_unsigned(p_.block_size);  // rax = block, rdx = offset
    mov(r14, rdx);
    mov(rdx, rbp);
    imul(rax, ptr[ARG(block_stride)]);
    mov(r8, ptr[ARG(key_cache)]);
    add(r8, rax);
    mov(r9, ptr[ARG(value_cache)]);
    add(r9, rax);
    if (amx) {
      // K: (t/16)·16·D + (t%16)·2 elements; V: (t/2)·32 + t%2 elements (bf16, 2 bytes each).
      mov(rcx, r14);
      shr(rcx, 4);
      imul(rcx, rcx, 16 * d * 2);
      add(r8, rcx);
      mov(rcx, r14);
      and_(rcx, 15);
      lea(r8, ptr[r8 + rcx * 4]);
      mov(rcx, r14);
      shr(rcx, 1);
      shl(rcx, 6);
      add(r9, rcx);
      mov(rcx, r14);
      and_(rcx, 1);
      lea(r9, ptr[r9 + rcx * 2]);
    } else {
      lea(r8, ptr[r8 + r14 * csize]);
      mov(rcx, r14);
      imul(rcx, rcx, d * csize);
      add(r9, rcx);
    }
    token_rows();
    L(l_head);
    if (amx) {
      emit_amx_token();
    } else if (fp8) {
      emit_fp8_token();
    } else {
      // K: d·bs·esize apart in the slab; unrolled by 4, the D % 4 rest after the loop.
      mov(r15, r8);
      mov(rbx, r10);
      const auto k_dim = [&](int u) {
        if (esize == 2) {
          movzx(eax, word[rbx + u * 2]);
          mov(word[r15 + u * p_.block_size * 2], ax);
        } else {
          mov(eax, dword[rbx + u * 4]);
          mov(dword[r15 + u * p_.block_size * 4], eax);
        }
      };
      if (d / 4 > 0) {
        mov(r13, d / 4);
        L(l_dim);
        for (int u = 0; u < 4; ++u) k_dim(u);
        add(rbx, 4 * esize);
        add(r15, 4 * p_.block_size * esize);
        dec(r13);
        jnz(l_dim, T_NEAR);
      }
      for (int u = 0; u < int(d % 4); ++u) k_dim(u);
      // V: one contiguous row of D elements.
      mov(r15, r9);
      mov(rbx, r11);
      copy_span(r15, rbx, d * esize, r13);
    }
    next_head(l_head);
    L(l_next);
    inc(rsi);
    jmp(l_token, T_NEAR);
    L(l_done);
  }

  // ---- Whole blocks (prefill) ---------------------------------------------------------------
  // The per-token path stores a token's K one element per dim, bs·c bytes apart, so every line
  // of the transposed K slab is read for ownership and written a few bytes at a time. When the
  // bs rows from rsi carry the slots s .. s + bs - 1 of one block (s % bs == 0: a prefill's slot
  // mapping), each head's slabs are written front to back instead: the V rows one contiguous
  // row per token as before (streaming where 64-byte aligned in a large call), and the K slab
  // [D][bs] by dword columns: one vpgatherdd of a column of 16 tokens (4 / c dims of each: their
  // rows at `stride` bytes apart, index vector (16g + i)·stride for token group g), permuted by
  // one vpermw (c = 2) or vpermb (fp8) into the column's rows of 16 tokens (16·c bytes each),
  // stored at (dim)·bs·c + 16g·c; 4-byte elements need no permutation. A column's stores fill
  // whole lines of its rows before the next column starts, so in a large call they are
  // streaming stores (the line completes in the write-combining buffer). kv=auto gathers from
  // the tokens' key rows, head by head. fp8 goes token by token over groups of G heads (each
  // token's head rows read in order): the V rows quantised to their slabs, the K codes to a
  // stack stage [bs][G·D] (quantise_span: the mantissa tables where they apply), then each
  // head's columns gathered from the stage (G: the largest divisor of H with bs·G·D <= 32 KiB).
  // amx slabs (bf16) take their own lines (amx_block_keys, amx_block_values). On AVX2, for
  // fp8 without VBMI and for 16- and 32-bit keys at avx512_vbmi (gathered_keys), the K slab
  // comes from transposed_lanes' in-register transposes of 16 tokens × 16 bytes instead of the
  // gathers (D·c a multiple of 16 then).
  // bs a multiple of 16 up to 128, D·c a multiple of 4, bs·D <= 32 KiB for fp8; gathers need
  // (bs - 1)·stride < 2^31.
  static constexpr int64_t kMaxBlockStage = 32768;
  bool block_path() const {
    const bool fp8 = p_.kv != ir::KvCacheDtype::kAuto;
    const int64_t c = fp8 ? 1 : int64_t(dtype_size(p_.dtype));
    const bool amx = p_.isa == ir::CpuAttnIsa::kAmx;
    return p_.block_size % 16 == 0 && p_.block_size <= kMaxColumnTokens &&
           p_.head_size * c % (gathered_keys() ? 4 : 16) == 0 && (!amx || avx512()) &&
           (!fp8 || p_.block_size * p_.head_size <= kMaxBlockStage);
  }
  // The K slab's columns through transposed_columns (AVX-512; fp8's byte columns need
  // vpermb), else transposed_lanes. The avx512_vbmi level (Zen 4 and 5, the level no Intel
  // CPU stops at) takes the transposes for 16- and 32-bit keys: on Zen 5 a zmm vpgatherdd costs
  // ~12 cycles per 16 elements where a shuffle costs 0.25-0.5, and the auto write at a
  // prefill's slots ran 2.08-2.34 against 3.93-4.79 ms with the gathers (64 MB, 1 thread; on Zen
  // 4 the two had measured level); fp8 there keeps the gathers (3.05-4.12 against 3.94-4.77 ms
  // with the transposes; docs/decisions.md, "Thirty-first round").
  bool gathered_keys() const {
    if (!avx512()) return false;
    if (p_.kv == ir::KvCacheDtype::kAuto) return !(has_vbmi() && !has_fp16());
    return has_vbmi();
  }
  // Stack bytes of the fp8 block stage ([bs][G·D] codes, 64-byte aligned at run time) and the
  // token loops' counter above it.
  int64_t block_stage_bytes() const {
    const bool fp8 = p_.kv != ir::KvCacheDtype::kAuto;
    return block_path() && fp8 ? block_stage_span() + 64 + 16 : 0;
  }
  int64_t block_stage_span() const { return p_.block_size * stage_heads() * p_.head_size; }
  // A qword above the fp8 block stage (its alignment slack included): the token loops' counter.
  Address block_counter() { return qword[rsp + int(kCodes + block_stage_span() + 64)]; }
  // dst = the 64-byte aligned fp8 block stage at [rsp + kCodes ...].
  void block_stage(const Reg64& dst) { aligned_stack_address(dst, kCodes); }

  // Emits the whole-block check for the row at rsi; a whole block is written and the loop
  // continues at l_token with rsi past it. Clobbers rax, rcx, rbx, rbp, r8..r15, vector
  // registers; keeps rdx (row end).
  void whole_block(const Label& l_token) {
    const int64_t bs = p_.block_size;
    const bool fp8 = p_.kv != ir::KvCacheDtype::kAuto;
    Label l_single, l_head;
    lea(rax, ptr[rsi + int(bs)]);
    cmp(rax, rdx);
    jg(l_single, T_NEAR);
    if (!fp8 && gathered_keys()) {  // the gathers read the key rows: (bs - 1)·stride < 2^31
      mov(rax, ptr[ARG(key_token_stride)]);
      cmp(rax, int(((int64_t(1) << 31) - 1) / bs));
      ja(l_single, T_NEAR);  // unsigned: negative strides too
    }
    if (in_streaming_loop()) {
      mov(rax, ptr[ARG(key_cache)]);
      or_(rax, ptr[ARG(value_cache)]);
      or_(rax, ptr[ARG(block_stride)]);
      or_(rax, ptr[ARG(head_stride)]);
      test(al, 63);
      jnz(l_single, T_NEAR);
    }
    mov(rbx, ptr[ARG(slots)]);
    mov(rax, ptr[rbx + rsi * 8]);
    test(rax, rax);
    js(l_single, T_NEAR);
    mov(rbp, rdx);
    divide_unsigned(bs);  // rax = block, rdx = offset
    test(rdx, rdx);
    mov(rdx, rbp);
    jnz(l_single, T_NEAR);
    imul(rcx, rax, int(bs));
    require_consecutive_slots(rbx + rsi * 8, rcx, bs, l_single);
    imul(rax, ptr[ARG(block_stride)]);
    mov(r8, ptr[ARG(key_cache)]);
    add(r8, rax);
    mov(r9, ptr[ARG(value_cache)]);
    add(r9, rax);
    token_rows();
    if (p_.isa == ir::CpuAttnIsa::kAmx) {
      L(l_head);
      amx_block_values();
      amx_block_keys();
      next_head(l_head);
    } else if (!fp8) {
      L(l_head);
      block_values();
      mov(rbx, r10);
      if (gathered_keys()) transposed_column_offsets(int(bs), 0, dword[ARG(key_token_stride)]);
      mov(r15, r8);
      key_columns(0);
      next_head(l_head);
    } else {
      // Groups of G heads: their V rows and staged K codes token by token (each token's G
      // head rows read in order), then each head's K columns from the stage.
      const int64_t group = stage_heads();
      Label l_group, l_key_head;
      mov(r12, p_.head_count_kv / group);
      L(l_group);
      block_values_fp8(group);
      stage_key_codes(group);
      if (gathered_keys()) {
        transposed_column_offsets(int(bs), group * p_.head_size, dword[ARG(key_token_stride)]);
      }
      block_stage(rbx);
      mov(block_counter(), group);
      L(l_key_head);
      mov(r15, r8);
      key_columns(group * p_.head_size);  // rbx ends at the next head's codes
      add(r8, ptr[ARG(head_stride)]);
      dec(block_counter());
      jnz(l_key_head, T_NEAR);
      for (int64_t h = 0; h < group; ++h) {
        add(r9, ptr[ARG(head_stride)]);
        add(r10, ptr[ARG(key_head_stride)]);
        add(r11, ptr[ARG(value_head_stride)]);
      }
      dec(r12);
      jnz(l_group, T_NEAR);
    }
    add(rsi, int(bs));
    jmp(l_token, T_NEAR);
    L(l_single);
  }

  // kv=auto: the head's V rows of the block, token t's row (r11 + t·stride) copied to r9 + t·D·c,
  // streaming where the row is 64-byte aligned in the streaming loop. Uses rax, rcx, rbx, rbp,
  // r13, r14, r15.
  void block_values() {
    const int64_t d = p_.head_size;
    const int esize = int(dtype_size(p_.dtype));
    Label l_row;
    mov(rbp, r11);
    mov(r14, r9);
    mov(rcx, p_.block_size);
    L(l_row);
    mov(rbx, rbp);
    mov(r13, r14);
    maybe_streaming(r13, [&](bool streaming) { copy_span(r13, rbx, d * esize, r15, streaming); });
    add(rbp, ptr[ARG(value_token_stride)]);
    add(r14, int(d * esize));
    dec(rcx);
    jnz(l_row, T_NEAR);
  }

  // Heads per fp8 stage: the largest divisor G of H with bs·G·D <= kMaxBlockStage.
  int64_t stage_heads() const {
    int64_t g = 1;
    for (int64_t h = 1; h <= p_.head_count_kv; ++h) {
      if (p_.head_count_kv % h == 0 && p_.block_size * h * p_.head_size <= kMaxBlockStage) g = h;
    }
    return g;
  }

  // fp8: the V rows of `group` heads for the block's tokens (token t's rows from r11 + t·stride,
  // head g of them at + g·value_head_stride, to r9 + g·head_stride + t·D), quantised token by
  // token, streaming where the row is 64-byte aligned in the streaming loop. Uses rax, rcx,
  // rbx, rbp, r13, r14, r15, block_counter() and the quantiser's registers.
  void block_values_fp8(int64_t group) {
    const int64_t d = p_.head_size;
    const DType format = ir::cpu_attn_cache_dtype(p_.dtype, p_.kv);
    Label l_row, l_head;
    mov(rbp, r11);
    mov(r14, r9);
    mov(block_counter(), p_.block_size);
    L(l_row);
    xor_(ecx, ecx);
    L(l_head);
    mov(rbx, ptr[ARG(value_head_stride)]);
    imul(rbx, rcx);
    add(rbx, rbp);
    mov(r13, ptr[ARG(head_stride)]);
    imul(r13, rcx);
    add(r13, r14);
    maybe_streaming(r13, [&](bool streaming) {
      quantise_span(r13, rbx, d, p_.dtype, format, vmm(kVScale), vmm(kVRecip), streaming);
    });
    inc(rcx);
    cmp(rcx, int(group));
    jl(l_head, T_NEAR);
    add(rbp, ptr[ARG(value_token_stride)]);
    add(r14, int(d));
    dec(block_counter());
    jnz(l_row, T_NEAR);
  }

  // fp8: the K codes of `group` heads of the block's tokens into the stage [bs][G·D] (token t's
  // rows from r10 + t·stride, head g at + g·key_head_stride). Uses rax, rcx, rbx, rbp, r13,
  // r14, r15, block_counter() and the quantiser's registers.
  void stage_key_codes(int64_t group) {
    const int64_t d = p_.head_size;
    const DType format = ir::cpu_attn_cache_dtype(p_.dtype, p_.kv);
    Label l_row, l_head;
    mov(rbp, r10);
    block_stage(r14);
    mov(block_counter(), p_.block_size);
    L(l_row);
    xor_(ecx, ecx);
    L(l_head);
    mov(rbx, ptr[ARG(key_head_stride)]);
    imul(rbx, rcx);
    add(rbx, rbp);
    imul(r13, rcx, int(d));
    add(r13, r14);
    quantise_span(r13, rbx, d, p_.dtype, format, vmm(kKScale), vmm(kKRecip));
    inc(rcx);
    cmp(rcx, int(group));
    jl(l_head, T_NEAR);
    add(rbp, ptr[ARG(key_token_stride)]);
    add(r14, int(group * d));
    dec(block_counter());
    jnz(l_row, T_NEAR);
  }

  // amx slabs (bf16): the K slab is groups of 16 tokens, [D/2][16 tokens][2 dims]: the line of
  // dim pair (d, d + 1) in group g holds the dword (d, d + 1) of its 16 tokens, one gathered
  // dword column (transposed_columns with 4-byte elements, no permutation). Uses rax, rcx,
  // rbx, rbp, r13, r14, r15, zmm0..2, zmm24, k2.
  void amx_block_keys() {
    const int64_t d = p_.head_size;
    transposed_column_offsets(16, 0, dword[ARG(key_token_stride)]);
    Label l_group;
    mov(rbp, r10);
    mov(r14, r8);
    mov(rcx, p_.block_size / 16);
    L(l_group);
    mov(rbx, rbp);
    mov(r15, r14);
    transposed_columns(r15, rbx, r13, d / 2, 16, 4);
    mov(rax, ptr[ARG(key_token_stride)]);
    shl(rax, 4);
    add(rbp, rax);
    add(r14, int(16 * d * 2));
    dec(rcx);
    jnz(l_group, T_NEAR);
  }

  // amx slabs (bf16): the V slab is groups of 16 dims, [bs/2][16 dims][2 tokens]: the line of
  // token pair (2p, 2p + 1) in dim group k interleaves the two tokens' 16 words (one vpermw of
  // both rows' 32 bytes). Rows are read a pair at a time, front to back. Uses rax, rcx, rbp,
  // r14, zmm0, zmm22.
  void amx_block_values() {
    using Xbyak::Zmm;
    const int64_t d = p_.head_size, bs = p_.block_size;
    std::array<uint32_t, 16> interleave{};  // out word 2i: A word i; 2i + 1: B word i
    for (int out = 0; out < 32; ++out) {
      const int in = out % 2 == 0 ? out / 2 : 16 + out / 2;
      interleave[size_t(out / 2)] |= uint32_t(in) << (16 * (out % 2));
    }
    vmovdqu32(Zmm(22), cst_table(interleave));
    Label l_pair;
    mov(rbp, r11);
    mov(r14, r9);
    mov(rcx, bs / 2);
    L(l_pair);
    mov(rax, ptr[ARG(value_token_stride)]);
    for (int64_t k = 0; k < d / 16; ++k) {
      vmovdqu16(Xbyak::Ymm(0), ptr[rbp + int(k * 32)]);
      vinserti64x4(Zmm(0), Zmm(0), ptr[rbp + rax + int(k * 32)], 1);
      vpermw(Zmm(0), Zmm(22), Zmm(0));
      store_slab_piece(ptr[r14 + int(k * 32 * bs)], Zmm(0), 64);
    }
    lea(rbp, ptr[rbp + rax * 2]);
    add(r14, 64);
    dec(rcx);
    jnz(l_pair, T_NEAR);
  }

  // One head's K slab [D][bs] at r15 from the block's rows at rbx, `row_stride` bytes apart (0:
  // the call's key_token_stride); rbx ends D·c bytes on. transposed_columns uses r13, zmm0..2,
  // zmm23, k2 (and the caller's offsets); transposed_lanes rax, rcx, rbp, r13, r14 and ymm0..3,
  // 8..12 (rdx saved on the stack around it).
  void key_columns(int64_t row_stride) {
    const bool fp8 = p_.kv != ir::KvCacheDtype::kAuto;
    const int c = fp8 ? 1 : int(dtype_size(p_.dtype));
    if (gathered_keys()) {
      transposed_columns(r15, rbx, r13, p_.head_size * c / 4, int(p_.block_size), c);
      return;
    }
    if (row_stride > 0) {
      mov(rcx, row_stride);
    } else {
      mov(rcx, ptr[ARG(key_token_stride)]);
    }
    push(rdx);
    transposed_lanes(r15, {{rbx, rax, r13, r14}, rcx, rbp}, rdx, p_.head_size * c,
                     int(p_.block_size), c, kLaneRegs);
    pop(rdx);
  }

  // r10 / r11 = the key / value rows of token rsi (head 0), r12 = the head count.
  void token_rows() {
    mov(r10, rsi);
    imul(r10, ptr[ARG(key_token_stride)]);
    add(r10, ptr[ARG(key)]);
    mov(r11, rsi);
    imul(r11, ptr[ARG(value_token_stride)]);
    add(r11, ptr[ARG(value)]);
    mov(r12, p_.head_count_kv);
  }
  // The slabs (r8, r9) and rows (r10, r11) of the next head; loops to l_head while heads remain.
  void next_head(const Label& l_head) {
    add(r8, ptr[ARG(head_stride)]);
    add(r9, ptr[ARG(head_stride)]);
    add(r10, ptr[ARG(key_head_stride)]);
    add(r11, ptr[ARG(value_head_stride)]);
    dec(r12);
    jnz(l_head, T_NEAR);
  }

  // The per-call fp8 scales and their reciprocals (scale_reciprocal), above the quantiser's
  // vmm0..3.
  static constexpr int kKScale = 4, kKRecip = 5, kVScale = 6, kVRecip = 7;
  // The pinned constants: between the scales and the helpers' registers (the column writer
  // holds 23..31, the 16-bit steps 16..22).
  static constexpr std::array<int, 5> kPinnedRegs{8, 9, 10, 11, 12};

  // One token of one head into fp8 vec slabs: r8/r9 point at the token's K/V slot, r10/r11 at
  // its key/value row. V: codes of fp8(v / v_scale) stored as one contiguous row of D bytes.
  // K: codes staged at [rsp + kCodes], then one byte per dim at r8 + d·bs. quantise_span
  // clobbers vmm0..3, vmm13..15, zmm16..22, k1..k7, eax and r15 (its loop counter); r13, rbx,
  // rax here.
  void emit_fp8_token() {
    const int64_t d = p_.head_size;
    const DType format = ir::cpu_attn_cache_dtype(p_.dtype, p_.kv);
    mov(r13, r9);
    mov(rbx, r11);
    quantise_span(r13, rbx, d, p_.dtype, format, vmm(kVScale), vmm(kVRecip));
    lea(r13, ptr[rsp + kCodes]);
    mov(rbx, r10);
    quantise_span(r13, rbx, d, p_.dtype, format, vmm(kKScale), vmm(kKRecip));
    // Transposed K: code d to r8 + d·bs, unrolled by 4, the D % 4 rest after the loop.
    mov(r15, r8);
    lea(rbx, ptr[rsp + kCodes]);
    const auto k_dim = [&](int u) {
      movzx(eax, byte[rbx + u]);
      mov(byte[r15 + u * p_.block_size], al);
    };
    if (d / 4 > 0) {
      mov(r13, d / 4);
      Label l_dim;
      L(l_dim);
      for (int u = 0; u < 4; ++u) k_dim(u);
      add(rbx, 4);
      add(r15, 4 * p_.block_size);
      dec(r13);
      jnz(l_dim, T_NEAR);
    }
    for (int u = 0; u < int(d % 4); ++u) k_dim(u);
  }

  // Offset of the fp8 K codes above the Generator's 128-byte tail staging at [rsp].
  static constexpr int kCodes = 128;

  // One token of one head in the amx slabs (bf16): K dim pairs (d, d+1) are one dword, 64 bytes
  // apart (a VNNI row of 16 keys); V dims are words 4 bytes apart (interleaved with the other
  // key of the pair), groups of 16 dims 16·bs elements apart. r8/r9 point at the token's first
  // slot, r10/r11 at its key/value row.
  void emit_amx_token() {
    const int64_t d = p_.head_size;
    mov(r15, r8);
    mov(rbx, r10);
    mov(r13, d / 32);
    Label l_k;
    L(l_k);
    for (int u = 0; u < 16; ++u) {
      mov(eax, dword[rbx + u * 4]);
      mov(dword[r15 + u * 64], eax);
    }
    add(rbx, 64);
    add(r15, 16 * 64);
    dec(r13);
    jnz(l_k, T_NEAR);
    mov(r15, r9);
    mov(rbx, r11);
    mov(r13, d / 16);
    Label l_v;
    L(l_v);
    for (int u = 0; u < 16; ++u) {
      movzx(eax, word[rbx + u * 2]);
      mov(word[r15 + u * 4], ax);
    }
    add(rbx, 32);
    add(r15, 16 * p_.block_size * 2);
    dec(r13);
    jnz(l_v, T_NEAR);
  }

  ir::CpuAttnCacheWriteParams p_;
};

#undef ARG

class CacheWriteExecutable final : public Executable {
 public:
  CacheWriteExecutable(OpSpec spec, Config config, const void* code, size_t size)
      : spec_(std::move(spec)), config_(std::move(config)), code_(code), size_(size) {}

  const void* code_address() const override { return code_; }
  size_t code_size() const override { return size_; }

  // {key, value, key_cache, value_cache, slot_mapping}: every slot checked before any write.
  Status run(const KernelArgs& args) const override {
    const auto& p = spec_.get<ir::CpuAttnCacheWriteParams>();
    const Tensor& key = args.tensor(0);
    const Tensor& value = args.tensor(1);
    const Tensor& key_cache = args.tensor(2);
    const Tensor& slots = args.tensor(4);
    const int64_t tokens = key.size(0);
    const int64_t capacity = key_cache.size(0) * p.block_size;
    const auto* s = slots.data_as<const int64_t>();
    for (int64_t t = 0; t < tokens; ++t) {
      if (s[t] >= capacity) {
        return invalid_argument(fmt::format(
            "{}: argument 'slot_mapping' has slot_mapping[{}] = {}, outside the cache's {} slots "
            "({} blocks of {})",
            op_name(spec_.op), t, s[t], capacity, key_cache.size(0), p.block_size));
      }
    }
    const int64_t esize = int64_t(dtype_size(p.dtype));
    CpuAttnCacheWriteArgs call{};
    call.key = static_cast<const uint8_t*>(key.data());
    call.value = static_cast<const uint8_t*>(value.data());
    call.key_cache = static_cast<uint8_t*>(key_cache.data());
    call.value_cache = static_cast<uint8_t*>(args.tensor(3).data());
    call.slots = s;
    call.key_token_stride = key.stride(0) * esize;
    call.key_head_stride = key.stride(1) * esize;
    call.value_token_stride = value.stride(0) * esize;
    call.value_head_stride = value.stride(1) * esize;
    const int64_t csize = int64_t(key_cache.element_size());  // 1 for fp8 codes
    call.block_stride = key_cache.stride(0) * csize;
    call.head_stride = key_cache.stride(1) * csize;
    if (p.kv != ir::KvCacheDtype::kAuto) {
      call.k_scale = float(args.scalar(0));  // vLLM's scales are fp32
      call.v_scale = float(args.scalar(1));
    }
    const auto fn = reinterpret_cast<KernelFn>(const_cast<void*>(code_));
    int threads = int(config_.get("threads", 0));
    if (threads <= 0) threads = omp_get_max_threads();
    // Parallel only when each thread gets at least 64 KiB of traffic (a region costs ~us).
    const double bytes = estimates(spec_, {.tokens = tokens}).bytes;
    threads = int(std::clamp<int64_t>(int64_t(bytes / 65536.0), 1, threads));
    threads = int(std::min<int64_t>(threads, std::max<int64_t>(tokens, 1)));
    if (threads <= 1) {
      if (tokens > 0) fn(&call, 0, tokens);
      return Status::ok();
    }
#pragma omp parallel num_threads(threads)
    {
      const int64_t t = omp_get_thread_num();
      const int64_t n = omp_get_num_threads();
      const int64_t begin = tokens * t / n;
      const int64_t end = tokens * (t + 1) / n;
      if (begin < end) fn(&call, begin, end);
    }
    return Status::ok();
  }

 private:
  OpSpec spec_;
  Config config_;
  const void* code_;
  size_t size_;
};

}  // namespace

Result<std::vector<uint8_t>> generate_cpu_attn_cache_write(const OpSpec& spec, X86Isa isa) {
  CacheWriteGenerator gen(spec.get<ir::CpuAttnCacheWriteParams>(), isa);
  gen.generate();
  return gen.finish();
}

std::shared_ptr<const Executable> make_cpu_attn_cache_write_executable(const OpSpec& spec,
                                                                       const Config& config,
                                                                       const void* code,
                                                                       size_t size) {
  return std::make_shared<CacheWriteExecutable>(spec, config, code, size);
}

}  // namespace jit::codegen::x86
