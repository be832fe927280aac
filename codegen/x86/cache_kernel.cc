// The KV-cache writes, copies and gathers (spec/cache_ops.md §2.1–2.4, §2.6–2.8):
// reshape_and_cache_flash, reshape_and_cache, concat_and_cache_mla (not fp8_ds_mla),
// swap_blocks, convert_fp8, cp_gather_cache and gather_and_maybe_dequant_cache.
//
// Cache writes: one row per token t; s = slot_mapping[t] (s < 0: padding, skipped; the runner
// has checked s < num_blocks * block_size before the launch), b = s / BS, o = s % BS (a shift
// and mask when BS is a power of two). Per operand (key, then value):
//   kv=auto  a byte copy of each element (no conversion, NaN payloads kept);
//   fp8      code = fp8(x / scale): x widened exactly to fp32, x·(1/scale) where that
//            provably gives the ref's code, else an IEEE vdivps (CacheGenerator::load_scaled),
//            then the Generator's integer fp8 encoder; codes stored a byte per element.
// Layouts (byte offsets, c = cache element size, e = input element size):
//   flash NHD  token row [H, D] is contiguous in the cache at b·block_stride + o·H·D·c: one
//              span of H·D elements (per-tensor scale), or per head with a per-head scale;
//   flash HND  head h at b·block_stride + h·BS·D·c + o·D·c: one span of D per head;
//   paged key  [NB, H, D/x, BS, x], x = 16 / c: chunk j of head h (16 bytes) at
//              ((b·H + h)·D/x + j)·BS·16 + o·16;
//   paged value [NB, H, D, BS]: element d of head h at ((b·H + h)·D + d)·BS·c + o·c, a
//              scatter of single elements (the layout's nature: one element per BS·c bytes).
// Gathers: one row per destination row; the runner has validated every index and resolved the
// row's cache entry to a byte offset (GatherCallArgs), so the kernel is a copy (cp_gather_cache,
// gather auto) or a dequantisation x = rnd_T(decode(code) · scale) (gather fp8) of one span.
// Every span has a compile-time length: full vectors, then a masked (AVX-512) or staged (AVX2)
// tail, so any head size and row alignment works.
#include <array>
#include <bit>
#include <cstddef>

#include "codegen/x86/cache_generator.h"
#include "codegen/x86/kernels.h"
#include "ir/params_cache.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;

// Vector registers of the scales (the encoder and the helpers use 13..15; spans use 0..3).
constexpr int kKScale = 4, kVScale = 5, kKRecip = 6, kVRecip = 7;
// The paged writer's pinned constants (fp8 whole blocks): between the scales and the
// helpers' registers (the column writer holds 23..31).
constexpr std::array<int, 5> kPinnedRegs{8, 9, 10, 11, 12};
// The flash writer's and convert_fp8's quantiser's (bf16 into fp8): above the scales, and
// above the 16-bit steps' 16..22.
constexpr std::array<int, 11> kFlashPinnedRegs{8, 9, 10, 11, 12, 23, 24, 25, 26, 27, 28};
// The fused rope + flash writer's, per token while it writes (its scales hold 8..11, and the
// rotation's registers are free until the next token's begin_rope_token reloads them).
constexpr std::array<int, 10> kRopeFlashPinnedRegs{12, 23, 24, 25, 26, 27, 28, 29, 30, 31};
// The dequantising gather's and convert_fp8's dequantiser's: outside the steps' 0..2, the
// scale's 4, the generic tail's 13..15 and the table's 24..27.
constexpr std::array<int, 2> kGatherPinnedRegs{16, 17};

class FlashWriteGenerator : public CacheGenerator {
 public:
  /// `scale_reg`: the vector register of k_scale (v_scale in the next one, their
  /// reciprocals two above each).
  FlashWriteGenerator(X86Isa isa, const ir::FlashCacheWriteParams& p, int scale_reg = kKScale)
      : CacheGenerator(isa),
        p_(p),
        fp8_(p.kv != ir::KvCacheDtype::kAuto),
        format_(fp8_format(p.kv)),
        esize_(int64_t(dtype_size(p.dtype))),
        csize_(int64_t(ir::cache_element_size(p.dtype, p.kv))),
        k_scale_(scale_reg),
        v_scale_(scale_reg + 1) {}

  void generate() {
    prologue();
    load_scales();
    // The 16-bit steps with their constants in registers (quantise_step_constants says why).
    // (kFlashPinnedRegs sit above the scales at their default registers 4..7.)
    const bool pinned = pins_step_constants() && k_scale_ == kKScale;
    if (pinned) pin_leading_constants(step_constants(), kFlashPinnedRegs);
    with_streaming_stores(row_bytes(), [&] { token_loop(p_.block_size, [&] { write_token(); }); });
    if (pinned) unpin_constants();
    release_quantise_tables();
    epilogue();
  }

 protected:
  // Per-tensor fp8 scales into their registers (rdi: the args), and their mantissa tables
  // (reserve_quantise_tables; released before the epilogue).
  void load_scales() {
    if (fp8_ && !p_.per_head_scale) {
      mov(rax, ptr[rdi + offsetof(CacheWriteCallArgs, k_scale)]);
      vbroadcastss(vmm(k_scale_), ptr[rax]);
      mov(rax, ptr[rdi + offsetof(CacheWriteCallArgs, v_scale)]);
      vbroadcastss(vmm(v_scale_), ptr[rax]);
      scale_reciprocal(recip_of(vmm(k_scale_)), vmm(k_scale_));
      scale_reciprocal(recip_of(vmm(v_scale_)), vmm(v_scale_));
      reserve_quantise_tables(p_.dtype, format_, {vmm(k_scale_), vmm(v_scale_)},
                              rows_times(p_.head_count_kv * p_.head_size));
    }
  }

  // The register of scale_reciprocal(scale).
  Xmm recip_of(const Xmm& scale) const { return vmm(scale.getIdx() + 2); }

  // Cache bytes one token writes (key and value rows).
  int64_t row_bytes() const { return 2 * p_.head_count_kv * p_.head_size * csize_; }

  // The token's key and value rows into the caches (b in rax, o in rcx).
  void write_token() {
    const bool nhd = p_.layout == ir::CacheLayout::kNhd;
    const int64_t row = p_.head_count_kv * p_.head_size;
    // offset = b * block_stride + o * page_stride
    imul(rax, ptr[reg_args_ + offsetof(CacheWriteCallArgs, block_stride)]);
    imul(rcx, rcx, (nhd ? row : p_.head_size) * csize_);
    lea(reg_offset_, ptr[rax + rcx]);
    write(offsetof(CacheWriteCallArgs, key), offsetof(CacheWriteCallArgs, key_row_stride),
          offsetof(CacheWriteCallArgs, key_cache), offsetof(CacheWriteCallArgs, k_scale),
          vmm(k_scale_));
    write(offsetof(CacheWriteCallArgs, value), offsetof(CacheWriteCallArgs, value_row_stride),
          offsetof(CacheWriteCallArgs, value_cache), offsetof(CacheWriteCallArgs, v_scale),
          vmm(v_scale_));
  }

