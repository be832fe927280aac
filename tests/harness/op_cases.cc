#include "tests/harness/op_cases.h"

#include <fmt/format.h>

#include <cmath>

#include "codegen/ref/ref.h"
#include "tests/harness/op_case_families.h"

namespace jit::test {
namespace {

DType output_dtype(const OpSpec& spec) {
  return std::visit(
      [](const auto& p) -> DType {
        if constexpr (requires { p.dtype; }) {
          return p.dtype;
        } else {
          return DType::kF32;
        }
      },
      spec.params);
}

void fill(HostTensor& t, InputKind kind, uint64_t seed) {
  switch (kind) {
    case InputKind::kNormal: fill_normal(t, seed); break;
    case InputKind::kSmallInt: fill_small_int(t, seed); break;
    case InputKind::kEqual: fill_equal(t, 0.75); break;
    case InputKind::kAdversarial: fill_adversarial(t, seed); break;
  }
}

OpCase norm_case(const OpSpec& spec, int64_t tokens, InputKind kind, uint64_t seed) {
  const auto& p = spec.get<ir::NormParams>();
  OpCase c;
  const bool fused = spec.op == OpKind::kFusedAddRmsNorm;
  // Row-strided input, as vLLM's strided_input test does: a [T, H] view of a [T, 2H] buffer.
  HostTensor x = HostTensor::row_strided(p.dtype, {tokens, p.hidden}, 2 * p.hidden);
  fill(x, kind, seed);
  HostTensor w = HostTensor::zeros(p.dtype, {p.hidden});
  if (kind == InputKind::kNormal) {
    fill_normal(w, seed + 1, 1.0, 0.1);
  } else {
    fill(w, kind, seed + 1);
  }
  if (fused) {
    HostTensor r = HostTensor::zeros(p.dtype, {tokens, p.hidden});
    fill(r, kind, seed + 2);
    c.tensors = {x, r, w};
    c.names = {"input", "residual", "weight"};
    c.outputs = {0, 1};
  } else {
    c.tensors = {HostTensor::zeros(p.dtype, {tokens, p.hidden}), x, w};
    c.names = {"out", "input", "weight"};
    c.outputs = {0};
  }
  c.present = {true, true, p.weight};
  c.scalars = {1e-6};
  return c;
}

OpCase activation_case(const OpSpec& spec, int64_t tokens, InputKind kind, uint64_t seed) {
  const auto& p = spec.get<ir::ActivationParams>();
  OpCase c;
  HostTensor in = HostTensor::zeros(p.dtype, {tokens, 2 * p.d});
  fill(in, kind, seed);
  c.tensors = {HostTensor::zeros(p.dtype, {tokens, p.d}), in};
  c.names = {"out", "input"};
  c.present = {true, true};
  c.outputs = {0};
  if (spec.op == OpKind::kFatreluAndMul) c.scalars = {0.25};
  if (spec.op == OpKind::kSwigluoaiAndMul) c.scalars = {1.702, 7.0};
  return c;
}

OpCase rope_case(const OpSpec& spec, int64_t tokens, InputKind kind, uint64_t seed) {
  const auto& p = spec.get<ir::RopeParams>();
  constexpr int64_t kMaxPosition = 64;
  OpCase c;
  HostTensor positions = HostTensor::zeros(DType::kI64, {tokens});
  fill_uniform(positions, seed, 0, kMaxPosition);
  HostTensor query = HostTensor::zeros(p.dtype, {tokens, p.head_count_q * p.head_size});
  fill(query, kind, seed + 1);
  HostTensor key;
  if (p.key) {
    key = HostTensor::zeros(p.dtype, {tokens, p.head_count_kv * p.head_size});
    fill(key, kind, seed + 2);
  }
  // The cache as vLLM's RotaryEmbedding builds it: row p = [cos(p f_j)..., sin(p f_j)...],
  // f_j = 10000^(-2j / rot_dim).
  HostTensor cache = HostTensor::zeros(p.cache_dtype, {kMaxPosition, p.rot_dim});
  const int64_t half = p.rot_dim / 2;
  for (int64_t pos = 0; pos < kMaxPosition; ++pos) {
    for (int64_t j = 0; j < half; ++j) {
      const double angle = double(pos) * std::pow(10000.0, -2.0 * double(j) / double(p.rot_dim));
      cache.set(pos * p.rot_dim + j, std::cos(angle));
      cache.set(pos * p.rot_dim + half + j, std::sin(angle));
    }
  }
  c.tensors = {positions, query, key, cache};
  c.names = {"positions", "query", "key", "cos_sin_cache"};
  c.present = {true, true, p.key, true};
  c.outputs = p.key ? std::vector<int>{1, 2} : std::vector<int>{1};
  return c;
}

// silu/gelu/gelu_tanh_and_mul round the activation to T before multiplying by the other
// half (mul_and_silu: by the first half), so in 16-bit types the activation's ulp is scaled
// by that factor; see Tolerance::scaled_by.
Tolerance tolerance_with_propagation(const OpSpec& spec, const OpCase& c) {
  const DType dtype = output_dtype(spec);
  Tolerance tol = tolerance_for(spec.op, dtype);
  const bool rounds_intermediate =
      spec.op == OpKind::kSiluAndMul || spec.op == OpKind::kMulAndSilu ||
      spec.op == OpKind::kGeluAndMul || spec.op == OpKind::kGeluTanhAndMul;
  if (!rounds_intermediate || dtype == DType::kF32) return tol;
  const int64_t d = spec.get<ir::ActivationParams>().d;
  const Tensor input = c.tensors[1].tensor();
  const int64_t offset = spec.op == OpKind::kMulAndSilu ? 0 : d;
  auto* base = static_cast<std::byte*>(input.data()) + offset * int64_t(dtype_size(dtype));
  const int64_t rows = input.numel() / (2 * d);
  return Tolerance::ulp_scaled_by(tol.ulps, Tensor(base, dtype, {rows, d}, {2 * d, 1}));
}

}  // namespace

std::string_view input_kind_name(InputKind kind) {
  switch (kind) {
    case InputKind::kNormal: return "normal";
    case InputKind::kSmallInt: return "small-int";
    case InputKind::kEqual: return "all-equal";
    case InputKind::kAdversarial: return "adversarial";
  }
  return "?";
}

std::vector<InputKind> input_kinds_for(OpKind op) {
  const std::string_view family = op_family(op);
  if (family == "cache") return cache_input_kinds(op);
  if (family == "attention" || family == "sparse_index" || family == "topk") {
    return attention_input_kinds(op);
  }
  if (family == "cpu_attention" || family == "gemm") return cpu_input_kinds(op);
  if (op == OpKind::kRmsNorm || op == OpKind::kFusedAddRmsNorm) {
    return {InputKind::kNormal, InputKind::kSmallInt, InputKind::kEqual};
  }
  return {InputKind::kNormal, InputKind::kSmallInt, InputKind::kEqual, InputKind::kAdversarial};
}

KernelArgs OpCase::args() const {
  KernelArgs a;
  for (size_t i = 0; i < tensors.size(); ++i) a.add(present[i] ? tensors[i].tensor() : Tensor{});
  for (double s : scalars) a.add_scalar(s);
  return a;
}

Result<OpCase> make_case(const OpSpec& spec, int64_t tokens, InputKind kind, uint64_t seed) {
  const std::string_view family = op_family(spec.op);
  if (family == "norm") return norm_case(spec, tokens, kind, seed);
  if (family == "activation") return activation_case(spec, tokens, kind, seed);
  if (family == "rope") return rope_case(spec, tokens, kind, seed);
  if (family == "cache") return make_cache_case(spec, tokens, kind, seed);
  if (family == "attention" || family == "sparse_index" || family == "topk") {
    return make_attention_case(spec, tokens, kind, seed);
  }
  return make_cpu_case(spec, tokens, kind, seed);
}

std::vector<int64_t> token_sweep() {
  return {1, 3, 64};
}

CaseReport compare_outputs(const OpSpec& spec, const OpCase& actual, const OpCase& expected) {
  CaseReport report;
  const Tolerance default_tol = tolerance_with_propagation(spec, expected);
  for (size_t k = 0; k < expected.outputs.size(); ++k) {
    const int i = expected.outputs[k];
    const Tolerance tol = k < expected.tolerances.size() ? expected.tolerances[k] : default_tol;
    const CompareResult r = compare(actual.tensors[size_t(i)], expected.tensors[size_t(i)], tol);
    if (!r.ok()) report.ok = false;
    report.message += fmt::format("{}{}: {}", report.message.empty() ? "" : "\n",
                                  expected.names[size_t(i)], r.message);
  }
  return report;
}

CaseReport check_against_ref(const Kernel& kernel, const OpCase& c) {
  OpCase actual = c;
  OpCase expected = c;
  if (Status s = kernel.run(actual.args()); !s.is_ok()) {
    return {false, "kernel: " + s.to_string()};
  }
  if (Status s = codegen::ref::run(kernel.spec(), expected.args()); !s.is_ok()) {
    return {false, "ref: " + s.to_string()};
  }
  return compare_outputs(kernel.spec(), actual, expected);
}

}  // namespace jit::test
