// The generator of cpu_attention_with_kv_cache's tile kernel (see attention_kernel.h) and of
// cpu_attn_reshape_and_cache, for the vec / vec16 / neon cache layouts of spec §3.3:
// K slab transposed [D, bs] (key t of dim d at d·bs + t), V slab natural [bs, D].
//
// One call walks the keys [kv_begin, kv_end) in groups of G tokens (G = 32 or 16, dividing
// the block size, so a group never straddles a block). Per group, for the call's R rows:
//
//   QK   S[r][t] = <q_r, k_t> (unscaled)                        R x G fp32, kept in registers
//        (AVX2 calls of 5-8 rows: two halves per group, emit_half)
//   soft s = scale·S; s = c·tanh(s/c) (softcap); s += slope_r·(j − pos_r) (ALiBi);
//        s = −inf outside [lo_r, hi_r]; m' = max(m, max_t s); α = e^(m − m');
//        p_t = e^(s_t − m') (0 where masked); l = α·l + Σ_t p_t; m = m'
//   PV   acc_r = α·acc_r + Σ_t p_t · v_t                          fp32 accumulators in memory
//
// The initial state m = −FLT_MAX (set by the runner) keeps every step finite: a row with no
// allowed key so far has m' = −FLT_MAX, α = e^0 = 1, p = 0 and l = 0, and once a key is
// allowed α = e^(−FLT_MAX − m') clamps to 0 against the zero state. With sinks the runner
// starts a request's first split at m = σ, l = 1 (the sink's e^(σ − m) term).
//
// Two arithmetic paths:
//   dpbf16 (bf16 at AVX512_BF16): vdpbf16ps multiplies bf16 pairs and accumulates in fp32.
//     Q·Kᵀ needs (k[d][t], k[d+1][t]) pairs: rows d and d+1 of the transposed K slab are
//     interleaved word-wise with one vpermi2w per 16 keys (vpermw for 16-key groups), and
//     each row's query pair (q[d], q[d+1]) is an embedded {1to16} dword broadcast. P·V needs
//     (v[t][d], v[t+1][d]) pairs: V rows t and t+1 interleaved the same way, the probability
//     pair (p[t], p[t+1]) rounded to bf16 (vcvtneps2bf16) and broadcast. As in vLLM's AMX
//     path, probabilities are bf16 in P·V while l sums the fp32 values. An odd last key is
//     paired with a zero row, so no V row past kv_end is ever read.
//   fp32 (f32/f16 always, bf16 where dpbf16 is 0 or AVX512_BF16 is absent, every dtype at
//     AVX2, fp8 caches by default): K and V widened to fp32 on load, FMA with the broadcast
//     fp32 query / probability. An fp8 cache (kv=fp8_e4m3/fp8_e5m2, spec §3.6) holds one byte
//     per element: the load decodes the codes exactly (Generator::fp8_decode, or to bf16 words
//     by decode_fp8_words) and the runner folds the scales in, k_scale into the logit scale and
//     v_scale into the final 1/l. bf16 words (at AVX-512 a bf16 cache's or decoded fp8, at
//     AVX2 a bf16 cache's) are widened two vectors at a time by parity (parity_split): even
//     elements word << 16, odd ones word & 0xFFFF0000, so Q·Kᵀ's logits come out even keys /
//     odd keys (reordered when stored) and P·V's accumulators hold each chunk of two vectors
//     (32 dims, AVX2 16) as even / odd dims (reordered once at the call's entry and exit).
//     Calls of 1-2 rows at AVX2 accumulate in 2-4 independent register sets
//     (accumulator_sets), so the two FMA ports see 8 chains.
//   amx (isa=amx cache layout, AMX-BF16): the same steps on tiles. The amx K slab is the B-tile
//     layout of Q·Kᵀ (16 dim pairs x 16 keys x 2 per 1024-byte tile) and the amx V slab the
//     B-tile layout of P·V (16 key pairs x 16 dims x 2), so no interleaving is needed:
//       Q·Kᵀ  tmm4/tmm5 (keys 0-15 / 16-31) += tmm0 (Q, 32 dims) · tmm1/tmm2, over D/32 chunks;
//       P·V   per 16 dims: tmm4 = acc (pre-scaled by α with AVX-512), += tmm0 (P, 32 keys bf16)
//             · tmm1 (V), stored back.
//     Tile config (palette 1): tmm0 and tmm4/5 have the call's rows x 64 bytes, tmm1/2 16 x 64.
//     One config per row count, loaded at entry; tilerelease at exit. While a group computes,
//     the next group's K and V lines (through the block table) are prefetched into L1, spread
//     over the Q·Kᵀ chunks and the P·V dims (two small routines shared by the variants).
//     The softmax is emit_softmax_batched: the same steps with the rows of the group as lanes (one
//     transpose tree per reduction instead of one horizontal chain per row), also shared.
// Any head size D (vec / vec16 / neon layouts; the amx layout needs D % 32 == 0): Q·Kᵀ walks
// the dims in steps of 4 (fp32) or 4 pairs (dpbf16) and emits the D % 4 (pairs) rest after
// the loop; an odd D pairs its last dim with a zero K row and a zero query word. P·V walks the
// dims in chunks of two vectors; a chunk that does not fill its last vector reads the V rows
// and reads / writes the accumulator rows under a mask (AVX-512 k6 / k7 for bf16 words,
// AVX2 vmaskmovps, or the Generator's staged tail loads), so no row is read or written past
// its D elements.
// Keys past kv_end inside the last group are read by Q·K (inside the allocated block) but
// masked to p = 0 before they can reach P·V, and the vector P·V stops at kv_end. The AMX P·V
// multiplies whole 32-key tiles, so a partial last group gets V tiles copied with the slots
// past kv_end zeroed (masked loads: nothing past kv_end is read).
#include "codegen/x86/attention_kernel.h"

#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xbyak/xbyak.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <stdexcept>

#include "codegen/x86/generator.h"
#include "ir/numeric.h"
#include "ir/params_cache.h"
#include "ir/params_cpu.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;
using namespace Xbyak::util;

constexpr int kGroupMax = 32;  // logits / probability row stride in scratch, in elements

#define ARG(field) (rdi + int(offsetof(CpuAttnTileArgs, field)))

class AttentionGenerator : public Generator {
 public:
  AttentionGenerator(const ir::CpuAttentionParams& p, X86Isa isa, bool dpbf16, int group,
                     int max_rows)
      : Generator(isa),
        p_(p),
        amx_(p.isa == ir::CpuAttnIsa::kAmx),
        emulate_(amx_ && isa < X86Isa::kAmx),
        dpbf16_(dpbf16),
        group_(group),
        max_rows_(max_rows),
        esize_(int(dtype_size(p.dtype))),
        kv_esize_(int(ir::cache_element_size(p.dtype, p.kv))),
        nv_(group / lanes()) {}

  void generate() {
    prologue();
    if (emulate_) {
      // One variant for every row count: the emulated tiles loop over the call's rows.
      emit_variant(0);
      epilogue();
      emit_prefetch_routines();
      return;
    }
    mov(rax, ptr[ARG(rows)]);
    std::vector<Label> variants(size_t(max_rows_ + 1));
    Label l_done;
    for (int r = 1; r <= max_rows_; ++r) {
      cmp(rax, r);
      je(variants[size_t(r)], T_NEAR);
    }
    jmp(l_done, T_NEAR);
    for (int r = 1; r <= max_rows_; ++r) {
      L(variants[size_t(r)]);
      emit_variant(r);
      jmp(l_done, T_NEAR);
    }
    L(l_done);
    epilogue();
    emit_prefetch_routines();
  }

 private:
  // Register use inside a group (GPRs): r8 K group base, r9 V group base, r10 first key j0,
  // r11 block-table column, r12 offset in the block, rbx keys in this group, r13..r15 and rbp
  // loop pointers and counters; in the vec paths' Q·Kᵀ and P·V loops rdx and rbp hold the
  // prefetch bases (hoist_prefetch_bases).
  // rows = 0: the row count is read from the call (the AMX emulation's single variant).
  void emit_variant(int rows) {
    Label l_group, l_end, l_same_block;
    if (emulate_) {
      // Emulated tiles live on the stack: [rsp] = rows · 64 (the loop bound), tile t at
      // rsp + 64 + t · 1024 (16 rows of 64 bytes, as the palette-1 tiles).
      sub(rsp, kEmuFrame);
      mov(rax, ptr[ARG(rows)]);
      shl(rax, 6);
      mov(ptr[rsp], rax);
    } else if (amx_) {
      ldtilecfg(tile_config(rows));
    }
    if (parity_split()) call(l_acc_to_split_);
    mov(r10, ptr[ARG(kv_begin)]);
    mov(r11, ptr[ARG(first_block)]);
    mov(r12, ptr[ARG(first_offset)]);
    L(l_group);
    cmp(r10, ptr[ARG(kv_end)]);
    jge(l_end, T_NEAR);
    // rbx = min(G, kv_end − j0): keys of this group.
    mov(rbx, ptr[ARG(kv_end)]);
    sub(rbx, r10);
    mov(rax, group_);
    cmp(rbx, rax);
    cmovg(rbx, rax);
    // Block base: block_row[column] · block_stride.
    mov(rax, ptr[ARG(block_row)]);
    movsxd(rax, dword[rax + r11 * 4]);
    imul(rax, ptr[ARG(block_stride)]);
    mov(r8, ptr[ARG(k_base)]);
    add(r8, rax);
    mov(r9, ptr[ARG(v_base)]);
    add(r9, rax);
    if (amx_) {
      // K: 16-key group t0/16 at (t0/16)·16·D elements; V: key pair t0/2 at (t0/2)·32.
      mov(rcx, r12);
      imul(rcx, rcx, p_.head_size * 2);
      add(r8, rcx);
      mov(rcx, r12);
      shl(rcx, 5);
      add(r9, rcx);
      call(l_next_group_);
      emit_qk_amx();
      emit_group_softmax(rows);
      emit_pv_amx(rows);
    } else {
      call(l_stream_kick_);  // next-group cursors (kv=auto) and the stream kick (rax, rcx, rdx)
      lea(r8, ptr[r8 + r12 * kv_esize_]);  // K: key offset t0 inside each dim row
      mov(rcx, r12);
      imul(rcx, rcx, p_.head_size * kv_esize_);  // V: row t0
      add(r9, rcx);
      if (!avx512() && rows > kMaxAttnRowsAvx2) {
        // AVX2, 5-8 rows: two halves per group, the second reading the group's K and V rows
        // from L1 where the first left them (emit_half).
        const int first = (rows + 1) / 2;
        emit_half(first, 0);
        emit_half(rows - first, first);
      } else {
        emit_half(rows, 0);
      }
    }
    add(r10, group_);
    add(r12, group_);
    cmp(r12, p_.block_size);
    jne(l_same_block, T_NEAR);
    xor_(r12, r12);
    inc(r11);
    L(l_same_block);
    jmp(l_group, T_NEAR);
    L(l_end);
    if (parity_split()) call(l_acc_to_natural_);
    if (emulate_) {
      add(rsp, kEmuFrame);
    } else if (amx_) {
      tilerelease();
    }
  }

  // Q·Kᵀ, the softmax and P·V of one group for `rows` rows from row `row0` of the call. AVX2
  // serves up to 8 rows as two such halves per group (row0 > 0 only there; halves of 2-4 rows,
  // so both take the batched softmax): its 16 registers hold a Q·Kᵀ tile of 4 rows x 16 keys,
  // and GQA 8 ran as two passes of 4 rows over each 512-key tile, each reading the tile from L2
  // or DRAM. Here the second half reads the group's K and V rows (2 x 4 KiB at D = 128 bf16)
  // from L1 and prefetches nothing (the first fetched the next groups for both). A/B, eight
  // alternated rounds (bench_attention decode, GQA 8, 1 thread): batch 1 / context 512 faster
  // in 7 of 8 (medians 156 -> 139 µs), batch 32 / context 8192 in 6 of 8 (95 -> 86 ms), batch
  // 8 / context 2048 slower in 6 of 8 (5.35 -> 5.57 ms).
  void emit_half(int rows, int row0) {
    if (row0 > 0 && (avx512() || dpbf16_ || amx_ || rows < 2)) {
      // Only AVX2's fp32 path and its batched softmax (2-4 rows) offset their rows by row0_.
      throw std::logic_error(
          "emit_half: a second half exists at AVX2's fp32 path only, of 2-4 rows");
    }
    row0_ = row0;
    if (dpbf16_) {
      emit_qk_dpbf16(rows);
    } else {
      emit_qk_fp32(rows);
    }
    emit_group_softmax(rows);
    if (dpbf16_) {
      emit_pv_dpbf16(rows);
    } else {
      emit_pv_fp32(rows);
    }
    row0_ = 0;
  }
  // Whether the vec paths' loops prefetch the next groups alongside (spread_prefetch): the
  // first half of a group does it for both.
  bool prefetch_alongside() const { return spread_prefetch() && row0_ == 0; }
  // Row r's entry (counted from row0_, the half's first row) of the per-row float / int32
  // array at `field` of the call's arguments.
  Address row_arg(size_t field, int r) const { return ptr[rdi + int(field) + (row0_ + r) * 4]; }

  // cmp reg, rows (the compile-time count, or the call's when rows = 0).
  void cmp_rows(const Reg64& reg, int rows) {
    if (rows > 0) {
      cmp(reg, rows);
    } else {
      cmp(reg, ptr[ARG(rows)]);
    }
  }

  // ---- AMX emulation: the tile instructions as AVX512_BF16 code over stack tiles ---------
  // Used when the target has no AMX (e.g. AVX512_BF16 hosts), so the amx-layout numerics are
  // testable there. Same memory traffic shape, same pair products (vdpbf16ps), fp32
  // accumulation per tile row; rbp, rdx, zmm0 and zmm16..31 are its scratch.
  static constexpr int kEmuFrame = 64 + 8 * 1024;
  Address emu_tile(int tile, const Reg64& row_offset) {
    return ptr[rsp + row_offset + 64 + tile * 1024];
  }
  struct TileSource {
    Reg64 base, stride;
    int64_t disp = 0;
  };
  TileSource b_source_[8];  // where each emulated B tile was "loaded" from