  // The constants of the 16-bit steps the writes quantise with, worth pinning (none: the
  // writes keep them in the pool).
  std::vector<uint32_t> step_constants() const {
    return fp8_ ? quantise_step_constants(p_.dtype, format_) : std::vector<uint32_t>{};
  }
  bool pins_step_constants() const { return !step_constants().empty(); }

  const ir::FlashCacheWriteParams p_;
  const bool fp8_;
  const DType format_;

 private:
  void write(size_t data, size_t stride, size_t cache, size_t scale_ptr, const Xmm& scale) {
    load_row(data, stride);
    mov(reg_dst_, ptr[reg_args_ + cache]);
    add(reg_dst_, reg_offset_);
    const bool nhd = p_.layout == ir::CacheLayout::kNhd;
    if (nhd && !p_.per_head_scale) {
      span(reg_dst_, reg_src_, p_.head_count_kv * p_.head_size, scale);
      return;
    }
    // Per head: source heads are D elements apart; cache heads D (NHD) or BS·D (HND).
    const int64_t head_stride = (nhd ? p_.head_size : p_.block_size * p_.head_size) * csize_;
    if (!nhd && copies_heads_in_batches()) {
      copy_heads_in_batches(head_stride);
      return;
    }
    if (p_.per_head_scale) mov(reg_scale_, ptr[reg_args_ + scale_ptr]);
    Label l_head;
    mov(reg_heads_, p_.head_count_kv);
    L(l_head);
    if (p_.per_head_scale) {
      vbroadcastss(scale, ptr[reg_scale_]);
      scale_reciprocal(recip_of(scale), scale);
      add(reg_scale_, 4);
    }
    mov(reg_p_, reg_src_);
    mov(reg_q_, reg_dst_);
    span(reg_q_, reg_p_, p_.head_size, scale);
    add(reg_src_, p_.head_size * esize_);
    add(reg_dst_, head_stride);
    dec(reg_heads_);
    jnz(l_head, T_NEAR);
  }

  // HND copies (kv=auto) at AVX-512 outside the streaming loop load a token's heads in batches
  // that fill the 32 vector registers (every one is free in a copy: no scales, no pinned
  // constants, the fused rope's reloaded per token), then store the batch. Head by head, the
  // cache heads BS·D·e bytes apart (4 KiB at D = 128, BS = 16) put every store of a token at
  // the same low 12 address bits, and a source load that met those bits waited for the queued
  // stores (4K aliasing). bench_cache's HND auto row of 16 tokens, four processes each (each
  // places its buffers afresh): head by head 1.61-1.74 us, 0.96-1.09x the plain loop of the
  // same process; all 8 heads loaded first 1.33-1.51 us, 0.80-0.89x; batches of 4 heads (16
  // registers) 0.86-0.97x, of 2 heads 1.02-1.14x; against x86-137 over ten processes
  // 1.46-1.77 -> 1.36-1.61 us (0.79-0.95x). A one-token call pays for it (0.07-0.12 ->
  // 0.11-0.14 us; the plain loop 0.42-0.49): with nothing queued to alias, the head-by-head
  // copy's early stores were the faster start (docs/decisions.md, "Thirtieth round"). Heads
  // whose bytes are not whole vectors keep the span path.
  static constexpr int kBatchRegs = 32;

  // Whether write() copies the heads in batches (copy_heads_in_batches).
  bool copies_heads_in_batches() const {
    const int64_t head_bytes = p_.head_size * csize_;
    return avx512() && !fp8_ && !in_streaming_loop() && head_bytes % 64 == 0 &&
           head_bytes <= 64 * kBatchRegs;
  }

  // The token's heads from reg_src_ (D elements apart) to reg_dst_ (`head_stride` bytes apart)
  // in batches of kBatchRegs / (vectors per head) heads: a loop of whole batches, then the rest.
  void copy_heads_in_batches(int64_t head_stride) {
    const int64_t src_head = p_.head_size * esize_;  // == the cache's: kv=auto
    const int vecs = int(p_.head_size * csize_ / 64);
    const int64_t batch = std::min<int64_t>(p_.head_count_kv, kBatchRegs / vecs);
    const int64_t whole = p_.head_count_kv / batch, rest = p_.head_count_kv % batch;
    // n heads at reg_src_ / reg_dst_: every load, then every store.
    const auto copy_batch = [&](int64_t n) {
      for (int64_t h = 0; h < n; ++h) {
        for (int v = 0; v < vecs; ++v) {
          vmovdqu64(Zmm(int(h) * vecs + v), ptr[reg_src_ + h * src_head + v * 64]);
        }
      }
      for (int64_t h = 0; h < n; ++h) {
        for (int v = 0; v < vecs; ++v) {
          vmovdqu64(ptr[reg_dst_ + h * head_stride + v * 64], Zmm(int(h) * vecs + v));
        }
      }
    };
    const auto next_batch = [&] {
      add(reg_src_, batch * src_head);
      add(reg_dst_, batch * head_stride);
    };
    if (whole == 1) {
      copy_batch(batch);
      if (rest > 0) next_batch();
    } else {
      Label l_batch;
      mov(reg_heads_, whole);
      L(l_batch);
      copy_batch(batch);
      next_batch();
      dec(reg_heads_);
      jnz(l_batch, T_NEAR);
    }
    if (rest > 0) copy_batch(rest);
  }

  void span(const Reg64& dst, const Reg64& src, int64_t elements, const Xmm& scale) {
    write_span(dst, src, elements, p_.dtype, fp8_, format_, scale, recip_of(scale));
  }

  const int64_t esize_, csize_;
  const int k_scale_, v_scale_;
};

// rotary_embedding_and_cache_flash: per token t (rows = positions; the runner has checked every
// position and slot), the query heads and the key heads rotated in place (rotary_embedding's
// rotation, Generator::rotate_rope_head), then, for t < slot_tokens with a slot
// >= 0, the rotated key row (just written, read back from L1) and the value row written into
// the flash cache exactly as reshape_and_cache_flash does. One pass over the key instead of
// rotary_embedding's read+write followed by the cache write's read.
class RopeFlashGenerator : public FlashWriteGenerator {
 public:
  RopeFlashGenerator(X86Isa isa, const ir::RopeFlashCacheWriteParams& p)
      : FlashWriteGenerator(isa,
                            ir::FlashCacheWriteParams{p.dtype, p.kv, p.head_count_kv, p.head_size,
                                                      p.block_size, p.layout, p.per_head_scale},
                            kRopeScales),
        q_(p),
        rope_(plan_rope(p.dtype, p.dtype, p.rot_dim, p.style, kRopeConstantRegs)) {}

