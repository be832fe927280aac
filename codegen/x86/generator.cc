#include "codegen/x86/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>

namespace jit::codegen::x86 {

using namespace Xbyak;

namespace {
// Upper bound of one kernel's code (an overflow is a compile error, not a crash): a flash fp8
// write at amx is ~54 KB (four quantiser step variants per span, each with its fallback), a
// rope-fused write at head size 1024 ~116 KB.
constexpr size_t kMaxCodeBytes = 128 * 1024;
// Callee-saved registers of the SysV ABI that kernels may use.
const Reg64 kSaved[] = {util::rbx, util::rbp, util::r12, util::r13, util::r14, util::r15};
}  // namespace

Generator::Generator(X86Isa isa)
    : CodeGenerator(kMaxCodeBytes, DontSetProtectRWE), isa_(isa), avx512_(isa >= X86Isa::kAvx512) {}

Xbyak::Xmm Generator::vmm(int idx) const {
  return avx512_ ? Xmm(Zmm(idx)) : Xmm(Ymm(idx));
}

std::vector<int> Generator::free_registers() const {
  std::vector<int> regs;
  for (int i = 0; i < 13; ++i) regs.push_back(i);
  if (avx512_) {
    for (int i = 16; i < 32; ++i) regs.push_back(i);
  }
  return regs;
}

void Generator::emit_steps(int64_t count, int64_t max_in_line, const Xbyak::Operand& counter,
                           std::initializer_list<std::pair<Reg64, int64_t>> cursors,
                           const std::function<void(int64_t)>& step) {
  if (count <= max_in_line) {
    for (int64_t i = 0; i < count; ++i) step(i);
    return;
  }
  Xbyak::Label l_step;
  mov(counter, count);
  L(l_step);
  step(0);
  for (const auto& [reg, bytes] : cursors) add(reg, bytes);
  dec(counter);
  jnz(l_step, T_NEAR);
  for (const auto& [reg, bytes] : cursors) sub(reg, count * bytes);
}

void Generator::prologue() {
  // Six pushes (48 bytes) plus 8 keep rsp 16-byte aligned with the staging buffer at [rsp].
  for (const Reg64& r : kSaved) push(r);
  sub(rsp, kStageBytes + 8);
}

void Generator::epilogue() {
  vzeroupper();  // avoid AVX-SSE transition penalties in the caller
  add(rsp, kStageBytes + 8);
  for (int i = int(std::size(kSaved)) - 1; i >= 0; --i) pop(kSaved[i]);
  ret();
}

Result<std::vector<uint8_t>> Generator::finish() {
  // Constant pool: each constant replicated across a full zmm so that both ISAs can use it
  // as a full-width memory operand.
  align(64);
  for (auto& [bits, label] : constants_) {
    L(*label);
    for (int i = 0; i < 16; ++i) dd(bits);
  }
  for (auto& [values, label] : tables_) {
    L(*label);
    for (uint32_t v : values) dd(v);
  }
  for (auto& [values, label] : blocks_) {
    align(64);
    L(*label);
    for (uint32_t v : values) dd(v);
  }
  if (int err = Xbyak::GetError()) {
    Xbyak::ClearError();
    return Status(StatusCode::kCompileError,
                  fmt::format("x86 emitter error: {}", Xbyak::ConvertErrorToString(err)));
  }
  ready();  // resolves labels (no protection change: DontSetProtectRWE)
  if (int err = Xbyak::GetError()) {
    Xbyak::ClearError();
    return Status(StatusCode::kCompileError,
                  fmt::format("x86 label resolution error: {}", Xbyak::ConvertErrorToString(err)));
  }
  return std::vector<uint8_t>(getCode(), getCode() + getSize());
}

const Xbyak::Operand& Generator::cst(float value) {
  return cst_bits(std::bit_cast<uint32_t>(value));
}

const Xbyak::Operand& Generator::cst_bits(uint32_t bits) {
  if (auto pinned = pinned_constants_.find(bits); pinned != pinned_constants_.end()) {
    return pinned->second;
  }
  return pool_bits(bits);
}

const Xbyak::Address& Generator::pool_bits(uint32_t bits) {
  auto& label = constants_[bits];
  if (!label) label = std::make_unique<Label>();
  return constant_addresses_.try_emplace(bits, ptr[rip + *label]).first->second;
}

void Generator::pin_constants(std::span<const uint32_t> bits, std::span<const int> regs) {
  if (!pinned_constants_.empty() || bits.size() > regs.size()) {
    throw std::logic_error("pin_constants: nested, or fewer registers than constants");
  }
  for (size_t i = 0; i < bits.size(); ++i) {
    const Xmm reg = vmm(regs[i]);
    vmovups(reg, cst_bits(bits[i]));  // the pool stores full vectors
    pinned_constants_.emplace(bits[i], reg);
  }
}

void Generator::unpin_constants() {
  pinned_constants_.clear();
}

Xbyak::Address Generator::cst_block(std::vector<uint32_t> values) {
  blocks_.emplace_back(std::move(values), std::make_unique<Label>());
  return ptr[rip + *blocks_.back().second];
}

Xbyak::Address Generator::cst_table(const std::array<uint32_t, 16>& values) {
  auto& label = tables_[values];
  if (!label) label = std::make_unique<Label>();
  return ptr[rip + *label];
}

namespace {
// vpermi2ps index tables; indices 0..15 select from the first source, 16..31 the second.
// Evens (parity 0) or odds (parity 1) of the 32-element pair stream (a, b):
std::array<uint32_t, 16> deinterleave_table(uint32_t parity) {
  std::array<uint32_t, 16> t{};
  for (uint32_t i = 0; i < 16; ++i) t[i] = 2 * i + parity;
  return t;
}
// Pairs 8*half .. 8*half+7 of (even, odd) interleaved: e_k, o_k, e_k+1, o_k+1, ...
std::array<uint32_t, 16> interleave_table(uint32_t half) {
  std::array<uint32_t, 16> t{};
  for (uint32_t i = 0; i < 16; ++i) t[i] = (i % 2 ? 16 : 0) + 8 * half + i / 2;
  return t;
}
}  // namespace

void Generator::load_pairs(const Xmm& even, const Xmm& odd, const Xmm& a, const Xmm& b, DType dtype,
                           const RegExp& addr, int count) {
  const int first = std::min(count * 2, lanes());
  const int second = count * 2 - first;
  load_f32(a, dtype, addr, first);
  if (second > 0) {
    load_f32(b, dtype, addr + lanes() * int(dtype_size(dtype)), second);
  } else {
    vxorps(b, b, b);
  }
  // a = [e0 o0 e1 o1 ...], b = the next pairs.
  if (avx512_) {
    vmovups(even, cst_table(deinterleave_table(0)));
    vpermi2ps(even, a, b);
    vmovups(odd, cst_table(deinterleave_table(1)));
    vpermi2ps(odd, a, b);
  } else {
    // Within 128-bit lanes shufps picks [a0 a2 b0 b2] / [a1 a3 b1 b3]; the 64-bit permute
    // 0,2,1,3 then restores the order across lanes.
    vshufps(even, a, b, 0x88);
    vpermpd(Ymm(even.getIdx()), Ymm(even.getIdx()), 0xD8);
    vshufps(odd, a, b, 0xDD);
    vpermpd(Ymm(odd.getIdx()), Ymm(odd.getIdx()), 0xD8);
  }
}

void Generator::store_pairs(const Xmm& even, const Xmm& odd, const Xmm& a, const Xmm& b,
                            DType dtype, const RegExp& addr, int count) {
  if (avx512_) {
    // a = [e0 o0 ... e7 o7], b = [e8 o8 ... e15 o15]
    vmovups(a, cst_table(interleave_table(0)));
    vpermi2ps(a, even, odd);
    vmovups(b, cst_table(interleave_table(1)));
    vpermi2ps(b, even, odd);
  } else {
    // unpck*ps interleave within 128-bit lanes; vperm2f128 puts the lanes in order.
    vunpcklps(a, even, odd);  // [e0 o0 e1 o1 | e4 o4 e5 o5]
    vunpckhps(b, even, odd);  // [e2 o2 e3 o3 | e6 o6 e7 o7]
    vperm2f128(Ymm(15), Ymm(a.getIdx()), Ymm(b.getIdx()), 0x20);
    vperm2f128(Ymm(b.getIdx()), Ymm(a.getIdx()), Ymm(b.getIdx()), 0x31);
    vmovaps(Ymm(a.getIdx()), Ymm(15));
  }
  const int first = std::min(count * 2, lanes());
  const int second = count * 2 - first;
  store_f32(a, dtype, addr, first);
  if (second > 0) store_f32(b, dtype, addr + lanes() * int(dtype_size(dtype)), second);
}

void Generator::set_tail_mask(int count) {
  mov(eax, (1u << count) - 1);
  kmovw(k1, eax);
}

void Generator::copy_bytes(const RegExp& dst, const RegExp& src, int bytes) {
  int done = 0;
  for (; bytes - done >= 8; done += 8) {
    mov(rax, qword[src + done]);
    mov(qword[dst + done], rax);
  }
  if (bytes - done >= 4) {
    mov(eax, dword[src + done]);
    mov(dword[dst + done], eax);
    done += 4;
  }
  if (bytes - done >= 2) {
    mov(ax, word[src + done]);
    mov(word[dst + done], ax);
    done += 2;
  }
  if (bytes - done >= 1) {
    mov(al, byte[src + done]);
    mov(byte[dst + done], al);
  }
}

void Generator::stage_zero() {
  const Xmm zero = vmm(13);
  uni_vpxor(zero, zero, zero);
  vmovups(ptr[rsp], zero);
  vmovups(ptr[rsp + 32], zero);
}

void Generator::load_f32(const Xmm& dst, DType dtype, const RegExp& addr, int count) {
  const bool tail = count < lanes();
  RegExp src = addr;
  if (tail && !avx512_) {
    // AVX2 has no masked 16-bit loads: stage the tail bytes in a zeroed buffer.
    stage_zero();
    copy_bytes(RegExp(rsp), addr, count * int(dtype_size(dtype)));
    src = RegExp(rsp);
  }
  const bool masked = tail && avx512_;
  if (masked) set_tail_mask(count);
  const Xmm d = masked ? (dst | k1 | T_z) : dst;
  switch (dtype) {
    case DType::kF32: vmovups(d, ptr[src]); break;
    case DType::kBF16:
      // bf16 is the top half of an fp32: widen the 16-bit lanes and shift them up.
      vpmovzxwd(d, ptr[src]);
      vpslld(dst, dst, 16);
      break;
    case DType::kF16: vcvtph2ps(d, ptr[src]); break;
    default: break;  // rejected by supports()
  }
}

void Generator::divide_unsigned(int64_t divisor) {
  if (std::has_single_bit(uint64_t(divisor))) {
    mov(rdx, rax);
    and_(rdx, divisor - 1);
    shr(rax, std::countr_zero(uint64_t(divisor)));
    return;
  }
  xor_(edx, edx);
  mov(rcx, divisor);
  div(rcx);
}

void Generator::split_bf16_pairs(const Xmm& even, const Xmm& odd, const Xmm& v) {
  vpslld(even, v, 16);
  uni_vpand(odd, v, cst_bits(0xFFFF0000));
}

void Generator::add_bf16_rounding_bias(const Xmm& x, const Xmm& tmp) {
  vpsrld(tmp, x, 16);
  uni_vpand(tmp, tmp, cst_bits(1));
  vpaddd(x, x, tmp);
  vpaddd(x, x, cst_bits(0x7FFF));
}

void Generator::round_bits_to_bf16(const Xmm& x, const Xmm& tmp) {
  add_bf16_rounding_bias(x, tmp);
  uni_vpand(x, x, cst_bits(0xFFFF0000));
}

void Generator::pack_bf16_pairs(const Xmm& odd, const Xmm& even, const Xmm& tmp) {
  add_bf16_rounding_bias(even, tmp);
  add_bf16_rounding_bias(odd, tmp);
  vpsrld(even, even, 16);
  // Words 0, 2, 4, 6 of each 128-bit lane (each dword's low half) from even: one blend where
  // a mask and an or took two vector uops (AVX2 has no vpternlogd).
  constexpr uint8_t kLowWords = 0x55;
  vpblendw(odd, odd, even, kLowWords);
}

void Generator::add_bf16_rounding_bias(const Xmm& x, const Xbyak::Opmask& k) {
  vptestmd(k, x, cst_bits(0x10000));
  vpaddd(x, x, cst_bits(0x7FFF));
  vpaddd(x | k, x, cst_bits(1));
}

void Generator::round_bits_to_bf16(const Xmm& x, const Xbyak::Opmask& k) {
  add_bf16_rounding_bias(x, k);
  vpandd(x, x, cst_bits(0xFFFF0000));
}

void Generator::round_bits_to_bf16_ties_away(const Xmm& x) {
  vpaddd(x, x, cst_bits(0x8000));
  uni_vpand(x, x, cst_bits(0xFFFF0000));
}

void Generator::pack_bf16_pairs(const Xmm& odd, const Xmm& even, const Xbyak::Opmask& k) {
  add_bf16_rounding_bias(even, k);
  add_bf16_rounding_bias(odd, k);
  vpsrld(even, even, 16);
  constexpr uint8_t kOddTopOrEven = 0xEC;  // (odd & mask) | even
  vpternlogd(odd, even, cst_bits(0xFFFF0000), kOddTopOrEven);
}

void Generator::bf16_round_bits(const Xmm& x) {
  // Round to nearest even on the 16 dropped bits: x + 0x7FFF + (bit 16 of x), then clear the
  // low half. NaN lanes would carry into the exponent, so they keep x with the quiet bit set.
  const Xmm t = vmm(14);
  vpsrld(t, x, 16);
  uni_vpand(t, t, cst_bits(1));
  vpaddd(t, t, cst_bits(0x7FFF));
  vpaddd(t, t, x);
  if (avx512_) {
    vcmpps(k2, x, x, 3 /* unordered: NaN */);
    vpord(t | k2, x, cst_bits(0x00400000));
  } else {
    const Xmm nan = vmm(15);
    vcmpps(nan, x, x, 3);
    uni_vpor(x, x, cst_bits(0x00400000));
    vblendvps(t, t, x, nan);
  }
  uni_vpand(x, t, cst_bits(0xFFFF0000));
}

namespace {
constexpr uint8_t kDenormalClass = 0x20;  // vfpclassps category bit 5
}  // namespace

template <class Fast, class Exact>
void Generator::unless_denormal(const Xmm& x, Fast fast, Exact exact) {
  Label l_exact, l_done;
  vfpclassps(k2, x, kDenormalClass);
  kortestw(k2, k2);
  jnz(l_exact, T_NEAR);
  fast();
  jmp(l_done, T_NEAR);
  L(l_exact);
  exact();
  L(l_done);
}

void Generator::round_to(const Xmm& x, DType dtype) {
  if (dtype == DType::kBF16 && has_bf16_convert()) {
    // vcvtneps2bf16 rounds to nearest even like bf16_round_bits, in one instruction.
    unless_denormal(
        x,
        [&] {
          vcvtneps2bf16(Ymm(13), Zmm(x.getIdx()));
          vpmovzxwd(x, Ymm(13));
          vpslld(x, x, 16);
        },
        [&] { bf16_round_bits(x); });
  } else if (dtype == DType::kBF16) {
    bf16_round_bits(x);
  } else if (dtype == DType::kF16) {
    const Xmm half = avx512_ ? Xmm(Ymm(13)) : Xmm(13);
    vcvtps2ph(half, x, 0 /* round to nearest even */);
    vcvtph2ps(x, half);
  }
}

void Generator::store_f32(const Xmm& src, DType dtype, const RegExp& addr, int count) {
  const bool tail = count < lanes();
  const bool staged = tail && !avx512_;
  const RegExp dst = staged ? RegExp(rsp) : addr;
  const bool masked = tail && avx512_;
  if (masked) set_tail_mask(count);
  auto mem = [&] { return masked ? (ptr[dst] | k1) : ptr[dst]; };
  switch (dtype) {
    case DType::kF32: vmovups(mem(), src); break;
    case DType::kF16: vcvtps2ph(mem(), src, 0 /* round to nearest even */); break;
    case DType::kBF16: {
      if (has_bf16_convert()) {
        unless_denormal(
            src,
            [&] {
              vcvtneps2bf16(masked ? (Ymm(13) | k1 | T_z) : Ymm(13), Zmm(src.getIdx()));
              vmovdqu16(mem(), Ymm(13));
            },
            [&] {
              vmovaps(vmm(13), src);
              bf16_round_bits(vmm(13));
              vpsrld(vmm(13), vmm(13), 16);
              vpmovdw(mem(), Zmm(13));
            });
        break;
      }
      const Xmm bits = vmm(13);
      vmovaps(bits, src);
      bf16_round_bits(bits);
      vpsrld(bits, bits, 16);
      if (avx512_) {
        vpmovdw(mem(), Zmm(13));
      } else {
        // Pack dwords to words within each 128-bit lane, then gather lanes 0 and 2.
        vpackusdw(Ymm(13), Ymm(13), Ymm(13));
        vpermq(Ymm(13), Ymm(13), 0xD8);
        vmovdqu(ptr[dst], Xmm(13));
      }
      break;
    }
    default: break;
  }
  if (staged) copy_bytes(addr, RegExp(rsp), count * int(dtype_size(dtype)));
}

void Generator::round_multiply_store(const Xmm& a, const Xmm& b, DType dtype, const RegExp& dst,
                                     int count, const Xmm& t0, const Xmm& t1) {
  if (dtype == DType::kBF16 && has_bf16_convert() && count == lanes()) {
    const Ymm packed(t0.getIdx());
    const Zmm product(t1.getIdx());
    Label l_exact, l_done;
    vcvtneps2bf16(packed, Zmm(a.getIdx()));
    vpmovzxwd(product, packed);
    vpslld(product, product, 16);
    vmulps(product, product, Zmm(b.getIdx()));
    vfpclassps(k2, Zmm(a.getIdx()), kDenormalClass);
    vfpclassps(k3, product, kDenormalClass);
    kortestw(k2, k3);
    jnz(l_exact, T_NEAR);
    vcvtneps2bf16(packed, product);
    vmovdqu16(ptr[dst], packed);
    jmp(l_done, T_NEAR);
    L(l_exact);
    round_to(a, dtype);
    vmulps(a, a, b);
    store_f32(a, dtype, dst, count);
    L(l_done);
    return;
  }
  round_to(a, dtype);
  vmulps(a, a, b);
  store_f32(a, dtype, dst, count);
}

// Halves x's live width down to lane 0 (256-bit halves, 128-bit halves, pairs, neighbours),
// combining by add or max; vmm14 is scratch.
void Generator::fold_lanes(const Xmm& x, bool max) {
  const int i = x.getIdx();
  const auto op = [&](const Xmm& d, const Xmm& a, const Xmm& b) {
    if (max) {
      vmaxps(d, a, b);
    } else {
      vaddps(d, a, b);
    }
  };
  if (avx512_) {
    vextractf64x4(Ymm(14), Zmm(i), 1);
    op(Ymm(i), Ymm(i), Ymm(14));
  }
  vextractf128(Xmm(14), Ymm(i), 1);
  op(Xmm(i), Xmm(i), Xmm(14));
  vmovhlps(Xmm(14), Xmm(14), Xmm(i));
  op(Xmm(i), Xmm(i), Xmm(14));
  vmovshdup(Xmm(14), Xmm(i));
  if (max) {
    vmaxss(Xmm(i), Xmm(i), Xmm(14));
  } else {
    vaddss(Xmm(i), Xmm(i), Xmm(14));
  }
}

void Generator::reduce_sum(const Xmm& x) {
  fold_lanes(x, false);
}

void Generator::broadcast_max(const Xmm& x) {
  fold_lanes(x, true);
  vbroadcastss(x, Xmm(x.getIdx()));
}

void Generator::uni_vpand(const Xmm& d, const Xmm& a, const Operand& b) {
  if (avx512_) {
    vpandd(d, a, b);
  } else {
    vpand(d, a, b);
  }
}

void Generator::uni_vpor(const Xmm& d, const Xmm& a, const Operand& b) {
  if (avx512_) {
    vpord(d, a, b);
  } else {
    vpor(d, a, b);
  }
}

void Generator::uni_vpxor(const Xmm& d, const Xmm& a, const Operand& b) {
  if (avx512_) {
    vpxord(d, a, b);
  } else {
    vpxor(d, a, b);
  }
}

void Generator::uni_round_nearest(const Xmm& d, const Xmm& a) {
  if (avx512_) {
    vrndscaleps(d, a, 0);  // imm 0: round to nearest even, scale 2^0
  } else {
    vroundps(d, a, 0);
  }
}

void Generator::select_by_sign(const Xmm& d, const Xmm& sign, const Xmm& if_negative,
                               const Xmm& otherwise) {
  if (avx512_) {
    vpmovd2m(k2, sign);
    vblendmps(d | k2, otherwise, if_negative);
  } else {
    vblendvps(d, otherwise, if_negative, sign);
  }
}

void Generator::reciprocal(const Group& d, const Group& x, const Group& t) {
  if (!avx512_) {
    // vrcpps (1.5 * 2^-12) plus one Newton step leaves up to 2^-24: 1/1 would come out as
    // 0.99999994. AVX2 is the fallback path, so it divides (correctly rounded).
    for (size_t u = 0; u < d.size(); ++u) vmovups(t[u], cst(1.0f));
    for (size_t u = 0; u < d.size(); ++u) vdivps(d[u], t[u], x[u]);
    return;
  }
  for (size_t u = 0; u < d.size(); ++u) vrcp14ps(d[u], x[u]);
  if (bf16_accuracy_) return;
  for (size_t u = 0; u < d.size(); ++u) vmovaps(t[u], x[u]);
  for (size_t u = 0; u < d.size(); ++u) vfnmadd213ps(t[u], d[u], cst(2.0f));  // 2 - x d
  for (size_t u = 0; u < d.size(); ++u) vmulps(d[u], d[u], t[u]);
}

void Generator::keep_if_greater(const Xmm& d, const Xmm& a, const Xmm& b) {
  constexpr uint8_t kGreaterOrdered = 0x1E;  // _CMP_GT_OQ: false for NaN
  if (avx512_) {
    vcmpps(k2, a, b, kGreaterOrdered);
    vmovaps(d | k2 | T_z, a);
  } else {
    const Xmm mask = vmm(15);
    vcmpps(mask, a, b, kGreaterOrdered);
    vandps(d, a, mask);
  }
}

// The math injectors below work on groups of independent vectors and emit each step for
// every member before the next step: the long dependency chains of exp/erfc then overlap
// instead of filling the scheduler with waiting uops.

void Generator::exp_ps(const Group& x, const Group& t0, const Group& t1, bool bounded) {
  const auto each = [&](auto step) {
    for (size_t u = 0; u < x.size(); ++u) step(x[u], t0[u], t1[u]);
  };
  if (avx512_ && bf16_accuracy_) {
    // e^x = 2^a, a = x log2 e, split as 2^floor(a) * 2^f with f = a - floor(a) in [0, 1)
    // (vreduceps), 2^f = 1 + f (c1 + f (c2 + f c3)) (relative-minimax cubic, max relative
    // error 8.6e-5 = 1/45 of a bf16 ulp), and vscalefps multiplies by 2^floor(a) with IEEE
    // overflow to inf and gradual underflow. The rounding of a costs |a| 2^-24 <= 9e-6
    // relative. No clamp: +-inf give inf / 0, NaN stays NaN (vreduceps maps +-inf to 0).
    constexpr uint8_t kFloorFraction = 0x09;  // imm: M = 0, suppress #P, round down
    each([&](auto& v, auto& a, auto&) { vmulps(a, v, cst(1.44269504088896341f)); });
    each([&](auto& v, auto& a, auto&) { vreduceps(v, a, kFloorFraction); });
    each([&](auto&, auto&, auto& p) { vmovups(p, cst(0.07706379145383835f)); });
    for (float c : {0.2276485413312912f, 0.6951159834861755f, 1.0f}) {
      each([&](auto& v, auto&, auto& p) { vfmadd213ps(p, v, cst(c)); });
    }
    each([&](auto& v, auto& a, auto& p) { vscalefps(v, p, a); });
    return;
  }
  // Clamp to [-104, 89]: below, e^x rounds to 0; above, it overflows to inf. x is the second
  // operand of max/min so that a NaN x passes through. A bounded caller's x cannot overflow:
  // only the lower bound.
  each([&](auto& v, auto& a, auto&) { vmovups(a, cst(-104.0f)); });
  each([&](auto& v, auto& a, auto&) { vmaxps(v, a, v); });
  if (!bounded) {
    each([&](auto& v, auto& a, auto&) { vmovups(a, cst(89.0f)); });
    each([&](auto& v, auto& a, auto&) { vminps(v, a, v); });
  }
  // n = round(x / ln2); r = x - n ln2 with ln2 split in a high part exact in fp32 and a low
  // correction, so r has no cancellation error.
  // AVX2: by the shifter S = 1.5·2^23, s = x log2 e + S in one FMA rounds the exact product
  // to the integer n (|n| < 2^22: the ulp at S is 1), n = s - S exactly, and s's bits are
  // S's bits + n: the integer n for the 2^n below costs a vpsubd instead of a vcvtps2dq, and
  // the rounding no vroundps (two uops on the FP ports, which bind this loop on AVX2). p holds
  // s until the polynomial needs it.
  constexpr float kShifter = 12582912.0f;
  if (avx512_) {
    each([&](auto& v, auto& a, auto&) { vmulps(a, v, cst(1.44269504088896341f)); });
    each([&](auto&, auto& a, auto&) { uni_round_nearest(a, a); });
  } else {
    each([&](auto&, auto&, auto& p) { vmovups(p, cst(kShifter)); });
    each([&](auto& v, auto&, auto& p) { vfmadd231ps(p, v, cst(1.44269504088896341f)); });
    each([&](auto&, auto& a, auto& p) { vsubps(a, p, cst(kShifter)); });
  }
  each([&](auto& v, auto& a, auto&) { vfnmadd231ps(v, a, cst(0.693359375f)); });
  each([&](auto& v, auto& a, auto&) { vfnmadd231ps(v, a, cst(-2.12194440e-4f)); });
  if (!avx512_) {  // a = the integer n (bounded: n + 64 + 127) from s's bits; p free again
    const uint32_t shifter_bits = std::bit_cast<uint32_t>(kShifter) - (bounded ? 64 + 127 : 0);
    each([&](auto&, auto& a, auto& p) { vpsubd(a, p, cst_bits(shifter_bits)); });
  }
  // e^r = 1 + r + r^2 P(r), |r| <= ln2/2: Cephes expf coefficients (~1 ulp), or at bf16
  // accuracy the Taylor terms up to r^4 (error r^5/120 <= 4.3e-5 relative, 1/90 of a bf16 ulp).
  if (bf16_accuracy_) {
    each([&](auto&, auto&, auto& p) { vmovups(p, cst(1.0f / 24.0f)); });
    for (float c : {1.0f / 6.0f, 0.5f}) {
      each([&](auto& v, auto&, auto& p) { vfmadd213ps(p, v, cst(c)); });
    }
  } else {
    each([&](auto&, auto&, auto& p) { vmovups(p, cst(1.9875691500e-4f)); });
    for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
                    5.0000001201e-1f}) {
      each([&](auto& v, auto&, auto& p) { vfmadd213ps(p, v, cst(c)); });
    }
  }
  each([&](auto& v, auto&, auto& p) { vmulps(p, p, v); });
  each([&](auto& v, auto&, auto& p) { vfmadd213ps(p, v, v); });  // r^2 P(r) + r
  each([&](auto&, auto&, auto& p) { vaddps(p, p, cst(1.0f)); });
  if (avx512_) {
    // vscalefps multiplies by 2^n with IEEE overflow to inf and gradual underflow.
    each([&](auto& v, auto& a, auto& p) { vscalefps(v, p, a); });
    return;
  }
  if (bounded) {
    // x in [-104, 40]: n in [-150, 58], so 2^(n + 64) is a normal float, its bits the biased
    // exponent n + 64 + 127 (from s's bits above) << 23; p times it is exact, and the multiply
    // by 2^-64 rounds once into the denormals, as vscalefps does. Float multiplies keep a NaN
    // p a NaN (an integer add to its bits would not).
    each([&](auto&, auto& a, auto&) { vpslld(a, a, 23); });
    each([&](auto&, auto& a, auto& p) { vmulps(p, p, a); });
    each([&](auto& v, auto&, auto& p) { vmulps(v, p, cst(0x1p-64f)); });
    return;
  }
  // 2^n with n in [-151, 129] as 2^n1 * 2^n2, n1 = n >> 1, n2 = n - n1, each a normal float.
  each([&](auto& v, auto& a, auto&) { vpsrad(v, a, 1); });
  each([&](auto& v, auto& a, auto&) { vpsubd(a, a, v); });
  each([&](auto& v, auto&, auto&) { vpaddd(v, v, cst_bits(127)); });
  each([&](auto& v, auto&, auto&) { vpslld(v, v, 23); });
  each([&](auto&, auto& a, auto&) { vpaddd(a, a, cst_bits(127)); });
  each([&](auto&, auto& a, auto&) { vpslld(a, a, 23); });
  each([&](auto& v, auto&, auto& p) { vmulps(p, p, v); });
  each([&](auto& v, auto& a, auto& p) { vmulps(v, p, a); });
}

