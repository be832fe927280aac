// GEMM throughput of the onednn backend through jit::ops (handler lookup, fingerprint, M
// bucket, epilogue included) for a 4096 x 4096 weight at M = 1, 16, 128, 1024, against ceilings
// measured at the start of the same run:
//   * compute: the issue-rate peak of the instruction the dtype maps to (fp32 FMA, vdpbf16ps,
//     vpdpbusd) and of the AMX tile ops oneDNN actually uses here (tdpbf16ps, tdpbusd);
//   * bandwidth (M <= 16): the weight bytes streamed per second against the copy bandwidth at
//     1 GiB moved. Decode streams each layer's weight once, so the benchmark rotates through
//     enough handlers (>= 256 MB of weights) that no weight is in a cache when it is read.
// Then the two oneDNN pitfalls of docs/gemm.md, measured directly on oneDNN at M = 1: a plain
// (not reordered) fp32 weight, and run-time per-channel output scales for int8.
//
//   build/release/bench/bench_gemm
//   build/release/bench/bench_gemm --small   (decode rows only: M = 1, 2, 4, 8, 16 on 1 and 2
//                                           threads, kiln's small-M kernel against oneDNN)
#include <fmt/format.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/ceilings.h"
#include "bench/gemm_peaks.h"
#include "codegen/onednn/onednn_backend.h"
#include "codegen/onednn/small_m.h"
#include "codegen/ref/ref.h"
#include "ir/params_cpu.h"
#include "runtime/ops.h"
#include "runtime/runtime.h"
#include "tests/harness/harness.h"

