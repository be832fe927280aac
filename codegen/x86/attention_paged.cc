// paged_attention_v1 / v2 on x86 (spec/attention_ops.md §2, §3): the runner of two kernels.
//
// The legacy cache stores keys as [NB, H, D/x, BS, x] and values as [NB, H, D, BS]. Where it
// serves (bf16 and f16 queries, dense; knob `direct`), the direct kernel of paged_direct.cc
// computes from that layout: each task walks its keys in chunks of up to 512 and calls the
// kernel once per pass of up to 8 query rows, whose softmax state it keeps. A cache of the
// query's type with block and head sizes multiples of 16 (AVX-512) is read in place: the kernel
// is pointed at each half group of 16 keys in its block, and the values of a chunk's last partial
// half are staged (slots past a sequence may hold NaN). Other 16-bit caches are copied, and fp8
// caches decoded by the gather's tables (rnd_T(fp8 · scale), §1.2; paged_copy.h), chunk by chunk
// into a stage that is one block of the 16-bit layout holding the chunk's tokens, its head
// padded to a multiple of 16 with zero dims. Below 8 keys per block the gather is the default.
//
// Everything else goes through the CPU-attention tile kernel of attention_kernel.cc, which
// reads the vec layout (keys [D, n] transposed, values [n, D] natural). Each task
// (sequence, KV head[, v2 partition]) walks its keys in chunks of `chunk` tokens, gathers a
// chunk through the block table into a thread-local slab of the vec layout (dequantising fp8 to
// rnd_T(fp8 · scale) per §1.2, copying the exact bits otherwise, and padding the head to a
// multiple of 16 with zeros: any head size the IR allows runs, 40 and 72 included), then runs
// the kernel's online softmax over it with the GQA group's query heads as the rows (each KV
// chunk is gathered once per group). The decode query is the newest token, so there is no mask
// beyond the sequence but block-sparse mode's (§2.5): a chunk is cut into runs of sparse blocks
// that the same rows attend, a run no row attends is skipped (neither gathered nor computed),
// and the others are computed with each row's key interval [lo, hi] the run or empty. ALiBi is
// slope·(j − L + 1), the kernel's slope·(j − pos) with pos = L − 1. Normalisation follows
// §2.3: out = acc / (S + 1e-6); v2 writes each partition's max logit, exp sum and
// rnd_T(acc / (S + 1e-6)) and reduces them per §3.2.
#include <fmt/format.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "codegen/x86/attention_kernel.h"
#include "codegen/x86/generator.h"
#include "codegen/x86/host_rows.h"
#include "codegen/x86/paged_copy.h"
#include "ir/check_args.h"
#include "ir/numeric.h"
#include "ir/params_attention.h"
#include "ir/params_cache.h"
#include "ir/params_cpu.h"

namespace jit::codegen::x86 {
namespace {

constexpr int64_t kHeadPad = 16;       // the tile kernel's head unit (vec16)
constexpr int64_t kGatherChunk = 128;  // keys per gathered chunk (v1; the v2 maximum)
constexpr int64_t kDirectChunk = 512;  // keys per direct-kernel call (v1; the v2 maximum)
constexpr int64_t kMaxChunk = 512;     // the chunk knob's largest value

int64_t align_up(int64_t v, int64_t a) {
  return (v + a - 1) / a * a;
}

// Whether `config` (knob kPagedDirectKnob, default paged_direct_default) picks the direct
// kernel, which must serve `spec` at `isa` when the knob asks for it; an error names the knob
// and the allowed values.
Result<bool> direct_for(const OpSpec& spec, const Config& config, X86Isa isa) {
  const auto& p = spec.get<ir::PagedAttentionParams>();
  const bool serves = paged_direct_serves(p, isa);
  const Result<int64_t> direct = switch_knob(config, kPagedDirectKnob, "the direct kernel",
                                             "the gather into the tile kernel's layout");
  if (!direct.is_ok()) return direct.status();
  const int64_t knob = direct.value();
  if (knob == -1) return paged_direct_default(p, isa);
  if (knob == 1 && !serves) {
    return Status(
        StatusCode::kInvalidArgument,
        fmt::format("config knob {}=1: the direct kernel serves dtype bf16 and f16, dense, "
                    "with kv=auto, fp8_e4m3 or fp8_e5m2; got dtype={} kv={} blocksparse={} "
                    "block_size={} head_size={} at {}",
                    kPagedDirectKnob, dtype_name(p.dtype), ir::enum_name(p.kv), p.blocksparse,
                    p.block_size, p.head_size, x86_isa_name(isa)));
  }
  return knob == 1;
}

// Keys per chunk by default: `largest` for v1; for v2 `largest`, or the partition rounded up to
// a power of two (at least 16) where that is smaller: the fewest chunks per partition, the last
// one partial where the chunk does not divide the partition, as a sequence's last chunk is
// (chunks never straddle partitions: a v2 task walks its own partition's keys). The largest
// power of two dividing the partition, the rule before session 27, gave a partition of 1008
// keys (16 · 63) chunks of 16: 1.8x slower than chunks of 256 (`kiln tune`, bf16, D 128, GQA
// 4, block 16, 8 sequences: 1624 against 908 µs per call). The gather's 128 keys keep the slabs
// (64 KiB of bf16 K+V at D = 128) in L2 between the gather and the kernel: v1 decode +7% against
// 256 (bench_attention --benchmark_filter=paged, 1 thread); 32 and 64 ran level with 128 since
// the whole-line copies (session 14). The direct kernel sums its P·V accumulators once per
// chunk: 512 keys ran 3–6% faster than 256 and ~10% faster than 128 (v1, batch 1 and 8, 1
// thread, two runs, session 17).
int64_t default_chunk(const ir::PagedAttentionParams& p, int64_t largest) {
  if (p.partition_size == 0) return largest;
  return std::min(largest,
                  std::max<int64_t>(16, int64_t(std::bit_ceil(uint64_t(p.partition_size)))));
}

// The chunk of `config` (knob kPagedChunkKnob: 16 .. 512 keys, a power of two; a v2 partition
// it does not divide ends in a partial chunk), or the default of the kernel `direct` picks; an
// error names the knob and the allowed values.
Result<int64_t> chunk_for(const OpSpec& spec, const Config& config, bool direct) {
  const auto& p = spec.get<ir::PagedAttentionParams>();
  const int64_t knob = config.get(kPagedChunkKnob, 0);
  if (knob == 0) return default_chunk(p, direct ? kDirectChunk : kGatherChunk);
  const bool allowed = knob >= 16 && knob <= kMaxChunk && (knob & (knob - 1)) == 0;
  if (!allowed) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("config knob {}={}: allowed values are 16, 32, 64, 128, 256 and 512 "
                              "keys",
                              kPagedChunkKnob, knob));
  }
  return knob;
}

// The direct kernel's row counts: passes of kPagedDirectRows rows over the GQA group, the last one
// shorter.
std::vector<int> direct_row_counts(const ir::PagedAttentionParams& p) {
  const int64_t group = p.head_count_q / p.head_count_kv;
  const int64_t rows = kPagedDirectRows;
  std::vector<int> counts{int(std::min(group, rows))};
  if (group > rows && group % rows != 0) counts.push_back(int(group % rows));
  return counts;
}

