// paged_attention_v1/v2 on the CUDA backend without a GPU: NVRTC compiles the default configs
// for sm_80, sm_90 and sm_100 without spills; the SIMT emulator runs the same rendered
// instantiations (gen_simt_kernels) against ref over head sizes, block sizes, GQA groups, fp8
// caches, ALiBi and v2 partitions (the op cases hold a single-token sequence, a partial last
// page, whole pages, an empty sequence, and NaN in every slot no sequence owns); the GQA
// sharing and the v2 reduce launch are checked on the launch plan.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <future>
#include <iostream>
#include <mutex>
#include <set>

#include "codegen/cuda/cuda_backend.h"
#include "codegen/cuda/launch.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/cuda/paged_attention.h"
#include "runtime/runtime.h"
#include "tests/cuda/cuda_specs.h"
#include "tests/cuda/emulated_check.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

namespace cu = codegen::cuda;

// Runs `work(i)` for i in [0, n) on two threads (the emulator keeps its state per OS thread).
template <class F>
void on_two_threads(size_t n, F work) {
  auto other = std::async(std::launch::async, [&] {
    for (size_t i = 1; i < n; i += 2) work(i);
  });
  for (size_t i = 0; i < n; i += 2) work(i);
  other.get();
}

TEST(CudaPagedAttention, CompilesForSm80Sm90Sm100WithoutSpills) {
  if (auto nvrtc = cu::Nvrtc::get(); !nvrtc.is_ok()) {
    GTEST_SKIP() << "NVRTC not found: " << nvrtc.status().to_string();
  }
  std::vector<std::pair<OpSpec, cu::SmArch>> jobs;
  for (const OpSpec& spec : test::cuda::paged_attention_compile_specs()) {
    for (int sm : {80, 90, 100}) jobs.emplace_back(spec, cu::SmArch{sm, false});
  }
  std::mutex mutex;
  std::vector<std::string> failures, reports(jobs.size());
  on_two_threads(jobs.size(), [&](size_t i) {
    const auto& [spec, arch] = jobs[i];
    auto bin = cu::compile_kernel(spec, cu::cuda_configs(spec).front(), arch);
    std::string problem;
    if (!bin.is_ok()) {
      problem = bin.status().to_string();
    } else if (bin->cubin.empty()) {
      problem = "no cubin";
    } else if (bin->report().registers <= 0) {
      problem = "no ptxas report: " + bin->ptxas_log;
    } else if (bin->report().spill_stores != 0 || bin->report().spill_loads != 0) {
      problem = "spills: " + bin->report().to_string();
    }
    std::lock_guard lock(mutex);
    if (!problem.empty()) {
      failures.push_back(to_string(spec) + " " + arch.name() + ": " + problem);
    } else {
      reports[i] =
          fmt::format("{} {}: {}", to_string(spec), arch.name(), bin->report().to_string());
    }
  });
  for (const std::string& f : failures) ADD_FAILURE() << f;
  for (const std::string& r : reports) std::cout << r << "\n";  // the resource use, for the docs
}

// Every failing job of `jobs` as a test failure.
void check_emulated(const std::vector<std::pair<OpSpec, Config>>& jobs) {
  for (const std::string& f : test::cuda::emulated_failures(jobs)) ADD_FAILURE() << f;
}

// Every spec of the emulator grid, default config, 1 and 3 sequences x the attention input
// kinds (normal, small integers, equal values), against ref: out, and for v2 also exp_sums,
// max_logits and tmp_out.
TEST(CudaPagedAttention, EmulatedMatchesRef) {
  const std::vector<OpSpec> specs = test::cuda::paged_attention_specs();
  ASSERT_GE(specs.size(), 19u);
  std::vector<std::pair<OpSpec, Config>> jobs;
  for (const OpSpec& spec : specs) jobs.emplace_back(spec, cu::cuda_configs(spec).front());
  check_emulated(jobs);
}

// Every point of the tuning space: threads 128-1024 (the default heads per CTA at each) and
// heads_per_cta 1 .. the group (so one CTA per query head, as vLLM, up to one per kv head).
TEST(CudaPagedAttention, EveryConfigOfTheTuningSpaceMatchesRef) {
  std::vector<std::pair<OpSpec, Config>> jobs;
  std::set<int64_t> heads_seen;
  for (const OpSpec& spec : test::cuda::paged_attention_tuning_specs()) {
    for (const Config& config : cu::cuda_configs(spec)) {
      jobs.emplace_back(spec, config);
      heads_seen.insert(config.get(cu::kHeadsPerCta, 0));
    }
  }
  EXPECT_EQ(heads_seen, (std::set<int64_t>{1, 2, 4, 8}));
  ASSERT_GE(jobs.size(), 13u);
  check_emulated(jobs);
}

ir::PagedAttentionParams gqa_params(int64_t partition_size) {
  ir::PagedAttentionParams p;
  p.dtype = DType::kBF16, p.head_size = 128, p.block_size = 16;
  p.head_count_q = 32, p.head_count_kv = 4, p.partition_size = partition_size;
  return p;
}