  void generate() {
    prologue();
    load_scales();
    // The 16-bit steps with (all but one of) their constants in registers, loaded per token:
    // the rotation holds those registers between tokens (quantise_step_constants says why).
    const bool pinned = pins_step_constants();
    auto write_pinned = [&] {
      if (pinned) pin_leading_constants(step_constants(), kRopeFlashPinnedRegs);
      write_token();
      if (pinned) unpin_constants();
    };
    with_streaming_stores(row_bytes(), [&] {
      token_loop(q_.block_size, write_pinned, offsetof(CacheWriteCallArgs, slots),
                 [&](const Label& l_skip) { rotate_token(l_skip); });
    });
    release_quantise_tables();
    epilogue();
  }

 private:
  // The scales (8, 9) and their reciprocals (10, 11) live above the rotation's registers
  // (0..7) and the spans' (0..3).
  static constexpr int kRopeScales = 8;

  void rotate_token(const Label& l_skip) {
    const int64_t esize = int64_t(dtype_size(q_.dtype));
    // reg_o_ = the token's cos/sin row
    mov(reg_o_, ptr[reg_args_ + offsetof(RopeFlashCallArgs, positions)]);
    mov(reg_o_, ptr[reg_o_ + reg_row_ * 8]);
    imul(reg_o_, reg_o_, int(q_.rot_dim * esize));
    add(reg_o_, ptr[reg_args_ + offsetof(RopeFlashCallArgs, cos_sin_cache)]);
    begin_rope_token(rope_, reg_o_);
    // Query heads (token and head strides from the args), then key heads (D apart).
    mov(reg_p_, ptr[reg_args_ + offsetof(RopeFlashCallArgs, query_token_stride)]);
    imul(reg_p_, reg_row_);
    add(reg_p_, ptr[reg_args_ + offsetof(RopeFlashCallArgs, query)]);
    heads(q_.head_count_q,
          [&] { add(reg_p_, ptr[reg_args_ + offsetof(RopeFlashCallArgs, query_head_stride)]); });
    mov(reg_p_, ptr[reg_args_ + offsetof(CacheWriteCallArgs, key_row_stride)]);
    imul(reg_p_, reg_row_);
    add(reg_p_, ptr[reg_args_ + offsetof(CacheWriteCallArgs, key)]);
    heads(q_.head_count_kv, [&] { add(reg_p_, int(q_.head_size * esize)); });
    end_rope_token(rope_);
    // Rows past the slot_mapping are rotated only.
    cmp(reg_row_, ptr[reg_args_ + offsetof(RopeFlashCallArgs, slot_tokens)]);
    jge(l_skip, T_NEAR);
  }

  // `count` heads from reg_p_, `next()` stepping reg_p_ to the next head.
  template <class Next>
  void heads(int64_t count, Next next) {
    Label l_head;
    mov(reg_heads_, count);
    L(l_head);
    rotate_rope_head(rope_, reg_p_, reg_o_);
    next();
    dec(reg_heads_);
    jnz(l_head, T_NEAR);
  }

  const ir::RopeFlashCacheWriteParams q_;
  const RopeRotation rope_;
};

class PagedWriteGenerator : public CacheGenerator {
 public:
  PagedWriteGenerator(X86Isa isa, const ir::PagedCacheWriteParams& p)
      : CacheGenerator(isa),
        p_(p),
        fp8_(p.kv != ir::KvCacheDtype::kAuto),
        format_(fp8_format(p.kv)),
        esize_(int64_t(dtype_size(p.dtype))),
        csize_(int64_t(ir::cache_element_size(p.dtype, p.kv))),
        x_(ir::paged_key_x(p.dtype, p.kv)) {}

  void generate() {
    prologue();
    if (fp8_) {
      mov(rax, ptr[rdi + offsetof(CacheWriteCallArgs, k_scale)]);
      vbroadcastss(vmm(kKScale), ptr[rax]);
      mov(rax, ptr[rdi + offsetof(CacheWriteCallArgs, v_scale)]);
      vbroadcastss(vmm(kVScale), ptr[rax]);
      scale_reciprocal(vmm(kKRecip), vmm(kKScale));
      scale_reciprocal(vmm(kVRecip), vmm(kVScale));
    }
    const int64_t block_bytes = p_.head_count_kv * p_.head_size * p_.block_size * csize_;
    auto token = [&] {
      // reg_offset_ = b * block bytes (both caches); reg_o_ = o
      imul(reg_offset_, rax, block_bytes);
      mov(reg_o_, rcx);
      write_key();
      write_value();
    };
    if (!block_path()) {
      token_loop(p_.block_size, token);
    } else {
      const int scratch = int(block_scratch_bytes());
      sub(rsp, scratch);
      if (fp8_) {
        reserve_quantise_tables(p_.dtype, format_, {vmm(kKScale), vmm(kVScale)},
                                rows_times(p_.head_count_kv * p_.head_size), kStageBytes + scratch);
      }
      if (pins_table_constants()) {
        // The table steps' constants in registers: from the pool each is a 64-byte load per
        // use, ~14 per 64 codes beside the table's own.
        pin_leading_constants(table_step_constants(format_).list(), kPinnedRegs);
      }
      with_streaming_stores(2 * p_.head_count_kv * p_.head_size * csize_, [&] {
        token_loop(p_.block_size, token, offsetof(CacheWriteCallArgs, slots),
                   [&](const Label& l_next) { whole_block(block_bytes, l_next); });
      });
      if (pins_table_constants()) unpin_constants();
      release_quantise_tables();
      add(rsp, scratch);
    }
    epilogue();
  }

 private:
  // ---- Whole blocks (prefill) ---------------------------------------------------------------
  // The per-token path writes 16 bytes (a key chunk) or one element (a value) per BS·16 or
  // BS·c bytes, so every line it touches is read for ownership and each value element costs
  // an instruction pair. When the BS rows from reg_row_ have the consecutive slots s ..
  // s + BS - 1 of one block (s % BS == 0: a prefill's slot mapping), each head's key region
  // [D/x][BS][16 bytes] and value region [D][BS·c] are written front to back in whole 64-byte
  // lines instead (streaming stores in a large call, see with_streaming_stores):
  //   key line (j, q)  = chunk j (16 bytes) of tokens 4q .. 4q + 3: one 16-byte load and three
  //                      vinserti32x4 (AVX2: two ymm halves of two chunks each);
  //   value rows       CacheGenerator::transposed_columns: per dword column one vpgatherdd per
  //                      16 tokens, one vpermw / vpermb to the column's rows (the AVX-512
  //                      levels but avx512_vbmi; fp8 from avx512_fp16 on), else
  //                      transposed_lanes' in-register transposes of 16 × 16 bytes
  //                      (gathered_values()).
  // kv=auto reads the lines' elements from the tokens' rows. fp8 first quantises the BS rows of
  // G heads at a time (quantise_span over G·D values per row: long sequential spans, the
  // mantissa tables where they apply) into a stack stage [BS][G·D] of codes, then builds the
  // G heads' lines from it (G: the largest divisor of H with BS·G·D <= kMaxStageBytes, or 1).
  // BS a power of two from 16 to 128; with the gathers the token stride must fit their 32-bit
  // index. In the streaming loop both caches must be 64-byte aligned (every line then is).
  bool block_path() const {
    const int64_t bs = p_.block_size;
    return bs >= 16 && bs <= kMaxColumnTokens && (bs & (bs - 1)) == 0;
  }
  // The value rows through transposed_columns' gathers, else transposed_lanes' in-register
  // transposes. The gathers serve the AVX-512 levels of the Xeons they were measured on (fp8's
  // byte columns only where vpermb exists), not the avx512_vbmi level (Zen 4 and 5, the level
  // no Intel CPU stops at): on Zen 4 the transposes wrote a prefill's bf16 blocks at twice the
  // gathers' rate and its fp8 blocks a little faster (docs/decisions.md, "Twenty-ninth
  // round"). fp8 from bf16 there runs them on ymm16..24, clear of the pinned table constants.
  bool gathered_values() const {
    if (!avx512() || (has_vbmi() && !has_fp16())) return false;
    return !fp8_ || has_vbmi();
  }

