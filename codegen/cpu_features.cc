// Host ISA detection with Xbyak's CPUID wrapper (which also checks that the OS saves the
// AVX/AVX-512/AMX register state, via XGETBV).
#include <xbyak/xbyak_util.h>

#include "codegen/target.h"

namespace jit {

X86Isa detect_host_x86_isa() {
  static const X86Isa isa = [] {
    using Cpu = Xbyak::util::Cpu;
    const Cpu cpu;
    const bool avx2 = cpu.has(Cpu::tAVX2) && cpu.has(Cpu::tFMA) && cpu.has(Cpu::tF16C);
    if (!avx2) return X86Isa::kNone;
    const bool avx512 = cpu.has(Cpu::tAVX512F) && cpu.has(Cpu::tAVX512BW) &&
                        cpu.has(Cpu::tAVX512DQ) && cpu.has(Cpu::tAVX512VL);
    if (!avx512) return X86Isa::kAvx2;
    if (!cpu.has(Cpu::tAVX512_BF16)) return X86Isa::kAvx512;
    // The AMX level also promises AVX512_VBMI and AVX512_FP16 to the generators (every AMX
    // CPU has both; a hypervisor that hides one gets the level below).
    if (cpu.has(Cpu::tAMX_TILE) && cpu.has(Cpu::tAMX_BF16) && cpu.has(Cpu::tAMX_INT8) &&
        cpu.has(Cpu::tAVX512_VBMI) && cpu.has(Cpu::tAVX512_FP16)) {
      return X86Isa::kAmx;
    }
    return X86Isa::kAvx512Bf16;
  }();
  return isa;
}

}  // namespace jit
