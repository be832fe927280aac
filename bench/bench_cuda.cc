// GPU timings of the CUDA backend's kernels, next to the device's copy bandwidth measured in the
// same run (needs a GPU: without one it prints why and exits 0).
//   copy          cuMemcpyDtoD of 1 GiB: the ceiling, GB/s counting bytes read and written
//   paged_v1/v2   decode: bf16 query and KV (or fp8 e4m3 KV codes), head 128 (--head-size),
//                 block 16, 32 query heads over 4 KV heads (GQA 8), batch 1-32 x context
//                 512-8192, v2 with vLLM's 512-token partitions: GB/s of KV read, its % of
//                 the copy, µs per call
//   memory-bound  rms_norm, fused_add_rms_norm, silu_and_mul, rotary_embedding and
//                 reshape_and_cache_flash at 16384 tokens: GB/s moved and % of the copy
// Timing: `reps` launches queued back to back on the default stream, then one synchronize; the
// best of 5 such batches per row. The launches run ahead of the GPU, so a kernel longer than the
// launch rate (a few µs) is timed by the GPU; a shorter one shows the launch rate, which is what
// a caller without CUDA graphs gets.
//
//   build/release/bench/bench_cuda [--quick | --sweep] [--head-size N] [--row NAME]
//     --quick     batch 8 and context 2048 only, memory-bound rows at 4096 tokens
//     --sweep     paged attention only, every point of the tuning space (cuda_configs: threads
//                 128-1024 x each heads_per_cta allowed there) at batch 1 / 8 / 32 x context
//                 2048 / 8192
//     --head-size N  paged attention at head size N (default 128; a multiple of 8)
//     --row NAME  only the row of that name (e.g. for `ncu` on one kernel)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "codegen/cuda/driver.h"
#include "codegen/cuda/paged_attention.h"
#include "codegen/cuda/render.h"
#include "runtime/runtime.h"
#include "tests/cuda/device_case.h"
#include "tests/harness/op_cases.h"

namespace {

using namespace jit;
namespace cu = codegen::cuda;
using test::cuda::DeviceBuffer;
using test::cuda::DeviceCase;
using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what, const Status& status) {
  fmt::print(stderr, "bench_cuda: {}: {}\n", what, status.to_string());
  std::exit(1);
}

void check(const std::string& what, const Status& status) {
  if (!status.is_ok()) die(what, status);
}

// Seconds per call of `launch`: `reps` calls then a synchronize, best of 5 batches; `reps` is
// sized from a first batch so that a batch takes ~20 ms.
double seconds_per_call(const cu::Driver& driver, const std::function<Status()>& launch) {
  for (int i = 0; i < 3; ++i) check("warm-up launch", launch());
  check("synchronize", driver.synchronize());
  auto batch = [&](int reps) {
    const auto start = Clock::now();
    for (int i = 0; i < reps; ++i) check("launch", launch());
    check("synchronize", driver.synchronize());
    return std::chrono::duration<double>(Clock::now() - start).count() / reps;
  };
  const double first = batch(10);
  const int reps = std::clamp(int(0.02 / first), 10, 20000);
  double best = first;
  for (int i = 0; i < 5; ++i) best = std::min(best, batch(reps));
  return best;
}

Kernel compile_cuda(Runtime& runtime, const OpSpec& spec, std::optional<Config> config = {}) {
  CompileOptions options;
  options.backend = BackendKind::kCuda;
  options.config = std::move(config);
  Result<Kernel> kernel = runtime.compile(spec, options);
  if (!kernel.is_ok()) die(to_string(spec), kernel.status());
  return std::move(kernel).value();
}

// Device-to-device copy of 1 GiB: GB/s counting bytes read and written.
double device_copy_gbps(const cu::Driver& driver) {
  constexpr size_t kBytes = size_t(1) << 30;
  DeviceBuffer src(&driver, nullptr, kBytes), dst(&driver, nullptr, kBytes);
  check("copy buffers", src.status());
  check("copy buffers", dst.status());
  const double s = seconds_per_call(
      driver, [&] { return driver.copy_on_device(dst.data(), src.data(), kBytes); });
  return 2.0 * double(kBytes) / s / 1e9;
}

