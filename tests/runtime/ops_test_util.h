// Shared by the jit::ops family tests: run one op through jit::ops on one copy of a harness
// case and through the ref backend on another, then compare every output.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <string_view>

#include "codegen/ref/ref.h"
#include "ir/op_spec.h"
#include "runtime/ops.h"
#include "runtime/runtime.h"
#include "tests/harness/example_specs.h"
#include "tests/harness/matchers.h"
#include "tests/harness/op_cases.h"

namespace jit::test {

/// Calls the jit::ops function of `spec.op` with the case's tensors and scalars (KernelArgs
/// order, docs/ops.md), passing what the spec bakes in (strings, sizes) as vLLM would.
using OpsCall = std::function<void(const OpSpec& spec, const KernelArgs& a)>;

/// For every valid example spec of `op_name` (tests/harness/example_specs.cc) and each size:
/// the jit::ops call must write what the ref backend writes (within the case's tolerances).
inline void expect_every_example_matches_ref(std::string_view op_name,
                                             std::initializer_list<int64_t> sizes,
                                             const OpsCall& call) {
  const auto& examples = valid_examples().at(std::string(op_name));
  ASSERT_FALSE(examples.empty());
  for (const std::string& text : examples) {
    Result<OpSpec> spec = parse_spec(text);
    ASSERT_TRUE(spec.is_ok()) << text << ": " << spec.status().to_string();
    for (int64_t size : sizes) {
      SCOPED_TRACE(text + " size " + std::to_string(size));
      Result<OpCase> made = make_case(*spec, size, InputKind::kNormal, 11 + uint64_t(size));
      ASSERT_TRUE(made.is_ok()) << made.status().to_string();
      OpCase actual = *made;
      OpCase expected = *made;
      ASSERT_TRUE(codegen::ref::run(*spec, expected.args()).is_ok());
      try {
        call(*spec, actual.args());
      } catch (const Error& e) {
        ADD_FAILURE() << "jit::ops threw: " << e.what();
        continue;
      }
      // The op derived exactly `spec` from its arguments: compiling `spec` now is an
      // in-memory hit of the kernel the call compiled (no generation, no disk lookup).
      const RuntimeCounters before = Runtime::global().counters();
      ASSERT_TRUE(compile(*spec).is_ok());
      const RuntimeCounters after = Runtime::global().counters();
      EXPECT_EQ(after.memory_hits, before.memory_hits + 1) << "jit::ops compiled another spec";
      EXPECT_EQ(after.generated + after.disk_hits, before.generated + before.disk_hits);
      for (size_t k = 0; k < made->outputs.size(); ++k) {
        const auto i = size_t(made->outputs[k]);
        const Tolerance tol = k < made->tolerances.size()
                                  ? made->tolerances[k]
                                  : tolerance_for(spec->op, expected.tensors[i].dtype());
        EXPECT_TRUE(matches(actual.tensors[i], expected.tensors[i], tol)) << made->names[i];
      }
    }
  }
}

/// Expects `call` to throw jit::Error whose message contains every `needle`.
template <class Call>
void expect_ops_error(Call call, std::initializer_list<std::string_view> needles) {
  try {
    call();
    ADD_FAILURE() << "expected jit::Error";
  } catch (const Error& e) {
    for (std::string_view n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message lacks '" << n << "': " << e.what();
    }
  }
}

}  // namespace jit::test
