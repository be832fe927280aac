// Compute peaks of the GEMM instruction sets, measured by small Xbyak loops in the same run as
// the GEMM benchmarks that compare against them.
#pragma once

#include <string_view>

namespace jit::bench {

/// The instruction a peak loop issues back to back (independent accumulators, no loads).
enum class PeakKind {
  kFmaF32,   ///< vfmadd231ps zmm: 16 lanes x 2 flops
  kDpBf16,   ///< vdpbf16ps zmm (AVX512_BF16): 16 lanes x 2 pairs x 2 flops
  kVnniI8,   ///< vpdpbusd zmm (AVX512_VNNI): 16 lanes x 4 bytes x 2 ops
  kAmxBf16,  ///< tdpbf16ps (AMX-BF16): 16 x 16 x 32 x 2 flops per tile op
  kAmxI8,    ///< tdpbusd (AMX-INT8): 16 x 16 x 64 x 2 ops per tile op
};

/// "fp32 FMA (vfmadd231ps zmm)", ...
std::string_view peak_name(PeakKind kind);

/// Whether this CPU (and OS, for AMX) can run `kind`.
bool peak_available(PeakKind kind);

/// Best-of-`repeats` GFLOP/s (GOP/s for int8) of `kind` on `threads` OpenMP threads; 0 when
/// the instruction is not available.
double measure_peak_gflops(PeakKind kind, int threads, int repeats = 5);

}  // namespace jit::bench
