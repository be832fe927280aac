// merge_attn_states (spec/attention_ops.md §4.3), one row per token t (H and D are
// compile-time):
//
//   t >= with_context:  out[t, h] = suffix[t, h] (converted), lse_out[h, t] = suffix_lse raw.
//   otherwise, per head h:
//     p, s = prefix_lse[h, t], suffix_lse[h, t], each +-inf -> -inf
//     M    = fmax(p, s)                      (a NaN operand is ignored if the other is not)
//     a, b = e^(p - M), e^(s - M);  Z = a + b;  ca, cb = a / Z, b / Z   (Generator::exp_ps)
//     lse  = ln Z + M  (Generator::log_ps), or -inf where M = -inf (both empty)
//   and both empty (M = -inf): out = prefix (converted); else
//     out[d] = prefix[d] · ca + suffix[d] · cb    (fp32: a product and an FMA)
//   fp8 output: code = e4m3(v · (1/scale)), the encoder saturating like the spec's clamp.
// The LSEs are [H, T]: one head's tokens are contiguous, one token's heads T floats apart.
// Tokens go in tiles of 16 (one vector at AVX-512, two at AVX2): per head the tile's LSEs are one
// line and the weights are computed across the tile's tokens (merge_tile), so each LSE
// line is read (and each output LSE line written) once, whole. Walking token by token across the
// heads instead re-reads those lines every token, and at a large T they all fall in one L1 and
// one L2 set (the stride T·4 is a multiple of 4 KiB): 48 lines for 16 heads thrash both and every
// token waits on L3 (a scratch program at T = 32768, H 16, D 128: 22.5 GB/s without the LSE
// accesses, 13.0 with them per token, 18.9-20.7 in tiles). Tokens that do not fill a tile (a
// thread's last ones, those before with_context, T < 16) go one at a time, vectorised across
// the heads (merge_token: the LSEs staged on the stack with scalar moves).
// The ref evaluates the weights and the blend in double; fp32 here stays well inside the
// attention tolerance (the weights are within a few ulp, the blend rounds once more).
#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>

#include "codegen/x86/generator.h"
#include "codegen/x86/kernels.h"
#include "ir/params_attention.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;

// Units (vectors) of a head fully unrolled up to this count; longer heads loop over kUnroll.
constexpr int64_t kMaxUnrolled = 8;
constexpr int kUnroll = 4;
// Stack frame above the helpers' staging bytes [0, kStageBytes): a head group's LSE inputs (one
// vector, 64 bytes, each), its weights record (record_bytes(), see record_a()) and its LSE; the
// count of head groups left in a token's loop (merge_token); merge_tile's saved LSE pointers,
// token of the tile, first head and chunks left; then merge_tile's records, one per head of a
// chunk.
constexpr int kLseP = 128, kLseS = 192, kGroupRecord = 256, kLse = 576;
constexpr int kGroupsLeft = 640, kSavedPl = 648, kSavedSl = 656, kSavedOl = 664;
constexpr int kTileToken = 672, kChunkFirst = 680, kChunksLeft = 688, kStreaming = 696;
constexpr int kTileRecords = 704;
// Tokens per tile: one 64-byte line of each head's LSEs (one vector at AVX-512, two at AVX2).
constexpr int kTileTokens = 16;
// Heads per chunk of a tile (records on the stack: 32 x 320 bytes).
constexpr int64_t kChunkHeads = 32;
// Head groups (one vector of heads each) of a token emitted in line up to this count (64
// heads at AVX2, 128 at AVX-512); more run as a loop over one group's code. Each group's
// code (staging, exp, log, the blend loop) is 1.5-4 KiB, so unrolled, 238-2000 heads (by
// dtype and level; the IR allows 4096) outgrew the 128 KiB code buffer.
constexpr int64_t kMaxUnrolledGroups = 8;
constexpr uint32_t kNegInfBits = 0xFF800000u;
constexpr uint32_t kDefaultNanBits = 0x7FC00000u;
constexpr uint8_t kCmpEqual = 0;      // _CMP_EQ_OQ
constexpr uint8_t kCmpUnordered = 3;  // _CMP_UNORD_Q: NaN

class MergeGenerator : public Generator {
 public:
  MergeGenerator(X86Isa isa, const ir::MergeAttnStatesParams& p)
      : Generator(isa),
        p_(p),
        fp8_(p.out_dtype == DType::kFp8E4m3),
        double_(p.dtype == DType::kF32 && p.out_dtype == DType::kF32),
        esize_(int(dtype_size(p.dtype))),
        osize_(int(dtype_size(p.out_dtype))) {}