namespace jit::bench {
namespace {

constexpr int64_t kK = 4096;
constexpr int64_t kN = 4096;
// oneDNN's OpenMP pool (OMP_NUM_THREADS, else every core); ceilings use the same count.
const int kThreads = omp_get_max_threads();
constexpr double kColdWeightBytes = 256e6;

enum class Kind { kF32, kBf16, kInt8 };

std::string_view kind_name(Kind kind) {
  return kind == Kind::kF32 ? "f32" : kind == Kind::kBf16 ? "bf16" : "int8";
}
DType weight_dtype(Kind kind) {
  return kind == Kind::kF32 ? DType::kF32 : kind == Kind::kBf16 ? DType::kBF16 : DType::kI8;
}
PeakKind vector_peak(Kind kind) {
  return kind == Kind::kF32    ? PeakKind::kFmaF32
         : kind == Kind::kBf16 ? PeakKind::kDpBf16
                               : PeakKind::kVnniI8;
}

PeakKind amx_peak(Kind kind) {
  return kind == Kind::kInt8 ? PeakKind::kAmxI8 : PeakKind::kAmxBf16;
}

struct Ceilings {
  double copy_gbps = 0;                  // 1 GiB moved, kThreads
  std::unordered_map<int, double> peak;  // PeakKind -> GFLOP/s at kThreads
};
Ceilings& ceilings() {
  static Ceilings c;
  return c;
}

// One row of the summary table.
struct Row {
  Kind kind;
  int64_t m;
  double us, median_us, gflops, weight_gbps;  // best call (GFLOP/s, GB/s of the best call)
  double copy_gbps;                           // the copy ceiling this row is compared with
};
std::vector<Row>& rows() {
  static std::vector<Row> r;
  return r;
}

// Enough handlers of one weight type to defeat the caches at small M (one at large M, where
// the weight is reused across rows anyway).
struct Handlers {
  std::vector<test::HostTensor> weights;
  std::vector<int64_t> ids;
  test::HostTensor scales;
};

Handlers make_handlers(Kind kind, int count) {
  Handlers h;
  const DType dt = weight_dtype(kind);
  h.scales = test::HostTensor::zeros(DType::kF32, {1, kN});
  test::fill_uniform(h.scales, 7, 0.01, 0.02);
  for (int i = 0; i < count; ++i) {
    test::HostTensor b = test::HostTensor::strided(dt, {kK, kN}, {1, kK});
    // Small integers keep every dtype finite and exact; the speed does not depend on values.
    test::fill_small_int(b, uint64_t(i) + 1);
    h.ids.push_back(kind == Kind::kInt8
                        ? ops::create_onednn_scaled_mm(b.tensor(), h.scales.tensor(), DType::kBF16,
                                                       true, false, 32)
                        : ops::create_onednn_mm(b.tensor(), 32));
  }
  return h;
}

// Times one case: a warm-up pass over every handler, then the best of 3 windows of >= 0.3 s.
void run_case(Kind kind, int64_t m) {
  const double weight_bytes = double(kK * kN * dtype_size(weight_dtype(kind)));
  const int handler_count = m <= 16 ? int(std::ceil(kColdWeightBytes / weight_bytes)) : 1;
  Handlers h = make_handlers(kind, handler_count);
  const DType act = kind == Kind::kInt8 ? DType::kI8 : weight_dtype(kind);
  const DType out = kind == Kind::kInt8 ? DType::kBF16 : weight_dtype(kind);
  test::HostTensor a = test::HostTensor::zeros(act, {m, kK});
  test::fill_small_int(a, 3);
  test::HostTensor c = test::HostTensor::zeros(out, {m, kN});
  test::HostTensor a_scales = test::HostTensor::zeros(DType::kF32, {m, 1});
  test::fill_uniform(a_scales, 5, 0.01, 0.02);
  size_t next = 0;
  auto call = [&] {
    const int64_t id = h.ids[next++ % h.ids.size()];
    if (kind == Kind::kInt8) {
      ops::onednn_scaled_mm(c.tensor(), a.tensor(), a_scales.tensor(), Tensor(), Tensor(), Tensor(),
                            id);
    } else {
      ops::onednn_mm(c.tensor(), a.tensor(), Tensor(), id);
    }
  };
  for (size_t i = 0; i < h.ids.size(); ++i) call();  // primitives created, pages touched
  // Each call timed on its own: the machine is shared, so the best call shows what the code
  // does and the median what a busy machine gives.
  std::vector<double> times;
  double total = 0;
  while (total < 1.0 || times.size() < 2 * h.ids.size()) {
    const auto start = std::chrono::steady_clock::now();
    call();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    total += times.back();
  }
  std::sort(times.begin(), times.end());
  const double seconds = times.front();
  const double median = times[times.size() / 2];
  const double gflops = 2.0 * double(m) * kK * kN / seconds / 1e9;
  // The copy ceiling again right after a streaming case: the load of a shared machine drifts,
  // so the case is compared with the better of the run's start and this.
  double copy = ceilings().copy_gbps;
  if (m <= 16) copy = std::max(copy, measure_copy_gbps(size_t(512) << 20, kThreads));
  // Likewise the peaks this case is compared with (the ceilings keep the best seen).
  for (PeakKind peak : {vector_peak(kind), amx_peak(kind)}) {
    if (kind == Kind::kF32 && peak == amx_peak(kind)) continue;
    ceilings().peak[int(peak)] =
        std::max(ceilings().peak[int(peak)], measure_peak_gflops(peak, kThreads));
  }
  fmt::print(
      "gemm {} M={}: best {:.0f} us/call ({:.0f} GFLOP/s, {:.1f} GB/s of weights), median {:.0f} "
      "us over {} calls\n",
      kind_name(kind), m, seconds * 1e6, gflops, weight_bytes / seconds / 1e9, median * 1e6,
      times.size());
  std::fflush(stdout);
  rows().push_back(
      {kind, m, seconds * 1e6, median * 1e6, gflops, weight_bytes / seconds / 1e9, copy});
  for (int64_t id : h.ids) ops::release_onednn_handler(id);
}

// ---- the pitfalls, on oneDNN directly ----------------------------------------------------------

// One oneDNN matmul at M = 1 with a given weight layout and attributes, over enough weights
// to stream them from memory (as run_case does).
struct M1Variant {
  dnnl::matmul matmul;
  std::vector<dnnl::memory> weights;
  dnnl::memory a, c, scales;
  bool runtime_scales = false;
  std::string impl;
  double best_us = 1e30;
};

M1Variant make_m1_variant(const dnnl::engine& eng, dnnl::memory::data_type wdt,
                          dnnl::memory::format_tag wtag, bool runtime_scales) {
  using namespace dnnl;
  M1Variant v;
  const auto dst_dt = wdt == memory::data_type::s8 ? memory::data_type::s32 : wdt;
  const memory::desc a_md({1, kK}, wdt, memory::format_tag::ab);
  const memory::desc w_md({kK, kN}, wdt, wtag);
  const memory::desc c_md({1, kN}, runtime_scales ? memory::data_type::f32 : dst_dt,
                          memory::format_tag::ab);
  primitive_attr attr;
  if (runtime_scales) attr.set_output_scales(2, {DNNL_RUNTIME_F32_VAL});
  const matmul::primitive_desc pd(matmul::desc(a_md, w_md, c_md), attr, eng);
  v.impl = pd.impl_info_str();
  v.matmul = matmul(pd);
  const int count = int(std::ceil(kColdWeightBytes / double(pd.weights_desc().get_size())));
  for (int i = 0; i < count; ++i) {
    v.weights.emplace_back(pd.weights_desc(), eng);
    std::memset(v.weights.back().get_data_handle(), 0, pd.weights_desc().get_size());
  }
  v.a = memory(a_md, eng);
  std::memset(v.a.get_data_handle(), 0, a_md.get_size());
  v.c = memory(c_md, eng);
  v.scales = memory(memory::desc({kN}, memory::data_type::f32, memory::format_tag::a), eng);
  std::fill_n(static_cast<float*>(v.scales.get_data_handle()), kN, 1.0f);
  v.runtime_scales = runtime_scales;
  return v;
}

// Times the variants in turn, one pass over each one's weights at a time, so that they see
// the same load on a shared machine; keeps each one's best call.
void time_interleaved(const dnnl::engine& eng, std::vector<M1Variant>& variants) {
  dnnl::stream s(eng);
  for (int rep = 0; rep < 6; ++rep) {
    for (M1Variant& v : variants) {
      for (const dnnl::memory& w : v.weights) {
        std::unordered_map<int, dnnl::memory> args = {
            {DNNL_ARG_SRC, v.a}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, v.c}};
        if (v.runtime_scales) args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES, v.scales);
        const auto start = std::chrono::steady_clock::now();
        v.matmul.execute(s, args);
        s.wait();
        v.best_us = std::min(v.best_us, std::chrono::duration<double, std::micro>(
                                            std::chrono::steady_clock::now() - start)
                                            .count());
      }
    }
  }
}

