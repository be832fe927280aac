#include "tests/harness/matchers.h"

namespace jit::test {

::testing::AssertionResult matches(const HostTensor& actual, const HostTensor& expected,
                                   Tolerance tol) {
  const CompareResult result = compare(actual, expected, tol);
  if (result.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << result.message;
}

}  // namespace jit::test
