// Generator: the base of every Xbyak kernel generator. It owns the ABI prologue/epilogue, the
// constant pool, and ISA-uniform helpers so that one generator serves AVX-512 (zmm, k-mask
// tails) and AVX2 (ymm, tails staged through a stack buffer).
//
// Register conventions (the helpers here use only vector registers 0..15; AVX-512 kernels
// and the AVX-512 paths of derived generators also use zmm16..31, each documenting which):
//   vmm0..vmm12  free for the kernel
//   vmm13..15    scratch of the helpers below (clobbered by load/store/round/reduce)
//   k1           tail mask (AVX-512), k2 compare mask (AVX-512); k2..k6 sign masks of the
//                sigmoid-based injectors
//   rax, rcx     scratch of the helpers
//   rdi, rsi, rdx  the arguments (args struct, row_begin, row_end) on entry
// Only this file and the generator .cc files include xbyak.h (it is slow to compile).
#pragma once

#include <xbyak/xbyak.h>

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "codegen/target.h"
#include "ir/dtype.h"
#include "ir/field.h"
#include "ir/status.h"

namespace jit::codegen::x86 {

/// Every x86 kernel is `void kernel(const Args* args, int64_t row_begin, int64_t row_end)`:
/// it processes rows [row_begin, row_end) so the runner can split rows across threads.
using KernelFn = void (*)(const void* args, int64_t row_begin, int64_t row_end);

class Generator : public Xbyak::CodeGenerator {
 public:
  /// `isa` must be kAvx2 or higher.
  explicit Generator(X86Isa isa);

  /// Appends the constant pool, checks for emission errors, and returns the code bytes.
  /// The code is position independent (constants are addressed rip-relative).
  Result<std::vector<uint8_t>> finish();

 protected:
  using Xmm = Xbyak::Xmm;
  using Reg64 = Xbyak::Reg64;
  using RegExp = Xbyak::RegExp;
  /// Independent vectors processed in lockstep by the math injectors (one per unrolled step).
  using Group = std::vector<Xmm>;

  bool avx512() const { return avx512_; }
  /// AVX512_BF16 (vcvtneps2bf16) is available.
  bool has_bf16_convert() const { return isa_ >= X86Isa::kAvx512Bf16; }
  /// AVX512_VBMI (vpermi2b, vpermt2b, vpermb) is available.
  bool has_vbmi() const { return isa_ >= X86Isa::kAvx512Vbmi; }
  /// AVX512_FP16 (32 fp16 lanes per vector: vaddph) is available.
  bool has_fp16() const { return isa_ >= X86Isa::kAvx512Fp16; }
  /// Results only need bf16 accuracy (set by generators whose output type is bf16).
  void set_bf16_accuracy(bool on) { bf16_accuracy_ = on; }
  bool bf16_accuracy() const { return bf16_accuracy_; }
  /// fp32 lanes per vector: 16 (zmm) or 8 (ymm).
  int lanes() const { return avx512_ ? 16 : 8; }
  /// Vector register `idx` at the ISA's width.
  Xmm vmm(int idx) const;
  /// Register indices free for kernels, in allocation order: 0..12, and 16..31 on AVX-512
  /// (13..15 are the helpers' scratch).
  std::vector<int> free_registers() const;

  /// rax = rax / divisor, rdx = rax % divisor for an unsigned rax and a positive compile-time
  /// divisor (a block size): a shift and a mask when it is a power of two (the usual block
  /// sizes; `div r64` takes 10-40 cycles and is not pipelined), else `div`. Clobbers rcx.
  void divide_unsigned(int64_t divisor);

  /// A walk of `count` steps whose code would otherwise grow with a size of the spec (a head,
  /// a rotation, a head count): step(i) emitted for each i when count <= max_in_line; else a
  /// loop of step(0) counted down in `counter` (a register or a qword in memory that no step
  /// touches), each step moving the registers of `cursors` on by their byte counts, all of them
  /// moved back after the loop. So step(i) must address from the cursors as step(0) plus i
  /// steps' bytes, and a kernel's size stops growing with the walk's length.
  void emit_steps(int64_t count, int64_t max_in_line, const Xbyak::Operand& counter,
                  std::initializer_list<std::pair<Reg64, int64_t>> cursors,
                  const std::function<void(int64_t)>& step);

