// rms_norm and fused_add_rms_norm.
//
// Per row (fp32 math, T = dtype):
//   fused only: z_i = rnd_T(x_i + r_i), written back to the residual row
//   ss  = sum_i z_i^2                      (4 or 8 accumulators, then a lane reduce)
//   inv = 1 / sqrt(ss / H + eps)           (vdivss/vsqrtss: correctly rounded steps)
//   y_i = rnd_T(rnd_T(z_i * inv) * w_i)    (without weight: rnd_T(z_i * inv))
// bf16 rows take the pairs path (rows read as dwords of two bf16, every rounding on the fp32
// bits with integer ops; see pairs_path()), the others one vector of widened elements at a
// time.
// The second pass re-reads the row (the input, or the rounded residual just written), which
// is still in L1/L2 for every hidden size models use.
#include <array>
#include <bit>
#include <cstddef>
#include <span>

#include "codegen/x86/generator.h"
#include "codegen/x86/kernels.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;

constexpr int kUnroll = 4;  // accumulators / vectors per loop iteration

class NormGenerator : public Generator {
 public:
  NormGenerator(X86Isa isa, const ir::NormParams& p, bool fused)
      : Generator(isa), p_(p), fused_(fused), esize_(int(dtype_size(p.dtype))) {}

  void generate() {
    prologue();
    mov(reg_dst_, ptr[rdi + offsetof(NormCallArgs, dst)]);
    mov(reg_src_, ptr[rdi + offsetof(NormCallArgs, src)]);
    mov(reg_res_, ptr[rdi + offsetof(NormCallArgs, residual)]);
    mov(reg_w_, ptr[rdi + offsetof(NormCallArgs, weight)]);
    mov(reg_dst_stride_, ptr[rdi + offsetof(NormCallArgs, dst_row_stride)]);
    mov(reg_src_stride_, ptr[rdi + offsetof(NormCallArgs, src_row_stride)]);
    mov(reg_res_stride_, ptr[rdi + offsetof(NormCallArgs, residual_row_stride)]);
    vmovss(Xmm(kEps), ptr[rdi + offsetof(NormCallArgs, epsilon)]);
    mov(reg_row_, rsi);
    mov(reg_row_end_, rdx);
    // Row pointers of row_begin.
    advance_rows(reg_row_);

    Label l_row, l_done;
    L(l_row);
    cmp(reg_row_, reg_row_end_);
    jge(l_done, T_NEAR);
    // Pointers to the next row, which pass 2 prefetches: pass 1 of a row is a burst of memory
    // reads that the hardware prefetcher only starts once the row begins; fetching it while
    // this row is normalised overlaps the memory and compute phases.
    lea(reg_next_src_, ptr[reg_src_ + reg_src_stride_]);
    lea(reg_next_res_, fused_ ? ptr[reg_res_ + reg_res_stride_] : ptr[reg_dst_ + reg_dst_stride_]);
    sum_of_squares();
    compute_inv();
    normalize();
    add(reg_src_, reg_src_stride_);
    add(reg_dst_, reg_dst_stride_);
    add(reg_res_, reg_res_stride_);
    inc(reg_row_);
    jmp(l_row, T_NEAR);
    L(l_done);
    epilogue();
  }

 private:
  // Vector registers.
  static constexpr int kAcc = 0;  // 0..3 accumulators
  static constexpr int kX = 4;    // 4..7 loaded rows
  static constexpr int kR = 8;    // 8..11 residual / weight
  static constexpr int kInvReg = 2;
  // Temporaries of round_multiply_store's AVX512_BF16 path, kUnroll each (registers 16..31
  // exist only on AVX-512, the only ISA that takes that path).
  static constexpr int kFastPacked = 16,
                       kFastRounded = 20;  // broadcast 1/rms (accumulator 2 is free by then)
  static constexpr int kEps = 12;          // eps lives in xmm12 until inv replaces it
  // The registers of one step of the bf16 pairs path (pair_regs).
  struct PairRegs {
    Xmm v, even, odd, t;
  };

  void advance_rows(const Reg64& rows) {
    mov(rax, rows);
    imul(rax, reg_src_stride_);
    add(reg_src_, rax);
    mov(rax, rows);
    imul(rax, reg_dst_stride_);
    add(reg_dst_, rax);
    mov(rax, rows);
    imul(rax, reg_res_stride_);
    add(reg_res_, rax);
  }