  // The bf16 table steps' constants pinned in kPinnedRegs for the whole-block stages.
  bool pins_table_constants() const { return fp8_ && p_.dtype == DType::kBF16 && has_vbmi(); }

  static constexpr int64_t kMaxStageBytes = 16384;

  // (BS - 1)·stride < 2^31 for the gathers' offsets.
  int64_t max_gather_stride() const { return ((int64_t(1) << 31) - 1) / p_.block_size; }
  // Heads per fp8 stage.
  int64_t stage_heads() const {
    int64_t g = 1;
    for (int64_t h = 1; h <= p_.head_count_kv; ++h) {
      if (p_.head_count_kv % h == 0 && p_.block_size * h * p_.head_size <= kMaxStageBytes) g = h;
    }
    return g;
  }
  // The kernel's stack above the Generator's staging buffer (block_path only): the block's
  // offset (8 bytes, at [rsp + kStageBytes]) and the fp8 stage, 64-byte aligned at run time.
  int64_t block_scratch_bytes() const {
    const int64_t stage = fp8_ ? p_.block_size * stage_heads() * p_.head_size + 64 : 0;
    return (16 + stage + 15) / 16 * 16;
  }
  Address block_offset_slot() { return qword[rsp + kStageBytes]; }
  // dst = the stage (+ `extra` bytes).
  void stage_base(const Reg64& dst, int64_t extra = 0) {
    aligned_stack_address(dst, kStageBytes + 16);
    if (extra != 0) add(dst, int(extra));
  }

  void whole_block(int64_t block_bytes, const Label& l_next) {
    Label l_single;
    const int64_t bs = p_.block_size;
    lea(rax, ptr[reg_row_ + int(bs)]);
    cmp(rax, reg_row_end_);
    jg(l_single, T_NEAR);
    for (size_t stride : {offsetof(CacheWriteCallArgs, key_row_stride),
                          offsetof(CacheWriteCallArgs, value_row_stride)}) {
      if (!gathered_values()) break;
      mov(rcx, ptr[reg_args_ + stride]);
      cmp(rcx, int(max_gather_stride()));
      ja(l_single, T_NEAR);  // unsigned: negative strides too
    }
    if (in_streaming_loop()) {
      mov(rax, ptr[reg_args_ + offsetof(CacheWriteCallArgs, key_cache)]);
      or_(rax, ptr[reg_args_ + offsetof(CacheWriteCallArgs, value_cache)]);
      test(al, 63);
      jnz(l_single, T_NEAR);
    }
    mov(rax, ptr[reg_slots_ + reg_row_ * 8]);
    test(rax, rax);
    js(l_single, T_NEAR);
    test(al, int(bs - 1));
    jnz(l_single, T_NEAR);
    require_consecutive_slots(reg_slots_ + reg_row_ * 8, rax, bs, l_single);
    shr(rax, std::countr_zero(uint64_t(bs)));
    imul(rax, rax, int(block_bytes));
    mov(block_offset_slot(), rax);
    write_block(true);
    write_block(false);
    add(reg_row_, int(bs - 1));  // l_next adds the last one
    jmp(l_next, T_NEAR);
    L(l_single);
  }

  // The key (`key`) or value regions of the BS tokens from reg_row_ in the block at
  // block_offset_slot() (bytes from either cache's base).
  void write_block(bool key) {
    const size_t data =
        key ? offsetof(CacheWriteCallArgs, key) : offsetof(CacheWriteCallArgs, value);
    const size_t stride = key ? offsetof(CacheWriteCallArgs, key_row_stride)
                              : offsetof(CacheWriteCallArgs, value_row_stride);
    load_row(data, stride);
    mov(reg_dst_, ptr[reg_args_ + (key ? offsetof(CacheWriteCallArgs, key_cache)
                                       : offsetof(CacheWriteCallArgs, value_cache))]);
    add(reg_dst_, block_offset_slot());
    // The head's lines from rows `row_stride` bytes apart (0: the call's row stride).
    const auto lines = [&](int64_t row_stride) {
      if (!key && gathered_values()) {
        value_lines(row_stride);
        return;
      }
      if (row_stride > 0) {
        mov(rcx, row_stride);
      } else {
        mov(rcx, ptr[reg_args_ + stride]);
      }
      if (key) {
        key_lines();
      } else {
        transposed_lanes(reg_q_, {{reg_p_, rax, reg_o_, reg_count_}, rcx, rdx}, reg_offset_,
                         p_.head_size * csize_, int(p_.block_size), int(csize_),
                         pins_table_constants() ? kHighLaneRegs : kLaneRegs);
      }
    };
    if (!fp8_) {
      heads([&] { lines(0); });
      return;
    }
    // fp8: per group of G heads (reg_src_ = its token-0 row, reg_dst_ = its first head's
    // region), the stage, then each head's lines from it (they advance reg_p_ to the next
    // head's codes, reg_q_ to its region).
    const int64_t group = stage_heads();
    Label l_group, l_head;
    mov(reg_heads_, p_.head_count_kv / group);
    L(l_group);
    stage_codes(key, stride, group * p_.head_size);
    stage_base(reg_p_);
    mov(reg_q_, reg_dst_);
    L(l_head);
    lines(group * p_.head_size);
    stage_base(rax, group * p_.head_size);
    cmp(reg_p_, rax);
    jb(l_head, T_NEAR);
    mov(reg_dst_, reg_q_);
    add(reg_src_, int(group * p_.head_size * esize_));
    dec(reg_heads_);
    jnz(l_group, T_NEAR);
  }

  // The fp8 codes of `values` values from reg_src_ of each of the BS tokens (rows `stride`
  // bytes apart) into the stage's rows [BS][values]. Uses rax, rcx, rdx, reg_o_, reg_offset_,
  // reg_count_ and quantise_span's vector registers.
  void stage_codes(bool key, size_t stride, int64_t values) {
    const Xmm scale = vmm(key ? kKScale : kVScale), recip = vmm(key ? kKRecip : kVRecip);
    Label l_row;
    mov(rcx, reg_src_);
    stage_base(rdx);
    L(l_row);
    mov(reg_o_, rcx);
    mov(reg_offset_, rdx);
    quantise_span(reg_offset_, reg_o_, values, p_.dtype, format_, scale, recip);
    add(rcx, ptr[reg_args_ + stride]);
    add(rdx, int(values));
    stage_base(rax, p_.block_size * values);
    cmp(rdx, rax);
    jb(l_row, T_NEAR);
  }

