// The MLA cache ops that the plain concat_and_cache_mla generator does not cover
// (spec/cache_ops.md §2.4.b, §2.5, §2.9):
//
// concat_and_cache_mla, kv=fp8_ds_mla: per token, the 656-byte DeepSeek entry at
//   kv_cache + b·block_stride + o·entry_stride (bytes). Per 128-element tile k of kv_c:
//     amax_k  = max |x|        (CacheGenerator::amax_span: NaN ignored, as fmaxf)
//     scale_k = max(amax_k / 448, FLT_MIN)    (vdivss: the ref's IEEE division)
//     code_i  = e4m3(x_i / scale_k)           (CacheGenerator::load_scaled: x·(1/scale) where
//                                               that gives the same code, else vdivps)
//   codes at bytes 128k.., scale_k (fp32) at byte 512 + 4k, then the 64 rope values copied as
//   bits (128 bytes) at byte 528. Rows go in chunks of two (chunked_token_loop): both rows'
//   tile scales first, then their entries (the tiles read again from L1); each row's first
//   pass prefetches the entry of the row a chunk ahead for writing.
// concat_and_cache_mla_rope_fused: per token t (positions[t] checked by the runner):
//   every q_pe head rotated in place (padding tokens too); for a slot >= 0, k_pe rotated in
//   place and the entry written as [kv_c | rotated k_pe], each a byte copy (auto) or fp8 codes
//   of x / scale. The rotation is the rotary contract (Generator::rotate_pair); the cache gets
//   the rotated value as stored (rounded to T), read back from the k_pe row in L1.
// cp_gather_and_upconvert_fp8_kv_cache: per destination row (entry offset resolved and checked
//   by the runner): 512 values rnd_bf16(decode_e4m3(code_i) · scale_{i/128}) (fp32 product),
//   then the 128 rope bytes copied; a large call streams the rows, and each row prefetches
//   the entry kGatherPrefetchRows ahead.
#include <array>
#include <cfloat>
#include <cstddef>
#include <vector>

#include "codegen/x86/cache_generator.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;

// fp8_ds_mla entry (spec §2.4.b).
constexpr int64_t kDsMlaRank = 512;
constexpr int64_t kDsMlaTile = 128;
constexpr int64_t kDsMlaScaleOffset = 512;
constexpr int64_t kDsMlaRopeOffset = 528;
constexpr int64_t kDsMlaRopeBytes = 128;  // 64 16-bit values
constexpr float kE4m3Max = 448.0f;
// Vector register of a tile's scale (spans use 0..3, the helpers 13..15).
constexpr int kTileScale = 8, kTileRecip = 9;
// Registers of the pinned constants: none of the spans', the helpers' or the 16-bit steps'.
constexpr std::array<int, 9> kPinnedRegs{23, 24, 25, 26, 27, 28, 29, 30, 31};

class DsMlaWriteGenerator : public CacheGenerator {
 public:
  DsMlaWriteGenerator(X86Isa isa, const ir::MlaCacheWriteParams& p)
      : CacheGenerator(isa), p_(p), esize_(int(dtype_size(p.dtype))) {}

  void generate() {
    prologue();
    sub(rsp, int(kChunk * kScratchPerRow));
    const bool pinned = avx512() && fast_quantise(p_.dtype);
    if (pinned) {
      // The window steps' constants (and the 16-bit amax's) in registers: from the pool each
      // is a 64-byte load per use, ~17 per 64 codes, and the two 512-bit load ports bound them.
      const auto window = window_step_constants(DType::kFp8E4m3).list();
      std::vector<uint32_t> constants(window.begin(), window.end());
      if (esize_ == 2) {
        for (uint32_t c : amax_word_constants(p_.dtype)) constants.push_back(c);
      }
      pin_constants(constants, kPinnedRegs);
    }
    chunked_token_loop(
        p_.block_size, offsetof(CacheWriteCallArgs, slots), kChunk, [&] { row_scales(); },
        [&] { write_row(); });
    if (pinned) unpin_constants();
    add(rsp, int(kChunk * kScratchPerRow));
    epilogue();
  }

