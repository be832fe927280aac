// What `kiln check` does, for every op kind: each valid example spec compiles (on x86 where it
// serves the spec, else on ref, which is then compared with itself) and matches ref on every
// input kind over the token sweep.
#include <gtest/gtest.h>

#include <set>

#include "runtime/runtime.h"
#include "tests/harness/example_specs.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

TEST(CheckEveryOp, EveryExampleSpecMatchesRef) {
  Runtime runtime(RuntimeOptions{});
  std::set<std::string> covered;
  for (const auto& [name, texts] : test::valid_examples()) {
    for (const std::string& text : texts) {
      auto spec = parse_spec(text);
      ASSERT_TRUE(spec.is_ok()) << text << ": " << spec.status().to_string();
      auto kernel = runtime.compile(spec.value());
      ASSERT_TRUE(kernel.is_ok()) << text << ": " << kernel.status().to_string();
      for (int64_t tokens : {int64_t(1)}) {
        for (test::InputKind kind : test::input_kinds_for(spec->op)) {
          auto c = test::make_case(spec.value(), tokens, kind, uint64_t(tokens) * 31 + 1);
          ASSERT_TRUE(c.is_ok()) << text << ": " << c.status().to_string();
          const test::CaseReport report = test::check_against_ref(kernel.value(), c.value());
          EXPECT_TRUE(report.ok) << text << " on " << kernel->info().target.name()
                                 << " tokens=" << tokens
                                 << " inputs=" << test::input_kind_name(kind) << "\n"
                                 << report.message;
        }
      }
      covered.insert(name);
    }
  }
  for (OpKind op : all_op_kinds()) {
    EXPECT_TRUE(covered.count(std::string(op_name(op)))) << op_name(op) << " has no example";
  }
}

}  // namespace
}  // namespace jit
