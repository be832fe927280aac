// Native launches on a GPU: each kernel on device memory against ref on the host copy.
// Skipped, with the reason printed, when no CUDA driver or GPU exists.
#include <gtest/gtest.h>

#include <cstdio>

#include "codegen/cuda/cuda_backend.h"
#include "codegen/cuda/driver.h"
#include "codegen/ref/ref.h"
#include "runtime/prewarm.h"
#include "runtime/runtime.h"
#include "tests/cuda/cuda_specs.h"
#include "tests/cuda/device_case.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

namespace cu = codegen::cuda;

#define REQUIRE_GPU()                                                             \
  do {                                                                            \
    auto driver = cu::Driver::get();                                              \
    if (!driver.is_ok()) GTEST_SKIP() << "no GPU: " << driver.status().message(); \
  } while (0)

TEST(CudaNative, EveryKernelMatchesRefOnTheGpu) {
  REQUIRE_GPU();
  const cu::Driver* driver = cu::Driver::get().value();
  Runtime runtime{RuntimeOptions{}};
  std::vector<OpSpec> specs = test::cuda::emulator_specs();
  for (const OpSpec& spec : test::cuda::paged_attention_specs()) specs.push_back(spec);
  // NVRTC compiles the grid on every core first (a GPU host has many; one after another
  // they took minutes); the launches below then find their kernels in memory.
  PrewarmOptions warm;
  warm.compile.backend = BackendKind::kCuda;
  warm.seal = false;
  const PrewarmReport warmed = prewarm(runtime, specs, warm);
  std::printf("compiled %zu kernels in %.1f s (%zu failed, reported below)\n", warmed.kernels,
              warmed.wall_ms / 1000, warmed.failures.size());
  // A failing kernel is reported and the grid goes on: one GPU run shows every failure.
  int cases_run = 0;
  for (const OpSpec& spec : specs) {
    CompileOptions options;
    options.backend = BackendKind::kCuda;
    auto kernel = runtime.compile(spec, options);
    if (!kernel.is_ok()) {
      ADD_FAILURE() << to_string(spec) << ": " << kernel.status().to_string();
      continue;
    }
    const int64_t rows = op_family(spec.op) == "topk"     ? 12
                         : spec.op == OpKind::kSwapBlocks ? 29
                                                          : 3;
    for (test::InputKind kind : test::input_kinds_for(spec.op)) {
      auto c = test::make_case(spec, rows, kind, 11);
      ASSERT_TRUE(c.is_ok()) << c.status().to_string();
      test::OpCase expected = c.value();
      ASSERT_TRUE(codegen::ref::run(spec, expected.args()).is_ok());
      test::cuda::DeviceCase dev(driver, spec, c.value());
      if (!dev.status.is_ok()) {
        ADD_FAILURE() << to_string(spec) << ": " << dev.status.to_string();
        break;
      }
      Status launched = kernel->run(dev.args);
      if (launched.is_ok()) launched = driver->synchronize();
      if (launched.is_ok()) launched = dev.copy_back(c.value());
      if (!launched.is_ok()) {
        ADD_FAILURE() << to_string(spec) << " " << test::input_kind_name(kind) << ": "
                      << launched.to_string();
        continue;
      }
      ++cases_run;
      const test::CaseReport report = test::compare_outputs(spec, c.value(), expected);
      EXPECT_TRUE(report.ok) << to_string(spec) << " " << test::input_kind_name(kind) << "\n"
                             << report.message;
    }
  }
  std::printf("native GPU: %d cases of %zu kernels ran on the device\n", cases_run, specs.size());
}

}  // namespace
}  // namespace jit