 private:
  // Rows per chunk, and each row's (scale, 1/scale) per tile on the stack. The four tiles of
  // a row already give the scale chains room to overlap; larger chunks bunch the stores of
  // many random entries together (bench_cache, 1 thread, 64 MB at random slots: chunks of 16
  // rows 5.1-5.5 GB/s, of 2 rows 6.1-6.2; 16 tokens: 2.38-2.45 us per call before, 1.74-1.79
  // with either).
  static constexpr int64_t kTiles = kDsMlaRank / kDsMlaTile;
  static constexpr int64_t kChunk = 2, kScratchPerRow = 8 * kTiles;
  static constexpr int64_t kEntryBytes = kDsMlaRopeOffset + kDsMlaRopeBytes;  // 656

  // Pass 1, row reg_q_: each tile's scale and its reciprocal (scalar_reciprocal) into the
  // row's scratch; the entry a chunk ahead prefetched (prefetch_next_entry).
  void row_scales() {
    load_row(offsetof(CacheWriteCallArgs, key), offsetof(CacheWriteCallArgs, key_row_stride),
             reg_q_);
    chunk_scratch(reg_o_, reg_q_, kChunk, kScratchPerRow);
    prefetch_next_entry();
    if (avx512() && esize_ == 2) {
      row_scales_words();
      return;
    }
    const Xbyak::Xmm scale(kTileScale), recip(kTileRecip);
    for (int64_t k = 0; k < kTiles; ++k) {
      lea(reg_p_, ptr[reg_src_ + int(k * kDsMlaTile * esize_)]);
      amax_span(vmm(kTileScale), reg_p_, kDsMlaTile, p_.dtype);
      vdivss(scale, scale, cst(kE4m3Max));
      vmaxss(scale, scale, cst(FLT_MIN));
      vmovss(ptr[reg_o_ + int(8 * k)], scale);
      scalar_reciprocal(recip, scale);
      vmovss(ptr[reg_o_ + int(8 * k + 4)], recip);
    }
  }

  // The entries go to random slots (a decode's, or a prefill's after the first), so each
  // entry's ordinary stores first read its 11 or 12 lines (read for ownership), and the row's
  // stores queue up behind those misses. Pass 1 of row q asks for the lines of the entry that
  // row q + kChunk writes (in the next chunk) in exclusive state. bench_cache on Zen 5, 64 MB
  // at random slots, 1 thread, best of two per process, four alternated processes: 3.59-3.75
  // -> 3.28-3.47 ms; a prefill's slots (found by the hardware prefetcher) and 16 tokens level.
  // Streaming the entries (their whole lines through a stack stage, the shared first and last
  // lines by masked stores) and prefetching the source rows 4 or 8 rows ahead were slower or
  // level (docs/decisions.md, "Thirty-second round").
  void prefetch_next_entry() {
    Label l_none;
    lea(rax, ptr[reg_q_ + int(kChunk)]);
    cmp(rax, reg_row_end_);
    jge(l_none, T_NEAR);
    mov(rax, ptr[reg_slots_ + rax * 8]);
    test(rax, rax);
    js(l_none, T_NEAR);  // padding
    split_slot(p_.block_size);
    imul(rax, ptr[reg_args_ + offsetof(CacheWriteCallArgs, block_stride)]);
    imul(rcx, ptr[reg_args_ + offsetof(CacheWriteCallArgs, entry_stride)]);
    add(rax, rcx);
    add(rax, ptr[reg_args_ + offsetof(CacheWriteCallArgs, key_cache)]);
    for (int64_t offset = 0; offset < kEntryBytes; offset += 64) prefetchw(ptr[rax + int(offset)]);
    prefetchw(ptr[rax + int(kEntryBytes - 1)]);  // the 12th line of an entry that has one
    L(l_none);
  }