  void generate() {
    prologue();
    sub(rsp, frame_bytes());
    mov(reg_args_, rdi);
    mov(reg_row_, rsi);
    mov(reg_row_end_, rdx);
    mov(reg_ls_, ptr[rdi + offsetof(MergeCallArgs, lse_head_stride)]);
    if (fp8_) vbroadcastss(vmm(kInvScale), ptr[rdi + offsetof(MergeCallArgs, inv_scale)]);
    // [rsp + kStreaming] = 1: blend_pairs streams its stores, when this thread's output reaches
    // kStreamingBytes (the read for ownership it saves is a quarter of a large merge's DRAM
    // traffic) and the output is aligned.
    if (pairs_blend()) {
      Label l_ordinary;
      mov(byte[rsp + kStreaming], 0);
      jump_if_below_streaming(p_.head_count * p_.head_size * osize_, l_ordinary);
      cmp(qword[rdi + offsetof(MergeCallArgs, output_aligned)], 0);
      je(l_ordinary, T_NEAR);
      mov(byte[rsp + kStreaming], 1);
      L(l_ordinary);
    }
    // A full tile of merged tokens where row + kTileTokens <= min(row_end, with_context), a
    // full tile of copied ones where row >= with_context and row + kTileTokens <= row_end, else
    // one token.
    Label l_token, l_copy, l_one_merge, l_one_copy, l_done;
    L(l_token);
    cmp(reg_row_, reg_row_end_);
    jge(l_done, T_NEAR);
    mov(rax, ptr[reg_args_ + offsetof(MergeCallArgs, with_context)]);
    lea(rcx, ptr[reg_row_ + kTileTokens]);
    cmp(reg_row_, rax);
    jge(l_copy, T_NEAR);
    cmp(rcx, reg_row_end_);
    jg(l_one_merge, T_NEAR);
    cmp(rcx, rax);
    jg(l_one_merge, T_NEAR);
    merge_tile();
    add(reg_row_, kTileTokens);
    jmp(l_token, T_NEAR);
    L(l_one_merge);
    head_pointers(reg_row_);
    merge_token();
    inc(reg_row_);
    jmp(l_token, T_NEAR);
    L(l_copy);
    cmp(rcx, reg_row_end_);
    jg(l_one_copy, T_NEAR);
    copy_tile();
    add(reg_row_, kTileTokens);
    jmp(l_token, T_NEAR);
    L(l_one_copy);
    head_pointers(reg_row_);
    copy_token();
    inc(reg_row_);
    jmp(l_token, T_NEAR);
    L(l_done);
    // Streaming stores are weakly ordered: the caller may read the output right after.
    if (pairs_blend()) sfence();
    add(rsp, frame_bytes());
    epilogue();
  }

 private:
  // Vector registers: spans 0..3 (x) and 4..7 (y); weights; the fp8 output's 1/scale.
  static constexpr int kWa = 8, kWb = 9, kInvScale = 10, kBound = 11, kNegBound = 12;

  // Head 0 of token `token`: out/prefix/suffix pointers (row_pointers), and the LSE pointers
  // at [0, token].
  void head_pointers(const Reg64& token) {
    row_pointers(token);
    auto lse = [&](const Reg64& r, size_t data) {
      mov(r, ptr[reg_args_ + data]);
      lea(r, ptr[r + token * 4]);
    };
    lse(reg_pl_, offsetof(MergeCallArgs, prefix_lse));
    lse(reg_sl_, offsetof(MergeCallArgs, suffix_lse));
    if (p_.output_lse) lse(reg_ol_, offsetof(MergeCallArgs, output_lse));
  }

  // Head 0 of token `token` (not one of them): the out/prefix/suffix pointers.
  void row_pointers(const Reg64& token) {
    auto at = [&](const Reg64& r, size_t data, size_t token_stride) {
      mov(r, ptr[reg_args_ + token_stride]);
      imul(r, token);
      add(r, ptr[reg_args_ + data]);
    };
    at(reg_out_, offsetof(MergeCallArgs, output), offsetof(MergeCallArgs, output_token_stride));
    at(reg_pre_, offsetof(MergeCallArgs, prefix), offsetof(MergeCallArgs, prefix_token_stride));
    at(reg_suf_, offsetof(MergeCallArgs, suffix), offsetof(MergeCallArgs, suffix_token_stride));
  }

  void next_head() {
    add(reg_out_, ptr[reg_args_ + offsetof(MergeCallArgs, output_head_stride)]);
    add(reg_pre_, ptr[reg_args_ + offsetof(MergeCallArgs, prefix_head_stride)]);
    add(reg_suf_, ptr[reg_args_ + offsetof(MergeCallArgs, suffix_head_stride)]);
  }

  // No prefix for this token: every head's suffix copied, its LSE raw.
  void copy_token() {
    Label l_head;
    mov(reg_i_, p_.head_count);
    L(l_head);
    span(Mode::kSuffix);
    if (p_.output_lse) {
      mov(eax, ptr[reg_sl_]);
      mov(ptr[reg_ol_], eax);
      add(reg_ol_, reg_ls_);
    }
    add(reg_sl_, reg_ls_);
    next_head();
    dec(reg_i_);
    jnz(l_head, T_NEAR);
  }

  void merge_token() {
    // merge_group's code moves its pointers on to the next group, so it can repeat as is.
    emit_steps(p_.head_count / lanes(), kMaxUnrolledGroups, qword[rsp + kGroupsLeft], {},
               [&](int64_t) { merge_group(lanes()); });
    if (const int rest = int(p_.head_count % lanes()); rest > 0) merge_group(rest);
  }

