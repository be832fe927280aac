// jit::compile and the runtime: dispatch, caches (memory, disk, across processes),
// concurrency, strict mode, environment handling, the log sink.
#include "runtime/runtime.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "runtime/disk_cache.h"
#include "runtime/log.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

namespace fs = std::filesystem;

// A fresh cache directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kiln-runtime-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

RuntimeOptions with_cache(const fs::path& dir) {
  RuntimeOptions options;
  options.cache_dir = dir;
  return options;
}

const OpSpec kSilu = OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kBF16, 96});

TEST(Runtime, DispatchPicksX86ForNormAndActivations) {
  Runtime runtime(RuntimeOptions{});
  auto kernel = runtime.compile(kSilu);
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  EXPECT_EQ(kernel->info().backend, BackendKind::kX86);
  EXPECT_GT(kernel->code_size(), 0u);
  EXPECT_TRUE(kernel->info().skipped.empty());
}

TEST(Runtime, FallbackToRefIsLoggedWithTheReason) {
  std::vector<std::string> messages;
  LogSink previous = set_log_sink([&](LogLevel, std::string_view m) { messages.emplace_back(m); });
  Runtime runtime(RuntimeOptions{});
  CompileOptions options;
  options.isa = X86Isa::kNone;  // below what the x86 backend needs
  auto kernel = runtime.compile(kSilu, options);
  set_log_sink(previous);
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  EXPECT_EQ(kernel->info().backend, BackendKind::kRef);
  ASSERT_EQ(kernel->info().skipped.size(), 1u);
  EXPECT_NE(kernel->info().skipped[0].find("AVX2"), std::string::npos) << kernel->info().skipped[0];
  ASSERT_FALSE(messages.empty()) << "a fallback must be logged";
  EXPECT_NE(messages[0].find("ref backend"), std::string::npos) << messages[0];
}

TEST(Runtime, ForcedBackendThatCannotServeIsAnError) {
  Runtime runtime(RuntimeOptions{});
  CompileOptions options;
  options.backend = BackendKind::kOnednn;  // GEMM only (or not built): never silu_and_mul
  auto kernel = runtime.compile(kSilu, options);
  ASSERT_FALSE(kernel.is_ok());
  EXPECT_EQ(kernel.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(kernel.status().message().find("onednn"), std::string::npos)
      << kernel.status().message();
}

// The ref backend has no knobs: a config that sets one is refused (it used to be ignored).
TEST(Runtime, RefRefusesEveryKnob) {
  Runtime runtime(RuntimeOptions{});
  CompileOptions options;
  options.backend = BackendKind::kRef;
  options.config = Config().set("threads", 2);
  auto kernel = runtime.compile(kSilu, options);
  ASSERT_FALSE(kernel.is_ok());
  EXPECT_EQ(kernel.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(kernel.status().message().find("ref config: unknown knob 'threads' for silu_and_mul; "
                                           "allowed: none"),
            std::string::npos)
      << kernel.status().message();
  options.config = Config();
  EXPECT_TRUE(runtime.compile(kSilu, options).is_ok());
  // Without a forced backend, a knob of the backend dispatch would pick is refused where
  // dispatch falls back to one that does not read it (here below the x86 backend's ISA).
  CompileOptions fallback;
  fallback.isa = X86Isa::kNone;
  fallback.config = Config().set("threads", 2);
  auto refused = runtime.compile(kSilu, fallback);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("ref config: unknown knob 'threads'"),
            std::string::npos)
      << refused.status().message();
}

TEST(Runtime, InvalidSpecIsRejectedWithTheField) {
  Runtime runtime(RuntimeOptions{});
  auto kernel =
      runtime.compile(OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kI32, 64, true}));
  ASSERT_FALSE(kernel.is_ok());
  EXPECT_EQ(kernel.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(kernel.status().message().find("dtype"), std::string::npos);
}

TEST(Runtime, MemoryHitReturnsTheSameCode) {
  Runtime runtime(RuntimeOptions{});
  auto a = runtime.compile(kSilu);
  auto b = runtime.compile(kSilu);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->code(), b->code());
  EXPECT_EQ(runtime.counters().generated, 1u);
  EXPECT_EQ(runtime.counters().memory_hits, 1u);
}

