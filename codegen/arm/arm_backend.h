// The arm backend: AArch64 NEON kernels built as LLVM IR (fixed-width fp32 vectors), optimised
// for a Neoverse-V1-class CPU and emitted as an ELF object. On an AArch64 host the object is
// linked in-process with ORC (LLJIT); on other hosts the same object is what `kiln compile
// --target arm:neon --dump` shows and what the qemu-aarch64 tests run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/backend.h"

namespace jit::codegen::arm {

/// Version of the generated code; part of every disk-cache key. Bump on any codegen change.
inline constexpr std::string_view kCodegenVersion = "arm-3";
/// What the objects are generated for.
inline constexpr std::string_view kTriple = "aarch64-unknown-linux-gnu";

/// An AArch64 CPU class the objects are tuned and restricted to.
struct ArmCpu {
  std::string_view name;         ///< LLVM -mcpu
  std::string_view features;     ///< LLVM target features
  bool bf16 = false;             ///< FEAT_BF16: bfdot, bfmlalb/t, bfmmla
  std::string_view fingerprint;  ///< Target::fingerprint of this class
};
/// Neoverse V1 (Graviton 3, ...): NEON, fp16 arithmetic, and the bf16 and i8mm extensions.
inline constexpr ArmCpu kNeoverseV1 = {"neoverse-v1", "+neon,+bf16,+i8mm,+fullfp16", true,
                                       "aarch64-neoverse-v1"};
/// Neoverse N1 (Graviton 2, Ampere Altra): NEON and fp16 arithmetic, no bf16.
inline constexpr ArmCpu kNeoverseN1 = {"neoverse-n1", "+neon,+fullfp16", false,
                                       "aarch64-neoverse-n1"};
/// The CPU class of an arm target (its fingerprint, as codegen/target.cc sets it); Neoverse
/// V1 for an unknown one.
ArmCpu arm_cpu(const Target& target);
/// The LLVM the objects come from (part of the disk-cache key).
std::string_view llvm_version();

/// Creates the arm backend. Ops: rms_norm, fused_add_rms_norm, rotary_embedding and the six
/// gated activations, for f32/f16/bf16 and any hidden/head size; the cache writes, copies,
/// gathers and convert_fp8 (kv auto/fp8_e4m3/fp8_e5m2); cpu_attention_with_kv_cache (isa=neon).
std::unique_ptr<Backend> make_backend();

/// The config knob "opt": LLVM optimisation level 2 or 3 (default 3).
inline constexpr std::string_view kOptKnob = "opt";
/// The config knob "bf16" (bf16 attention): 1 = BFMLALB/T and BFDOT (default), 0 = fp32 FMLA.
inline constexpr std::string_view kBf16Knob = "bf16";

/// An AArch64 object for one spec, with what it took to make.
struct ObjectCode {
  std::vector<uint8_t> object;  ///< ELF relocatable object, one global function
  std::string symbol;           ///< the kernel's symbol (kernel_symbol(spec))
  std::string ir;               ///< the generated LLVM IR, before optimisation
  double build_us = 0;          ///< building the IR
  double optimize_us = 0;       ///< the O2/O3 pipeline
  double emit_us = 0;           ///< instruction selection to object bytes
};

/// Generates the AArch64 object of `spec` for `cpu` at LLVM level `opt_level` (2 or 3);
/// `bf16_dot` selects the bf16 dot-product instructions where an op has them (attention) and
/// the CPU has them (else the fp32 path).
Result<ObjectCode> compile_object(const OpSpec& spec, int opt_level = 3, bool bf16_dot = true,
                                  const ArmCpu& cpu = kNeoverseV1);

/// The disassembly of an AArch64 object (llvm-objdump-16, with the bf16/i8mm mnemonics).
Result<std::string> disassemble(const std::vector<uint8_t>& object);

}  // namespace jit::codegen::arm