void report_pitfalls() {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  std::vector<M1Variant> f32;
  f32.push_back(make_m1_variant(eng, dt::f32, tag::any, false));
  f32.push_back(make_m1_variant(eng, dt::f32, tag::ba, false));
  f32.push_back(make_m1_variant(eng, dt::f32, tag::ab, false));
  time_interleaved(eng, f32);
  fmt::print(
      "\npitfall 1, f32 weight layout at M = 1 (4096 x 4096, cold, best call): reordered (any) "
      "{:.0f} us [{}]; plain ba (vLLM's weight.t()) {:.0f} us [{}] = {:.1f}x; plain ab {:.0f} us "
      "[{}] = {:.1f}x\n",
      f32[0].best_us, f32[0].impl, f32[1].best_us, f32[1].impl, f32[1].best_us / f32[0].best_us,
      f32[2].best_us, f32[2].impl, f32[2].best_us / f32[0].best_us);
  std::vector<M1Variant> s8;
  s8.push_back(make_m1_variant(eng, dt::s8, tag::any, false));
  s8.push_back(make_m1_variant(eng, dt::s8, tag::any, true));
  time_interleaved(eng, s8);
  fmt::print(
      "pitfall 2, int8 at M = 1 (cold, best call): s8 x s8 -> s32, no scales (kiln's epilogue "
      "applies them) {:.0f} us [{}]; run-time per-channel output scales {:.0f} us [{}] = "
      "{:.1f}x\n",
      s8[0].best_us, s8[0].impl, s8[1].best_us, s8[1].impl, s8[1].best_us / s8[0].best_us);
}