  // Key lines of the head at reg_q_ from BS rows at reg_p_, rcx bytes apart: per group of 16
  // tokens, per chunk j, the four lines (j, q) of its tokens 4q .. 4q + 3. reg_p_ ends D·c
  // bytes on, reg_q_ at the head's end. Uses rax, rdx, reg_o_, reg_count_, reg_offset_,
  // zmm0..3.
  void key_lines() {
    using Xbyak::Zmm;
    const int64_t bs = p_.block_size, row = p_.head_size * csize_;
    const int64_t chunk_bytes = bs * 16, head_bytes = p_.head_size / x_ * chunk_bytes;
    const Reg64 rows[4] = {reg_p_, rax, reg_o_, reg_count_};  // tokens 16g + 0, 4, 8, 12
    lea(rdx, ptr[rcx + rcx * 2]);
    for (int64_t g = 0; g < bs / 16; ++g) {
      if (g > 0) {  // the next 16 tokens' rows and lines
        sub(reg_p_, int(row));
        lea(reg_p_, ptr[reg_p_ + rcx * 8]);
        lea(reg_p_, ptr[reg_p_ + rcx * 8]);
        sub(reg_q_, int(head_bytes - 4 * 64));
      }
      for (int q = 1; q < 4; ++q) lea(rows[q], ptr[rows[q - 1] + rcx * 4]);
      lea(reg_offset_, ptr[reg_p_ + int(row)]);  // token 16g's row end
      Label l_chunk;
      L(l_chunk);
      for (int q = 0; q < 4; ++q) {
        if (avx512()) {
          const Zmm line(q);
          vmovdqu32(Xbyak::Xmm(q), ptr[rows[q]]);
          vinserti32x4(line, line, ptr[rows[q] + rcx], 1);
          vinserti32x4(line, line, ptr[rows[q] + rcx * 2], 2);
          vinserti32x4(line, line, ptr[rows[q] + rdx], 3);
          store_slab_piece(ptr[reg_q_ + q * 64], line, 64);
        } else {  // the line's halves
          const Xbyak::Ymm first(0), second(1);
          vmovdqu(Xbyak::Xmm(0), ptr[rows[q]]);
          vinserti128(first, first, ptr[rows[q] + rcx], 1);
          vmovdqu(Xbyak::Xmm(1), ptr[rows[q] + rcx * 2]);
          vinserti128(second, second, ptr[rows[q] + rdx], 1);
          store_vex(ptr[reg_q_ + q * 64], first, in_streaming_loop());
          store_vex(ptr[reg_q_ + q * 64 + 32], second, in_streaming_loop());
        }
        add(rows[q], 16);
      }
      add(reg_q_, int(chunk_bytes));
      cmp(reg_p_, reg_offset_);
      jb(l_chunk, T_NEAR);
    }
    if (bs > 16) {  // back to token 0's row end and the head's end
      mov(rax, rcx);
      imul(rax, rax, int(bs - 16));
      sub(reg_p_, rax);
      sub(reg_q_, int((bs / 16 - 1) * 4 * 64));
    }
  }

  // Value rows of the head at reg_q_ from BS rows at reg_p_ (transposed_columns); `stride`: the
  // rows' stride in bytes, or 0 for the call's value row stride. Uses rdx, zmm0..2, zmm23..24, k2.
  void value_lines(int64_t stride) {
    transposed_column_offsets(int(p_.block_size), stride,
                              dword[reg_args_ + offsetof(CacheWriteCallArgs, value_row_stride)]);
    transposed_columns(reg_q_, reg_p_, rdx, p_.head_size * csize_ / 4, int(p_.block_size),
                       int(csize_));
  }

  // Head h's chunks j at reg_dst_ + j·BS·16; reg_dst_ = key_cache + b·block + o·16.
  void write_key() {
    load_row(offsetof(CacheWriteCallArgs, key), offsetof(CacheWriteCallArgs, key_row_stride));
    mov(reg_dst_, reg_o_);
    shl(reg_dst_, 4);
    add(reg_dst_, reg_offset_);
    add(reg_dst_, ptr[reg_args_ + offsetof(CacheWriteCallArgs, key_cache)]);
    const int64_t chunks = p_.head_size / x_;
    const int64_t chunk_stride = p_.block_size * 16;
    const int64_t src_chunk = x_ * esize_;
    heads([&] {
      for_units(
          chunks, [&](int64_t j) { key_chunk(int(j * chunk_stride), int(j * src_chunk)); },
          [&](int k) {
            add(reg_q_, k * chunk_stride);
            add(reg_p_, k * src_chunk);
          });
    });
  }

  // One x-chunk: 16 bytes of cache from x input elements.
  void key_chunk(int dst, int src) {
    if (!fp8_) {
      vmovups(Xmm(13), ptr[reg_p_ + src]);
      vmovups(ptr[reg_q_ + dst], Xmm(13));
      return;
    }
    // 16 codes: one zmm, or two ymm halves of 8.
    for (int half = 0; half < 16 / lanes(); ++half) {
      const Xmm v = vmm(half);
      load_scaled(v, p_.dtype, reg_p_ + src + half * lanes() * int(esize_), lanes(), vmm(kKScale),
                  vmm(kKRecip), format_);
      fp8_encode(v, format_);
      store_fp8(v, reg_q_ + dst + half * lanes(), lanes());
    }
  }

  // Element d of head h at reg_dst_ + d·BS·c; reg_dst_ = value_cache + b·block + o·c.
  void write_value() {
    load_row(offsetof(CacheWriteCallArgs, value), offsetof(CacheWriteCallArgs, value_row_stride));
    if (csize_ == 1) {
      mov(reg_dst_, reg_o_);
    } else {
      imul(reg_dst_, reg_o_, int(csize_));
    }
    add(reg_dst_, reg_offset_);
    add(reg_dst_, ptr[reg_args_ + offsetof(CacheWriteCallArgs, value_cache)]);
    const int64_t dst_stride = p_.block_size * csize_;
    // Units of one vector of elements (fp8: converted, staged at [rsp], then scattered).
    const int64_t units = p_.head_size / lanes();
    const int tail = int(p_.head_size % lanes());
    heads([&] {
      for_units(
          units, [&](int64_t u) { value_unit(int(u), lanes(), dst_stride); },
          [&](int k) {
            add(reg_q_, k * lanes() * dst_stride);
            add(reg_p_, k * lanes() * esize_);
          });
      // After a loop the pointers sit at the first unrolled remainder unit.
      const int64_t tail_unit = units > kMaxUnrolled ? units % kUnroll : units;
      if (tail > 0) value_unit(int(tail_unit), tail, dst_stride);
    });
  }