  /// Saves callee-saved registers and reserves the tail staging buffer; `epilogue` undoes it.
  void prologue();
  void epilogue();
  /// The tail staging buffer is [rsp, rsp + kStageBytes). A kernel that needs stack scratch of
  /// its own subtracts it (a multiple of 16 bytes) from rsp after prologue() and finds it at
  /// [rsp + kStageBytes, ...) (the staging buffer moves down with rsp); it adds it back before
  /// epilogue().
  static constexpr int kStageBytes = 128;

  /// Loads `count` (1..lanes) elements of `dtype` (f32/f16/bf16) at `addr` as fp32 lanes;
  /// lanes past `count` are zero. Never reads memory past the `count` elements.
  void load_f32(const Xmm& dst, DType dtype, const RegExp& addr, int count);
  /// Rounds fp32 lanes to `dtype` (round to nearest even) and stores `count` elements; `src`
  /// is preserved. Never writes memory past the `count` elements.
  void store_f32(const Xmm& src, DType dtype, const RegExp& addr, int count);
  /// Rounds fp32 lanes in place to the nearest value representable in `dtype` (the rnd_T of
  /// the spec); identity for f32.
  void round_to(const Xmm& x, DType dtype);
  /// Stores rnd_T(rnd_T(a) * b) (`count` elements at `dst`): the spec's "round the
  /// intermediate, multiply, round again". a is clobbered. With AVX512_BF16 and bf16, both
  /// roundings use vcvtneps2bf16 and one denormal check covers both (the instruction treats
  /// denormal inputs as zero; such vectors take the exact path). t0, t1 are temporaries.
  void round_multiply_store(const Xmm& a, const Xmm& b, DType dtype, const RegExp& dst, int count,
                            const Xmm& t0, const Xmm& t1);
  /// In place: x = fp32 bits of rnd_bf16(x), round to nearest even on the 16 dropped bits
  /// (denormals exact, NaN stays a quiet NaN). Uses vmm14 and (AVX-512) k2.
  void bf16_round_bits(const Xmm& x);
  // ---- bf16 pairs: a dword of a bf16 row holds elements 2i (low half) and 2i+1
  // (high half). The helpers below work on that layout with integer ops only (no vcvtne*bf16,
  // which costs 2 cycles per vector here and flushes denormals). Their constants
  // (kBf16PairsConstants) are worth pinning in a hot loop.
  /// The constants the pairs helpers use: the high-half mask, bit 16, 0x7FFF and 1.
  static constexpr std::array<uint32_t, 4> kBf16PairsConstants{0xFFFF0000, 0x10000, 0x7FFF, 1};
  /// even = fp32 of the low bf16 of each dword of `v`, odd = fp32 of the high one (one shift
  /// and one and). odd may be v.
  void split_bf16_pairs(const Xmm& even, const Xmm& odd, const Xmm& v);
  /// x += 0x7FFF + bit 16 of x (bit 16 tested into `k`, no shift): the carry into bit 16 is
  /// round to nearest even on the 16 bits a bf16 drops, so x's high half is rnd_bf16(x). Exact
  /// for every non-NaN x, denormals included, and for a NaN whose low half is zero (nothing
  /// carries): every NaN computed from bf16 inputs, and the default NaN.
  void add_bf16_rounding_bias(const Xmm& x, const Xbyak::Opmask& k);
  /// x = fp32 bits of rnd_bf16(x) (add_bf16_rounding_bias, then the low half cleared).
  void round_bits_to_bf16(const Xmm& x, const Xbyak::Opmask& k);
  /// x = fp32 bits of x rounded to bf16 to nearest, ties away from zero: x + 0x8000, then the
  /// low half cleared (two uops; round_bits_to_bf16 takes four). Only for values that are
  /// themselves approximations, such as an activation computed at bf16 accuracy (relative
  /// error ~2^-13): their error, not the tie rule, decides the last bit, and either rounding
  /// is within one ulp of rnd_bf16 of the exact value. A product of bf16 operands is exact and
  /// can be a true tie: it needs round_bits_to_bf16. Same NaN condition as that one.
  void round_bits_to_bf16_ties_away(const Xmm& x);
  /// odd = the dwords of rnd_bf16(even) (low half) and rnd_bf16(odd) (high half): the store
  /// form of a pairs vector. even is clobbered.
  void pack_bf16_pairs(const Xmm& odd, const Xmm& even, const Xbyak::Opmask& k);
  /// The three above without masks (AVX2): bit 16 of x shifted down into `tmp` and added with
  /// 0x7FFF (one uop more per vector), the same bits. ymm0..15 only: pack_bf16_pairs ends with
  /// a vpblendw, which has no EVEX form.
  void add_bf16_rounding_bias(const Xmm& x, const Xmm& tmp);
  void round_bits_to_bf16(const Xmm& x, const Xmm& tmp);
  void pack_bf16_pairs(const Xmm& odd, const Xmm& even, const Xmm& tmp);