void Generator::log_ps(const Group& x, const Group& t0, const Group& t1) {
  const size_t n = x.size();
  // e = exponent field - 126, m = mantissa with exponent 126: x = m 2^e, m in [0.5, 1).
  for (size_t u = 0; u < n; ++u) vpsrld(t0[u], x[u], 23);
  for (size_t u = 0; u < n; ++u) vpsubd(t0[u], t0[u], cst_bits(126));
  for (size_t u = 0; u < n; ++u) uni_vpand(x[u], x[u], cst_bits(0x007FFFFF));
  for (size_t u = 0; u < n; ++u) uni_vpor(x[u], x[u], cst_bits(0x3F000000));
  for (size_t u = 0; u < n; ++u) vcvtdq2ps(t0[u], t0[u]);
  // m < sqrt(1/2): use 2m - 1 and e - 1, else m - 1 (so u is in [-0.293, 0.414)).
  for (size_t u = 0; u < n; ++u) vmovups(t1[u], cst(0.707106781186547524f));
  for (size_t u = 0; u < n; ++u) vsubps(t1[u], x[u], t1[u]);  // sign: m < sqrt(1/2)
  for (size_t u = 0; u < n; ++u) vsubps(x[u], x[u], cst(1.0f));
  // the small branch's u = m - 1 + m, e - 1: stage m in a shifted copy via the sign select
  for (size_t u = 0; u < n; ++u) {
    // vmm13 = e - 1, vmm14 = (m - 1) + m = 2m - 1
    vsubps(vmm(13), t0[u], cst(1.0f));
    vaddps(vmm(14), x[u], x[u]);
    vaddps(vmm(14), vmm(14), cst(1.0f));
    select_by_sign(t0[u], t1[u], vmm(13), t0[u]);
    select_by_sign(x[u], t1[u], vmm(14), x[u]);
  }
  // P(u), Cephes logf, Horner from the highest coefficient.
  static constexpr float kP[] = {7.0376836292e-2f,  -1.1514610310e-1f, 1.1676998740e-1f,
                                 -1.2420140846e-1f, 1.4249322787e-1f,  -1.6668057665e-1f,
                                 2.0000714765e-1f,  -2.4999993993e-1f, 3.3333331174e-1f};
  for (size_t u = 0; u < n; ++u) vmovups(t1[u], cst(kP[0]));
  for (int i = 1; i < int(std::size(kP)); ++i) {
    for (size_t u = 0; u < n; ++u) vfmadd213ps(t1[u], x[u], cst(kP[i]));
  }
  // y = u^3 P(u) + e ln2_lo - u^2/2;  ln x = u + y + e ln2_hi
  for (size_t u = 0; u < n; ++u) vmulps(t1[u], t1[u], x[u]);
  for (size_t u = 0; u < n; ++u) vmulps(t1[u], t1[u], x[u]);
  for (size_t u = 0; u < n; ++u) vmulps(t1[u], t1[u], x[u]);
  for (size_t u = 0; u < n; ++u) vfmadd231ps(t1[u], t0[u], cst(-2.12194440e-4f));
  for (size_t u = 0; u < n; ++u) {
    vmulps(vmm(13), x[u], x[u]);
    vfnmadd231ps(t1[u], vmm(13), cst(0.5f));
  }
  for (size_t u = 0; u < n; ++u) vaddps(x[u], x[u], t1[u]);
  for (size_t u = 0; u < n; ++u) vfmadd231ps(x[u], t0[u], cst(0.693359375f));
}

