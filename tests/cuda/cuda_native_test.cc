// Native launches on a GPU: each kernel on device memory against ref on the host copy.
// Skipped, with the reason printed, when no CUDA driver or GPU exists.
#include <gtest/gtest.h>

#include "codegen/cuda/cuda_backend.h"
#include "codegen/cuda/driver.h"
#include "codegen/ref/ref.h"
#include "runtime/runtime.h"
#include "tests/cuda/cuda_specs.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

namespace cu = codegen::cuda;

#define REQUIRE_GPU()                                                             \
  do {                                                                            \
    auto driver = cu::Driver::get();                                              \
    if (!driver.is_ok()) GTEST_SKIP() << "no GPU: " << driver.status().message(); \
  } while (0)

// A device copy of an OpCase's tensors with cuda views, written back on request.
struct DeviceCase {
  const cu::Driver* driver;
  std::vector<void*> buffers;
  KernelArgs args;

  DeviceCase(const cu::Driver* d, const OpSpec& spec, const test::OpCase& c) : driver(d) {
    for (size_t i = 0; i < c.tensors.size(); ++i) {
      const test::HostTensor& h = c.tensors[i];
      // swap_blocks' mapping is read by the host (a CPU tensor, as in vLLM).
      if (spec.op == OpKind::kSwapBlocks && i == 2) {
        buffers.push_back(nullptr);
        args.add(h.tensor());
        continue;
      }
      if (!c.present[i]) {
        buffers.push_back(nullptr);
        args.add(Tensor());
        continue;
      }
      const auto& bytes = h.storage();
      void* p = d->alloc(bytes.size()).value();
      (void)d->copy_to_device(p, bytes.data(), bytes.size());
      buffers.push_back(p);
      const Tensor host = h.tensor();
      const auto offset = static_cast<const std::byte*>(host.data()) - bytes.data();
      args.add(Tensor(static_cast<std::byte*>(p) + offset, host.dtype(), host.dim(), host.sizes(),
                      host.strides(), Device::cuda(0)));
    }
    for (double s : c.scalars) args.add_scalar(s);
  }
  void copy_back(test::OpCase& c) {
    for (int i : c.outputs) {
      auto& storage = const_cast<std::vector<std::byte>&>(c.tensors[size_t(i)].storage());
      (void)driver->copy_to_host(storage.data(), buffers[size_t(i)], storage.size());
    }
  }
  ~DeviceCase() {
    for (void* p : buffers) {
      if (p != nullptr) (void)driver->free(p);
    }
  }
};

TEST(CudaNative, EveryKernelMatchesRefOnTheGpu) {
  REQUIRE_GPU();
  const cu::Driver* driver = cu::Driver::get().value();
  Runtime runtime{RuntimeOptions{}};
  std::vector<OpSpec> specs = test::cuda::emulator_specs();
  for (const OpSpec& spec : test::cuda::paged_attention_specs()) specs.push_back(spec);
  for (const OpSpec& spec : specs) {
    CompileOptions options;
    options.backend = BackendKind::kCuda;
    auto kernel = runtime.compile(spec, options);
    ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
    const int64_t rows = op_family(spec.op) == "topk"     ? 12
                         : spec.op == OpKind::kSwapBlocks ? 29
                                                          : 3;
    for (test::InputKind kind : test::input_kinds_for(spec.op)) {
      auto c = test::make_case(spec, rows, kind, 11);
      ASSERT_TRUE(c.is_ok());
      test::OpCase expected = c.value();
      ASSERT_TRUE(codegen::ref::run(spec, expected.args()).is_ok());
      DeviceCase dev(driver, spec, c.value());
      ASSERT_TRUE(kernel->run(dev.args).is_ok()) << to_string(spec);
      ASSERT_TRUE(driver->synchronize().is_ok());
      dev.copy_back(c.value());
      for (size_t o = 0; o < c->outputs.size(); ++o) {
        const int i = c->outputs[o];
        const auto r = test::compare(c->tensors[size_t(i)], expected.tensors[size_t(i)],
                                     test::tolerance_for(spec.op, c->tensors[size_t(i)].dtype()));
        EXPECT_TRUE(r.ok()) << to_string(spec) << " " << test::input_kind_name(kind) << "\n"
                            << r.message;
      }
    }
  }
}

}  // namespace
}  // namespace jit