// The tuning knob chunk_rows at M = 1024: the same call in chunks of 128 … 4096 rows, through
// Kernel::run with an explicit config (what `kiln tune` compares), interleaved call by call.
void report_chunk_sweep(Kind kind) {
  constexpr int64_t m = 1024;
  const DType dt = weight_dtype(kind);
  const bool scaled = kind == Kind::kInt8;
  const OpSpec create =
      scaled ? OpSpec::make(OpKind::kCreateOnednnScaledMm,
                            ir::ScaledGemmParams{DType::kBF16, kK, kN, true, false, true})
             : OpSpec::make(OpKind::kCreateOnednnMm, ir::GemmParams{dt, kK, kN});
  OpSpec mm = create;
  mm.op = scaled ? OpKind::kOnednnScaledMm : OpKind::kOnednnMm;
  CompileOptions options;
  options.backend = BackendKind::kOnednn;
  auto create_kernel = compile(create, options);
  if (!create_kernel.is_ok()) {
    fmt::print("chunk sweep {}: {}\n", kind_name(kind), create_kernel.status().to_string());
    return;
  }
  test::HostTensor b = test::HostTensor::strided(dt, {kK, kN}, {1, kK});
  test::fill_small_int(b, 1);
  test::HostTensor scales = test::HostTensor::zeros(DType::kF32, {1, kN});
  test::fill_uniform(scales, 2, 0.01, 0.02);
  test::HostTensor handler =
      test::HostTensor::zeros(DType::kU8, {codegen::ref::onednn_handler_bytes(create)});
  KernelArgs create_args({handler.tensor(), b.tensor()}, {32.0});
  if (scaled) create_args = KernelArgs({handler.tensor(), b.tensor(), scales.tensor()}, {32.0});
  if (Status st = create_kernel->run(create_args); !st.is_ok()) {
    fmt::print("chunk sweep {}: {}\n", kind_name(kind), st.to_string());
    return;
  }
  test::HostTensor a = test::HostTensor::zeros(scaled ? DType::kI8 : dt, {m, kK});
  test::fill_small_int(a, 3);
  test::HostTensor c = test::HostTensor::zeros(scaled ? DType::kBF16 : dt, {m, kN});
  test::HostTensor a_scales = test::HostTensor::zeros(DType::kF32, {m, 1});
  test::fill_uniform(a_scales, 4, 0.01, 0.02);
  const KernelArgs args = scaled ? KernelArgs({c.tensor(), a.tensor(), a_scales.tensor(), Tensor(),
                                               Tensor(), Tensor(), handler.tensor()})
                                 : KernelArgs({c.tensor(), a.tensor(), Tensor(), handler.tensor()});
  std::vector<Kernel> kernels;
  std::vector<double> best;
  for (int64_t rows : codegen::onednn::kChunkRowChoices) {
    if (rows > m) break;
    options.config = Config().set("chunk_rows", rows);
    auto kernel = compile(mm, options);
    if (!kernel.is_ok()) {
      fmt::print("chunk sweep {}: {}\n", kind_name(kind), kernel.status().to_string());
      return;
    }
    kernels.push_back(kernel.value());
    best.push_back(1e30);
    (void)kernels.back().run(args);  // primitives created
  }
  for (int rep = 0; rep < 4; ++rep) {
    for (size_t i = 0; i < kernels.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      if (Status st = kernels[i].run(args); !st.is_ok()) fmt::print("{}\n", st.to_string());
      best[i] = std::min(best[i], std::chrono::duration<double, std::micro>(
                                      std::chrono::steady_clock::now() - start)
                                      .count());
    }
  }
  fmt::print("chunk_rows sweep, {} M = {} (best call):", kind_name(kind), m);
  for (size_t i = 0; i < kernels.size(); ++i) {
    fmt::print(" {}: {:.0f} us ({:.0f} GFLOP/s);", kernels[i].info().config.to_string(), best[i],
               2.0 * m * kK * kN / best[i] / 1e3);
  }
  fmt::print("\n");
}