void Generator::rotate_pair(const Xmm& x, const Xmm& y, const Xmm& c, const Xmm& s, const Xmm& a,
                            const Xmm& b, DType dtype, bool on_bits) {
  if (on_bits && !avx512_) {
    // No masks: each rounding needs a temporary, b before its product, c after its last use.
    vmulps(a, x, c);
    round_bits_to_bf16(a, b);
    vmulps(b, y, s);
    vmulps(y, y, c);
    round_bits_to_bf16(b, c);
    round_bits_to_bf16(y, c);
    vmulps(x, x, s);
    round_bits_to_bf16(x, c);
    vaddps(y, y, x);
    vsubps(x, a, b);
    return;
  }
  int product = 0;
  const auto round = [&](const Xmm& v) {
    if (on_bits) {
      round_bits_to_bf16(v, Xbyak::Opmask(2 + product++));  // k2..k5: independent chains
    } else {
      round_to(v, dtype);
    }
  };
  vmulps(a, x, c);
  round(a);
  vmulps(b, y, s);
  round(b);
  vmulps(y, y, c);
  round(y);
  vmulps(x, x, s);
  round(x);
  vaddps(y, y, x);
  vsubps(x, a, b);
}

void Generator::sigmoid_ps(const Group& dst, const Group& x, const Group& t0, const Group& t1,
                           const Group& t2, const Group& t3) {
  const size_t n = x.size();
  // t0 = e = exp(-|x|)
  for (size_t u = 0; u < n; ++u) uni_vpor(t0[u], x[u], cst_bits(0x80000000));  // -|x|
  exp_ps(t0, t1, t2, /*bounded=*/true);
  for (size_t u = 0; u < n; ++u) vaddps(t1[u], t0[u], cst(1.0f));  // 1 + e, in [1, 2]
  if (avx512_ && n <= 5) {
    // The x < 0 lanes (sign bit set, masks k2..k6) multiply 1/(1+e) by e under the mask.
    for (size_t u = 0; u < n; ++u) vpmovd2m(Xbyak::Opmask(int(2 + u)), x[u]);
    reciprocal(dst, t1, t3);
    for (size_t u = 0; u < n; ++u) vmulps(dst[u] | Xbyak::Opmask(int(2 + u)), dst[u], t0[u]);
    return;
  }
  reciprocal(t2, t1, t3);                                      // 1/(1+e): x >= 0
  for (size_t u = 0; u < n; ++u) vmulps(t3[u], t0[u], t2[u]);  // e/(1+e): x < 0
  for (size_t u = 0; u < n; ++u) select_by_sign(dst[u], x[u], t3[u], t2[u]);
}

