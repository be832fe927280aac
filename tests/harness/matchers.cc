#include "tests/harness/matchers.h"

#include "codegen/ref/ref.h"

namespace jit::test {

::testing::AssertionResult matches(const HostTensor& actual, const HostTensor& expected,
                                   Tolerance tol) {
  const CompareResult result = compare(actual, expected, tol);
  if (result.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << result.message;
}

void expect_ref_rejects(const OpSpec& spec, const KernelArgs& args, std::string_view needle,
                        const std::vector<const HostTensor*>& watched) {
  std::vector<std::vector<std::byte>> before;
  for (const HostTensor* t : watched) before.push_back(t->storage());
  const Status status = codegen::ref::run(spec, args);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument)
      << to_string(spec) << ": " << status.to_string();
  EXPECT_NE(status.message().find(needle), std::string::npos)
      << "message should contain " << needle << ": " << status.message();
  for (size_t i = 0; i < watched.size(); ++i) {
    EXPECT_TRUE(watched[i]->storage() == before[i]) << "watched tensor " << i << " was written";
  }
}

HostTensor filled(DType dtype, std::vector<int64_t> sizes, uint64_t seed) {
  HostTensor t = HostTensor::zeros(dtype, std::move(sizes));
  fill_normal(t, seed);
  return t;
}

}  // namespace jit::test
