// The SIMT emulator's engine: runs a grid of blocks on the calling CPU thread, each block's
// threads as fibers (ucontext) that switch only at barriers and warp collectives, so the code
// between two synchronisation points runs exactly as one CUDA thread would run it. Used by
// simt.h (the device API the templates call) and by the tests' SIMT executables. No macros
// here: this header is safe to include anywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "codegen/backend.h"
#include "ir/status.h"

namespace jit::codegen::cuda::simt {

/// CUDA's uint3/dim3.
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

/// A kernel entry as the emulator calls it: the by-value parameter struct as bytes.
using Entry = void (*)(const void* params);

/// Runs `entry` over `grid` x `block` threads with `shared_bytes` of dynamic shared memory.
/// Blocks run one after another; within a block, threads interleave at __syncthreads and warp
/// collectives. A block whose live threads wait on different barriers (a deadlock: on a GPU,
/// a hang) stops the launch with an error naming the block.
Status launch(Entry entry, const unsigned grid[3], const unsigned block[3], unsigned shared_bytes,
              const void* params);

// ---- the device side, called by simt.h ----------------------------------------------------------
const Dim3& thread_idx();
const Dim3& block_idx();
const Dim3& block_dim();
const Dim3& grid_dim();
/// __syncthreads(): waits for every live thread of the block.
void sync_threads();
/// Lane of the calling thread in its warp.
unsigned lane_id();
/// Publishes `value` to the warp and returns the value of lane `src` (own value when `src`
/// is not a live lane). Every live lane of the warp must call it (like __shfl_sync).
uint64_t warp_exchange(uint64_t value, int src);
/// Bit i set when lane i passed a true `predicate` (every live lane must call it).
unsigned warp_ballot(bool predicate);
/// The block's dynamic shared memory (extern __shared__).
void* dynamic_shared();

/// An Executable that runs a kernel instantiated on the host through the emulator: the
/// launch plan of codegen/cuda/launch.h with host tensors (data-dependent checks included).
std::shared_ptr<const Executable> make_executable(const OpSpec& spec, const Config& config,
                                                  Entry entry);

}  // namespace jit::codegen::cuda::simt
