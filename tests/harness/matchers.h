// GoogleTest glue for the harness (kept apart so the harness itself needs no GoogleTest and
// `kiln check` can link it).
#pragma once

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "tests/harness/harness.h"

namespace jit::test {

/// For EXPECT_TRUE(matches(out, ref_out, tol)): success, or a failure carrying compare()'s
/// message.
::testing::AssertionResult matches(const HostTensor& actual, const HostTensor& expected,
                                   Tolerance tol);

/// Expects codegen::ref::run(spec, args) to fail with kInvalidArgument whose message contains
/// `needle` (an argument name, usually quoted), and every tensor of `watched` to keep its bytes
/// (the contract: nothing is written when an argument is rejected).
void expect_ref_rejects(const OpSpec& spec, const KernelArgs& args, std::string_view needle,
                        const std::vector<const HostTensor*>& watched);

/// A tensor of `sizes` filled with seeded normal values (so that an accidental write of the same
/// value is unlikely to go unnoticed).
HostTensor filled(DType dtype, std::vector<int64_t> sizes, uint64_t seed = 99);

}  // namespace jit::test