  // `n` heads from the current pointers (which end at the next group).
  void merge_group(int n) {
    // Stage the n LSE pairs (stride T) as two vectors.
    for (int i = 0; i < n; ++i) {
      mov(eax, ptr[reg_pl_]);
      mov(ptr[rsp + kLseP + 4 * i], eax);
      mov(eax, ptr[reg_sl_]);
      mov(ptr[rsp + kLseS + 4 * i], eax);
      add(reg_pl_, reg_ls_);
      add(reg_sl_, reg_ls_);
    }
    const Xmm p = vmm(0), s = vmm(1), lse = vmm(5);
    vmovups(p, ptr[rsp + kLseP]);
    vmovups(s, ptr[rsp + kLseS]);
    lane_weights(p, s, rsp + kGroupRecord);
    if (p_.output_lse) {
      vmovups(ptr[rsp + kLse], lse);
      for (int i = 0; i < n; ++i) {
        mov(eax, ptr[rsp + kLse + 4 * i]);
        mov(ptr[reg_ol_], eax);
        add(reg_ol_, reg_ls_);
      }
    }
    // Per head of the group (a run-time loop: the span code is emitted once).
    Label l_head;
    xor_(reg_i_, reg_i_);
    L(l_head);
    lea(rax, ptr[rsp + reg_i_ * 8 + kGroupRecord]);
    lea(rcx, ptr[rsp + reg_i_ * 4 + kGroupRecord]);
    merge_head(rax, rcx);
    next_head();
    inc(reg_i_);
    cmp(reg_i_, n);
    jl(l_head, T_NEAR);
  }

  // The weights record of one head group (merge_group) or one head of a tile (merge_tile),
  // per lane: ca and cb (fp32, or doubles for f32 inputs) and M.
  // Sized for kTileTokens lanes at either width.
  static constexpr int record_a() { return 0; }
  static constexpr int record_b() { return kTileTokens * 8; }
  static constexpr int record_m() { return kTileTokens * 16; }
  static constexpr int record_bytes() { return kTileTokens * 20; }
  int frame_bytes() const {
    return int(kTileRecords + std::min(p_.head_count, kChunkHeads) * record_bytes());
  }

  // Per lane i of p, s (the prefix and suffix LSEs; both clobbered): M, ca and cb into lane
  // first + i of the record at `record`; the LSE (when output_lse) left in vmm(5). Uses
  // vmm0..11.
  void lane_weights(const Xmm& p, const Xmm& s, const RegExp& record, int first = 0) {
    const Xmm m = vmm(2), a = vmm(3), b = vmm(4), z = vmm(5);
    const Xmm t0 = vmm(6), t1 = vmm(7), t2 = vmm(8), t3 = vmm(9);
    infinite_to_negative(p, t0);
    infinite_to_negative(s, t0);
    // M = fmax(p, s): vmaxps returns its second operand (p) when either is NaN; a NaN p then
    // takes s.
    vmaxps(m, s, p);
    select_if(m, m, s, p, p, kCmpUnordered, t0);
    vmovups(ptr[record + record_m() + 4 * first], m);
    if (double_) {
      double_weights(p, s, m, record + 8 * first);
      // z = 1 + e^-|p - s| for the LSE, in fp32 (exp_ps is accurate enough there).
      vsubps(a, p, s);
      uni_vpor(a, a, cst_bits(0x80000000));
      exp_ps({a}, {t0}, {t1}, /*bounded=*/true);
      vaddps(z, a, cst(1.0f));
    } else {
      vsubps(a, p, m);
      vsubps(b, s, m);
      exp_ps({a, b}, {t0, t1}, {t2, t3}, /*bounded=*/true);
      vaddps(z, a, b);
      vdivps(a, a, z);
      vdivps(b, b, z);
      // A NaN weight (from a NaN LSE) as the default NaN: blend_pairs rounds on the bits,
      // where a payload in the low half would carry into the exponent (or the sign).
      select_if(a, a, cst_bits(kDefaultNanBits), a, a, kCmpUnordered, t0);
      select_if(b, b, cst_bits(kDefaultNanBits), b, b, kCmpUnordered, t0);
      vmovups(ptr[record + record_a() + 4 * first], a);
      vmovups(ptr[record + record_b() + 4 * first], b);
    }
    if (p_.output_lse) {
      vmovaps(t2, z);
      log_ps({z}, {t0}, {t1});
      vaddps(z, z, m);
      // A NaN Z (a NaN LSE) gives a NaN lse: log_ps serves positive finite arguments only.
      select_if(z, z, t2, t2, t2, kCmpUnordered, t0);
      // Both empty: lse = M = -inf (ln Z of the NaN weights is meaningless there).
      select_if(z, z, m, m, cst_bits(kNegInfBits), kCmpEqual, t0);
    }
  }