void Generator::tanh_ps(const Group& x, const Group& t0, const Group& t1, const Group& t2,
                        const Group& t3) {
  const size_t n = x.size();
  // Large branch: t0 = 1 - 2 / (e^{2|x|} + 1), with |x| capped at 10 (tanh(10) rounds to 1 in
  // fp32) so that the reciprocal's argument stays finite.
  for (size_t u = 0; u < n; ++u) uni_vpand(t0[u], x[u], cst_bits(0x7FFFFFFF));
  for (size_t u = 0; u < n; ++u) vmovups(t1[u], cst(10.0f));
  for (size_t u = 0; u < n; ++u) vminps(t0[u], t1[u], t0[u]);
  for (size_t u = 0; u < n; ++u) vaddps(t0[u], t0[u], t0[u]);
  exp_ps(t0, t1, t2, /*bounded=*/true);  // 2|x| <= 20
  for (size_t u = 0; u < n; ++u) vaddps(t0[u], t0[u], cst(1.0f));
  reciprocal(t1, t0, t2);
  for (size_t u = 0; u < n; ++u) vmovups(t0[u], cst(1.0f));
  for (size_t u = 0; u < n; ++u) vfnmadd231ps(t0[u], t1[u], cst(2.0f));  // 1 - 2/(e+1)
  // Restore the sign of x.
  for (size_t u = 0; u < n; ++u) uni_vpand(t1[u], x[u], cst_bits(0x80000000));
  for (size_t u = 0; u < n; ++u) uni_vpor(t0[u], t0[u], t1[u]);
  // Small branch: t2 = x + x z P(z), z = x^2.
  for (size_t u = 0; u < n; ++u) vmulps(t1[u], x[u], x[u]);
  for (size_t u = 0; u < n; ++u) vmovups(t2[u], cst(-5.70498872745e-3f));
  for (float c : {2.06390887954e-2f, -5.37397155531e-2f, 1.33314422036e-1f, -3.33332819422e-1f}) {
    for (size_t u = 0; u < n; ++u) vfmadd213ps(t2[u], t1[u], cst(c));
  }
  for (size_t u = 0; u < n; ++u) vmulps(t2[u], t2[u], t1[u]);
  for (size_t u = 0; u < n; ++u) vfmadd213ps(t2[u], x[u], x[u]);  // x + x z P(z)
  // Select: |x| < 0.625 -> small branch. Using the sign of (|x| - 0.625) as the selector;
  // a NaN x reaches both branches as NaN.
  for (size_t u = 0; u < n; ++u) uni_vpand(t3[u], x[u], cst_bits(0x7FFFFFFF));
  for (size_t u = 0; u < n; ++u) vsubps(t3[u], t3[u], cst(0.625f));
  for (size_t u = 0; u < n; ++u) select_by_sign(x[u], t3[u], t2[u], t0[u]);
}