  /// Sums the lanes of `x` into lane 0 of x's xmm.
  void reduce_sum(const Xmm& x);
  /// x (every lane) = the max over x's lanes; vmm14 is scratch.
  void broadcast_max(const Xmm& x);

  /// A full vector of the fp32 value `value` (or the int32 bits): the register it is pinned
  /// to (pin_constants), else a memory operand of the constant pool.
  const Xbyak::Operand& cst(float value);
  const Xbyak::Operand& cst_bits(uint32_t bits);
  /// cst_bits' constant as a memory operand of the pool even while it is pinned: for VEX
  /// (AVX2) instructions in AVX-512 code, which cannot take a pin's zmm register.
  const Xbyak::Address& pool_bits(uint32_t bits);
  /// Keeps the constants `bits` in the vector registers `regs` (one each) until
  /// unpin_constants(): emits one broadcast load per constant here, and cst()/cst_bits() of
  /// those values then return the register. Why: every memory operand is a load uop, and a
  /// 512-bit loop whose constants all come from the pool is bound by the two 64-byte loads per
  /// cycle (silu's bf16 step read 22 constants per 32 elements: llvm-mca puts it at 41
  /// cycles per step from memory, 31 from registers). Only for code between the two calls
  /// that uses the constants as full vectors (vmm width); not nestable.
  void pin_constants(std::span<const uint32_t> bits, std::span<const int> regs);
  void unpin_constants();
  /// Whether pin_constants() is in effect (code of another vector width must not run then).
  bool constants_pinned() const { return !pinned_constants_.empty(); }
  /// A 64-byte table of 16 dwords (e.g. a permutation index), from the constant pool.
  Xbyak::Address cst_table(const std::array<uint32_t, 16>& values);
  /// A block of dwords placed contiguously and 64-byte aligned in the constant pool (a table
  /// indexed at run time, e.g. lea base, cst_block(..) then [base + index]).
  Xbyak::Address cst_block(std::vector<uint32_t> values);

  /// Loads `count` (1..lanes) interleaved pairs (e0, o0, e1, o1, ...) of `dtype` at `addr`:
  /// evens -> `even`, odds -> `odd`, as fp32 lanes; a, b are temporaries. Never reads past
  /// the 2*count elements.
  void load_pairs(const Xmm& even, const Xmm& odd, const Xmm& a, const Xmm& b, DType dtype,
                  const RegExp& addr, int count);
  /// The inverse: interleaves `even` and `odd` and stores 2*count elements of `dtype` at
  /// `addr` (rounded); a, b are temporaries; even/odd are preserved.
  void store_pairs(const Xmm& even, const Xmm& odd, const Xmm& a, const Xmm& b, DType dtype,
                   const RegExp& addr, int count);

