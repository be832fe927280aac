// Cost estimates: the minimum bytes an op must move and the FLOPs it must do.
#pragma once

#include <cstdint>

namespace jit {

/// The run-time sizes an estimate needs (everything that is not baked into the spec).
/// `tokens`: rows of norm/activation/rope, tokens written by a cache op, M of a GEMM;
/// `batch` and `context`: sequences and cached tokens per sequence of attention and gathers.
struct ProblemSize {
  int64_t tokens = 1;
  int64_t batch = 1;
  int64_t context = 1;
};

/// Lower bounds used by benchmarks (GB/s = bytes / time) and the tuner.
struct Estimate {
  double bytes = 0;  ///< bytes read + bytes written, each byte counted once
  double flops = 0;  ///< floating-point (or integer multiply-add) operations
};

}  // namespace jit