// What the direct kernel reads: a 16-bit cache in place (block and head sizes multiples of 16),
// or a stage into which the runner decodes (fp8) or copies (other 16-bit caches) each chunk, laid
// out as one block of the 16-bit legacy layout with the head padded to a multiple of 16: keys
// [head/8][block][8], values [head][block], the padding dims zero.
struct DirectLayout {
  bool staged;
  int64_t head;  // the kernel's head size: the cache's, or padded to a multiple of 16
  // The kernel's block: the cache's, or the stage's tokens per key run and value row. The stage
  // holds the chunk rounded up to its groups of 32 plus 32 tokens of padding, so its key runs
  // lie (block · 16) bytes apart, not a multiple of 4 KiB: at 512 tokens unpadded, the 16 key
  // runs of a half at D = 128 would share 4 of L1's 64 sets (12 ways).
  int64_t block;
  // Every group of 32 keys lies in one block (value rows of 64 bytes): the cache's block size
  // and the chunks multiples of 32, or the stage.
  bool contiguous;
};
DirectLayout direct_layout(const ir::PagedAttentionParams& p, int64_t chunk) {
  if (p.kv == ir::KvCacheDtype::kAuto && p.block_size % 16 == 0 && p.head_size % 16 == 0) {
    return {false, p.head_size, p.block_size, p.block_size % 32 == 0 && chunk % 32 == 0};
  }
  return {true, align_up(p.head_size, 16), align_up(chunk, 32) + 32, true};
}

// The CPU-attention spec of the tile kernel that serves `spec` (paged_attention_v1/v2) with
// chunks of `chunk` keys. Its chunks are the kernel's blocks: at a multiple of 32 keys the
// kernel walks 32-key groups at AVX-512, with the fp32 path's parity widening (and the
// batched softmax for passes of 8 rows).
OpSpec inner_spec(const OpSpec& spec, int64_t chunk) {
  const auto& p = spec.get<ir::PagedAttentionParams>();
  return OpSpec::make(OpKind::kCpuAttentionWithKvCache,
                      ir::CpuAttentionParams{ir::CpuAttnIsa::kVec16, p.dtype,
                                             align_up(p.head_size, kHeadPad), chunk, p.head_count_q,
                                             p.head_count_kv, true, false, p.alibi, false, false});
}

int64_t load_i32(const Tensor& t, int64_t i) {
  return t.data_as<const int32_t>()[i];
}

class PagedAttentionExecutable final : public Executable {
 public:
  // `direct`, `chunk`: direct_for / chunk_for(spec, config), checked when the code was
  // generated.
  PagedAttentionExecutable(OpSpec spec, Config config, X86Isa isa, bool direct, int64_t chunk,
                           const void* code, size_t size)
      : spec_(std::move(spec)),
        direct_(direct),
        chunk_(chunk),
        inner_(inner_spec(spec_, chunk)),
        config_(std::move(config)),
        code_(code),
        size_(size),
        dpbf16_(attention_uses_dpbf16(inner_, config_, isa)),
        avx512_(isa >= X86Isa::kAvx512),
        fp8_decoder_(fp8_decoder_for(isa)),
        max_rows_(attention_max_rows(inner_, isa)),
        token_group_(attention_token_group(inner_, isa)) {}

  const void* code_address() const override { return code_; }
  size_t code_size() const override { return size_; }

