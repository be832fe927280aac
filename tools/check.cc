// kiln check SPEC: the chosen backend against ref on random and edge inputs.
#include <fmt/format.h>

#include "tests/harness/op_cases.h"
#include "tools/commands.h"

namespace jit::tools {

int cmd_check(const std::string& spec_text, int64_t tokens, const CompileOptions& options) {
  auto spec = parse_spec(spec_text);
  if (!spec.is_ok()) return report(spec.status());
  auto kernel = Runtime::global().compile(spec.value(), options);
  if (!kernel.is_ok()) return report(kernel.status());
  const KernelInfo& info = kernel->info();
  fmt::print("checking {} on {} against ref\n", info.spec_text, info.target.name());
  if (info.backend == BackendKind::kRef) {
    fmt::print(
        "note: no other backend serves this spec here, so ref is compared with itself "
        "(this checks the op case and argument handling, not a second implementation);\n"
        "      the ref's own known-answer and property tests for {} run in `ctest -L "
        "ref`\n",
        op_name(spec->op));
  }
  const std::vector<int64_t> sweep =
      tokens > 0 ? std::vector<int64_t>{tokens} : test::token_sweep();
  int passed = 0, failed = 0;
  for (int64_t t : sweep) {
    for (test::InputKind kind : test::input_kinds_for(spec->op)) {
      auto c = test::make_case(spec.value(), t, kind, /*seed=*/uint64_t(t) * 977 + 1);
      if (!c.is_ok()) return report(c.status());
      const test::CaseReport r = test::check_against_ref(kernel.value(), c.value());
      fmt::print("{:<6} tokens={:<4} inputs={:<12} {}\n", r.ok ? "ok" : "FAIL", t,
                 test::input_kind_name(kind), r.message);
      (r.ok ? passed : failed)++;
    }
  }
  fmt::print("check: {} passed, {} failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace jit::tools
