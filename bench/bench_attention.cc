// kiln's x86 cpu_attention_with_kv_cache (isa=vec cache layout: vdpbf16ps; isa=amx: AMX tiles,
// when the host has them; bf16, head size 128, 32 query
// heads over 4 KV heads = GQA 8, block size 32) against the machine's ceilings measured in the
// same run and against a plain C++ peer (-O3 -march=native, fp32 math, OpenMP over (request, KV
// head) like kiln, same cache layout):
//   decode  batch 1..32 x context 512..8192, one query token per request: GB/s of KV read (the
//           spec's byte estimate) against the copy bandwidth, overall (64 MB moved) and of a copy
//           moving as many bytes as the call reads (copy_same_bytes: past the caches the
//           kernel's KV is, too), and of a sequential read of as many bytes (read_same_bytes:
//           decode only reads, and one core reads well below the copy figure), and of a read
//           of as many bytes as shuffled blocks, the kernel's access pattern (read_blocks:
//           the ceiling of a kernel that reads random blocks); also the vec
//           path over an fp8 e4m3 cache (half the bytes); kiln_vec is the default config
//           (attention_default_dpbf16 picks the arithmetic per ISA level), kiln_vec_dot and
//           kiln_vec_fma the same kernel with config dpbf16=1 (vdpbf16ps) and 0 (fp32 FMA);
//           kiln_vec_head256 / head512 at heads of 256 and 512 (batch 1 and 8, context 2048);
//   prefill one request of 512..2048 tokens, causal: GFLOP/s (4·pairs·heads·D) against the
//           measured vdpbf16ps peak (16 lanes x 2 products x 2 flops per instruction).
// With 2 threads (the machine's cores) and 1 thread. Every figure comes twice: per wall-clock
// second against the wall-clock ceilings (bench_util's copy bandwidth), and per second of CPU
// time (process CPU time / threads) against ceilings measured the same way in this run (the
// vdpbf16ps peak is only measured that way): on a machine shared with other jobs the CPU-time
// ratios are the meaningful ones.
//
//   build/release/bench/bench_attention [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "codegen/ref/ref.h"
#include "codegen/x86/attention_kernel.h"
#include "ir/numeric.h"
#include "ir/params_attention.h"
#include "ir/params_cache.h"
#include "ir/params_cpu.h"
#include "runtime/runtime.h"

