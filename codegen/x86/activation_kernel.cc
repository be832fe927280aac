// The gated activations: out[i] = combine(act(x_i), y_i) over rows of input [2d] -> out [d].
//
//   silu_and_mul       rnd_T(rnd_T(silu(x)) * y)         x = input[:d], y = input[d:]
//   mul_and_silu       rnd_T(x * rnd_T(silu(y)))
//   gelu_and_mul       rnd_T(rnd_T(gelu_erf(x)) * y)
//   gelu_tanh_and_mul  rnd_T(rnd_T(gelu_tanh(x)) * y)
//   fatrelu_and_mul    rnd_T((x > threshold ? x : 0) * y)
//   swigluoai_and_mul  gate = input[2i], up = input[2i+1]; g = min(gate, limit),
//                      u = clamp(up, -limit, limit); rnd_T((u + 1) * g * sigmoid(alpha g))
// The activation is computed in fp32 with the injectors of Generator; rnd_T is the
// intermediate rounding vLLM's GPU kernels (and PyTorch eager) perform.
#include <cstddef>

#include "codegen/x86/generator.h"
#include "codegen/x86/kernels.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;

class ActivationGenerator : public Generator {
 public:
  ActivationGenerator(X86Isa isa, OpKind op, const ir::ActivationParams& p)
      : Generator(isa), op_(op), p_(p), esize_(int(dtype_size(p.dtype))) {}

  void generate() {
    prologue();
    mov(reg_dst_, ptr[rdi + offsetof(ActivationCallArgs, dst)]);
    mov(reg_src_, ptr[rdi + offsetof(ActivationCallArgs, src)]);
    mov(reg_dst_stride_, ptr[rdi + offsetof(ActivationCallArgs, dst_row_stride)]);
    mov(reg_src_stride_, ptr[rdi + offsetof(ActivationCallArgs, src_row_stride)]);
    vbroadcastss(vmm(kParam0), ptr[rdi + offsetof(ActivationCallArgs, threshold)]);
    if (op_ == OpKind::kSwigluoaiAndMul) {
      vbroadcastss(vmm(kParam0), ptr[rdi + offsetof(ActivationCallArgs, alpha)]);
      vbroadcastss(vmm(kLimit), ptr[rdi + offsetof(ActivationCallArgs, limit)]);
      vxorps(vmm(kNegLimit), vmm(kNegLimit), vmm(kNegLimit));
      vsubps(vmm(kNegLimit), vmm(kNegLimit), vmm(kLimit));
    }
    mov(reg_row_, rsi);
    mov(reg_row_end_, rdx);
    mov(rax, reg_row_);
    imul(rax, reg_src_stride_);
    add(reg_src_, rax);
    mov(rax, reg_row_);
    imul(rax, reg_dst_stride_);
    add(reg_dst_, rax);

    Label l_row, l_done;
    L(l_row);
    cmp(reg_row_, reg_row_end_);
    jge(l_done, T_NEAR);
    row();
    add(reg_src_, reg_src_stride_);
    add(reg_dst_, reg_dst_stride_);
    inc(reg_row_);
    jmp(l_row, T_NEAR);
    L(l_done);
    epilogue();
  }

 private:
  static constexpr int kX = 0, kY = 1;          // operands
  static constexpr int kT = 2;                  // 2..7 temporaries
  static constexpr int kParam0 = 9;             // threshold (fatrelu) or alpha (swigluoai)
  static constexpr int kLimit = 10, kNegLimit = 11;

  Xmm t(int i) const { return vmm(kT + i); }

  // One row: a loop over whole vectors of the output, then a masked tail.
  void row() {
    const int64_t vectors = p_.d / lanes();
    if (vectors > 0) {
      Label l_loop;
      xor_(reg_idx_, reg_idx_);
      L(l_loop);
      step(lanes(), /*constant_offset=*/-1);
      add(reg_idx_, lanes());
      cmp(reg_idx_, vectors * lanes());
      jl(l_loop, T_NEAR);
    }
    const int tail = int(p_.d % lanes());
    if (tail > 0) step(tail, vectors * lanes());
  }

  // Address of output element `j` (+ extra elements) in a row; `constant_offset` < 0 means
  // "at the loop index".
  RegExp at(const Reg64& base, int64_t constant_offset, int64_t extra_elements,
            int elements_per_index) const {
    const int64_t extra = extra_elements * esize_;
    if (constant_offset >= 0) return base + (constant_offset * elements_per_index) * esize_ + extra;
    return base + reg_idx_ * (esize_ * elements_per_index) + extra;
  }