  void t_zero(int tile) {
    if (!emulate_) {
      tilezero(Tmm(tile));
      return;
    }
    vpxord(zmm0, zmm0, zmm0);
    for (int r = 0; r < 16; ++r) vmovups(ptr[rsp + 64 + tile * 1024 + r * 64], zmm0);
  }
  // A tile of the call's rows (A or C): rows from [base + disp], `stride` bytes apart.
  void t_load(int tile, const Reg64& base, const Reg64& stride, int64_t disp) {
    if (!emulate_) {
      tileloadd(Tmm(tile), ptr[base + stride + disp]);
      return;
    }
    lea(rbp, ptr[base + disp]);
    xor_(edx, edx);
    Label l;
    L(l);
    vmovdqu32(zmm0, ptr[rbp]);
    vmovdqu32(emu_tile(tile, rdx), zmm0);
    add(rbp, stride);
    add(rdx, 64);
    cmp(rdx, ptr[rsp]);
    jl(l, T_NEAR);
  }
  void t_store(const Reg64& base, const Reg64& stride, int64_t disp, int tile) {
    if (!emulate_) {
      tilestored(ptr[base + stride + disp], Tmm(tile));
      return;
    }
    lea(rbp, ptr[base + disp]);
    xor_(edx, edx);
    Label l;
    L(l);
    vmovdqu32(zmm0, emu_tile(tile, rdx));
    vmovdqu32(ptr[rbp], zmm0);
    add(rbp, stride);
    add(rdx, 64);
    cmp(rdx, ptr[rsp]);
    jl(l, T_NEAR);
  }
  // A B tile (16 rows): emulated by reading its rows at the product (registers unchanged).
  void t_load_b(int tile, const Reg64& base, const Reg64& stride, int64_t disp) {
    if (!emulate_) {
      tileloadd(Tmm(tile), ptr[base + stride + disp]);
      return;
    }
    b_source_[tile] = {base, stride, disp};
  }
  // C += A · B: C[m][n] += Σ_k A[m][2k]·B[k][2n] + A[m][2k+1]·B[k][2n+1].
  void t_dp(int c, int a, int b) {
    if (!emulate_) {
      tdpbf16ps(Tmm(c), Tmm(a), Tmm(b));
      return;
    }
    const TileSource& src = b_source_[b];
    lea(rbp, ptr[src.base + src.disp]);
    for (int k = 0; k < 16; ++k) {
      vmovdqu32(Zmm(16 + k), ptr[rbp]);
      if (k < 15) add(rbp, src.stride);
    }
    xor_(edx, edx);
    Label l;
    L(l);
    vmovups(zmm0, emu_tile(c, rdx));
    for (int k = 0; k < 16; ++k) {
      vdpbf16ps(zmm0, Zmm(16 + k), ptr_b[rsp + rdx + 64 + a * 1024 + k * 4]);
    }
    vmovups(emu_tile(c, rdx), zmm0);
    add(rdx, 64);
    cmp(rdx, ptr[rsp]);
    jl(l, T_NEAR);
  }

  // ---- AMX ---------------------------------------------------------------------------------

  // The 64-byte tile configuration for `rows` query rows (palette 1): tmm0 (A: Q or P) and
  // tmm4/tmm5 (C) are rows x 64 bytes, tmm1/tmm2 (B) 16 x 64 bytes.
  Address tile_config(int rows) {
    std::array<uint8_t, 64> cfg{};
    cfg[0] = 1;  // palette
    const auto set = [&](int tile, int tile_rows) {
      cfg[size_t(16 + 2 * tile)] = 64;  // colsb (little-endian uint16)
      cfg[size_t(48 + tile)] = uint8_t(tile_rows);
    };
    set(0, rows);
    set(1, 16);
    set(2, 16);
    set(4, rows);
    set(5, rows);
    std::array<uint32_t, 16> words{};
    std::memcpy(words.data(), cfg.data(), 64);
    return cst_table(words);
  }

  // Logits of the group into the logits scratch (row stride 128 bytes: keys 0-15, 16-31).
  void emit_qk_amx() {
    const int64_t d = p_.head_size;
    t_zero(4);
    t_zero(5);
    mov(r14, ptr[ARG(q)]);
    mov(rax, d * 2);  // Q row stride
    mov(rcx, 64);     // B-tile row stride: one dim pair of 16 keys
    // 32-dim chunk c: Q at r14 + c·64, K at r8 + c·1024 (a large head's loop moves both on).
    const auto chunk = [&](int64_t c) {
      t_load(0, r14, rax, c * 64);
      t_load_b(1, r8, rcx, c * 1024);
      t_load_b(2, r8, rcx, 32 * d + c * 1024);  // keys 16-31: 16·D elements on
      t_dp(4, 0, 1);
      t_dp(5, 0, 2);
      call(l_prefetch_k_);  // the next group's K lines of this chunk, while the products run
    };
    emit_amx_dim_steps(d / 32, chunk, {{r14, 64}, {r8, 1024}});
    mov(rsi, ptr[ARG(scratch)]);
    mov(rcx, kGroupMax * 4);
    t_store(rsi, rcx, 0, 4);
    t_store(rsi, rcx, 64, 5);
  }

  void emit_pv_amx(int rows) {
    const int64_t d = p_.head_size;
    const int prob_offset = max_rows_ * kGroupMax * 4;
    // acc_r *= α_r with AVX-512 (rbp = row), then the tiles accumulate onto it. α = 1 (the
    // running max did not move: most groups of a long decode) skips the row's pass over acc.
    mov(rsi, ptr[ARG(acc)]);
    xor_(rbp, rbp);
    constexpr uint32_t kOneBits = 0x3f800000;  // 1.0f
    Label l_row, l_scaled;
    L(l_row);
    cmp(dword[ARG(alpha) + rbp * 4], kOneBits);
    je(l_scaled, T_NEAR);
    vbroadcastss(zwork(3), ptr[ARG(alpha) + rbp * 4]);
    const auto scale = [&](int64_t v) {
      vmulps(zwork(0), zwork(3), ptr[rsi + v * 64]);
      vmovups(ptr[rsi + v * 64], zwork(0));
    };
    emit_amx_dim_steps(d / 16, scale, {{rsi, 64}});
    L(l_scaled);
    add(rsi, d * 4);
    inc(rbp);
    cmp_rows(rbp, rows);
    jl(l_row, T_NEAR);
    // V tiles: straight from the slab for a full group (r13 = base, r15 = stride of 16 dims:
    // 16·bs elements); for a partial last group, copies with the key slots >= kv_end zeroed,
    // so the tile product never reads a value past the sequence (0·NaN would poison the row).
    Label l_full, l_tiles;
    cmp(rbx, group_);
    je(l_full, T_NEAR);
    mov(r13, ptr[ARG(scratch)]);
    add(r13, amx_tail_offset());
    // The copy of V tile g (16 dims): from r9 + g·32·bs, to r13 + g·1024 (a large head's loop
    // moves r9 and r13 on).
    const auto copy_tile = [&](int64_t g) {
      // Row k holds keys 2k, 2k+1 (odd words): all valid, the even word only, or none.
      Label l_k;
      xor_(ebp, ebp);
      xor_(esi, esi);
      L(l_k);
      mov(rax, rbx);
      sub(rax, rbp);
      sub(rax, rbp);  // keys left from 2k
      xor_(ecx, ecx);
      mov(edx, 0x55555555);
      cmp(rax, 1);
      cmove(ecx, edx);
      mov(edx, 0xFFFFFFFF);
      cmp(rax, 2);
      cmovge(ecx, edx);
      kmovd(k6, ecx);
      vmovdqu16(zwork(0) | k6 | T_z, ptr[r9 + rsi + g * 32 * p_.block_size]);
      vmovdqu16(ptr[r13 + rsi + g * 1024], zwork(0));
      add(esi, 64);
      inc(ebp);
      cmp(ebp, 16);
      jl(l_k, T_NEAR);
    };
    emit_amx_dim_steps(d / 16, copy_tile, {{r9, 32 * p_.block_size}, {r13, 1024}});
    mov(r15, 1024);
    jmp(l_tiles, T_NEAR);
    L(l_full);
    mov(r13, r9);
    mov(r15, 32 * p_.block_size);
    L(l_tiles);
    mov(r14, ptr[ARG(scratch)]);
    add(r14, prob_offset);
    mov(rcx, kGroupMax * 2);  // probability rows: 32 bf16 keys
    t_load(0, r14, rcx, 0);
    mov(rsi, ptr[ARG(acc)]);
    mov(rax, d * 4);
    mov(rcx, 64);
    // 16 dims g: acc at rsi + g·64 (a large head's loop moves rsi on), V tile at r13.
    const auto tile = [&](int64_t g) {
      t_load(4, rsi, rax, g * 64);
      t_load_b(1, r13, rcx, 0);
      t_dp(4, 0, 1);
      t_store(rsi, rax, g * 64, 4);
      add(r13, r15);
      call(l_prefetch_v_);  // the next group's V tile of these 16 dims (1 KiB, 32 keys)
    };
    emit_amx_dim_steps(d / 16, tile, {{rsi, 64}});
  }

  // The `count` dim steps of an AMX walk over the head (Q·Kᵀ's 32-dim chunks, P·V's 16-dim
  // tiles, the α scaling and the partial group's V copies): in line for heads of up to
  // kUnrolledHead dims, past that a loop (Generator::emit_steps; ARG(dim_steps_left) counts:
  // the steps and the tile emulation take the scratch registers). As P·V's emit_dim_chunks,
  // so that a variant's size does not grow with D (16 AMX variants unrolled over D = 1024
  // outgrew the code buffer).
  void emit_amx_dim_steps(int64_t count, const std::function<void(int64_t)>& step,
                          std::initializer_list<std::pair<Reg64, int64_t>> cursors) {
    emit_steps(count, p_.head_size <= kUnrolledHead ? count : 0, qword[ARG(dim_steps_left)],
               cursors, step);
  }

  // Software prefetch of the next group's K/V. The blocks come from the block table, so the
  // next group is usually in another (random) block: the hardware prefetchers see a new
  // stream every 8 KiB and ramp up again; asking for the next group's 256 lines one group
  // (~1 µs of tile work) ahead hides the DRAM latency.
  // Routines shared by every variant (called: the 16 variants must fit the code buffer at
  // D = 256). l_next_group_ sets the cursors ARG(next_k), ARG(next_v) at the next group's
  // slabs (emit_next_group); each l_prefetch_k_ call fetches the 16 lines at next_k and at
  // next_k + 32·D (one 32-dim chunk of both 16-key tiles) and moves next_k on by a chunk
  // (1 KiB); each l_prefetch_v_ call fetches the 16 lines at next_v (one 16-dim V tile of 32
  // keys) and moves next_v on by 16 dims (32·bs bytes). Only rdx (and rax, rcx in
  // l_next_group_) are used: free at every call site, native or emulated. The vec paths have
  // one routine, l_stream_kick_: the next group's slabs into ARG(next_k), ARG(next_v) as above
  // (spread_prefetch: kv=auto), then emit_stream_kick of the groups 1..4 ahead (rax, rcx,
  // rdx).
  void emit_prefetch_routines() {
    if (!amx_) {
      if (fp8_kv()) {
        L(l_decode_fp8_);
        decode_fp8_words(zwork(4), zwork(0), zwork(3));
        ret();
      }
      L(l_stream_kick_);
      if (spread_prefetch()) {
        emit_next_group(/*kick_from=*/1);
      } else {
        emit_stream_kick(/*first=*/1);
      }
      ret();
      if (batched_softmax()) {
        L(l_softmax_);
        emit_softmax_batched();
        ret();
      }
      if (parity_split()) {
        L(l_acc_to_split_);
        emit_reorder_acc(/*to_split=*/true);
        ret();
        L(l_acc_to_natural_);
        emit_reorder_acc(/*to_split=*/false);
        ret();
      }
      return;
    }
    L(l_softmax_);
    emit_softmax_batched();
    ret();
    L(l_next_group_);
    emit_next_group(/*kick_from=*/2);
    ret();
    L(l_prefetch_k_);
    mov(rdx, ptr[ARG(next_k)]);
    for (int64_t line = 0; line < 16; ++line) {
      prefetch_kv(ptr[rdx + line * 64]);
      prefetch_kv(ptr[rdx + 32 * p_.head_size + line * 64]);
    }
    add(qword[ARG(next_k)], 1024);
    ret();
    L(l_prefetch_v_);
    mov(rdx, ptr[ARG(next_v)]);
    for (int64_t line = 0; line < 16; ++line) prefetch_kv(ptr[rdx + line * 64]);
    add(qword[ARG(next_v)], 32 * p_.block_size);
    ret();
  }
  Label l_next_group_, l_prefetch_k_, l_prefetch_v_, l_softmax_, l_stream_kick_, l_decode_fp8_;
  Label l_acc_to_split_, l_acc_to_natural_;

  // prefetcht0: the next group (16 KiB) fits in L1 beside the current one; measured the same
  // as prefetcht1 (L2) and as fetching two groups ahead.
  void prefetch_kv(const Address& addr) { prefetcht0(addr); }

  // ARG(next_k), ARG(next_v): the slabs of the group after this one (r10 = j0, r11 = block
  // column, r12 = offset in the block, r8/r9 = this group's slabs), or this group's when it is
  // the call's last (nothing past kv_end is fetched, and the block table entry past the
  // sequence is never read); with spread_prefetch also ARG(next2_k), ARG(next2_v), the group
  // after that (or the last one there is, the same way). Then the stream kick of the groups
  // `kick_from`.. ahead. Uses rax, rcx, rdx.
  void emit_next_group(int kick_from) {
    Label l_last, l_done;
    emit_group_slabs(group_, l_last);
    mov(ptr[ARG(next_k)], rcx);
    mov(ptr[ARG(next_v)], rax);
    if (spread_prefetch()) {
      Label l_no_second;
      mov(ptr[ARG(next2_k)], rcx);
      mov(ptr[ARG(next2_v)], rax);
      emit_group_slabs(2 * group_, l_no_second);
      mov(ptr[ARG(next2_k)], rcx);
      mov(ptr[ARG(next2_v)], rax);
      L(l_no_second);
    }
    emit_stream_kick(kick_from);
    jmp(l_done, T_NEAR);
    L(l_last);
    mov(ptr[ARG(next_k)], r8);
    mov(ptr[ARG(next_v)], r9);
    if (spread_prefetch()) {
      mov(ptr[ARG(next2_k)], r8);
      mov(ptr[ARG(next2_v)], r9);
    }
    L(l_done);
  }

  // rcx = K slab and rax = V slab of the group holding key j0 + `ahead` (a multiple of G), or
  // a jump to `l_past_end` when that key is at or past kv_end. The key is in column
  // r11 + (r12 + ahead) / bs at offset (r12 + ahead) % bs. Uses rdx.
  void emit_group_slabs(int64_t ahead, Label& l_past_end) {
    lea(rax, ptr[r10 + ahead]);
    cmp(rax, ptr[ARG(kv_end)]);
    jge(l_past_end, T_NEAR);
    lea(rax, ptr[r12 + ahead]);
    divide_unsigned(p_.block_size);  // rax = columns on, rdx = offset in that block
    add(rax, r11);
    mov(rcx, ptr[ARG(block_row)]);
    movsxd(rax, dword[rcx + rax * 4]);
    imul(rax, ptr[ARG(block_stride)]);
    if (amx_) {
      mov(rcx, rdx);
      imul(rcx, rcx, p_.head_size * 2);  // K: offset t0 at t0·D elements
      add(rcx, rax);
      add(rcx, ptr[ARG(k_base)]);
      shl(rdx, 5);  // V: key pair t0/2 at (t0/2)·32 elements
      add(rax, rdx);
    } else {
      lea(rcx, ptr[rax + rdx * kv_esize_]);  // K: key t0 of each dim row
      add(rcx, ptr[ARG(k_base)]);
      imul(rdx, rdx, p_.head_size * kv_esize_);  // V: row t0
      add(rax, rdx);
    }
    add(rax, ptr[ARG(v_base)]);
  }