  // ---- fp8 (OCP e4m3fn / e5m2, spec §1.4). x86 has no fp8 instructions: these helpers
  // convert with integer and bit operations on int32 lanes (one code per lane, 0..255). All of
  // them use vmm13..15 (and k2 on AVX-512) as scratch.
  /// The fields of an fp8 format as the conversions use them (generator.cc explains them).
  struct Fp8Layout {
    int mantissa_bits;      ///< M
    int rebias;             ///< R = 127 - B
    uint32_t max_code;      ///< largest finite code: e4m3 0x7E (448), e5m2 0x7B (57344)
    uint32_t nan_code;      ///< what f32_to_fp8_* writes for NaN (before the sign)
    float subnormal_magic;  ///< C = 2^23 q: a + C rounds a to a multiple of q
    float quantum;          ///< q, the subnormal quantum
  };
  static Fp8Layout fp8_layout(DType format);
  /// In place: fp32 lanes -> fp8 codes of `format` (kFp8E4m3 or kFp8E5m2) in the low byte of
  /// each int32 lane, exactly ir/numeric.h's f32_to_fp8_*: round to nearest even (subnormals
  /// included), finite overflow and +-inf saturate to +-max, NaN -> 0x7F / 0x7E with the sign.
  /// Needs the MXCSR default rounding (nearest even); the result does not depend on DAZ/FTZ.
  void fp8_encode(const Xmm& x, DType format);
  /// In place: fp8 codes in the low byte of int32 lanes (upper bits zero) -> fp32, exact
  /// (ir/numeric.h's fp8_*_to_f32; e4m3 NaN codes give a quiet NaN, e5m2 keeps inf and NaN).
  void fp8_decode(const Xmm& x, DType format);
  /// Loads `count` (1..lanes) bytes at `addr` zero-extended into int32 lanes (lanes past
  /// `count` are zero). Never reads past the `count` bytes.
  void load_fp8(const Xmm& dst, const RegExp& addr, int count);
  /// Stores the low byte of `count` (1..lanes) int32 lanes of `codes` (each 0..255) at `addr`;
  /// `codes` is preserved. Never writes past the `count` bytes.
  void store_fp8(const Xmm& codes, const RegExp& addr, int count);
  /// A call that writes at least this many bytes per thread takes streaming stores where its
  /// generator offers them (the cache writers, merge_attn_states): no read for ownership of
  /// the destination lines. Smaller calls (decode) keep ordinary stores, whose lines stay in the
  /// caches for the kernel that reads them next.
  static constexpr int64_t kStreamingBytes = int64_t(1) << 20;
  /// Jumps to `l_below` when the call's rows [rsi, rdx) times `bytes_per_row` write fewer than
  /// `min_bytes` bytes: the test for streaming stores. (The row count is multiplied by an imm32:
  /// a row of at least `min_bytes` streams at one row, so it counts as `min_bytes`.) Uses rax.
  void jump_if_below_streaming(int64_t bytes_per_row, Xbyak::Label& l_below,
                               int64_t min_bytes = kStreamingBytes);
  /// Copies `bytes` bytes from [src] to [dst] (non-overlapping) with full-width vector moves
  /// and a masked (AVX-512) or scalar (AVX2) tail; a loop of four vectors per step when long.
  /// src, dst and `counter` are advanced/clobbered; uses rax and vmm13..14 (and k1 on AVX-512).
  /// `streaming`: the full vectors are stored non-temporally (vmovntdq: no read-for-ownership
  /// of the destination lines); dst must then be 64-byte aligned, and the kernel must execute
  /// sfence before it returns (streaming stores are weakly ordered).
  void copy_span(const Reg64& dst, const Reg64& src, int64_t bytes, const Reg64& counter,
                 bool streaming = false);
  /// copy_span from the span's end down (the tail first, then the vectors last to first), for
  /// copies whose forward loads would alias the stores just issued (see SwapBlocksGenerator).
  /// src and dst end at the span's start (when it has a loop) or where they began; `counter`
  /// and rax are clobbered; uses vmm13..14 (and k1 on AVX-512).
  void copy_span_backward(const Reg64& dst, const Reg64& src, int64_t bytes, const Reg64& counter);
  /// The last `rem` (< one vector) bytes of a span, at `done` bytes from src / dst: a masked
  /// move (AVX-512) or 16-byte and scalar moves (AVX2). Uses rax, vmm13 (and k1).
  void copy_tail(const Reg64& dst, const Reg64& src, int64_t done, int rem);

  // ---- ISA-uniform integer/bitwise ops (VEX names on AVX2, EVEX names on AVX-512).
  void uni_vpand(const Xmm& d, const Xmm& a, const Xbyak::Operand& b);
  void uni_vpor(const Xmm& d, const Xmm& a, const Xbyak::Operand& b);
  void uni_vpxor(const Xmm& d, const Xmm& a, const Xbyak::Operand& b);
  /// d = round-to-nearest-integer(a), as float.
  void uni_round_nearest(const Xmm& d, const Xmm& a);
  /// d = sign bit of `sign` set ? if_negative : otherwise (lane-wise). d may alias any input.
  void select_by_sign(const Xmm& d, const Xmm& sign, const Xmm& if_negative, const Xmm& otherwise);
  /// d ~= 1 / x. AVX-512: vrcp14ps (2^-14) refined by one Newton-Raphson step,
  /// d' = d (2 - x d), to about 1 ulp, at several times the throughput of vdivps; with
  /// bf16_accuracy() the estimate alone (2^-14 is 1/64 of a bf16 ulp). AVX2: vdivps, since
  /// vrcpps + one step is not accurate enough to give 1/1 = 1.
  /// x must be finite and non-zero (callers bound it); t is a temporary.
  void reciprocal(const Group& d, const Group& x, const Group& t);
  /// d = a > b (ordered) ? a : 0 (lane-wise); b is a register.
  void keep_if_greater(const Xmm& d, const Xmm& a, const Xmm& b);