void Generator::silu_ps(const Group& x, const Group& t0, const Group& t1, const Group& t2,
                        const Group& t3, const Group& t4) {
  if (bf16_accuracy_) {
    // silu(x) = x e / (1 + e) with e = e^min(x, 20). Above 20 the sigmoid is within 2e-9 of
    // 1, far below the reciprocal's 2^-14; the clamp keeps e and 1 + e finite (x > 88.7 would
    // give inf / inf). Below, e is tiny or denormal and the products keep its relative
    // accuracy. Error of e / (1 + e): e's 8.6e-5 (AVX2: 4.3e-5) damped by 1 / (1 + e), plus
    // the reciprocal's: vrcp14ps's 2^-14, or on AVX2 vrcpps's 1.5·2^-12 after one Newton step
    // r' = r (2 - d r), below 2^-22 (no vdivps: its throughput bound this loop there).
    // A NaN x leaves the clamp as 20 and comes back in the last product.
    const size_t n = x.size();
    for (size_t u = 0; u < n; ++u) vminps(t0[u], x[u], cst(20.0f));
    exp_ps(t0, t1, t2, /*bounded=*/true);
    for (size_t u = 0; u < n; ++u) vaddps(t1[u], t0[u], cst(1.0f));
    if (avx512_) {
      for (size_t u = 0; u < n; ++u) vrcp14ps(t2[u], t1[u]);
    } else {
      for (size_t u = 0; u < n; ++u) vrcpps(t2[u], t1[u]);
      for (size_t u = 0; u < n; ++u) vfnmadd213ps(t1[u], t2[u], cst(2.0f));  // 2 - d r
      for (size_t u = 0; u < n; ++u) vmulps(t2[u], t2[u], t1[u]);
    }
    for (size_t u = 0; u < n; ++u) vmulps(t0[u], t0[u], t2[u]);  // sigmoid(x)
    for (size_t u = 0; u < n; ++u) vmulps(x[u], x[u], t0[u]);
    return;
  }
  sigmoid_ps(t4, x, t0, t1, t2, t3);
  for (size_t u = 0; u < x.size(); ++u) vmulps(x[u], x[u], t4[u]);
}

