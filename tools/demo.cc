// kiln demo: one Llama-style decode step on the CPU, every kernel checked against ref.
//   x [4, 4096] -> rms_norm -> h; q = h as [4, 32 heads x 128], k = h[:, :1024] as
//   [4, 8 heads x 128]; rotary_embedding(q, k) at positions 17..20; gate_up [4, 2 x 11008]
//   -> silu_and_mul -> [4, 11008].
#include <fmt/format.h>

#include <cmath>

#include "tests/harness/op_cases.h"
#include "tools/commands.h"

namespace jit::tools {
namespace {

using test::HostTensor;

struct Step {
  const char* name;
  OpSpec spec;
  std::vector<HostTensor*> tensors;  // KernelArgs order; nullptr = absent
  std::vector<double> scalars;
  std::vector<int> outputs;
  std::vector<std::string> names;  // argument names, as in vLLM's signature
};

// The step as an op case (copies of its tensors), for the harness's check against ref.
test::OpCase case_of(const Step& step) {
  test::OpCase c;
  for (size_t i = 0; i < step.tensors.size(); ++i) {
    c.tensors.push_back(step.tensors[i] ? *step.tensors[i] : HostTensor());
    c.present.push_back(step.tensors[i] != nullptr);
    c.names.push_back(step.names[i]);
  }
  c.scalars = step.scalars;
  c.outputs = step.outputs;
  return c;
}

// Compiles the step, checks it against ref on copies of its inputs (the same check as
// `kiln check`), then runs it on the live tensors so the next step sees its outputs.
bool run_step(const Step& step) {
  auto kernel = compile(step.spec);
  if (!kernel.is_ok()) {
    fmt::print("{:<18} compile failed: {}\n", step.name, kernel.status().to_string());
    return false;
  }
  const KernelInfo& info = kernel->info();
  fmt::print("{:<18} {:<52} {:<16} {:<16} {:>8.1f} us\n", step.name, info.spec_text,
             info.target.name(), kernel_source_name(info.source), info.total_us);
  const test::OpCase c = case_of(step);
  const test::CaseReport report = test::check_against_ref(kernel.value(), c);
  std::string indented = report.message;
  for (size_t at = indented.find('\n'); at != std::string::npos; at = indented.find('\n', at + 1)) {
    indented.insert(at + 1, std::string(21, ' '));
  }
  fmt::print("{:<18}   {}\n", "", indented);
  KernelArgs live;
  for (HostTensor* t : step.tensors) live.add(t ? t->tensor() : Tensor{});
  for (double v : step.scalars) live.add_scalar(v);
  if (Status s = kernel->run(live); !s.is_ok()) {
    fmt::print("{:<18} run failed: {}\n", step.name, s.to_string());
    return false;
  }
  return report.ok;
}

}  // namespace

int cmd_demo() {
  constexpr int64_t kTokens = 4, kHidden = 4096, kHeadSize = 128, kHeadsQ = 32, kHeadsKv = 8;
  constexpr int64_t kIntermediate = 11008, kMaxPosition = 64;
  const DType dt = DType::kBF16;
  fmt::print("kiln demo: one Llama-style decode step, {} tokens, hidden {}, bf16, host {}\n\n",
             kTokens, kHidden, x86_isa_name(detect_host_x86_isa()));

  HostTensor x = HostTensor::zeros(dt, {kTokens, kHidden});
  HostTensor w = HostTensor::zeros(dt, {kHidden});
  HostTensor h = HostTensor::zeros(dt, {kTokens, kHidden});
  test::fill_normal(x, 1);
  test::fill_normal(w, 2, 1.0, 0.1);
  HostTensor positions = HostTensor::from_values(DType::kI64, {kTokens}, {17, 18, 19, 20});
  HostTensor cache = HostTensor::zeros(dt, {kMaxPosition, kHeadSize});
  for (int64_t p = 0; p < kMaxPosition; ++p) {
    for (int64_t j = 0; j < kHeadSize / 2; ++j) {
      const double angle = double(p) * std::pow(10000.0, -2.0 * double(j) / double(kHeadSize));
      cache.set(p * kHeadSize + j, std::cos(angle));
      cache.set(p * kHeadSize + kHeadSize / 2 + j, std::sin(angle));
    }
  }
  HostTensor gate_up = HostTensor::zeros(dt, {kTokens, 2 * kIntermediate});
  test::fill_normal(gate_up, 3);
  HostTensor act = HostTensor::zeros(dt, {kTokens, kIntermediate});

  fmt::print("shapes: x {} -> h {}; q [{}, {}x{}], k [{}, {}x{}]; gate_up {} -> {}\n\n",
             x.tensor().describe(), h.tensor().describe(), kTokens, kHeadsQ, kHeadSize, kTokens,
             kHeadsKv, kHeadSize, gate_up.tensor().describe(), act.tensor().describe());
  fmt::print("{:<18} {:<52} {:<16} {:<16} {:>11}\n", "step", "spec", "target", "kernel from",
             "compile");

  bool ok = run_step({"rms_norm",
                      OpSpec::make(OpKind::kRmsNorm, ir::NormParams{dt, kHidden, true}),
                      {&h, &x, &w},
                      {1e-6},
                      {0},
                      {"out", "input", "weight"}});
  // The toy q and k are views of the normalised hidden state.
  HostTensor q = h;
  HostTensor k = HostTensor::zeros(dt, {kTokens, kHeadsKv * kHeadSize});
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t i = 0; i < kHeadsKv * kHeadSize; ++i)
      k.set(t * kHeadsKv * kHeadSize + i, h.get(t * kHidden + i));
  }
  ir::RopeParams rope{dt, dt, kHeadSize, kHeadSize, ir::RopeStyle::kNeox, kHeadsQ, kHeadsKv, true};
  ok = run_step({"rotary_embedding",
                 OpSpec::make(OpKind::kRotaryEmbedding, rope),
                 {&positions, &q, &k, &cache},
                 {},
                 {1, 2},
                 {"positions", "query", "key", "cos_sin_cache"}}) &&
       ok;
  ok = run_step({"silu_and_mul",
                 OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{dt, kIntermediate}),
                 {&act, &gate_up},
                 {},
                 {0},
                 {"out", "input"}}) &&
       ok;
  fmt::print("\n{}\n", ok ? "demo: every kernel matches ref" : "demo: MISMATCH (see above)");
  return ok ? 0 : 1;
}

}  // namespace jit::tools
