// Host ISA detection with Xbyak's CPUID wrapper (which also checks that the OS saves the
// AVX/AVX-512/AMX register state, via XGETBV).
#include <xbyak/xbyak_util.h>

#include "codegen/target.h"

namespace jit {

X86Isa x86_isa_of(const X86Features& f) {
  // Each level needs every one below it. AMX is often hidden in VMs of Sapphire Rapids-class
  // hosts, which keep VBMI and FP16 (avx512_fp16); Zen 4 has VBMI without FP16 (avx512_vbmi);
  // Ice Lake has VBMI without AVX512_BF16 (avx512).
  if (!f.avx2) return X86Isa::kNone;
  if (!f.avx512) return X86Isa::kAvx2;
  if (!f.avx512_bf16) return X86Isa::kAvx512;
  if (!f.avx512_vbmi) return X86Isa::kAvx512Bf16;
  if (!f.avx512_fp16) return X86Isa::kAvx512Vbmi;
  if (!f.amx) return X86Isa::kAvx512Fp16;
  return X86Isa::kAmx;
}

X86Isa detect_host_x86_isa() {
  static const X86Isa isa = [] {
    using Cpu = Xbyak::util::Cpu;
    const Cpu cpu;
    X86Features f;
    f.avx2 = cpu.has(Cpu::tAVX2) && cpu.has(Cpu::tFMA) && cpu.has(Cpu::tF16C);
    f.avx512 = cpu.has(Cpu::tAVX512F) && cpu.has(Cpu::tAVX512BW) && cpu.has(Cpu::tAVX512DQ) &&
               cpu.has(Cpu::tAVX512VL);
    f.avx512_bf16 = cpu.has(Cpu::tAVX512_BF16);
    f.avx512_vbmi = cpu.has(Cpu::tAVX512_VBMI);
    f.avx512_fp16 = cpu.has(Cpu::tAVX512_FP16);
    f.amx = cpu.has(Cpu::tAMX_TILE) && cpu.has(Cpu::tAMX_BF16) && cpu.has(Cpu::tAMX_INT8);
    return x86_isa_of(f);
  }();
  return isa;
}

const HostCoreTraits& host_core_traits() {
  static const HostCoreTraits traits = [] {
    using Cpu = Xbyak::util::Cpu;
    const Cpu cpu;
    constexpr int kZen5Family = 0x1A;
    const bool zen5 = cpu.has(Cpu::tAMD) && cpu.displayFamily >= kZen5Family;
    HostCoreTraits t;
    t.prefers_rep_movsb = zen5;
    t.prefers_onednn_gemv = zen5;
    return t;
  }();
  return traits;
}

}  // namespace jit