// The paged attention decode rows over one set of device caches sized for the largest row
// (each row's block table draws its blocks from a permutation of all of them).
void paged_rows(Runtime& runtime, const cu::Driver& driver, double copy, bool quick, bool sweep,
                int64_t head_size, const std::string& only) {
  constexpr int64_t kBlock = 16, kHeadsQ = 32, kHeadsKv = 4, kPartition = 512;
  const std::vector<int64_t> batches =
      quick ? std::vector<int64_t>{8} : std::vector<int64_t>{1, 8, 32};
  const std::vector<int64_t> contexts = quick   ? std::vector<int64_t>{2048}
                                        : sweep ? std::vector<int64_t>{2048, 8192}
                                                : std::vector<int64_t>{512, 2048, 8192};
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  const int64_t max_context = *std::max_element(contexts.begin(), contexts.end());
  const int64_t max_blocks = max_batch * ((max_context + kBlock - 1) / kBlock);
  const int64_t cache_elems = max_blocks * kHeadsKv * kBlock * head_size;
  // bf16 caches: values in [-1, 1]; fp8 codes: |x| < 2 and never the NaN code.
  const auto host_kv = bench::random_bf16(size_t(cache_elems));
  std::vector<uint8_t> host_codes(static_cast<size_t>(cache_elems));
  std::mt19937 rng(7);
  for (auto& c : host_codes) c = uint8_t(rng() & 0xb7);
  DeviceBuffer key(&driver, host_kv), value(&driver, host_kv);
  DeviceBuffer key_codes(&driver, host_codes), value_codes(&driver, host_codes);
  const float scales[2] = {0.02f, 0.03f};
  DeviceBuffer k_scale(&driver, &scales[0], 4), v_scale(&driver, &scales[1], 4);
  for (const DeviceBuffer* b : {&key, &value, &key_codes, &value_codes, &k_scale, &v_scale}) {
    check("paged attention buffers", b->status());
  }
  std::vector<int32_t> permutation(static_cast<size_t>(max_blocks));
  std::iota(permutation.begin(), permutation.end(), 0);
  std::shuffle(permutation.begin(), permutation.end(), std::mt19937_64(5));

  fmt::print("\n{:<44} {:>10} {:>9} {:>10}\n",
             fmt::format("paged attention decode (GQA 8, head {})", head_size), "GB/s KV", "% copy",
             "us/call");
  for (const bool fp8 : {false, true}) {
    for (const bool v2 : {false, true}) {
      const auto kv = fp8 ? ir::KvCacheDtype::kFp8E4m3 : ir::KvCacheDtype::kAuto;
      const OpSpec spec =
          OpSpec::make(v2 ? OpKind::kPagedAttentionV2 : OpKind::kPagedAttentionV1,
                       ir::PagedAttentionParams{DType::kBF16, kv, head_size, kBlock, kHeadsQ,
                                                kHeadsKv, false, false, v2 ? kPartition : 0});
      const int64_t x = ir::paged_key_x(DType::kBF16, kv);
      // The default (v1: 512 threads, 4 heads per CTA; v2: 256, 4) on every shape; other points
      // of the tuning space at one shape each: the other thread counts at batch 8, the other
      // heads per CTA at batch 1. The sweep times every threads x heads_per_cta point at batch
      // 1-32 x context 2048 / 8192.
      struct Shape {
        int64_t batch, context;
        std::optional<Config> config;  // unset: the default config
      };
      const auto& params = spec.get<ir::PagedAttentionParams>();
      const int64_t default_threads = cu::paged_attention_default_threads(params);
      const int64_t default_heads = cu::paged_attention_heads_per_cta(params, default_threads);
      std::vector<Shape> shapes;
      for (const int64_t batch : batches) {
        for (const int64_t context : contexts) {
          if (sweep) {  // the backend's tuning space: every allowed threads x heads_per_cta
            for (const Config& config : cu::cuda_configs(spec)) {
              shapes.push_back({batch, context, config});
            }
            continue;
          }
          if (fp8 && (batch == 1 || context == 512)) continue;  // fp8: the larger rows only
          shapes.push_back({batch, context, std::nullopt});
          if (batch == 8 && context == 2048) {
            for (int64_t threads : {128, 256, 512, 1024}) {
              if (threads != default_threads)
                shapes.push_back({batch, context, Config().set("threads", threads)});
            }
          }
          if (batch == 1 && context == 2048) {
            for (int64_t heads : cu::paged_attention_heads_choices(params, default_threads)) {
              if (heads != default_heads)
                shapes.push_back({batch, context, Config().set("heads_per_cta", heads)});
            }
          }
        }
      }
      for (const auto& [batch, context, config] : shapes) {
        std::string knobs;
        if (config) {
          for (const auto& [knob, setting] : config->knobs) {
            knobs += fmt::format("/{}:{}", knob, setting);
          }
        }
        const std::string name = fmt::format("paged_{}{}/batch:{}/context:{}{}", v2 ? "v2" : "v1",
                                             fp8 ? "_fp8_e4m3" : "", batch, context, knobs);
        if (!only.empty() && name != only) continue;
        const Kernel kernel = compile_cuda(runtime, spec, config);
        const int64_t width = (context + kBlock - 1) / kBlock;
        const int64_t parts = (context + kPartition - 1) / kPartition;
        std::vector<int32_t> table(permutation.begin(), permutation.begin() + batch * width);
        const std::vector<int32_t> seq_lens(static_cast<size_t>(batch), int32_t(context));
        DeviceBuffer query(&driver, bench::random_bf16(size_t(batch * kHeadsQ * head_size)));
        DeviceBuffer out(&driver, nullptr, size_t(batch * kHeadsQ * head_size * 2));
        DeviceBuffer sums(&driver, nullptr, size_t(batch * kHeadsQ * parts * 4));
        DeviceBuffer maxes(&driver, nullptr, size_t(batch * kHeadsQ * parts * 4));
        DeviceBuffer tmp(&driver, nullptr, size_t(batch * kHeadsQ * parts * head_size * 2));
        DeviceBuffer tables(&driver, table), lens(&driver, seq_lens);
        for (const DeviceBuffer* b : {&query, &out, &sums, &maxes, &tmp, &tables, &lens}) {
          check("paged attention buffers", b->status());
        }
        const Device gpu = Device::cuda(0);
        auto view = [&](const DeviceBuffer& b, DType dt, std::initializer_list<int64_t> sizes) {
          return Tensor(b.data(), dt, sizes, gpu);
        };
        KernelArgs args;
        args.add(view(out, DType::kBF16, {batch, kHeadsQ, head_size}));
        if (v2) {
          args.add(view(sums, DType::kF32, {batch, kHeadsQ, parts}));
          args.add(view(maxes, DType::kF32, {batch, kHeadsQ, parts}));
          args.add(view(tmp, DType::kBF16, {batch, kHeadsQ, parts, head_size}));
        }
        const int64_t blocks = max_blocks;
        args.add(view(query, DType::kBF16, {batch, kHeadsQ, head_size}));
        args.add(fp8 ? view(key_codes, DType::kU8, {blocks, kHeadsKv, head_size / x, kBlock, x})
                     : view(key, DType::kBF16, {blocks, kHeadsKv, head_size / x, kBlock, x}));
        args.add(fp8 ? view(value_codes, DType::kU8, {blocks, kHeadsKv, head_size, kBlock})
                     : view(value, DType::kBF16, {blocks, kHeadsKv, head_size, kBlock}));
        args.add(view(tables, DType::kI32, {batch, width}));
        args.add(view(lens, DType::kI32, {batch}));
        args.add(Tensor{});  // no ALiBi slopes
        args.add(view(k_scale, DType::kF32, {1}));
        args.add(view(v_scale, DType::kF32, {1}));
        // scale, max_seq_len, then the block-sparse scalars (unused: not block-sparse).
        for (double s :
             {1.0 / std::sqrt(double(head_size)), double(context), 0.0, 16.0, 8.0, 64.0, 0.0}) {
          args.add_scalar(s);
        }
        const double s = seconds_per_call(driver, [&] { return kernel.run(args); });
        const double bytes = 2.0 * double(batch * context * kHeadsKv * head_size) * (fp8 ? 1 : 2);
        fmt::print("{:<44} {:>10.0f} {:>8.1f}% {:>10.1f}\n", name, bytes / s / 1e9,
                   100.0 * bytes / s / 1e9 / copy, s * 1e6);
      }
    }
  }
}