  // row_scales for bf16 / f16 on AVX-512: the four tiles' amax words (amax_bits_words' u
  // lanes, one accumulator per tile in zmm16..19) reduced together, tile k in 128-bit lane k,
  // then the four scales and reciprocals in one xmm: two vdivps instead of eight vdivss, and
  // one reduction instead of four (~28 instructions per row instead of ~68).
  void row_scales_words() {
    using Xbyak::Zmm;
    const auto [c, k, sign] = amax_word_constants(p_.dtype);
    const Zmm acc[kTiles] = {Zmm(16), Zmm(17), Zmm(18), Zmm(19)};
    const Zmm z_c(14), a(0), b(1), m01(2), m23(3);
    vmovdqu16(z_c, cst_bits(c));
    for (int64_t t = 0; t < kTiles; ++t) {
      lea(reg_p_, ptr[reg_src_ + int(t * kDsMlaTile * esize_)]);
      amax_words_accumulate(acc[t], reg_p_, kDsMlaTile, p_.dtype);
    }
    // m01: lanes 0, 1 the minima of tile 0's lanes (0, 2) and (1, 3), lanes 2, 3 tile 1's;
    // m23 likewise for tiles 2 and 3.
    vshufi64x2(a, acc[0], acc[1], 0x44);  // t0.l0, t0.l1, t1.l0, t1.l1
    vshufi64x2(b, acc[0], acc[1], 0xEE);  // t0.l2, t0.l3, t1.l2, t1.l3
    vpminuw(m01, a, b);
    vshufi64x2(a, acc[2], acc[3], 0x44);
    vshufi64x2(b, acc[2], acc[3], 0xEE);
    vpminuw(m23, a, b);
    // Lane k: tile k's 8-word partial minimum.
    vshufi64x2(a, m01, m23, 0x88);  // m01.l0, m01.l2, m23.l0, m23.l2
    vshufi64x2(b, m01, m23, 0xDD);  // m01.l1, m01.l3, m23.l1, m23.l3
    vpminuw(a, a, b);
    // Word 0 of each lane: the lane's minimum.
    vpshufd(b, a, 0x4E);
    vpminuw(a, a, b);
    vpshufd(b, a, 0xB1);
    vpminuw(a, a, b);
    vpsrld(b, a, 16);
    vpminuw(a, a, b);
    vmovdqu16(b, cst_bits(k));
    vpsubw(a, b, a);  // word 0 of lane k: tile k's amax bits
    std::array<uint32_t, 16> lane_words{};
    for (uint32_t i = 0; i < kTiles; ++i) lane_words[i] = 4 * i;
    vmovdqu32(b, cst_table(lane_words));
    vpermd(a, b, a);  // dword k: tile k's amax bits in its low word
    const Xmm amax(a.getIdx()), recip(b.getIdx()), low(m01.getIdx()), high(m23.getIdx());
    if (p_.dtype == DType::kBF16) {
      vpslld(amax, amax, 16);
    } else {
      vpmovdw(low, amax);
      vcvtph2ps(amax, low);
    }
    // scale_k = max(amax_k / 448, FLT_MIN), recip_k = scalar_reciprocal's 1 / scale_k.
    vdivps(amax, amax, cst(kE4m3Max));
    vmaxps(amax, amax, cst(FLT_MIN));
    lane_reciprocals(recip, amax);
    vunpcklps(low, amax, recip);  // scale_0, recip_0, scale_1, recip_1
    vunpckhps(high, amax, recip);
    vmovups(ptr[reg_o_], low);
    vmovups(ptr[reg_o_ + 16], high);
  }

  // Pass 2, rax = b, rcx = o: the entry.
  void write_row() {
    // reg_q_ = entry
    imul(rax, ptr[reg_args_ + offsetof(CacheWriteCallArgs, block_stride)]);
    imul(rcx, ptr[reg_args_ + offsetof(CacheWriteCallArgs, entry_stride)]);
    lea(reg_q_, ptr[rax + rcx]);
    add(reg_q_, ptr[reg_args_ + offsetof(CacheWriteCallArgs, key_cache)]);
    load_row(offsetof(CacheWriteCallArgs, key), offsetof(CacheWriteCallArgs, key_row_stride));
    chunk_scratch(reg_scale_, reg_row_, kChunk, kScratchPerRow);
    const Xmm scale = vmm(kTileScale), recip = vmm(kTileRecip);
    for (int64_t k = 0; k < kTiles; ++k) {
      vbroadcastss(scale, ptr[reg_scale_ + int(8 * k)]);
      vbroadcastss(recip, ptr[reg_scale_ + int(8 * k + 4)]);
      vmovss(ptr[reg_q_ + int(kDsMlaScaleOffset + 4 * k)], Xbyak::Xmm(kTileScale));
      lea(reg_p_, ptr[reg_src_ + int(k * kDsMlaTile * esize_)]);
      lea(reg_dst_, ptr[reg_q_ + int(k * kDsMlaTile)]);
      quantise_span_window(reg_dst_, reg_p_, kDsMlaTile, p_.dtype, DType::kFp8E4m3, scale, recip);
    }
    load_row(offsetof(CacheWriteCallArgs, value), offsetof(CacheWriteCallArgs, value_row_stride));
    lea(reg_dst_, ptr[reg_q_ + int(kDsMlaRopeOffset)]);
    copy_span(reg_dst_, reg_src_, kDsMlaRopeBytes, reg_count_);
  }