// Fixed cost of one call (jit::ops lookup, handler check and fingerprint, primitive lookup,
// oneDNN memory objects and execution) on a 64 x 64 weight at M = 1, where the work is nil.
void report_call_overhead() {
  constexpr int64_t k = 64, n = 64;
  test::HostTensor b = test::HostTensor::strided(DType::kBF16, {k, n}, {1, k});
  test::fill_small_int(b, 1);
  const int64_t id = ops::create_onednn_mm(b.tensor(), 32);
  test::HostTensor a = test::HostTensor::zeros(DType::kBF16, {1, k});
  test::HostTensor c = test::HostTensor::zeros(DType::kBF16, {1, n});
  std::vector<double> times;
  for (int i = 0; i < 2000; ++i) {
    const auto start = std::chrono::steady_clock::now();
    ops::onednn_mm(c.tensor(), a.tensor(), Tensor(), id);
    times.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  fmt::print("call overhead (bf16 64 x 64, M = 1, 2000 calls): best {:.1f} us, median {:.1f} us\n",
             times.front(), times[times.size() / 2]);
  ops::release_onednn_handler(id);
}

void print_summary() {
  fmt::print(
      "\nsummary (4096 x 4096 weight, {} threads; every ratio against the best ceiling measured "
      "in this run, at its start and after each case)\n",
      kThreads);
  for (PeakKind kind : {PeakKind::kFmaF32, PeakKind::kDpBf16, PeakKind::kVnniI8, PeakKind::kAmxBf16,
                        PeakKind::kAmxI8}) {
    fmt::print("  peak {}: {:.0f} G(FL)OP/s\n", peak_name(kind), ceilings().peak[int(kind)]);
  }
  fmt::print(
      "| dtype | M | us/call | GFLOP/s | % of ISA peak | % of AMX peak | weight GB/s | "
      "% of copy |\n|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows()) {
    const double isa = ceilings().peak[int(vector_peak(r.kind))];
    const double amx =
        r.kind == Kind::kF32
            ? 0
            : ceilings().peak[int(r.kind == Kind::kBf16 ? PeakKind::kAmxBf16 : PeakKind::kAmxI8)];
    fmt::print(
        "| {} | {} | {:.0f} | {:.0f} | {} | {} | {:.1f} | {} |\n", kind_name(r.kind), r.m, r.us,
        r.gflops, isa > 0 ? fmt::format("{:.0f}%", 100 * r.gflops / isa) : "-",
        amx > 0 ? fmt::format("{:.0f}%", 100 * r.gflops / amx) : "-", r.weight_gbps,
        r.m <= 16 ? fmt::format("{:.0f}% of {:.1f}", 100 * r.weight_gbps / r.copy_gbps, r.copy_gbps)
                  : "-");
  }
}

// ---- decode rows: kiln's small-M kernel against oneDNN, 1 and 2 threads ----------------------

// Sums `bytes` from `p` as `kStreams` interleaved sequential streams (stream s reads its own
// contiguous 16 KB row of each 16·kStreams KB block), 32-byte AVX2 loads on every host: two
// per cycle are several times what one core reads from memory, so the width does not bound
// this ceiling.
template <int kStreams>
[[gnu::target("avx2")]] float read_streams(const std::byte* p, size_t bytes) {
  constexpr size_t kRow = 16384;
  __m256 acc[kStreams];
  for (int s = 0; s < kStreams; ++s) acc[s] = _mm256_setzero_ps();
  for (size_t b = 0; b + kStreams * kRow <= bytes; b += kStreams * kRow) {
    for (size_t off = 0; off < kRow; off += 32) {
#pragma GCC unroll 8
      for (int s = 0; s < kStreams; ++s) {
        acc[s] = _mm256_add_ps(
            acc[s], _mm256_loadu_ps(reinterpret_cast<const float*>(p + b + s * kRow + off)));
      }
    }
  }
  alignas(32) float lanes[8];
  float sum = 0;
  for (int s = 0; s < kStreams; ++s) {
    _mm256_store_ps(lanes, acc[s]);
    for (float lane : lanes) sum += lane;
  }
  return sum;
}

// The read-only ceiling: GB/s of a plain vector read of 512 MB split over `threads` threads,
// best of a single sequential stream and 8 interleaved streams per thread (several streams
// keep more misses in flight on one core), best of 5 passes each. A GEMV reads its weight and
// writes almost nothing, so this, not the copy (which moves each byte twice, its stores
// streaming), is the rate it can reach.
double measure_read_gbps(int threads) {
  const size_t bytes = size_t(512) << 20;
  std::unique_ptr<std::byte[]> buffer(new std::byte[bytes]);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < bytes; i += 4096) std::memset(buffer.get() + i, 0, 4096);
  double best = 0;
  volatile float sink = 0;
  for (int pass = 0; pass < 10; ++pass) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const size_t t = size_t(omp_get_thread_num()), nt = size_t(omp_get_num_threads());
      const size_t share = bytes / nt;
      const std::byte* part = buffer.get() + t * share;
      const float v = pass % 2 == 0 ? read_streams<1>(part, share) : read_streams<8>(part, share);
      sink = sink + v;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(bytes) / seconds / 1e9);
  }
  return best;
}

