// The kernels instantiated on the host for the SIMT emulator, generated at build time by
// gen_simt_kernels from the same renderer (and templates) NVRTC compiles.
#pragma once

#include <string>

#include "codegen/backend.h"
#include "codegen/cuda/simt/simt_runtime.h"
#include "ir/op_spec.h"

namespace jit::test::cuda {

/// One generated instantiation: the key of its spec and config, and its emulator entry.
struct SimtKernel {
  const char* key;  ///< simt_key(spec, config)
  codegen::cuda::simt::Entry entry;
};

/// "<canonical spec>|<config>".
std::string simt_key(const OpSpec& spec, const Config& config);

/// The entry of (spec, config), or nullptr when the build did not instantiate it.
codegen::cuda::simt::Entry find_simt_kernel(const OpSpec& spec, const Config& config);

/// How many kernels the build instantiated.
size_t simt_kernel_count();

}  // namespace jit::test::cuda