  // The current head from its lane of a record: `wd` addresses the lane's double weights (f32
  // inputs), `wf` its fp32 ones and M (record + 8·lane and record + 4·lane).
  void merge_head(const Reg64& wd, const Reg64& wf) {
    Label l_blend, l_done;
    cmp(dword[wf + record_m()], kNegInfBits);
    jne(l_blend, T_NEAR);
    span(Mode::kPrefix);
    jmp(l_done, T_NEAR);
    L(l_blend);
    if (double_) {
      broadcast_sd(kWa, ptr[wd + record_a()]);
      broadcast_sd(kWb, ptr[wd + record_b()]);
    } else {
      vbroadcastss(vmm(kWa), ptr[wf + record_a()]);
      vbroadcastss(vmm(kWb), ptr[wf + record_b()]);
    }
    span(Mode::kBlend);
    L(l_done);
  }

  // Tokens [row, row + kTileTokens) (all before with_context), in chunks of up to kChunkHeads
  // heads: per head of the chunk the tile's weights into its record (vectors across the tokens),
  // then per token of the tile each head of the chunk.
  void merge_tile() {
    auto save = [&](int slot, size_t data) {
      mov(rax, ptr[reg_args_ + data]);
      lea(rax, ptr[rax + reg_row_ * 4]);
      mov(ptr[rsp + slot], rax);
    };
    save(kSavedPl, offsetof(MergeCallArgs, prefix_lse));
    save(kSavedSl, offsetof(MergeCallArgs, suffix_lse));
    if (p_.output_lse) save(kSavedOl, offsetof(MergeCallArgs, output_lse));
    mov(qword[rsp + kChunkFirst], 0);
    const int64_t chunks = p_.head_count / kChunkHeads;
    const int rest = int(p_.head_count % kChunkHeads);
    if (chunks > 1) {
      Label l_chunk;
      mov(qword[rsp + kChunksLeft], chunks);
      L(l_chunk);
      merge_chunk(kChunkHeads);
      add(qword[rsp + kChunkFirst], kChunkHeads);
      dec(qword[rsp + kChunksLeft]);
      jnz(l_chunk, T_NEAR);
    } else if (chunks == 1) {
      merge_chunk(kChunkHeads);
      add(qword[rsp + kChunkFirst], kChunkHeads);
    }
    if (rest > 0) merge_chunk(rest);
  }

  // `heads` heads of the tile from the saved LSE pointers (left at the next chunk's) and head
  // [rsp + kChunkFirst].
  void merge_chunk(int heads) {
    // The weights: reg_i_ counts the heads, rdx walks the records.
    mov(reg_pl_, ptr[rsp + kSavedPl]);
    mov(reg_sl_, ptr[rsp + kSavedSl]);
    if (p_.output_lse) mov(reg_ol_, ptr[rsp + kSavedOl]);
    lea(rdx, ptr[rsp + kTileRecords]);
    mov(reg_i_, heads);
    Label l_weights;
    L(l_weights);
    const Xmm p = vmm(0), s = vmm(1), lse = vmm(5);
    for (int first = 0; first < kTileTokens; first += lanes()) {
      vmovups(p, ptr[reg_pl_ + 4 * first]);
      vmovups(s, ptr[reg_sl_ + 4 * first]);
      lane_weights(p, s, rdx, first);
      if (p_.output_lse) vmovups(ptr[reg_ol_ + 4 * first], lse);
    }
    if (p_.output_lse) add(reg_ol_, reg_ls_);
    add(reg_pl_, reg_ls_);
    add(reg_sl_, reg_ls_);
    add(rdx, record_bytes());
    dec(reg_i_);
    jnz(l_weights, T_NEAR);
    mov(ptr[rsp + kSavedPl], reg_pl_);
    mov(ptr[rsp + kSavedSl], reg_sl_);
    if (p_.output_lse) mov(ptr[rsp + kSavedOl], reg_ol_);
    // The blends, token by token: reg_pl_ / reg_sl_ (free until the next chunk) walk the
    // token's lane of the records, as fp32 and as doubles.
    for_each_tile_token([&] {
      Label l_head;
      skip_heads(qword[rsp + kChunkFirst]);
      mov(rax, ptr[rsp + kTileToken]);
      lea(reg_pl_, ptr[rsp + rax * 4 + kTileRecords]);
      lea(reg_sl_, ptr[rsp + rax * 8 + kTileRecords]);
      mov(reg_i_, heads);
      L(l_head);
      merge_head(reg_sl_, reg_pl_);
      next_head();
      add(reg_pl_, record_bytes());
      add(reg_sl_, record_bytes());
      dec(reg_i_);
      jnz(l_head, T_NEAR);
    });
  }

  // body() once per token of the tile [row, row + kTileTokens) ([rsp + kTileToken] counts), the
  // out/prefix/suffix pointers at the token's head 0.
  template <class Body>
  void for_each_tile_token(Body body) {
    Label l_token;
    mov(qword[rsp + kTileToken], 0);
    L(l_token);
    mov(rax, ptr[rsp + kTileToken]);
    add(rax, reg_row_);
    row_pointers(rax);
    body();
    inc(qword[rsp + kTileToken]);
    cmp(qword[rsp + kTileToken], kTileTokens);
    jl(l_token, T_NEAR);
  }

