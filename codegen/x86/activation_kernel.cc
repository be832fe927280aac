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
// intermediate rounding vLLM's GPU kernels (and PyTorch eager) perform. The bf16 pairs path
// rounds the activation (an approximation at bf16 accuracy) to nearest with ties away from
// zero, the product to nearest even (Generator::round_bits_to_bf16_ties_away says why).
#include <algorithm>
#include <bit>
#include <cstddef>

#include "codegen/x86/generator.h"
#include "codegen/x86/kernels.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;

class ActivationGenerator : public Generator {
 public:
  ActivationGenerator(X86Isa isa, OpKind op, const ir::ActivationParams& p)
      : Generator(isa), op_(op), p_(p), esize_(int(dtype_size(p.dtype))) {
    set_bf16_accuracy(p.dtype == DType::kBF16);
  }

  void generate() {
    prologue();
    mov(reg_dst_, ptr[rdi + offsetof(ActivationCallArgs, dst)]);
    mov(reg_src_, ptr[rdi + offsetof(ActivationCallArgs, src)]);
    mov(reg_dst_stride_, ptr[rdi + offsetof(ActivationCallArgs, dst_row_stride)]);
    mov(reg_src_stride_, ptr[rdi + offsetof(ActivationCallArgs, src_row_stride)]);
    allocate_registers();
    vbroadcastss(vmm(param0_), ptr[rdi + offsetof(ActivationCallArgs, threshold)]);
    if (op_ == OpKind::kSwigluoaiAndMul) {
      vbroadcastss(vmm(param0_), ptr[rdi + offsetof(ActivationCallArgs, alpha)]);
      vbroadcastss(vmm(limit_), ptr[rdi + offsetof(ActivationCallArgs, limit)]);
      vxorps(vmm(neg_limit_), vmm(neg_limit_), vmm(neg_limit_));
      vsubps(vmm(neg_limit_), vmm(neg_limit_), vmm(limit_));
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
  // Registers: the three scalar parameters take the last free registers; the rest are
  // split into kUnroll groups of (x, y, t0..t4).
  static constexpr int kRegsPerVector = 7;

  void allocate_registers() {
    std::vector<int> regs = free_registers();
    param0_ = regs.back(), limit_ = regs[regs.size() - 2], neg_limit_ = regs[regs.size() - 3];
    if (!avx512()) {
      // AVX2 (13 registers): the scalar parameters only where the op reads them; one member
      // per slot for the per-vector step, and a second one for the slots a pairs step uses.
      const int params = op_ == OpKind::kSwigluoaiAndMul ? 3 : op_ == OpKind::kFatreluAndMul;
      regs.resize(regs.size() - size_t(params));
      unroll_ = 1;
      for (int r = 0; r < kRegsPerVector; ++r) slots_[r].push_back(vmm(regs[size_t(r)]));
      const int pair_slots = 2 + pair_temporaries();
      if (op_ == OpKind::kSwigluoaiAndMul || kRegsPerVector + pair_slots > int(regs.size())) {
        return;  // no pairs path
      }
      for (int r = 0; r < pair_slots; ++r) {
        slots_[r].push_back(vmm(regs[size_t(kRegsPerVector + r)]));
      }
      for (size_t i = size_t(kRegsPerVector + pair_slots); i < regs.size(); ++i) {
        constant_regs_.push_back(regs[i]);
      }
      return;
    }
    regs.resize(regs.size() - 3);
    unroll_ = std::min<int>(kMaxUnroll, int(regs.size()) / kRegsPerVector);
    for (int u = 0; u < unroll_; ++u) {
      for (int r = 0; r < kRegsPerVector; ++r) {
        slots_[r].push_back(vmm(regs[size_t(u * kRegsPerVector + r)]));
      }
    }
    // The pairs step uses the first two members of each slot: the rest, and the registers no
    // slot took, hold its constants.
    for (int u = 2; u < unroll_; ++u) {
      for (int r = 0; r < kRegsPerVector; ++r) {
        constant_regs_.push_back(regs[size_t(u * kRegsPerVector + r)]);
      }
    }
    for (size_t i = size_t(unroll_ * kRegsPerVector); i < regs.size(); ++i) {
      constant_regs_.push_back(regs[i]);
    }
  }

  // The constants of a pairs step, most used first (as many as there are spare registers are
  // pinned; the rest stay memory operands): the rounding and packing ones, then silu's. The
  // exp cubic's leading coefficient is left in the pool on purpose: it only starts the Horner
  // chain (a copy), and a zmm register copy takes a vector-port uop here (not eliminated,
  // measured) where a load from the pool takes a load port, which this loop has to spare.
  std::vector<uint32_t> pairs_constants() const {
    std::vector<uint32_t> bits(kBf16PairsConstants.begin(), kBf16PairsConstants.end());
    if (op_ != OpKind::kFatreluAndMul) bits.push_back(0x8000);  // ..._ties_away
    if (op_ == OpKind::kSiluAndMul || op_ == OpKind::kMulAndSilu) {
      for (float c :
           {1.0f, 1.44269504088896341f, 20.0f, 0.2276485413312912f, 0.6951159834861755f}) {
        bits.push_back(std::bit_cast<uint32_t>(c));
      }
    }
    bits.resize(std::min(bits.size(), constant_regs_.size()));
    return bits;
  }

  // The first `n` members of register slot `r` (0 = x, 1 = y, 2.. = temporaries), or all it
  // has (AVX2 gives a second member only to the slots a pairs step uses).
  Group slot(int r, int n) const {
    const auto members = std::min<ptrdiff_t>(n, ptrdiff_t(slots_[r].size()));
    return Group(slots_[r].begin(), slots_[r].begin() + members);
  }

  // One row: a loop over groups of `unroll_` whole vectors, then single vectors, then a masked
  // tail.
  void row() {
    if (pairs_path()) {
      pairs_row();
      return;
    }
    const int64_t block = int64_t(unroll_) * lanes();
    const int64_t blocks = p_.d / block;
    if (blocks > 0) {
      Label l_loop;
      xor_(reg_idx_, reg_idx_);
      L(l_loop);
      step(unroll_, lanes(), /*constant_offset=*/-1);
      add(reg_idx_, block);
      cmp(reg_idx_, blocks * block);
      jl(l_loop, T_NEAR);
    }
    int64_t offset = blocks * block;
    while (offset < p_.d) {
      const int count = int(std::min<int64_t>(lanes(), p_.d - offset));
      step(1, count, offset);
      offset += count;
    }
  }

  // Address of output element (index + `extra_elements`) of the row; `constant_offset` < 0
  // means "at the loop index".
  RegExp at(const Reg64& base, int64_t constant_offset, int64_t extra_elements,
            int elements_per_index) const {
    const int64_t extra = extra_elements * esize_;
    if (constant_offset >= 0) return base + (constant_offset * elements_per_index) * esize_ + extra;
    return base + reg_idx_ * (esize_ * elements_per_index) + extra;
  }

  // `n` vectors of `count` elements each (count < lanes only when n == 1).
  void step(int n, int count, int64_t constant_offset) {
    const Group x = slot(0, n), y = slot(1, n);
    const Group t0 = slot(2, n), t1 = slot(3, n), t2 = slot(4, n), t3 = slot(5, n), t4 = slot(6, n);
    const auto each = [&](auto f) {
      for (int u = 0; u < n; ++u) f(u, int64_t(u) * lanes());
    };
    if (op_ == OpKind::kSwigluoaiAndMul) {
      each([&](int u, int64_t e) {
        load_pairs(x[u], y[u], t0[u], t1[u], p_.dtype, at(reg_src_, constant_offset, 2 * e, 2),
                   count);
      });
      swiglu(x, y, t0, t1, t2, t3, t4);
      each([&](int u, int64_t e) {
        store_f32(x[u], p_.dtype, at(reg_dst_, constant_offset, e, 1), count);
      });
      return;
    }
    each([&](int u, int64_t e) {
      load_f32(x[u], p_.dtype, at(reg_src_, constant_offset, e, 1), count);
    });
    each([&](int u, int64_t e) {
      load_f32(y[u], p_.dtype, at(reg_src_, constant_offset, p_.d + e, 1), count);
    });
    // The activated operand is rounded to T before the product (the spec's rnd_T(act)).
    const Group& activated = op_ == OpKind::kMulAndSilu ? y : x;
    switch (op_) {
      case OpKind::kSiluAndMul:
      case OpKind::kMulAndSilu: silu_ps(activated, t0, t1, t2, t3, t4); break;
      case OpKind::kGeluAndMul: gelu_erf_ps(activated, t0, t1, t2, t3); break;
      case OpKind::kGeluTanhAndMul: gelu_tanh_ps(activated, t0, t1, t2, t3, t4); break;
      case OpKind::kFatreluAndMul:
        each([&](int u, int64_t) { keep_if_greater(x[u], x[u], vmm(param0_)); });
        break;
      default: break;
    }
    if (op_ == OpKind::kFatreluAndMul) {  // exact selection: nothing to round before the product
      each([&](int u, int64_t) { vmulps(x[u], x[u], y[u]); });
      each([&](int u, int64_t e) {
        store_f32(x[u], p_.dtype, at(reg_dst_, constant_offset, e, 1), count);
      });
      return;
    }
    const Group& other = op_ == OpKind::kMulAndSilu ? x : y;
    each([&](int u, int64_t e) {
      round_multiply_store(activated[u], other[u], p_.dtype, at(reg_dst_, constant_offset, e, 1),
                           count, t0[u], t1[u]);
    });
  }

  // ---- The bf16 pairs path (AVX512_BF16, and AVX2): a dword of the row holds elements 2i
  // (low half) and 2i+1 (high half). A shift and an and split 2·lanes elements into two fp32
  // vectors (no widening shuffle), and both roundings are done on the fp32 bits, so a step
  // costs no vcvtneps2bf16 (2 cycles per 16 lanes here) and needs no denormal guard (nor, on
  // AVX2, the per-vector path's widening loads and narrowing packs).
  // 2 KiB of bf16. On Zen 5 the step runs in 5.5 ns per 32 outputs, so 1 KiB ahead (16 steps,
  // ~90 ns) came in short of a DRAM miss: 64 MB at d 8192 / 16384 on 1 thread 2.75-3.37 ->
  // 2.54-2.82 ms and 2.54-2.97 -> 2.22-2.41 ms (three alternated rounds, best of 3 each; 3 KiB
  // level with 2, 8 KiB worse; docs/decisions.md, "Thirty-first round").
  static constexpr int64_t kPrefetchElements = 1024;

  // The temporaries (slots 2..) the op's activation takes in a pairs step.
  int pair_temporaries() const {
    switch (op_) {
      case OpKind::kSiluAndMul:
      case OpKind::kMulAndSilu: return 3;  // silu_ps at bf16 accuracy: t0..t2
      case OpKind::kGeluAndMul: return 4;
      case OpKind::kGeluTanhAndMul: return 5;
      default: return 1;  // fatrelu: none, but AVX2's pack takes t0
    }
  }

  // AVX-512 with BF16: 32 elements per step; AVX2: 16, where the slots have their second
  // member (allocate_registers: silu, mul_silu, gelu, fatrelu).
  bool pairs_path() const {
    if (p_.dtype != DType::kBF16 || op_ == OpKind::kSwigluoaiAndMul || p_.d < pair_elements()) {
      return false;
    }
    if (!avx512()) return slots_[2].size() >= 2;
    return has_bf16_convert() && unroll_ >= 2;
  }
  int64_t pair_elements() const { return 2 * lanes(); }

  void pairs_row() {
    const int64_t elements = pair_elements(), steps = p_.d / elements;
    pin_constants(pairs_constants(), constant_regs_);
    Label l_loop;
    xor_(reg_idx_, reg_idx_);
    L(l_loop);
    pairs_step(/*constant_offset=*/-1);
    add(reg_idx_, elements);
    cmp(reg_idx_, steps * elements);
    jl(l_loop, T_NEAR);
    unpin_constants();
    // The rest of the row (fewer than one step) through the per-vector step.
    int64_t offset = steps * elements;
    while (offset < p_.d) {
      const int count = int(std::min<int64_t>(lanes(), p_.d - offset));
      step(1, count, offset);
      offset += count;
    }
  }

  void pairs_step(int64_t constant_offset) {
    const Group x = slot(0, 2), y = slot(1, 2);  // member 0: even elements, 1: odd
    const Group t0 = slot(2, 2), t1 = slot(3, 2), t2 = slot(4, 2), t3 = slot(5, 2), t4 = slot(6, 2);
    const auto split = [&](const Group& dst, const RegExp& addr) {
      vmovups(dst[1], ptr[addr]);
      split_bf16_pairs(dst[0], dst[1], dst[1]);
    };
    // Software prefetch 2 KiB ahead on the three streams (x, y read; out written, so
    // prefetchw takes its line in exclusive state): at this kernel's compute rate the hardware
    // prefetcher alone leaves the loads exposed (64 MB silu_and_mul: ~50% -> 61-77% of copy).
    prefetcht0(ptr[at(reg_src_, constant_offset, kPrefetchElements, 1)]);
    prefetcht0(ptr[at(reg_src_, constant_offset, p_.d + kPrefetchElements, 1)]);
    prefetchw(ptr[at(reg_dst_, constant_offset, kPrefetchElements, 1)]);
    split(x, at(reg_src_, constant_offset, 0, 1));
    split(y, at(reg_src_, constant_offset, p_.d, 1));
    const Group& activated = op_ == OpKind::kMulAndSilu ? y : x;
    const Group& other = op_ == OpKind::kMulAndSilu ? x : y;
    switch (op_) {
      case OpKind::kSiluAndMul:
      case OpKind::kMulAndSilu: silu_ps(activated, t0, t1, t2, t3, t4); break;
      case OpKind::kGeluAndMul: gelu_erf_ps(activated, t0, t1, t2, t3); break;
      case OpKind::kGeluTanhAndMul: gelu_tanh_ps(activated, t0, t1, t2, t3, t4); break;
      case OpKind::kFatreluAndMul:
        for (int u = 0; u < 2; ++u) keep_if_greater(x[u], x[u], vmm(param0_));
        break;
      default: break;
    }
    for (int u = 0; u < 2; ++u) {
      // The activation is an approximation (bf16 accuracy), so its rounding to bf16 may
      // break ties away from zero; fatrelu selects exactly: nothing to round.
      if (op_ != OpKind::kFatreluAndMul) round_bits_to_bf16_ties_away(activated[u]);
      vmulps(activated[u], activated[u], other[u]);
    }
    // Pack: the even result's rounded bits shifted down, or'ed with the odd result's top half.
    // Every NaN here comes from a bf16 input or is the default NaN, so its low half is zero
    // and the integer rounding is exact for it too.
    if (avx512()) {
      pack_bf16_pairs(activated[1], activated[0], k2);
    } else {
      pack_bf16_pairs(activated[1], activated[0], t0[0]);
    }
    vmovups(ptr[at(reg_dst_, constant_offset, 0, 1)], activated[1]);
  }

  void swiglu(const Group& gate, const Group& up, const Group& t0, const Group& t1, const Group& t2,
              const Group& t3, const Group& s) {
    const size_t n = gate.size();
    // g = min(gate, limit), u = clamp(up, -limit, limit); the data operand goes second so
    // NaN propagates (KILN: vLLM's fminf would replace it by the bound).
    for (size_t u = 0; u < n; ++u) vminps(gate[u], vmm(limit_), gate[u]);
    for (size_t u = 0; u < n; ++u) vmaxps(up[u], vmm(neg_limit_), up[u]);
    for (size_t u = 0; u < n; ++u) vminps(up[u], vmm(limit_), up[u]);
    for (size_t u = 0; u < n; ++u) vmulps(s[u], gate[u], vmm(param0_));
    sigmoid_ps(s, s, t0, t1, t2, t3);
    for (size_t u = 0; u < n; ++u) vmulps(gate[u], gate[u], s[u]);
    for (size_t u = 0; u < n; ++u) vaddps(up[u], up[u], cst(1.0f));
    for (size_t u = 0; u < n; ++u) vmulps(gate[u], gate[u], up[u]);
  }

  static constexpr int kMaxUnroll = 3;

  const OpKind op_;
  const ir::ActivationParams p_;
  const int esize_;
  int unroll_ = 1;
  int param0_ = 0, limit_ = 0, neg_limit_ = 0;  // threshold/alpha, limit, -limit
  std::vector<Xmm> slots_[kRegsPerVector];
  std::vector<int> constant_regs_;  // free in the pairs step (allocate_registers)
  const Reg64 reg_dst_ = r8, reg_src_ = r9, reg_dst_stride_ = r10, reg_src_stride_ = r11;
  const Reg64 reg_row_ = r12, reg_row_end_ = r13, reg_idx_ = r14;
};

}  // namespace

Result<std::vector<uint8_t>> generate_activation(const OpSpec& spec, X86Isa isa) {
  ActivationGenerator gen(isa, spec.op, spec.get<ir::ActivationParams>());
  gen.generate();
  return gen.finish();
}

}  // namespace jit::codegen::x86
