// GB/s of kiln's x86 cache writes, copies and gathers (reshape_and_cache_flash NHD/HND,
// reshape_and_cache, swap_blocks, convert_fp8, cp_gather_cache and
// gather_and_maybe_dequant_cache on MLA entries of 576; bf16 input, auto and fp8_e4m3 caches)
// against the copy bandwidth measured in the same run and against the same op as a plain -O3
// -march=native loop (the peer), with 1 and 2 threads, at a large shape (>= 64 MB moved per call)
// and at decode shapes (1 and 16 tokens; us_per_call is the figure that matters there). The kiln
// calls include the checked mode's slot / block-id / block-table scan.
//
//   build/release/bench/bench_cache [--benchmark_filter=...] [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/plain_loops.h"
#include "ir/numeric.h"
#include "ir/params_attention.h"
#include "ir/params_cache.h"
#include "ir/params_norm_act.h"
#include "runtime/runtime.h"

namespace {

using namespace jit;

constexpr int64_t kHeads = 8, kHeadSize = 128, kBlockSize = 16;

// 64-byte aligned storage for the caches, as a framework's allocator gives (PyTorch aligns
// to at least 64): malloc's 16-byte alignment would make every row straddle cache lines and
// keep the kernels off their streaming stores.
using CacheBytes = bench::Aligned64Vector<uint8_t>;

// tokens = 0: the large shape.
// `prefill`: cache_slots' prefill slot mapping instead of random slots. fp8 scales 0.02 for K (a
// short reciprocal, 50: the exact-products steps) and 0.03 for V (1/0.03 is full width: the window
// steps), or `fp8_scale` for both where it is not 0 (1.0, vLLM's default: the power-of-two steps; a
// calibrated amax / 448: the window steps).
// `huge_pages`: the caches on transparent huge pages (bench::HugePageAllocator) instead of 4 KiB
// pages, to show what the page walks of random slots cost.
void bm_cache_write(benchmark::State& state, bool flash, ir::CacheLayout layout,
                    ir::KvCacheDtype kv, int64_t tokens, int threads, bool peer, bool prefill,
                    float fp8_scale, bool huge_pages) {
  const OpSpec spec =
      flash ? OpSpec::make(OpKind::kReshapeAndCacheFlash,
                           ir::FlashCacheWriteParams{DType::kBF16, kv, kHeads, kHeadSize,
                                                     kBlockSize, layout, false})
            : OpSpec::make(
                  OpKind::kReshapeAndCache,
                  ir::PagedCacheWriteParams{DType::kBF16, kv, kHeads, kHeadSize, kBlockSize});
  if (tokens == 0) tokens = bench::tokens_for(spec);
  const bool fp8 = kv != ir::KvCacheDtype::kAuto;
  const int64_t num_blocks = 2 * (tokens + kBlockSize - 1) / kBlockSize + 2;
  const int64_t row = kHeads * kHeadSize;
  const size_t cache_bytes = size_t(num_blocks * kBlockSize * row) * (fp8 ? 1 : 2);
  auto key = bench::random_bf16(size_t(tokens * row));
  auto value = bench::random_bf16(size_t(tokens * row));
  const bench::HugePageAllocator<uint8_t> pages(huge_pages);
  auto key_cache = bench::HugeVector<uint8_t>(cache_bytes, pages);
  auto value_cache = bench::HugeVector<uint8_t>(cache_bytes, pages);
  auto slots = bench::cache_slots(tokens, num_blocks, kBlockSize, prefill);
  float k_scale = fp8_scale != 0 ? fp8_scale : 0.02f, v_scale = fp8_scale != 0 ? fp8_scale : 0.03f;
  const DType cdt = fp8 ? DType::kU8 : DType::kBF16;
  auto cache_tensor = [&](void* data, bool is_key) {
    if (!flash) {
      const int64_t x = fp8 ? 16 : 8;
      return is_key ? Tensor(data, cdt, {num_blocks, kHeads, kHeadSize / x, kBlockSize, x})
                    : Tensor(data, cdt, {num_blocks, kHeads, kHeadSize, kBlockSize});
    }
    // HND is passed as the logical [NB, BS, H, D] view of the physical [NB, H, BS, D].
    return layout == ir::CacheLayout::kNhd
               ? Tensor(data, cdt, {num_blocks, kBlockSize, kHeads, kHeadSize})
               : Tensor(data, cdt, {num_blocks, kBlockSize, kHeads, kHeadSize},
                        {kHeads * kBlockSize * kHeadSize, kHeadSize, kBlockSize * kHeadSize, 1});
  };
  const Kernel kernel = bench::compile_x86_or_die(spec, Config().set("threads", threads));
  const KernelArgs args(
      {Tensor(key.data(), DType::kBF16, {tokens, kHeads, kHeadSize}),
       Tensor(value.data(), DType::kBF16, {tokens, kHeads, kHeadSize}),
       cache_tensor(key_cache.data(), true), cache_tensor(value_cache.data(), false),
       Tensor(slots.data(), DType::kI64, {tokens}), Tensor(&k_scale, DType::kF32, {1}),
       Tensor(&v_scale, DType::kF32, {1})},
      {});
  if (!peer) {
    const Status status = kernel.run(args);  // once through the argument checks
    if (!status.is_ok()) {
      fmt::print(stderr, "{}\n", status.to_string());
      std::exit(1);
    }
  }
  bench::run_and_report(state, spec, tokens, threads, [&] {
    if (!peer) {
      (void)kernel.run_unchecked(args);
    } else if (flash) {
      bench::plain_reshape_and_cache_flash_bf16(
          key_cache.data(), value_cache.data(), key.data(), value.data(), slots.data(), tokens,
          kHeads, kHeadSize, kBlockSize, layout == ir::CacheLayout::kHnd, fp8, k_scale, v_scale,
          threads);
    } else {
      bench::plain_reshape_and_cache_bf16(key_cache.data(), value_cache.data(), key.data(),
                                          value.data(), slots.data(), tokens, kHeads, kHeadSize,
                                          kBlockSize, fp8, k_scale, v_scale, threads);
    }
  });
}

// Blocks of one layer's K+V for 16 tokens of 8 x 128 bf16 (64 KiB); pairs = 0: large shape.
// `rep_movsb`: -1 the default copy for this host, else the knob's value (both measured in
// the same run: the default differs by host, host_core_traits().prefers_rep_movsb).
void bm_swap_blocks(benchmark::State& state, int64_t pairs, int threads, bool peer, int rep_movsb) {
  const int64_t block_bytes = 2 * kBlockSize * kHeads * kHeadSize * 2;
  const OpSpec spec = OpSpec::make(OpKind::kSwapBlocks, ir::SwapBlocksParams{block_bytes});
  if (pairs == 0) pairs = bench::tokens_for(spec);
  const int64_t blocks = 2 * pairs;
  auto src = bench::Aligned64Vector<uint8_t>(size_t(blocks * block_bytes), 1);
  auto dst = bench::Aligned64Vector<uint8_t>(src.size(), 0);
  auto ids = std::vector<int64_t>(size_t(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(3));
  auto mapping = std::vector<int64_t>(size_t(2 * pairs));
  for (int64_t i = 0; i < pairs; ++i) {
    mapping[size_t(2 * i)] = ids[size_t(i)];
    mapping[size_t(2 * i + 1)] = ids[size_t(pairs + i)];
  }
  Config config = Config().set("threads", threads);
  if (rep_movsb >= 0) config.set("rep_movsb", rep_movsb);
  const Kernel kernel = bench::compile_x86_or_die(spec, config);
  const KernelArgs args({Tensor(src.data(), DType::kU8, {blocks, block_bytes}),
                         Tensor(dst.data(), DType::kU8, {blocks, block_bytes}),
                         Tensor(mapping.data(), DType::kI64, {pairs, 2})},
                        {});
  bench::run_and_report(state, spec, pairs, threads, [&] {
    if (peer) {
      bench::plain_swap_blocks(dst.data(), src.data(), mapping.data(), pairs, block_bytes, threads);
    } else {
      (void)kernel.run_unchecked(args);
    }
  });
}

// bf16 -> e4m3; elements = 0: large shape. `scale` 0.02 takes the x * (1/scale) path; a
// scale of 0 (reciprocal inf: the NaN marker) forces the division on every vector, the
// pre-reciprocal code path, for the comparison in the same run (the codes differ only in what
// the values saturate to).
void bm_convert_fp8_data(benchmark::State& state, int64_t elements, int threads, bool peer,
                         double scale, DType dtype, bool relu) {
  const OpSpec spec =
      OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{DType::kFp8E4m3, dtype});
  if (elements == 0) elements = bench::tokens_for(spec);
  auto src = bench::random_bf16(size_t(elements));
  if (relu) {  // max(x, 0): about half the values zero, as a ReLU's output
    for (auto& v : src) v = (v & 0x8000) ? uint16_t(0) : v;
  }
  if (dtype == DType::kF16) {  // the same values as f16
    for (auto& v : src) v = numeric::f32_to_f16(numeric::bf16_to_f32(v));
  }
  auto dst = bench::Aligned64Vector<uint8_t>(size_t(elements));
  const Kernel kernel = bench::compile_x86_or_die(spec, Config().set("threads", threads));
  const KernelArgs args(
      {Tensor(dst.data(), DType::kU8, {elements}), Tensor(src.data(), dtype, {elements})}, {scale});
  bench::run_and_report(state, spec, elements, threads, [&] {
    if (peer) {
      bench::plain_convert_fp8_bf16(dst.data(), src.data(), elements, 0.02f, threads);
    } else {
      (void)kernel.run_unchecked(args);
    }
  });
}

void bm_convert_fp8(benchmark::State& state, int64_t elements, int threads, bool peer, double scale,
                    DType dtype) {
  bm_convert_fp8_data(state, elements, threads, peer, scale, dtype, false);
}

// e4m3 -> bf16 (scale 0.02): through the per-call table of the 128 non-negative codes'
// outputs (CacheGenerator::build_dequant_table); elements = 0: large shape.
void bm_convert_fp8_dequant(benchmark::State& state, int64_t elements, int threads, bool peer,
                            double scale) {
  const OpSpec spec =
      OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{DType::kBF16, DType::kFp8E4m3});
  if (elements == 0) elements = bench::tokens_for(spec);
  bench::Aligned64Vector<uint8_t> src(static_cast<size_t>(elements));
  std::mt19937 rng(3);
  for (auto& code : src) code = uint8_t(rng() & 0xFF);
  bench::Aligned64Vector<uint16_t> dst(static_cast<size_t>(elements));
  const Kernel kernel = bench::compile_x86_or_die(spec, Config().set("threads", threads));
  const KernelArgs args(
      {Tensor(dst.data(), DType::kBF16, {elements}), Tensor(src.data(), DType::kU8, {elements})},
      {scale});
  bench::run_and_report(state, spec, elements, threads, [&] {
    if (peer) {
      bench::plain_convert_e4m3_to_bf16(dst.data(), src.data(), elements, float(scale), threads);
    } else {
      (void)kernel.run_unchecked(args);
    }
  });
}