  // The out/prefix/suffix pointers moved on by `heads` heads (a qword in memory).
  void skip_heads(const Address& heads) {
    auto skip = [&](const Reg64& r, size_t head_stride) {
      mov(rax, heads);
      imul(rax, ptr[reg_args_ + head_stride]);
      add(r, rax);
    };
    skip(reg_out_, offsetof(MergeCallArgs, output_head_stride));
    skip(reg_pre_, offsetof(MergeCallArgs, prefix_head_stride));
    skip(reg_suf_, offsetof(MergeCallArgs, suffix_head_stride));
  }

  // Tokens [row, row + kTileTokens) (all from with_context on): each head's LSE tile copied
  // raw, then each token's heads.
  void copy_tile() {
    if (p_.output_lse) {
      Label l_lse;
      mov(reg_sl_, ptr[reg_args_ + offsetof(MergeCallArgs, suffix_lse)]);
      lea(reg_sl_, ptr[reg_sl_ + reg_row_ * 4]);
      mov(reg_ol_, ptr[reg_args_ + offsetof(MergeCallArgs, output_lse)]);
      lea(reg_ol_, ptr[reg_ol_ + reg_row_ * 4]);
      mov(reg_i_, p_.head_count);
      L(l_lse);
      for (int first = 0; first < kTileTokens; first += lanes()) {
        vmovups(vmm(0), ptr[reg_sl_ + 4 * first]);
        vmovups(ptr[reg_ol_ + 4 * first], vmm(0));
      }
      add(reg_sl_, reg_ls_);
      add(reg_ol_, reg_ls_);
      dec(reg_i_);
      jnz(l_lse, T_NEAR);
    }
    for_each_tile_token([&] {
      Label l_head;
      mov(reg_i_, p_.head_count);
      L(l_head);
      span(Mode::kSuffix);
      next_head();
      dec(reg_i_);
      jnz(l_head, T_NEAR);
    });
  }

  // d = (x pred y) ? b : a, lane-wise (vcmpps predicate `pred`); `t` is a temporary (AVX2).
  void select_if(const Xmm& d, const Xmm& a, const Operand& b, const Xmm& x, const Operand& y,
                 uint8_t pred, const Xmm& t) {
    if (avx512()) {
      vcmpps(k2, x, y, pred);
      vblendmps(d | k2, a, b);
    } else {
      vcmpps(t, x, y, pred);
      vblendvps(d, a, b, t);
    }
  }

  // x = -inf where x is +-inf. `t` is a temporary.
  void infinite_to_negative(const Xmm& x, const Xmm& t) {
    uni_vpand(t, x, cst_bits(0x7FFFFFFF));
    select_if(x, x, cst_bits(kNegInfBits), t, cst_bits(0x7F800000), kCmpEqual, t);
  }

  // The weights in double (f32 inputs): the blend of two values of opposite sign amplifies
  // any weight error by |x - y| / |result|, so fp32 weights (a few ulp from exp) would miss
  // the fp32 tolerance where the ref's double math does not; in double they are exact to
  // ~1e-14 and the blend's only visible rounding is the final one to fp32.
  // Per half of the lanes (lanes/2 doubles): ca, cb = a / Z, b / Z with a, b = e^(p - M),
  // e^(s - M) (exp_pd), stored as doubles into the record at `record`.
  void double_weights(const Xmm& p, const Xmm& s, const Xmm& m, const RegExp& record) {
    const int half = lanes() / 2;
    const Xmm dp = vmm(6), ds = vmm(7), dm = vmm(8), t0 = vmm(9), t1 = vmm(10), t2 = vmm(11);
    for (int h = 0; h < 2; ++h) {
      widen_half(dp, p, h);
      widen_half(ds, s, h);
      widen_half(dm, m, h);
      vsubpd(dp, dp, dm);
      vsubpd(ds, ds, dm);
      exp_pd(dp, t0, t1, t2);
      exp_pd(ds, t0, t1, t2);
      vaddpd(dm, dp, ds);
      vdivpd(dp, dp, dm);
      vdivpd(ds, ds, dm);
      vmovupd(ptr[record + record_a() + h * half * 8], dp);
      vmovupd(ptr[record + record_b() + h * half * 8], ds);
    }
  }

  // d (lanes/2 doubles) = fp32 lanes [h·lanes/2, (h+1)·lanes/2) of x, exactly.
  void widen_half(const Xmm& d, const Xmm& x, int h) {
    if (avx512()) {
      if (h == 0) {
        vcvtps2pd(Zmm(d.getIdx()), Ymm(x.getIdx()));
      } else {
        vextractf32x8(Ymm(d.getIdx()), Zmm(x.getIdx()), 1);
        vcvtps2pd(Zmm(d.getIdx()), Ymm(d.getIdx()));
      }
    } else {
      if (h == 0) {
        vcvtps2pd(Ymm(d.getIdx()), Xbyak::Xmm(x.getIdx()));
      } else {
        vextractf128(Xbyak::Xmm(d.getIdx()), Ymm(x.getIdx()), 1);
        vcvtps2pd(Ymm(d.getIdx()), Xbyak::Xmm(d.getIdx()));
      }
    }
  }