  // The stream kick. The full prefetch of the next group (AMX: l_prefetch_k_/l_prefetch_v_;
  // vec: spread_prefetch) goes through the L1 fill buffers (a few dozen lines in flight: at
  // DRAM latency ~10 GB/s from one core). The L2 streamer runs further ahead without fill
  // buffers, but each group's slabs are new 4 KiB pages at random places, and it trains on
  // every page again. Two lines at the start of each page that the groups `first`..kKickGroups
  // ahead will read start those streams early, so several pages stream at once.
  // Microbenchmark (random 8 KiB slabs, 1 GiB, light compute per line): full prefetch of the
  // next slab 9.0 GB/s, plus this kick 11.9.
  // At most kKickPages pages of each span are kicked (the first ones): a group's K span is
  // D·bs elements, 64 pages at D = 4096, bs = 32 (bf16) and 8192 at bs = 512 (f32), whose
  // kicks outgrew the code buffer and would have outnumbered the group's own K lines. Spans of
  // up to 16 pages (D·bs·e <= 64 KiB: every head up to 256 at blocks up to 128, bf16) are kicked
  // whole, as before.
  static constexpr int kKickGroups = 4;
  static constexpr int64_t kPage = 4096;
  static constexpr int64_t kKickPages = 16;

  void emit_stream_kick(int first) {
    Label l_end;
    for (int a = first; a <= kKickGroups; ++a) {
      emit_group_slabs(int64_t(a) * group_, l_end);
      for (const auto& [base, span] : group_spans()) {
        for (int64_t offset = 0; offset < std::min(span, kKickPages * kPage); offset += kPage) {
          kick_page(base, offset);
        }
      }
      if (amx_) {
        // V: one 1 KiB tile of 32 keys per 16 dims, 32·bs bytes apart: kick each tile that
        // starts in a page the previous tile did not reach (the first kKickPages of them).
        int64_t previous_page = -1;
        int64_t kicked = 0;
        for (int64_t tile = 0; tile < p_.head_size / 16 && kicked < kKickPages; ++tile) {
          const int64_t offset = tile * 32 * p_.block_size;
          if (offset / kPage != previous_page) {
            kick_page(rax, offset);
            ++kicked;
          }
          previous_page = (offset + 1023) / kPage;
        }
      }
    }
    L(l_end);
  }

  // The address ranges a group reads from its slabs (emit_group_slabs: rcx = K, rax = V),
  // as (base, bytes from it): amx K, two 16-key tiles of 32·D bytes; vec K, G keys of every
  // dim row (D rows, bs elements apart); vec V, G rows of D. (amx V is kicked per tile.)
  std::vector<std::pair<Reg64, int64_t>> group_spans() const {
    if (amx_) return {{rcx, 64 * p_.head_size}};
    const int64_t e = kv_esize_;
    return {{rcx, (p_.head_size - 1) * p_.block_size * e + group_ * e},
            {rax, group_ * p_.head_size * e}};
  }

  // The vec paths prefetch the next group as the AMX path does, spread over their loops: each
  // Q·Kᵀ step fetches the next group's copies of the K rows it reads, each P·V step its
  // chunk's lines of the next group's V rows (ARG(next_k) / ARG(next_v), set by
  // l_stream_kick_; until x86-137 the dpbf16 P·V fetched whole rows in its first chunk).
  // bench_attention, 1 / 2 threads, >= 128 MiB of KV: decode/kiln_vec (dpbf16) 5.7-6.2 -> 7.3-8.3
  // / 11.5-14.3 -> 14.6-17.6 GB/s, in the caches (batch 8 / 2048) 9.6-9.7 -> 9.9-10.4;
  // decode/kiln_vec_fma (fp32 path) 6.4-6.7 -> 8.6-9.6 / 12.5-14.8 -> 16.8-21.1, in the
  // caches 12.8-13.1 -> 13.8-14.0. Not for fp8 caches on the old fp32 path (bound by the decode:
  // mixed, -10 to +10%); since the codes are decoded as bf16 words (parity_split, x86-71) it serves
  // them too: kiln_vec_fp8_e4m3 at >= 128 MiB of KV 3.8-4.5 -> 4.7-5.0 GB/s on 1 thread, in the
  // caches level. (All 256 lines at the group start instead: -13-15% in the caches.)
  bool spread_prefetch() const {
    return !amx_ && (p_.kv == ir::KvCacheDtype::kAuto || parity_split());
  }

  // Each prefetch of the next group's lines is followed by one of the same lines two groups
  // ahead into L2 (prefetcht2: ARG(next2_k), ARG(next2_v)), so the DRAM reads of a random
  // block start a whole group earlier than the L1 prefetch of the next group alone:
  // bench_attention decode/kiln_vec (two A/B sessions, two runs each) with 512 MiB of KV
  // (batch 32, context 8192) 9.9-10.4 -> 10.8-11.5 GB/s on 1 thread, 20.2-21.0 -> 22.6-22.8 on
  // 2; with the KV in L3 level within +-6% (the extra prefetches' issue against the noise). Taken:
  // a model's other layers do not leave a layer's KV in the caches between its decode steps.
  // Fetching two groups ahead into L1 instead (prefetcht0) lost in both; kicking 8 groups ahead
  // instead of 4 changed nothing.
  // The next group is fetched into L2 (prefetcht1) rather than L1 (x86-126): on Zen 4 (AVX-512,
  // bench_attention decode/kiln_vec, three alternated rounds) with the KV in DRAM 10.5-12.1 ->
  // 14.7-15.6 GB/s on 1 thread and 18.0-20.9 -> 21.7-25.5 on 2, in the caches level; fp8 KV
  // (bound by its decode) level; the AVX2 code on that core level or better. The demand loads
  // then hit L2, and the L1 miss buffers no longer hold the prefetches of a group ahead.

  // Before a loop that prefetches alongside a cursor walking this group's slab from `base`:
  // rdx = next − base and rbp = next2 − base (the next group's slab at [rdi + next_offset],
  // the one after it at [rdi + next2_offset]), so the copy of the cursor's line in either is
  // [rdx + cursor] / [rbp + cursor] and each prefetch is one instruction. (Computing the
  // address in each step cost six scalar instructions per P·V key, ~25 per 8 FMAs in the
  // AVX2 loop: past the 6-wide dispatch of Zen 3.) The loops leave rdx and rbp alone.
  void hoist_prefetch_bases(const Reg64& base, size_t next_offset, size_t next2_offset) {
    mov(rdx, ptr[rdi + int(next_offset)]);
    sub(rdx, base);
    mov(rbp, ptr[rdi + int(next2_offset)]);
    sub(rbp, base);
  }

