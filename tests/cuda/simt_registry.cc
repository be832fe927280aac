#include "tests/cuda/simt_registry.h"

#include <fmt/format.h>

#include <unordered_map>

namespace jit::test::cuda {

// One table per generated family file (null-terminated).
extern const SimtKernel kSimtKernels_norm[];
extern const SimtKernel kSimtKernels_activation[];
extern const SimtKernel kSimtKernels_rope[];
extern const SimtKernel kSimtKernels_cache[];
extern const SimtKernel kSimtKernels_attention[];
extern const SimtKernel kSimtKernels_topk[];
extern const SimtKernel kSimtKernels_sparse_index[];

namespace {

const std::unordered_map<std::string, codegen::cuda::simt::Entry>& table() {
  static const auto map = [] {
    std::unordered_map<std::string, codegen::cuda::simt::Entry> m;
    for (const SimtKernel* t :
         {kSimtKernels_norm, kSimtKernels_activation, kSimtKernels_rope, kSimtKernels_cache,
          kSimtKernels_attention, kSimtKernels_topk, kSimtKernels_sparse_index}) {
      for (; t->key != nullptr; ++t) m.emplace(t->key, t->entry);
    }
    return m;
  }();
  return map;
}

}  // namespace

codegen::cuda::simt::Entry find_simt_kernel(const OpSpec& spec, const Config& config) {
  const auto it = table().find(simt_key(spec, config));
  return it == table().end() ? nullptr : it->second;
}

size_t simt_kernel_count() {
  return table().size();
}

}  // namespace jit::test::cuda
