#include "codegen/target.h"

#include <fmt/format.h>
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace jit {

std::string_view backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kRef: return "ref";
    case BackendKind::kX86: return "x86";
    case BackendKind::kCuda: return "cuda";
    case BackendKind::kArm: return "arm";
    case BackendKind::kOnednn: return "onednn";
  }
  return "?";
}

namespace {
constexpr std::string_view kIsaNames[] = {"none",        "avx2",        "avx512", "avx512_bf16",
                                          "avx512_vbmi", "avx512_fp16", "amx"};
}  // namespace

std::string_view x86_isa_name(X86Isa isa) {
  return kIsaNames[static_cast<int>(isa)];
}

std::string x86_isa_level_names() {
  std::string names;
  for (size_t i = 1; i < std::size(kIsaNames); ++i) {
    if (i > 1) names += ", ";
    names += kIsaNames[i];
  }
  return names;
}

bool parse_x86_isa(std::string_view text, X86Isa* isa) {
  for (int i = 0; i < int(std::size(kIsaNames)); ++i) {
    if (text == kIsaNames[i]) {
      *isa = static_cast<X86Isa>(i);
      return true;
    }
  }
  return false;
}

std::string Target::name() const {
  if (backend == BackendKind::kX86) return fmt::format("x86:{}", x86_isa_name(isa));
  if (backend == BackendKind::kArm) return "arm:neon";
  if (backend == BackendKind::kCuda && !arch.empty()) return fmt::format("cuda:{}", arch);
  return std::string(backend_name(backend));
}

Target host_target(BackendKind backend, X86Isa isa_cap) {
  Target target;
  target.backend = backend;
  if (backend == BackendKind::kX86) {
    const X86Isa host = detect_host_x86_isa();
    target.isa = host < isa_cap ? host : isa_cap;
    // The generated code depends only on the ISA level it targets, so the level is the
    // fingerprint: two machines at the same level can share cache entries.
    target.fingerprint = fmt::format("x86-{}", x86_isa_name(target.isa));
  } else if (backend == BackendKind::kArm) {
    // The CPU class the arm objects are generated for (codegen/arm: ArmCpu): on an AArch64
    // host the host's (bf16 or not); elsewhere cross objects for Neoverse V1.
    target.fingerprint = "aarch64-neoverse-v1";
#if defined(__aarch64__)
    if ((getauxval(AT_HWCAP2) & HWCAP2_BF16) == 0) target.fingerprint = "aarch64-neoverse-n1";
#endif
  } else if (backend == BackendKind::kOnednn) {
    // The onednn backend caps oneDNN's ISA and its own small-M kernels at this level (KILN_ISA).
    const X86Isa host = detect_host_x86_isa();
    target.isa = host < isa_cap ? host : isa_cap;
    target.fingerprint = fmt::format("onednn-{}", x86_isa_name(target.isa));
  } else {
    target.fingerprint = std::string(backend_name(backend));
  }
  return target;
}

}  // namespace jit
