// The arm backend's cache writes, copies, gathers and fp8 conversions, executed on AArch64
// (qemu-aarch64 + ORC in kiln_neon_driver) against the ref backend: every kv mode and layout,
// head sizes and element counts with tails of the 16-lane spans, adversarial values (NaN, inf,
// subnormals, overflow) for the fp8 encoder.
#include <gtest/gtest.h>

#include "tests/arm/qemu_executable.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

using ir::KvCacheDtype;
using test::InputKind;

const DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
const KvCacheDtype kKvModes[] = {KvCacheDtype::kAuto, KvCacheDtype::kFp8E4m3,
                                 KvCacheDtype::kFp8E5m2};

// Every input kind of the op over `size` rows with `mutate` applied to each case; false at the
// first mismatch. Skips (with the reason) when the emulator is unavailable.
bool check_spec(const OpSpec& spec, int64_t size,
                const std::function<void(test::OpCase&)>& mutate = {}) {
  auto kernel = test::compile_for_qemu(spec);
  if (kernel.status().code() == StatusCode::kUnavailable) {
    ADD_FAILURE() << "unreachable: availability is checked in SetUp";
    return false;
  }
  EXPECT_TRUE(kernel.is_ok()) << to_string(spec) << ": " << kernel.status().to_string();
  if (!kernel.is_ok()) return false;
  for (InputKind kind : test::input_kinds_for(spec.op)) {
    auto c = test::make_case(spec, size, kind, /*seed=*/uint64_t(size) * 131 + 7);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    if (!c.is_ok()) return false;
    if (mutate) mutate(c.value());
    const auto report = test::check_against_ref(kernel.value(), c.value());
    EXPECT_TRUE(report.ok) << to_string(spec) << " size=" << size
                           << " inputs=" << test::input_kind_name(kind) << "\n"
                           << report.message;
    if (!report.ok) return false;
  }
  return true;
}

class NeonCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto driver = test::QemuDriver::get();
    if (!driver.is_ok())
      GTEST_SKIP() << "AArch64 emulation unavailable: " << driver.status().message();
  }
};

TEST_F(NeonCacheTest, FlashWriteMatchesRef) {
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      for (ir::CacheLayout layout : {ir::CacheLayout::kNhd, ir::CacheLayout::kHnd}) {
        for (bool per_head : {false, true}) {
          if (per_head && kv == KvCacheDtype::kAuto) continue;  // scales only quantise
          for (int64_t d : {1, 17, 64}) {
            const OpSpec spec =
                OpSpec::make(OpKind::kReshapeAndCacheFlash,
                             ir::FlashCacheWriteParams{dtype, kv, 2, d, 16, layout, per_head});
            if (!check_spec(spec, 9)) return;
          }
        }
      }
    }
  }
}

TEST_F(NeonCacheTest, PagedWriteMatchesRef) {
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      for (int64_t d : {16, 48, 128}) {
        for (int64_t bs : {1, 16}) {
          const OpSpec spec = OpSpec::make(OpKind::kReshapeAndCache,
                                           ir::PagedCacheWriteParams{dtype, kv, 2, d, bs});
          if (!check_spec(spec, 7)) return;
        }
      }
    }
  }
}

TEST_F(NeonCacheTest, MlaWriteMatchesRef) {
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      for (auto [rank, pe] : {std::pair<int64_t, int64_t>{7, 3}, {33, 17}, {512, 64}}) {
        const OpSpec spec = OpSpec::make(OpKind::kConcatAndCacheMla,
                                         ir::MlaCacheWriteParams{dtype, kv, rank, pe, 16});
        if (!check_spec(spec, 5)) return;
      }
    }
  }
}

TEST_F(NeonCacheTest, SwapBlocksMatchesRef) {
  for (int64_t bytes : {1, 17, 64, 4096 + 3}) {
    const OpSpec spec = OpSpec::make(OpKind::kSwapBlocks, ir::SwapBlocksParams{bytes});
    for (int64_t pairs : {1, 5}) {
      if (!check_spec(spec, pairs)) return;
    }
  }
}

TEST_F(NeonCacheTest, ConvertFp8MatchesRefBothDirections) {
  for (DType dtype : kDtypes) {
    for (bool quantise : {true, false}) {
      const ir::ConvertFp8Params p = quantise ? ir::ConvertFp8Params{DType::kFp8E4m3, dtype}
                                              : ir::ConvertFp8Params{dtype, DType::kFp8E4m3};
      for (int64_t n : {1, 15, 16, 17, 4097}) {
        if (!check_spec(OpSpec::make(OpKind::kConvertFp8, p), n)) return;
      }
    }
  }
}

TEST_F(NeonCacheTest, CpGatherMatchesRef) {
  for (DType dtype : {DType::kU8, DType::kF16, DType::kF32}) {
    for (int64_t e : {1, 7, 64, 576}) {
      for (bool seq_starts : {true, false}) {
        const OpSpec spec =
            OpSpec::make(OpKind::kCpGatherCache, ir::CpGatherCacheParams{dtype, e, 16});
        if (!check_spec(spec, 37, [&](test::OpCase& c) { c.present[4] = seq_starts; })) return;
      }
    }
  }
}

TEST_F(NeonCacheTest, GatherAndMaybeDequantMatchesRef) {
  for (DType dtype : kDtypes) {
    for (KvCacheDtype kv : kKvModes) {
      for (int64_t d : {1, 17, 128}) {
        for (bool seq_starts : {true, false}) {
          const OpSpec spec = OpSpec::make(OpKind::kGatherAndMaybeDequantCache,
                                           ir::GatherCacheParams{dtype, kv, d, 16});
          if (!check_spec(spec, 37, [&](test::OpCase& c) { c.present[6] = seq_starts; })) {
            return;
          }
        }
      }
    }
  }
}

TEST_F(NeonCacheTest, SlotOutsideTheCacheIsAnErrorAndWritesNothing) {
  const OpSpec spec = OpSpec::make(OpKind::kReshapeAndCacheFlash,
                                   ir::FlashCacheWriteParams{DType::kBF16, KvCacheDtype::kAuto, 2,
                                                             16, 16, ir::CacheLayout::kNhd, false});
  auto kernel = test::compile_for_qemu(spec);
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  auto c = test::make_case(spec, 4, InputKind::kNormal, 3);
  ASSERT_TRUE(c.is_ok());
  const int64_t slots = c->tensors[2].sizes()[0] * 16;
  c->tensors[4].set(2, double(slots));  // one past the last slot
  const auto before = c->tensors[2].values();
  const Status status = kernel->run(c->args());
  ASSERT_FALSE(status.is_ok());
  EXPECT_NE(status.message().find("slot_mapping"), std::string::npos) << status.message();
  EXPECT_EQ(c->tensors[2].values(), before);
}

}  // namespace
}  // namespace jit