  // prefetcht1 of the next group's lines at the place of `cursor` in this group, then
  // prefetcht2 of the same lines two groups ahead (bases from hoist_prefetch_bases): `rows`
  // rows `row_stride` bytes apart from the cursor, `lines_per_row` lines each.
  void prefetch_next_alongside(const Reg64& cursor, int64_t rows, int64_t row_stride,
                               int64_t lines_per_row) {
    for (const Reg64& ahead : {rdx, rbp}) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t l = 0; l < lines_per_row; ++l) {
          prefetch_ahead(ptr[ahead + cursor + r * row_stride + l * 64], ahead == rdx);
        }
      }
    }
  }
  void prefetch_ahead(const Address& line, bool next_group) {
    if (next_group) {
      prefetcht1(line);
    } else {
      prefetcht2(line);
    }
  }

  // P·V's share of the next group's V (spread_prefetch): each dims chunk, while it walks the
  // group's V rows (r13 at row t, r9 the group's first row), prefetches the lines of the
  // same chunk of row t in the next group, bytes [first, first + bytes) of the row. Spread
  // over the chunks, one line per step at D = 128 bf16, rather than every line of the row in
  // the first chunk: +3-8% in the caches (bench_attention decode/kiln_vec_fma, 1 thread).
  // Then the same lines two groups ahead (ARG(next2_v), into L2). Bases from
  // hoist_prefetch_bases(r9, ...); the row at r13 + `row`.
  void prefetch_next_chunk(int64_t row, int64_t first, int64_t bytes) {
    for (const Reg64& ahead : {rdx, rbp}) {
      for (const int64_t offset : chunk_lines(first, bytes)) {
        prefetch_ahead(ptr[ahead + r13 + row + offset], ahead == rdx);
      }
    }
  }

  // This group's lines of the chunk that follows (bytes [first, first + bytes) of the V row at
  // r13 + `row`) into L1, while the current chunk walks the rows. The group came into L2 a
  // group ahead (prefetch_next_chunk), but a chunk reads one line of each row, D·e bytes apart
  // (256 at D = 128 bf16), a stride the L1 prefetcher did not follow: each chunk's loads waited
  // on L2 (`perf`: ~40% of a P·V chunk's samples on its first two loads with the KV in DRAM).
  void prefetch_following_chunk(int64_t row, int64_t first, int64_t bytes) {
    if (bytes == 0) return;
    for (const int64_t offset : chunk_lines(first, bytes)) prefetcht0(ptr[r13 + row + offset]);
  }

  // Offsets in a V row of the lines to fetch for its bytes [first, first + bytes): with rows of
  // whole lines, the lines that start in that range (none for a chunk inside the previous
  // chunk's line, as the second 32-byte chunk of each line at AVX2); rows that are not whole
  // lines place it at any offset in its lines: every line from its first byte to its last.
  std::vector<int64_t> chunk_lines(int64_t first, int64_t bytes) const {
    std::vector<int64_t> offsets;
    if (p_.head_size * kv_esize_ % 64 == 0) {
      for (int64_t line = (first + 63) / 64 * 64; line < first + bytes; line += 64) {
        offsets.push_back(line);
      }
      return offsets;
    }
    for (int64_t offset = first; offset < first + bytes; offset += 64) offsets.push_back(offset);
    offsets.push_back(first + bytes - 1);
    return offsets;
  }

  void kick_page(const Reg64& base, int64_t offset) {
    prefetcht1(ptr[base + offset]);
    prefetcht1(ptr[base + offset + 64]);
  }

  // Byte offset in scratch of the AMX partial-group V tiles (after logits and probabilities).
  int amx_tail_offset() const { return 2 * max_rows_ * kGroupMax * 4; }

  // Accumulator register k (0 .. 15 on AVX-512, 0 .. 7 on AVX2), skipping the helpers'
  // scratch 13..15.
  Xmm acc_reg(int k) const { return vmm(free_registers()[size_t(k)]); }
  // Work registers above the accumulators.
  Xmm work(int k) const {
    return avx512() ? vmm(19 + k) : vmm(8 + k);  // AVX2: 8..12
  }
  Zmm zwork(int k) const { return Zmm(19 + k); }

  // Independent accumulator sets for a product of `rows` x `per_row` vectors (AVX2): Q·Kᵀ
  // gives dim u to set u % sets, P·V key t to set t % sets, and the sets are summed at the
  // end. Two FMA ports at 4 cycles' latency need 8 chains in flight, and a call of one row
  // had 2 (each Q·Kᵀ chain 128 dims long, each P·V chain 16 keys): 1 or 2 rows fill the 8
  // registers with 4 or 2 sets. AVX-512 keeps one set (its fp32 path's small calls are not
  // measured with sets yet).
  int accumulator_sets(int rows, int per_row) const {
    if (avx512()) return 1;
    const int chains = rows * per_row;
    return chains <= 2 ? 4 : chains <= 4 ? 2 : 1;
  }
  // Accumulator k (row-major: row · per_row + vector) of set `set`.
  Xmm set_acc(int set, int rows, int per_row, int k) const {
    return acc_reg(set * rows * per_row + k);
  }
  // acc(set 0) += acc(set 1..sets-1), pairwise.
  void sum_accumulator_sets(int sets, int rows, int per_row) {
    for (int half = sets / 2; half >= 1; half /= 2) {
      for (int set = 0; set < half; ++set) {
        for (int k = 0; k < rows * per_row; ++k) {
          const Xmm dst = set_acc(set, rows, per_row, k);
          vaddps(dst, dst, set_acc(set + half, rows, per_row, k));
        }
      }
    }
  }

  // Interleave table for vpermi2w: words (a[i], b[i]) for i in [first, first + 16).
  Address pair_table(int first) {
    std::array<uint32_t, 16> t{};
    for (uint32_t k = 0; k < 16; ++k)
      t[k] = (uint32_t(first) + k) | (uint32_t(32 + first) + k) << 16;
    return cst_table(t);
  }
  // vpermw table for a zmm holding row a in words 0..15 and row b in words 16..31.
  Address pair_table16() {
    std::array<uint32_t, 16> t{};
    for (uint32_t k = 0; k < 16; ++k) t[k] = k | (16 + k) << 16;
    return cst_table(t);
  }

  // Interleaves the bf16 rows at `a_addr` and `b_addr` (b_zero: a zero row instead) into
  // `count` (1 or 2) zmm of 16 (a, b) pairs each: dst[0] pairs 0..15, dst[1] pairs 16..31.
  void interleave(const Zmm* dst, int count, const Address& a_addr, const Address* b_addr) {
    if (fp8_kv()) {
      interleave_fp8(dst, count, a_addr, b_addr, /*masked=*/false);
      return;
    }
    const Zmm a = zwork(0);
    if (count == 2) {
      vmovdqu16(a, a_addr);
      for (int h = 0; h < 2; ++h) {
        vmovdqa32(dst[h], h == 0 ? zwork(5) : zwork(6));  // the index tables
        if (b_addr != nullptr) {
          vpermi2w(dst[h], a, *b_addr);
        } else {
          vpxord(zwork(4), zwork(4), zwork(4));
          vpermi2w(dst[h], a, zwork(4));
        }
      }
      return;
    }
    vmovdqu16(Ymm(a.getIdx()), a_addr);  // zeroes words 16..31
    if (b_addr != nullptr) vinserti64x4(a, a, *b_addr, 1);
    vpermw(dst[0], zwork(5), a);
  }
  void load_pair_tables(int count) {
    if (count == 2) {
      vmovdqu32(zwork(5), pair_table(0));
      vmovdqu32(zwork(6), pair_table(16));
    } else {
      vmovdqu32(zwork(5), pair_table16());
    }
  }

  // ---- Q·Kᵀ -------------------------------------------------------------------------------

  // Stores S[r][v] to the logits scratch row r (stride kGroupMax floats), in key order.
  // `split`: the registers hold the keys split by parity (emit_qk_fp32's bf16 words: v = 0
  // the even keys, v = 1 the odd ones), put back in order by two vpermt2ps per row (AVX2:
  // reorder_split_ymm).
  void store_logits(int rows, bool split = false) {
    mov(rsi, ptr[ARG(scratch)]);
    if (split && !avx512()) {
      for (int r = 0; r < rows; ++r) {
        const Xmm even = acc_reg(2 * r), odd = acc_reg(2 * r + 1);
        reorder_split_ymm(even, odd, work(0), /*to_split=*/false);
        vmovups(ptr[rsi + r * kGroupMax * 4], even);
        vmovups(ptr[rsi + (r * kGroupMax + lanes()) * 4], odd);
      }
      return;
    }
    if (split) {
      vmovdqu32(zwork(0), parity_table(/*to_split=*/false, 0));
      vmovdqu32(zwork(1), parity_table(/*to_split=*/false, 1));
      for (int r = 0; r < rows; ++r) {
        const Zmm even = Zmm(acc_reg(2 * r).getIdx()), odd = Zmm(acc_reg(2 * r + 1).getIdx());
        vmovaps(zwork(2), even);
        vpermt2ps(zwork(2), zwork(0), odd);  // keys 0..15
        vpermt2ps(even, zwork(1), odd);      // keys 16..31
        vmovups(ptr[rsi + r * kGroupMax * 4], zwork(2));
        vmovups(ptr[rsi + (r * kGroupMax + 16) * 4], even);
      }
      return;
    }
    for (int r = 0; r < rows; ++r) {
      for (int v = 0; v < nv_; ++v) {
        vmovups(ptr[rsi + (r * kGroupMax + v * lanes()) * 4], acc_reg(r * nv_ + v));
      }
    }
  }

  void emit_qk_dpbf16(int rows) {
    const int64_t d = p_.head_size;
    const int64_t row_bytes = int64_t(p_.block_size) * kv_esize_;  // one dim row of the K slab
    constexpr int kUnroll = 4;  // pairs per loop step; the (D/2) % 4 rest follows the loop
    for (int k = 0; k < rows * nv_; ++k) uni_vpxor(acc_reg(k), acc_reg(k), acc_reg(k));
    load_pair_tables(nv_);
    mov(r13, r8);
    if (spread_prefetch()) {
      hoist_prefetch_bases(r8, offsetof(CpuAttnTileArgs, next_k),
                           offsetof(CpuAttnTileArgs, next2_k));
    }
    mov(r14, ptr[ARG(q)]);
    // Dim pair (2u, 2u + 1) relative to r13 / r14. `odd_last`: the last dim of an odd D,
    // paired with a zero K row and a zero query word (the query's next word belongs to the
    // next row, or lies past the buffer: it is never read).
    const auto pair_step = [&](int u, bool odd_last) {
      const Zmm pairs[2] = {zwork(1), zwork(2)};
      const Address a_addr = ptr[r13 + (2 * u) * row_bytes];
      const Address b_addr = ptr[r13 + (2 * u + 1) * row_bytes];
      interleave(pairs, nv_, a_addr, odd_last ? nullptr : &b_addr);
      for (int r = 0; r < rows; ++r) {
        // One broadcast load per row, shared by its nv products (halves the load-port uops
        // of an embedded broadcast per product).
        const Zmm q_pair = r % 2 == 0 ? zwork(3) : zwork(7);
        if (odd_last) {
          movzx(eax, word[r14 + r * d * 2 + u * 4]);  // (q[D-1], 0)
          vpbroadcastd(q_pair, eax);
        } else if (nv_ == 2) {
          vpbroadcastd(q_pair, ptr[r14 + r * d * 2 + u * 4]);
        }
        for (int v = 0; v < nv_; ++v) {
          if (nv_ == 2 || odd_last) {
            vdpbf16ps(acc_reg(r * nv_ + v), pairs[v], q_pair);
          } else {
            vdpbf16ps(acc_reg(r * nv_ + v), pairs[v], ptr_b[r14 + r * d * 2 + u * 4]);
          }
        }
      }
    };
    const int64_t loops = d / 2 / kUnroll;
    if (loops > 0) {
      mov(r15, loops);
      Label l_loop;
      L(l_loop);
      if (spread_prefetch()) {
        prefetch_next_alongside(r13, 2 * kUnroll, row_bytes, (group_ * 2 + 63) / 64);
      }
      for (int u = 0; u < kUnroll; ++u) pair_step(u, false);
      add(r13, kUnroll * 2 * row_bytes);
      add(r14, kUnroll * 4);
      dec(r15);
      jnz(l_loop, T_NEAR);
    }
    const int rest = int(d / 2 % kUnroll);
    for (int u = 0; u < rest; ++u) pair_step(u, false);
    if (d % 2 != 0) pair_step(rest, true);
    store_logits(rows);
  }

  void emit_qk_fp32(int rows) {
    const int64_t d = p_.head_size;
    const int64_t row_bytes = int64_t(p_.block_size) * kv_esize_;
    constexpr int kUnroll = 4;  // dims per loop step; the D % 4 rest follows the loop
    // bf16 words of a group (32 keys: a bf16 row, or fp8 codes decoded to words; AVX2 16 keys
    // of a bf16 row): one row load per dim, widened by parity (even keys word << 16, odd keys
    // word & 0xFFFF0000: two uops, against two vpmovzxwd and two shifts), so the logits come
    // out split by parity and store_logits puts them in order.
    const bool split = parity_split_keys();
    const int sets = accumulator_sets(rows, nv_);
    for (int k = 0; k < sets * rows * nv_; ++k) uni_vpxor(acc_reg(k), acc_reg(k), acc_reg(k));
    if (split) {
      const uint32_t high_half = 0xFFFF0000;
      const int reg = work(3).getIdx();
      pin_constants({&high_half, 1}, {&reg, 1});
      if (fp8_lookup()) load_fp8_lookup();
    }
    mov(r13, r8);
    if (prefetch_alongside()) {
      hoist_prefetch_bases(r8, offsetof(CpuAttnTileArgs, next_k),
                           offsetof(CpuAttnTileArgs, next2_k));
    }
    mov(r14, ptr[ARG(q)]);
    // Dim u relative to r13 (K row) / r14 (query).
    const auto dim_step = [&](int u) {
      if (split) {
        load_split_words(work(1), ptr[r13 + u * row_bytes], work(0));
        split_bf16_pairs(work(0), work(1), work(1));
      } else {
        for (int v = 0; v < nv_; ++v) {
          load_kv(work(v), r13 + u * row_bytes + v * lanes() * kv_esize_);
        }
      }
      for (int r = 0; r < rows; ++r) {
        const int64_t q_off = ((row0_ + r) * d + u) * 4;
        const bool in_register = !avx512() || nv_ == 2;  // one broadcast load per row
        if (in_register) vbroadcastss(work(2), ptr[r14 + q_off]);
        for (int v = 0; v < nv_; ++v) {
          const Xmm acc = set_acc(u % sets, rows, nv_, r * nv_ + v);
          if (!in_register) {
            vfmadd231ps(acc, work(v), ptr_b[r14 + q_off]);
          } else {
            vfmadd231ps(acc, work(v), work(2));
          }
        }
      }
    };
    if (d / kUnroll > 0) {
      mov(r15, d / kUnroll);
      Label l_loop;
      L(l_loop);
      if (prefetch_alongside()) {
        prefetch_next_alongside(r13, kUnroll, row_bytes, (group_ * kv_esize_ + 63) / 64);
      }
      for (int u = 0; u < kUnroll; ++u) dim_step(u);
      add(r13, kUnroll * row_bytes);
      add(r14, kUnroll * 4);
      dec(r15);
      jnz(l_loop, T_NEAR);
    }
    for (int u = 0; u < int(d % kUnroll); ++u) dim_step(u);
    if (split) unpin_constants();
    sum_accumulator_sets(sets, rows, nv_);
    store_logits(rows, split);
  }

  // The fp32 path widens bf16 words by parity (a dword holds elements 2i and 2i + 1: even =
  // word << 16, odd = word & 0xFFFF0000, two uops per 2·lanes elements against two vpmovzxwd
  // and two shifts): the keys of a group in Q·Kᵀ (emit_qk_fp32), the dims of each whole
  // chunk of two vectors in P·V (emit_pv_fp32). A bf16 cache, or an fp8 one (any query
  // dtype: its codes are decoded to bf16 words first, exactly: load_words at AVX-512,
  // decode_fp8_words_ymm at AVX2). On Zen 3 the split turns the Q·Kᵀ
  // step of 4 rows x 16 keys from 85% to 99% of the FMA rate (an inline-asm loop on L1 data:
  // the two shuffles of vpmovzxwd share pipes with the FMAs, a vpand does not).
  bool parity_split() const {
    return !amx_ && !dpbf16_ && (p_.dtype == DType::kBF16 || p_.kv != ir::KvCacheDtype::kAuto);
  }
  // Elements per parity-split chunk: two vectors.
  int split_chunk() const { return 2 * lanes(); }
  // One split chunk of cache words at `addr` into `words` (load_words; AVX2: a bf16 row).
  // AVX2 fp8: the 16 codes widened to words in `codes_scratch` (clobbered, with ymm13..15).
  void load_split_words(const Xmm& words, const Address& addr, const Xmm& codes_scratch) {
    if (avx512()) {
      load_words(Zmm(words.getIdx()), addr);
    } else if (p_.kv == ir::KvCacheDtype::kAuto) {
      vmovdqu(Ymm(words.getIdx()), addr);
    } else {
      vpmovzxbw(Ymm(codes_scratch.getIdx()), addr);
      decode_fp8_words_ymm(Ymm(words.getIdx()), Ymm(codes_scratch.getIdx()));
    }
  }

  // decode_fp8_words at AVX2, for the 16 codes in the words of `codes` (clobbered): the same
  // words, with vpshufb for the subnormal table (a word's index bytes (m, m + 8) pick its low
  // and high byte from one 16-byte table) and vpblendvb for the masked moves. 17 uops per 16
  // codes with the widening, against 26 for two vectors of fp8_decode. Uses ymm13..15.
  void decode_fp8_words_ymm(const Ymm& out, const Ymm& codes) {
    const bool e4m3 = p_.kv == ir::KvCacheDtype::kFp8E4m3;
    const Ymm mag(13), t(14), table(15);
    vpand(mag, codes, cst_bits(0x007F007F));
    vpsllw(out, mag, e4m3 ? 4 : 5);
    vpaddw(out, out, cst_bits(e4m3 ? 0x3C003C00 : 0x38003800));
    // Exponent 0: the subnormal table's word at index m.
    vpsllw(t, mag, 8);
    vpor(t, t, mag);
    vpaddw(t, t, cst_bits(0x08000800));
    vmovdqu(table, subnormal_bytes(e4m3));
    vpshufb(table, table, t);
    vpand(t, mag, cst_bits(e4m3 ? 0x00780078 : 0x007C007C));
    vpcmpeqw(t, t, cst_bits(0));
    vpblendvb(out, out, table, t);
    if (e4m3) {
      vpcmpeqw(t, mag, cst_bits(0x007F007F));
      vpblendvb(out, out, cst_bits(0x7FC07FC0), t);
    } else {
      vpcmpgtw(t, mag, cst_bits(0x007B007B));  // |c| >= 0x7C: inf
      vpblendvb(out, out, cst_bits(0x7F807F80), t);
      vpcmpgtw(t, mag, cst_bits(0x007C007C));  // above: NaN
      vpblendvb(out, out, cst_bits(0x7FC07FC0), t);
    }
    vpsllw(codes, codes, 8);
    vpand(codes, codes, cst_bits(0x80008000));
    vpor(out, out, codes);
  }

  // subnormal_table's words as vpshufb bytes, in both 128-bit halves: bytes 0..7 the low
  // bytes of the words of magnitudes 0..7, bytes 8..15 their high bytes.
  Address subnormal_bytes(bool e4m3) {
    const std::array<uint16_t, 8> words = subnormal_words(e4m3);
    std::array<uint32_t, 16> table{};
    for (size_t half = 0; half < 2; ++half) {
      for (size_t i = 0; i < 8; ++i) {
        const uint32_t low = words[i] & 0xFF, high = words[i] >> 8;
        table[4 * half + i / 4] |= low << (8 * (i % 4));
        table[4 * half + 2 + i / 4] |= high << (8 * (i % 4));
      }
    }
    return cst_table(table);
  }
  // In place: a split chunk (even elements in `even`, odd ones in `odd`) into natural order
  // (`even` = elements 0 .. lanes-1, `odd` = the rest), or back (to_split). AVX2 only (the
  // AVX-512 path permutes with parity_table): per 128-bit lane unpcklps / unpckhps interleave
  // even and odd into elements 0-3 | 8-11 and 4-7 | 12-15, vperm2f128 joins the halves; the
  // way back, vshufps picks the even / odd elements of both as 0 2 8 10 | 4 6 12 14 and
  // vpermpd puts the quarters in order. `t` is scratch.
  void reorder_split_ymm(const Xmm& even, const Xmm& odd, const Xmm& t, bool to_split) {
    const Ymm e(even.getIdx()), o(odd.getIdx()), w(t.getIdx());
    if (to_split) {
      vshufps(w, e, o, 0x88);  // elements 0 2 8 10 | 4 6 12 14
      vshufps(o, e, o, 0xDD);  // 1 3 9 11 | 5 7 13 15
      vpermpd(e, w, 0xD8);     // quarters 0 2 1 3
      vpermpd(o, o, 0xD8);
      return;
    }
    vunpcklps(w, e, o);         // 0 1 2 3 | 8 9 10 11
    vunpckhps(o, e, o);         // 4 5 6 7 | 12 13 14 15
    vperm2f128(e, w, o, 0x20);  // 0 .. 7
    vperm2f128(o, w, o, 0x31);  // 8 .. 15
  }
  bool parity_split_keys() const { return parity_split() && nv_ == 2; }

  // 32 cache elements at `addr` as bf16 words in `words` (for split_bf16_pairs): a bf16 row as
  // it is, fp8 codes decoded to words (every e4m3 / e5m2 value is a bf16 value, subnormals,
  // infinities and NaN included): by table where the ISA has AVX512_VBMI (fp8_lookup), else
  // widened and decoded by decode_fp8_words (~12 uops per 32 codes against ~26 for two vectors
  // of fp8_decode). zwork(6), zwork(7) are scratch, and k1, k2 without the tables.
  void load_words(const Zmm& words, const Address& addr) {
    if (p_.kv == ir::KvCacheDtype::kAuto) {
      vmovdqu16(words, addr);
      return;
    }
    if (fp8_lookup()) {
      decode_fp8_lookup(words, addr, zwork(6), zwork(7));
      return;
    }
    vpmovzxbw(zwork(6), addr);
    decode_fp8_words(words, zwork(6), zwork(7));
  }

  // fp8 codes to bf16 words by table (AVX512_VBMI, the fp32 path's parity split): a code's
  // word is exact (see decode_fp8_words) and depends on its magnitude c & 0x7F, one of 128,
  // plus its sign in bit 15. Per 32 codes: vpermb copies code j into both bytes of word j, one
  // vpermi2b looks the low bytes up in the 128-byte table of low bytes (even bytes, k1), one
  // the high bytes (odd bytes, k2; the table's sign bits clear), and vpternlogd ors the code's
  // bit 7 into bit 15. On this Emerald Rapids core vpermi2b holds port 5 two cycles, vpermb
  // one (measured): ~6 port-cycles per 32 codes against ~10 for vpmovzxbw + decode_fp8_words.
  // The first half of each table and the vpermb index live in zmm27..29 and the byte masks in
  // k1 / k2 (load_fp8_lookup, at the start of each Q·Kᵀ and P·V); the second halves are
  // 64-byte memory operands. bench_attention decode/kiln_vec_fp8_e4m3 (A/B, two runs, every
  // shape): 4.6-5.0 -> 4.9-5.4 GB/s of fp8 bytes on 1 thread, 8.4-9.5 -> 8.7-10.3 on 2.
  bool fp8_lookup() const {
    return has_vbmi() && parity_split() && p_.kv != ir::KvCacheDtype::kAuto;
  }
  static constexpr int kLookupIndex = 27, kLookupLow = 28, kLookupHigh = 29;

  // Bytes 64·half .. 64·half + 63 of the 128-entry table of the low (high = false) or high
  // bytes (sign cleared) of the bf16 words of the fp8 magnitudes.
  Address fp8_byte_table(bool high, int half) {
    const bool e4m3 = p_.kv == ir::KvCacheDtype::kFp8E4m3;
    std::array<uint32_t, 16> t{};
    for (int i = 0; i < 64; ++i) {
      const auto code = uint8_t(64 * half + i);
      const float value = e4m3 ? numeric::fp8_e4m3_to_f32(code) : numeric::fp8_e5m2_to_f32(code);
      const uint16_t word = numeric::f32_to_bf16(value);
      const uint32_t byte = high ? (word >> 8) & 0x7F : word & 0xFF;
      t[size_t(i / 4)] |= byte << (8 * (i % 4));
    }
    return cst_table(t);
  }

  void load_fp8_lookup() {
    std::array<uint32_t, 16> both_bytes{};  // byte 2j and 2j + 1 <- code j
    for (uint32_t j = 0; j < 32; ++j) both_bytes[j / 2] |= (j | j << 8) << (16 * (j % 2));
    vmovdqu32(Zmm(kLookupIndex), cst_table(both_bytes));
    vmovdqu32(Zmm(kLookupLow), fp8_byte_table(/*high=*/false, 0));
    vmovdqu32(Zmm(kLookupHigh), fp8_byte_table(/*high=*/true, 0));
    mov(rdx, 0x5555555555555555ull);
    kmovq(k1, rdx);
    knotq(k2, k1);
  }

  void decode_fp8_lookup(const Zmm& words, const Address& addr, const Zmm& codes,
                         const Zmm& copies) {
    constexpr uint8_t kOrAnd = 0xF8;  // a | (b & c)
    vmovdqu8(Ymm(codes.getIdx()), addr);
    vpermb(copies, Zmm(kLookupIndex), codes);
    vmovdqa64(words, copies);
    vpermi2b(words | k1, Zmm(kLookupLow), fp8_byte_table(/*high=*/false, 1));
    vpermi2b(words | k2, Zmm(kLookupHigh), fp8_byte_table(/*high=*/true, 1));
    vpternlogd(words, copies, cst_bits(0x80008000), kOrAnd);
  }

  // The softmax with the rows as lanes (emit_softmax_batched) serves 32-key groups at AVX-512
  // (the AMX path and the vec paths', fp32 or bf16 probabilities) of at least
  // kBatchedSoftmaxMinRows rows; 16-key groups at AVX-512 and calls of fewer rows take the
  // row loop (emit_softmax). AVX2 batches calls of 2-4 rows its own way
  // (emit_softmax_rows_ymm).
  bool batched_softmax() const { return avx512() && group_ == 32; }
  // The softmax of a group for `rows` rows: at AVX2 emit_softmax_rows_ymm for 2-4 rows; else
  // the batched routine (emit_softmax_batched, shared by the row-count variants) for
  // kBatchedSoftmaxMinRows rows or more, the row loop for fewer; rows = 0 (the AMX
  // emulation's one variant for every count) branches on the call's count.
  void emit_group_softmax(int rows) {
    if (!avx512() && rows >= 2) {
      emit_softmax_rows_ymm(rows);
    } else if (!batched_softmax()) {
      emit_softmax(rows);
    } else if (rows >= kBatchedSoftmaxMinRows) {
      call(l_softmax_);
    } else if (rows > 0) {
      emit_softmax(rows);
    } else {
      Label l_rows, l_done;
      cmp(qword[ARG(rows)], kBatchedSoftmaxMinRows);
      jl(l_rows, T_NEAR);
      call(l_softmax_);
      jmp(l_done, T_NEAR);
      L(l_rows);
      emit_softmax(0);
      L(l_done);
    }
  }
  // The batched softmax computes 8 rows' exponentials whatever the call's row count (rows are
  // its lanes), so a variant for 1 row (MHA, GQA 1) spent most of a group there. The row loop
  // costs per row: bench_attention decode/kiln_vec (1 thread, A/B) GQA 1 9.0-9.1 -> 22.4-22.8
  // GB/s, GQA 2 9.6 -> 20.6-20.9, GQA 4 10.8-11.1 -> 17.7-17.8; at 8 rows the batched one is
  // ~7% faster (13.4 against 12.5), so it keeps the 8-row variant.
  static constexpr int kBatchedSoftmaxMinRows = 8;

  // vpermt2ps tables between 32 elements in order (two vectors) and split by parity (even
  // elements, then odd). to_split: half h (0 even, 1 odd) lane i is element 2i + h, table
  // index 2i + h of the ordered pair. Else: half h lane i is element k = 16h + i, index k/2
  // of the even vector or 16 + k/2 of the odd one.
  Address parity_table(bool to_split, int half) {
    std::array<uint32_t, 16> t{};
    for (uint32_t i = 0; i < 16; ++i) {
      const uint32_t k = 16 * uint32_t(half) + i;
      t[i] = to_split ? 2 * i + uint32_t(half) : (k % 2 == 0 ? 0 : 16) + k / 2;
    }
    return cst_table(t);
  }

  // The call's accumulator rows, whole chunks of two vectors (32 dims, AVX2 16) in place
  // between their natural order and the split order P·V accumulates in (parity_split): once
  // per call each way, so the state between calls (the runner's merges and output) keeps the
  // natural order. A dims tail stays in order. rsi, rax, rcx and zwork(0..4) (AVX2:
  // work(0..2)) are scratch.
  void emit_reorder_acc(bool to_split) {
    const int64_t chunks = p_.head_size / split_chunk();
    if (chunks == 0) return;
    if (avx512()) {
      vmovdqu32(zwork(0), parity_table(to_split, 0));
      vmovdqu32(zwork(1), parity_table(to_split, 1));
    }
    mov(rsi, ptr[ARG(acc)]);
    mov(rax, ptr[ARG(rows)]);
    Label l_row, l_chunk;
    L(l_row);
    mov(rcx, chunks);
    L(l_chunk);
    if (avx512()) {
      vmovups(zwork(2), ptr[rsi]);
      vmovups(zwork(3), ptr[rsi + 64]);
      vmovaps(zwork(4), zwork(2));
      vpermt2ps(zwork(4), zwork(0), zwork(3));
      vpermt2ps(zwork(2), zwork(1), zwork(3));
      vmovups(ptr[rsi], zwork(4));
      vmovups(ptr[rsi + 64], zwork(2));
    } else {
      vmovups(work(0), ptr[rsi]);
      vmovups(work(1), ptr[rsi + 32]);
      reorder_split_ymm(work(0), work(1), work(2), to_split);
      vmovups(ptr[rsi], work(0));
      vmovups(ptr[rsi + 32], work(1));
    }
    add(rsi, split_chunk() * 4);
    dec(rcx);
    jnz(l_chunk);
    add(rsi, (p_.head_size % split_chunk()) * 4);
    dec(rax);
    jnz(l_row);
  }

  // ---- online softmax ------------------------------------------------------------------------

  // ALiBi (s += slope·(j − pos)) and the mask (s = −inf outside lo <= j <= hi) of one row's
  // logits x[0..nv_), key indices in jv; `row_field(offset)` addresses the row's entry of the
  // per-row array at `offset` in CpuAttnTileArgs. AVX-512: keep[v] = the allowed lanes; AVX2:
  // invalid[v] all ones where masked. Clobbers t[0], t[2], `bound` and `slope`.
  template <class RowField>
  void alibi_and_mask(const Xmm* x, const Xmm* t, const Xmm* jv, const Xmm* invalid,
                      const Opmask* keep, const Xmm& bound, const Xmm& slope, RowField row_field) {
    if (p_.alibi) {
      vpbroadcastd(bound, row_field(offsetof(CpuAttnTileArgs, pos)));
      vbroadcastss(slope, row_field(offsetof(CpuAttnTileArgs, slope)));
      for (int v = 0; v < nv_; ++v) add_alibi(x[v], jv[v], bound, slope, t[0]);
    }
    vmovups(t[2], cst(-std::numeric_limits<float>::infinity()));
    if (avx512()) {
      vpbroadcastd(bound, row_field(offsetof(CpuAttnTileArgs, lo)));
      for (int v = 0; v < nv_; ++v) vpcmpd(keep[v], jv[v], bound, 5);  // j >= lo
      vpbroadcastd(bound, row_field(offsetof(CpuAttnTileArgs, hi)));
      for (int v = 0; v < nv_; ++v) {
        vpcmpd(k5, jv[v], bound, 2);  // j <= hi
        kandw(keep[v], keep[v], k5);
      }
      for (int v = 0; v < nv_; ++v) vblendmps(x[v] | keep[v], t[2], x[v]);
      return;
    }
    vpbroadcastd(bound, row_field(offsetof(CpuAttnTileArgs, lo)));
    for (int v = 0; v < nv_; ++v) vpcmpgtd(invalid[v], bound, jv[v]);  // lo > j
    vpbroadcastd(bound, row_field(offsetof(CpuAttnTileArgs, hi)));
    for (int v = 0; v < nv_; ++v) {
      vpcmpgtd(t[0], jv[v], bound);  // j > hi
      vpor(invalid[v], invalid[v], t[0]);
      vblendvps(x[v], x[v], t[2], invalid[v]);
    }
  }

  // Row loop (rbp = r) over the logits in scratch: writes the probabilities (bf16 or fp32) to
  // the probability scratch, α[r], and updates m[r], l[r].
  void emit_softmax(int rows) {
    // Registers: x0,x1 logits; t0..t3 temporaries; j0,j1 key indices; the rest below.
    const Xmm x[2] = {vmm(0), vmm(1)};
    const Xmm t[4] = {vmm(2), vmm(3), vmm(4), vmm(5)};
    const Xmm jv[2] = {vmm(6), vmm(7)};
    const Xmm invalid[2] = {vmm(8), vmm(9)};  // AVX2 masks (all ones = masked)
    const Xmm bound = vmm(10);
    const Xmm m_old = vmm(11);
    const Xmm m_new = vmm(12);
    const Opmask keep[2] = {k3, k4};
    xor_(rbp, rbp);
    mov(r14, ptr[ARG(scratch)]);
    Label l_row;
    L(l_row);
    for (int v = 0; v < nv_; ++v) vmovups(x[v], ptr[r14 + v * lanes() * 4]);
    vbroadcastss(t[0], ptr[ARG(scale)]);
    for (int v = 0; v < nv_; ++v) vmulps(x[v], x[v], t[0]);
    if (p_.softcap) {
      for (int v = 0; v < nv_; ++v) soft_cap(x[v], t[0], t[1], t[2], t[3]);
    }
    // Key indices j = j0 + lane.
    vmovq(Xmm(jv[0].getIdx()), r10);
    vpbroadcastd(jv[0], Xmm(jv[0].getIdx()));
    if (nv_ == 2) vpaddd(jv[1], jv[0], iota(lanes()));
    vpaddd(jv[0], jv[0], iota(0));
    alibi_and_mask(x, t, jv, invalid, keep, bound, t[1],
                   [&](size_t field) { return ptr[rdi + int(field) + rbp * 4]; });
    // m' = max(m, max_t s); α = e^(m − m').
    vmovaps(m_new, x[0]);
    if (nv_ == 2) vmaxps(m_new, m_new, x[1]);
    broadcast_max(m_new);
    vbroadcastss(m_old, ptr[ARG(m) + rbp * 4]);
    vmaxps(m_new, m_new, m_old);
    vmovss(ptr[ARG(m) + rbp * 4], Xmm(m_new.getIdx()));
    vsubps(m_old, m_old, m_new);
    exp_ps({m_old}, {t[0]}, {t[1]}, /*bounded=*/true);
    vmovss(ptr[ARG(alpha) + rbp * 4], Xmm(m_old.getIdx()));
    // p = e^(s − m'), zero where masked.
    for (int v = 0; v < nv_; ++v) vsubps(x[v], x[v], m_new);
    if (nv_ == 2) {
      exp_ps({x[0], x[1]}, {t[0], t[1]}, {t[2], t[3]}, true);
    } else {
      exp_ps({x[0]}, {t[0]}, {t[1]}, true);
    }
    for (int v = 0; v < nv_; ++v) {
      if (avx512()) {
        vmovaps(x[v] | keep[v] | T_z, x[v]);
      } else {
        vandnps(x[v], invalid[v], x[v]);
      }
    }
    // l = α·l + Σ p (fp32 probabilities).
    vmovaps(t[0], x[0]);
    if (nv_ == 2) vaddps(t[0], t[0], x[1]);
    reduce_sum(t[0]);
    vmovss(Xmm(t[1].getIdx()), ptr[ARG(l) + rbp * 4]);
    vfmadd231ss(Xmm(t[0].getIdx()), Xmm(t[1].getIdx()), Xmm(m_old.getIdx()));
    vmovss(ptr[ARG(l) + rbp * 4], Xmm(t[0].getIdx()));
    // Probabilities row: after the logits in scratch.
    const int prob_offset = max_rows_ * kGroupMax * 4;
    for (int v = 0; v < nv_; ++v) {
      if (dpbf16_) {
        vcvtneps2bf16(Ymm(t[0].getIdx()), Zmm(x[v].getIdx()));
        // bf16 row r at prob + r·G·2, written at the logits row's byte offset / 2.
        mov(rax, rbp);
        imul(rax, rax, kGroupMax * 2);
        add(rax, ptr[ARG(scratch)]);
        vmovdqu(ptr[rax + prob_offset + v * 32], Ymm(t[0].getIdx()));
      } else {
        vmovups(ptr[r14 + prob_offset + v * lanes() * 4], x[v]);
      }
    }
    add(r14, kGroupMax * 4);
    inc(rbp);
    cmp_rows(rbp, rows);
    jl(l_row, T_NEAR);
  }

  // ---- online softmax, AVX2: the call's rows batched ------------------------------------------
  // emit_softmax's steps for 2..4 rows of a 16-key group, with the rows as lanes of the
  // reductions. Pass 1 transforms and masks each row's logits in place (masked keys −inf);
  // then one transpose tree (reduce_rows) gives every row's max, so m' = max(m, max_t s) and
  // α = e^(m − m') are one vector for all rows; pass 2 writes each row's p = e^(s − m'_r)
  // (0 where s = −inf, as e^(−inf) is in the reference) and its two-vector sum, and a second
  // tree gives the row sums for l = α·l + Σp. The row loop ran a horizontal max, an α
  // exponential and a horizontal sum per row, chains of 15-50 cycles each that the reorder
  // window overlapped for about two rows at a time. Only the summation order of l changes.
  void emit_softmax_rows_ymm(int rows) {
    const Xmm x[2] = {vmm(0), vmm(1)};
    const Xmm t[4] = {vmm(2), vmm(3), vmm(4), vmm(5)};
    const Xmm jv[2] = {vmm(6), vmm(7)};
    const Xmm invalid[2] = {vmm(8), vmm(9)};
    const Xmm bound = vmm(10), scale = vmm(11), slope = vmm(12);
    const int prob_offset = max_rows_ * kGroupMax * 4;
    const auto logits = [&](int r, int v) { return ptr[r14 + (r * kGroupMax + v * lanes()) * 4]; };
    mov(r14, ptr[ARG(scratch)]);
    vmovq(Xmm(jv[0].getIdx()), r10);  // key indices j = j0 + lane
    vpbroadcastd(jv[0], Xmm(jv[0].getIdx()));
    vpaddd(jv[1], jv[0], iota(lanes()));
    vpaddd(jv[0], jv[0], iota(0));
    vbroadcastss(scale, ptr[ARG(scale)]);
    for (int r = 0; r < rows; ++r) {
      for (int v = 0; v < 2; ++v) vmulps(x[v], scale, logits(r, v));
      if (p_.softcap) {
        for (int v = 0; v < 2; ++v) soft_cap(x[v], t[0], t[1], t[2], t[3]);
      }
      alibi_and_mask(x, t, jv, invalid, nullptr, bound, slope,
                     [&](size_t field) { return row_arg(field, r); });
      for (int v = 0; v < 2; ++v) vmovups(logits(r, v), x[v]);
    }
    // m' = max(m, max_t s) and α = e^(m − m'), lane r for row r.
    const Xmm row_max[4] = {vmm(0), vmm(1), vmm(2), vmm(3)};
    for (int r = 0; r < rows; ++r) {
      vmovups(row_max[r], logits(r, 0));
      vmaxps(row_max[r], row_max[r], logits(r, 1));
    }
    reduce_rows(row_max, rows, /*max=*/true, vmm(4));
    // m' and α in the registers of slope and scale (done with), the old m in t[2]'s.
    const Xbyak::Xmm m_new(slope.getIdx()), alpha(scale.getIdx()), m_old(t[2].getIdx());
    // The half's 4 rows (m has kMaxAttnRows entries): lanes past `rows` unused.
    vmovups(m_old, row_arg(offsetof(CpuAttnTileArgs, m), 0));
    vmaxps(m_new, Xbyak::Xmm(row_max[0].getIdx()), m_old);
    store_rows(row_arg(offsetof(CpuAttnTileArgs, m), 0), m_new, rows);
    vsubps(alpha, m_old, m_new);
    exp_ps({Ymm(alpha.getIdx())}, {t[0]}, {t[1]}, /*bounded=*/true);
    store_rows(row_arg(offsetof(CpuAttnTileArgs, alpha), 0), alpha, rows);
    // p = e^(s − m'_r), 0 where s = −inf; row sums.
    const Xmm m_row = vmm(10);
    const Xmm sums[4] = {vmm(6), vmm(7), vmm(8), vmm(9)};
    for (int r = 0; r < rows; ++r) {
      vpermilps(Xbyak::Xmm(m_row.getIdx()), m_new, 0x55 * r);  // lane r in all four
      vinsertf128(Ymm(m_row.getIdx()), Ymm(m_row.getIdx()), Xbyak::Xmm(m_row.getIdx()), 1);
      for (int v = 0; v < 2; ++v) {
        vmovups(x[v], logits(r, v));
        vsubps(x[v], x[v], m_row);
      }
      exp_ps({x[0], x[1]}, {t[0], t[1]}, {t[2], t[3]}, /*bounded=*/true);
      vmovups(t[2], cst(-std::numeric_limits<float>::infinity()));
      for (int v = 0; v < 2; ++v) {
        vcmpps(t[0], t[2], logits(r, v), 0 /* equal */);
        vandnps(x[v], t[0], x[v]);
        vmovups(ptr[r14 + prob_offset + (r * kGroupMax + v * lanes()) * 4], x[v]);
      }
      vaddps(sums[r], x[0], x[1]);
    }
    reduce_rows(sums, rows, /*max=*/false, vmm(0));
    const Xbyak::Xmm l(x[1].getIdx()), sum(sums[0].getIdx());
    vmovups(l, row_arg(offsetof(CpuAttnTileArgs, l), 0));
    vfmadd231ps(sum, l, alpha);
    store_rows(row_arg(offsetof(CpuAttnTileArgs, l), 0), sum, rows);
  }

  // In place: lane r of v[0] (as an xmm) = the max (or the sum) of the lanes of v[r], for
  // r < rows (2..4; the other lanes are not specified). Per 128-bit half, unpcklps / unpckhps
  // of two rows and one op leave pairs of partial results, unpcklpd / unpckhpd of the two
  // pairs and one op a partial result per row; the halves are combined last. Clobbers v[2]
  // and t.
  void reduce_rows(const Xmm* v, int rows, bool max, const Xmm& t) {
    const auto op = [&](const Xmm& dst, const Xmm& a, const Xmm& b) {
      if (max) {
        vmaxps(dst, a, b);
      } else {
        vaddps(dst, a, b);
      }
    };
    vunpcklps(t, v[0], v[1]);
    vunpckhps(v[0], v[0], v[1]);
    op(v[0], v[0], t);  // rows 0, 1
    if (rows > 2) {
      const Xmm& v3 = rows > 3 ? v[3] : v[2];  // three rows: the third twice
      vunpcklps(t, v[2], v3);
      vunpckhps(v[2], v[2], v3);
      op(v[2], v[2], t);  // rows 2, 3
    }
    const Xmm& high = rows > 2 ? v[2] : v[0];  // two rows: rows 0, 1 again in lanes 2, 3
    vunpcklpd(t, v[0], high);
    vunpckhpd(v[0], v[0], high);
    op(v[0], v[0], t);  // rows 0..3, per half
    const Xbyak::Xmm low(v[0].getIdx()), upper(t.getIdx());
    vextractf128(upper, Ymm(v[0].getIdx()), 1);
    op(low, low, upper);
  }

  // The first `rows` (1..4) lanes of x to the floats at `addr`.
  void store_rows(const Address& addr, const Xbyak::Xmm& x, int rows) {
    if (rows == 4) {
      vmovups(addr, x);
      return;
    }
    if (rows == 1) {
      vmovss(addr, x);
      return;
    }
    vmovlps(addr, x);
    if (rows == 3) vextractps(ptr[addr.getRegExp() + 8], x, 2);
  }

  // ---- score transforms shared by the row softmax and the AMX one -----------------------
  // x = c·tanh(x / c), c = ARG(softcap); one vector at a time (AVX2 has registers for one).
  // t0..t3: temporaries (the tanh's).
  void soft_cap(const Xmm& x, const Xmm& t0, const Xmm& t1, const Xmm& t2, const Xmm& t3) {
    vbroadcastss(t0, ptr[ARG(softcap)]);
    vdivps(x, x, t0);
    tanh_ps({x}, {t0}, {t1}, {t2}, {t3});
    vbroadcastss(t0, ptr[ARG(softcap)]);
    vmulps(x, x, t0);
  }

  // x += slope · (j − pos) (ALiBi): the distance exact in int32, then converted. j: the key
  // indices, pos / slope: the row's, broadcast; tmp is clobbered.
  void add_alibi(const Xmm& x, const Xmm& j, const Xmm& pos, const Xmm& slope, const Xmm& tmp) {
    vpsubd(tmp, j, pos);
    vcvtdq2ps(tmp, tmp);
    vfmadd231ps(x, tmp, slope);
  }

  // ---- online softmax, AMX path: the rows of a group batched ------------------------------
  // The row loop above spends most of its time on two horizontal reductions per row (max and
  // sum: extract/shuffle chains of ~6 dependent ops each) and on e^(m − m') evaluated on a
  // whole vector for one lane. Here the rows go in chunks of up to 8, and the per-row scalars
  // become lanes: lane i of one zmm is row r0 + i of the chunk.
  //   pass 1 (per row): s = mask(softcap(scale·S) + ALiBi), written back over the logits;
  //                     y_i = max(s[0:16], s[16:32]) (16 partial maxima)
  //   tree:             M[i] = max over the 16 lanes of y_i, all rows at once (transpose_reduce)
  //   vector:           m' = max(m, M); α = e^(m − m'); stored for the chunk's rows
  //   pass 2 (per row): p = e^(s − m'_i) (0 where masked), bf16 P row (one vcvtne2ps2bf16),
  //                     z_i = p[0:16] + p[16:32]
  //   tree, vector:     l = α·l + Σ z_i lanes
  // The chunk's rows past the call's rows (runtime count of the emulation, or a short last
  // chunk) compute on in-bounds scratch / argument slots and are never stored to m, l, α.
  // One routine for every row count (called; 16 unrolled copies would overflow the code
  // buffer): the row count is read from the call, and a second chunk runs when rows > 8.
  // Uses rax, rcx, rdx, rsi, zmm0..12, zmm16..31, k3, k4, k6.
  void emit_softmax_batched() {
    const int prob_offset = max_rows_ * kGroupMax * 4;
    // Past the probabilities: bf16 rows of up to 16 (AMX) or fp32 rows of up to 8 (vec).
    static_assert(kMaxAttnRowsVec * kGroupMax * 4 <= kMaxAttnRows * kGroupMax * 2);
    const int m_tmp = prob_offset + kMaxAttnRows * kGroupMax * 2;
    const Zmm jv[2] = {zmm6, zmm7};
    const Zmm ninf = zmm12;
    mov(rsi, ptr[ARG(scratch)]);
    vmovq(Xmm(jv[0].getIdx()), r10);
    vpbroadcastd(jv[0], Xmm(jv[0].getIdx()));
    vpaddd(jv[1], jv[0], iota(16));
    vpaddd(jv[0], jv[0], iota(0));
    vmovups(ninf, cst(-std::numeric_limits<float>::infinity()));
    Label l_done;
    softmax_chunk(0, m_tmp);
    cmp(qword[ARG(rows)], 8);
    jle(l_done, T_NEAR);
    softmax_chunk(8, m_tmp);
    L(l_done);
  }

  // Rows r0 .. r0 + 7 (see emit_softmax_batched), of which min(8, rows − r0) exist (rows read
  // from the call). rsi = scratch, jv / ninf set.
  void softmax_chunk(int r0, int m_tmp) {
    constexpr int n = 8;
    const int prob_offset = max_rows_ * kGroupMax * 4;
    const Zmm x[2] = {zmm0, zmm1};
    const Zmm t[4] = {zmm2, zmm3, zmm4, zmm5};
    const Zmm jv[2] = {zmm6, zmm7};
    const Zmm ninf = zmm12;
    const Opmask keep[2] = {k3, k4};
    const Opmask valid = k6;  // lanes of the chunk's existing rows
    const Zmm y[8] = {zmm16, zmm17, zmm18, zmm19, zmm20, zmm21, zmm22, zmm23};
    mov(rcx, ptr[ARG(rows)]);
    sub(rcx, r0);
    mov(edx, n);
    cmp(rcx, rdx);
    cmovg(rcx, rdx);  // min(8, rows − r0): lanes 8.. must not be stored
    mov(eax, 1);
    shl(eax, cl);
    dec(eax);
    kmovw(valid, eax);
    const auto row_at = [&](int i) { return r0 + i; };
    // Pass 1.
    const Zmm scale = zmm8;
    vbroadcastss(scale, ptr[ARG(scale)]);
    for (int i = 0; i < n; ++i) {
      const int r = row_at(i);
      const int off = r * kGroupMax * 4;
      for (int v = 0; v < 2; ++v) vmulps(x[v], scale, ptr[rsi + off + v * 64]);
      if (p_.softcap) {
        for (int v = 0; v < 2; ++v) soft_cap(x[v], t[0], t[1], t[2], t[3]);
      }
      if (p_.alibi) {
        vpbroadcastd(zmm10, ptr[ARG(pos) + r * 4]);
        vbroadcastss(t[1], ptr[ARG(slope) + r * 4]);
        for (int v = 0; v < 2; ++v) add_alibi(x[v], jv[v], zmm10, t[1], t[0]);
      }
      // Allowed iff lo <= j <= hi (the second compare ANDs under the first's mask).
      for (int v = 0; v < 2; ++v) {
        vpcmpd(keep[v], jv[v], ptr_b[ARG(lo) + r * 4], 5);            // j >= lo
        vpcmpd(keep[v] | keep[v], jv[v], ptr_b[ARG(hi) + r * 4], 2);  // j <= hi
        vblendmps(x[v] | keep[v], ninf, x[v]);
        vmovups(ptr[rsi + off + v * 64], x[v]);
      }
      vmaxps(y[i], x[0], x[1]);
    }
    // m' = max(m, M); α = e^(m − m').
    const Zmm m_old = zmm8, m_new = zmm9;
    transpose_reduce(true, y, n, m_new);
    vmovups(m_old | valid | T_z, ptr[ARG(m) + r0 * 4]);
    vmaxps(m_new, m_new, m_old);
    vmovups(ptr[ARG(m) + r0 * 4] | valid, m_new);
    vmovups(ptr[rsi + m_tmp], m_new);  // read back per row as a broadcast
    vsubps(m_old, m_old, m_new);
    exp_ps({m_old}, {t[0]}, {t[1]}, /*bounded=*/true);
    vmovups(ptr[ARG(alpha) + r0 * 4] | valid, m_old);
    // Pass 2: p = e^(s − m'), zero where masked (s = −inf there).
    const Zmm z[8] = {zmm24, zmm25, zmm26, zmm27, zmm28, zmm29, zmm30, zmm31};
    for (int i = 0; i < n; ++i) {
      const int r = row_at(i);
      const int off = r * kGroupMax * 4;
      for (int v = 0; v < 2; ++v) {
        vmovups(x[v], ptr[rsi + off + v * 64]);
        vcmpps(keep[v], x[v], ninf, 4);  // != −inf (NaN never gets here: masked to −inf)
        vsubps(x[v], x[v], ptr_b[rsi + m_tmp + i * 4]);
      }
      exp_ps({x[0], x[1]}, {t[0], t[1]}, {t[2], t[3]}, true);
      for (int v = 0; v < 2; ++v) vmovaps(x[v] | keep[v] | T_z, x[v]);
      vaddps(z[i], x[0], x[1]);
      if (dpbf16_) {
        vcvtne2ps2bf16(t[0], x[1], x[0]);  // keys 0-15 in the low half
        vmovups(ptr[rsi + prob_offset + r * kGroupMax * 2], t[0]);
      } else {
        for (int v = 0; v < 2; ++v)
          vmovups(ptr[rsi + prob_offset + r * kGroupMax * 4 + v * 64], x[v]);
      }
    }
    // l = α·l + Σ p.
    transpose_reduce(false, z, n, t[1]);
    vmovups(t[2] | valid | T_z, ptr[ARG(l) + r0 * 4]);
    vfmadd231ps(t[1], t[2], m_old);
    vmovups(ptr[ARG(l) + r0 * 4] | valid, t[1]);
  }

  // dst lane i (i < 8) = max (or sum) over the 16 lanes of y[i]; y[i] for i >= n are not
  // read (y[n − 1] stands in). A transpose tree: 256-bit halves of row pairs, 128-bit
  // quarters of row quads, then pairs and single lanes inside each 128-bit lane; 25 ops for
  // 8 rows instead of 8 dependent extract / shuffle chains. Clobbers y[0..3], zmm10, zmm11.
  void transpose_reduce(bool max, const Zmm* y, int n, const Zmm& dst) {
    const auto op = [&](const Zmm& d, const Zmm& a, const Zmm& b) {
      if (max) {
        vmaxps(d, a, b);
      } else {
        vaddps(d, a, b);
      }
    };
    const auto row = [&](int i) { return y[std::min(i, n - 1)]; };
    const Zmm ta = zmm10, tb = zmm11;
    // z[i] (written over y[i], already consumed): 256-bit half 0 = row 2i's 8 partials,
    // half 1 = row 2i + 1's. With n < 8 the stand-in rows may read overwritten slots: their
    // lanes are garbage, but every op is lane-wise per row, so the existing rows are exact.
    Zmm z[4] = {y[0], y[1], y[2], y[3]};
    Zmm zin[8];
    for (int i = 0; i < 8; ++i) zin[i] = row(i);
    for (int i = 0; i < 4; ++i) {
      vshuff32x4(ta, zin[2 * i], zin[2 * i + 1], 0x44);
      vshuff32x4(tb, zin[2 * i], zin[2 * i + 1], 0xEE);
      op(z[i], ta, tb);
    }
    // w[h]: quarter q = row 4h + q's 4 partials.
    for (int h = 0; h < 2; ++h) {
      vshuff32x4(ta, z[2 * h], z[2 * h + 1], 0x88);
      vshuff32x4(tb, z[2 * h], z[2 * h + 1], 0xDD);
      op(z[h], ta, tb);
    }
    // In each 128-bit lane q: elements 0, 1 = row q's 2 partials, 2, 3 = row q + 4's.
    vshufps(ta, z[0], z[1], 0x44);
    vshufps(tb, z[0], z[1], 0xEE);
    op(z[0], ta, tb);
    vshufps(ta, z[0], z[0], 0xB1);
    op(z[0], z[0], ta);  // element 0: row q, element 2: row q + 4
    std::array<uint32_t, 16> idx{0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0};
    vmovdqu32(ta, cst_table(idx));
    vpermps(dst, ta, z[0]);
  }

  Address iota(int first) {
    std::array<uint32_t, 16> t{};
    for (uint32_t k = 0; k < 16; ++k) t[k] = uint32_t(first) + k;
    return cst_table(t);
  }

  // ---- P·V ---------------------------------------------------------------------------------

  // The dims of a head chunk that do not fill its last vector (D not a multiple of the
  // vector): `tail` (1 .. lanes - 1) fp32 lanes. The accumulator rows and (fp32 path) the V
  // rows are then loaded and stored under this mask, so nothing past a row's D elements is
  // read or written. AVX-512: k6; AVX2: vmm12 (a vmaskmovps mask, free during P·V).
  void set_dim_tail(int tail) {
    if (avx512()) {
      mov(eax, (1u << tail) - 1);
      kmovw(k6, eax);
      return;
    }
    std::array<uint32_t, 16> bits{};
    for (int i = 0; i < tail; ++i) bits[size_t(i)] = 0xFFFFFFFFu;
    vmovups(dim_tail_mask(), cst_table(bits));
  }
  Xmm dim_tail_mask() const { return vmm(12); }

  // Loads row r's accumulators of chunk [c0, c0 + count·lanes) (from rsi, the call's acc
  // or a dims cursor over it: emit_dim_chunks) and scales them by α[r]; the last vector holds
  // `tail` dims (set_dim_tail) when tail < lanes.
  void load_scaled_acc(int rows, int64_t c0, int count, int tail) {
    for (int r = 0; r < rows; ++r) {
      vbroadcastss(work(3), row_arg(offsetof(CpuAttnTileArgs, alpha), r));
      for (int c = 0; c < count; ++c) {
        const Xmm a = acc_reg(r * count + c);
        const Address src = ptr[rsi + ((row0_ + r) * p_.head_size + c0 + c * lanes()) * 4];
        if (c < count - 1 || tail == lanes()) {
          vmulps(a, work(3), src);
        } else if (avx512()) {
          vmulps(a | k6 | T_z, work(3), src);
        } else {
          vmaskmovps(a, dim_tail_mask(), src);
          vmulps(a, a, work(3));
        }
      }
    }
  }
  void store_acc(int rows, int64_t c0, int count, int tail) {
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < count; ++c) {
        const Address dst = ptr[rsi + ((row0_ + r) * p_.head_size + c0 + c * lanes()) * 4];
        if (c < count - 1 || tail == lanes()) {
          vmovups(dst, acc_reg(r * count + c));
        } else if (avx512()) {
          vmovups(dst | k6, acc_reg(r * count + c));
        } else {
          vmaskmovps(dst, dim_tail_mask(), acc_reg(r * count + c));
        }
      }
    }
  }

  // As interleave, for the last chunk of a head whose `words` dims (1 .. 16·count − 1) do not
  // fill its `count` vectors: both rows are read under the word mask k7 (zeros past the D
  // elements of a row, which are never read).
  void interleave_masked(const Zmm* dst, int count, const Address& a_addr, const Address* b_addr) {
    if (fp8_kv()) {
      interleave_fp8(dst, count, a_addr, b_addr, /*masked=*/true);
      return;
    }
    const Zmm a = zwork(0);
    const Zmm b = zwork(4);
    if (count == 2) {
      vmovdqu16(a | k7 | T_z, a_addr);
      if (b_addr != nullptr) {
        vmovdqu16(b | k7 | T_z, *b_addr);
      } else {
        vpxord(b, b, b);
      }
      for (int h = 0; h < 2; ++h) {
        vmovdqa32(dst[h], h == 0 ? zwork(5) : zwork(6));  // the index tables
        vpermi2w(dst[h], a, b);
      }
      return;
    }
    vmovdqu16(Ymm(a.getIdx()) | k7 | T_z, a_addr);  // zeroes words 16..31 too
    if (b_addr != nullptr) {
      vmovdqu16(Ymm(b.getIdx()) | k7 | T_z, *b_addr);
      vinserti64x4(a, a, Ymm(b.getIdx()), 1);
    }
    vpermw(dst[0], zwork(5), a);
  }

  // ---- fp8 caches on the vdpbf16ps path: every e4m3 / e5m2 value is exact as a bf16, so a
  // row of codes becomes the bf16 words the bf16 path multiplies (the scales stay folded in by
  // the runner, as on the fp32 path).
  bool fp8_kv() const { return dpbf16_ && !amx_ && p_.kv != ir::KvCacheDtype::kAuto; }

  // interleave / interleave_masked for an fp8 cache: each row's 16·count codes widened to
  // words (under k7 when `masked`), decoded to bf16 words by a shared routine, l_decode_fp8_
  // (decode_fp8_words inlined at every row overflowed the code buffer at D = 256), then paired
  // as there. Uses zwork 0, 3, 4, 7 (free while rows are paired), k1, k2.
  void interleave_fp8(const Zmm* dst, int count, const Address& a_addr, const Address* b_addr,
                      bool masked) {
    const Zmm codes = zwork(0), a = zwork(7), b = zwork(4);
    const auto load_decoded = [&](const Address& addr) {  // into b
      const Xmm w = count == 2 ? Xmm(codes) : Xmm(Ymm(codes.getIdx()));
      if (masked) {
        vpmovzxbw(w | k7 | T_z, addr);
      } else {
        vpmovzxbw(w, addr);  // a ymm destination clears words 16..31
      }
      call(l_decode_fp8_);
    };
    load_decoded(a_addr);
    vmovdqa32(a, b);
    if (b_addr != nullptr) {
      load_decoded(*b_addr);
    } else {
      vpxord(b, b, b);
    }
    if (count == 2) {
      for (int h = 0; h < 2; ++h) {
        vmovdqa32(dst[h], h == 0 ? zwork(5) : zwork(6));  // the index tables
        vpermi2w(dst[h], a, b);
      }
      return;
    }
    vinserti64x4(a, a, Ymm(b.getIdx()), 1);
    vpermw(dst[0], zwork(5), a);
  }

  // out = the bf16 words of the fp8 codes in the words of `codes` (clobbered), exactly:
  // e4m3 |c| = e·8 + m: normal (e > 0) 2^(e-7)(1 + m/8) is bf16 exponent e + 120, mantissa m
  // in its top 3 bits, i.e. (|c| << 4) + (120 << 7); e = 0 is m·2^-9 (a table of 8); |c| = 0x7F
  // is NaN. e5m2 |c| = e·4 + m: (|c| << 5) + (112 << 7); e = 0 is m·2^-16; e = 31 is inf
  // (m = 0) or NaN. Then the sign bit. Uses k1, k2.
  void decode_fp8_words(const Zmm& out, const Zmm& codes, const Zmm& tmp) {
    const bool e4m3 = p_.kv == ir::KvCacheDtype::kFp8E4m3;
    vpandd(tmp, codes, cst_bits(0x007F007F));
    vpsllw(out, tmp, e4m3 ? 4 : 5);
    vpaddw(out, out, cst_bits(e4m3 ? 0x3C003C00 : 0x38003800));
    vptestnmw(k1, tmp, cst_bits(e4m3 ? 0x00780078 : 0x007C007C));  // exponent 0
    vpermw(out | k1, tmp, subnormal_table(e4m3));
    if (e4m3) {
      vpcmpeqw(k2, tmp, cst_bits(0x007F007F));
      vmovdqu16(out | k2, cst_bits(0x7FC07FC0));
    } else {
      constexpr uint8_t kNotLess = 5, kGreater = 6;
      vpcmpuw(k2, tmp, cst_bits(0x007C007C), kNotLess);
      vmovdqu16(out | k2, cst_bits(0x7F807F80));  // inf
      vpcmpuw(k2, tmp, cst_bits(0x007C007C), kGreater);
      vmovdqu16(out | k2, cst_bits(0x7FC07FC0));  // NaN
    }
    vpsllw(codes, codes, 8);
    constexpr uint8_t kOrAnd = 0xF8;  // out | (codes & mask)
    vpternlogd(out, codes, cst_bits(0x80008000), kOrAnd);
  }

  // The bf16 words of the fp8 subnormals (and zero) by magnitude: e4m3 m·2^-9 (m < 8), e5m2
  // m·2^-16 (m < 4).
  static std::array<uint16_t, 8> subnormal_words(bool e4m3) {
    if (e4m3) return {0, 0x3B00, 0x3B80, 0x3BC0, 0x3C00, 0x3C20, 0x3C40, 0x3C60};
    return {0, 0x3780, 0x3800, 0x3840, 0, 0, 0, 0};
  }
  // subnormal_words as a vpermw table: it reads the words at the lane's magnitude.
  Address subnormal_table(bool e4m3) {
    const std::array<uint16_t, 8> words = subnormal_words(e4m3);
    std::array<uint32_t, 16> table{};
    for (size_t i = 0; i < 4; ++i) table[i] = words[2 * i] | uint32_t(words[2 * i + 1]) << 16;
    return cst_table(table);
  }

  // P·V walks the head in chunks of `chunk` dims (two vectors, or 32 dims of bf16 pairs; the
  // last chunk holds D % chunk when that is not 0) and emits each by body(c0, dims,
  // next_dims): c0 is relative to the cursors r9 (the group's V rows: element c0 of row t at
  // r9 + t·D·e + c0·e) and rsi (the call's accumulator rows: float c0 of row r at
  // rsi + (r·D + c0)·4); next_dims is the size of the chunk that follows at c0 + dims (0 for the
  // last: prefetch_following_chunk).
  // Heads of up to kUnrolledHead dims emit every chunk in line, at its own offset. Larger
  // heads run their whole chunks as a loop (Generator::emit_steps) whose step emits `step`
  // chunks (the V bytes of a step are a multiple of the 64-byte line, so each step's chunks sit
  // at the same offsets in their lines and prefetch_next_chunk's pattern repeats), moving r9
  // and rsi on and back; the chunks past the last whole step and the tail follow in line.
  // Unrolled, the variants' P·V grew with D until the kernel outgrew the code buffer (AVX-512
  // f32 with every feature at D = 512, fp8 at D = 512, AVX2 past ~900); looped, it does not
  // grow with D. ARG(dim_steps_left) counts the steps (every register is taken inside a chunk).
  static constexpr int64_t kUnrolledHead = 256;
  template <class Body>
  void emit_dim_chunks(int chunk, const Body& body) {
    const int64_t d = p_.head_size;
    // Dims of the chunk at c0 (0 past the head).
    const auto dims = [&](int64_t c0) { return int(std::clamp<int64_t>(d - c0, 0, chunk)); };
    if (d <= kUnrolledHead) {
      for (int64_t c0 = 0; c0 < d; c0 += chunk) body(c0, dims(c0), dims(c0 + chunk));
      return;
    }
    const int step = int(std::max<int64_t>(1, 64 / (chunk * kv_esize_)));
    const int64_t steps = d / chunk / step;
    // In the loop every chunk names a whole chunk as the next one: past the last step that is
    // the first chunk in line after it, or (D a multiple of the step) the line after the row,
    // which a prefetch may name (it never faults; it lies in the group's next row, or past the
    // slab).
    emit_steps(steps, 0, qword[ARG(dim_steps_left)],
               {{r9, step * chunk * kv_esize_}, {rsi, step * chunk * 4}}, [&](int64_t) {
                 for (int k = 0; k < step; ++k) body(k * chunk, chunk, chunk);
               });
    for (int64_t c0 = steps * step * chunk; c0 < d; c0 += chunk) {
      body(c0, dims(c0), dims(c0 + chunk));
    }
  }

  void emit_pv_dpbf16(int rows) {
    const int64_t d = p_.head_size;
    const int64_t v_row = d * kv_esize_;
    const int prob_offset = max_rows_ * kGroupMax * 4;
    mov(rsi, ptr[ARG(acc)]);
    // The next groups' V rows (spread_prefetch): each chunk fetches its lines of the rows as
    // it walks them (as emit_pv_fp32), and the lines of this group's next chunk into L1
    // (prefetch_following_chunk). Whole rows in the first chunk (as this path had for heads of
    // up to 256 dims) put 16 prefetches in each of its steps, the next group's V in a burst
    // through a sixteenth of the group's time; bench_attention decode/kiln_vec with the KV in
    // DRAM, GQA 8, 1 thread: 14.2-15.4 GB/s with whole rows, 13.7-17.4 by chunk, 16.7-18.2 by
    // chunk and the following chunk into L1 (two rounds; docs/decisions.md, "Thirtieth
    // round").
    const bool by_chunk = spread_prefetch();
    if (by_chunk) {
      hoist_prefetch_bases(r9, offsetof(CpuAttnTileArgs, next_v),
                           offsetof(CpuAttnTileArgs, next2_v));
    }
    emit_dim_chunks(32, [&](int64_t c0, int n, int next_n) {
      const int count = n > 16 ? 2 : 1;       // zmm of 16 dims
      const int tail = n - (count - 1) * 16;  // dims in the last zmm
      const bool masked = tail < 16;
      if (masked) {
        set_dim_tail(tail);
        mov(eax, uint32_t((uint64_t(1) << n) - 1));  // n bf16 words of each V row
        kmovd(k7, eax);
      }
      const auto pair_rows = [&](const Zmm* dst, const Address& a_addr, const Address* b_addr) {
        if (masked) {
          interleave_masked(dst, count, a_addr, b_addr);
        } else {
          interleave(dst, count, a_addr, b_addr);
        }
      };
      load_pair_tables(count);
      load_scaled_acc(rows, c0, count, masked ? tail : 16);
      mov(r13, r9);
      mov(r14, ptr[ARG(scratch)]);
      mov(r15, rbx);
      shr(r15, 1);
      Label l_pair, l_tail, l_store;
      jz(l_tail, T_NEAR);
      const Zmm pairs[2] = {zwork(1), zwork(2)};
      const auto accumulate = [&]() {
        for (int r = 0; r < rows; ++r) {
          const Zmm p_pair = r % 2 == 0 ? zwork(3) : zwork(7);
          if (count == 2) vpbroadcastd(p_pair, ptr[r14 + prob_offset + r * kGroupMax * 2]);
          for (int c = 0; c < count; ++c) {
            if (count == 2) {
              vdpbf16ps(acc_reg(r * count + c), pairs[c], p_pair);
            } else {
              vdpbf16ps(acc_reg(r * count + c), pairs[c],
                        ptr_b[r14 + prob_offset + r * kGroupMax * 2]);
            }
          }
        }
      };
      L(l_pair);
      if (by_chunk) {
        for (int64_t row : {int64_t(0), v_row}) {
          prefetch_next_chunk(row, c0 * kv_esize_, n * kv_esize_);
          prefetch_following_chunk(row, (c0 + n) * kv_esize_, next_n * kv_esize_);
        }
      }
      {
        const Address b_addr = ptr[r13 + v_row + c0 * kv_esize_];
        pair_rows(pairs, ptr[r13 + c0 * kv_esize_], &b_addr);
      }
      accumulate();
      add(r13, 2 * v_row);
      add(r14, 4);
      dec(r15);
      jnz(l_pair, T_NEAR);
      L(l_tail);
      test(rbx, 1);
      jz(l_store, T_NEAR);
      pair_rows(pairs, ptr[r13 + c0 * kv_esize_], nullptr);  // (v[t], 0) pairs
      accumulate();
      L(l_store);
      store_acc(rows, c0, count, masked ? tail : 16);
    });
  }

  void emit_pv_fp32(int rows) {
    const int64_t d = p_.head_size;
    const int prob_offset = max_rows_ * kGroupMax * 4;
    const Xmm b = work(3);
    // The tables serve every whole 32-dim chunk; they come first, and the D % 32 tail after
    // them decodes by fp8_decode, which clobbers k2.
    if (fp8_lookup() && d >= 32) load_fp8_lookup();
    if (prefetch_alongside()) {
      hoist_prefetch_bases(r9, offsetof(CpuAttnTileArgs, next_v),
                           offsetof(CpuAttnTileArgs, next2_v));
    }
    mov(rsi, ptr[ARG(acc)]);
    // (Its chunks do not fetch the following chunk into L1 as emit_pv_dpbf16's do: bound by its
    // FMAs, it measured level with it, at AVX-512 and at AVX2, from DRAM and in the caches.)
    emit_dim_chunks(2 * lanes(), [&](int64_t c0, int n, int /*next_n*/) {
      const int count = (n + lanes() - 1) / lanes();
      const int tail = n - (count - 1) * lanes();  // dims in the last vector
      if (tail < lanes()) set_dim_tail(tail);
      // A whole chunk of bf16 words (parity_split): widened by parity, its accumulators split
      // the same way (emit_reorder_acc), the high-half mask pinned in work(4).
      const bool split = parity_split() && n == split_chunk();
      load_scaled_acc(rows, c0, count, tail);
      if (split) {
        const uint32_t high_half = 0xFFFF0000;
        const int reg = work(4).getIdx();
        pin_constants({&high_half, 1}, {&reg, 1});
      }
      mov(r13, r9);
      mov(r14, ptr[ARG(scratch)]);
      // Key k of the step (V row r13 + k·row, probability r14 + 4k) into accumulator set `set`.
      const int64_t v_row = d * kv_esize_;
      const int sets = accumulator_sets(rows, count);
      for (int k = rows * count; k < sets * rows * count; ++k) {
        uni_vpxor(acc_reg(k), acc_reg(k), acc_reg(k));  // set 0 holds α·acc
      }
      const auto key_step = [&](int k, int set) {
        if (prefetch_alongside()) prefetch_next_chunk(k * v_row, c0 * kv_esize_, n * kv_esize_);
        if (split) {
          load_split_words(work(1), ptr[r13 + k * v_row + c0 * kv_esize_], work(0));
          split_bf16_pairs(work(0), work(1), work(1));
        } else {
          for (int c = 0; c < count; ++c) {
            load_kv(work(c), r13 + k * v_row + (c0 + c * lanes()) * kv_esize_,
                    c == count - 1 ? tail : lanes());
          }
        }
        for (int r = 0; r < rows; ++r) {
          const Address prob = ptr[r14 + 4 * k + prob_offset + r * kGroupMax * 4];
          const bool in_register = !avx512() || count == 2;  // one broadcast load per row
          if (in_register) vbroadcastss(b, prob);
          for (int c = 0; c < count; ++c) {
            const Xmm acc = set_acc(set, rows, count, r * count + c);
            if (!in_register) {
              vfmadd231ps(acc, work(c), ptr_b[r14 + 4 * k + prob_offset + r * kGroupMax * 4]);
            } else {
              vfmadd231ps(acc, work(c), b);
            }
          }
        }
      };
      // `unroll` keys per loop step (one per set; at least two: at 4 rows x 16 dims (AVX2) a
      // step of one key is ~20 instructions per 8 FMAs, near Zen 3's dispatch width of 6 per
      // cycle), then the rest one by one into set 0.
      const int unroll = std::max(2, sets);
      Label l_step, l_rest, l_one, l_chunk_done;
      mov(r15, rbx);
      shr(r15, unroll == 4 ? 2 : 1);
      jz(l_rest, T_NEAR);
      L(l_step);
      for (int k = 0; k < unroll; ++k) key_step(k, k % sets);
      add(r13, unroll * v_row);
      add(r14, 4 * unroll);
      dec(r15);
      jnz(l_step, T_NEAR);
      L(l_rest);
      mov(r15, rbx);
      and_(r15, unroll - 1);
      jz(l_chunk_done, T_NEAR);
      L(l_one);
      key_step(0, 0);
      add(r13, v_row);
      add(r14, 4);
      dec(r15);
      jnz(l_one, T_NEAR);
      L(l_chunk_done);
      if (split) unpin_constants();
      sum_accumulator_sets(sets, rows, count);
      store_acc(rows, c0, count, tail);
    });
  }

  // `count` (1 .. lanes) cache elements at `addr` as fp32 lanes (zeros past `count`):
  // widened from the query dtype (kv=auto) or decoded from fp8 codes (exact; the scale is
  // applied by the runner). A partial vector is read under the set_dim_tail mask (AVX-512,
  // and AVX2 f32) or staged by the Generator's tail loads (AVX2 f16/bf16/fp8): nothing past
  // the `count` elements is read.
  void load_kv(const Xmm& dst, const RegExp& addr, int count) {
    const bool fp8 = p_.kv != ir::KvCacheDtype::kAuto;
    if (count == lanes() || !avx512()) {
      if (!fp8 && count < lanes() && p_.dtype == DType::kF32) {
        vmaskmovps(dst, dim_tail_mask(), ptr[addr]);
        return;
      }
      if (fp8) {
        load_fp8(dst, addr, count);
        fp8_decode(dst, ir::cpu_attn_cache_dtype(p_.dtype, p_.kv));
      } else {
        load_f32(dst, p_.dtype, addr, count);
      }
      return;
    }
    const Xmm masked = dst | k6 | T_z;
    if (fp8) {
      vpmovzxbd(masked, ptr[addr]);
      fp8_decode(dst, ir::cpu_attn_cache_dtype(p_.dtype, p_.kv));
      return;
    }
    switch (p_.dtype) {
      case DType::kBF16:
        vpmovzxwd(masked, ptr[addr]);
        vpslld(dst, dst, 16);
        break;
      case DType::kF16: vcvtph2ps(masked, ptr[addr]); break;
      default: vmovups(masked, ptr[addr]); break;
    }
  }
  void load_kv(const Xmm& dst, const RegExp& addr) { load_kv(dst, addr, lanes()); }

  ir::CpuAttentionParams p_;
  bool amx_;
  bool emulate_;  // amx layout without AMX: tiles emulated with AVX512_BF16
  bool dpbf16_;
  int group_;
  int max_rows_;
  int esize_;
  int kv_esize_;  // bytes per cache element: esize_, or 1 for fp8 codes
  int nv_;
  int row0_ = 0;  // the first row of the half being emitted (emit_half)
};

