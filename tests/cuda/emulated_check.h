// The SIMT emulator against ref, shared by the CUDA tests: a jit::Kernel over the host
// instantiation of (spec, config) (gen_simt_kernels), and the comparison of a list of such
// kernels with ref over the op-case harness's inputs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "codegen/backend.h"
#include "ir/op_spec.h"
#include "ir/status.h"
#include "runtime/runtime.h"

namespace jit::test::cuda {

/// A jit::Kernel that runs the host instantiation of (spec, config) through the emulator; an
/// error when the build did not instantiate it.
Result<Kernel> emulated_kernel(const OpSpec& spec, const Config& config);

/// Runs each (spec, config) through the emulator against ref on every input kind of its op at
/// 1 and 3 rows (top-k: 6 and 12, to reach rows longer than k; swap_blocks: 1 and 29, three
/// launches), on two threads (the emulator keeps its state per OS thread). Returns one message
/// per failing job (its first failing case), none when all match.
std::vector<std::string> emulated_failures(const std::vector<std::pair<OpSpec, Config>>& jobs);

}  // namespace jit::test::cuda
