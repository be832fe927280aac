// The pieces every kiln benchmark program shares: inputs, sizing, the copy ceiling measured in
// the same run, reporting (GB/s, % of copy, µs per call) and compiling on the x86 backend.
#pragma once

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <string_view>
#include <vector>

#include "bench/ceilings.h"
#include "codegen/x86/x86_backend.h"
#include "ir/numeric.h"
#include "runtime/runtime.h"

namespace jit::bench {

/// Distinct random slots for `tokens` rows of a cache of `num_blocks` blocks of `block_size`.
inline std::vector<int64_t> random_slots(int64_t tokens, int64_t num_blocks, int64_t block_size) {
  auto all = std::vector<int64_t>(size_t(num_blocks * block_size));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937_64(7));
  all.resize(size_t(tokens));
  return all;
}

/// The slots of `tokens` rows: distinct random slots (random_slots), or with `prefill` the
/// consecutive slots of shuffled blocks that a prefill's slot mapping gives (each block filled
/// front to back, the blocks in random order). With 4 KiB pages, random rows cost the
/// quantising writers more than the copy figures suggest: every row lands on a page the TLB
/// has not seen (docs/decisions.md, eighth round).
inline std::vector<int64_t> cache_slots(int64_t tokens, int64_t num_blocks, int64_t block_size,
                                        bool prefill) {
  auto slots = random_slots(tokens, num_blocks, block_size);
  if (prefill) {
    const auto blocks = random_slots(num_blocks, num_blocks, 1);  // a permutation of the blocks
    for (int64_t t = 0; t < tokens; ++t) {
      slots[size_t(t)] = blocks[size_t(t / block_size)] * block_size + t % block_size;
    }
  }
  return slots;
}

/// Large shapes move at least this many bytes per call (past the L2s, within the host cache
/// regime the copy ceiling is measured in).
inline constexpr double kMinBytesMoved = 64e6;

/// Measures the copy ceilings for 1 and 2 threads at the start of a run (same footprint as the
/// ops; a 1 GiB copy beside it for the DRAM-only figure) and prints them. The rows compare
/// themselves with the figure measured next to them (adjacent_copy_gbps).
inline void measure_copy_ceilings() {
  for (int threads : {1, 2}) {
    fmt::print(
        "copy bandwidth, {} thread(s): {:.1f} GB/s at 64 MB moved, {:.1f} GB/s at 1 GiB "
        "moved (best of 7); each row's pct_of_copy is against a copy measured right after it\n",
        threads, measure_copy_gbps(size_t(kMinBytesMoved / 2), threads),
        measure_copy_gbps(size_t(512) << 20, threads));
  }
}

/// Allocates on 64-byte boundaries, as PyTorch's allocator does (and as non-temporal stores
/// need): std::vector's default heap blocks are 16-byte aligned.
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64)));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const Aligned64&) const { return true; }
};
template <class T>
using Aligned64Vector = std::vector<T, Aligned64<T>>;

/// Deterministic bf16 (or, with `f16`, fp16) values in [-1, 1], on 64-byte boundaries like a
/// PyTorch activation.
inline Aligned64Vector<uint16_t> random_bf16(size_t n, bool f16 = false) {
  Aligned64Vector<uint16_t> v(n);
  uint32_t state = 12345;
  for (auto& x : v) {
    state = state * 1664525u + 1013904223u;
    const float value = float(int(state >> 9) % 2001 - 1000) / 1000.0f;
    x = f16 ? numeric::f32_to_f16(value) : numeric::f32_to_bf16(value);
  }
  return v;
}

/// Allocates on 2 MiB boundaries and, when `huge` (and KILN_BENCH_HUGEPAGES is not 0), asks for
/// transparent huge pages: madvise(MADV_HUGEPAGE) before the first touch, since this system's
/// THP mode is `madvise` and plain allocations get 4 KiB pages. A real KV cache is one large
/// allocation (PyTorch can be told to back it with huge pages).
template <class T>
struct HugePageAllocator {
  using value_type = T;
  bool huge = true;
  HugePageAllocator() = default;
  explicit HugePageAllocator(bool huge_pages) : huge(huge_pages) {}
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>& other) : huge(other.huge) {}
  T* allocate(size_t n) {
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t bytes = (n * sizeof(T) + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, bytes);
    if (p == nullptr) throw std::bad_alloc();
    static const bool allowed = [] {
      const char* v = std::getenv("KILN_BENCH_HUGEPAGES");
      return v == nullptr || std::string_view(v) != "0";
    }();
    if (huge && allowed) madvise(p, bytes, MADV_HUGEPAGE);  // advice: refusal is harmless
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  bool operator==(const HugePageAllocator& other) const { return huge == other.huge; }
};
template <class T>
using HugeVector = std::vector<T, HugePageAllocator<T>>;