  // x = e^x in double for x <= 0 (or NaN): n = round(x log2 e), r = x - n ln2 (ln2 in two
  // parts, FMA), e^r by its Taylor series to r^12/12! (|r| <= ln2/2: truncation < 2e-16 · 6),
  // times 2^n built in the exponent field from n + 1.5·2^52 (whose low bits are n). x is
  // clamped at -700 (2^n stays normal) and x < -745 (e^x below the smallest double) or -inf
  // gives exactly 0, as the ref's exp does; NaN stays NaN. t0..t2 are temporaries.
  void exp_pd(const Xmm& x, const Xmm& t0, const Xmm& t1, const Xmm& t2) {
    constexpr uint64_t kShifter = 0x4338000000000000ull;  // 1.5 * 2^52
    auto cd = [&](double v) { return cst_pd(v); };
    // t2 = (x >= -745) as a mask of all-ones lanes (false for NaN: NaN must pass through, so
    // it is ORed back below).
    cmp_pd(t2, x, cd(-745.0), 0x1D /* _CMP_GE_OQ */);
    vmovupd(t1, cd(-700.0));
    vmaxpd(x, t1, x);  // x second: NaN passes
    vmulpd(t0, x, cd(1.4426950408889634));
    vroundpd_any(t0, t0);
    vfnmadd231pd(x, t0, cd(0.693147180369123816490));
    vfnmadd231pd(x, t0, cd(1.90821492927058770002e-10));
    // Horner: p = 1 + r(1 + r/2 (1 + r/3 (...)))  as coefficients 1/k!.
    static constexpr double kInvFact[] = {1.0 / 479001600,
                                          1.0 / 39916800,
                                          1.0 / 3628800,
                                          1.0 / 362880,
                                          1.0 / 40320,
                                          1.0 / 5040,
                                          1.0 / 720,
                                          1.0 / 120,
                                          1.0 / 24,
                                          1.0 / 6,
                                          1.0 / 2,
                                          1.0,
                                          1.0};
    vmovupd(t1, cd(kInvFact[0]));
    for (size_t i = 1; i < std::size(kInvFact); ++i) vfmadd213pd(t1, x, cd(kInvFact[i]));
    // 2^n: bits of n + 1.5·2^52 are kShifter + n; (that + 1023) << 52 = (n + 1023) << 52.
    vaddpd(t0, t0, cd(std::bit_cast<double>(kShifter)));
    vpaddq(t0, t0, cst_q(1023));
    vpsllq(t0, t0, 52);
    vmulpd(x, t1, t0);
    // Zero below -745 (mask false), NaN kept: x = mask ? x : (x is NaN ? x : 0).
    if (avx512()) {
      Generator::vcmppd(k2, x, x, 3 /* unordered */);
      korw(k3, k3, k2);
      vmovapd(x | k3 | T_z, x);
    } else {
      Generator::vcmppd(t0, x, x, 3 /* unordered */);
      vorpd(t2, t2, t0);
      vandpd(x, x, t2);
    }
  }

  // vcmppd into t (AVX2) or k3 (AVX-512; `t` unused then).
  void cmp_pd(const Xmm& t, const Xmm& a, const Operand& b, uint8_t pred) {
    if (avx512()) {
      Generator::vcmppd(k3, a, b, pred);
    } else {
      Generator::vcmppd(t, a, b, pred);
    }
  }
  // vmm(idx) = the double at `src` in every lane.
  void broadcast_sd(int idx, const Address& src) {
    if (avx512()) {
      vbroadcastsd(Zmm(idx), src);
    } else {
      vbroadcastsd(Ymm(idx), src);
    }
  }

  void vroundpd_any(const Xmm& d, const Xmm& a) {
    if (avx512()) {
      vrndscalepd(d, a, 0);
    } else {
      vroundpd(d, a, 0);
    }
  }

  // A full vector of the double `v` / the int64 `v`, from the constant pool (two dwords).
  Address cst_pd(double v) { return cst_q(std::bit_cast<uint64_t>(v)); }
  Address cst_q(uint64_t v) {
    std::array<uint32_t, 16> t{};
    for (int i = 0; i < 16; i += 2) {
      t[size_t(i)] = uint32_t(v);
      t[size_t(i) + 1] = uint32_t(v >> 32);
    }
    return cst_table(t);
  }

  enum class Mode { kBlend, kPrefix, kSuffix };

