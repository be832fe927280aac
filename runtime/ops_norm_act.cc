// jit::ops for the norm, rotary and activation ops.
#include <fmt/format.h>

#include "ir/check_args.h"
#include "runtime/ops.h"
#include "runtime/ops_internal.h"
#include "runtime/runtime.h"

namespace jit::ops {
namespace {

using detail::run;
using detail::throw_if_error;

// The dtype and last-dim checks that come before a spec can be formed; the rest is
// check_args' job once the spec exists.
void expect_float_rows(std::string_view op, std::string_view arg, const Tensor& t) {
  throw_if_error(ir::expect_defined(op, arg, t));
  if (!is_float_activation(t.dtype())) {
    throw Error(
        invalid_argument(fmt::format("{}: argument '{}' has dtype {}; allowed: f32, f16, bf16", op,
                                     arg, dtype_name(t.dtype()))));
  }
  if (t.dim() < 1 || t.size(-1) < 1) {
    throw Error(invalid_argument(fmt::format(
        "{}: argument '{}' ({}) must have a non-empty last dimension", op, arg, t.describe())));
  }
}

void norm(OpKind op, Tensor a, Tensor b, Tensor weight, double epsilon) {
  const std::string_view name = op_name(op);
  // rms_norm(out, input, ...) vs fused_add_rms_norm(input, residual, ...).
  const Tensor& input = op == OpKind::kRmsNorm ? b : a;
  expect_float_rows(name, "input", input);
  ir::NormParams p;
  p.dtype = input.dtype();
  p.hidden = input.size(-1);
  p.weight = weight.defined();
  run(OpSpec::make(op, p), KernelArgs({a, b, weight}, {epsilon}), input.numel() / p.hidden);
}

void activation(OpKind op, Tensor out, Tensor input, std::initializer_list<double> scalars) {
  const std::string_view name = op_name(op);
  expect_float_rows(name, "input", input);
  if (input.size(-1) % 2 != 0) {
    throw Error(invalid_argument(
        fmt::format("{}: argument 'input' ({}) must have an even last dimension (2*d)", name,
                    input.describe())));
  }
  ir::ActivationParams p;
  p.dtype = input.dtype();
  p.d = input.size(-1) / 2;
  run(OpSpec::make(op, p), KernelArgs({out, input}, scalars), input.numel() / input.size(-1));
}

}  // namespace

void rms_norm(Tensor out, Tensor input, Tensor weight, double epsilon) {
  norm(OpKind::kRmsNorm, out, input, weight, epsilon);
}

void fused_add_rms_norm(Tensor input, Tensor residual, Tensor weight, double epsilon) {
  norm(OpKind::kFusedAddRmsNorm, input, residual, weight, epsilon);
}

void rotary_embedding(Tensor positions, Tensor query, Tensor key, int64_t head_size,
                      Tensor cos_sin_cache, bool is_neox) {
  constexpr std::string_view name = "rotary_embedding";
  expect_float_rows(name, "query", query);
  throw_if_error(ir::expect_defined(name, "positions", positions));
  throw_if_error(ir::expect_defined(name, "cos_sin_cache", cos_sin_cache));
  throw_if_error(ir::expect_rank(name, "cos_sin_cache", cos_sin_cache, {2}));
  const int64_t tokens = positions.numel();
  // vLLM's checks: every token of query (and key) holds a whole number of heads.
  for (const auto& [arg, t] : {std::pair<const char*, const Tensor&>{"query", query},
                               std::pair<const char*, const Tensor&>{"key", key}}) {
    if (!t.defined()) continue;
    const int64_t per_token = tokens > 0 ? t.numel() / tokens : 0;
    if (head_size < 1 || per_token < 1 || per_token % head_size != 0) {
      throw Error(invalid_argument(fmt::format(
          "{}: argument 'head_size' = {} must divide the {} elements per token of '{}' ({}, "
          "{} tokens)",
          name, head_size, per_token, arg, t.describe(), tokens)));
    }
  }
  ir::RopeParams p;
  p.dtype = query.dtype();
  p.cache_dtype = cos_sin_cache.dtype();
  p.head_size = head_size;
  p.rot_dim = cos_sin_cache.size(1);
  p.style = is_neox ? ir::RopeStyle::kNeox : ir::RopeStyle::kGptj;
  p.head_count_q = query.numel() / tokens / head_size;
  p.key = key.defined();
  p.head_count_kv = p.key ? key.numel() / tokens / head_size : 0;
  run(OpSpec::make(OpKind::kRotaryEmbedding, p), KernelArgs({positions, query, key, cos_sin_cache}),
      tokens);
}

void silu_and_mul(Tensor out, Tensor input) {
  activation(OpKind::kSiluAndMul, out, input, {});
}
void mul_and_silu(Tensor out, Tensor input) {
  activation(OpKind::kMulAndSilu, out, input, {});
}
void gelu_and_mul(Tensor out, Tensor input) {
  activation(OpKind::kGeluAndMul, out, input, {});
}
void gelu_tanh_and_mul(Tensor out, Tensor input) {
  activation(OpKind::kGeluTanhAndMul, out, input, {});
}
void fatrelu_and_mul(Tensor out, Tensor input, double threshold) {
  activation(OpKind::kFatreluAndMul, out, input, {threshold});
}
void swigluoai_and_mul(Tensor out, Tensor input, double alpha, double limit) {
  activation(OpKind::kSwigluoaiAndMul, out, input, {alpha, limit});
}

}  // namespace jit::ops
