// The search over configs with injected known costs, and the real cost on an x86 kernel.
#include "autotune/tuner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "runtime/tuning_db.h"

namespace jit::autotune {
namespace {

Config knob(int64_t v) {
  return Config().set("v", v);
}

// Costs by knob value; records which configs were measured at which effort.
struct KnownCosts {
  std::map<int64_t, double> costs;  // knob v -> us; the default (no knob) is v=0
  std::vector<std::pair<int64_t, Effort>> calls = {};

  CostFn fn() {
    return [this](const Config& config, Effort effort) -> Result<double> {
      const int64_t v = config.get("v", 0);
      calls.emplace_back(v, effort);
      if (costs.at(v) < 0) return Status(StatusCode::kInternal, "disagrees with ref");
      return costs.at(v);
    };
  }
  int full_calls(int64_t v) const {
    int n = 0;
    for (const auto& [value, effort] : calls) n += value == v && effort == Effort::kFull;
    return n;
  }
};

std::vector<Config> space_of(int n) {
  std::vector<Config> space{Config{}};
  for (int v = 1; v < n; ++v) space.push_back(knob(v));
  return space;
}

TEST(Search, PicksTheFastestOfKnownCosts) {
  KnownCosts k{{{0, 10.0}, {1, 8.0}, {2, 4.0}, {3, 5.0}, {4, 9.0}}};
  auto result = search(space_of(5), k.fn());
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  EXPECT_EQ(result->best, knob(2));
  EXPECT_DOUBLE_EQ(result->best_us, 4.0);
  EXPECT_DOUBLE_EQ(result->default_us, 10.0);
  EXPECT_DOUBLE_EQ(result->speedup(), 2.5);
  EXPECT_EQ(result->tried, 5u);
}

TEST(Search, DefaultWinsWhenNothingIsFaster) {
  KnownCosts k{{{0, 3.0}, {1, 3.5}, {2, 3.1}}};
  auto result = search(space_of(3), k.fn());
  ASSERT_TRUE(result.is_ok());
  EXPECT_EQ(result->best, Config{});
  EXPECT_DOUBLE_EQ(result->speedup(), 1.0);
}

TEST(Search, ClearlyWorseCandidatesAreStoppedEarly) {
  // v=1 becomes the best at 2 us; v=2 (10 us) and v=3 (2.9 us) are beyond 1.3 x 2 us.
  KnownCosts k{{{0, 5.0}, {1, 2.0}, {2, 10.0}, {3, 2.9}, {4, 2.5}}};
  SearchOptions options;
  options.prune_ratio = 1.3;
  auto result = search(space_of(5), k.fn(), options);
  ASSERT_TRUE(result.is_ok());
  EXPECT_EQ(result->best, knob(1));
  EXPECT_EQ(result->pruned, 2u);
  EXPECT_EQ(k.full_calls(2), 0) << "a clearly worse candidate must not get a full measurement";
  EXPECT_EQ(k.full_calls(3), 0);
  EXPECT_EQ(k.full_calls(4), 1) << "a close candidate gets the full measurement";
  EXPECT_TRUE(result->candidates[2].pruned);
}

TEST(Search, GainWithinTheNoiseKeepsTheDefault) {
  KnownCosts k{{{0, 10.0}, {1, 9.8}, {2, 9.9}}};
  SearchOptions options;
  options.min_gain = 0.03;
  auto result = search(space_of(3), k.fn(), options);
  ASSERT_TRUE(result.is_ok());
  EXPECT_EQ(result->best, Config{}) << "2% is within the noise: the default stays";
  options.min_gain = 0.01;
  result = search(space_of(3), k.fn(), options);
  EXPECT_EQ(result->best, knob(1));
}

TEST(Search, FailingCandidateIsNeverChosen) {
  KnownCosts k{{{0, 5.0}, {1, -1.0}, {2, 4.0}}};
  auto result = search(space_of(3), k.fn());
  ASSERT_TRUE(result.is_ok());
  EXPECT_EQ(result->best, knob(2));
  EXPECT_NE(result->candidates[1].error.find("ref"), std::string::npos);
}

TEST(Search, FailingDefaultIsAnError) {
  KnownCosts k{{{0, -1.0}, {1, 1.0}}};
  auto result = search(space_of(2), k.fn());
  ASSERT_FALSE(result.is_ok());
  EXPECT_NE(result.status().message().find("default"), std::string::npos);
}

TEST(Search, LargeSpaceIsSampledWithinTheLimit) {
  KnownCosts k;
  for (int v = 0; v < 100; ++v) k.costs[v] = 100.0 - v * 0.5;
  SearchOptions options;
  options.exhaustive_limit = 10;
  auto result = search(space_of(100), k.fn(), options);
  ASSERT_TRUE(result.is_ok());
  EXPECT_LE(result->tried, 10u);
  EXPECT_EQ(result->candidates.front().config, Config{}) << "the default is always measured";
  EXPECT_EQ(result->best, knob(99)) << "the last candidate of the space is in the sample";
}

TEST(Search, SpentBudgetStopsAfterTheDefault) {
  KnownCosts k{{{0, 5.0}, {1, 1.0}, {2, 1.0}}};
  SearchOptions options;
  options.budget_seconds = 1e-9;
  auto slow = [&](const Config& c, Effort e) -> Result<double> {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return k.fn()(c, e);
  };
  auto result = search(space_of(3), slow, options);
  ASSERT_TRUE(result.is_ok());
  EXPECT_TRUE(result->budget_exhausted);
  EXPECT_EQ(result->tried, 1u);
  EXPECT_EQ(result->best, Config{});
}

TEST(Search, ProgressReportsEachCandidate) {
  KnownCosts k{{{0, 6.0}, {1, 3.0}, {2, 4.0}}};
  std::vector<SearchProgress> seen;
  SearchOptions options;
  options.progress = [&](const SearchProgress& p) { seen.push_back(p); };
  ASSERT_TRUE(search(space_of(3), k.fn(), options).is_ok());
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2].tried, 3u);
  EXPECT_EQ(seen[2].total, 3u);
  EXPECT_DOUBLE_EQ(seen[1].best_us, 3.0);
  EXPECT_DOUBLE_EQ(seen[1].default_us, 6.0);
}