  // Calls body(vector_slot, element_offset_expr_base, count) over the row: a loop of
  // kUnroll-vector blocks indexed by reg_idx_, then whole vectors and a masked tail at
  // constant offsets.
  template <class Body>
  void for_each_vector(Body body, int64_t begin = 0) {
    const int64_t block = int64_t(kUnroll) * lanes();
    const int64_t blocks = begin == 0 ? p_.hidden / block : 0;
    if (blocks > 0) {
      Label l_loop;
      xor_(reg_idx_, reg_idx_);
      L(l_loop);
      for (int u = 0; u < kUnroll; ++u) {
        body(
            u,
            [=, this](const Reg64& base) {
              return base + reg_idx_ * esize_ + u * lanes() * esize_;
            },
            lanes());
      }
      add(reg_idx_, block);
      cmp(reg_idx_, blocks * block);
      jl(l_loop, T_NEAR);
    }
    int64_t offset = begin + blocks * block;
    int slot = 0;
    while (offset < p_.hidden) {
      const int count = int(std::min<int64_t>(lanes(), p_.hidden - offset));
      const int64_t byte_offset = offset * esize_;
      body(
          slot, [=](const Reg64& base) { return base + byte_offset; }, count);
      slot = (slot + 1) % kUnroll;
      offset += count;
    }
  }

  void sum_of_squares() {
    for (int u = 0; u < kUnroll; ++u) vxorps(vmm(kAcc + u), vmm(kAcc + u), vmm(kAcc + u));
    const int steps = square_steps();
    for (int s = kPairsUnroll; s < steps; ++s) {
      for (const Xmm& acc : square_accumulators(s)) vxorps(acc, acc, acc);
    }
    const int64_t block = steps * pair_bytes() / 2;  // elements per loop iteration
    const int64_t loop_end = pairs_path() ? p_.hidden / block * block : 0;
    // A row whose pairs vectors do not fill the last iteration runs kPairsUnroll more steps
    // once (AVX2 rms_norm at H % 64 >= 32).
    const int64_t pairs_end =
        pairs_path() ? loop_end + (p_.hidden - loop_end) / pairs_block() * pairs_block() : 0;
    // Step s of pass 1 at element offset `first` + s · pair_bytes() / 2 (from reg_idx_ when
    // `indexed`): one pairs vector split into its even and odd elements (a shift and an and
    // give both as fp32 without a widening shuffle), their squares summed into step s's
    // accumulators; fused, z = rnd_bf16(x + r) first.
    const auto step = [&](int s, int64_t first, bool indexed) {
      const PairRegs r = pair_regs(s % kPairsUnroll);
      const auto at = [&, s, first, indexed](const Reg64& base) {
        const int64_t offset = first * 2 + s * pair_bytes();
        return indexed ? base + reg_idx_ * 2 + offset : base + offset;
      };
      load_pairs_vector(r.v, ptr[at(reg_src_)]);
      split_bf16_pairs(r.even, r.odd, r.v);
      if (fused_) add_residual_pairs(r, at);
      const auto acc = square_accumulators(s);
      vfmadd231ps(acc[0], r.even, r.even);
      vfmadd231ps(acc[1], r.odd, r.odd);
    };
    if (pairs_end > 0 && avx512()) pin_constants(kPairsConstants.first(1), kConstantRegs);
    if (loop_end > 0) {
      Label l_loop;
      xor_(reg_idx_, reg_idx_);
      L(l_loop);
      for (int s = 0; s < steps; ++s) step(s, 0, true);
      add(reg_idx_, block);
      cmp(reg_idx_, loop_end);
      jl(l_loop, T_NEAR);
    }
    if (pairs_end > loop_end) {
      for (int s = 0; s < kPairsUnroll; ++s) step(s, loop_end, false);
    }
    if (pairs_end > 0 && avx512()) unpin_constants();
    // The extra accumulators into kAcc.. before the per-vector tail, which loads into 4..11.
    for (int s = kPairsUnroll; s < steps; ++s) {
      const auto acc = square_accumulators(s), into = square_accumulators(s - kPairsUnroll);
      vaddps(into[0], into[0], acc[0]);
      vaddps(into[1], into[1], acc[1]);
    }
    for_each_vector([&](int u, auto at, int count) { square_vector(u, at, count); }, pairs_end);
    vaddps(vmm(kAcc), vmm(kAcc), vmm(kAcc + 1));
    vaddps(vmm(kAcc + 2), vmm(kAcc + 2), vmm(kAcc + 3));
    vaddps(vmm(kAcc), vmm(kAcc), vmm(kAcc + 2));
    reduce_sum(vmm(kAcc));
  }