  const ir::MlaCacheWriteParams p_;
  const int esize_;
};

class MlaRopeFusedGenerator : public CacheGenerator {
 public:
  MlaRopeFusedGenerator(X86Isa isa, const ir::MlaRopeCacheWriteParams& p)
      : CacheGenerator(isa),
        p_(p),
        fp8_(p.kv != ir::KvCacheDtype::kAuto),
        format_(fp8_format(p.kv)),
        esize_(int(dtype_size(p.dtype))),
        csize_(int(ir::cache_element_size(p.dtype, p.kv))),
        rope_(plan_rope(p.dtype, p.dtype, p.rot_dim, p.style, kRopeConstantRegs)) {}

  void generate() {
    prologue();
    if (fp8_) {
      mov(rax, ptr[rdi + offsetof(MlaRopeCallArgs, scale)]);
      vbroadcastss(vmm(kScale), ptr[rax]);
      scale_reciprocal(vmm(kRecip), vmm(kScale));
      reserve_quantise_tables(p_.dtype, format_, {vmm(kScale)},
                              rows_times(p_.kv_lora_rank + p_.rot_dim));
    }
    with_streaming_stores((p_.kv_lora_rank + p_.rot_dim) * csize_, [&] {
      token_loop(
          p_.block_size, [&] { write_token(); }, offsetof(MlaRopeCallArgs, slots),
          [&](const Label&) { rotate_queries(); });
    });
    release_quantise_tables();
    epilogue();
  }

 private:
  // Vector registers: 0..7 the rotation's, 16..31 its hoisted cos/sin; the scale.
  static constexpr int kScale = 12, kRecip = 11;

  // reg_cs_ = the token's cos/sin row; every q_pe head rotated.
  void rotate_queries() {
    mov(reg_cs_, ptr[reg_args_ + offsetof(MlaRopeCallArgs, positions)]);
    mov(reg_cs_, ptr[reg_cs_ + reg_row_ * 8]);
    imul(reg_cs_, reg_cs_, int(p_.rot_dim * esize_));
    add(reg_cs_, ptr[reg_args_ + offsetof(MlaRopeCallArgs, cos_sin_cache)]);
    begin_rope_token(rope_, reg_cs_);
    mov(reg_p_, ptr[reg_args_ + offsetof(MlaRopeCallArgs, q_token_stride)]);
    imul(reg_p_, reg_row_);
    add(reg_p_, ptr[reg_args_ + offsetof(MlaRopeCallArgs, q_pe)]);
    Label l_head;
    mov(reg_heads_, p_.head_count_q);
    L(l_head);
    rotate_rope_head(rope_, reg_p_, reg_cs_);
    add(reg_p_, ptr[reg_args_ + offsetof(MlaRopeCallArgs, q_head_stride)]);
    dec(reg_heads_);
    jnz(l_head, T_NEAR);
    // The rotation stays open (constants pinned) for k_pe: write_token is emitted next and
    // always runs after this at run time.
  }

  // b in rax, o in rcx: k_pe rotated in place, then the entry [kv_c | k_pe].
  void write_token() {
    imul(rax, ptr[reg_args_ + offsetof(MlaRopeCallArgs, block_stride)]);
    imul(rcx, ptr[reg_args_ + offsetof(MlaRopeCallArgs, entry_stride)]);
    lea(reg_q_, ptr[rax + rcx]);
    add(reg_q_, ptr[reg_args_ + offsetof(MlaRopeCallArgs, kv_cache)]);
    mov(reg_p_, ptr[reg_args_ + offsetof(MlaRopeCallArgs, k_pe_row_stride)]);
    imul(reg_p_, reg_row_);
    add(reg_p_, ptr[reg_args_ + offsetof(MlaRopeCallArgs, k_pe)]);
    rotate_rope_head(rope_, reg_p_, reg_cs_);  // the token's rotation, begun in rotate_queries
    end_rope_token(rope_);
    mov(reg_src_, ptr[reg_args_ + offsetof(MlaRopeCallArgs, kv_c_row_stride)]);
    imul(reg_src_, reg_row_);
    add(reg_src_, ptr[reg_args_ + offsetof(MlaRopeCallArgs, kv_c)]);
    mov(reg_dst_, reg_q_);
    write_span(reg_dst_, reg_src_, p_.kv_lora_rank, p_.dtype, fp8_, format_, vmm(kScale),
               vmm(kRecip));
    lea(reg_dst_, ptr[reg_q_ + int(p_.kv_lora_rank * csize_)]);
    write_span(reg_dst_, reg_p_, p_.rot_dim, p_.dtype, fp8_, format_, vmm(kScale), vmm(kRecip));
  }

