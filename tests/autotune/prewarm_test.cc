// Prewarm from a manifest, strict mode after it, and KILN_RECORD writing the manifest.
#include "runtime/prewarm.h"

#include <gtest/gtest.h>

#include "runtime/tuning_db.h"
#include "tests/autotune/temp_dir.h"

namespace jit {
namespace {

// 50 distinct specs: five activations at ten widths.
std::vector<OpSpec> fifty_specs() {
  std::vector<OpSpec> specs;
  for (OpKind op : {OpKind::kSiluAndMul, OpKind::kMulAndSilu, OpKind::kGeluAndMul,
                    OpKind::kGeluTanhAndMul, OpKind::kFatreluAndMul}) {
    for (int64_t i = 1; i <= 10; ++i) {
      specs.push_back(OpSpec::make(op, ir::ActivationParams{DType::kBF16, 32 * i}));
    }
  }
  return specs;
}

PrewarmOptions two_threads() {
  PrewarmOptions options;
  options.threads = 2;
  return options;
}

RuntimeOptions with_cache(const std::filesystem::path& dir) {
  RuntimeOptions options;
  options.cache_dir = dir / "cache";
  return options;
}

TEST(Manifest, TextWithCommentsBlankLinesAndDuplicates) {
  auto specs = parse_manifest(
      "# kernels of the decode step\n"
      "\n"
      "silu_and_mul(dtype=bf16,d=64)   # gate/up\n"
      "  rms_norm(dtype=bf16,hidden=4096,weight=true)\n"
      "silu_and_mul(d=64,dtype=bf16)\n",
      "m.txt");
  ASSERT_TRUE(specs.is_ok()) << specs.status().to_string();
  ASSERT_EQ(specs->size(), 2u) << "the second silu_and_mul is the same canonical spec";
  EXPECT_EQ(to_string((*specs)[0]), "silu_and_mul(dtype=bf16,d=64)");
}

TEST(Manifest, JsonArrayOfSpecs) {
  auto specs = parse_manifest(
      R"j([ "silu_and_mul(dtype=bf16,d=64)", "gelu_and_mul(dtype=f32,d=8)" ])j", "m.json");
  ASSERT_TRUE(specs.is_ok()) << specs.status().to_string();
  EXPECT_EQ(specs->size(), 2u);
  auto bad = parse_manifest(R"j(["silu_and_mul(dtype=bf16,d=64)", 3])j", "m.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("element [1]"), std::string::npos);
}

TEST(Manifest, BadSpecNamesFileAndLine) {
  auto bad =
      parse_manifest("silu_and_mul(dtype=bf16,d=64)\n\nsilu_and_mul(dtype=q7,d=64)\n", "m.txt");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("m.txt:3"), std::string::npos) << bad.status().message();
  auto missing = read_manifest("/nonexistent/kiln-manifest.txt");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/kiln-manifest.txt"), std::string::npos);
}

TEST(Prewarm, FiftySpecsCompileOnceEachWithTwoThreads) {
  test::TempDir dir;
  std::string text = "# 50 specs, each listed twice\n";
  for (const OpSpec& spec : fifty_specs()) text += to_string(spec) + "\n";
  for (const OpSpec& spec : fifty_specs()) text += to_string(spec) + "\n";
  test::write_text(dir.path() / "manifest.txt", text);
  auto specs = read_manifest(dir.path() / "manifest.txt");
  ASSERT_TRUE(specs.is_ok());
  ASSERT_EQ(specs->size(), 50u);

  Runtime runtime(with_cache(dir.path()));
  size_t progress_calls = 0;
  PrewarmOptions options;
  options.threads = 2;
  options.progress = [&](size_t done, size_t total) {
    ++progress_calls;
    EXPECT_LE(done, total);
  };
  const PrewarmReport report = prewarm(runtime, specs.value(), options);
  EXPECT_TRUE(report.failures.empty());
  EXPECT_EQ(report.specs, 50u);
  EXPECT_EQ(report.kernels, 50u);
  EXPECT_EQ(report.generated, 50u);
  EXPECT_EQ(report.disk_hits, 0u);
  EXPECT_EQ(progress_calls, 50u);
  EXPECT_EQ(runtime.counters().generated, 50u);
  EXPECT_TRUE(runtime.sealed());
  // Every later compile is a memory hit.
  for (const OpSpec& spec : fifty_specs()) ASSERT_TRUE(runtime.compile(spec).is_ok());
  EXPECT_EQ(runtime.counters().generated, 50u);
  EXPECT_EQ(runtime.counters().memory_hits, 50u);

  // A second process (runtime) prewarms from the disk cache without generating.
  Runtime second(with_cache(dir.path()));
  const PrewarmReport warm = prewarm(second, specs.value(), options);
  EXPECT_EQ(warm.generated, 0u);
  EXPECT_EQ(warm.disk_hits, 50u);
}

// A GPU server prewarms its CUDA kernels with the host's cores: `PrewarmOptions::compile`
// carries the backend to every compile (NVRTC needs no GPU).
TEST(Prewarm, CudaKernelsCompileInParallelIntoTheDiskCache) {
  test::TempDir dir;
  Runtime runtime(with_cache(dir.path()));
  const std::vector<OpSpec> all = fifty_specs();
  const std::vector<OpSpec> specs(all.begin(), all.begin() + 6);
  CompileOptions cuda;
  cuda.backend = BackendKind::kCuda;
  auto probe = runtime.compile(all[10], cuda);
  if (!probe.is_ok()) GTEST_SKIP() << "no CUDA backend here: " << probe.status().to_string();

  PrewarmOptions options = two_threads();
  options.compile = cuda;
  options.seal = false;
  const PrewarmReport report = prewarm(runtime, specs, options);
  EXPECT_TRUE(report.failures.empty()) << report.failures.front();
  EXPECT_EQ(report.generated, 6u);
  const RuntimeCounters warmed = runtime.counters();
  for (const OpSpec& spec : specs) {
    auto kernel = runtime.compile(spec, cuda);
    ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
    EXPECT_EQ(kernel->info().backend, BackendKind::kCuda) << to_string(spec);
  }
  EXPECT_EQ(runtime.counters().memory_hits, warmed.memory_hits + 6);
  EXPECT_EQ(runtime.counters().generated, warmed.generated);
  // Without the option the same spec is an x86 kernel, not compiled yet.
  auto host = runtime.compile(specs[0]);
  ASSERT_TRUE(host.is_ok());
  EXPECT_NE(host->info().backend, BackendKind::kCuda);
  EXPECT_EQ(runtime.counters().generated, warmed.generated + 1);

  Runtime second(with_cache(dir.path()));
  EXPECT_EQ(prewarm(second, specs, options).disk_hits, 6u);
}

TEST(Prewarm, StrictModeRejectsSpecsOutsideTheManifest) {
  RuntimeOptions options;
  options.strict = true;
  Runtime runtime(options);
  const std::vector<OpSpec> specs = fifty_specs();
  const std::vector<OpSpec> manifest(specs.begin(), specs.begin() + 3);
  const PrewarmReport report = prewarm(runtime, manifest, two_threads());
  ASSERT_TRUE(report.failures.empty());
  EXPECT_TRUE(runtime.compile(specs[1]).is_ok()) << "a prewarmed spec stays available";
  auto late = runtime.compile(specs[10]);
  ASSERT_FALSE(late.is_ok());
  EXPECT_NE(late.status().message().find("strict"), std::string::npos);
  EXPECT_NE(late.status().message().find(to_string(specs[10])), std::string::npos)
      << "the error names the spec that was not prewarmed";
}

TEST(Prewarm, TunedBucketsArePrewarmedSoOpsCallsStayInMemory) {
  RuntimeOptions options;
  options.strict = true;
  Runtime runtime(options);
  const OpSpec spec = fifty_specs()[0];
  runtime::TuningEntry e;
  e.spec = to_string(spec);
  e.token_bucket = 8;
  e.target = host_target(BackendKind::kX86).fingerprint;
  e.backend = "x86";
  e.config = "threads=1,min_parallel_kib=64";
  e.time_us = e.default_time_us = 1;
  runtime::TuningDb db;
  db.put(e);
  runtime.set_tuning_db(db);
  const PrewarmReport report = prewarm(runtime, {spec}, two_threads());
  EXPECT_EQ(report.kernels, 2u) << "the spec, and the spec in its tuned bucket";
  CompileOptions hint;
  hint.tokens_hint = 7;
  auto tuned = runtime.compile(spec, hint);
  ASSERT_TRUE(tuned.is_ok()) << tuned.status().to_string();
  EXPECT_EQ(tuned->info().config.to_string(), "threads=1,min_parallel_kib=64");
  hint.tokens_hint = 100;
  EXPECT_TRUE(runtime.compile(spec, hint).is_ok()) << "an untuned bucket uses the default kernel";
  // A prewarm with a fixed config compiles that kernel once: the buckets' configs are the
  // database's, not the caller's.
  PrewarmOptions fixed = two_threads();
  fixed.compile.config = Config().set("threads", 2);
  fixed.seal = false;
  Runtime other{RuntimeOptions{}};
  other.set_tuning_db(db);
  EXPECT_EQ(prewarm(other, {spec}, fixed).kernels, 1u);
}

TEST(Record, EveryCompiledSpecIsAppendedOnceAndReplays) {
  test::TempDir dir;
  const auto path = dir.path() / "recorded.txt";
  const std::vector<OpSpec> specs = fifty_specs();
  {
    RuntimeOptions options;
    options.record_path = path;
    Runtime runtime(options);
    ASSERT_TRUE(runtime.compile(specs[0]).is_ok());
    ASSERT_TRUE(runtime.compile(specs[0]).is_ok());  // memory hit: not recorded again
    CompileOptions isa;
    isa.isa = X86Isa::kAvx2;  // another kernel of the same spec: the same line
    ASSERT_TRUE(runtime.compile(specs[0], isa).is_ok());
    ASSERT_TRUE(runtime.compile(specs[7]).is_ok());
  }
  EXPECT_EQ(test::read_text(path), to_string(specs[0]) + "\n" + to_string(specs[7]) + "\n");
  {
    // A later run appends only what is new.
    RuntimeOptions options;
    options.record_path = path;
    Runtime runtime(options);
    ASSERT_TRUE(runtime.compile(specs[7]).is_ok());
    ASSERT_TRUE(runtime.compile(specs[20]).is_ok());
  }
  auto replay = read_manifest(path);
  ASSERT_TRUE(replay.is_ok()) << replay.status().to_string();
  EXPECT_EQ(*replay, (std::vector<OpSpec>{specs[0], specs[7], specs[20]}));
}

TEST(Record, EnvironmentVariablesReachTheOptions) {
  setenv("KILN_RECORD", "/tmp/kiln-record-env.txt", 1);
  setenv("KILN_TUNE_DB", "/tmp/kiln-tune-env.json", 1);
  const RuntimeOptions options = RuntimeOptions::from_environment();
  unsetenv("KILN_RECORD");
  unsetenv("KILN_TUNE_DB");
  EXPECT_EQ(options.record_path, "/tmp/kiln-record-env.txt");
  EXPECT_EQ(options.tuning_db, "/tmp/kiln-tune-env.json");
  const RuntimeOptions defaults = RuntimeOptions::from_environment();
  EXPECT_TRUE(defaults.record_path.empty());
  EXPECT_EQ(defaults.tuning_db.filename(), "tuning.json");
}

}  // namespace
}  // namespace jit