  Status run(const KernelArgs& args) const override {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const bool v2 = spec_.op == OpKind::kPagedAttentionV2;
    const int first = query_arg();
    const Tensor& seq_lens = args.tensor(first + 4);
    const Tensor& tables = args.tensor(first + 3);
    const auto max_seq_len = int64_t(args.scalar(1));
    KILN_RETURN_IF_ERROR(ir::check_paged_sequences(op_name(spec_.op), seq_lens, tables,
                                                   spec_.get<ir::PagedAttentionParams>().block_size,
                                                   args.tensor(first + 1).size(0), max_seq_len));
    const int64_t seqs = seq_lens.size(0);
    const int64_t parts =
        v2 ? std::max<int64_t>(1, (max_seq_len + p.partition_size - 1) / p.partition_size) : 1;
    // Tasks: (sequence, kv head, partition) for every partition a sequence has.
    struct Task {
      int64_t seq, kv_head, part;
    };
    std::vector<Task> tasks;
    for (int64_t s = 0; s < seqs; ++s) {
      const int64_t len = load_i32(seq_lens, s);
      const int64_t n = len <= 0 ? 0 : v2 ? (len + p.partition_size - 1) / p.partition_size : 1;
      for (int64_t g = 0; g < p.head_count_kv; ++g) {
        for (int64_t pi = 0; pi < n; ++pi) tasks.push_back({s, g, pi});
      }
    }
    int threads = int(config_.get("threads", 0));
    if (threads <= 0) threads = omp_get_max_threads();
    threads = int(std::clamp<int64_t>(int64_t(tasks.size()), 1, threads));
    const auto task_count = int64_t(tasks.size());
    const Fp8Tables fp8_values = fp8_tables(args);
    if (direct_) {
#pragma omp parallel num_threads(threads)
      {
        DirectBuffers buf(p, chunk_, direct_layout(p, chunk_));
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < task_count; ++i) {
          const Task& t = tasks[size_t(i)];
          run_direct_task(args, t.seq, t.kv_head, t.part, parts, fp8_values, buf);
        }
      }
      finish(args, parts);
      return Status::ok();
    }
#pragma omp parallel num_threads(threads)
    {
      Buffers buf(inner_.get<ir::CpuAttentionParams>(), p.head_count_q / p.head_count_kv,
                  fp8_staged(), p.blocksparse);
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < task_count; ++i) {
        const Task& t = tasks[size_t(i)];
        run_task(args, t.seq, t.kv_head, t.part, parts, fp8_values, buf);
      }
    }
    finish(args, parts);
    return Status::ok();
  }

 private:
  // Block-sparse mode (§2.5) for one task: row i (query head g · group + i) attends sparse
  // block kb (tokens [kb · block, (kb + 1) · block)) iff (kb + off_i) % vert == 0 or
  // kb > qb − local, qb = (L − 1) / block. vert == 0: dense.
  struct SparsePattern {
    int64_t vert = 0, local = 0, block = 0, qb = 0;
    // off_i = (tp_rank · Hq + h) · step + 1 (step >= 0, per query head) or
    // (tp_rank · Hkv + g) · (−step) + 1 (step < 0, per KV head): off0 + i · per_row.
    int64_t off0 = 0, per_row = 0;
    bool attends(int64_t row, int64_t kb) const {
      return (kb + off0 + row * per_row) % vert == 0 || kb > qb - local;
    }
  };
  // Scalars {scale, max_seq_len, tp_rank, local, vert, block, step} (check_args: vert >= 2,
  // block a multiple of block_size, tp_rank and local >= 0).
  SparsePattern sparse_pattern(const KernelArgs& args, int64_t g, int64_t len) const {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    SparsePattern sp;
    if (!p.blocksparse) return sp;
    const auto tp_rank = int64_t(args.scalar(2)), step = int64_t(args.scalar(6));
    sp.local = int64_t(args.scalar(3));
    sp.vert = int64_t(args.scalar(4));
    sp.block = int64_t(args.scalar(5));
    sp.qb = (len - 1) / sp.block;
    const int64_t group = p.head_count_q / p.head_count_kv;
    if (step >= 0) {
      sp.off0 = (tp_rank * p.head_count_q + g * group) * step + 1;
      sp.per_row = step;
    } else {
      sp.off0 = (tp_rank * p.head_count_kv + g) * -step + 1;
    }
    return sp;
  }

  // Per-thread working memory.
  struct Buffers {
    Buffers(const ir::CpuAttentionParams& inner, int64_t group, bool staged, bool sparse)
        : k(static_cast<size_t>(inner.head_size * inner.block_size + 16)),
          v(static_cast<size_t>(inner.head_size * inner.block_size + 16)),
          q(static_cast<size_t>(group * inner.head_size)),
          acc(static_cast<size_t>(group * inner.head_size)),
          scratch(static_cast<size_t>(attention_scratch_floats(inner.head_size) + 16)),
          calls(static_cast<size_t>(group)),
          k_stage(static_cast<size_t>(staged ? inner.head_size * inner.block_size : 0)),
          v_stage(k_stage.size()),
          q_rows(static_cast<size_t>(sparse ? kMaxAttnRows * inner.head_size : 0)),
          acc_rows(q_rows.size()),
          attended(static_cast<size_t>(sparse ? group : 0)),
          next_attended(attended.size()),
          any_attended(attended.size()) {}
    // The slabs at 64-byte boundaries (whole-line stores and loads).
    float* k_slab() { return align64(k.data()); }
    float* v_slab() { return align64(v.data()); }
    std::vector<float> k, v, q, acc, scratch;  // k, v, q hold 16-bit elements for f16/bf16
    std::vector<CpuAttnTileArgs> calls;        // one per pass (group / max_rows, rounded up)
    // `staged` (fp8_staged()): one run's keys and values decoded to 16-bit words (a run
    // holds at most a chunk's tokens), D x chunk each at most.
    std::vector<uint16_t> k_stage, v_stage;
    // `sparse` (block-sparse mode; empty otherwise): the q and acc of the rows a pass of some
    // rows serves, those rows, and per row of the group whether it attends the current run /
    // the next sparse block / anything of the task so far.
    std::vector<float> q_rows, acc_rows;
    std::vector<int64_t> rows;
    std::vector<uint8_t> attended, next_attended, any_attended;
  };

  // fp8 caches: the slab value of every code, rnd_T(fp8 · scale) as T's bits (the float's for
  // f32), made once per call, so the gather does one lookup per element instead of a decode,
  // a multiply and a rounding.
  struct Fp8Tables {
    std::array<uint32_t, 256> k{}, v{};
    Fp8Tables16 k16{}, v16{};  // the 16-bit values of the magnitudes (fp8_staged())
  };
  // fp8 caches of 16-bit slabs decoded by vector table lookups (fp8_decoder()) into a 16-bit
  // stage that the 16-bit copies read; f32 slabs element by element. (The direct kernel's
  // stage: DirectLayout.)
  bool fp8_staged() const {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    return p.kv != ir::KvCacheDtype::kAuto && dtype_size(p.dtype) == 2;
  }
  Fp8Decoder fp8_decoder() const {
    return fp8_decoder_;
  }
  Fp8Tables fp8_tables(const KernelArgs& args) const {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    Fp8Tables tables;
    if (p.kv == ir::KvCacheDtype::kAuto) return tables;
    const int first = query_arg();
    const float k_scale = args.tensor(first + 6).data_as<const float>()[0];
    const float v_scale = args.tensor(first + 7).data_as<const float>()[0];
    const auto slab_bits = [&](uint8_t code, float scale) {
      const float f = (p.kv == ir::KvCacheDtype::kFp8E5m2 ? numeric::fp8_e5m2_to_f32(code)
                                                          : numeric::fp8_e4m3_to_f32(code)) *
                      scale;
      if (p.dtype == DType::kBF16) return uint32_t(numeric::f32_to_bf16(f));
      if (p.dtype == DType::kF16) return uint32_t(numeric::f32_to_f16(f));
      uint32_t bits = 0;
      std::memcpy(&bits, &f, 4);
      return bits;
    };
    for (int code = 0; code < 256; ++code) {
      tables.k[size_t(code)] = slab_bits(uint8_t(code), k_scale);
      tables.v[size_t(code)] = slab_bits(uint8_t(code), v_scale);
    }
    if (dtype_size(p.dtype) == 2) {  // the stage's decoders (fp8_staged)
      const bool e5m2 = p.kv == ir::KvCacheDtype::kFp8E5m2;
      const bool steps = fp8_decoder() == Fp8Decoder::kAvx2;
      tables.k16 = make_fp8_tables16(e5m2, p.dtype, k_scale, steps);
      tables.v16 = make_fp8_tables16(e5m2, p.dtype, v_scale, steps);
    }
    return tables;
  }

  // Walks keys [c0, c0 + n) of sequence s, KV head g block by block: block_run(j0, t0, count,
  // base) for each block's run of `count` tokens from slot t0 (position j0 of the keys, cache
  // element offset `base` of the block and head, the same in key_cache and value_cache). The
  // cache lines of the run two ahead are prefetched meanwhile: the stage's and the gather's
  // copies stall on each block's first reads (fp8 stage +2-4%; the gathers within the noise).
  template <class Visit>
  void for_each_block_run(const KernelArgs& args, int64_t s, int64_t g, int64_t c0, int64_t n,
                          Visit block_run) const {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const int64_t bs = p.block_size;
    const int64_t d = p.head_size;
    const Tensor& key_cache = args.tensor(query_arg() + 1);
    const Tensor& tables = args.tensor(query_arg() + 3);
    const auto* k_bytes = static_cast<const uint8_t*>(key_cache.data());
    const auto* v_bytes = static_cast<const uint8_t*>(args.tensor(query_arg() + 2).data());
    const int64_t esize = int64_t(key_cache.element_size());
    const int64_t x = ir::paged_key_x(p.dtype, p.kv);
    const int64_t width = tables.size(1);
    // The run starting at position j0: its slot, length and element offset.
    const auto run_at = [&](int64_t j0) {
      const int64_t token = c0 + j0;
      const int64_t t0 = token % bs;
      const int64_t block = load_i32(tables, s * width + token / bs);
      return std::array<int64_t, 3>{t0, std::min(bs - t0, n - j0),
                                    block * key_cache.stride(0) + g * key_cache.stride(1)};
    };
    // Keys from (slot t0, dims 0 .. x − 1) to (slot t0 + count − 1, dims D − x .. D − 1), values
    // from (dim 0, slot t0) to (dim D − 1, slot t0 + count − 1).
    const auto prefetch = [&](int64_t j0) {
      const auto [t0, count, base] = run_at(j0);
      const auto lines = [](const uint8_t* from, int64_t bytes) {
        for (int64_t i = 0; i < bytes; i += 64) _mm_prefetch(from + i, _MM_HINT_T0);
      };
      lines(k_bytes + (base + t0 * x) * esize, ((d / x - 1) * bs * x + count * x) * esize);
      lines(v_bytes + (base + t0) * esize, ((d - 1) * bs + count) * esize);
      return count;
    };
    int64_t ahead = n;  // the start of the run two ahead of the current one
    if (n > 0) {
      const int64_t first = run_at(0)[1];
      ahead = first < n ? first + prefetch(first) : n;
    }
    for (int64_t j0 = 0; j0 < n;) {
      if (ahead < n) ahead += prefetch(ahead);
      const auto [t0, count, base] = run_at(j0);
      block_run(j0, t0, count, base);
      j0 += count;
    }
  }

  // Gathers keys [c0, c0 + n) of sequence s, KV head g into slab positions [at, at + n).
  void gather(const KernelArgs& args, int64_t s, int64_t g, int64_t c0, int64_t n, int64_t at,
              const Fp8Tables& fp8_values, Buffers& buf) const {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const int first = query_arg();
    const Tensor& key_cache = args.tensor(first + 1);
    const Tensor& value_cache = args.tensor(first + 2);
    const Tensor& tables = args.tensor(first + 3);
    const int64_t x = ir::paged_key_x(p.dtype, p.kv);
    const int64_t bs = p.block_size;
    const int64_t d = p.head_size;
    const int64_t dp = align_up(d, kHeadPad);
    const int64_t chunk = chunk_;
    const int64_t width = tables.size(1);
    const auto for_each_run = [&](auto block_run) {
      for_each_block_run(args, s, g, c0, n, block_run);
    };
    const bool fp8 = p.kv != ir::KvCacheDtype::kAuto;
    if (dtype_size(p.dtype) == 2 && (!fp8 || fp8_staged())) {
      // 16-bit elements copied by transposes of 16 tokens (AVX-512) or 8 (SSE2): a K run
      // [16 tokens, 8 dims] of a group of 8 dims into those dim rows, 8 V dim rows into the
      // token rows; tails element-wise. At AVX-512, whole 64-byte slab rows where they fit: K
      // 32 tokens at a time (two 16-token runs, each in one block when c0 and bs are
      // multiples of 16), V 32 dims at a time. An fp8 cache
      // is first decoded run by run into a 16-bit legacy-layout stage by the call's tables.
      auto* k_dst = reinterpret_cast<uint16_t*>(buf.k_slab()) + at;
      auto* v_dst = reinterpret_cast<uint16_t*>(buf.v_slab()) + at * dp;
      constexpr int64_t kx = 8;  // the 16-bit legacy key layout's unit
      // Keys [first, count) and values [0, count) of the run at chunk position j0: K element
      // (token t, dim e) at k_run[(e / 8) · stride · 8 + t · 8 + e % 8], V at
      // v_run[e · stride + t].
      const auto copy_run = [&](int64_t j0, int64_t first, int64_t count, const uint16_t* k_run,
                                const uint16_t* v_run, int64_t stride) {
        for (int64_t e0 = 0; first < count && e0 < d; e0 += kx) {
          const uint16_t* run = k_run + (e0 / kx) * stride * kx;
          uint16_t* rows = k_dst + e0 * chunk + j0;
          int64_t t = first;
          if (avx512_) {
            for (; t + 16 <= count; t += 16) transpose_key_run16(run + t * kx, rows + t, chunk);
          }
          for (; t + 16 <= count; t += 16) {  // AVX2: tokens t .. t + 7 and t + 8 .. t + 15
            transpose8x8x2_u16(run + t * kx, kx, 8 * kx, rows + t, chunk, 8);
          }
          for (; t + 8 <= count; t += 8) transpose8x8_u16(run + t * kx, kx, rows + t, chunk);
          for (; t < count; ++t) {
            for (int64_t i = 0; i < kx; ++i) rows[i * chunk + t] = run[t * kx + i];
          }
        }
        // The IR keeps d a multiple of x (8 or 16).
        for (int64_t e0 = 0; e0 < d;) {
          const int64_t dims = avx512_ && e0 + 4 * kx <= d ? 4 * kx : kx;
          int64_t done = 0;  // tokens copied by the 32-dim transposes
          if (dims == 4 * kx) {
            for (; done + 16 <= count; done += 16) {
              transpose_value_dims32(v_run + e0 * stride + done, stride,
                                     v_dst + (j0 + done) * dp + e0, dp);
            }
          }
          for (int64_t e = e0; e < e0 + dims; e += kx) {
            const uint16_t* src = v_run + e * stride;
            uint16_t* tokens = v_dst + j0 * dp + e;
            int64_t t = done;
            if (avx512_) {
              for (; t + 16 <= count; t += 16) {
                transpose_value_dims8(src + t, stride, tokens + t * dp, dp);
              }
            }
            for (; t + 16 <= count; t += 16) {  // AVX2
              transpose8x8x2_u16(src + t, stride, 8, tokens + t * dp, dp, 8 * dp);
            }
            for (; t + 8 <= count; t += 8) transpose8x8_u16(src + t, stride, tokens + t * dp, dp);
            for (; t < count; ++t) {
              for (int64_t i = 0; i < kx; ++i) tokens[t * dp + i] = src[i * stride + t];
            }
          }
          e0 += dims;
        }
      };
      if (fp8) {
        // Stage: a run's keys as [D/8][count][8] words, its values as [D][count].
        const auto* k_codes = static_cast<const uint8_t*>(key_cache.data());
        const auto* v_codes = static_cast<const uint8_t*>(value_cache.data());
        uint16_t* k_stage = buf.k_stage.data();
        uint16_t* v_stage = buf.v_stage.data();
        for_each_run([&](int64_t j0, int64_t t0, int64_t count, int64_t base) {
          for (int64_t e0 = 0; e0 < d; e0 += x) {  // x = 16 dims per fp8 key run
            fp8_key_run_to_words(fp8_decoder(), k_codes + base + (e0 / x) * bs * x + t0 * x, count,
                                 fp8_values.k16, k_stage + e0 * count, k_stage + (e0 + kx) * count);
          }
          // A whole block's [D][bs] codes are one contiguous run (fp8_rows_to_words sees it).
          fp8_rows_to_words(fp8_decoder(), v_codes + base + t0, bs, d, count, fp8_values.v16,
                            v_stage, count);
          copy_run(j0, 0, count, k_stage, v_stage, count);
        });
        return;
      }
      const auto* k_src = static_cast<const uint16_t*>(key_cache.data());
      const auto* v_src = static_cast<const uint16_t*>(value_cache.data());
      const int64_t paired = avx512_ && bs % 16 == 0 && c0 % 16 == 0 ? n / 32 * 32 : 0;
      const auto key_run = [&](int64_t j) {  // the K run of chunk position j, dims 0 .. x - 1
        const int64_t token = c0 + j;
        const int64_t block = load_i32(tables, s * width + token / bs);
        return k_src + block * key_cache.stride(0) + g * key_cache.stride(1) + token % bs * x;
      };
      for (int64_t j = 0; j < paired; j += 32) {
        const uint16_t* run_a = key_run(j);
        const uint16_t* run_b = key_run(j + 16);
        for (int64_t e0 = 0; e0 < d; e0 += x) {
          const int64_t off = (e0 / x) * bs * x;
          transpose_key_runs32(run_a + off, run_b + off, k_dst + e0 * chunk + j, chunk);
        }
      }
      for_each_run([&](int64_t j0, int64_t t0, int64_t count, int64_t base) {
        // Keys before `paired` were copied above.
        copy_run(j0, std::clamp<int64_t>(paired - j0, 0, count), count, k_src + base + t0 * x,
                 v_src + base + t0, bs);
      });
      return;
    }
    // f32 slabs element by element: K a [bs, x] run per group of x dims, V a [bs] run per dim,
    // read contiguously and scattered into the slabs. `convert` maps one cache element (by index)
    // to the slab's element type (every 16-bit slab took the copies above).
    const auto walk = [&](auto* k_dst, auto* v_dst, auto convert_k, auto convert_v) {
      for_each_run([&](int64_t j0, int64_t t0, int64_t count, int64_t base) {
        for (int64_t e0 = 0; e0 < d; e0 += x) {
          const int64_t run = base + (e0 / x) * bs * x;
          for (int64_t t = 0; t < count; ++t) {
            for (int64_t i = 0; i < x; ++i) {
              k_dst[(e0 + i) * chunk + j0 + t] = convert_k(run + (t0 + t) * x + i);
            }
          }
        }
        for (int64_t e = 0; e < d; ++e) {
          const int64_t run = base + e * bs + t0;
          for (int64_t t = 0; t < count; ++t) v_dst[(j0 + t) * dp + e] = convert_v(run + t);
        }
      });
    };
    if (p.kv != ir::KvCacheDtype::kAuto) {
      const auto* k_src = static_cast<const uint8_t*>(key_cache.data());
      const auto* v_src = static_cast<const uint8_t*>(value_cache.data());
      walk(
          reinterpret_cast<uint32_t*>(buf.k_slab()) + at,
          reinterpret_cast<uint32_t*>(buf.v_slab()) + at * dp,
          [&](int64_t i) { return fp8_values.k[k_src[i]]; },
          [&](int64_t i) { return fp8_values.v[v_src[i]]; });
    } else {
      const auto* k_src = static_cast<const uint32_t*>(key_cache.data());
      const auto* v_src = static_cast<const uint32_t*>(value_cache.data());
      walk(
          reinterpret_cast<uint32_t*>(buf.k_slab()) + at,
          reinterpret_cast<uint32_t*>(buf.v_slab()) + at * dp, [&](int64_t i) { return k_src[i]; },
          [&](int64_t i) { return v_src[i]; });
    }
  }

  // Calls visit(a, b, rows) for each run [a, b) of chunk positions (the chunk: n tokens from
  // c0) whose sparse blocks the same rows attend, at least one (rows: a flag per row of the
  // group).
  template <class Visit>
  void for_each_sparse_run(const SparsePattern& sparse, int64_t c0, int64_t n, Buffers& buf,
                           Visit visit) const {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const int64_t group = p.head_count_q / p.head_count_kv;
    const auto rows_of = [&](int64_t kb, std::vector<uint8_t>& rows) {
      bool any = false;
      for (int64_t i = 0; i < group; ++i) {
        rows[size_t(i)] = sparse.attends(i, kb);
        any = any || rows[size_t(i)];
      }
      return any;
    };
    const auto end_of = [&](int64_t kb) { return std::min(n, (kb + 1) * sparse.block - c0); };
    for (int64_t a = 0; a < n;) {
      int64_t kb = (c0 + a) / sparse.block;
      const bool any = rows_of(kb, buf.attended);
      int64_t b = end_of(kb);
      while (b < n) {
        kb = (c0 + b) / sparse.block;
        rows_of(kb, buf.next_attended);
        if (buf.next_attended != buf.attended) break;
        b = end_of(kb);
      }
      if (any) visit(a, b, buf.attended.data());
      a = b;
    }
  }

  // The keys of chunk positions [a, b) (the chunk starts at token c0 of a sequence of len
  // tokens) for the rows that attend them (`attends`: a flag per row of the group; nullptr:
  // every row), on the passes' state in buf.calls. kv_begin is a's token group; the slab's keys
  // and values before a in it (an earlier run's, or stale) are zeroed: the kernel weighs them
  // by p = 0, and 0·inf would be NaN. Where only some rows attend, those rows run as passes of
  // their own (attend_rows), so no row weighs a key it does not attend, finite or not (§2.5:
  // such keys are not read).
  void attend_run(Buffers& buf, int64_t len, int64_t c0, int64_t a, int64_t b,
                  const uint8_t* attends) const {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const int64_t group = p.head_count_q / p.head_count_kv;
    const int64_t begin = a / token_group_ * token_group_;
    zero_slab(buf, begin, a);
    const auto range = [&](CpuAttnTileArgs& c) {
      c.kv_begin = begin;
      c.first_offset = begin;  // the chunk is the kernel's one block
      c.kv_end = b;
      for (int64_t i = 0; i < c.rows; ++i) {
        c.lo[i] = int32_t(a);
        c.hi[i] = int32_t(b - 1);
        c.pos[i] = int32_t(len - 1 - c0);  // ALiBi: j_local − pos = (c0 + j_local) − (L − 1)
      }
    };
    const auto fn = reinterpret_cast<KernelFn>(const_cast<void*>(code_));
    if (attends == nullptr || std::all_of(attends, attends + group, [](uint8_t f) { return f; })) {
      for (int64_t ps = 0; ps < (group + max_rows_ - 1) / max_rows_; ++ps) {
        range(buf.calls[size_t(ps)]);
        fn(&buf.calls[size_t(ps)], 0, 0);
      }
      return;
    }
    buf.rows.clear();
    for (int64_t i = 0; i < group; ++i) {
      if (attends[i]) buf.rows.push_back(i);
    }
    const int64_t dp = align_up(p.head_size, kHeadPad);
    const int64_t q_bytes = (dpbf16_ ? 2 : 4) * dp;
    auto* q_all = reinterpret_cast<uint8_t*>(buf.q.data());
    auto* q_rows = reinterpret_cast<uint8_t*>(buf.q_rows.data());
    // Passes of the rows in buf.rows: their q, acc and softmax state copied in and back.
    for (size_t r0 = 0; r0 < buf.rows.size(); r0 += size_t(max_rows_)) {
      CpuAttnTileArgs c = buf.calls[0];  // the shared fields
      c.rows = std::min<int64_t>(max_rows_, int64_t(buf.rows.size() - r0));
      c.q = q_rows;
      c.acc = buf.acc_rows.data();
      for (int64_t i = 0; i < c.rows; ++i) {
        const int64_t row = buf.rows[r0 + size_t(i)];
        const CpuAttnTileArgs& owner = buf.calls[size_t(row / max_rows_)];
        std::memcpy(q_rows + i * q_bytes, q_all + row * q_bytes, size_t(q_bytes));
        std::memcpy(c.acc + i * dp, buf.acc.data() + row * dp, size_t(dp) * 4);
        c.m[i] = owner.m[row % max_rows_];
        c.l[i] = owner.l[row % max_rows_];
        c.slope[i] = owner.slope[row % max_rows_];
      }
      range(c);
      fn(&c, 0, 0);
      for (int64_t i = 0; i < c.rows; ++i) {
        const int64_t row = buf.rows[r0 + size_t(i)];
        CpuAttnTileArgs& owner = buf.calls[size_t(row / max_rows_)];
        std::memcpy(buf.acc.data() + row * dp, c.acc + i * dp, size_t(dp) * 4);
        owner.m[row % max_rows_] = c.m[i];
        owner.l[row % max_rows_] = c.l[i];
      }
    }
  }

  // Zeroes slab positions [a, b): keys (dim rows) and values (token rows).
  void zero_slab(Buffers& buf, int64_t a, int64_t b) const {
    if (a >= b) return;
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const int64_t esize = int64_t(dtype_size(p.dtype));
    const int64_t dp = align_up(p.head_size, kHeadPad);
    const int64_t chunk = chunk_;
    auto* k = reinterpret_cast<uint8_t*>(buf.k_slab());
    auto* v = reinterpret_cast<uint8_t*>(buf.v_slab());
    for (int64_t e = 0; e < dp; ++e) {
      std::memset(k + (e * chunk + a) * esize, 0, size_t((b - a) * esize));
    }
    std::memset(v + a * dp * esize, 0, size_t((b - a) * dp * esize));
  }

  // The query's argument index: v2's outputs exp_sums, max_logits and tmp_out come first.
  int query_arg() const {
    return spec_.op == OpKind::kPagedAttentionV2 ? 4 : 1;
  }

  // A task's query and ALiBi slopes tensors, its sequence length and its keys [t0, t1): the
  // sequence's, or v2's partition `part`.
  struct TaskInputs {
    const Tensor& query;
    const Tensor& slopes;
    int64_t len, t0, t1;
  };
  TaskInputs task_inputs(const KernelArgs& args, int64_t s, int64_t part) const {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const int first = query_arg();
    const int64_t len = load_i32(args.tensor(first + 4), s);
    if (spec_.op == OpKind::kPagedAttentionV1) {
      return {args.tensor(first), args.tensor(first + 5), len, 0, len};
    }
    return {args.tensor(first), args.tensor(first + 5), len, part * p.partition_size,
            std::min(len, (part + 1) * p.partition_size)};
  }

  // Writes a task's result for output row `row` (sequence · Hq + query head): v1 `normalised`
  // (acc / (l + 1e-6)) into out; v2 the partition's exp sum `l`, max logit `m` and `normalised`
  // into exp_sums, max_logits and tmp_out (reduced by finish()).
  void write_row(const KernelArgs& args, int64_t row, int64_t part, int64_t parts, float l, float m,
                 const float* normalised) const {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const int64_t d = p.head_size;
    if (spec_.op == OpKind::kPagedAttentionV1) {
      round_row(element_at(args.tensor(0).data(), p.dtype, row * d), p.dtype, normalised, d);
      return;
    }
    args.tensor(1).data_as<float>()[row * parts + part] = l;
    args.tensor(2).data_as<float>()[row * parts + part] = m;
    round_row(element_at(args.tensor(3).data(), p.dtype, (row * parts + part) * d), p.dtype,
              normalised, d);
  }

  void run_task(const KernelArgs& args, int64_t s, int64_t g, int64_t part, int64_t parts,
                const Fp8Tables& fp8_values, Buffers& buf) const {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const auto [query, slopes, len, t0, t1] = task_inputs(args, s, part);
    const int64_t group = p.head_count_q / p.head_count_kv;
    const int64_t d = p.head_size;
    const int64_t dp = align_up(d, kHeadPad);
    const int64_t chunk = chunk_;
    const int64_t esize = int64_t(dtype_size(p.dtype));
    // The slabs' padded head dims were zeroed when the buffers were made and are never
    // written; key slots past a chunk's end hold finite values of an earlier chunk (masked).
    std::fill(buf.q.begin(), buf.q.end(), 0.0f);
    std::fill(buf.acc.begin(), buf.acc.end(), 0.0f);
    for (int64_t i = 0; i < group; ++i) {
      const int64_t h = g * group + i;
      const int64_t at = s * query.stride(0) + h * query.stride(1);
      if (dpbf16_) {
        std::memcpy(reinterpret_cast<uint16_t*>(buf.q.data()) + i * dp,
                    static_cast<const uint8_t*>(query.data()) + at * esize, size_t(d * 2));
      } else {
        widen_row(buf.q.data() + i * dp, p.dtype, element_at(query.data(), p.dtype, at), d);
      }
    }
    const int64_t passes = (group + max_rows_ - 1) / max_rows_;
    const int32_t zero_block = 0;
    float* scratch = align64(buf.scratch.data());
    for (int64_t ps = 0; ps < passes; ++ps) {
      CpuAttnTileArgs& c = buf.calls[size_t(ps)];
      const int64_t r0 = ps * max_rows_;
      c = CpuAttnTileArgs{};
      c.rows = std::min<int64_t>(max_rows_, group - r0);
      c.q = dpbf16_ ? static_cast<const void*>(reinterpret_cast<uint16_t*>(buf.q.data()) + r0 * dp)
                    : static_cast<const void*>(buf.q.data() + r0 * dp);
      c.acc = buf.acc.data() + r0 * dp;
      c.block_row = &zero_block;
      c.k_base = reinterpret_cast<const uint8_t*>(buf.k_slab());
      c.v_base = reinterpret_cast<const uint8_t*>(buf.v_slab());
      c.scratch = scratch;
      c.scale = float(args.scalar(0));
      for (int64_t i = 0; i < c.rows; ++i) {
        c.m[i] = -FLT_MAX;
        c.slope[i] = p.alibi ? slopes.data_as<const float>()[g * group + r0 + i] : 0.0f;
      }
    }
    const SparsePattern sparse = sparse_pattern(args, g, len);
    std::fill(buf.any_attended.begin(), buf.any_attended.end(), uint8_t(0));
    for (int64_t c0 = t0; c0 < t1; c0 += chunk) {
      const int64_t n = std::min(chunk, t1 - c0);
      if (sparse.vert == 0) {
        gather(args, s, g, c0, n, 0, fp8_values, buf);
        attend_run(buf, len, c0, 0, n, nullptr);
        continue;
      }
      // Block-sparse: a run no row attends is neither gathered nor computed (§2.5: its keys
      // and values are not read).
      for_each_sparse_run(sparse, c0, n, buf, [&](int64_t a, int64_t b, const uint8_t* rows) {
        for (int64_t i = 0; i < group; ++i) buf.any_attended[size_t(i)] |= rows[i];
        gather(args, s, g, c0 + a, b - a, a, fp8_values, buf);
        attend_run(buf, len, c0, a, b, rows);
      });
    }
    // out (v1) or the partition's max logit, exp sum and rnd_T(acc / (S + 1e-6)) (v2).
    for (int64_t i = 0; i < group; ++i) {
      const CpuAttnTileArgs& c = buf.calls[size_t(i / max_rows_)];
      const int64_t k = i % max_rows_;
      const int64_t row = s * p.head_count_q + g * group + i;
      const float inv = 1.0f / (c.l[k] + 1e-6f);
      float* acc = buf.acc.data() + i * dp;  // normalised in place: the task is done with it
      for (int64_t e = 0; e < d; ++e) acc[e] *= inv;
      // A v2 partition that a row attends nowhere (block-sparse): every logit is −FLT_MAX = m,
      // so vLLM's sum counts e^0 = 1 per token (§2.5); its output and max are the kernel's 0
      // and −FLT_MAX.
      const bool masked = sparse.vert != 0 && !buf.any_attended[size_t(i)];
      write_row(args, row, part, parts, masked ? float(t1 - t0) : c.l[k], c.m[k], acc);
    }
  }

  // ---- the direct kernel ----------------------------------------------------------------

  // Per-thread working memory of the direct kernel.
  struct DirectBuffers {
    static constexpr int64_t kHalf = kPagedDirectHalf, kGroup = 2 * kPagedDirectHalf;
    DirectBuffers(const ir::PagedAttentionParams& p, int64_t chunk, DirectLayout layout)
        : layout(layout),
          passes((p.head_count_q / p.head_count_kv + kPagedDirectRows - 1) / kPagedDirectRows),
          q(static_cast<size_t>(passes * kPagedDirectRows * layout.head)),
          acc(q.size()),
          probs(static_cast<size_t>(align_up(chunk, kGroup) * kPagedDirectRows + 16)),
          // Two more halves (zeros): the kernel reads the pointers of the group after the last
          // one to prefetch its keys.
          k_half(static_cast<size_t>(align_up(chunk, kGroup) / kHalf + 2)),
          v_half(k_half.size()),
          zeros(static_cast<size_t>(layout.head * layout.block)),
          v_stage(zeros.size() + 32),
          k_stage(layout.staged ? v_stage.size() : 0),
          out(static_cast<size_t>(p.head_size)),
          calls(static_cast<size_t>(passes)) {}
    DirectLayout layout;
    int64_t passes;
    std::vector<float> q, acc, probs;  // probs: 64-byte aligned by align64 (the kernel's vmovaps)
    std::vector<const uint16_t*> k_half, v_half;
    // A block of zeros (the keys and values of halves past the chunk's keys) and a value block:
    // in place, the one in which the chunk's last keys are staged with zeros past them (slots
    // past the sequence may hold anything, and p = 0 times a NaN is NaN); staged, with k_stage,
    // the chunk's decoded or copied keys and values (both 64-byte aligned by align64).
    std::vector<uint16_t> zeros, v_stage, k_stage;
    std::vector<float> out;              // one output row before rounding
    std::vector<PagedDirectArgs> calls;  // one per pass, holding its softmax state
  };

  // Points the direct kernel's halves at chunk [c0, c0 + n) of sequence s, KV head g; halves
  // past the chunk point at zeros. When the chunk ends inside a half, the values of that half
  // (of its whole group where a group's value rows are read as one line: both halves' pointers
  // then move into the stage) are staged with zeros past the chunk's keys. Keys are read in
  // place: the kernel masks the logits past `tokens`.
  void point_halves(const KernelArgs& args, int64_t s, int64_t g, int64_t c0, int64_t n,
                    DirectBuffers& buf) const {
    constexpr int64_t kHalf = DirectBuffers::kHalf, kGroup = DirectBuffers::kGroup;
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const int first = query_arg();
    const Tensor& key_cache = args.tensor(first + 1);
    const Tensor& value_cache = args.tensor(first + 2);
    const Tensor& tables = args.tensor(first + 3);
    const int64_t bs = p.block_size;
    const int64_t d = p.head_size;
    const int64_t width = tables.size(1);
    const bool contiguous = buf.layout.contiguous;
    const auto* k_src = static_cast<const uint16_t*>(key_cache.data());
    const auto* v_src = static_cast<const uint16_t*>(value_cache.data());
    const int64_t halves = align_up(n, kGroup) / kHalf;
    for (int64_t h = 0; h < halves + 2; ++h) {
      const int64_t token = c0 + kHalf * h;  // the half's first key
      if (token >= c0 + n) {
        buf.k_half[size_t(h)] = buf.zeros.data();
        buf.v_half[size_t(h)] = buf.zeros.data();
        continue;
      }
      const int64_t block = load_i32(tables, s * width + token / bs);
      buf.k_half[size_t(h)] =
          k_src + block * key_cache.stride(0) + g * key_cache.stride(1) + token % bs * 8;
      buf.v_half[size_t(h)] =
          v_src + block * value_cache.stride(0) + g * value_cache.stride(1) + token % bs;
    }
    const int64_t unit = contiguous ? kGroup : kHalf;  // keys per value read
    if (n % unit == 0) return;
    const int64_t first_half = (n - 1) / unit * unit / kHalf;  // of the staged unit
    const int64_t offset = (c0 + kHalf * first_half) % bs;
    const int64_t keys = n - kHalf * first_half;
    const uint16_t* src = buf.v_half[size_t(first_half)];
    for (int64_t e = 0; e < d; ++e) {
      uint16_t* row = buf.v_stage.data() + e * bs + offset;
      std::fill(row, row + unit, uint16_t(0));
      std::copy(src + e * bs, src + e * bs + keys, row);
    }
    buf.v_half[size_t(first_half)] = buf.v_stage.data() + offset;
    if (unit == kGroup) {  // the AVX2 kernel reads a group's second half by its own pointer
      buf.v_half[size_t(first_half + 1)] = buf.v_stage.data() + offset + kHalf;
    }
  }

  // Decodes (fp8) or copies (16-bit) chunk [c0, c0 + n) of sequence s, KV head g into the stage
  // (one block of buf.layout.block tokens in the 16-bit legacy layout, the head padded with zero
  // dims that are never written; fp8 as rnd_T(fp8 · scale) by the call's tables, the gather's
  // values), zeroes its values past the chunk's keys up to their group's end (the stage's stale
  // keys there are masked by the kernel, values weighed by p = 0 must be finite), and points the
  // halves at it, those past the chunk's groups at zeros.
  void stage_chunk(const KernelArgs& args, int64_t s, int64_t g, int64_t c0, int64_t n,
                   const Fp8Tables& fp8_values, DirectBuffers& buf) const {
    constexpr int64_t kHalf = DirectBuffers::kHalf, kGroup = DirectBuffers::kGroup;
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const int first = query_arg();
    const auto* k_cache = static_cast<const uint8_t*>(args.tensor(first + 1).data());
    const auto* v_cache = static_cast<const uint8_t*>(args.tensor(first + 2).data());
    const bool fp8 = p.kv != ir::KvCacheDtype::kAuto;
    const int64_t x = ir::paged_key_x(p.dtype, p.kv);  // a key run's dims: 16 (fp8) or 8
    const int64_t bs = p.block_size;
    const int64_t d = p.head_size;
    const int64_t stride = buf.layout.block;
    uint16_t* k_stage = align64(buf.k_stage.data());
    uint16_t* v_stage = align64(buf.v_stage.data());
    for_each_block_run(args, s, g, c0, n, [&](int64_t j0, int64_t t0, int64_t count, int64_t base) {
      if (fp8) {
        // Key run e0 / 16 ([bs][16] codes) to the stage's runs e0 / 8 and e0 / 8 + 1.
        for (int64_t e0 = 0; e0 < d; e0 += x) {
          fp8_key_run_to_words(fp8_decoder(), k_cache + base + (e0 / x) * bs * x + t0 * x, count,
                               fp8_values.k16, k_stage + e0 * stride + j0 * 8,
                               k_stage + (e0 + 8) * stride + j0 * 8);
        }
        fp8_rows_to_words(fp8_decoder(), v_cache + base + t0, bs, d, count, fp8_values.v16,
                          v_stage + j0, stride);
        return;
      }
      const auto* k_src = reinterpret_cast<const uint16_t*>(k_cache) + base;
      const auto* v_src = reinterpret_cast<const uint16_t*>(v_cache) + base;
      // Key runs e0 / 8 ([count][8] words each, bs · 8 apart) to the stage's (stride · 8 apart).
      copy_stage_rows(k_src + t0 * x, bs * x, d / x, count * x, k_stage + j0 * x, stride * x);
      copy_stage_rows(v_src + t0, bs, d, count, v_stage + j0, stride);
    });
    const int64_t end = align_up(n, kGroup);
    if (end != n) {
      for (int64_t e = 0; e < d; ++e) {
        std::fill(v_stage + e * stride + n, v_stage + e * stride + end, uint16_t(0));
      }
    }
    for (int64_t h = 0; h < end / kHalf + 2; ++h) {
      const bool inside = h < end / kHalf;
      buf.k_half[size_t(h)] = inside ? k_stage + h * kHalf * 8 : buf.zeros.data();
      buf.v_half[size_t(h)] = inside ? v_stage + h * kHalf : buf.zeros.data();
    }
  }

  // copy_rows_u16 at AVX-512; at AVX2 row by row.
  void copy_stage_rows(const uint16_t* src, int64_t src_stride, int64_t rows, int64_t count,
                       uint16_t* dst, int64_t dst_stride) const {
    if (avx512_) {
      copy_rows_u16(src, src_stride, rows, count, dst, dst_stride);
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dst + r * dst_stride, src + r * src_stride, size_t(count) * 2);
    }
  }

  void run_direct_task(const KernelArgs& args, int64_t s, int64_t g, int64_t part, int64_t parts,
                       const Fp8Tables& fp8_values, DirectBuffers& buf) const {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const auto [query, slopes, len, t0, t1] = task_inputs(args, s, part);
    const int64_t group = p.head_count_q / p.head_count_kv;
    const int64_t d = p.head_size;
    const int64_t head = buf.layout.head;  // the kernel's: d, or padded (its q dims past d zero)
    std::fill(buf.acc.begin(), buf.acc.end(), 0.0f);
    for (int64_t ps = 0; ps < buf.passes; ++ps) {
      PagedDirectArgs& c = buf.calls[size_t(ps)];
      const int64_t r0 = ps * kPagedDirectRows;
      c = PagedDirectArgs{};
      c.rows = std::min<int64_t>(kPagedDirectRows, group - r0);
      c.q = buf.q.data() + r0 * head;
      c.acc = buf.acc.data() + r0 * head;
      c.k_half = buf.k_half.data();
      c.v_half = buf.v_half.data();
      c.probs = align64(buf.probs.data());
      c.scale = float(args.scalar(0));
      for (int64_t i = 0; i < c.rows; ++i) {
        const int64_t h = g * group + r0 + i;
        c.m[i] = -FLT_MAX;
        c.slope[i] = p.alibi ? slopes.data_as<const float>()[h] : 0.0f;
        widen_row(buf.q.data() + (r0 + i) * head, p.dtype,
                  element_at(query.data(), p.dtype, s * query.stride(0) + h * query.stride(1)), d);
      }
    }
    const auto fn = reinterpret_cast<KernelFn>(const_cast<void*>(code_));
    for (int64_t c0 = t0; c0 < t1; c0 += chunk_) {
      const int64_t n = std::min(chunk_, t1 - c0);
      if (buf.layout.staged) {
        stage_chunk(args, s, g, c0, n, fp8_values, buf);
      } else {
        point_halves(args, s, g, c0, n, buf);
      }
      for (PagedDirectArgs& c : buf.calls) {
        c.tokens = n;
        c.alibi_offset = int32_t(c0 - (len - 1));
        fn(&c, 0, 0);
      }
    }
    // out (v1) or the partition's max logit, exp sum and rnd_T(acc / (S + 1e-6)) (v2); acc is
    // [dim][row] per pass, rows rounded up to 1, 2, 4 or 8.
    for (int64_t i = 0; i < group; ++i) {
      const PagedDirectArgs& c = buf.calls[size_t(i / kPagedDirectRows)];
      const int64_t k = i % kPagedDirectRows;
      const int64_t row_pad = paged_direct_row_pad(c.rows);
      const int64_t row = s * p.head_count_q + g * group + i;
      const float inv = 1.0f / (c.l[k] + 1e-6f);
      for (int64_t e = 0; e < d; ++e) buf.out[size_t(e)] = c.acc[e * row_pad + k] * inv;
      write_row(args, row, part, parts, c.l[k], c.m[k], buf.out.data());
    }
  }

  // Zero rows for empty sequences (both versions) and the v2 reduce (§3.2).
  void finish(const KernelArgs& args, int64_t parts) const {
    const auto& p = spec_.get<ir::PagedAttentionParams>();
    const bool v2 = spec_.op == OpKind::kPagedAttentionV2;
    const Tensor& seq_lens = args.tensor(query_arg() + 4);
    const int64_t d = p.head_size;
    void* out = args.tensor(0).data();
    std::vector<float> result(static_cast<size_t>(d)), partial(result.size());
    for (int64_t s = 0; s < seq_lens.size(0); ++s) {
      const int64_t len = load_i32(seq_lens, s);
      if (len > 0 && !v2) continue;
      const int64_t n = len <= 0 ? 0 : (len + p.partition_size - 1) / p.partition_size;
      for (int64_t h = 0; h < p.head_count_q; ++h) {
        const int64_t row = s * p.head_count_q + h;
        std::fill(result.begin(), result.end(), 0.0f);
        const float* sums = v2 ? args.tensor(1).data_as<const float>() + row * parts : nullptr;
        const float* maxes = v2 ? args.tensor(2).data_as<const float>() + row * parts : nullptr;
        const void* tmp = v2 ? args.tensor(3).data() : nullptr;
        if (n == 1) {
          widen_row(result.data(), p.dtype, element_at(tmp, p.dtype, row * parts * d), d);
        } else if (n > 1) {
          float max_all = -std::numeric_limits<float>::infinity();
          for (int64_t pi = 0; pi < n; ++pi) max_all = std::max(max_all, maxes[pi]);
          float weight_sum = 0.0f;
          for (int64_t pi = 0; pi < n; ++pi) {
            const float w = sums[pi] * std::exp(maxes[pi] - max_all);
            weight_sum += w;
            widen_row(partial.data(), p.dtype, element_at(tmp, p.dtype, (row * parts + pi) * d), d);
            for (int64_t e = 0; e < d; ++e) result[size_t(e)] += w * partial[size_t(e)];
          }
          for (float& v : result) v /= weight_sum + 1e-6f;
        }
        round_row(element_at(out, p.dtype, row * d), p.dtype, result.data(), d);
      }
    }
  }

  OpSpec spec_;
  bool direct_;    // the direct kernel (else the gather into the tile kernel's layout)
  int64_t chunk_;  // keys per chunk (one direct call, or one gathered slab)
  OpSpec inner_;
  Config config_;
  const void* code_;
  size_t size_;
  bool dpbf16_;
  bool avx512_;             // the gather's 16-token transposes, the stage's copies
  Fp8Decoder fp8_decoder_;  // the fastest one the level runs
  int max_rows_;
  int token_group_;  // the kernel's keys per step: kv_begin's unit
};

}  // namespace