  // Elements [u·lanes, u·lanes + count) of the current head, relative to reg_p_/reg_q_.
  void value_unit(int u, int count, int64_t dst_stride) {
    const int first = u * lanes();
    if (!fp8_) {
      for (int i = 0; i < count; ++i) {
        const int d = first + i;
        const RegExp src = reg_p_ + d * int(esize_);
        const RegExp dst = reg_q_ + int(d * dst_stride);
        if (esize_ == 4) {
          mov(eax, dword[src]);
          mov(dword[dst], eax);
        } else {
          mov(ax, word[src]);
          mov(word[dst], ax);
        }
      }
      return;
    }
    load_scaled(vmm(0), p_.dtype, reg_p_ + first * int(esize_), count, vmm(kVScale), vmm(kVRecip),
                format_);
    fp8_encode(vmm(0), format_);
    store_fp8(vmm(0), RegExp(rsp) + 64, count);
    for (int i = 0; i < count; ++i) {
      mov(al, byte[rsp + 64 + i]);
      mov(byte[reg_q_ + int((first + i) * dst_stride)], al);
    }
  }

  // Runs `body` per head with reg_p_ = head's source, reg_q_ = head's cache base.
  template <class Body>
  void heads(Body body) {
    const int64_t head_bytes = p_.head_size * p_.block_size * csize_;
    Label l_head;
    mov(reg_heads_, p_.head_count_kv);
    L(l_head);
    mov(reg_p_, reg_src_);
    mov(reg_q_, reg_dst_);
    body();
    add(reg_src_, p_.head_size * esize_);
    add(reg_dst_, head_bytes);
    dec(reg_heads_);
    jnz(l_head, T_NEAR);
  }

  const ir::PagedCacheWriteParams p_;
  const bool fp8_;
  const DType format_;
  const int64_t esize_, csize_, x_;
};

// concat_and_cache_mla (spec §2.4.a): entry = kv_cache + b·block_stride + o·entry_stride
// (run-time strides, bytes) holds [kv_c row (R elements) | k_pe row (P elements)], each a
// byte copy (auto) or fp8 codes of x / scale. fp8_ds_mla is not generated here.
class MlaWriteGenerator : public CacheGenerator {
 public:
  MlaWriteGenerator(X86Isa isa, const ir::MlaCacheWriteParams& p)
      : CacheGenerator(isa),
        p_(p),
        fp8_(p.kv != ir::KvCacheDtype::kAuto),
        format_(fp8_format(p.kv)),
        esize_(int64_t(dtype_size(p.dtype))),
        csize_(int64_t(ir::cache_element_size(p.dtype, p.kv))) {}

  void generate() {
    prologue();
    if (fp8_) {
      mov(rax, ptr[rdi + offsetof(CacheWriteCallArgs, k_scale)]);
      vbroadcastss(vmm(kKScale), ptr[rax]);
      scale_reciprocal(vmm(kKRecip), vmm(kKScale));
      reserve_quantise_tables(p_.dtype, format_, {vmm(kKScale)},
                              rows_times(p_.kv_lora_rank + p_.pe_dim));
    }
    with_streaming_stores((p_.kv_lora_rank + p_.pe_dim) * csize_, [&] { write_tokens(); });
    release_quantise_tables();
    epilogue();
  }

 private:
  void write_tokens() {
    token_loop(p_.block_size, [&] {
      // reg_q_ = entry = kv_cache + b * block_stride + o * entry_stride (spans advance their
      // pointers only partly, so the k_pe part is addressed from reg_q_).
      imul(rax, ptr[reg_args_ + offsetof(CacheWriteCallArgs, block_stride)]);
      imul(rcx, ptr[reg_args_ + offsetof(CacheWriteCallArgs, entry_stride)]);
      lea(reg_q_, ptr[rax + rcx]);
      add(reg_q_, ptr[reg_args_ + offsetof(CacheWriteCallArgs, key_cache)]);
      load_row(offsetof(CacheWriteCallArgs, key), offsetof(CacheWriteCallArgs, key_row_stride));
      mov(reg_dst_, reg_q_);
      span(reg_dst_, reg_src_, p_.kv_lora_rank);
      load_row(offsetof(CacheWriteCallArgs, value), offsetof(CacheWriteCallArgs, value_row_stride));
      mov(reg_dst_, reg_q_);
      add(reg_dst_, p_.kv_lora_rank * csize_);
      span(reg_dst_, reg_src_, p_.pe_dim);
    });
  }

  void span(const Reg64& dst, const Reg64& src, int64_t elements) {
    write_span(dst, src, elements, p_.dtype, fp8_, format_, vmm(kKScale), vmm(kKRecip));
  }

  const ir::MlaCacheWriteParams p_;
  const bool fp8_;
  const DType format_;
  const int64_t esize_, csize_;
};

// swap_blocks: per pair, block_bytes bytes from src + pairs[2i] to dst + pairs[2i + 1].
class SwapBlocksGenerator : public CacheGenerator {
 public:
  /// `rep_movsb`: each block by `rep movsb` (the rep_movsb knob) instead of vector loops.
  SwapBlocksGenerator(X86Isa isa, const ir::SwapBlocksParams& p, bool rep_movsb)
      : CacheGenerator(isa), p_(p), rep_movsb_(rep_movsb) {}

  void generate() {
    prologue();
    mov(reg_src_, ptr[rdi + offsetof(SwapBlocksCallArgs, src)]);
    mov(reg_dst_, ptr[rdi + offsetof(SwapBlocksCallArgs, dst)]);
    mov(reg_slots_, ptr[rdi + offsetof(SwapBlocksCallArgs, pairs)]);
    const auto pair_loop = [&] {
      mov(reg_row_, rsi);
      mov(reg_row_end_, rdx);
      Label l_pair, l_done;
      L(l_pair);
      cmp(reg_row_, reg_row_end_);
      jge(l_done, T_NEAR);
      mov(reg_p_, reg_row_);
      shl(reg_p_, 4);  // 16 bytes per pair
      mov(reg_q_, ptr[reg_slots_ + reg_p_ + 8]);
      mov(reg_p_, ptr[reg_slots_ + reg_p_]);
      add(reg_p_, reg_src_);
      add(reg_q_, reg_dst_);
      copy_block();
      inc(reg_row_);
      jmp(l_pair, T_NEAR);
      L(l_done);
    };
    if (rep_movsb_) {
      pair_loop();  // the string copy picks its own stores at every size
    } else {
      with_streaming_stores(p_.block_bytes, pair_loop, kStreamingSwapBytes);
    }
    epilogue();
  }