#undef ARG

}  // namespace

namespace {
// Whether the vec layout's vdpbf16ps path serves the spec at the ISA: bf16 queries, a bf16 or
// fp8 cache (fp8 codes decoded to bf16 words on load: exact).
bool vec_dpbf16_serves(const ir::CpuAttentionParams& p, X86Isa isa) {
  return isa >= X86Isa::kAvx512Bf16 && p.dtype == DType::kBF16;
}
}  // namespace

bool attention_uses_dpbf16(const OpSpec& spec, const Config& config, X86Isa isa) {
  const auto& p = spec.get<ir::CpuAttentionParams>();
  if (p.isa == ir::CpuAttnIsa::kAmx) return true;
  return vec_dpbf16_serves(p, isa) &&
         config.get(kDpbf16Knob, attention_default_dpbf16(spec, isa)) != 0;
}

int64_t attention_default_dpbf16(const OpSpec& spec, X86Isa isa) {
  // fp8 caches default to the fp32 path: on this project's machine the bf16-word decode on
  // the vdpbf16ps path measured the same in the caches (4.0 GB/s of fp8 bytes) and slower from
  // DRAM (2.6-3.2 against 3.6-4.0); the tuner tries both.
  if (spec.get<ir::CpuAttentionParams>().kv != ir::KvCacheDtype::kAuto) return 0;
  // bf16 caches: vdpbf16ps, except on the cores with AVX512_FP16 (the avx512_fp16 and amx
  // levels: Intel Sapphire Rapids and later), where a zmm vdpbf16ps holds both vector ports
  // for two cycles (measured on an Emerald Rapids VM: 16 independent ones take 33 cycles, 8 of
  // them beside 8 FMAs 21), a quarter of the FMA's issue rate for twice its multiply-adds, so
  // the fp32 path decodes 1.6-1.8x faster there (docs/attention.md, "Decode bandwidth").
  // Cores at avx512_bf16 / avx512_vbmi (Cooper Lake, AMD Zen 4/5) keep vdpbf16ps.
  return isa >= X86Isa::kAvx512Fp16 ? 0 : 1;
}

