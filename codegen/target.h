// Target: which backend and which instruction set a kernel is generated for.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace jit {

/// Code generators kiln has.
enum class BackendKind : uint8_t { kRef, kX86, kCuda, kArm, kOnednn };

/// "ref", "x86", "cuda", "arm", "onednn".
std::string_view backend_name(BackendKind kind);

/// x86 instruction-set levels, ordered: a higher level includes the lower ones.
enum class X86Isa : uint8_t {
  kNone,        ///< no x86 vector ISA kiln generates for (or not x86)
  kAvx2,        ///< AVX2 + FMA + F16C
  kAvx512,      ///< AVX-512 F/BW/DQ/VL
  kAvx512Bf16,  ///< + AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16)
  kAvx512Vbmi,  ///< + AVX512_VBMI (vpermi2b/vpermt2b byte tables): Zen 4 and later
  kAvx512Fp16,  ///< + AVX512_FP16 (vaddph): Sapphire Rapids and later where AMX is not exposed
  kAmx,         ///< + AMX-TILE/AMX-BF16/AMX-INT8
};

/// "avx2", "avx512", "avx512_bf16", "avx512_vbmi", "avx512_fp16", "amx" ("none" for kNone).
std::string_view x86_isa_name(X86Isa isa);
/// The levels KILN_ISA and --isa take, lowest first: "avx2, avx512, ..., amx" (for messages).
std::string x86_isa_level_names();
/// Parses an ISA name (as KILN_ISA takes it); false when unknown.
bool parse_x86_isa(std::string_view text, X86Isa* isa);

/// The machine a kernel is generated for. `fingerprint` identifies everything that changes the
/// generated code (CPU feature bits, sm arch) and is part of every disk-cache key.
struct Target {
  BackendKind backend = BackendKind::kX86;
  X86Isa isa = X86Isa::kNone;
  std::string fingerprint;
  std::string arch = {};  ///< cuda: the sm arch generated for ("sm_90", "sm_90a"); empty otherwise

  /// "x86:avx512_bf16", "cuda:sm_90", "ref", ...
  std::string name() const;
};

/// The CPU features that decide the x86 level (each as CPUID and the OS's XSAVE state report it).
struct X86Features {
  bool avx2 = false;         ///< AVX2, FMA and F16C
  bool avx512 = false;       ///< AVX-512 F, BW, DQ and VL
  bool avx512_bf16 = false;  ///< AVX512_BF16
  bool avx512_vbmi = false;  ///< AVX512_VBMI
  bool avx512_fp16 = false;  ///< AVX512_FP16
  bool amx = false;          ///< AMX-TILE, AMX-BF16 and AMX-INT8
};

/// The highest level all of whose features `f` has (levels are cumulative: a CPU lacking one
/// feature stops at the level below it, whatever it has above).
X86Isa x86_isa_of(const X86Features& f);

/// The host CPU's x86 ISA as detected by CPUID (and the OS's XSAVE state), before any cap.
X86Isa detect_host_x86_isa();

/// What the host core's measured costs make kiln's defaults choose where cores of one ISA level
/// differ (Zen 4 and Zen 5 both stop at avx512_vbmi). The defaults a trait sets are knobs of the
/// default config, so the disk cache keys them; the tuner tries the other value. Measured on AMD
/// family 0x1A (Zen 5) and set for it and later AMD families; false elsewhere (docs/decisions.md,
/// "Thirty-first round").
struct HostCoreTraits {
  /// `rep movsb` copies blocks of kilobytes faster than kiln's vector loops (swap_blocks'
  /// `rep_movsb` knob defaults to 1): on Zen 5 a 64 KiB block from the L3 ~15% faster (no read
  /// for ownership of the destination); on Zen 4 glibc's memcpy, the same `rep movsb` at these
  /// sizes, ran level with the loops for 16 blocks and 1.3x slower for one.
  bool prefers_rep_movsb = false;
  /// oneDNN's brgemm streams a decode GEMM's weight faster than kiln's small-M kernel (the
  /// onednn backend's `small_m` knob defaults to 0): on Zen 5 at M = 1 by 1.1x (f32), 1.1-1.3x
  /// (bf16) and 1.4-1.5x (int8) on 1 thread, level or faster at M = 2 .. 4; on the Xeons and
  /// Zen 3 the kernel was 1.2-1.7x faster.
  bool prefers_onednn_gemv = false;
};

/// The host's traits (CPUID, read once).
const HostCoreTraits& host_core_traits();

/// The host target for `backend`, with the ISA capped at `isa_cap` (KILN_ISA).
Target host_target(BackendKind backend = BackendKind::kX86, X86Isa isa_cap = X86Isa::kAmx);

}  // namespace jit