  // Pass 1 of the fused pairs path, on one pairs vector of x already split into r.even and
  // r.odd: z = rnd_bf16(x + r) on the fp32 bits (integer rounding; exact for every sum of two
  // bf16 values: a NaN sum is a quiet NaN whose low half is zero, see
  // add_bf16_rounding_bias), left in r.even / r.odd as fp32 with the low halves clear, and its
  // dwords written back to the residual row: even's top half shifted down, or'ed into odd's.
  template <class At>
  void add_residual_pairs(const PairRegs& r, At at) {
    load_pairs_vector(r.v, ptr[at(reg_res_)]);
    split_bf16_pairs(r.t, r.v, r.v);
    vaddps(r.even, r.even, r.t);
    vaddps(r.odd, r.odd, r.v);
    round_pairs(r.even);
    round_pairs(r.odd);
    vpsrld(r.t, r.even, 16);
    uni_vpor(r.t, r.t, r.odd);
    store_pairs_vector(ptr[at(reg_res_)], r.t);
  }

  template <class At>
  void square_vector(int u, At at, int count) {
    const Xmm x = vmm(kX + u);
    load_f32(x, p_.dtype, at(reg_src_), count);
    if (fused_) {
      const Xmm r = vmm(kR + u);
      load_f32(r, p_.dtype, at(reg_res_), count);
      vaddps(x, x, r);
      round_to(x, p_.dtype);
      store_f32(x, p_.dtype, at(reg_res_), count);
    }
    vfmadd231ps(vmm(kAcc + u), x, x);
  }

  void compute_inv() {
    // inv = 1 / sqrt(ss / H + eps), each step correctly rounded in fp32.
    const Xmm ss = Xmm(kAcc);
    if (pairs_path()) vmovaps(Xmm(saved_ss_reg()), ss);  // for the row's finiteness check
    mov(eax, std::bit_cast<uint32_t>(float(p_.hidden)));
    vmovd(Xmm(kAcc + 1), eax);
    vdivss(ss, ss, Xmm(kAcc + 1));
    vaddss(ss, ss, Xmm(kEps));
    vsqrtss(ss, ss, ss);
    mov(eax, std::bit_cast<uint32_t>(1.0f));
    vmovd(Xmm(kAcc + 1), eax);
    vdivss(Xmm(kAcc + 1), Xmm(kAcc + 1), ss);
    vbroadcastss(vmm(kInvReg), Xmm(kAcc + 1));
  }

  void normalize() {
    if (!pairs_path()) {
      for_each_vector([&](int u, auto at, int count) { normalize_vector(u, at, count); });
      return;
    }
    // The pairs path rounds rnd_bf16(z * inv) with integer adds, which is exact for every
    // finite value (denormals included) but not for NaN. ss + inv is finite exactly when
    // every z and inv are, and then |z * inv| <= sqrt(H): such rows take the pairs path, the
    // others (inf/NaN input, eps = 0 with a zero row) the per-vector path.
    Label l_vectors, l_row_done;
    vaddss(Xmm(check_reg()), Xmm(saved_ss_reg()), Xmm(kInvReg));
    if (avx512()) {
      vfpclassss(k2, Xmm(check_reg()), kNonFiniteClass);
      kortestw(k2, k2);
      jnz(l_vectors, T_NEAR);
    } else {
      vmovd(eax, Xmm(check_reg()));
      and_(eax, 0x7F800000);  // inf or NaN: the exponent all ones
      cmp(eax, 0x7F800000);
      je(l_vectors, T_NEAR);
    }
    normalize_pairs();
    jmp(l_row_done, T_NEAR);
    L(l_vectors);
    for_each_vector([&](int u, auto at, int count) { normalize_vector(u, at, count); });
    L(l_row_done);
  }