namespace {

using namespace jit;

constexpr int64_t kHeadsQ = 32, kHeadsKv = 4, kHeadSize = 128, kBlockSize = 32;

double process_cpu_seconds();

double& dpbf16_peak_gflops(int threads) {
  static double peak[3] = {0, 0, 0};
  return peak[threads];
}
double& fma_peak_gflops(int threads) {
  static double peak[3] = {0, 0, 0};
  return peak[threads];
}

// Peak of one vector instruction per second of CPU time: 12 independent accumulator chains
// per thread (v0..11 += v12 (op) v13, v = zmm or ymm), best of 5. Inline asm, so that the
// accumulators stay in registers: an intrinsics loop with an asm barrier on an array of them
// kept them on the stack (a third of the FMA rate).
#define KILN_PEAK_STEP(ins, reg, acc) ins " %%" reg "12, %%" reg "13, %%" reg #acc "\n"
#define KILN_PEAK_LOOP(ins, reg)                                                                  \
  __asm__ volatile(                                                                               \
      "vxorps %%" reg "0, %%" reg "0, %%" reg                                                     \
      "0\n"                                                                                       \
      "vmovaps %%" reg "0, %%" reg "1\n vmovaps %%" reg "0, %%" reg                               \
      "2\n"                                                                                       \
      "vmovaps %%" reg "0, %%" reg "3\n vmovaps %%" reg "0, %%" reg                               \
      "4\n"                                                                                       \
      "vmovaps %%" reg "0, %%" reg "5\n vmovaps %%" reg "0, %%" reg                               \
      "6\n"                                                                                       \
      "vmovaps %%" reg "0, %%" reg "7\n vmovaps %%" reg "0, %%" reg                               \
      "8\n"                                                                                       \
      "vmovaps %%" reg "0, %%" reg "9\n vmovaps %%" reg "0, %%" reg                               \
      "10\n"                                                                                      \
      "vmovaps %%" reg "0, %%" reg "11\n vmovaps %%" reg "0, %%" reg                              \
      "12\n"                                                                                      \
      "vmovaps %%" reg "0, %%" reg "13\n mov %0, %%rcx\n 1:\n" KILN_PEAK_STEP(ins, reg, 0)        \
          KILN_PEAK_STEP(ins, reg, 1) KILN_PEAK_STEP(ins, reg, 2) KILN_PEAK_STEP(ins, reg, 3)     \
              KILN_PEAK_STEP(ins, reg, 4) KILN_PEAK_STEP(ins, reg, 5) KILN_PEAK_STEP(ins, reg, 6) \
                  KILN_PEAK_STEP(ins, reg, 7) KILN_PEAK_STEP(ins, reg, 8)                         \
                      KILN_PEAK_STEP(ins, reg, 9) KILN_PEAK_STEP(ins, reg, 10)                    \
                          KILN_PEAK_STEP(ins, reg, 11) "dec %%rcx\n jnz 1b\n vzeroupper\n"        \
      :                                                                                           \
      : "r"(steps)                                                                                \
      : "rcx", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",    \
        "xmm10", "xmm11", "xmm12", "xmm13", "cc")

template <class Loop>
double measure_peak_gflops_cpu(int threads, double flops_per_instruction, Loop loop) {
  // x 12 instructions: ~75 ms per repetition at 2 FMAs per cycle. The process CPU clock
  // counts another thread's time in scheduler ticks (4 ms on the Zen 3 VM of session 20):
  // 3M steps (~6 ms) read 9.7 or 13.7 ms of CPU time for 11.4 ms of work on 2 threads, and
  // the best of five picked the undercount, a "peak" of 239-310 GFLOP/s where the wall clock
  // gave 200.
  constexpr int64_t kSteps = 40'000'000;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double start = process_cpu_seconds();
#pragma omp parallel num_threads(threads)
    loop(kSteps);
    const double seconds = (process_cpu_seconds() - start) / double(threads);
    best = std::max(best,
                    double(threads) * double(kSteps * 12) * flops_per_instruction / seconds / 1e9);
  }
  return best;
}

// The host's widest fp32 FMA (the fp32 path's instruction, config dpbf16=0; on an AVX2 host
// the vec16 path's): vfmadd231ps zmm, 16 lanes x 2 flops, or ymm, 8 x 2.
const char* fma_peak_instruction() {
  return detect_host_x86_isa() >= X86Isa::kAvx512 ? "vfmadd231ps zmm" : "vfmadd231ps ymm";
}
double measure_fma_gflops(int threads) {
  if (detect_host_x86_isa() >= X86Isa::kAvx512) {
    return measure_peak_gflops_cpu(threads, 32.0,
                                   [](int64_t steps) { KILN_PEAK_LOOP("vfmadd231ps", "zmm"); });
  }
  return measure_peak_gflops_cpu(threads, 16.0,
                                 [](int64_t steps) { KILN_PEAK_LOOP("vfmadd231ps", "ymm"); });
}

// vdpbf16ps zmm: 16 lanes x 2 pairs x 2 flops; 0 where the CPU has no AVX512_BF16.
double measure_dpbf16_gflops(int threads) {
  if (detect_host_x86_isa() < X86Isa::kAvx512Bf16) return 0;
  return measure_peak_gflops_cpu(threads, 64.0,
                                 [](int64_t steps) { KILN_PEAK_LOOP("vdpbf16ps", "zmm"); });
}

// The KV caches and the copy buffers ask for transparent huge pages (bench::HugeVector): the
// shuffled block table makes every 32-key group touch four new 4 KiB pages, and past the STLB's
// reach (~8 MiB of 4 KiB pages) the page walks cost 12–27% of the AMX decode rate at >= 128 MiB
// of KV. KILN_BENCH_HUGEPAGES=0 measures with 4 KiB pages.
using bench::HugePageAllocator;
using bench::HugeVector;

// The call's buffers: query [T, Hq, D], vec-layout caches [NB, Hkv, BS, D], the block table
// (shuffled pages), lengths and the scheduler metadata.
struct Problem {
  int64_t requests = 0, q_len = 0, context = 0, tokens = 0, blocks = 0, max_blocks = 0;
  int64_t heads_q = kHeadsQ;                    // query heads (kHeadsKv KV heads)
  int64_t head = kHeadSize;                     // head size D
  bench::Aligned64Vector<uint16_t> query, out;  // 64-byte aligned, as PyTorch allocates
  HugeVector<uint16_t> key_cache, value_cache;
  HugeVector<uint8_t> key_codes, value_codes;  // fp8 caches (kv=fp8_e4m3)
  std::vector<int32_t> qsl, seq_lens, table;
  std::vector<int8_t> metadata;
  KernelArgs args;
};

OpSpec attention_spec(ir::CpuAttnIsa isa, ir::KvCacheDtype kv = ir::KvCacheDtype::kAuto,
                      int64_t heads_q = kHeadsQ, int64_t head = kHeadSize) {
  return OpSpec::make(OpKind::kCpuAttentionWithKvCache,
                      ir::CpuAttentionParams{isa, DType::kBF16, head, kBlockSize, heads_q, kHeadsKv,
                                             true, false, false, false, false, kv});
}

std::unique_ptr<Problem> make_problem(int64_t requests, int64_t q_len, int64_t context,
                                      ir::CpuAttnIsa isa,
                                      ir::KvCacheDtype kv = ir::KvCacheDtype::kAuto,
                                      int64_t heads_q = kHeadsQ, int64_t head = kHeadSize) {
  auto p = std::make_unique<Problem>();
  p->heads_q = heads_q;
  p->head = head;
  p->requests = requests;
  p->q_len = q_len;
  p->context = context;
  p->tokens = requests * q_len;
  p->max_blocks = (context + kBlockSize - 1) / kBlockSize;
  p->blocks = requests * p->max_blocks;
  const int64_t cache_elems = p->blocks * kHeadsKv * kBlockSize * head;
  p->query = bench::random_bf16(size_t(p->tokens * heads_q * head));
  const bool fp8 = kv != ir::KvCacheDtype::kAuto;
  if (fp8) {
    // e4m3 codes of |x| < 2 (bits 6 and 3 clear: never the NaN code 0x7f / 0xff).
    std::mt19937 rng(7);
    for (auto* codes : {&p->key_codes, &p->value_codes}) {
      codes->resize(size_t(cache_elems));
      for (auto& c : *codes) c = uint8_t(rng() & 0xb7);
    }
  } else {
    for (auto* cache : {&p->key_cache, &p->value_cache}) {
      const auto values = bench::random_bf16(size_t(cache_elems));
      cache->assign(values.begin(), values.end());
    }
  }
  p->out.resize(p->query.size());
  std::vector<int32_t> ids(static_cast<size_t>(p->blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(3));
  p->table = ids;
  for (int64_t r = 0; r <= requests; ++r) p->qsl.push_back(int32_t(r * q_len));
  p->seq_lens.assign(size_t(requests), int32_t(context));
  p->metadata.resize(size_t(codegen::ref::cpu_attn_metadata_bytes()));
  const Tensor qsl(p->qsl.data(), DType::kI32, {requests + 1});
  const Tensor seq_lens(p->seq_lens.data(), DType::kI32, {requests});
  const Tensor metadata(p->metadata.data(), DType::kI8, {int64_t(p->metadata.size())});
  const OpSpec sched =
      OpSpec::make(OpKind::kCpuAttnGetSchedulerMetadata,
                   ir::CpuAttnSchedulerParams{isa, DType::kBF16, head, heads_q, kHeadsKv, true});
  if (!codegen::ref::run(sched, KernelArgs({metadata, seq_lens, qsl}, {double(requests), -1, 1}))
           .is_ok()) {
    std::abort();
  }
  const std::initializer_list<int64_t> cache_sizes = {p->blocks, kHeadsKv, kBlockSize, head};
  const Tensor key_cache = fp8 ? Tensor(p->key_codes.data(), DType::kU8, cache_sizes)
                               : Tensor(p->key_cache.data(), DType::kBF16, cache_sizes);
  const Tensor value_cache = fp8 ? Tensor(p->value_codes.data(), DType::kU8, cache_sizes)
                                 : Tensor(p->value_cache.data(), DType::kBF16, cache_sizes);
  p->args = KernelArgs(
      {Tensor(p->query.data(), DType::kBF16, {p->tokens, heads_q, head}), key_cache, value_cache,
       Tensor(p->out.data(), DType::kBF16, {p->tokens, heads_q, head}), qsl, seq_lens, Tensor{},
       Tensor(p->table.data(), DType::kI32, {requests, p->max_blocks}), metadata, Tensor{}},
      {1.0 / std::sqrt(double(head)), -1.0, -1.0, 0.0});
  if (fp8) {
    p->args.add_scalar(0.05);  // k_scale
    p->args.add_scalar(0.05);  // v_scale
  }
  return p;
}

// The peer: a plain loop per (request, KV head, query token, head in group) over the vec
// layout, fp32 accumulation, a two-pass softmax over the row's logits.
void plain_attention(Problem& p, int threads) {
  const int64_t group = p.heads_q / kHeadsKv;
  const float scale = 1.0f / std::sqrt(float(p.head));
  const int64_t slab = kBlockSize * p.head;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(threads)
  for (int64_t r = 0; r < p.requests; ++r) {
    for (int64_t g = 0; g < kHeadsKv; ++g) {
      std::vector<float> s(static_cast<size_t>(p.context));
      std::vector<float> acc(static_cast<size_t>(p.head));
      std::vector<float> q(static_cast<size_t>(p.head));
      for (int64_t i = 0; i < p.q_len; ++i) {
        const int64_t pos = p.context - p.q_len + i;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const uint16_t* qs = p.query.data() + ((p.qsl[size_t(r)] + i) * p.heads_q + h) * p.head;
          for (int64_t d = 0; d < p.head; ++d) q[size_t(d)] = numeric::bf16_to_f32(qs[d]) * scale;
          float m = -INFINITY;
          for (int64_t j = 0; j <= pos; ++j) {
            const uint16_t* k =
                p.key_cache.data() +
                (int64_t(p.table[size_t(r * p.max_blocks + j / kBlockSize)]) * kHeadsKv + g) *
                    slab +
                j % kBlockSize;
            float dot = 0;
            for (int64_t d = 0; d < p.head; ++d) {
              dot += q[size_t(d)] * numeric::bf16_to_f32(k[d * kBlockSize]);
            }
            s[size_t(j)] = dot;
            m = std::max(m, dot);
          }
          float sum = 0;
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t j = 0; j <= pos; ++j) {
            const float e = std::exp(s[size_t(j)] - m);
            sum += e;
            const uint16_t* v =
                p.value_cache.data() +
                (int64_t(p.table[size_t(r * p.max_blocks + j / kBlockSize)]) * kHeadsKv + g) *
                    slab +
                (j % kBlockSize) * p.head;
            for (int64_t d = 0; d < p.head; ++d) acc[size_t(d)] += e * numeric::bf16_to_f32(v[d]);
          }
          uint16_t* o = p.out.data() + ((p.qsl[size_t(r)] + i) * p.heads_q + h) * p.head;
          for (int64_t d = 0; d < p.head; ++d) o[d] = numeric::f32_to_bf16(acc[size_t(d)] / sum);
        }
      }
    }
  }
}

