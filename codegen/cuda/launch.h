// Launch plans: a kernel call's grid, block, shared memory and parameter struct, built from
// the run-time KernelArgs. The same plan drives the driver launch and the SIMT emulator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "codegen/backend.h"
#include "ir/kernel_args.h"
#include "ir/op_spec.h"

namespace jit::codegen::cuda {

/// One launch: grid and block dimensions, dynamic shared memory and the by-value parameter
/// struct (templates/kiln_args.cuh) as bytes.
struct LaunchPlan {
  static constexpr size_t kMaxParams = 256;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
  alignas(16) unsigned char params[kMaxParams] = {};
  size_t params_size = 0;
  bool empty = false;  ///< nothing to do (zero rows): no launch
  /// A launch that follows this one on the same stream (paged_attention_v2's reduce), or null.
  std::shared_ptr<const LaunchPlan> then;

  template <class T>
  void set_params(const T& value) {
    static_assert(sizeof(T) <= kMaxParams);
    __builtin_memcpy(params, &value, sizeof(T));
    params_size = sizeof(T);
  }
};

/// Builds the launch of `spec` (rendered with `config`, knobs already resolved) for `args`,
/// which passed check_args. `host_data`: the tensors are host memory (the emulator), so the
/// data-dependent checks that read indices (rope positions inside the cache) run here, before
/// anything is written; device tensors are not read by the host.
/// Most ops launch once; swap_blocks launches once per kiln::kSwapPairs mapping rows.
Result<std::vector<LaunchPlan>> plan_launch(const OpSpec& spec, const Config& config,
                                            const KernelArgs& args, bool host_data);

}  // namespace jit::codegen::cuda
