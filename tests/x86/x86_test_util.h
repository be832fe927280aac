// Shared by the x86 test programs: the ISA paths this host runs, compiling a spec for one of
// them, and a test-only generator that maps a Generator helper over a buffer of whole vectors.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "codegen/target.h"
#include "ir/numeric.h"
#include "runtime/runtime.h"

namespace jit::test {

/// Every x86 level whose generated code differs, lowest first (code generated for each runs
/// only where the host has it: isa_paths).
inline constexpr X86Isa kX86Levels[] = {X86Isa::kAvx2,       X86Isa::kAvx512,
                                        X86Isa::kAvx512Bf16, X86Isa::kAvx512Vbmi,
                                        X86Isa::kAvx512Fp16, X86Isa::kAmx};

/// The x86 ISA paths among `wanted` that this host runs; a path the host lacks is reported on
/// stdout, not silently dropped.
inline std::vector<X86Isa> isa_paths(std::initializer_list<X86Isa> wanted = {
                                         X86Isa::kAvx2, X86Isa::kAvx512, X86Isa::kAvx512Bf16}) {
  std::vector<X86Isa> paths;
  const X86Isa host = detect_host_x86_isa();
  for (X86Isa isa : wanted) {
    if (host >= isa) {
      paths.push_back(isa);
    } else {
      std::printf("note: host has no %s: that x86 path is not run here\n",
                  std::string(x86_isa_name(isa)).c_str());
    }
  }
  return paths;
}

/// `count` elements of `dtype` (bf16 or f32) as raw bytes: multiples of 1/97 in [-20.6, 20.6],
/// drawn from `rng` (the large-call cache write tests' rows).
inline std::vector<uint8_t> random_rows(DType dtype, size_t count, std::mt19937_64& rng) {
  const size_t esize = dtype_size(dtype);
  std::vector<uint8_t> bytes(count * esize);
  for (size_t i = 0; i < count; ++i) {
    const float x = float(int(rng() % 4001) - 2000) / 97.0f;
    if (esize == 2) {
      const uint16_t bits = numeric::f32_to_bf16(x);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    }
  }
  return bytes;
}

/// `count` zeroed buffers of `bytes` each in one allocation, each starting `misalign` bytes past
/// a 64-byte boundary: the caches of the large-call tests, where 0 takes the streaming stores
/// and 16 the ordinary ones.
struct OffsetBuffers {
  std::vector<uint8_t> storage;
  std::vector<uint8_t*> at;
};
inline OffsetBuffers offset_buffers(size_t count, size_t bytes, size_t misalign) {
  OffsetBuffers b{std::vector<uint8_t>(count * (bytes + 128), 0), {}};
  for (size_t i = 0; i < count; ++i) {
    auto base = reinterpret_cast<uintptr_t>(b.storage.data() + i * (bytes + 128));
    b.at.push_back(reinterpret_cast<uint8_t*>((base + 63) / 64 * 64 + misalign));
  }
  return b;
}

/// One runtime per test program, without a disk cache: these tests are about generated code.
inline Runtime& x86_test_runtime() {
  static Runtime runtime{RuntimeOptions{}};
  return runtime;
}

/// `spec` compiled for the x86 backend at `isa` with `config`; a failure is a test failure
/// naming the spec (the returned kernel is then empty).
inline Kernel compile_x86(const OpSpec& spec, X86Isa isa, Config config = {}) {
  CompileOptions options;
  options.backend = BackendKind::kX86;
  options.isa = isa;
  options.config = std::move(config);
  auto kernel = x86_test_runtime().compile(spec, options);
  EXPECT_TRUE(kernel.is_ok()) << to_string(spec) << ": " << kernel.status().to_string();
  return kernel.is_ok() ? kernel.value() : Kernel{};
}

}  // namespace jit::test

#ifdef KILN_TEST_MAP_GENERATOR
#include "codegen/x86/generator.h"

namespace jit::test {

/// Arguments of a map kernel: whole vectors of 32-bit lanes from src to dst.
struct MapArgs {
  const void* src;
  void* dst;
};

/// dst[v] = apply(src[v]) for whole vectors v in [row_begin, row_end) (the KernelFn ABI with
/// rows = vectors). Subclasses implement `apply` on vmm(0) with vmm(1..) as temporaries.
class VectorMapGenerator : public codegen::x86::Generator {
 public:
  explicit VectorMapGenerator(X86Isa isa) : Generator(isa) {}
  virtual ~VectorMapGenerator() = default;

  /// Emits the loop around `apply`; call once, then finish().
  void generate() {
    using namespace Xbyak::util;
    prologue();
    mov(r8, ptr[rdi]);
    mov(r9, ptr[rdi + 8]);
    Xbyak::Label l_loop, l_done;
    L(l_loop);
    cmp(rsi, rdx);
    jge(l_done, T_NEAR);
    mov(r10, rsi);
    imul(r10, r10, lanes() * 4);
    vmovups(vmm(0), ptr[r8 + r10]);
    apply();
    vmovups(ptr[r9 + r10], vmm(0));
    inc(rsi);
    jmp(l_loop, T_NEAR);
    L(l_done);
    epilogue();
  }
  int vector_lanes() const { return lanes(); }

 protected:
  virtual void apply() = 0;
};

}  // namespace jit::test
#endif