void Generator::gelu_erf_ps(const Group& x, const Group& t0, const Group& t1, const Group& t2,
                            const Group& t3) {
  const size_t n = x.size();
  // z = |x| / sqrt(2), capped at 12 where erfc(z) < 1e-63 is 0 in fp32 anyway (the cap keeps
  // the reciprocal below finite; min() with z second lets NaN through).
  for (size_t u = 0; u < n; ++u) uni_vpand(t0[u], x[u], cst_bits(0x7FFFFFFF));
  for (size_t u = 0; u < n; ++u) vmulps(t0[u], t0[u], cst(0.70710678118654752f));
  for (size_t u = 0; u < n; ++u) vmovups(t1[u], cst(12.0f));
  for (size_t u = 0; u < n; ++u) vminps(t0[u], t1[u], t0[u]);
  // t = 1 / (1 + z/2), 1 + z/2 in [1, 7]
  for (size_t u = 0; u < n; ++u) vmovups(t2[u], cst(0.5f));
  for (size_t u = 0; u < n; ++u) vfmadd213ps(t2[u], t0[u], cst(1.0f));
  reciprocal(t1, t2, t3);
  // P(t), Horner from the highest coefficient.
  static constexpr float kP[] = {0.17087277f, -0.82215223f, 1.48851587f, -1.13520398f,
                                 0.27886807f, -0.18628806f, 0.09678418f, 0.37409196f,
                                 1.00002368f, -1.26551223f};
  for (size_t u = 0; u < n; ++u) vmovups(t2[u], cst(kP[0]));
  for (int i = 1; i < int(std::size(kP)); ++i) {
    for (size_t u = 0; u < n; ++u) vfmadd213ps(t2[u], t1[u], cst(kP[i]));
  }
  // P(t) - z^2 with z^2 = x^2/2 taken exactly: x^2 = hi + lo (the FMA gives lo), and halving
  // is exact. Rounding z itself first would cost ~z^2 * 2^-23 relative in exp(-z^2): 200 ulp
  // at z = 9.
  // |x| is capped like z (at 17 > 12 sqrt 2) so that x^2 stays finite.
  for (size_t u = 0; u < n; ++u) uni_vpand(t0[u], x[u], cst_bits(0x7FFFFFFF));
  for (size_t u = 0; u < n; ++u) vmovups(t3[u], cst(17.0f));
  for (size_t u = 0; u < n; ++u) vminps(t0[u], t3[u], t0[u]);
  for (size_t u = 0; u < n; ++u) vmulps(t3[u], t0[u], t0[u]);            // hi
  for (size_t u = 0; u < n; ++u) vfmadd231ps(t2[u], t3[u], cst(-0.5f));  // P - hi/2
  for (size_t u = 0; u < n; ++u) vfmsub231ps(t3[u], t0[u], t0[u]);       // x*x - hi = lo
  for (size_t u = 0; u < n; ++u) vfmadd231ps(t2[u], t3[u], cst(-0.5f));  // - lo/2
  exp_ps(t2, t0, t3);
  for (size_t u = 0; u < n; ++u) vmulps(t1[u], t1[u], t2[u]);  // erfc(z)
  // factor = x < 0 ? erfc : 2 - erfc
  for (size_t u = 0; u < n; ++u) vmovups(t0[u], cst(2.0f));
  for (size_t u = 0; u < n; ++u) vsubps(t0[u], t0[u], t1[u]);
  for (size_t u = 0; u < n; ++u) select_by_sign(t0[u], x[u], t1[u], t0[u]);
  for (size_t u = 0; u < n; ++u) vmulps(x[u], x[u], cst(0.5f));
  for (size_t u = 0; u < n; ++u) vmulps(x[u], x[u], t0[u]);
}