bool attention_predecode_applies(const OpSpec& spec, const Config& config, X86Isa isa) {
  const auto& p = spec.get<ir::CpuAttentionParams>();
  return p.kv != ir::KvCacheDtype::kAuto && p.isa != ir::CpuAttnIsa::kAmx &&
         !attention_uses_dpbf16(spec, config, isa);
}

Result<int64_t> switch_knob(const Config& config, std::string_view knob, std::string_view when_1,
                            std::string_view when_0) {
  const int64_t value = config.get(knob, -1);
  if (value != -1 && value != 0 && value != 1) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("config knob {}={}: allowed values are 1 ({}) and 0 ({})", knob,
                              value, when_1, when_0));
  }
  return value;
}

Status attention_config_status(const OpSpec& spec, const Config& config, X86Isa isa) {
  const auto& p = spec.get<ir::CpuAttentionParams>();
  const Result<int64_t> dpbf16 = switch_knob(config, kDpbf16Knob, "vdpbf16ps", "fp32 FMA");
  if (!dpbf16.is_ok()) return dpbf16.status();
  const int64_t knob = dpbf16.value();
  if (knob == 1 && p.isa != ir::CpuAttnIsa::kAmx && !vec_dpbf16_serves(p, isa)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("config knob {}=1 needs dtype=bf16 and an AVX512_BF16 target "
                              "(spec has dtype={}; target {}); use {}=0 or leave it unset",
                              kDpbf16Knob, dtype_name(p.dtype), x86_isa_name(isa), kDpbf16Knob));
  }
  if (knob == 0 && p.isa == ir::CpuAttnIsa::kAmx) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("config knob {}=0: isa=amx always multiplies on bf16 tiles; "
                              "leave it unset or 1",
                              kDpbf16Knob));
  }
  const Result<int64_t> predecode =
      switch_knob(config, kPredecodeKnob, "decode each KV tile's fp8 codes once", "in every pass");
  if (!predecode.is_ok()) return predecode.status();
  if (predecode.value() == 1 && !attention_predecode_applies(spec, config, isa)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("config knob {}=1 needs an fp8 cache (kv=fp8_e4m3 or fp8_e5m2) on "
                              "the fp32 path (isa=vec or vec16, {}=0); spec has kv={}; use {}=0 "
                              "or leave it unset",
                              kPredecodeKnob, kDpbf16Knob, ir::enum_name(p.kv), kPredecodeKnob));
  }
  return Status::ok();
}