  // Pass 2 of the pairs path: two dwords vectors per step (64 elements, AVX2 32), then the
  // per-vector path for the rest of the row.
  void normalize_pairs() {
    const Xmm inv = vmm(kInvReg);
    const int64_t pairs_end = p_.hidden / pairs_block() * pairs_block();
    if (avx512()) pin_constants(kPairsConstants, kConstantRegs);
    Label l_loop;
    xor_(reg_idx_, reg_idx_);
    L(l_loop);
    for (int u = 0; u < kPairsUnroll; ++u) {
      const PairRegs r = pair_regs(u);
      const auto at = [&](const Reg64& base) { return base + reg_idx_ * 2 + u * pair_bytes(); };
      if (u * pair_bytes() % 64 == 0) {  // one prefetch per line
        // The next row's input is written too when fused (in place, by this pass).
        if (fused_) {
          prefetchw(ptr[at(reg_next_src_)]);
        } else {
          prefetcht0(ptr[at(reg_next_src_)]);
        }
        prefetchw(ptr[at(reg_next_res_)]);
      }
      // z: the input, or the rounded residual pass 1 wrote (fused).
      load_pairs_vector(r.v, ptr[at(fused_ ? reg_res_ : reg_src_)]);
      split_bf16_pairs(r.even, r.odd, r.v);
      vmulps(r.even, r.even, inv);
      vmulps(r.odd, r.odd, inv);
      if (p_.weight) {
        // y = rnd(rnd(z * inv) * w): the inner rounding on the fp32 bits (no NaN here).
        round_pairs(r.even);
        round_pairs(r.odd);
        load_pairs_vector(r.v, ptr[at(reg_w_)]);
        split_bf16_pairs(r.t, r.v, r.v);
        vmulps(r.even, r.even, r.t);
        vmulps(r.odd, r.odd, r.v);
      }
      // Pack on the bits: even's rounded top half shifted down, or'ed into odd's top half.
      // Exact for every value here, denormals included (vcvtne2ps2bf16 would flush them and
      // need a guard) and NaN (a NaN product carries a bf16 NaN's payload: low half zero).
      pack_pairs(r.odd, r.even);
      store_pairs_vector(ptr[at(reg_dst_)], r.odd);
    }
    add(reg_idx_, pairs_block());
    cmp(reg_idx_, pairs_end);
    jl(l_loop, T_NEAR);
    if (avx512()) unpin_constants();
    for_each_vector([&](int u, auto at, int count) { normalize_vector(u, at, count); }, pairs_end);
  }

  template <class At>
  void normalize_vector(int u, At at, int count) {
    const Xmm inv = vmm(kInvReg);  // set by compute_inv
    const Reg64& src = fused_ ? reg_res_ : reg_src_;
    const Xmm x = vmm(kX + u);
    // Next row: the input (written in place when fused) and the residual or output, which
    // are written: prefetchw takes the lines in exclusive state, saving the RFO stall.
    if (fused_) {
      prefetchw(ptr[at(reg_next_src_)]);
      prefetchw(ptr[at(reg_next_res_)]);
    } else {
      prefetcht0(ptr[at(reg_next_src_)]);
      prefetchw(ptr[at(reg_next_res_)]);
    }
    load_f32(x, p_.dtype, at(src), count);
    vmulps(x, x, inv);
    if (!p_.weight) {
      store_f32(x, p_.dtype, at(reg_dst_), count);
      return;
    }
    const Xmm w = vmm(kR + u);
    load_f32(w, p_.dtype, at(reg_w_), count);
    // The fast bf16 path's temporaries live in 16..31, which only AVX-512 has (and uses).
    round_multiply_store(x, w, p_.dtype, at(reg_dst_), count, vmm(kFastPacked + u),
                         vmm(kFastRounded + u));
  }