Result<std::vector<uint8_t>> generate_paged_attention(const OpSpec& spec, const Config& config,
                                                      X86Isa isa) {
  const Result<bool> direct = direct_for(spec, config, isa);
  if (!direct.is_ok()) return direct.status();
  const Result<int64_t> chunk = chunk_for(spec, config, direct.value());
  if (!chunk.is_ok()) return chunk.status();
  if (direct.value()) {
    const auto& p = spec.get<ir::PagedAttentionParams>();
    const DirectLayout layout = direct_layout(p, chunk.value());
    ir::PagedAttentionParams read = p;  // the layout the kernel reads: the cache or the stage
    read.head_size = layout.head;
    read.block_size = layout.block;
    read.kv = ir::KvCacheDtype::kAuto;
    return generate_paged_direct(read, layout.contiguous, direct_row_counts(p), isa);
  }
  return generate_cpu_attention(inner_spec(spec, chunk.value()), config, isa);
}

std::shared_ptr<const Executable> make_paged_attention_executable(const OpSpec& spec,
                                                                  const Config& config, X86Isa isa,
                                                                  const void* code, size_t size) {
  // The code was generated with this config, so generate_paged_attention has checked it.
  const bool direct = direct_for(spec, config, isa).value();
  return std::make_shared<PagedAttentionExecutable>(
      spec, config, isa, direct, chunk_for(spec, config, direct).value(), code, size);
}

}  // namespace jit::codegen::x86
