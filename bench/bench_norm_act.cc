// GB/s of kiln's x86 rms_norm and silu_and_mul (bf16) against the copy bandwidth measured in
// the same run, with 1 and 2 threads, at sizes that move >= 64 MB per call.
//
//   build/release/bench/bench_norm_act [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "bench/ceilings.h"
#include "ir/numeric.h"
#include "runtime/runtime.h"

namespace {

using namespace jit;

constexpr double kMinBytesMoved = 64e6;
std::map<int, double> g_copy_gbps;  // threads -> GB/s, measured before the benchmarks

std::vector<uint16_t> random_bf16(size_t n) {
  std::vector<uint16_t> v(n);
  uint32_t state = 12345;
  for (auto& x : v) {
    state = state * 1664525u + 1013904223u;
    x = numeric::f32_to_bf16(float(int(state >> 9) % 2001 - 1000) / 1000.0f);
  }
  return v;
}

void report(benchmark::State& state, const OpSpec& spec, int64_t tokens, int threads) {
  const double bytes = estimates(spec, {.tokens = tokens}).bytes;
  state.counters["GB/s"] =
      benchmark::Counter(bytes * double(state.iterations()), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
  state.counters["copy_GB/s"] = g_copy_gbps[threads];
  state.counters["MB_moved"] = bytes / 1e6;
  state.counters["tokens"] = double(tokens);
}

Kernel compile_or_die(const OpSpec& spec, int threads) {
  CompileOptions options;
  options.backend = BackendKind::kX86;
  options.config = Config().set("threads", threads).set("min_parallel_kib", 0);
  auto kernel = compile(spec, options);
  if (!kernel.is_ok()) {
    fmt::print(stderr, "{}\n", kernel.status().to_string());
    std::exit(1);
  }
  return kernel.value();
}

void bm_rms_norm(benchmark::State& state) {
  const int64_t hidden = state.range(0);
  const int threads = int(state.range(1));
  ir::NormParams p{DType::kBF16, hidden, true};
  const OpSpec spec = OpSpec::make(OpKind::kRmsNorm, p);
  const int64_t tokens =
      int64_t(kMinBytesMoved / estimates(spec, {.tokens = 1}).bytes) + 1;
  auto x = random_bf16(size_t(tokens * hidden));
  auto w = random_bf16(size_t(hidden));
  std::vector<uint16_t> y(x.size());
  const Kernel kernel = compile_or_die(spec, threads);
  const KernelArgs args({Tensor(y.data(), DType::kBF16, {tokens, hidden}),
                         Tensor(x.data(), DType::kBF16, {tokens, hidden}),
                         Tensor(w.data(), DType::kBF16, {hidden})},
                        {1e-6});
  for (auto _ : state) kernel.run_unchecked(args);
  report(state, spec, tokens, threads);
}

void bm_silu_and_mul(benchmark::State& state) {
  const int64_t d = state.range(0);
  const int threads = int(state.range(1));
  ir::ActivationParams p{DType::kBF16, d};
  const OpSpec spec = OpSpec::make(OpKind::kSiluAndMul, p);
  const int64_t tokens =
      int64_t(kMinBytesMoved / estimates(spec, {.tokens = 1}).bytes) + 1;
  auto x = random_bf16(size_t(tokens * 2 * d));
  std::vector<uint16_t> y(size_t(tokens * d));
  const Kernel kernel = compile_or_die(spec, threads);
  const KernelArgs args({Tensor(y.data(), DType::kBF16, {tokens, d}),
                         Tensor(x.data(), DType::kBF16, {tokens, 2 * d})});
  for (auto _ : state) kernel.run_unchecked(args);
  report(state, spec, tokens, threads);
}

// The same memory traffic as a plain copy, through the same benchmark harness, so the ratio
// is measured under identical conditions.
void bm_copy(benchmark::State& state) {
  const size_t bytes = size_t(kMinBytesMoved / 2);
  const int threads = int(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
#pragma omp parallel num_threads(threads)
    {
      const size_t t = omp_get_thread_num(), n = omp_get_num_threads();
      std::memcpy(dst.data() + bytes * t / n, src.data() + bytes * t / n,
                  bytes * (t + 1) / n - bytes * t / n);
    }
    benchmark::DoNotOptimize(dst.data());
  }
  state.counters["GB/s"] = benchmark::Counter(2.0 * double(bytes) * double(state.iterations()),
                                              benchmark::Counter::kIsRate,
                                              benchmark::Counter::kIs1000);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (int threads : {1, 2}) {
    g_copy_gbps[threads] = bench::measure_copy_gbps(size_t(256) << 20, threads);
    fmt::print("copy bandwidth, {} thread(s): {:.1f} GB/s (best of 7, 256 MiB)\n", threads,
               g_copy_gbps[threads]);
  }
  for (int threads : {1, 2}) {
    benchmark::RegisterBenchmark("copy", bm_copy)->Arg(threads)->UseRealTime();
    for (int64_t h : {4096, 8192, 16384}) {
      benchmark::RegisterBenchmark("rms_norm/bf16", bm_rms_norm)->Args({h, threads})->UseRealTime();
      benchmark::RegisterBenchmark("silu_and_mul/bf16", bm_silu_and_mul)
          ->Args({h, threads})
          ->UseRealTime();
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