  void step(int count, int64_t constant_offset) {
    const Xmm x = vmm(kX), y = vmm(kY);
    if (op_ == OpKind::kSwigluoaiAndMul) {
      load_interleaved(count, constant_offset);
      swiglu(x, y);
      store_f32(x, p_.dtype, at(reg_dst_, constant_offset, 0, 1), count);
      return;
    }
    load_f32(x, p_.dtype, at(reg_src_, constant_offset, 0, 1), count);
    load_f32(y, p_.dtype, at(reg_src_, constant_offset, p_.d, 1), count);
    switch (op_) {
      case OpKind::kSiluAndMul:
        silu_ps(x, t(0), t(1), t(2), t(3), t(4));
        round_to(x, p_.dtype);
        vmulps(x, x, y);
        break;
      case OpKind::kMulAndSilu:
        silu_ps(y, t(0), t(1), t(2), t(3), t(4));
        round_to(y, p_.dtype);
        vmulps(x, x, y);
        break;
      case OpKind::kGeluAndMul:
        gelu_erf_ps(x, t(0), t(1), t(2), t(3));
        round_to(x, p_.dtype);
        vmulps(x, x, y);
        break;
      case OpKind::kGeluTanhAndMul:
        gelu_tanh_ps(x, t(0), t(1), t(2), t(3), t(4));
        round_to(x, p_.dtype);
        vmulps(x, x, y);
        break;
      case OpKind::kFatreluAndMul:
        keep_if_greater(x, x, vmm(kParam0));
        vmulps(x, x, y);
        break;
      default:
        break;
    }
    store_f32(x, p_.dtype, at(reg_dst_, constant_offset, 0, 1), count);
  }

  // Loads `count` (gate, up) pairs: gate -> x, up -> y.
  void load_interleaved(int count, int64_t constant_offset) {
    const Xmm a = t(0), b = t(1);
    const int first = std::min(count * 2, lanes());
    const int second = count * 2 - first;
    load_f32(a, p_.dtype, at(reg_src_, constant_offset, 0, 2), first);
    if (second > 0) {
      load_f32(b, p_.dtype, at(reg_src_, constant_offset, lanes(), 2), second);
    } else {
      vxorps(b, b, b);
    }
    // a = [g0 u0 g1 u1 ...], b = the next pairs; split into evens and odds.
    if (avx512()) {
      vmovups(vmm(kX), cst_index(0));
      vpermi2ps(vmm(kX), a, b);  // x = evens of (a, b)
      vmovups(vmm(kY), cst_index(1));
      vpermi2ps(vmm(kY), a, b);  // y = odds
    } else {
      // Within 128-bit lanes: shufps picks [a0 a2 b0 b2] (evens) / [a1 a3 b1 b3] (odds); the
      // 64-bit permute 0,2,1,3 then restores the element order across lanes.
      vshufps(vmm(kX), a, b, 0x88);
      vpermpd(Ymm(kX), Ymm(kX), 0xD8);
      vshufps(vmm(kY), a, b, 0xDD);
      vpermpd(Ymm(kY), Ymm(kY), 0xD8);
    }
  }

  // Index vector for vpermi2ps: evens (parity 0) or odds (parity 1) of 32 elements.
  Address cst_index(int parity) {
    // The pool holds broadcast constants only, so build the index table in code instead.
    if (!index_labels_[parity]) index_labels_[parity] = std::make_unique<Label>();
    return ptr[rip + *index_labels_[parity]];
  }

 public:
  Result<std::vector<uint8_t>> finish_with_tables() {
    for (int parity = 0; parity < 2; ++parity) {
      if (!index_labels_[parity]) continue;
      align(64);
      L(*index_labels_[parity]);
      for (int i = 0; i < 16; ++i) dd(uint32_t(2 * i + parity));
    }
    return finish();
  }

 private:
  void swiglu(const Xmm& gate, const Xmm& up) {
    // g = min(gate, limit), u = clamp(up, -limit, limit); the data operand goes second so
    // NaN propagates (KILN: vLLM's fminf would replace it by the bound).
    vminps(gate, vmm(kLimit), gate);
    vmaxps(up, vmm(kNegLimit), up);
    vminps(up, vmm(kLimit), up);
    const Xmm s = t(4);
    vmulps(s, gate, vmm(kParam0));
    sigmoid_ps(s, t(0), t(1), t(2), t(3));
    vmulps(gate, gate, s);
    vaddps(up, up, cst(1.0f));
    vmulps(gate, gate, up);
  }

  const OpKind op_;
  const ir::ActivationParams p_;
  const int esize_;
  std::unique_ptr<Label> index_labels_[2];
  const Reg64 reg_dst_ = r8, reg_src_ = r9, reg_dst_stride_ = r10, reg_src_stride_ = r11;
  const Reg64 reg_row_ = r12, reg_row_end_ = r13, reg_idx_ = r14;
};

}  // namespace

Result<std::vector<uint8_t>> generate_activation(const OpSpec& spec, X86Isa isa) {
  ActivationGenerator gen(isa, spec.op, spec.get<ir::ActivationParams>());
  gen.generate();
  return gen.finish_with_tables();
}

}  // namespace jit::codegen::x86