// Seconds of CPU time this process has used (all threads).
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Seconds of CPU time of the calling thread.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Copy bandwidth (bytes read + written) of a `bytes` buffer (32 MB: 64 MB moved) with `threads`
// threads, per second of CPU time: the ceiling for the *_cpu figures. The best of memcpy, the
// vector loop (AVX-512, or AVX2) and its non-temporal variant, 5 repeats each. The buffers are
// first touched (page faults, placement) by the threads that copy them, outside the timing; the
// time is each copying thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), so idle OpenMP threads
// spinning in the pool do not count. A `bytes` buffer of huge pages, allocated and not touched: the
// measuring threads touch their own parts first (page faults, placement).
using CeilingBuffer = std::unique_ptr<uint8_t, void (*)(uint8_t*)>;
CeilingBuffer ceiling_buffer(size_t bytes) {
  return CeilingBuffer(HugePageAllocator<uint8_t>().allocate(bytes),
                       [](uint8_t* q) { HugePageAllocator<uint8_t>().deallocate(q, 0); });
}

// The calling OpenMP thread's part [begin, end) of `bytes` (4 KiB aligned).
void thread_part(size_t bytes, size_t* begin, size_t* end) {
  const size_t t = size_t(omp_get_thread_num()), n = size_t(omp_get_num_threads());
  *begin = bytes / 4096 * t / n * 4096;
  *end = t + 1 == n ? bytes : bytes / 4096 * (t + 1) / n * 4096;
}

double measure_copy_gbps_cpu(int threads, size_t bytes = size_t(32) << 20) {
  const CeilingBuffer src = ceiling_buffer(bytes), dst = ceiling_buffer(bytes);
  const auto range = [&](size_t* begin, size_t* end) { thread_part(bytes, begin, end); };
#pragma omp parallel num_threads(threads)
  {
    size_t begin = 0, end = 0;
    range(&begin, &end);
    std::memset(src.get() + begin, 1, end - begin);
    std::memset(dst.get() + begin, 0, end - begin);
  }
  double best = 0;
  for (int rep = 0; rep < 15; ++rep) {
    double cpu = 0;
#pragma omp parallel num_threads(threads) reduction(+ : cpu)
    {
      size_t begin = 0, end = 0;
      range(&begin, &end);
      const double c0 = thread_cpu_seconds();
      if (rep % 3 == 0) {
        std::memcpy(dst.get() + begin, src.get() + begin, end - begin);
      } else {
        bench::copy_vector(dst.get() + begin, src.get() + begin, end - begin, rep % 3 == 2);
      }
      cpu += thread_cpu_seconds() - c0;
    }
    best = std::max(best, 2.0 * double(bytes) / (cpu / double(threads)) / 1e9);
  }
  benchmark::DoNotOptimize(dst.get());
  return best;
}

// A read-only pass (64-byte loads into four accumulators), the ceiling of a kernel that only
// reads: one core's read bandwidth is well below the copy figure here (single-thread loads
// are bounded by the misses one core keeps in flight, while a copy's stores drain through
// separate buffers), so the copy ceiling overstates what decode, which only reads the KV, can
// reach.
// GCC 12's _mm512_reduce_add_epi64 starts from a self-initialised "undefined" vector that
// -Wuninitialized flags once inlined (GCC bug 105593, fixed in GCC 13): silenced here only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* src, size_t bytes) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  size_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    a = _mm512_add_epi64(a, _mm512_loadu_si512(src + i));
    b = _mm512_add_epi64(b, _mm512_loadu_si512(src + i + 64));
    c = _mm512_add_epi64(c, _mm512_loadu_si512(src + i + 128));
    d = _mm512_add_epi64(d, _mm512_loadu_si512(src + i + 192));
  }
  uint64_t sum = uint64_t(
      _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d))));
  for (; i < bytes; ++i) sum += src[i];
  return sum;
}
#pragma GCC diagnostic pop
__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* src, size_t bytes) {
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
  size_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    for (int j = 0; j < 4; ++j) {
      acc[j] = _mm256_add_epi64(
          acc[j], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32 * j)));
    }
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(
      reinterpret_cast<__m256i*>(lanes),
      _mm256_add_epi64(_mm256_add_epi64(acc[0], acc[1]), _mm256_add_epi64(acc[2], acc[3])));
  uint64_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < bytes; ++i) sum += src[i];
  return sum;
}

// `bytes` of huge pages, first touched by the threads that read them (thread_part), then read
// 7 times by `threads` threads: read_part(src, thread, threads) reads the calling thread's share
// and returns a sum to keep. The best rate per second of CPU time (each reading thread's own
// CPU time, as measure_copy_gbps_cpu).
template <class ReadPart>
double best_read_gbps_cpu(int threads, size_t bytes, const ReadPart& read_part) {
  const CeilingBuffer src = ceiling_buffer(bytes);
#pragma omp parallel num_threads(threads)
  {
    size_t begin = 0, end = 0;
    thread_part(bytes, &begin, &end);
    std::memset(src.get() + begin, 1, end - begin);
  }
  double best = 0;
  uint64_t sum = 0;
  for (int rep = 0; rep < 7; ++rep) {
    double cpu = 0;
#pragma omp parallel num_threads(threads) reduction(+ : cpu, sum)
    {
      const double c0 = thread_cpu_seconds();
      sum += read_part(src.get(), size_t(omp_get_thread_num()), size_t(omp_get_num_threads()));
      cpu += thread_cpu_seconds() - c0;
    }
    best = std::max(best, double(bytes) / (cpu / double(threads)) / 1e9);
  }
  benchmark::DoNotOptimize(sum);
  return best;
}

