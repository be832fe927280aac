// GoogleTest glue for the harness (kept apart so the harness itself needs no GoogleTest and
// `kiln check` can link it).
#pragma once

#include <gtest/gtest.h>

#include "tests/harness/harness.h"

namespace jit::test {

/// For EXPECT_TRUE(matches(out, ref_out, tol)): success, or a failure carrying compare()'s
/// message.
::testing::AssertionResult matches(const HostTensor& actual, const HostTensor& expected,
                                   Tolerance tol);

}  // namespace jit::test