  // The D elements of the current head: blended, or one input converted to the output.
  void span(Mode mode) {
    const int64_t vectors = (p_.head_size + lanes() - 1) / lanes();
    // Vector v of the head, addressed `skip` vectors back (the pointers' loop advance).
    auto unit = [&](int64_t v, int slot, int64_t skip = 0) {
      const int count = int(std::min<int64_t>(lanes(), p_.head_size - v * lanes()));
      const int64_t first = (v - skip) * lanes();
      const Xmm x = vmm(slot), y = vmm(4 + slot);
      const int in = int(first * esize_);
      if (mode == Mode::kBlend && double_) {
        blend_double(x, y, in, count);
      } else if (mode == Mode::kBlend) {
        load_f32(x, p_.dtype, reg_pre_ + in, count);
        load_f32(y, p_.dtype, reg_suf_ + in, count);
        const bool clamp = esize_ == 4;  // see blend_bound
        if (clamp) blend_bound(x, y);
        vmulps(x, x, vmm(kWa));
        vfmadd231ps(x, y, vmm(kWb));
        if (clamp) {
          vminps(x, vmm(kBound), x);
          vmaxps(x, vmm(kNegBound), x);
        }
      } else {
        load_f32(x, p_.dtype, (mode == Mode::kPrefix ? reg_pre_ : reg_suf_) + in, count);
      }
      if (fp8_) {
        vmulps(x, x, vmm(kInvScale));
        fp8_encode(x, DType::kFp8E4m3);
        store_fp8(x, reg_out_ + int(first), count);
      } else {
        store_f32(x, p_.out_dtype, reg_out_ + int(first * osize_), count);
      }
    };
    // The double blend uses four registers per unit (slots 0 and 2 only).
    const auto slot_of = [&](int64_t v) { return double_ ? int(2 * (v % 2)) : int(v % kUnroll); };
    if (mode == Mode::kBlend && pairs_blend()) {
      // Pairs of vectors on their 16-bit lanes, then the rest (< 2 vectors) one vector each.
      const int64_t pairs = p_.head_size / (2 * lanes());
      blend_pairs(pairs);
      for (int64_t v = 2 * pairs; v < vectors; ++v) unit(v, slot_of(v));
      return;
    }
    if (vectors <= kMaxUnrolled) {
      for (int64_t v = 0; v < vectors; ++v) unit(v, slot_of(v));
      return;
    }
    // Whole vectors in a loop of kUnroll, then the rest (the last may be a tail); the
    // pointers are restored at the end.
    const int64_t loops = (p_.head_size / lanes()) / kUnroll;
    const int64_t step_in = int64_t(kUnroll) * lanes() * esize_;
    const int64_t step_out = int64_t(kUnroll) * lanes() * osize_;
    Label l_loop;
    mov(reg_count_, loops);
    L(l_loop);
    for (int u = 0; u < kUnroll; ++u) unit(u, slot_of(u));
    advance(mode, step_in, step_out);
    dec(reg_count_);
    jnz(l_loop, T_NEAR);
    for (int64_t v = loops * kUnroll; v < vectors; ++v) {
      unit(v, slot_of(v), loops * kUnroll);
    }
    advance(mode, -loops * step_in, -loops * step_out);
  }

  // f32 inputs: the weights sum to 1, so the merged value lies within +-max(|x|, |y|); fp32
  // rounding of a value next to FLT_MAX could still overflow to inf where the exact (double)
  // blend rounds to FLT_MAX. Clamping the blend to that bound keeps it finite; an infinite or NaN
  // input passes through (the bound is inf, min/max keep NaN). 16-bit inputs need no clamp:
  // |x·ca + y·cb| <= max(|x|, |y|)·(1 + 2^-21) stays below FLT_MAX (bf16's largest value is
  // (2 - 2^-7)·2^127), and its rounding to the output type (bf16, f16, or fp8 after the
  // scale) lands on max(|x|, |y|) or below, as the exact value's does: the excess is far below
  // half an ulp of those types. vmm(kBound) = max(|x|, |y|), vmm(kNegBound) = its negation.
  void blend_bound(const Xmm& x, const Xmm& y) {
    const Xmm bound = vmm(kBound), neg = vmm(kNegBound);
    uni_vpand(bound, x, cst_bits(0x7FFFFFFF));
    uni_vpand(neg, y, cst_bits(0x7FFFFFFF));
    vmaxps(bound, bound, neg);
    uni_vpxor(neg, bound, cst_bits(0x80000000));
  }

  // bf16 in and out: the blend on the values' own 16-bit lanes (blend_pairs).
  bool pairs_blend() const { return p_.dtype == DType::kBF16 && p_.out_dtype == DType::kBF16; }