  // ---- The bf16 pairs path (rms_norm and fused_add_rms_norm, whose pass 1 also rounds
  // z = x + r there): rows are read as dwords of two bf16, and the roundings are done on the
  // fp32 bits (integer ops only: no vcvtne*bf16, no widening or packing shuffles). On AVX2 it
  // replaces the per-vector path's vpmovzxwd loads, blended NaN-safe roundings and vpackusdw /
  // vpermq stores (~3.5x fewer uops per element).
  static constexpr int64_t kPairsUnroll = 2;
  static constexpr uint8_t kNonFiniteClass = 0x99;  // QNaN, SNaN, +inf, -inf
  // The pairs loops' constants live in zmm20..23 on AVX-512 (the high-half mask first: pass 1
  // needs only it), so the loops issue no constant loads; AVX2 has no registers to spare.
  static constexpr std::span<const uint32_t> kPairsConstants{kBf16PairsConstants};
  static constexpr std::array<int, 4> kConstantRegs{20, 21, 22, 23};
  static constexpr int kRoundTmp = 15;  // AVX2: the roundings' temporary
  // Bytes of one pairs vector, elements per loop step.
  int pair_bytes() const { return avx512() ? 64 : 32; }
  int64_t pairs_block() const { return kPairsUnroll * pair_bytes() / 2; }
  // The row's finiteness check: its sum of squares kept, and the check's register (AVX-512:
  // zmm30/31; AVX2: ymm13/14, clear of eps in 12 and the pairs registers).
  int saved_ss_reg() const { return avx512() ? 31 : 14; }
  int check_reg() const { return avx512() ? 30 : 13; }
  // AVX-512: zmm16..19 for step 0, zmm24..27 for step 1 (20..23 hold the constants). AVX2:
  // ymm4..7 and ymm8..11 (the per-vector path's row and weight registers, idle here).
  PairRegs pair_regs(int u) const {
    const int b = avx512() ? 16 + 8 * u : 4 + 4 * u;
    return {vmm(b), vmm(b + 1), vmm(b + 2), vmm(b + 3)};
  }
  // Pass 1's pairs vectors per loop iteration. Each step adds its squares into two
  // accumulators of its own, and an FMA waits 4 cycles for its accumulator on Zen 3: with two
  // steps (4 accumulators) AVX2 rms_norm's pass 1 waits on them at ~2 cycles per 16 elements
  // where its ports need ~1, so it takes four steps (8 accumulators) there. The fused op's
  // steps are long enough (the residual's rounding) and AVX-512 keeps the form it was
  // measured with.
  int square_steps() const {
    return pairs_path() && !fused_ && !avx512() ? 2 * kPairsUnroll : kPairsUnroll;
  }
  // Step s's accumulators: kAcc.. for the first kPairsUnroll steps, then (AVX2 rms_norm) the
  // registers pass 1 leaves idle there: the steps' unused t (7, 11), the finiteness check's
  // 13 (set after pass 1) and the rounding temporary 15 (pass 2's).
  std::array<Xmm, 2> square_accumulators(int s) const {
    if (s < kPairsUnroll) return {vmm(kAcc + 2 * s), vmm(kAcc + 2 * s + 1)};
    static constexpr std::array<int, 4> kExtra{7, 11, 13, kRoundTmp};
    return {vmm(kExtra[2 * (s - kPairsUnroll)]), vmm(kExtra[2 * (s - kPairsUnroll) + 1])};
  }
  // The pairs path's roundings (round_bits_to_bf16, pack_bf16_pairs): bit 16 tested into k4
  // on AVX-512, shifted into the temporary vmm15 on AVX2.
  void round_pairs(const Xmm& x) {
    if (avx512()) {
      round_bits_to_bf16(x, k4);
    } else {
      round_bits_to_bf16(x, vmm(kRoundTmp));
    }
  }
  void pack_pairs(const Xmm& odd, const Xmm& even) {
    if (avx512()) {
      pack_bf16_pairs(odd, even, k4);
    } else {
      pack_bf16_pairs(odd, even, vmm(kRoundTmp));
    }
  }
  void load_pairs_vector(const Xmm& v, const Address& at) {
    if (avx512()) {
      vmovdqu32(v, at);
    } else {
      vmovdqu(v, at);
    }
  }
  void store_pairs_vector(const Address& at, const Xmm& v) {
    if (avx512()) {
      vmovdqu32(at, v);
    } else {
      vmovdqu(at, v);
    }
  }
  // Every bf16 row of at least one pairs block, fused_add_rms_norm too. Its AVX-512 form (the
  // same helpers with masks) first ran on an AVX-512 host in session 29 (Zen 4): the exactness
  // and edge-row tests pass natively, and it is 1.4-1.7x the per-vector path on 1 thread
  // (docs/decisions.md, "Twenty-seventh round").
  bool pairs_path() const { return p_.dtype == DType::kBF16 && p_.hidden >= pairs_block(); }

  const ir::NormParams p_;
  const bool fused_;
  const int esize_;
  const Reg64 reg_dst_ = r8, reg_src_ = r9, reg_res_ = r10, reg_w_ = r11;
  const Reg64 reg_dst_stride_ = r12, reg_src_stride_ = r13, reg_res_stride_ = r14;
  const Reg64 reg_row_ = r15, reg_row_end_ = rbx, reg_idx_ = rbp;
  // rsi and rdi are free once the arguments are read: the next row's input and its
  // residual (fused) or output (rms_norm), for prefetching.
  const Reg64 reg_next_src_ = rsi, reg_next_res_ = rdi;
};

}  // namespace

Result<std::vector<uint8_t>> generate_norm(const OpSpec& spec, X86Isa isa) {
  NormGenerator gen(isa, spec.get<ir::NormParams>(), spec.op == OpKind::kFusedAddRmsNorm);
  gen.generate();
  return gen.finish();
}

}  // namespace jit::codegen::x86
