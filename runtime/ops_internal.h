// Helpers shared by the jit::ops families (runtime/ops_*.cc): compile-and-run with a shape
// hint, the checks that come before a spec can be formed, and vLLM's string arguments.
#pragma once

#include <cstdint>
#include <string_view>

#include "ir/field.h"
#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/params_cpu.h"
#include "ir/tensor.h"

namespace jit::ops::detail {

/// Throws jit::Error(status) unless it is OK.
void throw_if_error(const Status& status);

/// Throws an invalid-argument jit::Error with `message` (which names the op and argument).
[[noreturn]] void fail(std::string message);

/// Compiles (or finds in memory) the kernel of `spec` and runs it with checked arguments.
/// `tokens` is the shape hint that selects a tuned config (CompileOptions::tokens_hint).
/// Arguments on a CUDA device select the cuda backend.
void run(const OpSpec& spec, const KernelArgs& args, int64_t tokens);

/// A present tensor whose rank is one of `ranks`; the error names `op` and `arg`.
void expect_tensor_rank(std::string_view op, std::string_view arg, const Tensor& t,
                        std::initializer_list<int> ranks);

/// A present tensor of f32, f16 or bf16.
void expect_float(std::string_view op, std::string_view arg, const Tensor& t);

/// A count or size argument that must lie in [lo, hi].
void expect_int_range(std::string_view op, std::string_view arg, int64_t value, int64_t lo,
                      int64_t hi);

/// vLLM's kv_cache_dtype string: "auto", "float16", "bfloat16" (the cache has the input
/// type), "fp8", "fp8_e4m3", "fp8_e5m2", and "fp8_ds_mla" when `allow_ds_mla` (elsewhere it
/// is per-tensor e4m3, as in vLLM). The error names `kv_cache_dtype` and the allowed strings.
ir::KvCacheDtype parse_kv_cache_dtype(std::string_view op, std::string_view text,
                                      bool allow_ds_mla);

/// vLLM's CPU-attention isa string: "vec", "vec16", "amx", "neon" (argument `arg`).
ir::CpuAttnIsa parse_cpu_isa(std::string_view op, std::string_view arg, std::string_view text);

}  // namespace jit::ops::detail