/// A bf16 cos/sin table [max_position, rot] of quarter turns: cos, sin in {0, +-1}, the angle
/// of pair j at position p being (p + j) quarter turns. Why not real angles: the rope benches
/// rotate the same rows in place tens of thousands of times, and a real bf16 table has
/// cos^2 + sin^2 = 1 +- 2^-8, so the rows shrink (or grow) geometrically into fp32 denormals
/// (microcode assists on every multiply: rotary_embedding_and_cache_flash at 16 tokens went
/// from 12 to 140 us per call mid-run) or inf. Quarter turns keep every value exactly, and the
/// kernels execute the same instructions whatever the values are.
inline std::vector<uint16_t> quarter_turn_rope_table_bf16(int64_t max_position, int64_t rot) {
  constexpr float kCos[4] = {1, 0, -1, 0}, kSin[4] = {0, 1, 0, -1};
  std::vector<uint16_t> table(size_t(max_position * rot));
  for (int64_t pos = 0; pos < max_position; ++pos) {
    for (int64_t j = 0; j < rot / 2; ++j) {
      const size_t turn = size_t((pos + j) % 4);
      table[size_t(pos * rot + j)] = numeric::f32_to_bf16(kCos[turn]);
      table[size_t(pos * rot + rot / 2 + j)] = numeric::f32_to_bf16(kSin[turn]);
    }
  }
  return table;
}

/// Tokens so that one call moves at least kMinBytesMoved (per-token bytes from the estimate).
inline int64_t tokens_for(const OpSpec& spec) {
  const double per_token =
      estimates(spec, {.tokens = 2}).bytes - estimates(spec, {.tokens = 1}).bytes;
  return int64_t(kMinBytesMoved / per_token) + 1;
}

/// The copy ceiling for `threads` measured now (CopyProbe at kMinBytesMoved, best of 6 copies,
/// ~20 ms): this VM's memory bandwidth moves by 10-20% from one second to the next, and a row's
/// share of the figure measured at the program's start moved with it (four runs of the same
/// rows: cp_gather_cache 77-125% against the start's figure, 86-99% against this one).
inline double adjacent_copy_gbps(int threads) {
  static std::map<int, std::unique_ptr<CopyProbe>> probes;
  auto& probe = probes[threads];
  if (!probe) probe = std::make_unique<CopyProbe>(size_t(kMinBytesMoved / 2), threads);
  return probe->measure(2);
}

/// Runs `call` under the benchmark loop and reports GB/s (the spec's estimate at `tokens`),
/// its share of the copy bandwidth for `threads` measured right after the row
/// (adjacent_copy_gbps), µs per call, MB moved and tokens.
template <class Call>
void run_and_report(benchmark::State& state, const OpSpec& spec, int64_t tokens, int threads,
                    Call call) {
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) call();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bytes = estimates(spec, {.tokens = tokens}).bytes;
  const double gbps = bytes * double(state.iterations()) / seconds / 1e9;
  const double copy = adjacent_copy_gbps(threads);
  state.counters["GB/s"] = gbps;
  state.counters["copy_GB/s"] = copy;
  state.counters["pct_of_copy"] = 100.0 * gbps / copy;
  state.counters["us_per_call"] = 1e6 * seconds / double(state.iterations());
  state.counters["MB_moved"] = bytes / 1e6;
  state.counters["tokens"] = double(tokens);
}

/// The spec compiled on the x86 backend with `config`; exits with the reason on failure.
inline Kernel compile_x86_or_die(const OpSpec& spec, const Config& config) {
  CompileOptions options;
  options.backend = BackendKind::kX86;
  // The knobs given over the backend's default for this host (what jit::compile picks
  // untuned), so a bench row measures the default code with the row's thread count.
  Config merged = codegen::x86::make_backend()->configs(spec, host_target()).front();
  for (const auto& [name, value] : config.knobs) merged.set(name, value);
  options.config = merged;
  auto kernel = compile(spec, options);
  if (!kernel.is_ok()) {
    fmt::print(stderr, "{}\n", kernel.status().to_string());
    std::exit(1);
  }
  return kernel.value();
}

}  // namespace jit::bench
