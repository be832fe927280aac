// Every CUDA kernel's numerics through the SIMT emulator against the ref backend: the same
// rendered instantiations NVRTC compiles (generated at build time by gen_simt_kernels), run on
// the CPU over the op-case harness's inputs (normal, small integers, equal values, adversarial
// where the op takes them) at 1 and 3 rows, and every config of a few specs' tuning spaces.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

// The emulation header first, then the templates' helpers under test.
#include "codegen/cuda/cuda_backend.h"
#include "codegen/cuda/simt/simt.h"
#include "codegen/cuda/simt/simt_runtime.h"
#include "codegen/ref/ref.h"
#include "ir/numeric.h"
#include "kiln_common.cuh"
#include "runtime/runtime.h"
#include "tests/cuda/cuda_specs.h"
#include "tests/cuda/emulated_check.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

namespace cu = codegen::cuda;

using test::cuda::emulated_kernel;

// Every failing job of `jobs` as a test failure.
void check_all(const std::vector<std::pair<OpSpec, Config>>& jobs) {
  for (const std::string& f : test::cuda::emulated_failures(jobs)) ADD_FAILURE() << f;
}

std::vector<std::pair<OpSpec, Config>> default_jobs(std::string_view family) {
  std::vector<std::pair<OpSpec, Config>> jobs;
  for (const OpSpec& spec : test::cuda::emulator_specs()) {
    if (op_family(spec.op) == family) jobs.emplace_back(spec, cu::cuda_configs(spec).front());
  }
  return jobs;
}

TEST(CudaEmulated, NormMatchesRef) {
  const auto jobs = default_jobs("norm");
  ASSERT_GE(jobs.size(), 90u);
  check_all(jobs);
}

TEST(CudaEmulated, ActivationsMatchRef) {
  const auto jobs = default_jobs("activation");
  ASSERT_GE(jobs.size(), 250u);
  check_all(jobs);
}

TEST(CudaEmulated, RotaryMatchesRef) {
  const auto jobs = default_jobs("rope");
  ASSERT_GE(jobs.size(), 20u);
  check_all(jobs);
}

TEST(CudaEmulated, CacheWritesAndConvertFp8MatchRef) {
  const auto jobs = default_jobs("cache");
  ASSERT_GE(jobs.size(), 60u);
  check_all(jobs);
}

TEST(CudaEmulated, MergeAttnStatesMatchesRef) {
  const auto jobs = default_jobs("attention");
  ASSERT_GE(jobs.size(), 18u);
  check_all(jobs);
}

TEST(CudaEmulated, TopKMatchesRef) {
  const auto jobs = default_jobs("topk");
  ASSERT_GE(jobs.size(), 8u);
  check_all(jobs);
}

TEST(CudaEmulated, VerticalSlashConvertersMatchRef) {
  const auto jobs = default_jobs("sparse_index");
  ASSERT_GE(jobs.size(), 8u);
  check_all(jobs);
}

TEST(CudaEmulated, EveryConfigOfTheTuningSpaceMatchesRef) {
  std::vector<std::pair<OpSpec, Config>> jobs;
  for (const OpSpec& spec : test::cuda::emulator_tuning_specs()) {
    for (const Config& config : cu::cuda_configs(spec)) jobs.emplace_back(spec, config);
  }
  ASSERT_GE(jobs.size(), 15u);
  check_all(jobs);
}

TEST(CudaEmulated, ZeroRowsIsANoOp) {
  const OpSpec spec = test::cuda::emulator_specs().front();
  auto kernel = emulated_kernel(spec, cu::cuda_configs(spec).front());
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  auto c = test::make_case(spec, 0, test::InputKind::kNormal, 1);
  ASSERT_TRUE(c.is_ok());
  EXPECT_TRUE(kernel->run(c->args()).is_ok());
}

TEST(CudaEmulated, RopePositionOutsideTheCacheIsRejectedBeforeWriting) {
  const OpSpec spec = [] {
    for (const OpSpec& s : test::cuda::emulator_specs()) {
      if (s.op == OpKind::kRotaryEmbedding) return s;
    }
    return OpSpec{};
  }();
  auto kernel = emulated_kernel(spec, cu::cuda_configs(spec).front());
  ASSERT_TRUE(kernel.is_ok());
  auto c = test::make_case(spec, 3, test::InputKind::kNormal, 5);
  ASSERT_TRUE(c.is_ok());
  const int64_t cache_rows = c->tensors[3].sizes()[0];
  c->tensors[0].set(2, double(cache_rows));  // one past the end
  const auto before = c->tensors[1].storage();
  const Status s = kernel->run(c->args());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(c->tensors[1].storage(), before) << "query was written";
}