  /// The rotary step of the spec on fp32 lanes holding values of `dtype`:
  ///   (x, y) <- (rnd(rnd(x c) - rnd(y s)), rnd(rnd(y c) + rnd(x s)))
  /// without the outer rounding (the store's). Products are not fused into FMAs: each is
  /// rounded to `dtype`, as the contract says. c, s are preserved; a, b are temporaries.
  /// `on_bits` (bf16 on the pairs paths): the four roundings are round_bits_to_bf16 (masks
  /// k2..k5 on AVX-512), which is exact there and needs no denormal guard; on AVX2 their
  /// temporary is b and then c, so c is clobbered there.
  void rotate_pair(const Xmm& x, const Xmm& y, const Xmm& c, const Xmm& s, const Xmm& a,
                   const Xmm& b, DType dtype, bool on_bits = false);

  // ---- rotary_embedding's rotation of one head in place, shared by the rope kernel and the
  // fused cache writers (rope_rotation.cc has the math). Vector registers 0..7, the token's
  // cos/sin from vmm16 on when hoisted (AVX-512), on the AVX-512 bf16 pairs path the four
  // kBf16PairsConstants pinned in `constant_regs` (k2..k5), on the AVX2 one vmm13..14.
  struct RopeRotation {
    DType dtype = DType::kBF16;        ///< of the rotated rows (f32/f16/bf16)
    DType cache_dtype = DType::kBF16;  ///< of the cos/sin table; rounded to dtype if different
    int64_t rot_dim = 0;               ///< rotated prefix of each head (even)
    ir::RopeStyle style = ir::RopeStyle::kNeox;
    std::array<int, 4> constant_regs{};  ///< where the pairs path pins its constants
    bool hoisted = false;  ///< the token's cos/sin live in vmm16.. (begin_rope_token loads them)
    bool pairs = false;    ///< the bf16 pairs path (see rope_rotation.cc)
  };
  /// What fits in registers at this ISA for a rotation of that shape. `constant_regs` must not
  /// be touched by the caller between begin_rope_token and end_rope_token (the pairs path is
  /// only taken when they lie outside the hoisted cos/sin).
  /// Whether begin_rope_token pins kBf16PairsConstants in r.constant_regs (the pairs path,
  /// where those registers exist and are free).
  bool pins_rope_constants(const RopeRotation& r) const;
  RopeRotation plan_rope(DType dtype, DType cache_dtype, int64_t rot_dim, ir::RopeStyle style,
                         std::array<int, 4> constant_regs) const;
  /// Per token, before its heads: hoists the cos/sin row at [cs] and pins the pairs constants.
  void begin_rope_token(const RopeRotation& r, const Reg64& cs);
  /// The rot_dim values of the head at [head] rotated in place (the cos/sin row at [cs] when
  /// not hoisted). Elements rot_dim.. are untouched. Clobbers rax.
  void rotate_rope_head(const RopeRotation& r, const Reg64& head, const Reg64& cs);
  /// After the token's heads: unpins the constants.
  void end_rope_token(const RopeRotation& r);
  /// rotate_rope_head's AVX2 pairs path (rope_rotation.cc).
  void rotate_rope_head_ymm_pairs(const RopeRotation& r, const Reg64& head, const Reg64& cs);

