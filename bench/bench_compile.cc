// Compile latency of the x86 backend: cold emit (generate + load, no caches), disk-cache hit
// (a runtime with an empty memory cache and a warm disk cache), and memory hit.
//
//   build/release/bench/bench_compile
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "codegen/x86/x86_backend.h"
#include "runtime/runtime.h"

namespace {

using namespace jit;

const OpSpec& spec() {
  static const OpSpec s = OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kBF16, 4096, true});
  return s;
}

std::filesystem::path cache_dir() {
  static const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("kiln-bench-compile-{}", getpid());
  return dir;
}

RuntimeOptions options_with_cache() {
  RuntimeOptions options;
  options.cache_dir = cache_dir();
  return options;
}

// Generation and loading into executable memory, nothing cached.
void bm_cold_emit(benchmark::State& state) {
  auto backend = codegen::x86::make_backend();
  const Target target = host_target(BackendKind::kX86);
  for (auto _ : state) {
    auto artifact = backend->lower(spec(), Config{}, target);
    auto executable = backend->load(spec(), artifact.value(), target);
    benchmark::DoNotOptimize(executable);
  }
  state.SetLabel(target.name());
}

// Each iteration uses a runtime whose memory cache is empty: lock, read, checksum, load.
void bm_disk_hit(benchmark::State& state) {
  Runtime(options_with_cache()).compile(spec()).value();  // populate the disk cache
  std::vector<std::unique_ptr<Runtime>> runtimes;
  for (int64_t i = 0; i < state.max_iterations; ++i) {
    runtimes.push_back(std::make_unique<Runtime>(options_with_cache()));
  }
  size_t next = 0;
  for (auto _ : state) {
    auto kernel = runtimes[next++]->compile(spec());
    if (kernel->info().source != KernelSource::kDiskCache) state.SkipWithError("not a disk hit");
  }
}

void bm_memory_hit(benchmark::State& state) {
  Runtime runtime(options_with_cache());
  runtime.compile(spec()).value();
  for (auto _ : state) benchmark::DoNotOptimize(runtime.compile(spec()));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RegisterBenchmark("compile/cold_emit", bm_cold_emit)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("compile/disk_hit", bm_disk_hit)
      ->Iterations(2000)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("compile/memory_hit", bm_memory_hit)->Unit(benchmark::kMicrosecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove_all(cache_dir());
  return 0;
}