void Generator::gelu_tanh_ps(const Group& x, const Group& t0, const Group& t1, const Group& t2,
                             const Group& t3, const Group& t4) {
  const size_t n = x.size();
  // 2u = 2 sqrt(2/pi) x (1 + 0.044715 x^2)
  for (size_t u = 0; u < n; ++u) vmulps(t4[u], x[u], x[u]);
  for (size_t u = 0; u < n; ++u) vmulps(t4[u], t4[u], cst(0.044715f));
  for (size_t u = 0; u < n; ++u) vaddps(t4[u], t4[u], cst(1.0f));
  for (size_t u = 0; u < n; ++u) vmulps(t4[u], t4[u], x[u]);
  for (size_t u = 0; u < n; ++u) vmulps(t4[u], t4[u], cst(2.0f * 0.7978845608028654f));
  sigmoid_ps(t4, t4, t0, t1, t2, t3);
  for (size_t u = 0; u < n; ++u) vmulps(x[u], x[u], t4[u]);
}

}  // namespace jit::codegen::x86

namespace jit::codegen::x86 {

// ---- fp8 ---------------------------------------------------------------------------------
//
// A minifloat with E exponent bits, M mantissa bits and bias B = 2^(E-1) - 1 (e4m3: 4, 3, 7;
// e5m2: 5, 2, 15) shares the layout of an fp32 (8, 23, 127) except for the widths, so the
// conversions move fields with shifts and fix up the ranges where the layouts differ:
//   s = 23 - M       fp32 mantissa bits below the fp8 mantissa
//   R = 127 - B      exponent rebias (e4m3 120, e5m2 112)
//   q = 2^(1-B-M)    the subnormal quantum (e4m3 2^-9, e5m2 2^-16); min normal = 2^M q.
Generator::Fp8Layout Generator::fp8_layout(DType format) {
  if (format == DType::kFp8E5m2) return {2, 112, 0x7B, 0x7E, 128.0f, 0x1p-16f};
  return {3, 120, 0x7E, 0x7F, 16384.0f, 0x1p-9f};
}

namespace {

constexpr uint32_t kF32Sign = 0x80000000u;
constexpr uint32_t kF32Abs = 0x7FFFFFFFu;
constexpr uint32_t kF32Inf = 0x7F800000u;
constexpr uint8_t kCmpGreater = 6;  // vpcmpd predicate: signed >
}  // namespace

// Encode a = |x| (sign restored at the end). Three ranges, each computed branch-free for every
// lane and then selected:
//
// normal, a >= 2^(1-B): round the fp32 mantissa to M bits, nearest even, with the add-bias
//   trick on the integer bits:  r = a + (2^(s-1) - 1) + ((a >> s) & 1).
//   Adding just under half of the dropped quantum rounds up exactly when the dropped bits
//   exceed the half; the kept LSB added on top turns the exact half into round-to-even. A
//   mantissa carry ripples into the exponent field, which is the correct next binade. The
//   code is then  (r - R·2^23) >> s : the shift drops the rounded-off bits and lines the fp32
//   exponent field up with the fp8 one; subtracting R·2^23 (a multiple of 2^s) rebiases it.
//   Codes above the largest finite one (overflow, inf) are clamped to it: saturation. For
//   e4m3 the clamp also covers (448, 464], which rounds to 0x7F (the NaN pattern).
// subnormal, a < 2^(1-B): the fp8 grid there is the fixed quantum q. With C = 2^23 q, the
//   float sum a + C lies in [2^23 q, 2^24 q), whose fp32 spacing is exactly q, so the FPU's
//   own round-to-nearest-even rounds a to a multiple of q:  bits(a + C) - bits(C) = RNE(a/q),
//   in 0 .. 2^M (2^M is the min normal code, the correct carry). fp32 denormal inputs are far
//   below q/2 and give 0 whether or not DAZ treats them as zero.
// NaN, a > 0x7F800000: the NaN code.
void Generator::fp8_encode(const Xmm& x, DType format) {
  const Fp8Layout f = fp8_layout(format);
  const int s = 23 - f.mantissa_bits;
  const uint32_t bias_add = (1u << (s - 1)) - 1 - (uint32_t(f.rebias) << 23);  // mod 2^32
  const uint32_t min_normal = uint32_t(f.rebias + 1) << 23;
  const Xmm sign = vmm(13), normal = vmm(14), mask = vmm(15);
  uni_vpand(sign, x, cst_bits(kF32Sign));
  uni_vpand(x, x, cst_bits(kF32Abs));
  vpsrld(normal, x, s);
  uni_vpand(normal, normal, cst_bits(1));
  vpaddd(normal, normal, x);
  vpaddd(normal, normal, cst_bits(bias_add));
  vpsrld(normal, normal, s);
  vpminsd(normal, normal, cst_bits(f.max_code));
  if (avx512_) {
    vpcmpd(k2, x, cst_bits(kF32Inf), kCmpGreater);
    vmovdqu32(normal | k2, cst_bits(f.nan_code));
    vpcmpd(k2, x, cst_bits(min_normal - 1), kCmpGreater);
    vaddps(x, x, cst(f.subnormal_magic));
    vpsubd(x, x, cst(f.subnormal_magic));
    vmovdqa32(x | k2, normal);
  } else {
    vpcmpgtd(mask, x, cst_bits(kF32Inf));
    vblendvps(normal, normal, cst_bits(f.nan_code), mask);
    vpcmpgtd(mask, x, cst_bits(min_normal - 1));
    vaddps(x, x, cst(f.subnormal_magic));
    vpsubd(x, x, cst(f.subnormal_magic));
    vblendvps(x, x, normal, mask);
  }
  vpsrld(sign, sign, 24);
  uni_vpor(x, x, sign);
}

// Decode m = code & 0x7F (sign bit moved to bit 31 at the end):
//   normal (exponent field != 0): the fields shift into place, bits = (m << s) + R·2^23;
//   subnormal: m·q, with float(m) exact and q a power of two (no fp32 denormal arithmetic);
//   specials: the normal formula would give a finite value; e4m3 0x7F (NaN) adds
//   0x7FC00000 - (0x7F << 20 + R·2^23), e5m2 0x7C..0x7F add R·2^23 to reach exponent 255
//   (mantissa 0: inf, else NaN, as in ir/numeric.h).
void Generator::fp8_decode(const Xmm& x, DType format) {
  const Fp8Layout f = fp8_layout(format);
  const int s = 23 - f.mantissa_bits;
  const uint32_t rebias_bits = uint32_t(f.rebias) << 23;
  const bool e5m2 = format == DType::kFp8E5m2;
  const uint32_t e4m3_nan_fix = 0x7FC00000u - ((0x7Fu << s) + rebias_bits);
  const Xmm sign = vmm(13), normal = vmm(14), t = vmm(15);
  uni_vpand(sign, x, cst_bits(0x80));
  vpslld(sign, sign, 24);
  uni_vpand(x, x, cst_bits(0x7F));
  vpslld(normal, x, s);
  vpaddd(normal, normal, cst_bits(rebias_bits));
  if (avx512_) {
    if (e5m2) {
      vpcmpd(k2, x, cst_bits(f.max_code), kCmpGreater);
      vpaddd(normal | k2, normal, cst_bits(rebias_bits));
    } else {
      vpcmpeqd(k2, x, cst_bits(0x7F));
      vpaddd(normal | k2, normal, cst_bits(e4m3_nan_fix));
    }
    vcvtdq2ps(t, x);
    vmulps(t, t, cst(f.quantum));
    vpcmpd(k2, x, cst_bits((1u << f.mantissa_bits) - 1), kCmpGreater);
    vmovaps(x, t);
    vmovdqa32(x | k2, normal);
  } else {
    if (e5m2) {
      vpcmpgtd(t, x, cst_bits(f.max_code));
      vpand(t, t, cst_bits(rebias_bits));
    } else {
      vpcmpeqd(t, x, cst_bits(0x7F));
      vpand(t, t, cst_bits(e4m3_nan_fix));
    }
    vpaddd(normal, normal, t);
    vcvtdq2ps(t, x);
    vmulps(t, t, cst(f.quantum));
    vpcmpgtd(x, x, cst_bits((1u << f.mantissa_bits) - 1));
    vblendvps(x, t, normal, x);
  }
  uni_vpor(x, x, sign);
}

void Generator::load_fp8(const Xmm& dst, const RegExp& addr, int count) {
  const bool tail = count < lanes();
  if (avx512_) {
    if (tail) set_tail_mask(count);
    vpmovzxbd(tail ? (dst | k1 | T_z) : dst, ptr[addr]);
    return;
  }
  RegExp src = addr;
  if (tail) {
    stage_zero();
    copy_bytes(RegExp(rsp), addr, count);
    src = RegExp(rsp);
  }
  vpmovzxbd(dst, ptr[src]);
}

void Generator::store_fp8(const Xmm& codes, const RegExp& addr, int count) {
  const bool tail = count < lanes();
  if (avx512_) {
    if (tail) set_tail_mask(count);
    vpmovdb(tail ? (ptr[addr] | k1) : ptr[addr], Zmm(codes.getIdx()));
    return;
  }
  // Within each 128-bit lane: dwords -> words -> bytes (codes are 0..255, so the saturating
  // packs are exact), then the two lanes' four bytes side by side.
  vpackusdw(Ymm(13), Ymm(codes.getIdx()), Ymm(codes.getIdx()));
  vpackuswb(Ymm(13), Ymm(13), Ymm(13));
  vextracti128(Xmm(14), Ymm(13), 1);
  vpunpckldq(Xmm(13), Xmm(13), Xmm(14));
  if (!tail) {
    vmovq(ptr[addr], Xmm(13));
    return;
  }
  vmovq(ptr[rsp], Xmm(13));
  copy_bytes(addr, RegExp(rsp), count);
}

void Generator::copy_span(const Reg64& dst, const Reg64& src, int64_t bytes, const Reg64& counter,
                          bool streaming) {
  const int width = lanes() * 4;
  int64_t vectors = bytes / width;
  const int rem = int(bytes % width);
  constexpr int kUnroll = 4;
  auto move = [&](int i, int64_t offset) {
    const Xmm v = vmm(13 + i % 2);
    vmovups(v, ptr[src + offset]);
    if (streaming) {
      vmovntps(ptr[dst + offset], v);
    } else {
      vmovups(ptr[dst + offset], v);
    }
  };
  if (vectors >= 2 * kUnroll) {
    Label l_loop;
    mov(counter, vectors / kUnroll);
    L(l_loop);
    for (int i = 0; i < kUnroll; ++i) move(i, int64_t(i) * width);
    add(src, kUnroll * width);
    add(dst, kUnroll * width);
    dec(counter);
    jnz(l_loop, T_NEAR);
    vectors %= kUnroll;
  }
  for (int64_t i = 0; i < vectors; ++i) move(int(i), i * width);
  copy_tail(dst, src, vectors * width, rem);
}

void Generator::jump_if_below_streaming(int64_t bytes_per_row, Label& l_below, int64_t min_bytes) {
  mov(rax, rdx);
  sub(rax, rsi);
  imul(rax, rax, int(std::min(bytes_per_row, min_bytes)));
  cmp(rax, int(min_bytes));
  jl(l_below, T_NEAR);
}

void Generator::copy_span_backward(const Reg64& dst, const Reg64& src, int64_t bytes,
                                   const Reg64& counter) {
  const int width = lanes() * 4;
  const int64_t vectors = bytes / width;
  constexpr int kUnroll = 4;
  auto move = [&](int i, int64_t offset) {
    const Xmm v = vmm(13 + i % 2);
    vmovups(v, ptr[src + offset]);
    vmovups(ptr[dst + offset], v);
  };
  // The tail (the highest addresses) first, then the vectors from the last one down: those
  // above the loop's steps, then the steps (which end at the span's start).
  copy_tail(dst, src, vectors * width, int(bytes % width));
  const int64_t looped = vectors >= 2 * kUnroll ? vectors / kUnroll * kUnroll : 0;
  for (int64_t i = vectors - 1; i >= looped; --i) move(int(i), i * width);
  if (looped == 0) return;
  Label l_loop;
  mov(rax, looped * width);
  add(src, rax);
  add(dst, rax);
  mov(counter, looped / kUnroll);
  L(l_loop);
  sub(src, kUnroll * width);
  sub(dst, kUnroll * width);
  for (int i = kUnroll - 1; i >= 0; --i) move(i, int64_t(i) * width);
  dec(counter);
  jnz(l_loop, T_NEAR);
}

void Generator::copy_tail(const Reg64& dst, const Reg64& src, int64_t done, int rem) {
  if (rem == 0) return;
  if (avx512_) {
    mov(rax, (uint64_t(1) << rem) - 1);
    kmovq(k1, rax);
    vmovdqu8(Zmm(13) | k1 | T_z, ptr[src + done]);
    vmovdqu8(ptr[dst + done] | k1, Zmm(13));
    return;
  }
  int tail_done = 0;
  if (rem >= 16) {
    vmovdqu(Xmm(13), ptr[src + done]);
    vmovdqu(ptr[dst + done], Xmm(13));
    tail_done = 16;
  }
  copy_bytes(dst + int(done + tail_done), src + int(done + tail_done), rem - tail_done);
}

}  // namespace jit::codegen::x86