// A vector config on rows that break its alignment (row stride 1001 bf16 elements) takes the
// kernel's one-element path at run time and still matches ref.
TEST(CudaEmulated, UnalignedRowsFallBackToScalarAccesses) {
  const OpSpec spec = OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kBF16, 1000, true});
  const Config config = cu::cuda_configs(spec).front();
  ASSERT_EQ(config.get("vec", 1), 8);
  auto kernel = emulated_kernel(spec, config);
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  test::HostTensor input = test::HostTensor::row_strided(DType::kBF16, {3, 1000}, 1001);
  test::HostTensor weight = test::HostTensor::zeros(DType::kBF16, {1000});
  test::fill_normal(input, 7);
  test::fill_normal(weight, 8, 1.0, 0.25);
  test::HostTensor out = test::HostTensor::zeros(DType::kBF16, {3, 1000});
  test::HostTensor expected = out;
  ASSERT_TRUE(
      kernel->run(KernelArgs({out.tensor(), input.tensor(), weight.tensor()}, {1e-6})).is_ok());
  ASSERT_TRUE(codegen::ref::run(
                  spec, KernelArgs({expected.tensor(), input.tensor(), weight.tensor()}, {1e-6}))
                  .is_ok());
  const auto r = test::compare(out, expected, test::tolerance_for(spec.op, DType::kBF16));
  EXPECT_TRUE(r.ok()) << r.message;
}

// Checked mode: a slot outside the cache is refused before anything is written.
TEST(CudaEmulated, SlotOutsideTheCacheIsRejectedBeforeWriting) {
  const OpSpec spec = [] {
    for (const OpSpec& s : test::cuda::emulator_specs()) {
      if (s.op == OpKind::kReshapeAndCacheFlash) return s;
    }
    return OpSpec{};
  }();
  auto kernel = emulated_kernel(spec, cu::cuda_configs(spec).front());
  ASSERT_TRUE(kernel.is_ok());
  auto c = test::make_case(spec, 3, test::InputKind::kNormal, 5);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  const auto& cache = c->tensors[2];
  const int64_t capacity = cache.sizes()[0] * spec.get<ir::FlashCacheWriteParams>().block_size;
  c->tensors[4].set(1, double(capacity));
  const auto key_cache = c->tensors[2].storage();
  const auto value_cache = c->tensors[3].storage();
  const Status s = kernel->run(c->args());
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("slot_mapping"), std::string::npos) << s.message();
  EXPECT_EQ(c->tensors[2].storage(), key_cache);
  EXPECT_EQ(c->tensors[3].storage(), value_cache);
}

// The templates' software conversions (what the emulator runs; NVRTC uses cvt.rn, which
// rounds the same way) against ir/numeric.h on every 16-bit and 8-bit code and on fp32 values
// around every rounding boundary class.
bool same_bits_or_both_nan(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(CudaConversions, DecodeEveryCode) {
  for (uint32_t c = 0; c < 65536; ++c) {
    ASSERT_TRUE(
        same_bits_or_both_nan(kiln::f16_to_f32(uint16_t(c)), numeric::f16_to_f32(uint16_t(c))))
        << std::hex << c;
    ASSERT_TRUE(
        same_bits_or_both_nan(kiln::bf16_to_f32(uint16_t(c)), numeric::bf16_to_f32(uint16_t(c))))
        << std::hex << c;
  }
  for (uint32_t c = 0; c < 256; ++c) {
    ASSERT_TRUE(same_bits_or_both_nan(kiln::fp8_e4m3_to_f32(uint8_t(c)),
                                      numeric::fp8_e4m3_to_f32(uint8_t(c))))
        << std::hex << c;
    ASSERT_TRUE(same_bits_or_both_nan(kiln::fp8_e5m2_to_f32(uint8_t(c)),
                                      numeric::fp8_e5m2_to_f32(uint8_t(c))))
        << std::hex << c;
  }
}

TEST(CudaConversions, EncodeMatchesTheHostOnEveryRoundingClass) {
  // Every fp32 bit pattern whose low 13 bits are 0, 1, 0x7FF.., half-way and half-way ± 1 (the
  // ties and near-ties of every target format), over the whole exponent range and both signs.
  const uint32_t lows[] = {0,       1,       0x7FF,   0x800,   0xFFF,    0x1000,   0x1001,
                           0x7FFFF, 0x80000, 0x80001, 0xFFFFF, 0x100000, 0x100001, 0x1FFFFF};
  int64_t checked = 0;
  for (uint32_t high = 0; high < (1u << 12); ++high) {
    for (uint32_t low : lows) {
      for (uint32_t mid : {0u, 0x00200000u, 0x00400000u, 0x00600000u}) {
        const uint32_t bits = (high << 20) | mid | low;
        const float f = std::bit_cast<float>(bits);
        ASSERT_EQ(kiln::f32_to_f16(f), numeric::f32_to_f16(f)) << std::hex << bits;
        ASSERT_EQ(kiln::f32_to_bf16(f), numeric::f32_to_bf16(f)) << std::hex << bits;
        ASSERT_EQ(kiln::f32_to_fp8_e4m3(f), numeric::f32_to_fp8_e4m3(f)) << std::hex << bits;
        ASSERT_EQ(kiln::f32_to_fp8_e5m2(f), numeric::f32_to_fp8_e5m2(f)) << std::hex << bits;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 200000);
}
}  // namespace
}  // namespace jit
