// KernelArgs: the run-time arguments of one kernel call, in vLLM's argument order.
#pragma once

#include <array>
#include <cstdint>

#include "ir/tensor.h"

namespace jit {

/// The run-time arguments of a kernel: its tensors and its numeric scalars, each in the order
/// of the op's vLLM signature, leaving out what the spec bakes in (kv_cache_dtype strings,
/// head_size, is_neox, ...). An absent optional tensor (None) is a default Tensor.
/// docs/ops.md lists the order per op; e.g. rms_norm: tensors {out, input, weight},
/// scalars {epsilon}.
struct KernelArgs {
  static constexpr int kMaxTensors = 16;
  static constexpr int kMaxScalars = 8;

  std::array<Tensor, kMaxTensors> tensors{};
  std::array<double, kMaxScalars> scalars{};
  int tensor_count = 0;
  int scalar_count = 0;

  KernelArgs() = default;
  KernelArgs(std::initializer_list<Tensor> ts, std::initializer_list<double> ss = {}) {
    for (const Tensor& t : ts) add(t);
    for (double s : ss) add_scalar(s);
  }
  KernelArgs& add(const Tensor& t) {
    tensors[tensor_count++] = t;
    return *this;
  }
  KernelArgs& add_scalar(double s) {
    scalars[scalar_count++] = s;
    return *this;
  }
  const Tensor& tensor(int i) const { return tensors[i]; }
  double scalar(int i) const { return scalars[i]; }
};

}  // namespace jit
