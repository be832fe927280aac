// Helpers shared by the jit::ops families (see runtime/ops_internal.h).
#include "runtime/ops_internal.h"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "ir/check_args.h"
#include "runtime/runtime.h"

namespace jit::ops::detail {

void throw_if_error(const Status& status) {
  if (!status.is_ok()) throw Error(status);
}

void fail(std::string message) {
  throw Error(invalid_argument(std::move(message)));
}

void run(const OpSpec& spec, const KernelArgs& args, int64_t tokens) {
  CompileOptions options;
  options.tokens_hint = tokens;
  // Tensors on a cuda device run on the cuda backend (its target: that device's arch).
  for (int i = 0; i < args.tensor_count; ++i) {
    if (args.tensor(i).defined() && args.tensor(i).device().kind == Device::Kind::kCuda) {
      options.backend = BackendKind::kCuda;
      break;
    }
  }
  Result<Kernel> kernel = compile(spec, options);
  throw_if_error(kernel.status());
  throw_if_error(kernel->run(args));
}

void expect_tensor_rank(std::string_view op, std::string_view arg, const Tensor& t,
                        std::initializer_list<int> ranks) {
  throw_if_error(ir::expect_defined(op, arg, t));
  throw_if_error(ir::expect_rank(op, arg, t, ranks));
}

void expect_float(std::string_view op, std::string_view arg, const Tensor& t) {
  throw_if_error(ir::expect_defined(op, arg, t));
  if (!is_float_activation(t.dtype())) {
    fail(fmt::format("{}: argument '{}' has dtype {}; allowed: f32, f16, bf16", op, arg,
                     dtype_name(t.dtype())));
  }
}

void expect_int_range(std::string_view op, std::string_view arg, int64_t value, int64_t lo,
                      int64_t hi) {
  if (value < lo || value > hi) {
    fail(fmt::format("{}: argument '{}' = {} is out of range (allowed: {} .. {})", op, arg, value,
                     lo, hi));
  }
}

ir::KvCacheDtype parse_kv_cache_dtype(std::string_view op, std::string_view text,
                                      bool allow_ds_mla) {
  using ir::KvCacheDtype;
  // vLLM's spellings (csrc/quantization/fp8 dispatch): the 16-bit names mean "same as input".
  static constexpr std::array<std::pair<std::string_view, KvCacheDtype>, 7> kNames = {{
      {"auto", KvCacheDtype::kAuto},
      {"float16", KvCacheDtype::kAuto},
      {"bfloat16", KvCacheDtype::kAuto},
      {"fp8", KvCacheDtype::kFp8E4m3},
      {"fp8_e4m3", KvCacheDtype::kFp8E4m3},
      {"fp8_e5m2", KvCacheDtype::kFp8E5m2},
      {"fp8_ds_mla", KvCacheDtype::kFp8DsMla},
  }};
  for (const auto& [name, kv] : kNames) {
    if (name != text) continue;
    // Outside concat_and_cache_mla vLLM treats fp8_ds_mla as per-tensor e4m3.
    if (kv == KvCacheDtype::kFp8DsMla && !allow_ds_mla) return KvCacheDtype::kFp8E4m3;
    return kv;
  }
  fail(fmt::format(
      "{}: argument 'kv_cache_dtype' = \"{}\" is not supported (allowed: auto, float16, "
      "bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_ds_mla)",
      op, text));
}

ir::CpuAttnIsa parse_cpu_isa(std::string_view op, std::string_view arg, std::string_view text) {
  ir::CpuAttnIsa isa{};
  if (ir::parse_field(text, isa)) {
    fail(fmt::format("{}: argument '{}' = \"{}\" is not supported (allowed: {})", op, arg, text,
                     ir::enum_choices<ir::CpuAttnIsa>()));
  }
  return isa;
}

}  // namespace jit::ops::detail