  // ---- Math injectors (fp32, lane-wise, in place) over groups of independent vectors; each
  // step is emitted for every member before the next step. Temporaries must be distinct from
  // x and from vmm13..15; all groups have the same size.
  /// x = e^x. Range-reduced: n = round(x log2 e), r = x - n ln2 (two-part ln2), e^r by the
  /// Cephes degree-7 polynomial (~1 ulp), times 2^n: vscalefps on AVX-512; on AVX2 built as
  /// 2^(n/2) * 2^(n - n/2). Either way results between FLT_MIN and 0 are gradual (denormal)
  /// and x > 88.72 gives +inf. NaN stays NaN. `bounded`: the caller guarantees x <= 40 (or
  /// NaN: never positive, or clamped below), so the upper clamp is skipped and AVX2 builds 2^n
  /// with one multiply (2^(n + 64) on the bits, times 2^-64). With bf16_accuracy(): on AVX-512
  /// 2^a = 2^floor(a) 2^frac(a) with a cubic for 2^frac (8.6e-5 relative), on AVX2 a degree-4
  /// polynomial.
  void exp_ps(const Group& x, const Group& t0, const Group& t1, bool bounded = false);
  /// x = ln(x) for positive normal finite x (the callers' range): x = m 2^e with m in
  /// [sqrt(1/2), sqrt(2)), u = m - 1, ln x = u - u^2/2 + u^3 P(u) + e ln2 with the Cephes logf
  /// polynomial (~1 ulp) and ln2 split in two parts so that e ln2 adds no rounding error.
  void log_ps(const Group& x, const Group& t0, const Group& t1);
  /// x = tanh(x): for |x| < 0.625 the odd polynomial x + x^3 P(x^2) (Cephes tanhf, no
  /// cancellation near 0); above, sign(x) (1 - 2 / (e^{2|x|} + 1)), which saturates to +-1.
  /// NaN stays NaN.
  void tanh_ps(const Group& x, const Group& t0, const Group& t1, const Group& t2, const Group& t3);
  /// dst = 1 / (1 + e^-x), evaluated as 1/(1+e) for x >= 0 and e/(1+e) for x < 0 with
  /// e = e^-|x|, so neither branch overflows and tiny results keep full relative accuracy.
  /// AVX-512 multiplies by e under the sign mask of x (k2 + member index). dst may be x;
  /// otherwise x is preserved (silu needs x afterwards, and a copy costs a uop per vector).
  void sigmoid_ps(const Group& dst, const Group& x, const Group& t0, const Group& t1,
                  const Group& t2, const Group& t3);
  /// x = silu(x) = x * sigmoid(x). With bf16_accuracy() on AVX-512, one form for both signs
  /// instead of sigmoid_ps's two branches: silu(x) = x e (1 / (1 + e)), e = e^min(x, 20):
  /// one uop per vector fewer (no sign mask) and no mask register.
  void silu_ps(const Group& x, const Group& t0, const Group& t1, const Group& t2, const Group& t3,
               const Group& t4);
  /// x = 0.5 x (1 + erf(x / sqrt 2)), through erfc(z) (z = |x|/sqrt 2) so that the x < 0 side
  /// (where 1 + erf is tiny) keeps its relative accuracy:
  ///   gelu = 0.5 x (2 - erfc(z)) for x >= 0,   0.5 x erfc(z) for x < 0.
  /// erfc(z) = t exp(-z^2 + P(t)), t = 1/(1 + z/2), P of degree 9 (Numerical Recipes erfcc,
  /// fractional error < 1.2e-7 for all z >= 0).
  void gelu_erf_ps(const Group& x, const Group& t0, const Group& t1, const Group& t2,
                   const Group& t3);
  /// x = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). Since 0.5 (1 + tanh u) =
  /// sigmoid(2u), this is x * sigmoid(2u), which is accurate on both sides.
  void gelu_tanh_ps(const Group& x, const Group& t0, const Group& t1, const Group& t2,
                    const Group& t3, const Group& t4);

 private:
  void set_tail_mask(int count);
  void fold_lanes(const Xmm& x, bool max);
  void copy_bytes(const RegExp& dst, const RegExp& src, int bytes);
  void stage_zero();
  // Emits `fast` unless a lane of `x` is an fp32 denormal, then `exact` instead: the
  // hardware bf16 conversion treats denormal inputs as zero.
  template <class Fast, class Exact>
  void unless_denormal(const Xmm& x, Fast fast, Exact exact);

  X86Isa isa_;
  bool avx512_;
  bool bf16_accuracy_ = false;
  std::map<uint32_t, std::unique_ptr<Xbyak::Label>> constants_;
  std::map<uint32_t, Xbyak::Address> constant_addresses_;  // stable storage for cst()
  std::map<uint32_t, Xbyak::Xmm> pinned_constants_;        // pin_constants(): bits -> vmm
  std::map<std::array<uint32_t, 16>, std::unique_ptr<Xbyak::Label>> tables_;
  std::vector<std::pair<std::vector<uint32_t>, std::unique_ptr<Xbyak::Label>>> blocks_;
};

}  // namespace jit::codegen::x86