 private:
  // One block from reg_p_ to reg_q_, in the direction that keeps its loads clear of its own
  // stores' low 12 address bits. A load whose bits 0..11 match a store still in the store
  // queue waits for it (4K aliasing), and 64-byte stores let the queue hold up to 4 KiB: copied
  // forward, a block whose destination sits a little above its source modulo 4 KiB (dst - src
  // = 64 or 128 mod 4096) stalls on its loads. On Zen 4 that took `bench_cache`'s 16-pair swap
  // from 23.2-23.9 to 28.3-30.6 us (glibc's memcpy picks its direction the same way and ran
  // 23.7-25.1 at every offset; docs/decisions.md, "Twenty-ninth round"). So d = (dst - src)
  // mod 4096 in (0, 2048) copies from the end down, where the stores trail the loads from
  // above, and the rest forward: either way the loads stay 2 KiB of address bits clear of the
  // stores behind them.
  //
  // With rep_movsb_ the block goes through `rep movsb` (rdi, rsi and rcx are free once the
  // arguments and the row range are read; the ABI leaves the direction flag clear). On Zen 5
  // it copies 64 KiB blocks ~15% faster than these loops, from the L3 and from DRAM alike (it
  // does not read the destination lines for ownership; docs/decisions.md, "Thirty-first round").
  void copy_block() {
    if (rep_movsb_) {
      mov(rdi, reg_q_);
      mov(rsi, reg_p_);
      mov(rcx, p_.block_bytes);
      rep();
      movsb();
      return;
    }
    maybe_streaming(reg_q_, [&](bool streaming) {
      if (streaming) {  // forward: streaming stores leave for the write-combining buffers
        copy_span(reg_q_, reg_p_, p_.block_bytes, reg_count_, true);
        return;
      }
      Label l_backward, l_done;
      mov(rax, reg_q_);
      sub(rax, reg_p_);
      and_(eax, 4095);
      sub(eax, 1);  // d = 0 wraps to the top: forward
      cmp(eax, 2047);
      jb(l_backward, T_NEAR);
      copy_span(reg_q_, reg_p_, p_.block_bytes, reg_count_);
      jmp(l_done, T_NEAR);
      L(l_backward);
      copy_span_backward(reg_q_, reg_p_, p_.block_bytes, reg_count_);
      L(l_done);
    });
  }

  // Calls that copy at least this much per thread store with streaming stores (no read for
  // ownership of the destination lines): a 64 MB swap ran 1.3x memcpy's rate with them and
  // 0.8-1.0x without (docs/decisions.md, "Twenty-ninth round"). Smaller swaps keep the
  // ordinary stores, whose lines stay in the caches for the attention that reads the blocks
  // next: 16 blocks of 64 KiB (1 MiB) from the L3 ran at 23 us with them, where streaming
  // stores would write them to DRAM.
  static constexpr int64_t kStreamingSwapBytes = int64_t(8) << 20;

  const ir::SwapBlocksParams p_;
  const bool rep_movsb_;
};

// cp_gather_cache and gather_and_maybe_dequant_cache over destination rows: for row i with
// src_offsets[i] >= 0, dst + i * dst_row_stride <- src + src_offsets[i], `elements` elements
// copied as bytes (auto: no conversion, NaN payloads kept) or dequantised from fp8.
class GatherGenerator : public CacheGenerator {
 public:
  /// `dtype`: the destination type (and the cache type when kv is auto); any 1-, 2- or 4-byte
  /// type for a copy, f32/f16/bf16 for a dequantisation.
  GatherGenerator(X86Isa isa, DType dtype, ir::KvCacheDtype kv, int64_t elements)
      : CacheGenerator(isa),
        dtype_(dtype),
        fp8_(kv != ir::KvCacheDtype::kAuto),
        format_(fp8_format(kv)),
        elements_(elements) {}

  void generate() {
    prologue();
    const bool table = fp8_ && dequant_table(dtype_);
    if (fp8_) {
      mov(rax, ptr[rdi + offsetof(GatherCallArgs, scale)]);
      vbroadcastss(vmm(kKScale), ptr[rax]);
      if (table) build_dequant_table(format_, dtype_, vmm(kKScale));
    }
    // The table steps' lookup constants in registers (from the pool each is a 64-byte load).
    if (table) pin_constants(kSymmetricLookupConstants, kGatherPinnedRegs);
    auto row = [&](bool streaming) {
      if (table) {
        dequantise_span_table(reg_dst_, reg_src_, elements_, format_, dtype_, vmm(kKScale),
                              streaming);
      } else if (fp8_) {
        dequantise_span(reg_dst_, reg_src_, elements_, format_, dtype_, vmm(kKScale));
      } else {
        copy_span(reg_dst_, reg_src_, elements_ * int64_t(dtype_size(dtype_)), reg_count_);
      }
    };
    auto rows = [&] { gather_loop([&] { maybe_streaming(reg_dst_, row); }); };
    // A large dequantising gather streams its destination rows (the table steps;
    // with_streaming_stores says why). bench_cache on Zen 5, gather_and_maybe_dequant_cache fp8 at
    // 64 MB, best of three per process, three alternated processes: 1 thread 1.48-1.68 -> 1.33-1.37
    // ms, 2 threads 1.13-1.40 -> 1.26-1.31. The copies (cp_gather_cache, kv=auto) keep
    // ordinary stores: streamed they ran 1.2-1.3x faster on 1 thread (cp_gather_cache 1.12-1.37
    // -> 0.90-0.92 ms) but 1.1-1.3x slower on 2 (0.63-0.86 -> 0.81-0.89; the plain loop's memcpy
    // per row 0.64-1.01), where the benchmark's repeated call keeps part of its 32 MB of rows
    // in the L3 with ordinary stores and none with streaming ones (docs/decisions.md,
    // "Thirty-second round").
    if (table) {
      with_streaming_stores(elements_ * int64_t(dtype_size(dtype_)), rows);
    } else {
      rows();
    }
    if (table) unpin_constants();
    epilogue();
  }

 private:
  const DType dtype_;
  const bool fp8_;
  const DType format_;
  const int64_t elements_;
};

// convert_fp8 over row r = elements [r·N, min((r+1)·N, elements)), N = kConvertRowElements:
//   quantise    dst byte = fp8_e4m3(src / scale);
//   dequantise  dst = rnd_T(decode(src byte) · scale).
// A full row is a compile-time span; the last (partial) row loops over whole vectors and
// dispatches its tail length (1 .. lanes-1) to a specialised masked step.
class ConvertFp8Generator : public CacheGenerator {
 public:
  ConvertFp8Generator(X86Isa isa, const ir::ConvertFp8Params& p)
      : CacheGenerator(isa),
        p_(p),
        quantise_(is_float_activation(p.src)),
        table_(!quantise_ && dequant_table(p.dst)) {}