// The handlers of one weight type made through the create kernel (tensors, so the same
// handler runs under both mm configs), enough of them to stream every weight from memory.
struct SmallCase {
  OpSpec create, mm;
  std::vector<test::HostTensor> handlers;
};

SmallCase make_small_case(Kind kind) {
  SmallCase sc;
  const DType dt = weight_dtype(kind);
  const bool scaled = kind == Kind::kInt8;
  sc.create = scaled ? OpSpec::make(OpKind::kCreateOnednnScaledMm,
                                    ir::ScaledGemmParams{DType::kBF16, kK, kN, true, false, true})
                     : OpSpec::make(OpKind::kCreateOnednnMm, ir::GemmParams{dt, kK, kN});
  sc.mm = sc.create;
  sc.mm.op = scaled ? OpKind::kOnednnScaledMm : OpKind::kOnednnMm;
  CompileOptions options;
  options.backend = BackendKind::kOnednn;
  auto create = compile(sc.create, options);
  if (!create.is_ok()) {
    fmt::print("{}: {}\n", kind_name(kind), create.status().to_string());
    return sc;
  }
  test::HostTensor b = test::HostTensor::strided(dt, {kK, kN}, {1, kK});
  test::HostTensor scales = test::HostTensor::zeros(DType::kF32, {1, kN});
  test::fill_uniform(scales, 2, 0.01, 0.02);
  const double weight_bytes = double(kK * kN * dtype_size(dt));
  const int count = int(std::ceil(kColdWeightBytes / weight_bytes));
  for (int i = 0; i < count; ++i) {
    test::fill_small_int(b, uint64_t(i) + 1);
    sc.handlers.push_back(
        test::HostTensor::zeros(DType::kU8, {codegen::ref::onednn_handler_bytes(sc.create)}));
    KernelArgs args({sc.handlers.back().tensor(), b.tensor()}, {32.0});
    if (scaled)
      args = KernelArgs({sc.handlers.back().tensor(), b.tensor(), scales.tensor()}, {32.0});
    if (Status st = create->run(args); !st.is_ok()) fmt::print("{}\n", st.to_string());
  }
  return sc;
}