// GQA: one CTA per (kv head, sequence, partition) serves query heads of one kv head, so each
// key/value is loaded once per CTA instead of once per query head: by default half the group
// of 8 (v1 at 512 threads, v2 at 256); v2 adds the reduce launch (one CTA per query head).
TEST(CudaPagedAttention, OneCtaPerKvHeadAndAReduceForV2) {
  for (bool v2 : {false, true}) {
    const OpSpec spec = OpSpec::make(v2 ? OpKind::kPagedAttentionV2 : OpKind::kPagedAttentionV1,
                                     gqa_params(v2 ? 32 : 0));
    auto r = cu::render(spec, cu::cuda_configs(spec).front());
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_NE(r->config_members.find("kHeadsPerCta = 4;"), std::string::npos) << r->config_members;
    EXPECT_NE(r->config_members.find("using Kv = kiln::KvAuto<kiln::bf16>;"), std::string::npos);
    EXPECT_NE(r->config_members.find("using Bias = kiln::NoAlibi;"), std::string::npos);
    EXPECT_NE(r->config_members.find("using Sparse = kiln::Dense;"), std::string::npos);
    auto c = test::make_case(spec, 3, test::InputKind::kNormal, 7);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    auto plans = cu::plan_launch(spec, cu::cuda_configs(spec).front(), c->args(), true);
    ASSERT_TRUE(plans.is_ok()) << plans.status().to_string();
    ASSERT_EQ(plans->size(), 1u);  // v2's reduce is chained to the one plan
    const cu::LaunchPlan* plan = &plans->front();
    EXPECT_EQ(plan->grid[0], 8u);  // kv heads x 2 CTAs per group
    EXPECT_EQ(plan->grid[1], 3u);  // sequences
    EXPECT_EQ(plan->block[0], v2 ? 256u : 512u);
    if (v2) {
      EXPECT_GE(plan->grid[2], 2u);  // partitions of 32 tokens
      ASSERT_NE(plan->then, nullptr);
      EXPECT_EQ(plan->then->grid[0], 32u);  // query heads
      EXPECT_EQ(plan->then->shared_bytes, plan->grid[2] * 4);
    } else {
      EXPECT_EQ(plan->grid[2], 1u);
      EXPECT_EQ(plan->then, nullptr);
    }
  }
  // heads_per_cta=2: 16 CTAs per sequence, each for two query heads of one kv head.
  {
    const OpSpec spec = OpSpec::make(OpKind::kPagedAttentionV2, gqa_params(32));
    const Config two = Config().set(std::string(cu::kHeadsPerCta), 2);
    auto r = cu::render(spec, two);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_NE(r->config_members.find("kHeadsPerCta = 2;"), std::string::npos) << r->config_members;
    auto c = test::make_case(spec, 3, test::InputKind::kNormal, 7);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    auto plans = cu::plan_launch(spec, two, c->args(), true);
    ASSERT_TRUE(plans.is_ok()) << plans.status().to_string();
    EXPECT_EQ(plans->front().grid[0], 16u);
    ASSERT_NE(plans->front().then, nullptr);
    EXPECT_EQ(plans->front().then->grid[0], 32u);  // the reduce: one CTA per query head
  }
  // A group of 12 heads is split into CTAs of 4 (the largest divisor <= 4); 6 is allowed.
  ir::PagedAttentionParams p = gqa_params(0);
  p.head_count_q = 48;
  EXPECT_EQ(cu::paged_attention_heads_per_cta(p, 128), 4);
  const std::vector<int64_t> twelve = cu::paged_attention_heads_choices(p, 128);
  EXPECT_NE(std::find(twelve.begin(), twelve.end(), 6), twelve.end());
  // At most 4 heads by default; head 512 at 128 threads has four dims per thread in P·V, so 2
  // heads (8 accumulators); at 1024 threads (two slices) one dim each, 4 heads.
  p.head_count_q = 32;
  p.head_size = 256;
  EXPECT_EQ(cu::paged_attention_heads_per_cta(p, 128), 4);
  EXPECT_EQ(cu::paged_attention_heads_per_cta(p, 512), 4);
  p.head_size = 512;
  EXPECT_EQ(cu::paged_attention_heads_per_cta(p, 128), 2);
  EXPECT_EQ(cu::paged_attention_heads_per_cta(p, 1024), 4);
  // Head 4096 at 1024 threads: one head per CTA keeps static shared memory under 48 KiB.
  p.head_size = 4096;
  EXPECT_EQ(cu::paged_attention_heads_per_cta(p, 1024), 1);
}