  // The first `pairs` · 2·lanes elements of the head, blended as bf16 pairs: a dword of a row
  // holds elements 2i (low half) and 2i + 1 (high half); a shift and an and split a vector of
  // 2·lanes elements into two fp32 vectors, each blended as in `span` (a product and an FMA),
  // and both are rounded to nearest even on the bits and packed back (no widening loads, no
  // narrowing stores). A NaN stays a NaN: every NaN here has a zero low half (a bf16 input's,
  // the default NaN of inf·0, or the weights' default NaN, see lane_weights), so the rounding
  // bias cannot carry out of it. Pointers are left as they were. Uses vmm0..7 and 11, 12 (k2,
  // k3 on AVX-512).
  void blend_pairs(int64_t pairs) {
    Label l_ordinary, l_done;
    cmp(byte[rsp + kStreaming], 0);
    je(l_ordinary, T_NEAR);
    blend_pairs(pairs, true);
    jmp(l_done, T_NEAR);
    L(l_ordinary);
    blend_pairs(pairs, false);
    L(l_done);
  }
  // The pairs blend with streaming stores (`streaming`: every vector 64-byte aligned, see
  // MergeCallArgs::output_aligned) or ordinary ones.
  void blend_pairs(int64_t pairs, bool streaming) {
    const int64_t bytes = 2 * lanes() * 2;  // one vector of bf16 pairs
    const auto pair = [&](int64_t i, int u) {
      const Xmm x_even = vmm(2 * u), x_odd = vmm(2 * u + 1);
      const Xmm y_even = vmm(4 + 2 * u), y_odd = vmm(5 + 2 * u);
      const int offset = int(i * bytes);
      vmovups(x_odd, ptr[reg_pre_ + offset]);
      vmovups(y_odd, ptr[reg_suf_ + offset]);
      split_bf16_pairs(x_even, x_odd, x_odd);
      split_bf16_pairs(y_even, y_odd, y_odd);
      vmulps(x_even, x_even, vmm(kWa));
      vfmadd231ps(x_even, y_even, vmm(kWb));
      vmulps(x_odd, x_odd, vmm(kWa));
      vfmadd231ps(x_odd, y_odd, vmm(kWb));
      if (avx512()) {
        pack_bf16_pairs(x_odd, x_even, Xbyak::Opmask(2 + u));
      } else {
        pack_bf16_pairs(x_odd, x_even, vmm(kBound + u));
      }
      if (streaming) {
        vmovntdq(ptr[reg_out_ + offset], x_odd);
      } else {
        vmovups(ptr[reg_out_ + offset], x_odd);
      }
    };
    constexpr int kPairUnroll = 2;
    if (pairs <= kMaxUnrolled / 2) {
      for (int64_t i = 0; i < pairs; ++i) pair(i, int(i % kPairUnroll));
      return;
    }
    const int64_t loops = pairs / kPairUnroll;
    Label l_loop;
    mov(reg_count_, loops);
    L(l_loop);
    for (int u = 0; u < kPairUnroll; ++u) pair(u, u);
    advance(Mode::kBlend, kPairUnroll * bytes, kPairUnroll * bytes);
    dec(reg_count_);
    jnz(l_loop, T_NEAR);
    for (int64_t i = loops * kPairUnroll; i < pairs; ++i) pair(i - loops * kPairUnroll, 0);
    advance(Mode::kBlend, -loops * kPairUnroll * bytes, -loops * kPairUnroll * bytes);
  }

  // x = prefix · ca + suffix · cb in double (f32 inputs; weights in vmm(kWa/kWb) as
  // doubles), rounded once to fp32. Uses x, x+1, y, y+1.
  void blend_double(const Xmm& x, const Xmm& y, int in, int count) {
    const Xmm x_hi = vmm(x.getIdx() + 1), y_hi = vmm(y.getIdx() + 1);
    load_f32(x, DType::kF32, reg_pre_ + in, count);
    load_f32(y, DType::kF32, reg_suf_ + in, count);
    widen_half(x_hi, x, 1);
    widen_half(x, x, 0);
    widen_half(y_hi, y, 1);
    widen_half(y, y, 0);
    vmulpd(x, x, vmm(kWa));
    vfmadd231pd(x, y, vmm(kWb));
    vmulpd(x_hi, x_hi, vmm(kWa));
    vfmadd231pd(x_hi, y_hi, vmm(kWb));
    if (avx512()) {
      vcvtpd2ps(Ymm(x.getIdx()), Zmm(x.getIdx()));
      vcvtpd2ps(Ymm(x_hi.getIdx()), Zmm(x_hi.getIdx()));
      vinsertf32x8(Zmm(x.getIdx()), Zmm(x.getIdx()), Ymm(x_hi.getIdx()), 1);
    } else {
      vcvtpd2ps(Xbyak::Xmm(x.getIdx()), Ymm(x.getIdx()));
      vcvtpd2ps(Xbyak::Xmm(x_hi.getIdx()), Ymm(x_hi.getIdx()));
      vinsertf128(Ymm(x.getIdx()), Ymm(x.getIdx()), Xbyak::Xmm(x_hi.getIdx()), 1);
    }
  }

  void advance(Mode mode, int64_t in, int64_t out) {
    add(reg_out_, int(out));
    if (mode != Mode::kSuffix) add(reg_pre_, int(in));
    if (mode != Mode::kPrefix) add(reg_suf_, int(in));
  }

  const ir::MergeAttnStatesParams p_;
  const bool fp8_;
  const bool double_;  // f32 in and out: weights and blend in double
  const int esize_, osize_;
  const Reg64 reg_args_ = rbx, reg_row_ = r12, reg_row_end_ = r13, reg_pl_ = rbp, reg_sl_ = r8;
  const Reg64 reg_ls_ = r9, reg_out_ = r10, reg_pre_ = r11, reg_suf_ = r14, reg_i_ = r15;
  const Reg64 reg_count_ = rsi, reg_ol_ = rdi;
};

}  // namespace

Result<std::vector<uint8_t>> generate_merge_attn_states(const OpSpec& spec, X86Isa isa) {
  MergeGenerator gen(isa, spec.get<ir::MergeAttnStatesParams>());
  gen.generate();
  return gen.finish();
}

}  // namespace jit::codegen::x86