// M = 1, 2, 4, 8, 16 for each weight type on `threads` threads: the default config (kiln's
// kernel up to its bound, then oneDNN) and small_m = 0 (oneDNN only), interleaved pass by pass
// over the cold handlers; best call, GB/s of weights and % of the copy bandwidth measured on
// the same thread count in this run.
void report_small(const jit::Backend& onednn, int threads) {
  omp_set_num_threads(threads);
  // The ceilings at the start and after each M; the rows are compared with the
  // best seen (a shared machine's load drifts during the run).
  double copy = measure_copy_gbps(size_t(512) << 20, threads);
  double read = measure_read_gbps(threads);
  struct SmallRow {
    std::string text;  // the row up to the GB/s column
    double gbps;
    double gflops;
  };
  std::vector<SmallRow> table;
  for (Kind kind : {Kind::kF32, Kind::kBf16, Kind::kInt8}) {
    SmallCase sc = make_small_case(kind);
    if (sc.handlers.empty()) continue;
    const DType dt = weight_dtype(kind);
    const bool scaled = kind == Kind::kInt8;
    const double weight_bytes = double(kK * kN * dtype_size(dt));
    CompileOptions options;
    options.backend = BackendKind::kOnednn;
    auto kiln_kernel = compile(sc.mm, options);  // default config
    options.config =
        Config().set("chunk_rows", codegen::onednn::kDefaultChunkRows).set("small_m", 0);
    auto onednn_kernel = compile(sc.mm, options);
    if (!kiln_kernel.is_ok() || !onednn_kernel.is_ok()) {
      fmt::print("{}: {}\n", kind_name(kind),
                 (kiln_kernel.is_ok() ? onednn_kernel.status() : kiln_kernel.status()).to_string());
      continue;
    }
    const int64_t bound = kiln_kernel->info().config.get("small_m", 0);
    for (int64_t m : {1, 2, 4, 8, 16}) {
      test::HostTensor a = test::HostTensor::zeros(scaled ? DType::kI8 : dt, {m, kK});
      test::fill_small_int(a, 3);
      test::HostTensor c = test::HostTensor::zeros(scaled ? DType::kBF16 : dt, {m, kN});
      test::HostTensor a_scales = test::HostTensor::zeros(DType::kF32, {m, 1});
      test::fill_uniform(a_scales, 4, 0.01, 0.02);
      auto args = [&](test::HostTensor& handler) {
        return scaled ? KernelArgs({c.tensor(), a.tensor(), a_scales.tensor(), Tensor(), Tensor(),
                                    Tensor(), handler.tensor()})
                      : KernelArgs({c.tensor(), a.tensor(), Tensor(), handler.tensor()});
      };
      // The default path only where it differs from oneDNN (M <= bound).
      std::vector<const Kernel*> kernels = {&onednn_kernel.value()};
      if (m <= bound) kernels.insert(kernels.begin(), &kiln_kernel.value());
      std::vector<std::vector<double>> times(kernels.size());
      std::vector<int64_t> small_calls(kernels.size(), 0);
      for (size_t i = 0; i < kernels.size(); ++i) {
        for (auto& h : sc.handlers) (void)kernels[i]->run(args(h));  // primitives, packs
      }
      for (int rep = 0; rep < 6; ++rep) {
        for (size_t i = 0; i < kernels.size(); ++i) {
          const int64_t before = codegen::onednn::stats(onednn).small_m_calls;
          for (auto& h : sc.handlers) {
            const auto start = std::chrono::steady_clock::now();
            if (Status st = kernels[i]->run(args(h)); !st.is_ok())
              fmt::print("{}\n", st.to_string());
            times[i].push_back(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
          }
          small_calls[i] += codegen::onednn::stats(onednn).small_m_calls - before;
        }
      }
      for (size_t i = 0; i < kernels.size(); ++i) {
        std::sort(times[i].begin(), times[i].end());
        const double best = times[i].front(), median = times[i][times[i].size() / 2];
        std::string path;
        if (small_calls[i] > 0) {
          const bool avx512 =
              codegen::onednn::small_m::variant_for(dt, host_target(BackendKind::kOnednn).isa) ==
              codegen::onednn::small_m::Variant::kAvx512;
          path = fmt::format("kiln small-M ({})", kind == Kind::kF32 ? "vfmadd231ps"
                                                  : kind == Kind::kBf16
                                                      ? (avx512 ? "vdpbf16ps" : "bf16 halves, FMA")
                                                      : (avx512 ? "vpdpbusd" : "vpmaddwd"));
        } else {
          auto impl = codegen::onednn::implementation_name(onednn, sc.mm, m);
          path = "oneDNN " + (impl.is_ok() ? impl.value() : impl.status().to_string());
        }
        table.push_back({fmt::format("| {} | {} | {} | {:.0f} | {:.0f}", kind_name(kind), m, path,
                                     best * 1e6, median * 1e6),
                         weight_bytes / best / 1e9, 2.0 * double(m) * kK * kN / best / 1e9});
      }
      // The ceilings again after each M: the load of a shared machine drifts.
      copy = std::max(copy, measure_copy_gbps(size_t(512) << 20, threads));
      read = std::max(read, measure_read_gbps(threads));
    }
  }
  fmt::print(
      "\n{} thread(s): copy bandwidth {:.1f} GB/s (1 GiB moved), read-only bandwidth {:.1f} "
      "GB/s (512 MB read); best of the start and after each M\n| dtype | M | path | best "
      "us/call | median us | weight GB/s | % of copy | % of read | GFLOP/s |\n"
      "|---|---|---|---|---|---|---|---|---|\n",
      threads, copy, read);
  for (const SmallRow& r : table) {
    fmt::print("{} | {:.1f} | {:.0f}% | {:.0f}% | {:.0f} |\n", r.text, r.gbps, 100 * r.gbps / copy,
               read > 0 ? 100 * r.gbps / read : 0.0, r.gflops);
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace jit::bench

int main(int argc, char** argv) {
  using namespace jit::bench;
  if (argc > 1 && std::string(argv[1]) == "--small") {
    // Each thread count in its own process: a oneDNN primitive keeps the thread count it was
    // created with, so primitives cached at 1 thread would run the 2-thread pass on 1 thread.
    const int max_threads = omp_get_max_threads();
    fmt::print("decode rows, 4096 x 4096 weights, >= 256 MB of handlers per dtype (cold)\n");
    std::fflush(stdout);
    for (int threads : {1, max_threads}) {
      const pid_t pid = fork();
      if (pid == 0) {
        omp_set_num_threads(threads);
        const jit::Backend* onednn = nullptr;
        for (const jit::Backend* b : jit::Runtime::global().backends()) {
          if (b->kind() == jit::BackendKind::kOnednn) onednn = b;
        }
        if (onednn == nullptr) {
          fmt::print(stderr, "this kiln has no onednn backend (KILN_ENABLE_ONEDNN=OFF)\n");
          _exit(1);
        }
        report_small(*onednn, threads);
        std::fflush(stdout);
        _exit(0);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
      if (max_threads == 1) break;
    }
    return 0;
  }
  fmt::print(
      "copy bandwidth, {} threads: {:.1f} GB/s at 1 GiB moved, {:.1f} GB/s at 64 MB "
      "moved (best of 7)\n",
      kThreads, ceilings().copy_gbps = measure_copy_gbps(size_t(512) << 20, kThreads),
      measure_copy_gbps(size_t(32) << 20, kThreads));
  for (PeakKind kind : {PeakKind::kFmaF32, PeakKind::kDpBf16, PeakKind::kVnniI8, PeakKind::kAmxBf16,
                        PeakKind::kAmxI8}) {
    const double one = measure_peak_gflops(kind, 1);
    const double two = measure_peak_gflops(kind, kThreads);
    ceilings().peak[int(kind)] = two;
    if (one == 0) {
      fmt::print("peak {}: not available on this CPU\n", peak_name(kind));
    } else {
      fmt::print("peak {}: {:.0f} G(FL)OP/s on 1 thread, {:.0f} on {}\n", peak_name(kind), one, two,
                 kThreads);
    }
  }
  // What oneDNN runs for each case (what ONEDNN_VERBOSE=1 prints as the implementation).
  const jit::Backend* onednn = nullptr;
  for (const jit::Backend* b : jit::Runtime::global().backends()) {
    if (b->kind() == jit::BackendKind::kOnednn) onednn = b;
  }
  if (onednn == nullptr) {
    fmt::print(stderr, "this kiln has no onednn backend (KILN_ENABLE_ONEDNN=OFF)\n");
    return 1;
  }
  for (Kind kind : {Kind::kF32, Kind::kBf16, Kind::kInt8}) {
    const jit::OpSpec spec =
        kind == Kind::kInt8 ? jit::OpSpec::make(jit::OpKind::kOnednnScaledMm,
                                                jit::ir::ScaledGemmParams{jit::DType::kBF16, kK, kN,
                                                                          true, false, true})
                            : jit::OpSpec::make(jit::OpKind::kOnednnMm,
                                                jit::ir::GemmParams{weight_dtype(kind), kK, kN});
    // The default config's small-M bound: calls with at most that many rows run kiln's kernel.
    jit::CompileOptions options;
    options.backend = jit::BackendKind::kOnednn;
    auto kernel = jit::compile(spec, options);
    const int64_t bound = kernel.is_ok() ? kernel->info().config.get("small_m", 0) : 0;
    for (int64_t m : {1, 16, 128, 1024}) {
      auto impl = jit::codegen::onednn::implementation_name(*onednn, spec, m);
      fmt::print("path {} M={}: {}\n", kind_name(kind), m,
                 m <= bound
                     ? std::string("kiln small-M kernel (codegen/onednn/small_m.cc)")
                     : "oneDNN " + (impl.is_ok() ? impl.value() : impl.status().to_string()));
    }
  }
  report_call_overhead();
  for (Kind kind : {Kind::kF32, Kind::kBf16, Kind::kInt8}) {
    for (int64_t m : {1, 16, 128, 1024}) run_case(kind, m);
  }
  print_summary();
  report_pitfalls();
  for (Kind kind : {Kind::kF32, Kind::kBf16, Kind::kInt8}) report_chunk_sweep(kind);
  return 0;
}