// Read bandwidth of a `bytes` buffer read in order with `threads` threads, per second of CPU
// time (best_read_gbps_cpu).
double measure_read_gbps_cpu(int threads, size_t bytes) {
  static const bool avx512 = detect_host_x86_isa() >= X86Isa::kAvx512;
  return best_read_gbps_cpu(threads, bytes, [&](const uint8_t* src, size_t, size_t) {
    size_t begin = 0, end = 0;
    thread_part(bytes, &begin, &end);
    return avx512 ? read_avx512(src + begin, end - begin) : read_avx2(src + begin, end - begin);
  });
}

// The same bytes read as the decode kernel reads its KV: shuffled slabs of one block's K (or V)
// of a KV head, each slab's lines loaded while the next slab's are prefetched into L2
// (prefetcht1, spread over the current slab's loads, as the kernel spreads its prefetches over
// its loops). Random blocks defeat the hardware streamers that a sequential read rides, so this
// is the ceiling of a kernel that reads random blocks: one Zen 4 core of the development VM
// reads 16-19 GB/s this way against 20-29 GB/s in address order (docs/decisions.md, "Thirtieth
// round"). 32-byte loads: the bound is the memory, not the load width.
__attribute__((target("avx2"))) uint64_t read_slabs(const uint8_t* base,
                                                    const std::vector<int64_t>& order, size_t first,
                                                    size_t last, size_t slab) {
  __m256i acc = _mm256_setzero_si256();
  for (size_t i = first; i < last; ++i) {
    const uint8_t* cur = base + size_t(order[i]) * slab;
    const uint8_t* next = base + size_t(order[i + 1 < last ? i + 1 : i]) * slab;
    for (size_t line = 0; line < slab; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(next + line), _MM_HINT_T1);
      acc = _mm256_add_epi64(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cur + line)));
      acc = _mm256_add_epi64(acc,
                             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cur + line + 32)));
    }
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// Read bandwidth of `bytes` (rounded down to whole slabs) as shuffled `slab`-byte slabs
// (read_slabs) with `threads` threads, each over its share of the shuffled order, per second of
// CPU time (best_read_gbps_cpu).
double measure_slab_read_gbps_cpu(int threads, size_t bytes, size_t slab) {
  const size_t slabs = bytes / slab;
  std::vector<int64_t> order(slabs);
  for (size_t i = 0; i < slabs; ++i) order[i] = int64_t(i);
  std::mt19937_64 rng(17);
  std::shuffle(order.begin(), order.end(), rng);
  return best_read_gbps_cpu(threads, slabs * slab, [&](const uint8_t* src, size_t t, size_t n) {
    return read_slabs(src, order, slabs * t / n, slabs * (t + 1) / n, slab);
  });
}

double& copy_gbps_cpu(int threads) {
  static double gbps[3] = {0, 0, 0};
  return gbps[threads];
}

// Reports the wall-clock figures against the ceilings measured by wall clock, and the same
// figures per second of CPU time (process CPU time / threads) against the ceilings measured
// the same way: on a shared machine the wall clock also counts time the scheduler gave to
// other processes, the CPU-time ratio does not.
void report(benchmark::State& state, const Problem& p, int threads, double wall_per_call,
            double cpu_per_call, bool decode, ir::KvCacheDtype kv, bool fma_path) {
  const Estimate e = estimates(attention_spec(ir::CpuAttnIsa::kVec, kv, kHeadsQ, p.head),
                               {.tokens = p.tokens, .batch = p.requests, .context = p.context});
  state.counters["us_per_call"] = 1e6 * wall_per_call;
  if (decode) {
    state.counters["GB/s"] = e.bytes / wall_per_call / 1e9;
    const double copy = bench::adjacent_copy_gbps(threads);
    state.counters["copy_GB/s"] = copy;
    state.counters["pct_of_copy"] = 100.0 * e.bytes / wall_per_call / 1e9 / copy;
    state.counters["GB/s_cpu"] = e.bytes / cpu_per_call / 1e9;
    state.counters["pct_of_copy_cpu"] =
        100.0 * e.bytes / cpu_per_call / 1e9 / copy_gbps_cpu(threads);
    // The same against a copy moving as many bytes as the call reads (the KV of the larger
    // shapes is past the caches, where the 64 MB ceiling is not).
    static std::map<std::pair<int, int64_t>, double> same_size;
    double& ceiling = same_size[{threads, int64_t(e.bytes)}];
    if (ceiling == 0) ceiling = measure_copy_gbps_cpu(threads, size_t(e.bytes / 2));
    state.counters["copy_same_bytes_GB/s_cpu"] = ceiling;
    state.counters["pct_of_same_bytes_copy_cpu"] = 100.0 * e.bytes / cpu_per_call / 1e9 / ceiling;
    // And against reading as many bytes (sequentially: the kernel reads random blocks).
    static std::map<std::pair<int, int64_t>, double> same_read;
    double& read = same_read[{threads, int64_t(e.bytes)}];
    if (read == 0) read = measure_read_gbps_cpu(threads, size_t(e.bytes));
    state.counters["read_same_bytes_GB/s_cpu"] = read;
    state.counters["pct_of_same_bytes_read_cpu"] = 100.0 * e.bytes / cpu_per_call / 1e9 / read;
    // And against reading as many bytes in the kernel's pattern: shuffled slabs of one block's
    // K or V of a KV head (measure_slab_read_gbps_cpu).
    const size_t slab = size_t(kBlockSize * p.head * (kv == ir::KvCacheDtype::kAuto ? 2 : 1));
    static std::map<std::tuple<int, int64_t, size_t>, double> slab_read;
    double& blocks = slab_read[{threads, int64_t(e.bytes), slab}];
    if (blocks == 0) blocks = measure_slab_read_gbps_cpu(threads, size_t(e.bytes), slab);
    state.counters["read_blocks_GB/s_cpu"] = blocks;
    state.counters["pct_of_block_read_cpu"] = 100.0 * e.bytes / cpu_per_call / 1e9 / blocks;
  } else {
    state.counters["GFLOP/s"] = e.flops / wall_per_call / 1e9;
    state.counters["GFLOP/s_cpu"] = e.flops / cpu_per_call / 1e9;
    // Against the peak of the instruction the path multiplies with (the AMX rows too are
    // compared with the vdpbf16ps peak, as before).
    const double peak = fma_path ? fma_peak_gflops(threads) : dpbf16_peak_gflops(threads);
    state.counters["peak_GFLOP/s_cpu"] = peak;
    state.counters["pct_of_peak_cpu"] = 100.0 * e.flops / cpu_per_call / 1e9 / peak;
  }
}