int attention_token_group(const OpSpec& spec, X86Isa isa) {
  const int64_t bs = spec.get<ir::CpuAttentionParams>().block_size;
  return isa >= X86Isa::kAvx512 && bs % 32 == 0 ? 32 : 16;
}

// The largest head size whose AVX2 kernel serves 8 rows per call (attention_max_rows).
constexpr int64_t kMaxPairedHead = 128;

int attention_max_rows(const OpSpec& spec, X86Isa isa) {
  if (spec.get<ir::CpuAttentionParams>().isa == ir::CpuAttnIsa::kAmx) return kMaxAttnRows;
  if (isa >= X86Isa::kAvx512) return kMaxAttnRowsVec;
  // AVX2: two halves of its 4-row register tile per group (emit_half) for a 16-bit cache with
  // heads of up to kMaxPairedHead dims. Variants 5-8 emit two bodies each, whose unrolled P·V
  // grows with D: at D = 128 the kernel is 77 KiB, 100 KiB with softcap, ALiBi, window and
  // sinks, of the 128 KiB code buffer; D = 192 reached 125 KiB and D = 256 with softcap did not
  // fit. An fp8 cache keeps passes of 4 rows, whose tiles the runner decodes once (predecode)
  // where the halves would each decode the codes again.
  const auto& p = spec.get<ir::CpuAttentionParams>();
  const bool paired = p.kv == ir::KvCacheDtype::kAuto && p.head_size <= kMaxPairedHead;
  return paired ? 2 * kMaxAttnRowsAvx2 : kMaxAttnRowsAvx2;
}