  void generate() {
    prologue();
    vbroadcastss(vmm(kKScale), ptr[rdi + offsetof(ConvertFp8CallArgs, scale)]);
    if (quantise_) scale_reciprocal(vmm(kKRecip), vmm(kKScale));
    if (table_) build_dequant_table(DType::kFp8E4m3, p_.dst, vmm(kKScale));
    if (quantise_) {
      reserve_quantise_tables(p_.src, DType::kFp8E4m3, {vmm(kKScale)},
                              [&] { mov(rax, ptr[rdi + offsetof(ConvertFp8CallArgs, elements)]); });
    }
    mov(reg_args_, rdi);
    // The steps' constants in registers (from the pool each is a 64-byte load per use).
    const std::vector<uint32_t> steps =
        quantise_ ? quantise_step_constants(p_.src, DType::kFp8E4m3) : std::vector<uint32_t>{};
    const bool pin_steps = !steps.empty();
    if (pin_steps) pin_leading_constants(steps, kFlashPinnedRegs);
    if (table_) pin_constants(kSymmetricLookupConstants, kGatherPinnedRegs);
    // A large call (a whole cache converted) streams its output past the caches (the quantiser
    // and the table dequantiser have streaming steps).
    if (quantise_ || table_) {
      with_streaming_stores(kConvertRowElements * dst_size(), [&] { row_loop(); });
    } else {
      row_loop();
    }
    if (pin_steps || table_) unpin_constants();
    release_quantise_tables();
    epilogue();
  }

 private:
  // Rows [rsi, rdx).
  void row_loop() {
    mov(reg_row_, rsi);
    mov(reg_row_end_, rdx);
    const int64_t n = kConvertRowElements;
    Label l_row, l_partial, l_next, l_done;
    L(l_row);
    cmp(reg_row_, reg_row_end_);
    jge(l_done, T_NEAR);
    // reg_p_ = first element, reg_count_ = elements in this row
    imul(reg_p_, reg_row_, int(n));
    mov(reg_heads_, ptr[reg_args_ + offsetof(ConvertFp8CallArgs, elements)]);
    sub(reg_heads_, reg_p_);
    point(reg_p_);
    cmp(reg_heads_, n);
    jl(l_partial, T_NEAR);
    full_span(n);
    jmp(l_next, T_NEAR);
    L(l_partial);
    partial_span();
    L(l_next);
    inc(reg_row_);
    jmp(l_row, T_NEAR);
    L(l_done);
  }

  int src_size() const { return int(dtype_size(p_.src)); }
  int dst_size() const { return int(dtype_size(p_.dst)); }

  // reg_src_/reg_dst_ at element `first` (a register).
  void point(const Reg64& first) {
    imul(reg_src_, first, src_size());
    add(reg_src_, ptr[reg_args_ + offsetof(ConvertFp8CallArgs, src)]);
    imul(reg_dst_, first, dst_size());
    add(reg_dst_, ptr[reg_args_ + offsetof(ConvertFp8CallArgs, dst)]);
  }

  // `count` elements at vector offset v from the pointers, in register vmm(v).
  void step(int v, int count) {
    const Xmm x = vmm(v);
    const int first = v * lanes();
    if (quantise_) {
      load_scaled(x, p_.src, reg_src_ + first * src_size(), count, vmm(kKScale), vmm(kKRecip),
                  DType::kFp8E4m3);
      fp8_encode(x, DType::kFp8E4m3);
      store_fp8(x, reg_dst_ + first, count);
    } else {
      load_fp8(x, reg_src_ + first, count);
      fp8_decode(x, DType::kFp8E4m3);
      vmulps(x, x, vmm(kKScale));
      store_f32(x, p_.dst, reg_dst_ + first * dst_size(), count);
    }
  }

  void advance(int vectors) {
    add(reg_src_, vectors * lanes() * src_size());
    add(reg_dst_, vectors * lanes() * dst_size());
  }

  void full_span(int64_t elements) {
    if (quantise_) {
      write_span(reg_dst_, reg_src_, elements, p_.src, /*fp8=*/true, DType::kFp8E4m3, vmm(kKScale),
                 vmm(kKRecip));
      return;
    }
    if (table_) {
      maybe_streaming(reg_dst_, [&](bool streaming) {
        dequantise_span_table(reg_dst_, reg_src_, elements, DType::kFp8E4m3, p_.dst, vmm(kKScale),
                              streaming);
      });
      return;
    }
    dequantise_span(reg_dst_, reg_src_, elements, DType::kFp8E4m3, p_.dst, vmm(kKScale));
  }

  // reg_heads_ (1 .. N-1) elements.
  void partial_span() {
    Label l_vector, l_tail, l_done;
    L(l_vector);
    cmp(reg_heads_, lanes());
    jl(l_tail, T_NEAR);
    step(0, lanes());
    advance(1);
    sub(reg_heads_, lanes());
    jmp(l_vector, T_NEAR);
    L(l_tail);
    for (int count = 1; count < lanes(); ++count) {
      Label l_other;
      cmp(reg_heads_, count);
      jne(l_other, T_NEAR);
      step(0, count);
      jmp(l_done, T_NEAR);
      L(l_other);
    }
    L(l_done);
  }

  const ir::ConvertFp8Params p_;
  const bool quantise_;
  const bool table_;  // dequantising through build_dequant_table's table
};

}  // namespace

Result<std::vector<uint8_t>> generate_gather(const OpSpec& spec, X86Isa isa) {
  if (spec.op == OpKind::kCpGatherCache) {
    const auto& p = spec.get<ir::CpGatherCacheParams>();
    GatherGenerator gen(isa, p.dtype, ir::KvCacheDtype::kAuto, p.entry_size);
    gen.generate();
    return gen.finish();
  }
  const auto& p = spec.get<ir::GatherCacheParams>();
  GatherGenerator gen(isa, p.dtype, p.kv, p.head_dim);
  gen.generate();
  return gen.finish();
}

Result<std::vector<uint8_t>> generate_cache_write(const OpSpec& spec, X86Isa isa) {
  if (spec.op == OpKind::kReshapeAndCacheFlash) {
    FlashWriteGenerator gen(isa, spec.get<ir::FlashCacheWriteParams>());
    gen.generate();
    return gen.finish();
  }
  PagedWriteGenerator gen(isa, spec.get<ir::PagedCacheWriteParams>());
  gen.generate();
  return gen.finish();
}

Result<std::vector<uint8_t>> generate_rope_cache_flash(const OpSpec& spec, X86Isa isa) {
  RopeFlashGenerator gen(isa, spec.get<ir::RopeFlashCacheWriteParams>());
  gen.generate();
  return gen.finish();
}

Result<std::vector<uint8_t>> generate_mla_cache_write(const OpSpec& spec, X86Isa isa) {
  const auto& p = spec.get<ir::MlaCacheWriteParams>();
  if (p.kv == ir::KvCacheDtype::kFp8DsMla) {
    return Status(StatusCode::kUnsupported,
                  "x86 concat_and_cache_mla does not generate kv=fp8_ds_mla");
  }
  MlaWriteGenerator gen(isa, p);
  gen.generate();
  return gen.finish();
}

Result<std::vector<uint8_t>> generate_swap_blocks(const OpSpec& spec, bool rep_movsb, X86Isa isa) {
  SwapBlocksGenerator gen(isa, spec.get<ir::SwapBlocksParams>(), rep_movsb);
  gen.generate();
  return gen.finish();
}

Result<std::vector<uint8_t>> generate_convert_fp8(const OpSpec& spec, X86Isa isa) {
  ConvertFp8Generator gen(isa, spec.get<ir::ConvertFp8Params>());
  gen.generate();
  return gen.finish();
}

}  // namespace jit::codegen::x86