// Memory-bound rows from the test harness's cases (random inputs) at `tokens` rows; `bytes`
// counts what the op must read and write.
void memory_rows(Runtime& runtime, const cu::Driver& driver, double copy, int64_t tokens,
                 const std::string& only) {
  struct Row {
    std::string name;
    OpSpec spec;
    std::function<double(const test::OpCase&)> bytes;
  };
  constexpr int64_t kHidden = 4096, kD = 8192, kHeadSize = 128, kHeadsQ = 32, kHeadsKv = 8;
  const double t = double(tokens);
  ir::RopeParams rope;
  rope.dtype = rope.cache_dtype = DType::kBF16, rope.head_size = kHeadSize;
  rope.rot_dim = kHeadSize, rope.style = ir::RopeStyle::kNeox;
  rope.head_count_q = kHeadsQ, rope.head_count_kv = kHeadsKv, rope.key = true;
  // Written slots of a cache case (the harness pads about one token in eight with slot -1).
  auto written = [](const test::OpCase& c) {
    const std::vector<double> slots = c.tensors[4].values();
    return double(std::count_if(slots.begin(), slots.end(), [](double v) { return v >= 0; }));
  };
  auto flash = [](ir::KvCacheDtype kv) {
    ir::FlashCacheWriteParams p;
    p.dtype = DType::kBF16, p.kv = kv, p.head_count_kv = kHeadsKv, p.head_size = kHeadSize;
    p.block_size = 16, p.layout = ir::CacheLayout::kNhd;
    return OpSpec::make(OpKind::kReshapeAndCacheFlash, p);
  };
  const std::vector<Row> rows = {
      {"rms_norm bf16 [T, 4096]",
       OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kBF16, kHidden, true}),
       [&](const test::OpCase&) { return 2.0 * t * kHidden * 2; }},
      {"fused_add_rms_norm bf16 [T, 4096]",
       OpSpec::make(OpKind::kFusedAddRmsNorm, ir::NormParams{DType::kBF16, kHidden, true}),
       [&](const test::OpCase&) { return 4.0 * t * kHidden * 2; }},
      {"silu_and_mul bf16 [T, 2 x 8192]",
       OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kBF16, kD}),
       [&](const test::OpCase&) { return 3.0 * t * kD * 2; }},
      {"rotary_embedding neox bf16 32+8 heads x 128", OpSpec::make(OpKind::kRotaryEmbedding, rope),
       [&](const test::OpCase&) { return 2.0 * t * (kHeadsQ + kHeadsKv) * kHeadSize * 2; }},
      {"reshape_and_cache_flash bf16 8 x 128", flash(ir::KvCacheDtype::kAuto),
       [&](const test::OpCase& c) { return written(c) * kHeadsKv * kHeadSize * (4.0 + 4.0); }},
      {"reshape_and_cache_flash fp8 e4m3 8 x 128", flash(ir::KvCacheDtype::kFp8E4m3),
       [&](const test::OpCase& c) { return written(c) * kHeadsKv * kHeadSize * (4.0 + 2.0); }},
  };
  fmt::print("\n{:<44} {:>10} {:>9} {:>10}\n", fmt::format("memory-bound, T = {}", tokens), "GB/s",
             "% copy", "us/call");
  for (const Row& row : rows) {
    if (!only.empty() && row.name != only) continue;
    const Kernel kernel = compile_cuda(runtime, row.spec);
    Result<test::OpCase> c = test::make_case(row.spec, tokens, test::InputKind::kNormal, 3);
    if (!c.is_ok()) die(row.name, c.status());
    const DeviceCase dev(&driver, row.spec, c.value());
    check(row.name, dev.status);
    const double s = seconds_per_call(driver, [&] { return kernel.run(dev.args); });
    const double bytes = row.bytes(c.value());
    fmt::print("{:<44} {:>10.0f} {:>8.1f}% {:>10.1f}\n", row.name, bytes / s / 1e9,
               100.0 * bytes / s / 1e9 / copy, s * 1e6);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, sweep = false;
  int64_t head_size = 128;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
    } else if (std::strcmp(argv[i], "--head-size") == 0 && i + 1 < argc) {
      head_size = std::atoll(argv[++i]);
      if (head_size < 8 || head_size % 8 != 0) {
        fmt::print(stderr, "bench_cuda: --head-size {}: allowed: a multiple of 8, >= 8\n", argv[i]);
        return 2;
      }
    } else if (std::strcmp(argv[i], "--row") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      fmt::print(stderr,
                 "bench_cuda: unknown argument '{}'; allowed: --quick, --sweep, --head-size N, "
                 "--row NAME\n",
                 argv[i]);
      return 2;
    }
  }
  Result<const cu::Driver*> driver = cu::Driver::get();
  if (!driver.is_ok()) {
    fmt::print("bench_cuda: no GPU, nothing timed: {}\n", driver.status().message());
    return 0;
  }
  Runtime runtime{RuntimeOptions{}};
  const double copy = device_copy_gbps(*driver.value());
  fmt::print("device-to-device copy (1 GiB, read + write): {:.0f} GB/s\n", copy);
  paged_rows(runtime, *driver.value(), copy, quick, sweep, head_size, only);
  if (!sweep) memory_rows(runtime, *driver.value(), copy, quick ? 4096 : 16384, only);
  return 0;
}