TEST(Timing, MedianOfAStableCallSettles) {
  TimingOptions options;
  options.max_seconds = 2;
  volatile double sink = 0;
  const Timing t = measure(
      [&](size_t) {
        for (int i = 0; i < 2000; ++i) sink = sink + i * 0.5;
      },
      options);
  EXPECT_GT(t.median_us, 0);
  EXPECT_GE(t.samples, options.min_samples);
  EXPECT_GE(t.calls_per_sample, 1);
}

TEST(Timing, ColdCacheRotatesMoreThanTheLastLevelCache) {
  const size_t llc = last_level_cache_bytes();
  EXPECT_GT(llc, 0u);
  const size_t copies = rotation_copies(64 << 10, /*cold=*/true);
  EXPECT_GE(copies * (64 << 10), std::min<size_t>(2 * llc, size_t(1) << 30));
  EXPECT_EQ(rotation_copies(64 << 10, /*cold=*/false), 1u);
  EXPECT_TRUE(
      memory_bound(OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kBF16, 4096}), 1));
}

TEST(TuneSpec, RealKernelsAreCheckedTimedAndGiveAnEntry) {
  Runtime runtime(RuntimeOptions{});
  const OpSpec spec = OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kBF16, 256});
  TuneOptions options;
  options.timing.max_seconds = 0.05;
  options.quick.max_seconds = 0.01;
  options.cold_cache = false;
  auto tuned = tune_spec(runtime, spec, 5, options);
  ASSERT_TRUE(tuned.is_ok()) << tuned.status().to_string();
  const runtime::TuningEntry& e = tuned->entry;
  EXPECT_EQ(e.spec, to_string(spec));
  EXPECT_EQ(e.token_bucket, 8);
  EXPECT_EQ(e.backend, "x86");
  EXPECT_EQ(e.target, host_target(BackendKind::kX86).fingerprint);
  EXPECT_GT(e.time_us, 0);
  EXPECT_GE(e.speedup, 1.0) << "the winner is never slower than the default it was compared to";
  EXPECT_EQ(tuned->search.tried, 7u) << "the x86 space: default + 2 threads x 3 thresholds";
  EXPECT_FALSE(e.date.empty());
  EXPECT_EQ(e.kiln_version, kiln_version());
}

TEST(TuneSpec, RefOnlySpecHasNothingToTune) {
  Runtime runtime(RuntimeOptions{});
  const OpSpec spec = OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kBF16, 64});
  CompileOptions ref;
  ref.backend = BackendKind::kRef;
  ASSERT_TRUE(runtime.compile(spec, ref).is_ok());
  // Capping the ISA below AVX2 makes dispatch choose ref, whose space is the default only.
  RuntimeOptions capped;
  capped.isa_cap = X86Isa::kNone;
  Runtime ref_runtime(capped);
  auto tuned = tune_spec(ref_runtime, spec, 1);
  ASSERT_FALSE(tuned.is_ok());
  EXPECT_EQ(tuned.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(tuned.status().message().find("nothing to tune"), std::string::npos);
}

}  // namespace
}  // namespace jit::autotune
