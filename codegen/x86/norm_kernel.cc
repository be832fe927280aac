// rms_norm and fused_add_rms_norm.
//
// Per row (fp32 math, T = dtype):
//   fused only: z_i = rnd_T(x_i + r_i), written back to the residual row
//   ss  = sum_i z_i^2                      (4 independent accumulators, then a lane reduce)
//   inv = 1 / sqrt(ss / H + eps)           (vdivss/vsqrtss: correctly rounded steps)
//   y_i = rnd_T(rnd_T(z_i * inv) * w_i)    (without weight: rnd_T(z_i * inv))
// The second pass re-reads the row (the input, or the rounded residual just written), which
// is still in L1/L2 for every hidden size models use.
#include <bit>
#include <cstddef>

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
  void for_each_vector(Body body) {
    const int64_t block = int64_t(kUnroll) * lanes();
    const int64_t blocks = p_.hidden / block;
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
    int64_t offset = blocks * block;
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
    for_each_vector([&](int u, auto at, int count) {
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
    });
    vaddps(vmm(kAcc), vmm(kAcc), vmm(kAcc + 1));
    vaddps(vmm(kAcc + 2), vmm(kAcc + 2), vmm(kAcc + 3));
    vaddps(vmm(kAcc), vmm(kAcc), vmm(kAcc + 2));
    reduce_sum(vmm(kAcc));
  }

  void compute_inv() {
    // inv = 1 / sqrt(ss / H + eps), each step correctly rounded in fp32.
    const Xmm ss = Xmm(kAcc);
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
    const Xmm inv = vmm(kInvReg);  // set by compute_inv
    const Reg64& src = fused_ ? reg_res_ : reg_src_;
    for_each_vector([&](int u, auto at, int count) {
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
    });
  }

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