TEST(Runtime, ConcurrentCallersCompileOnce) {
  Runtime runtime(RuntimeOptions{});
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  std::vector<const void*> codes(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto k = runtime.compile(kSilu);
      if (k.is_ok()) {
        ok++;
        codes[size_t(i)] = k->code();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(runtime.counters().generated, 1u);
  for (const void* c : codes) EXPECT_EQ(c, codes[0]);
}

TEST(Runtime, DiskCacheRoundTripInAnotherRuntime) {
  TempDir dir;
  {
    Runtime first(with_cache(dir.path()));
    auto k = first.compile(kSilu);
    ASSERT_TRUE(k.is_ok());
    EXPECT_EQ(k->info().source, KernelSource::kGenerated);
    EXPECT_FALSE(k->info().cache_key.empty());
  }
  Runtime second(with_cache(dir.path()));
  auto k = second.compile(kSilu);
  ASSERT_TRUE(k.is_ok()) << k.status().to_string();
  EXPECT_EQ(k->info().source, KernelSource::kDiskCache);
  EXPECT_EQ(k->info().generate_us, 0.0);
  // The loaded code computes the right thing.
  auto c = test::make_case(kSilu, 5, test::InputKind::kNormal, 3);
  ASSERT_TRUE(c.is_ok());
  const auto report = test::check_against_ref(k.value(), c.value());
  EXPECT_TRUE(report.ok) << report.message;
}

TEST(Runtime, CorruptDiskEntryIsRecompiledNotExecuted) {
  TempDir dir;
  std::string key;
  {
    Runtime first(with_cache(dir.path()));
    key = first.compile(kSilu)->info().cache_key;
  }
  // Flip a byte in the middle of the entry (inside the code section).
  const fs::path entry = dir.path() / (key + ".kiln");
  ASSERT_TRUE(fs::exists(entry));
  {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(fs::file_size(entry) / 2));
    f.put(char(0xCC));
  }
  std::vector<std::string> warnings;
  LogSink previous = set_log_sink([&](LogLevel level, std::string_view m) {
    if (level == LogLevel::kWarning) warnings.emplace_back(m);
  });
  Runtime second(with_cache(dir.path()));
  auto k = second.compile(kSilu);
  set_log_sink(previous);
  ASSERT_TRUE(k.is_ok());
  EXPECT_EQ(k->info().source, KernelSource::kGenerated);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("corrupt"), std::string::npos) << warnings[0];
  auto c = test::make_case(kSilu, 2, test::InputKind::kNormal, 3);
  EXPECT_TRUE(test::check_against_ref(k.value(), c.value()).ok);
}

// An entry that passes the cache's checks but that the backend does not load (here: no code)
// is replaced by a fresh compile, with a warning, instead of failing every later compile.
TEST(Runtime, EntryTheBackendDoesNotLoadIsRecompiled) {
  TempDir dir;
  {
    Runtime first(with_cache(dir.path()));
    ASSERT_TRUE(first.compile(kSilu).is_ok());
  }
  {
    auto cache = runtime::DiskCache::open({.dir = dir.path()});
    ASSERT_TRUE(cache.is_ok()) << cache.status().to_string();
    const auto entries = cache.value()->list();
    ASSERT_EQ(entries.size(), 1u);
    Artifact empty;  // a well-formed entry whose code the x86 backend refuses to load
    ASSERT_TRUE(cache.value()->store({entries[0].key_text}, empty).is_ok());
  }
  std::vector<std::string> warnings;
  LogSink previous = set_log_sink([&](LogLevel level, std::string_view m) {
    if (level == LogLevel::kWarning) warnings.emplace_back(m);
  });
  Runtime second(with_cache(dir.path()));
  auto k = second.compile(kSilu);
  auto again = Runtime(with_cache(dir.path())).compile(kSilu);  // the entry was replaced
  set_log_sink(previous);
  ASSERT_TRUE(k.is_ok()) << k.status().to_string();
  EXPECT_EQ(k->info().source, KernelSource::kGenerated);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("does not load"), std::string::npos) << warnings[0];
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->info().source, KernelSource::kDiskCache);
  auto c = test::make_case(kSilu, 2, test::InputKind::kNormal, 3);
  EXPECT_TRUE(test::check_against_ref(k.value(), c.value()).ok);
}