// A config as a caller gives it (nothing, threads only, heads only) is rendered and launched
// with the same threads and heads per CTA. Head 512, GQA 8: v1's default 512 threads serve 4
// heads (one dim per thread in P·V), 128 threads 2 (four dims each: the 8-accumulator cap);
// v2's default 256 threads serve 4 (two dims each).
TEST(CudaPagedAttention, RenderAndLaunchAgreeOnTheDefaultHeadsPerCta) {
  struct Expect {
    bool v2;
    Config config;
    int64_t threads, heads;
  };
  const std::vector<Expect> cases = {
      {false, Config(), 512, 4},
      {false, Config().set("threads", 128), 128, 2},
      {false, Config().set(std::string(cu::kHeadsPerCta), 8), 512, 8},
      {true, Config(), 256, 4},
      {true, Config().set(std::string(cu::kHeadsPerCta), 1), 256, 1},
  };
  for (const Expect& e : cases) {
    ir::PagedAttentionParams p = gqa_params(e.v2 ? 32 : 0);
    p.head_size = 512;
    const OpSpec spec =
        OpSpec::make(e.v2 ? OpKind::kPagedAttentionV2 : OpKind::kPagedAttentionV1, p);
    auto c = test::make_case(spec, 2, test::InputKind::kNormal, 3);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    const std::string what = fmt::format("{} {}", op_name(spec.op), e.config.to_string());
    auto r = cu::render(spec, e.config);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_NE(r->config_members.find(fmt::format("kHeadsPerCta = {};", e.heads)), std::string::npos)
        << what << "\n"
        << r->config_members;
    auto plans = cu::plan_launch(spec, e.config, c->args(), true);
    ASSERT_TRUE(plans.is_ok()) << plans.status().to_string();
    EXPECT_EQ(plans->front().grid[0], unsigned(32 / e.heads)) << what;  // query heads / heads
    EXPECT_EQ(plans->front().block[0], unsigned(e.threads)) << what;
  }
  const OpSpec spec = OpSpec::make(OpKind::kPagedAttentionV1, gqa_params(0));
  auto c = test::make_case(spec, 2, test::InputKind::kNormal, 3);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  // A bad knob that never went through render is refused by the plan too (no division by 0).
  auto zero =
      cu::plan_launch(spec, Config().set(std::string(cu::kHeadsPerCta), 0), c->args(), true);
  ASSERT_FALSE(zero.is_ok());
  EXPECT_NE(zero.status().message().find("heads_per_cta=0"), std::string::npos);
}

TEST(CudaPagedAttention, BadHeadsPerCtaNamesTheAllowedValues) {
  const OpSpec spec = OpSpec::make(OpKind::kPagedAttentionV1, gqa_params(0));
  for (int64_t heads : {0, 3, 16, -1}) {
    auto r = cu::render(spec, Config().set(std::string(cu::kHeadsPerCta), heads));
    ASSERT_FALSE(r.is_ok()) << heads;
    EXPECT_NE(r.status().message().find(fmt::format("heads_per_cta={} is not allowed", heads)),
              std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("allowed: 1, 2, 4, 8"), std::string::npos)
        << r.status().message();
  }
  // Head 4096 at 1024 threads: only one head fits the static shared memory.
  ir::PagedAttentionParams big = gqa_params(0);
  big.head_size = 4096;
  auto r = cu::render(OpSpec::make(OpKind::kPagedAttentionV1, big),
                      Config().set("threads", 1024).set(std::string(cu::kHeadsPerCta), 2));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("allowed: 1"), std::string::npos) << r.status().message();
  // vec is not a paged attention knob; the message lists the ones it has.
  auto v = cu::render(spec, Config().set("vec", 4));
  ASSERT_FALSE(v.is_ok());
  EXPECT_NE(v.status().message().find(
                "unknown knob 'vec' for paged_attention_v1; allowed: threads, heads_per_cta"),
            std::string::npos)
      << v.status().message();
}

TEST(CudaPagedAttention, PoliciesAreRenderedAsTypes) {
  ir::PagedAttentionParams p = gqa_params(0);
  p.blocksparse = true, p.alibi = true, p.kv = ir::KvCacheDtype::kFp8E5m2;
  const OpSpec spec = OpSpec::make(OpKind::kPagedAttentionV1, p);
  auto r = cu::render(spec, cu::cuda_configs(spec).front());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  for (const char* line :
       {"using Kv = kiln::KvFp8<kiln::bf16, kiln::fp8e5m2>;", "using Bias = kiln::Alibi;",
        "using Sparse = kiln::BlockSparse;", "kPartitionSize = 0;"}) {
    EXPECT_NE(r->config_members.find(line), std::string::npos) << line << "\n" << r->config_members;
  }
}

TEST(CudaPagedAttention, BadSequenceIsRejectedBeforeWriting) {
  const OpSpec spec = OpSpec::make(OpKind::kPagedAttentionV1, gqa_params(0));
  auto c = test::make_case(spec, 3, test::InputKind::kNormal, 11);
  ASSERT_TRUE(c.is_ok());
  // Sequence 1's first block outside the cache.
  const int64_t width = c->tensors[4].sizes()[1];
  c->tensors[4].set(1 * width, double(c->tensors[2].sizes()[0]));
  auto plan = cu::plan_launch(spec, cu::cuda_configs(spec).front(), c->args(), true);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_NE(plan.status().message().find("block_tables"), std::string::npos)
      << plan.status().message();
}

}  // namespace
}  // namespace jit