// The gathers' MLA shape: entries of 576 (512 latent + 64 rope), 64 tokens per block.
constexpr int64_t kMlaEntry = 576, kMlaBlockSize = 64, kGatherRequests = 8;

// A paged context of `rows` positions split over `requests` equal requests (the last takes
// the remainder), each request's blocks a shuffled permutation of the cache's blocks.
struct GatherContext {
  int64_t rows = 0, requests = 0, columns = 0, num_blocks = 0;
  std::vector<int32_t> table, cu, token_to_seq;

  GatherContext(int64_t rows_, int64_t requests_) : rows(rows_), requests(requests_) {
    const int64_t per = rows / requests;
    cu.push_back(0);
    for (int64_t r = 0; r < requests; ++r) {
      cu.push_back(int32_t(r + 1 == requests ? rows : (r + 1) * per));
    }
    columns = (rows + kMlaBlockSize - 1) / kMlaBlockSize;
    num_blocks = columns;
    auto blocks = std::vector<int32_t>(size_t(num_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937_64(5));
    table.assign(size_t(requests * columns), 0);
    for (int64_t r = 0; r < requests; ++r) {
      for (int64_t c = 0; c < columns; ++c) {
        table[size_t(r * columns + c)] = blocks[size_t((c + r * 7) % num_blocks)];
      }
    }
    for (int64_t r = 0; r < requests; ++r) {
      for (int64_t t = cu[size_t(r)]; t < cu[size_t(r + 1)]; ++t)
        token_to_seq.push_back(int32_t(r));
    }
  }
};

// Exits with the reason if the checked call fails (the timed loop then skips the checks' Status).
void run_once_or_die(const Kernel& kernel, const KernelArgs& args) {
  const Status status = kernel.run(args);
  if (!status.is_ok()) {
    fmt::print(stderr, "{}\n", status.to_string());
    std::exit(1);
  }
}

// cp_gather_cache of bf16 MLA entries; rows = 0: the large shape. kiln's calls include the
// checked mode's block-table scan (kernel.run, not run_unchecked's shape checks alone).
void bm_cp_gather(benchmark::State& state, int64_t rows, int threads, bool peer) {
  const OpSpec spec = OpSpec::make(OpKind::kCpGatherCache,
                                   ir::CpGatherCacheParams{DType::kBF16, kMlaEntry, kMlaBlockSize});
  if (rows == 0) rows = bench::tokens_for(spec);
  const GatherContext ctx(rows, rows >= kGatherRequests * 64 ? kGatherRequests : 1);
  auto cache = bench::random_bf16(size_t(ctx.num_blocks * kMlaBlockSize * kMlaEntry));
  auto dst = bench::Aligned64Vector<uint16_t>(size_t(rows * kMlaEntry));
  const Kernel kernel = bench::compile_x86_or_die(spec, Config().set("threads", threads));
  const KernelArgs args(
      {Tensor(cache.data(), DType::kBF16, {ctx.num_blocks, kMlaBlockSize, kMlaEntry}),
       Tensor(dst.data(), DType::kBF16, {rows, kMlaEntry}),
       Tensor(const_cast<int32_t*>(ctx.table.data()), DType::kI32, {ctx.requests, ctx.columns}),
       Tensor(const_cast<int32_t*>(ctx.cu.data()), DType::kI32, {ctx.requests + 1}), Tensor{}},
      {double(ctx.requests)});
  if (!peer) run_once_or_die(kernel, args);
  bench::run_and_report(state, spec, rows, threads, [&] {
    if (peer) {
      bench::plain_cp_gather_bf16(dst.data(), cache.data(), ctx.table.data(), ctx.columns,
                                  ctx.cu.data(), ctx.requests, kMlaEntry, kMlaBlockSize, threads);
    } else {
      (void)kernel.run_unchecked(args);
    }
  });
}

// gather_and_maybe_dequant_cache into bf16 rows from an auto (bf16) or fp8_e4m3 cache; the
// peer exists for the fp8 case (the auto case is cp_gather_cache's copy).
void bm_gather_dequant(benchmark::State& state, ir::KvCacheDtype kv, int64_t rows, int threads,
                       bool peer) {
  const OpSpec spec =
      OpSpec::make(OpKind::kGatherAndMaybeDequantCache,
                   ir::GatherCacheParams{DType::kBF16, kv, kMlaEntry, kMlaBlockSize});
  if (rows == 0) rows = bench::tokens_for(spec);
  const bool fp8 = kv != ir::KvCacheDtype::kAuto;
  const GatherContext ctx(rows, rows >= kGatherRequests * 64 ? kGatherRequests : 1);
  const size_t entries = size_t(ctx.num_blocks * kMlaBlockSize * kMlaEntry);
  auto cache_bf16 = bench::random_bf16(fp8 ? 0 : entries);
  auto cache_fp8 = bench::Aligned64Vector<uint8_t>(fp8 ? entries : 0);
  for (size_t i = 0; i < cache_fp8.size(); ++i) cache_fp8[i] = uint8_t((i * 37) % 0x7F);
  void* cache = fp8 ? static_cast<void*>(cache_fp8.data()) : cache_bf16.data();
  auto dst = bench::Aligned64Vector<uint16_t>(size_t(rows * kMlaEntry));
  float scale = 0.1f;
  const Kernel kernel = bench::compile_x86_or_die(spec, Config().set("threads", threads));
  const KernelArgs args(
      {Tensor(cache, fp8 ? DType::kU8 : DType::kBF16, {ctx.num_blocks, kMlaBlockSize, kMlaEntry}),
       Tensor(dst.data(), DType::kBF16, {rows, kMlaEntry}),
       Tensor(const_cast<int32_t*>(ctx.table.data()), DType::kI32, {ctx.requests, ctx.columns}),
       Tensor(const_cast<int32_t*>(ctx.cu.data()), DType::kI32, {ctx.requests + 1}),
       Tensor(const_cast<int32_t*>(ctx.token_to_seq.data()), DType::kI32, {rows}),
       Tensor(&scale, DType::kF32, {1}), Tensor{}},
      {double(rows)});
  if (!peer) run_once_or_die(kernel, args);
  bench::run_and_report(state, spec, rows, threads, [&] {
    if (peer) {
      bench::plain_gather_dequant_e4m3_bf16(dst.data(), cache_fp8.data(), ctx.table.data(),
                                            ctx.columns, ctx.cu.data(), ctx.token_to_seq.data(),
                                            rows, kMlaEntry, kMlaBlockSize, scale, threads);
    } else {
      (void)kernel.run_unchecked(args);
    }
  });
}

// ---- the MLA, indexer and merge ops, and the fused rope + flash write -------------------------

// Blocks for `tokens` slots drawn from twice the needed blocks.
int64_t blocks_for(int64_t tokens, int64_t block_size) {
  return 2 * ((tokens + block_size - 1) / block_size) + 2;
}

// Deterministic fp32 values in [-3, 3] (log-sum-exp inputs).
bench::Aligned64Vector<float> random_lse(size_t n) {
  bench::Aligned64Vector<float> v(n);
  uint32_t state = 777;
  for (auto& x : v) {
    state = state * 1664525u + 1013904223u;
    x = float(int(state >> 9) % 6001 - 3000) / 1000.0f;
  }
  return v;
}

// Times kiln (after one checked call) or the plain loop.
template <class Peer>
void time_kiln_or_peer(benchmark::State& state, const OpSpec& spec, int64_t rows, int threads,
                       bool peer, const Kernel& kernel, const KernelArgs& args, Peer plain) {
  if (!peer) run_once_or_die(kernel, args);
  bench::run_and_report(state, spec, rows, threads, [&] {
    if (peer) {
      plain();
    } else {
      (void)kernel.run_unchecked(args);
    }
  });
}

// concat_and_cache_mla, kv=fp8_ds_mla (DeepSeek-V3.2): bf16 kv_c [T, 512], k_pe [T, 64].
// `prefill`: cache_slots' prefill slot mapping instead of random slots.
void bm_ds_mla(benchmark::State& state, int64_t tokens, int threads, bool peer, bool prefill) {
  const OpSpec spec = OpSpec::make(
      OpKind::kConcatAndCacheMla,
      ir::MlaCacheWriteParams{DType::kBF16, ir::KvCacheDtype::kFp8DsMla, 512, 64, kMlaBlockSize});
  if (tokens == 0) tokens = bench::tokens_for(spec);
  const int64_t blocks = blocks_for(tokens, kMlaBlockSize);
  auto kv_c = bench::random_bf16(size_t(tokens * 512));
  auto k_pe = bench::random_bf16(size_t(tokens * 64));
  auto cache = bench::Aligned64Vector<uint8_t>(size_t(blocks * kMlaBlockSize * 656));
  auto slots = bench::cache_slots(tokens, blocks, kMlaBlockSize, prefill);
  float scale = 1.0f;
  const Kernel kernel = bench::compile_x86_or_die(spec, Config().set("threads", threads));
  const KernelArgs args(
      {Tensor(kv_c.data(), DType::kBF16, {tokens, 512}),
       Tensor(k_pe.data(), DType::kBF16, {tokens, 64}),
       Tensor(cache.data(), DType::kU8, {blocks, kMlaBlockSize, 656}),
       Tensor(slots.data(), DType::kI64, {tokens}), Tensor(&scale, DType::kF32, {1})},
      {});
  time_kiln_or_peer(state, spec, tokens, threads, peer, kernel, args, [&] {
    bench::plain_ds_mla_bf16(cache.data(), kv_c.data(), k_pe.data(), slots.data(), tokens,
                             kMlaBlockSize, threads);
  });
}

// concat_and_cache_mla_rope_fused, bf16, kv=auto, R 512, rot 64, 16 query heads, NeoX.
constexpr int64_t kMlaRank = 512, kMlaRot = 64, kMlaHeads = 16, kMaxPosition = 4096;
void bm_mla_rope_fused(benchmark::State& state, int64_t tokens, int threads, bool peer) {
  const OpSpec spec = OpSpec::make(
      OpKind::kConcatAndCacheMlaRopeFused,
      ir::MlaRopeCacheWriteParams{DType::kBF16, ir::KvCacheDtype::kAuto, kMlaRank, kMlaRot,
                                  kMlaHeads, ir::RopeStyle::kNeox, kMlaBlockSize});
  if (tokens == 0) tokens = bench::tokens_for(spec);
  const int64_t blocks = blocks_for(tokens, kMlaBlockSize);
  auto q_pe = bench::random_bf16(size_t(tokens * kMlaHeads * kMlaRot));
  auto k_pe = bench::random_bf16(size_t(tokens * kMlaRot));
  auto kv_c = bench::random_bf16(size_t(tokens * kMlaRank));
  auto cos_sin = bench::quarter_turn_rope_table_bf16(kMaxPosition, kMlaRot);
  auto positions = std::vector<int64_t>(size_t(tokens));
  for (int64_t t = 0; t < tokens; ++t) positions[size_t(t)] = (t * 37) % kMaxPosition;
  auto cache =
      bench::Aligned64Vector<uint16_t>(size_t(blocks * kMlaBlockSize * (kMlaRank + kMlaRot)));
  auto slots = bench::random_slots(tokens, blocks, kMlaBlockSize);
  float scale = 1.0f;
  const Kernel kernel = bench::compile_x86_or_die(spec, Config().set("threads", threads));
  const KernelArgs args(
      {Tensor(positions.data(), DType::kI64, {tokens}),
       Tensor(q_pe.data(), DType::kBF16, {tokens, kMlaHeads, kMlaRot}),
       Tensor(k_pe.data(), DType::kBF16, {tokens, kMlaRot}),
       Tensor(kv_c.data(), DType::kBF16, {tokens, kMlaRank}),
       Tensor(cos_sin.data(), DType::kBF16, {kMaxPosition, kMlaRot}),
       Tensor(slots.data(), DType::kI64, {tokens}),
       Tensor(cache.data(), DType::kBF16, {blocks, kMlaBlockSize, kMlaRank + kMlaRot}),
       Tensor(&scale, DType::kF32, {1})},
      {});
  time_kiln_or_peer(state, spec, tokens, threads, peer, kernel, args, [&] {
    bench::plain_mla_rope_fused_bf16(cache.data(), q_pe.data(), k_pe.data(), kv_c.data(),
                                     cos_sin.data(), positions.data(), slots.data(), tokens,
                                     kMlaHeads, kMlaRot, kMlaRank, kMlaBlockSize, threads);
  });
}

// A valid fp8_ds_mla cache: e4m3 codes, tile scales, bf16 rope.
bench::Aligned64Vector<uint8_t> ds_mla_cache(int64_t entries) {
  auto cache = bench::Aligned64Vector<uint8_t>(size_t(entries * 656));
  for (int64_t e = 0; e < entries; ++e) {
    uint8_t* entry = cache.data() + e * 656;
    for (int64_t i = 0; i < 512; ++i) entry[i] = uint8_t((e * 131 + i * 37) % 0x7F);
    for (int64_t k = 0; k < 4; ++k) {
      const float s = 0.1f + float(k);
      std::memcpy(entry + 512 + 4 * k, &s, 4);
    }
    for (int64_t i = 528; i < 656; ++i) entry[i] = uint8_t(i);
  }
  return cache;
}

// cp_gather_and_upconvert_fp8_kv_cache: one request of `rows` positions, shuffled blocks.
void bm_upconvert(benchmark::State& state, int64_t rows, int threads, bool peer) {
  const OpSpec spec = OpSpec::make(OpKind::kCpGatherAndUpconvertFp8KvCache,
                                   ir::UpconvertGatherParams{kMlaBlockSize});
  if (rows == 0) rows = bench::tokens_for(spec);
  const GatherContext ctx(rows, 1);
  auto cache = ds_mla_cache(ctx.num_blocks * kMlaBlockSize);
  auto dst = bench::Aligned64Vector<uint16_t>(size_t(rows * 576));
  int32_t seq_len = int32_t(rows), start = 0;
  const Kernel kernel = bench::compile_x86_or_die(spec, Config().set("threads", threads));
  const KernelArgs args(
      {Tensor(cache.data(), DType::kU8, {ctx.num_blocks, kMlaBlockSize, 656}),
       Tensor(dst.data(), DType::kBF16, {rows, 576}),
       Tensor(const_cast<int32_t*>(ctx.table.data()), DType::kI32, {1, ctx.columns}),
       Tensor(&seq_len, DType::kI32, {1}), Tensor(&start, DType::kI32, {1})},
      {1.0});
  time_kiln_or_peer(state, spec, rows, threads, peer, kernel, args, [&] {
    bench::plain_upconvert_gather(dst.data(), cache.data(), ctx.table.data(), rows, kMlaBlockSize,
                                  threads);
  });
}

// indexer_k_quant_and_cache, DeepSeek-V3.2: bf16 k [T, 128], one group, ue8m0, BS 64.
// `prefill`: cache_slots' prefill slot mapping instead of random slots.
void bm_indexer_quant(benchmark::State& state, int64_t tokens, int threads, bool peer,
                      bool prefill) {
  const OpSpec spec = OpSpec::make(
      OpKind::kIndexerKQuantAndCache,
      ir::IndexerQuantParams{DType::kBF16, 128, 128, kMlaBlockSize, ir::ScaleFormat::kUe8m0});
  if (tokens == 0) tokens = bench::tokens_for(spec);
  const int64_t blocks = blocks_for(tokens, kMlaBlockSize);
  auto k = bench::random_bf16(size_t(tokens * 128));
  auto cache = bench::Aligned64Vector<uint8_t>(size_t(blocks * kMlaBlockSize * 132));
  auto slots = bench::cache_slots(tokens, blocks, kMlaBlockSize, prefill);
  const Kernel kernel = bench::compile_x86_or_die(spec, Config().set("threads", threads));
  const KernelArgs args({Tensor(k.data(), DType::kBF16, {tokens, 128}),
                         Tensor(cache.data(), DType::kU8, {blocks, kMlaBlockSize, 132}),
                         Tensor(slots.data(), DType::kI64, {tokens})},
                        {});
  time_kiln_or_peer(state, spec, tokens, threads, peer, kernel, args, [&] {
    bench::plain_indexer_quant_bf16(cache.data(), k.data(), slots.data(), tokens, 128,
                                    kMlaBlockSize, threads);
  });
}

// cp_gather_indexer_k_quant_cache: D 128, BS 64, rows split over requests.
void bm_indexer_gather(benchmark::State& state, int64_t rows, int threads, bool peer) {
  const OpSpec spec = OpSpec::make(OpKind::kCpGatherIndexerKQuantCache,
                                   ir::IndexerGatherParams{128, 128, kMlaBlockSize});
  if (rows == 0) rows = bench::tokens_for(spec);
  const GatherContext ctx(rows, rows >= kGatherRequests * 64 ? kGatherRequests : 1);
  auto cache = bench::Aligned64Vector<uint8_t>(size_t(ctx.num_blocks * kMlaBlockSize * 132), 7);
  auto dst_k = bench::Aligned64Vector<uint8_t>(size_t(rows * 128));
  auto dst_scale = bench::Aligned64Vector<uint8_t>(size_t(rows * 4));
  const Kernel kernel = bench::compile_x86_or_die(spec, Config().set("threads", threads));
  const KernelArgs args(
      {Tensor(cache.data(), DType::kU8, {ctx.num_blocks, kMlaBlockSize, 132}),
       Tensor(dst_k.data(), DType::kU8, {rows, 128}),
       Tensor(dst_scale.data(), DType::kU8, {rows, 4}),
       Tensor(const_cast<int32_t*>(ctx.table.data()), DType::kI32, {ctx.requests, ctx.columns}),
       Tensor(const_cast<int32_t*>(ctx.cu.data()), DType::kI32, {ctx.requests + 1})},
      {});
  time_kiln_or_peer(state, spec, rows, threads, peer, kernel, args, [&] {
    bench::plain_indexer_gather(dst_k.data(), dst_scale.data(), cache.data(), ctx.table.data(),
                                ctx.columns, ctx.cu.data(), ctx.requests, 128, kMlaBlockSize,
                                threads);
  });
}

// merge_attn_states, bf16 [T, 16, 128] with output_lse.
void bm_merge(benchmark::State& state, int64_t tokens, int threads, bool peer) {
  constexpr int64_t kMergeHeads = 16;
  const OpSpec spec = OpSpec::make(
      OpKind::kMergeAttnStates,
      ir::MergeAttnStatesParams{DType::kBF16, DType::kBF16, kMergeHeads, kHeadSize, true});
  if (tokens == 0) tokens = bench::tokens_for(spec);
  const size_t n = size_t(tokens * kMergeHeads * kHeadSize);
  auto prefix = bench::random_bf16(n);
  auto suffix = bench::random_bf16(n);
  auto out = bench::Aligned64Vector<uint16_t>(n);
  auto prefix_lse = random_lse(size_t(kMergeHeads * tokens));
  auto suffix_lse = random_lse(size_t(kMergeHeads * tokens));
  std::reverse(suffix_lse.begin(), suffix_lse.end());
  auto out_lse = bench::Aligned64Vector<float>(size_t(kMergeHeads * tokens));
  const Kernel kernel = bench::compile_x86_or_die(spec, Config().set("threads", threads));
  const KernelArgs args({Tensor(out.data(), DType::kBF16, {tokens, kMergeHeads, kHeadSize}),
                         Tensor(out_lse.data(), DType::kF32, {kMergeHeads, tokens}),
                         Tensor(prefix.data(), DType::kBF16, {tokens, kMergeHeads, kHeadSize}),
                         Tensor(prefix_lse.data(), DType::kF32, {kMergeHeads, tokens}),
                         Tensor(suffix.data(), DType::kBF16, {tokens, kMergeHeads, kHeadSize}),
                         Tensor(suffix_lse.data(), DType::kF32, {kMergeHeads, tokens}), Tensor{}},
                        {-1.0});
  time_kiln_or_peer(state, spec, tokens, threads, peer, kernel, args, [&] {
    bench::plain_merge_attn_states_bf16(out.data(), out_lse.data(), prefix.data(),
                                        prefix_lse.data(), suffix.data(), suffix_lse.data(), tokens,
                                        kMergeHeads, kHeadSize, threads);
  });
}

// rotary_embedding_and_cache_flash (Llama-3-8B-like: 32 query heads, 8 KV heads, D 128, NeoX,
// NHD, BS 16) against the same work as two kiln kernels (rotary_embedding, then
// reshape_and_cache_flash) and as plain loops. All three report the fused op's bytes.
enum class RopeFlashMode { kFused, kSeparate, kPlain };
void bm_rope_flash(benchmark::State& state, ir::KvCacheDtype kv, int64_t tokens, int threads,
                   RopeFlashMode mode) {
  constexpr int64_t kHeadsQ = 32;
  const bool fp8 = kv != ir::KvCacheDtype::kAuto;
  const OpSpec spec =
      OpSpec::make(OpKind::kRotaryEmbeddingAndCacheFlash,
                   ir::RopeFlashCacheWriteParams{DType::kBF16, kv, kHeadsQ, kHeads, kHeadSize,
                                                 kHeadSize, ir::RopeStyle::kNeox, kBlockSize,
                                                 ir::CacheLayout::kNhd, false});
  if (tokens == 0) tokens = bench::tokens_for(spec);
  const int64_t blocks = blocks_for(tokens, kBlockSize);
  const int64_t row = kHeads * kHeadSize;
  auto query = bench::random_bf16(size_t(tokens * kHeadsQ * kHeadSize));
  auto key = bench::random_bf16(size_t(tokens * row));
  auto value = bench::random_bf16(size_t(tokens * row));
  auto cos_sin = bench::quarter_turn_rope_table_bf16(kMaxPosition, kHeadSize);
  auto positions = std::vector<int64_t>(size_t(tokens));
  for (int64_t t = 0; t < tokens; ++t) positions[size_t(t)] = (t * 37) % kMaxPosition;
  const size_t cache_bytes = size_t(blocks * kBlockSize * row) * (fp8 ? 1 : 2);
  auto key_cache = CacheBytes(cache_bytes);
  auto value_cache = CacheBytes(cache_bytes);
  auto slots = bench::random_slots(tokens, blocks, kBlockSize);
  float k_scale = 0.02f, v_scale = 0.03f;
  const DType cdt = fp8 ? DType::kU8 : DType::kBF16;
  const Tensor q_t(query.data(), DType::kBF16, {tokens, kHeadsQ, kHeadSize});
  const Tensor k_t(key.data(), DType::kBF16, {tokens, kHeads, kHeadSize});
  const Tensor v_t(value.data(), DType::kBF16, {tokens, kHeads, kHeadSize});
  const Tensor pos_t(positions.data(), DType::kI64, {tokens});
  const Tensor cs_t(cos_sin.data(), DType::kBF16, {kMaxPosition, kHeadSize});
  const Tensor kc_t(key_cache.data(), cdt, {blocks, kBlockSize, kHeads, kHeadSize});
  const Tensor vc_t(value_cache.data(), cdt, {blocks, kBlockSize, kHeads, kHeadSize});
  const Tensor slots_t(slots.data(), DType::kI64, {tokens});
  const Tensor ks_t(&k_scale, DType::kF32, {1}), vs_t(&v_scale, DType::kF32, {1});
  const Config config = Config().set("threads", threads);
  const Kernel fused = bench::compile_x86_or_die(spec, config);
  const KernelArgs fused_args({pos_t, q_t, k_t, v_t, cs_t, kc_t, vc_t, slots_t, ks_t, vs_t}, {});
  const Kernel rope = bench::compile_x86_or_die(
      OpSpec::make(OpKind::kRotaryEmbedding,
                   ir::RopeParams{DType::kBF16, DType::kBF16, kHeadSize, kHeadSize,
                                  ir::RopeStyle::kNeox, kHeadsQ, kHeads, true}),
      config);
  const KernelArgs rope_args({pos_t, q_t, k_t, cs_t}, {});
  const Kernel flash = bench::compile_x86_or_die(
      OpSpec::make(OpKind::kReshapeAndCacheFlash,
                   ir::FlashCacheWriteParams{DType::kBF16, kv, kHeads, kHeadSize, kBlockSize,
                                             ir::CacheLayout::kNhd, false}),
      config);
  const KernelArgs flash_args({k_t, v_t, kc_t, vc_t, slots_t, ks_t, vs_t}, {});
  if (mode == RopeFlashMode::kFused) run_once_or_die(fused, fused_args);
  if (mode == RopeFlashMode::kSeparate) {
    run_once_or_die(rope, rope_args);
    run_once_or_die(flash, flash_args);
  }
  bench::run_and_report(state, spec, tokens, threads, [&] {
    switch (mode) {
      case RopeFlashMode::kFused: (void)fused.run(fused_args); break;
      case RopeFlashMode::kSeparate:
        (void)rope.run(rope_args);
        (void)flash.run(flash_args);
        break;
      case RopeFlashMode::kPlain:
        bench::plain_rope_neox_bf16(query.data(), positions.data(), cos_sin.data(), tokens, kHeadsQ,
                                    kHeadSize, threads);
        bench::plain_rope_neox_bf16(key.data(), positions.data(), cos_sin.data(), tokens, kHeads,
                                    kHeadSize, threads);
        bench::plain_reshape_and_cache_flash_bf16(
            key_cache.data(), value_cache.data(), key.data(), value.data(), slots.data(), tokens,
            kHeads, kHeadSize, kBlockSize, false, fp8, k_scale, v_scale, threads);
        break;
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  bench::measure_copy_ceilings();
  struct Write {
    const char* name;
    bool flash;
    ir::CacheLayout layout;
    ir::KvCacheDtype kv;
  };
  const Write writes[] = {
      {"reshape_and_cache_flash/nhd/auto", true, ir::CacheLayout::kNhd, ir::KvCacheDtype::kAuto},
      {"reshape_and_cache_flash/nhd/fp8_e4m3", true, ir::CacheLayout::kNhd,
       ir::KvCacheDtype::kFp8E4m3},
      {"reshape_and_cache_flash/hnd/auto", true, ir::CacheLayout::kHnd, ir::KvCacheDtype::kAuto},
      {"reshape_and_cache_flash/hnd/fp8_e4m3", true, ir::CacheLayout::kHnd,
       ir::KvCacheDtype::kFp8E4m3},
      {"reshape_and_cache/auto", false, ir::CacheLayout::kNhd, ir::KvCacheDtype::kAuto},
      {"reshape_and_cache/fp8_e4m3", false, ir::CacheLayout::kNhd, ir::KvCacheDtype::kFp8E4m3},
  };
  for (int threads : {1, 2}) {
    for (bool peer : {false, true}) {
      const std::string who = peer ? "plain_loop/" : "kiln/";
      const std::string suffix = fmt::format("/threads:{}", threads);
      for (int64_t tokens : {int64_t(0), int64_t(16), int64_t(1)}) {
        const std::string shape = tokens == 0 ? "/large" : fmt::format("/decode{}", tokens);
        for (const Write& w : writes) {
          benchmark::RegisterBenchmark((who + w.name + shape + suffix).c_str(), bm_cache_write,
                                       w.flash, w.layout, w.kv, tokens, threads, peer, false, 0.0f,
                                       false)
              ->UseRealTime();
        }
        if (!peer) {
          for (const auto& [who_scale, scale] :
               {std::pair{"kiln_scale1/", 1.0f}, std::pair{"kiln_scale_calibrated/", 3.1f / 448}}) {
            benchmark::RegisterBenchmark(
                (who_scale + std::string("reshape_and_cache_flash/nhd/fp8_e4m3") + shape + suffix)
                    .c_str(),
                bm_cache_write, true, ir::CacheLayout::kNhd, ir::KvCacheDtype::kFp8E4m3, tokens,
                threads, peer, false, scale, false)
                ->UseRealTime();
          }
        }
        if (tokens == 0 && !peer) {
          // The flash fp8 writes at random slots with the caches on huge pages (kiln only).
          for (ir::CacheLayout layout : {ir::CacheLayout::kNhd, ir::CacheLayout::kHnd}) {
            const std::string name = layout == ir::CacheLayout::kNhd
                                         ? "reshape_and_cache_flash/nhd/fp8_e4m3"
                                         : "reshape_and_cache_flash/hnd/fp8_e4m3";
            benchmark::RegisterBenchmark(("kiln_hugepages/" + name + shape + suffix).c_str(),
                                         bm_cache_write, true, layout, ir::KvCacheDtype::kFp8E4m3,
                                         tokens, threads, peer, false, 0.0f, true)
                ->UseRealTime();
          }
        }
        if (tokens == 0) {
          // The flash writes at a prefill's slots: HND auto, and fp8 at the default scales and
          // at 1.0 (the kiln_scale1 rows; kiln only).
          struct PrefillWrite {
            const char* name;
            ir::CacheLayout layout;
            ir::KvCacheDtype kv;
            float fp8_scale;
          };
          const PrefillWrite prefill_writes[] = {
              {"reshape_and_cache_flash/hnd/auto", ir::CacheLayout::kHnd, ir::KvCacheDtype::kAuto,
               0.0f},
              {"reshape_and_cache_flash/nhd/fp8_e4m3", ir::CacheLayout::kNhd,
               ir::KvCacheDtype::kFp8E4m3, 0.0f},
              {"reshape_and_cache_flash/nhd/fp8_e4m3", ir::CacheLayout::kNhd,
               ir::KvCacheDtype::kFp8E4m3, 1.0f},
              {"reshape_and_cache_flash/hnd/fp8_e4m3", ir::CacheLayout::kHnd,
               ir::KvCacheDtype::kFp8E4m3, 1.0f},
          };
          for (const PrefillWrite& w : prefill_writes) {
            if (peer && w.fp8_scale != 0) continue;
            const std::string label = w.fp8_scale != 0 ? "kiln_scale1/" : who;
            benchmark::RegisterBenchmark(
                (label + w.name + "/prefill_slots" + shape + suffix).c_str(), bm_cache_write, true,
                w.layout, w.kv, tokens, threads, peer, true, w.fp8_scale, false)
                ->UseRealTime();
          }
          for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kAuto, ir::KvCacheDtype::kFp8E4m3}) {
            const std::string name = std::string("reshape_and_cache/") +
                                     (kv == ir::KvCacheDtype::kAuto ? "auto" : "fp8_e4m3") +
                                     "/prefill_slots";
            benchmark::RegisterBenchmark((who + name + shape + suffix).c_str(), bm_cache_write,
                                         false, ir::CacheLayout::kNhd, kv, tokens, threads, peer,
                                         true, 0.0f, false)
                ->UseRealTime();
          }
        }
        benchmark::RegisterBenchmark((who + "swap_blocks" + shape + suffix).c_str(), bm_swap_blocks,
                                     tokens, threads, peer, -1)
            ->UseRealTime();
        if (!peer) {
          for (int rep_movsb : {0, 1}) {
            benchmark::RegisterBenchmark(
                (std::string(rep_movsb ? "kiln_rep_movsb" : "kiln_vector_loops") + "/swap_blocks" +
                 shape + suffix)
                    .c_str(),
                bm_swap_blocks, tokens, threads, peer, rep_movsb)
                ->UseRealTime();
          }
        }
        benchmark::RegisterBenchmark((who + "convert_fp8/bf16" + shape + suffix).c_str(),
                                     bm_convert_fp8, tokens * kHeads * kHeadSize, threads, peer,
                                     0.02, DType::kBF16)
            ->UseRealTime();
        benchmark::RegisterBenchmark((who + "convert_fp8/e4m3_to_bf16" + shape + suffix).c_str(),
                                     bm_convert_fp8_dequant, tokens * kHeads * kHeadSize, threads,
                                     peer, 0.02)
            ->UseRealTime();
        if (!peer) {
          benchmark::RegisterBenchmark(
              ("kiln_division_path/convert_fp8/bf16" + shape + suffix).c_str(), bm_convert_fp8,
              tokens * kHeads * kHeadSize, threads, peer, 0.0, DType::kBF16)
              ->UseRealTime();
          // A calibrated scale (amax / 448 of some tensor: a full-width reciprocal): the fast
          // quantiser's window steps.
          benchmark::RegisterBenchmark(
              ("kiln_scale_calibrated/convert_fp8/bf16" + shape + suffix).c_str(), bm_convert_fp8,
              tokens * kHeads * kHeadSize, threads, peer, 3.1 / 448.0, DType::kBF16)
              ->UseRealTime();
          // f16 has no mantissa table: a calibrated scale takes the window steps, and with a
          // ReLU's output (half the values zero) every step holds lanes the window rejects.
          for (bool relu : {false, true}) {
            benchmark::RegisterBenchmark(
                (std::string(relu ? "kiln_relu_calibrated" : "kiln_scale_calibrated") +
                 "/convert_fp8/f16" + shape + suffix)
                    .c_str(),
                bm_convert_fp8_data, tokens * kHeads * kHeadSize, threads, peer, 3.1 / 448.0,
                DType::kF16, relu)
                ->UseRealTime();
          }
          // scale 1.0 (vLLM's default k/v scale): a power of two, the 16-bit quantiser
          // (AVX512-FP16; elsewhere the fast quantiser's exact-tie variant).
          benchmark::RegisterBenchmark(("kiln_scale1/convert_fp8/f16" + shape + suffix).c_str(),
                                       bm_convert_fp8, tokens * kHeads * kHeadSize, threads, peer,
                                       1.0, DType::kF16)
              ->UseRealTime();
          benchmark::RegisterBenchmark(("kiln_scale1/convert_fp8/bf16" + shape + suffix).c_str(),
                                       bm_convert_fp8, tokens * kHeads * kHeadSize, threads, peer,
                                       1.0, DType::kBF16)
              ->UseRealTime();
          // e4m3 -> bf16 at scale 1.0: AVX2 moves exponent fields instead of multiplying.
          benchmark::RegisterBenchmark(
              ("kiln_scale1/convert_fp8/e4m3_to_bf16" + shape + suffix).c_str(),
              bm_convert_fp8_dequant, tokens * kHeads * kHeadSize, threads, peer, 1.0)
              ->UseRealTime();
        }
        benchmark::RegisterBenchmark((who + "cp_gather_cache/bf16" + shape + suffix).c_str(),
                                     bm_cp_gather, tokens, threads, peer)
            ->UseRealTime();
        benchmark::RegisterBenchmark(
            (who + "gather_and_maybe_dequant_cache/fp8_e4m3" + shape + suffix).c_str(),
            bm_gather_dequant, ir::KvCacheDtype::kFp8E4m3, tokens, threads, peer)
            ->UseRealTime();
        if (!peer) {
          benchmark::RegisterBenchmark(
              (who + "gather_and_maybe_dequant_cache/auto" + shape + suffix).c_str(),
              bm_gather_dequant, ir::KvCacheDtype::kAuto, tokens, threads, peer)
              ->UseRealTime();
        }
        using Bm = void (*)(benchmark::State&, int64_t, int, bool);
        const std::pair<const char*, Bm> more[] = {
            {"concat_and_cache_mla_rope_fused/auto", bm_mla_rope_fused},
            {"cp_gather_and_upconvert_fp8_kv_cache", bm_upconvert},
            {"cp_gather_indexer_k_quant_cache", bm_indexer_gather},
            {"merge_attn_states/bf16", bm_merge},
        };
        for (const auto& [name, fn] : more) {
          benchmark::RegisterBenchmark((who + name + shape + suffix).c_str(), fn, tokens, threads,
                                       peer)
              ->UseRealTime();
        }
        if (tokens == 0) {
          // merge_attn_states over a chunked prefill of 8192 tokens (a power of two, as vLLM's
          // max_num_batched_tokens usually is): the [H, T] LSEs' head stride is then a multiple
          // of 4 KiB, so one token's LSEs across the heads share their L1 and L2 sets.
          benchmark::RegisterBenchmark((who + "merge_attn_states/bf16/t8192" + suffix).c_str(),
                                       bm_merge, 8192, threads, peer)
              ->UseRealTime();
        }
        // The dynamic-scale writers at random slots, and at a prefill's slots (large calls).
        using QuantBm = void (*)(benchmark::State&, int64_t, int, bool, bool);
        const std::pair<const char*, QuantBm> quantisers[] = {
            {"concat_and_cache_mla/fp8_ds_mla", bm_ds_mla},
            {"indexer_k_quant_and_cache/ue8m0", bm_indexer_quant},
        };
        for (const auto& [name, fn] : quantisers) {
          for (bool prefill : tokens == 0 ? std::vector{false, true} : std::vector{false}) {
            const std::string pattern = prefill ? "/prefill_slots" : "";
            benchmark::RegisterBenchmark((who + name + pattern + shape + suffix).c_str(), fn,
                                         tokens, threads, peer, prefill)
                ->UseRealTime();
          }
        }
        for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kAuto, ir::KvCacheDtype::kFp8E4m3}) {
          const std::string name = std::string("rotary_embedding_and_cache_flash/") +
                                   (kv == ir::KvCacheDtype::kAuto ? "auto" : "fp8_e4m3");
          if (peer) {
            benchmark::RegisterBenchmark((who + name + shape + suffix).c_str(), bm_rope_flash, kv,
                                         tokens, threads, RopeFlashMode::kPlain)
                ->UseRealTime();
            continue;
          }
          benchmark::RegisterBenchmark((who + name + shape + suffix).c_str(), bm_rope_flash, kv,
                                       tokens, threads, RopeFlashMode::kFused)
              ->UseRealTime();
          benchmark::RegisterBenchmark(("kiln_separate/rotary_embedding+reshape_and_cache_flash/" +
                                        name.substr(33) + shape + suffix)
                                           .c_str(),
                                       bm_rope_flash, kv, tokens, threads, RopeFlashMode::kSeparate)
              ->UseRealTime();
        }
      }
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