TEST(Runtime, UnusableCacheDirectoryIsReportedNotSilent) {
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::all);  // 0777: world-writable
  std::vector<std::string> warnings;
  LogSink previous = set_log_sink([&](LogLevel, std::string_view m) { warnings.emplace_back(m); });
  Runtime runtime(with_cache(dir.path()));
  set_log_sink(previous);
  EXPECT_EQ(runtime.disk_cache(), nullptr);
  EXPECT_EQ(runtime.cache_status().code(), StatusCode::kCacheError);
  ASSERT_FALSE(warnings.empty());
  EXPECT_TRUE(runtime.compile(kSilu).is_ok()) << "compiling still works without a disk cache";
}

TEST(Runtime, StrictModeRejectsCompilesAfterSeal) {
  RuntimeOptions options;
  options.strict = true;
  Runtime runtime(options);
  ASSERT_TRUE(runtime.compile(kSilu).is_ok());
  runtime.seal();
  EXPECT_TRUE(runtime.compile(kSilu).is_ok()) << "prewarmed specs stay available";
  auto other =
      runtime.compile(OpSpec::make(OpKind::kGeluAndMul, ir::ActivationParams{DType::kBF16, 96}));
  ASSERT_FALSE(other.is_ok());
  EXPECT_NE(other.status().message().find("strict"), std::string::npos);
}

TEST(Runtime, EnvironmentIsaCapAndItsErrors) {
  setenv("KILN_ISA", "avx2", 1);
  RuntimeOptions options = RuntimeOptions::from_environment();
  EXPECT_EQ(options.isa_cap, X86Isa::kAvx2);
  EXPECT_TRUE(options.environment_error.is_ok());
  Runtime runtime(options);
  auto k = runtime.compile(kSilu);
  ASSERT_TRUE(k.is_ok());
  EXPECT_EQ(k->info().target.isa, X86Isa::kAvx2);

  setenv("KILN_ISA", "sse9", 1);
  RuntimeOptions bad = RuntimeOptions::from_environment();
  unsetenv("KILN_ISA");
  Runtime bad_runtime(bad);
  auto e = bad_runtime.compile(kSilu);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("KILN_ISA"), std::string::npos);
  EXPECT_NE(e.status().message().find("avx2, avx512, avx512_bf16, avx512_vbmi, avx512_fp16, amx"),
            std::string::npos)
      << "lists allowed values: " << e.status().message();
}

TEST(Runtime, DumpDirReceivesSpecCodeAndDisassembly) {
  TempDir dir;
  RuntimeOptions options;
  options.dump_dir = dir.path();
  Runtime runtime(options);
  ASSERT_TRUE(runtime.compile(kSilu).is_ok());
  int spec_files = 0, bin_files = 0, asm_files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    spec_files += e.path().extension() == ".spec";
    bin_files += e.path().extension() == ".bin";
    asm_files += e.path().extension() == ".s";
  }
  EXPECT_EQ(spec_files, 1);
  EXPECT_EQ(bin_files, 1);
  EXPECT_EQ(asm_files, 1);
}

TEST(Runtime, PerfMapListsJitCode) {
  RuntimeOptions options;
  options.perf_map = true;
  Runtime runtime(options);
  auto k = runtime.compile(kSilu);
  ASSERT_TRUE(k.is_ok());
  std::ifstream map("/tmp/perf-" + std::to_string(getpid()) + ".map");
  std::string line, all;
  while (std::getline(map, line)) all += line + "\n";
  EXPECT_NE(all.find("kiln:silu_and_mul"), std::string::npos) << all;
  std::remove(("/tmp/perf-" + std::to_string(getpid()) + ".map").c_str());
}

}  // namespace
}  // namespace jit
