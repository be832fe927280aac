// GB/s of kiln's x86 rms_norm, fused_add_rms_norm, silu_and_mul and rotary_embedding (bf16)
// against the copy bandwidth measured in the same run and against the same op as a plain
// -O3 -march=native loop (the peer), with 1 and 2 threads, at sizes that move >= 64 MB per call
// (`large`) and at decode shapes of 1 and 16 rows (`decode1`, `decode16`: µs per call; the rows
// stay in the caches, so these show the kernel's own speed, not the memory's).
//
//   build/release/bench/bench_norm_act [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "bench/bench_util.h"
#include "bench/plain_loops.h"
#include "ir/numeric.h"
#include "runtime/runtime.h"

namespace {

using namespace jit;

// Args: {size, threads, peer, tokens}; peer = 1 runs the plain -O3 -march=native loop instead;
// tokens = 0 moves >= 64 MB per call (rows from DRAM), a decode shape's 1 or 16 rows stay in the
// caches from call to call, so their µs per call show the kernel's own speed.
int64_t tokens_of(const benchmark::State& state, const OpSpec& spec) {
  return state.range(3) > 0 ? state.range(3) : bench::tokens_for(spec);
}

void bm_rms_norm(benchmark::State& state) {
  const int64_t hidden = state.range(0);
  const int threads = int(state.range(1));
  const bool peer = state.range(2) != 0;
  ir::NormParams p{DType::kBF16, hidden, true};
  const OpSpec spec = OpSpec::make(OpKind::kRmsNorm, p);
  const int64_t tokens = tokens_of(state, spec);
  auto x = bench::random_bf16(size_t(tokens * hidden));
  auto w = bench::random_bf16(size_t(hidden));
  bench::Aligned64Vector<uint16_t> y(x.size());
  const Kernel kernel =
      bench::compile_x86_or_die(spec, Config().set("threads", threads).set("min_parallel_kib", 0));
  const KernelArgs args(
      {Tensor(y.data(), DType::kBF16, {tokens, hidden}),
       Tensor(x.data(), DType::kBF16, {tokens, hidden}), Tensor(w.data(), DType::kBF16, {hidden})},
      {1e-6});
  bench::run_and_report(state, spec, tokens, threads, [&] {
    if (peer) {
      bench::plain_rms_norm_bf16(y.data(), x.data(), w.data(), tokens, hidden, 1e-6f, threads);
    } else {
      (void)kernel.run_unchecked(args);
    }
  });
}

// In place on x and the residual, as vLLM calls it; every call re-reads what the last one
// wrote (the values stay finite: z is renormalised into x each time).
void bm_fused_add_rms_norm(benchmark::State& state) {
  const int64_t hidden = state.range(0);
  const int threads = int(state.range(1));
  const bool peer = state.range(2) != 0;
  ir::NormParams p{DType::kBF16, hidden, true};
  const OpSpec spec = OpSpec::make(OpKind::kFusedAddRmsNorm, p);
  const int64_t tokens = tokens_of(state, spec);
  auto x = bench::random_bf16(size_t(tokens * hidden));
  auto residual = bench::random_bf16(size_t(tokens * hidden));
  auto w = bench::random_bf16(size_t(hidden));
  const Kernel kernel =
      bench::compile_x86_or_die(spec, Config().set("threads", threads).set("min_parallel_kib", 0));
  const KernelArgs args({Tensor(x.data(), DType::kBF16, {tokens, hidden}),
                         Tensor(residual.data(), DType::kBF16, {tokens, hidden}),
                         Tensor(w.data(), DType::kBF16, {hidden})},
                        {1e-6});
  bench::run_and_report(state, spec, tokens, threads, [&] {
    if (peer) {
      bench::plain_fused_add_rms_norm_bf16(x.data(), residual.data(), w.data(), tokens, hidden,
                                           1e-6f, threads);
    } else {
      (void)kernel.run_unchecked(args);
    }
  });
}

void bm_silu_and_mul(benchmark::State& state) {
  const int64_t d = state.range(0);
  const int threads = int(state.range(1));
  const bool peer = state.range(2) != 0;
  ir::ActivationParams p{DType::kBF16, d};
  const OpSpec spec = OpSpec::make(OpKind::kSiluAndMul, p);
  const int64_t tokens = tokens_of(state, spec);
  auto x = bench::random_bf16(size_t(tokens * 2 * d));
  bench::Aligned64Vector<uint16_t> y(size_t(tokens * d));
  const Kernel kernel =
      bench::compile_x86_or_die(spec, Config().set("threads", threads).set("min_parallel_kib", 0));
  const KernelArgs args({Tensor(y.data(), DType::kBF16, {tokens, d}),
                         Tensor(x.data(), DType::kBF16, {tokens, 2 * d})});
  bench::run_and_report(state, spec, tokens, threads, [&] {
    if (peer) {
      bench::plain_silu_and_mul_bf16(y.data(), x.data(), tokens, d, threads);
    } else {
      (void)kernel.run_unchecked(args);
    }
  });
}

// NeoX rotary on query only, rot_dim = head_size; range(0) = heads.
void bm_rotary_embedding(benchmark::State& state) {
  const int64_t heads = state.range(0), head_size = 128, max_position = 4096;
  const int threads = int(state.range(1));
  const bool peer = state.range(2) != 0;
  ir::RopeParams p{DType::kBF16,         DType::kBF16, head_size, head_size,
                   ir::RopeStyle::kNeox, heads,        0,         false};
  const OpSpec spec = OpSpec::make(OpKind::kRotaryEmbedding, p);
  const int64_t tokens = tokens_of(state, spec);
  auto q = bench::random_bf16(size_t(tokens * heads * head_size));
  std::vector<uint16_t> cache = bench::quarter_turn_rope_table_bf16(max_position, head_size);
  std::vector<int64_t> positions(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) positions[size_t(t)] = (t * 7919) % max_position;
  const Kernel kernel =
      bench::compile_x86_or_die(spec, Config().set("threads", threads).set("min_parallel_kib", 0));
  const KernelArgs args({Tensor(positions.data(), DType::kI64, {tokens}),
                         Tensor(q.data(), DType::kBF16, {tokens, heads * head_size}), Tensor{},
                         Tensor(cache.data(), DType::kBF16, {max_position, head_size})});
  bench::run_and_report(state, spec, tokens, threads, [&] {
    if (peer) {
      bench::plain_rope_neox_bf16(q.data(), positions.data(), cache.data(), tokens, heads,
                                  head_size, threads);
    } else {
      (void)kernel.run_unchecked(args);
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  bench::measure_copy_ceilings();
  for (int threads : {1, 2}) {
    for (int64_t peer : {0, 1}) {
      const char* who = peer ? "plain_loop/" : "kiln/";
      const auto add = [&](const char* op, void (*bm)(benchmark::State&), int64_t size) {
        for (int64_t tokens : {0, 1, 16}) {
          if (tokens == 1 && threads == 2) continue;  // one row runs on one thread
          // Named as bench_cache's shapes: large, decode1, decode16.
          const std::string shape = tokens == 0 ? "large" : "decode" + std::to_string(tokens);
          benchmark::RegisterBenchmark((who + std::string(op) + "/" + shape).c_str(), bm)
              ->Args({size, threads, peer, tokens})
              ->UseRealTime();
        }
      };
      for (int64_t h : {4096, 8192, 16384}) {
        add("rms_norm/bf16", bm_rms_norm, h);
        add("fused_add_rms_norm/bf16", bm_fused_add_rms_norm, h);
        add("silu_and_mul/bf16", bm_silu_and_mul, h);
      }
      add("rotary_embedding/bf16", bm_rotary_embedding, 32);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