  const ir::MlaRopeCacheWriteParams p_;
  const bool fp8_;
  const DType format_;
  const int esize_, csize_;
  const RopeRotation rope_;
  const Reg64 reg_cs_ = rsi;  // reg_offset_: unused by this generator's spans
};

class UpconvertGatherGenerator : public CacheGenerator {
  // Registers of the pinned constants: none of the steps' (0..3), copy_span's (13, 14) or the
  // decode tables' (24..27).
  static constexpr std::array<int, 6> kDecodedStepRegs{16, 17, 18, 19, 20, 21};

 public:
  explicit UpconvertGatherGenerator(X86Isa isa) : CacheGenerator(isa) {}

  void generate() {
    prologue();
    const bool table = decode_table(DType::kBF16);
    if (table) {
      load_decode_tables(DType::kFp8E4m3);
      // The steps' constants in registers: from the pool each is a 64-byte load per use.
      pin_constants(decoded_step_constants(), kDecodedStepRegs);
    }
    // The destination rows (512 values and the rope, 1152 bytes) streamed in a large call, as
    // the dequantising gather's (GatherGenerator): 64 MB, best of three per process, three
    // alternated processes, 1 thread 1.74-2.06 -> 1.48-1.52 ms, 2 threads 1.41-1.86 ->
    // 1.22-1.31 (with the prefetch below in both).
    auto row = [&](bool streaming) {
      const Xmm scale = vmm(kTileScale);
      for (int64_t k = 0; k < kDsMlaRank / kDsMlaTile; ++k) {
        vbroadcastss(scale, ptr[reg_src_ + int(kDsMlaScaleOffset + 4 * k)]);
        lea(reg_p_, ptr[reg_src_ + int(k * kDsMlaTile)]);
        lea(reg_q_, ptr[reg_dst_ + int(k * kDsMlaTile * 2)]);
        if (table) {
          dequantise_span_decoded(reg_q_, reg_p_, kDsMlaTile, DType::kFp8E4m3, scale, streaming);
        } else {
          dequantise_span(reg_q_, reg_p_, kDsMlaTile, DType::kFp8E4m3, DType::kBF16, scale);
        }
      }
      add(reg_src_, int(kDsMlaRopeOffset));
      add(reg_dst_, int(kDsMlaRank * 2));
      copy_span(reg_dst_, reg_src_, kDsMlaRopeBytes, reg_count_, streaming);
    };
    // Each row's source entry prefetched kGatherPrefetchRows ahead (the entry's 656 bytes).
    auto rows = [&] {
      gather_loop([&] { maybe_streaming(reg_dst_, row); }, kDsMlaRopeOffset + kDsMlaRopeBytes);
    };
    if (table) {
      with_streaming_stores(kDsMlaRank * 2 + kDsMlaRopeBytes, rows);
    } else {
      rows();
    }
    if (table) unpin_constants();
    epilogue();
  }
};

}  // namespace

Result<std::vector<uint8_t>> generate_ds_mla_cache_write(const OpSpec& spec, X86Isa isa) {
  DsMlaWriteGenerator gen(isa, spec.get<ir::MlaCacheWriteParams>());
  gen.generate();
  return gen.finish();
}

Result<std::vector<uint8_t>> generate_mla_rope_fused(const OpSpec& spec, X86Isa isa) {
  MlaRopeFusedGenerator gen(isa, spec.get<ir::MlaRopeCacheWriteParams>());
  gen.generate();
  return gen.finish();
}

Result<std::vector<uint8_t>> generate_upconvert_gather(const OpSpec& spec, X86Isa isa) {
  UpconvertGatherGenerator gen(isa);
  gen.generate();
  return gen.finish();
}

}  // namespace jit::codegen::x86