void bm_attention(benchmark::State& state, int64_t requests, int64_t q_len, int64_t context,
                  int threads, bool peer, ir::CpuAttnIsa isa,
                  ir::KvCacheDtype kv = ir::KvCacheDtype::kAuto, Config config = {},
                  int64_t heads_q = kHeadsQ, int64_t head = kHeadSize) {
  auto p = make_problem(requests, q_len, context, isa, kv, heads_q, head);
  const Kernel kernel = bench::compile_x86_or_die(attention_spec(isa, kv, heads_q, head),
                                                  config.set("threads", threads));
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = process_cpu_seconds();
  for (auto _ : state) {
    if (peer) {
      plain_attention(*p, threads);
    } else if (!kernel.run_unchecked(p->args).is_ok()) {
      state.SkipWithError("kernel failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  const double calls = double(std::max<int64_t>(1, state.iterations()));
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
  const double cpu = (process_cpu_seconds() - cpu_start) / double(threads) / calls;
  const bool fma_path = !codegen::x86::attention_uses_dpbf16(attention_spec(isa, kv, heads_q, head),
                                                             config, detect_host_x86_isa());
  report(state, *p, threads, wall, cpu, q_len == 1, kv, fma_path);
}

void register_all() {
  for (int threads : {2, 1}) {
    for (int who_index : {0, 1, 2}) {
      const bool peer = who_index == 2;
      const ir::CpuAttnIsa isa = who_index == 1 ? ir::CpuAttnIsa::kAmx : ir::CpuAttnIsa::kVec;
      const char* who = who_index == 0 ? "kiln_vec" : who_index == 1 ? "kiln_amx" : "plain_cpp";
      if (isa == ir::CpuAttnIsa::kAmx && detect_host_x86_isa() < X86Isa::kAmx) continue;
      for (int64_t batch : {1, 8, 32}) {
        for (int64_t context : {512, 2048, 8192}) {
          if (peer && batch * context > 8 * 2048) continue;  // the peer is slow
          benchmark::RegisterBenchmark(
              fmt::format("decode/{}/batch:{}/context:{}/threads:{}", who, batch, context, threads)
                  .c_str(),
              [=](benchmark::State& s) { bm_attention(s, batch, 1, context, threads, peer, isa); })
              ->Unit(benchmark::kMicrosecond)
              ->MinTime(0.2);
        }
      }
      if (who_index == 0 && detect_host_x86_isa() >= X86Isa::kAvx512Bf16) {
        // The same bf16 vec kernel on either arithmetic (config dpbf16=1: vdpbf16ps, 0: widen +
        // FMA; which is faster depends on the CPU: attention_default_dpbf16, `kiln tune`).
        for (int64_t dot : {1, 0}) {
          for (int64_t batch : {1, 8, 32}) {
            for (int64_t context : {512, 2048, 8192}) {
              benchmark::RegisterBenchmark(
                  fmt::format("decode/kiln_vec_{}/batch:{}/context:{}/threads:{}",
                              dot ? "dot" : "fma", batch, context, threads)
                      .c_str(),
                  [=](benchmark::State& s) {
                    bm_attention(s, batch, 1, context, threads, false, ir::CpuAttnIsa::kVec,
                                 ir::KvCacheDtype::kAuto, Config().set("dpbf16", dot));
                  })
                  ->Unit(benchmark::kMicrosecond)
                  ->MinTime(0.2);
            }
          }
        }
      }
      if (!peer) {
        // Smaller GQA groups (1: MHA, 2, 4 query heads per KV head; kHeadsKv KV heads): decode
        // calls of fewer rows, the same KV bytes (kiln_amx: on AMX hosts only).
        for (int64_t group : {1, 2, 4}) {
          for (int64_t batch : {1, 8}) {
            for (int64_t context : {2048, 8192}) {
              benchmark::RegisterBenchmark(
                  fmt::format("decode/{}_gqa{}/batch:{}/context:{}/threads:{}", who, group, batch,
                              context, threads)
                      .c_str(),
                  [=](benchmark::State& s) {
                    bm_attention(s, batch, 1, context, threads, false, isa, ir::KvCacheDtype::kAuto,
                                 Config{}, group * kHeadsKv);
                  })
                  ->Unit(benchmark::kMicrosecond)
                  ->MinTime(0.2);
            }
          }
        }
      }
      if (who_index == 0) {
        // Larger heads (GQA 8): 256, the largest whose P·V is unrolled over the head, and
        // vLLM's newest 512, which loops over it (emit_dim_chunks), at 2x and 4x the KV bytes
        // per token of the rows above.
        for (int64_t head : {256, 512}) {
          for (int64_t batch : {1, 8}) {
            benchmark::RegisterBenchmark(
                fmt::format("decode/kiln_vec_head{}/batch:{}/context:2048/threads:{}", head, batch,
                            threads)
                    .c_str(),
                [=](benchmark::State& s) {
                  bm_attention(s, batch, 1, 2048, threads, false, ir::CpuAttnIsa::kVec,
                               ir::KvCacheDtype::kAuto, Config{}, kHeadsQ, head);
                })
                ->Unit(benchmark::kMicrosecond)
                ->MinTime(0.2);
          }
        }
        // fp8 e4m3 KV (isa=vec): half the KV bytes, decoded to fp32 in the kernel.
        for (int64_t batch : {1, 8, 32}) {
          for (int64_t context : {512, 2048, 8192}) {
            benchmark::RegisterBenchmark(
                fmt::format("decode/kiln_vec_fp8_e4m3/batch:{}/context:{}/threads:{}", batch,
                            context, threads)
                    .c_str(),
                [=](benchmark::State& s) {
                  bm_attention(s, batch, 1, context, threads, false, ir::CpuAttnIsa::kVec,
                               ir::KvCacheDtype::kFp8E4m3);
                })
                ->Unit(benchmark::kMicrosecond)
                ->MinTime(0.2);
          }
        }
        // The same cache at GQA 1 (one pass over each KV tile, where decoding the tile once
        // saves nothing) and in prefill (many passes share each tile).
        for (int64_t batch : {1, 8}) {
          benchmark::RegisterBenchmark(
              fmt::format("decode/kiln_vec_fp8_e4m3_gqa1/batch:{}/context:2048/threads:{}", batch,
                          threads)
                  .c_str(),
              [=](benchmark::State& s) {
                bm_attention(s, batch, 1, 2048, threads, false, ir::CpuAttnIsa::kVec,
                             ir::KvCacheDtype::kFp8E4m3, Config{}, kHeadsKv);
              })
              ->Unit(benchmark::kMicrosecond)
              ->MinTime(0.2);
        }
        benchmark::RegisterBenchmark(
            fmt::format("prefill/kiln_vec_fp8_e4m3/tokens:1024/threads:{}", threads).c_str(),
            [=](benchmark::State& s) {
              bm_attention(s, 1, 1024, 1024, threads, false, ir::CpuAttnIsa::kVec,
                           ir::KvCacheDtype::kFp8E4m3);
            })
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.2);
      }
      for (int64_t tokens : {512, 1024, 2048}) {
        if (peer && tokens > 512) continue;
        benchmark::RegisterBenchmark(
            fmt::format("prefill/{}/tokens:{}/threads:{}", who, tokens, threads).c_str(),
            [=](benchmark::State& s) { bm_attention(s, 1, tokens, tokens, threads, peer, isa); })
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.2);
        if (who_index == 0 && detect_host_x86_isa() >= X86Isa::kAvx512Bf16) {
          for (int64_t dot : {1, 0}) {
            benchmark::RegisterBenchmark(
                fmt::format("prefill/kiln_vec_{}/tokens:{}/threads:{}", dot ? "dot" : "fma", tokens,
                            threads)
                    .c_str(),
                [=](benchmark::State& s) {
                  bm_attention(s, 1, tokens, tokens, threads, false, ir::CpuAttnIsa::kVec,
                               ir::KvCacheDtype::kAuto, Config().set("dpbf16", dot));
                })
                ->Unit(benchmark::kMillisecond)
                ->MinTime(0.2);
          }
        }
      }
    }
  }
}

// paged_attention_v1/v2 decode (legacy cache [NB, Hkv, D/x, BS, x] / [NB, Hkv, D, BS], bf16
// query, D 128, GQA 8, BS 16 unless given, v2 partitions of 512; bf16 KV (x = 8) or fp8 e4m3 codes
// (x = 16)): GB/s of KV read per second of CPU time.
// `sparse_step` != 0: block-sparse mode with Phi-3-small's pattern (sparse blocks of 64 tokens,
// 16 local ones, vertical stride 8) sliding per query head (+1: each head of a KV group attends
// other vertical blocks, so every block is read, partly by one head) or per KV head (−1: the
// group attends 18 of the 32 sparse blocks of a 2048-token context); GB/s counts the blocks
// read. `config`: knobs beside the thread count (the kiln_gather rows: direct=0, the gather into
// the tile kernel's layout that the direct kernel replaced). `dtype`: of the
// query and the caches (bf16, or f16 for the kiln_f16 rows). `block_size`: the cache's (8 for the
// kiln_block8 rows, which the direct kernel reads through its stage). `heads_kv`: KV heads of the
// 32 query heads (4 = GQA 8 unless given).
void bm_paged(benchmark::State& state, bool v2, ir::KvCacheDtype kv, int64_t batch, int64_t context,
              int threads, int sparse_step = 0, Config config = {}, DType dtype = DType::kBF16,
              int64_t block_size = 16, int64_t heads_kv = kHeadsKv) {
  constexpr int64_t kPartition = 512;
  constexpr int64_t kSparseBlock = 64, kLocal = 16, kVert = 8;
  const OpSpec spec =
      OpSpec::make(v2 ? OpKind::kPagedAttentionV2 : OpKind::kPagedAttentionV1,
                   ir::PagedAttentionParams{dtype, kv, kHeadSize, block_size, kHeadsQ, heads_kv,
                                            false, sparse_step != 0, v2 ? kPartition : 0});
  const bool fp8 = kv != ir::KvCacheDtype::kAuto;
  const int64_t x = ir::paged_key_x(dtype, kv);
  const int64_t width = (context + block_size - 1) / block_size;
  const int64_t blocks = batch * width;
  const int64_t cache_elems = blocks * heads_kv * block_size * kHeadSize;
  auto query = bench::random_bf16(size_t(batch * kHeadsQ * kHeadSize), dtype == DType::kF16);
  auto key_cache = bench::random_bf16(size_t(fp8 ? 0 : cache_elems), dtype == DType::kF16);
  auto value_cache = bench::random_bf16(size_t(fp8 ? 0 : cache_elems), dtype == DType::kF16);
  bench::Aligned64Vector<uint8_t> key_codes(size_t(fp8 ? cache_elems : 0)),
      value_codes(key_codes.size());
  std::mt19937 rng(7);
  for (auto* codes : {&key_codes, &value_codes}) {
    for (auto& c : *codes) c = uint8_t(rng() & 0xb7);  // |x| < 2, never the NaN code
  }
  bench::Aligned64Vector<uint16_t> out(query.size());
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(5));
  std::vector<int32_t> seq_lens(static_cast<size_t>(batch), int32_t(context));
  const int64_t parts = (context + kPartition - 1) / kPartition;
  bench::Aligned64Vector<float> sums(static_cast<size_t>(batch * kHeadsQ * parts)),
      maxes(sums.size());
  bench::Aligned64Vector<uint16_t> tmp(static_cast<size_t>(batch * kHeadsQ * parts * kHeadSize));
  std::vector<Tensor> tensors = {Tensor(out.data(), dtype, {batch, kHeadsQ, kHeadSize})};
  if (v2) {
    tensors.push_back(Tensor(sums.data(), DType::kF32, {batch, kHeadsQ, parts}));
    tensors.push_back(Tensor(maxes.data(), DType::kF32, {batch, kHeadsQ, parts}));
    tensors.push_back(Tensor(tmp.data(), dtype, {batch, kHeadsQ, parts, kHeadSize}));
  }
  float k_scale = fp8 ? 0.02f : 1.0f, v_scale = fp8 ? 0.03f : 1.0f;
  for (const Tensor& t :
       {Tensor(query.data(), dtype, {batch, kHeadsQ, kHeadSize}),
        fp8 ? Tensor(key_codes.data(), DType::kU8, {blocks, heads_kv, kHeadSize / x, block_size, x})
            : Tensor(key_cache.data(), dtype, {blocks, heads_kv, kHeadSize / x, block_size, x}),
        fp8 ? Tensor(value_codes.data(), DType::kU8, {blocks, heads_kv, kHeadSize, block_size})
            : Tensor(value_cache.data(), dtype, {blocks, heads_kv, kHeadSize, block_size}),
        Tensor(table.data(), DType::kI32, {batch, width}),
        Tensor(seq_lens.data(), DType::kI32, {batch}), Tensor{}, Tensor(&k_scale, DType::kF32, {1}),
        Tensor(&v_scale, DType::kF32, {1})}) {
    tensors.push_back(t);
  }
  KernelArgs args;
  for (const Tensor& t : tensors) args.add(t);
  for (double v : {1.0 / std::sqrt(double(kHeadSize)), double(context), 0.0, double(kLocal),
                   double(kVert), double(kSparseBlock), double(sparse_step)}) {
    args.add_scalar(v);
  }
  const Kernel kernel = bench::compile_x86_or_die(spec, config.set("threads", threads));
  const double cpu_start = process_cpu_seconds();
  for (auto _ : state) {
    if (!kernel.run(args).is_ok()) {
      state.SkipWithError("kernel failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  const double calls = double(std::max<int64_t>(1, state.iterations()));
  const double cpu = (process_cpu_seconds() - cpu_start) / double(threads) / calls;
  // Tokens read per KV head: those of the sparse blocks some head of its group attends.
  int64_t read_tokens = 0;
  for (int64_t g = 0; g < heads_kv; ++g) {
    for (int64_t kb = 0; kb * kSparseBlock < context; ++kb) {
      bool read = sparse_step == 0 || kb > (context - 1) / kSparseBlock - kLocal;
      for (int64_t h = g * (kHeadsQ / heads_kv); !read && h < (g + 1) * (kHeadsQ / heads_kv); ++h) {
        const int64_t off = sparse_step > 0 ? h * sparse_step + 1 : g * -sparse_step + 1;
        read = (kb + off) % kVert == 0;
      }
      if (read) read_tokens += std::min(kSparseBlock, context - kb * kSparseBlock);
    }
  }
  const double bytes = double(2 * batch * read_tokens * kHeadSize * (fp8 ? 1 : 2));
  state.counters["GB/s_cpu"] = bytes / cpu / 1e9;
  state.counters["pct_of_copy_cpu"] = 100.0 * bytes / cpu / 1e9 / copy_gbps_cpu(threads);
}

// Registers the row "paged_v1|v2/kiln<suffix>/batch:<batch>/context:2048/threads:<threads>".
void add_paged_row(bool v2, std::string_view suffix, int64_t batch, int threads,
                   std::function<void(benchmark::State&)> run) {
  benchmark::RegisterBenchmark(fmt::format("paged_{}/kiln{}/batch:{}/context:2048/threads:{}",
                                           v2 ? "v2" : "v1", suffix, batch, threads)
                                   .c_str(),
                               std::move(run))
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(0.2);
}

void register_paged() {
  constexpr auto kAuto = ir::KvCacheDtype::kAuto, kFp8 = ir::KvCacheDtype::kFp8E4m3;
  const Config gather = Config().set("direct", 0);  // the `_gather` rows
  for (int threads : {1, 2}) {
    for (bool v2 : {false, true}) {
      for (ir::KvCacheDtype kv : {kAuto, kFp8}) {
        for (int64_t batch : {1, 8}) {
          add_paged_row(v2, kv == kFp8 ? "_fp8_e4m3" : "", batch, threads,
                        [=](benchmark::State& s) { bm_paged(s, v2, kv, batch, 2048, threads); });
        }
      }
      for (bool g : {false, true}) {  // f16 caches (and query), batch 8
        add_paged_row(v2, g ? "_f16_gather" : "_f16", 8, threads, [=](benchmark::State& s) {
          bm_paged(s, v2, kAuto, 8, 2048, threads, 0, g ? gather : Config(), DType::kF16);
        });
      }
      for (int64_t batch : {1, 8}) {
        add_paged_row(v2, "_gather", batch, threads, [=](benchmark::State& s) {
          bm_paged(s, v2, kAuto, batch, 2048, threads, 0, gather);
        });
      }
      for (bool g : {false, true}) {  // block 8: the direct kernel's copied stage, or not
        add_paged_row(v2, g ? "_block8_gather" : "_block8", 8, threads, [=](benchmark::State& s) {
          bm_paged(s, v2, kAuto, 8, 2048, threads, 0, Config().set("direct", g ? 0 : 1),
                   DType::kBF16, 8);
        });
      }
      // Smaller groups (GQA 1 = MHA: 32 KV heads, GQA 4: 8), batch 1 (32 / 8 MiB of KV), the
      // default kernel and the gather.
      for (int64_t heads_kv : {int64_t(kHeadsQ), int64_t(kHeadsQ / 4)}) {
        for (bool g : {false, true}) {
          add_paged_row(v2, fmt::format("_gqa{}{}", kHeadsQ / heads_kv, g ? "_gather" : ""), 1,
                        threads, [=](benchmark::State& s) {
                          bm_paged(s, v2, kAuto, 1, 2048, threads, 0, g ? gather : Config(),
                                   DType::kBF16, 16, heads_kv);
                        });
        }
      }
      // fp8 through the gather (the direct kernel's stage replaced it at AVX512_VBMI)
      add_paged_row(v2, "_fp8_e4m3_gather", 8, threads, [=](benchmark::State& s) {
        bm_paged(s, v2, kFp8, 8, 2048, threads, 0, gather);
      });
      for (int step : {1, -1}) {
        add_paged_row(v2, step > 0 ? "_blocksparse_per_q_head" : "_blocksparse_per_kv_head", 8,
                      threads,
                      [=](benchmark::State& s) { bm_paged(s, v2, kAuto, 8, 2048, threads, step); });
      }
    }
  }
}

// fp8 KV decode (kv=fp8_e4m3, bf16 query, the decode shapes above; compare with the
// decode/kiln_vec rows of the bf16 cache): GB/s of fp8 KV read per second of CPU time against
// the copy ceiling measured the same way, and (key, KV head) pairs per second. At AVX512_BF16
// and at AVX-512 (both take the fp32 path: codes decoded to fp32 on load).
void bm_fp8_decode(benchmark::State& state, int64_t batch, int64_t context, int threads,
                   X86Isa isa) {
  auto p = make_problem(batch, 1, context, ir::CpuAttnIsa::kVec);
  OpSpec spec = attention_spec(ir::CpuAttnIsa::kVec);
  auto params = spec.get<ir::CpuAttentionParams>();
  params.kv = ir::KvCacheDtype::kFp8E4m3;
  spec = OpSpec::make(OpKind::kCpuAttentionWithKvCache, params);
  const float k_scale = 0.05f, v_scale = 0.05f;
  bench::Aligned64Vector<uint8_t> key_codes(p->key_cache.size()),
      value_codes(p->value_cache.size());
  for (size_t i = 0; i < key_codes.size(); ++i) {
    key_codes[i] = numeric::f32_to_fp8_e4m3(numeric::bf16_to_f32(p->key_cache[i]) / k_scale);
    value_codes[i] = numeric::f32_to_fp8_e4m3(numeric::bf16_to_f32(p->value_cache[i]) / v_scale);
  }
  const std::initializer_list<int64_t> cache_sizes = {p->blocks, kHeadsKv, kBlockSize, kHeadSize};
  KernelArgs args = p->args;
  args.tensors[1] = Tensor(key_codes.data(), DType::kU8, cache_sizes);
  args.tensors[2] = Tensor(value_codes.data(), DType::kU8, cache_sizes);
  args.add_scalar(k_scale).add_scalar(v_scale);
  CompileOptions options;
  options.backend = BackendKind::kX86;
  options.isa = isa;
  options.config = Config().set("threads", threads);
  auto kernel = compile(spec, options);
  if (!kernel.is_ok()) {
    state.SkipWithError(kernel.status().to_string().c_str());
    return;
  }
  const double cpu_start = process_cpu_seconds();
  for (auto _ : state) {
    if (!kernel->run_unchecked(args).is_ok()) {
      state.SkipWithError("kernel failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  const double calls = double(std::max<int64_t>(1, state.iterations()));
  const double cpu = (process_cpu_seconds() - cpu_start) / double(threads) / calls;
  const Estimate e = estimates(spec, {.tokens = batch, .batch = batch, .context = context});
  state.counters["GB/s_cpu"] = e.bytes / cpu / 1e9;
  state.counters["pct_of_copy_cpu"] = 100.0 * e.bytes / cpu / 1e9 / copy_gbps_cpu(threads);
  state.counters["Mkeys/s_cpu"] = double(batch * context * kHeadsKv) / cpu / 1e6;
}

void register_fp8() {
  for (X86Isa isa : {X86Isa::kAvx512Bf16, X86Isa::kAvx512}) {
    if (detect_host_x86_isa() < isa) continue;
    for (int64_t batch : {1, 8}) {
      for (int64_t context : {2048, 8192}) {
        benchmark::RegisterBenchmark(
            fmt::format("decode_fp8_e4m3/{}/batch:{}/context:{}/threads:1", x86_isa_name(isa),
                        batch, context)
                .c_str(),
            [=](benchmark::State& s) { bm_fp8_decode(s, batch, context, 1, isa); })
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.2);
      }
    }
  }
}

// cpu_attn_reshape_and_cache into vec (or, kv=auto, amx) slabs (bf16 K/V rows of 4 heads x 128,
// block 32):
// kv=auto or fp8_e4m3; random distinct slots, or with `prefill` a prefill's slot mapping
// (consecutive slots of shuffled blocks); `tokens` = 0 is the large shape (>= 64 MB moved),
// else a decode step of that many tokens; fp8: k_scale = v_scale = `scale` picks the
// quantiser's steps (1.0: powers of two; 0.02: exact products; 3.1 / 448: a calibrated scale).
void bm_cache_write(benchmark::State& state, ir::CpuAttnIsa layout, ir::KvCacheDtype kv,
                    int64_t tokens, int threads, double scale, bool prefill) {
  const OpSpec spec = OpSpec::make(
      OpKind::kCpuAttnReshapeAndCache,
      ir::CpuAttnCacheWriteParams{layout, DType::kBF16, kHeadsKv, kHeadSize, kBlockSize, kv});
  if (tokens == 0) tokens = bench::tokens_for(spec);
  const int64_t blocks = 2 * (tokens + kBlockSize - 1) / kBlockSize + 2;
  const auto key = bench::random_bf16(size_t(tokens * kHeadsKv * kHeadSize));
  const auto value = key;
  const bool fp8 = kv != ir::KvCacheDtype::kAuto;
  const size_t cache_bytes = size_t(blocks * kHeadsKv * kBlockSize * kHeadSize) * (fp8 ? 1 : 2);
  bench::Aligned64Vector<uint8_t> key_cache(cache_bytes), value_cache(cache_bytes);
  std::vector<int64_t> slots = bench::cache_slots(tokens, blocks, kBlockSize, prefill);
  const std::initializer_list<int64_t> rows = {tokens, kHeadsKv, kHeadSize};
  const std::initializer_list<int64_t> cache = {blocks, kHeadsKv, kBlockSize, kHeadSize};
  const DType cache_dtype = fp8 ? DType::kU8 : DType::kBF16;
  KernelArgs args(
      {Tensor(const_cast<uint16_t*>(key.data()), DType::kBF16, rows),
       Tensor(const_cast<uint16_t*>(value.data()), DType::kBF16, rows),
       Tensor(key_cache.data(), cache_dtype, cache), Tensor(value_cache.data(), cache_dtype, cache),
       Tensor(slots.data(), DType::kI64, {tokens})},
      {});
  if (fp8) args.add_scalar(scale).add_scalar(scale);
  const Kernel kernel = bench::compile_x86_or_die(spec, Config().set("threads", threads));
  if (const Status status = kernel.run(args); !status.is_ok()) {
    state.SkipWithError(status.to_string().c_str());
    return;
  }
  bench::run_and_report(state, spec, tokens, threads, [&] { (void)kernel.run_unchecked(args); });
}

void register_cache_write() {
  const std::pair<const char*, double> scales[] = {
      {"scale1", 1.0}, {"scale0.02", 0.02}, {"calibrated", 3.1 / 448}};
  for (int threads : {1, 2}) {
    for (int64_t tokens : {int64_t(16), int64_t(0)}) {
      const std::string shape = tokens == 0 ? "large" : fmt::format("decode{}", tokens);
      for (bool prefill : tokens == 0 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
        const std::string slots = prefill ? "prefill_slots/" : "";
        for (ir::CpuAttnIsa layout : {ir::CpuAttnIsa::kVec, ir::CpuAttnIsa::kAmx}) {
          const char* name = layout == ir::CpuAttnIsa::kAmx ? "kiln_amx_layout" : "kiln";
          benchmark::RegisterBenchmark(
              fmt::format("cache_write_auto/{}/{}{}/threads:{}", name, slots, shape, threads)
                  .c_str(),
              [=](benchmark::State& s) {
                bm_cache_write(s, layout, ir::KvCacheDtype::kAuto, tokens, threads, 1.0, prefill);
              })
              ->UseRealTime();
        }
        for (const auto& [name, scale] : scales) {
          benchmark::RegisterBenchmark(fmt::format("cache_write_fp8_e4m3/kiln_{}/{}{}/threads:{}",
                                                   name, slots, shape, threads)
                                           .c_str(),
                                       [=](benchmark::State& s) {
                                         bm_cache_write(s, ir::CpuAttnIsa::kVec,
                                                        ir::KvCacheDtype::kFp8E4m3, tokens, threads,
                                                        scale, prefill);
                                       })
              ->UseRealTime();
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  jit::bench::measure_copy_ceilings();
  for (int threads : {1, 2}) {
    dpbf16_peak_gflops(threads) = measure_dpbf16_gflops(threads);
    fma_peak_gflops(threads) = measure_fma_gflops(threads);
    copy_gbps_cpu(threads) = measure_copy_gbps_cpu(threads);
    fmt::print(
        "per second of CPU time, {} thread(s): vdpbf16ps peak {}, {} peak {:.1f} GFLOP/s (best "
        "of 5 each), copy {:.1f} GB/s at 64 MB moved (best of 7)\n",
        threads,
        dpbf16_peak_gflops(threads) > 0 ? fmt::format("{:.1f} GFLOP/s", dpbf16_peak_gflops(threads))
                                        : std::string("- (no AVX512_BF16 here)"),
        fma_peak_instruction(), fma_peak_gflops(threads), copy_gbps_cpu(threads));
    // Decode with GQA 8 is an 8 x T by T x D product per KV head for Q·Kᵀ and for P·V: 8 query
    // rows x 2 flops per KV element of 2 bytes = 8 flops per KV byte, so the vdpbf16ps path
    // (kiln_vec_dot) cannot read KV faster than its peak / 8 even with free interleaving, nor
    // the fp32 path (kiln_vec_fma) faster than the FMA peak / 8 with free widening; the AMX
    // tiles (tdpbf16ps) are not bound there.
    for (const auto& [path, peak] :
         {std::pair<const char*, double>{"vdpbf16ps", dpbf16_peak_gflops(threads)},
          {"fp32 (vfmadd231ps)", fma_peak_gflops(threads)}}) {
      if (peak == 0) continue;
      fmt::print(
          "  decode compute bound of the {} path (GQA 8: 8 flops per KV byte): {:.1f} GB/s "
          "= {:.0f}% of that copy\n",
          path, peak / 8.0, 100.0 * peak / 8.0 / copy_gbps_cpu(threads));
    }
  }
  register_all();
  register_paged();
  register_fp8();
  register_cache_write();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