Status request_amx_permission() {
  // Linux keeps AMX tile data (XFEATURE_XTILEDATA = 18) off for a process until it asks with
  // arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023); a tile instruction before that faults (SIGILL).
  static const Status status = [] {
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) return Status::ok();
    return Status(StatusCode::kUnavailable,
                  fmt::format("AMX tile data permission refused by the kernel "
                              "(arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): {})",
                              std::strerror(errno)));
  }();
  return status;
}

Result<std::vector<uint8_t>> generate_cpu_attention(const OpSpec& spec, const Config& config,
                                                    X86Isa isa) {
  if (Status status = attention_config_status(spec, config, isa); !status.is_ok()) return status;
  ir::CpuAttentionParams p = spec.get<ir::CpuAttentionParams>();
  if (attention_predecodes_fp8(spec, config, isa)) {
    // The runner's tile decode hands the kernel bf16 words (the query is fp32 on this path,
    // whatever its dtype, and the runner rounds the output).
    p.dtype = DType::kBF16;
    p.kv = ir::KvCacheDtype::kAuto;
  }
  AttentionGenerator gen(p, isa, attention_uses_dpbf16(spec, config, isa),
                         attention_token_group(spec, isa), attention_max_rows(spec, isa));
  gen.generate();
  // Every head size the IR allows fits the code buffer (emit_dim_chunks; the largest kernels
  // are D = 256's, unrolled: LargestKernelsFitTheCodeBuffer).
  return gen.finish();
}

bool attention_predecodes_fp8(const OpSpec& spec, const Config& config, X86Isa isa) {
  return attention_predecode_applies(spec, config, isa) &&
         config.get(kPredecodeKnob, attention_default_predecode(spec, config, isa)) != 0;
}

int64_t attention_default_predecode(const OpSpec& spec, const Config& config, X86Isa isa) {
  const auto& p = spec.get<ir::CpuAttentionParams>();
  const bool passes_share_tiles = config.get(kQPassesKnob, kDefaultQPasses) >= 2;
  return passes_share_tiles && p.head_count_q / p.head_count_kv > attention_max_rows(spec, isa) ? 1
                                                                                                : 0;
}

}  // namespace jit::codegen::x86
