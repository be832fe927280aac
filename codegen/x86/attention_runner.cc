// The executables of cpu_attention_with_kv_cache and cpu_attn_reshape_and_cache on x86: argument
// checks, the work partition, Q packing, OpenMP scheduling, the split merge and the output
// rounding around the generated kernels of attention_kernel.cc.
//
// Partition (KILN; the spec leaves it to the implementation as long as results do not depend
// on it). The rows of a request's KV head g are its (query token, head-in-group) pairs,
// token-major (§3.4.2); consecutive rows go in passes of at most max_rows (one kernel call
// each). A task is up to `q_passes` consecutive passes of one (request, g) and one KV split.
// Inside a task the KV range is walked in tiles of `kv_tile` keys, and every pass of the task
// runs over a tile before the next tile: a tile of K and V is read from memory once per task
// and from L1/L2 by the other passes. When there are fewer tasks than 2 x threads (decode
// batches), each task's KV range is cut into splits of at least `min_split` keys
// (flash-decoding): every split writes its partial (acc, m, l), and a merge pass combines
//   m = max_k m_k,  l = Σ_k l_k e^(m_k − m),  acc = Σ_k acc_k e^(m_k − m)
// before out = acc / l is rounded to the query dtype. The sink σ joins only the first split
// (m = σ, l = 1), so it is counted once.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "codegen/ref/ref.h"
#include "codegen/x86/attention_kernel.h"
#include "codegen/x86/generator.h"
#include "codegen/x86/host_rows.h"
#include "codegen/x86/paged_copy.h"
#include "ir/check_args.h"
#include "ir/params_cpu.h"

namespace jit::codegen::x86 {
namespace {

using ir::CpuAttnIsa;

// Config knobs (docs/attention.md):
//   threads    OpenMP threads (0 = omp_get_max_threads()).
//   kv_tile    keys per tile inside a task (rounded to the token group).
//   q_passes   passes (of max_rows rows) per task that share each KV tile.
//   min_split  fewest keys in a KV split; 0 disables splitting.
//   dpbf16     1 / 0: vdpbf16ps or the fp32 path where both serve (kDpbf16Knob; read by the
//              generator, so it is part of the code, and checked there).
//   predecode  1 / 0: an fp8 cache on the fp32 path decoded once per KV tile into bf16 words
//              (ThreadBuffers, decode_tile) or by the kernel in every pass (kPredecodeKnob;
//              part of the code, checked by the generator).
//   chunk      paged_attention_v1/v2: keys per kernel call (kPagedChunkKnob; part of the code,
//              and checked by the generator).
//   direct     paged_attention_v1/v2: 1 / 0 the direct kernel or the gather (kPagedDirectKnob;
//              part of the code, checked by the generator).
constexpr std::string_view kThreads = "threads";
constexpr std::string_view kKvTile = "kv_tile";
constexpr std::string_view kMinSplit = "min_split";
constexpr int64_t kDefaultKvTile = 512;
constexpr int64_t kDefaultMinSplit = 256;

int64_t align_down(int64_t v, int64_t a) {
  return v / a * a;
}
int64_t align_up(int64_t v, int64_t a) {
  return (v + a - 1) / a * a;
}

// The metadata must be what cpu_attn_get_scheduler_metadata writes for this call. Its format
// belongs to the scheduler (the ref backend's, codegen/ref/ref_cpu.cc), so instead of parsing
// it, the blob is rebuilt with that scheduler for this call's window, with KV splitting on and
// off, and compared byte for byte. The partition itself is this runner's own.
Status check_metadata(std::string_view op, const ir::CpuAttentionParams& p, const Tensor& metadata,
                      const Tensor& seq_lens, const Tensor& qsl, int64_t num_req, int64_t left,
                      int64_t right) {
  const int64_t size = ref::cpu_attn_metadata_bytes();
  if (metadata.numel() != size) {
    return invalid_argument(
        fmt::format("{}: argument 'scheduler_metadata' ({}) must have {} bytes (built by "
                    "cpu_attn_get_scheduler_metadata)",
                    op, metadata.describe(), size));
  }
  const OpSpec sched =
      OpSpec::make(OpKind::kCpuAttnGetSchedulerMetadata,
                   ir::CpuAttnSchedulerParams{p.isa, p.dtype, p.head_size, p.head_count_q,
                                              p.head_count_kv, p.causal});
  const int64_t window = left == -1 ? -1 : left + 1;
  // The scheduler's window conversion (§3.4.1) must give back this call's right edge.
  const int64_t expected_right = p.causal ? 0 : (window == -1 ? -1 : window - 1);
  if (right == expected_right) {
    std::vector<int8_t> blob(static_cast<size_t>(size));
    for (double split : {1.0, 0.0}) {
      Tensor t(blob.data(), DType::kI8, {size});
      const Status s =
          ref::run(sched, KernelArgs({t, seq_lens, qsl}, {double(num_req), double(window), split}));
      if (s.is_ok() && std::memcmp(blob.data(), metadata.data(), size_t(size)) == 0) {
        return Status::ok();
      }
    }
  }
  return invalid_argument(fmt::format(
      "{}: argument 'scheduler_metadata' was not built by cpu_attn_get_scheduler_metadata for "
      "this call's isa, dtype, heads, causal flag, sliding window ({}, {}), seq_lens and "
      "query_start_loc",
      op, left, right));
}

// One (request, kv head) row range: rows [row_begin, row_end) of its q_len·group rows, and
// one KV split [kv_begin, kv_end) of it.
struct Task {
  int64_t request = 0;
  int64_t kv_head = 0;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t kv_begin = 0;
  int64_t kv_end = 0;
  int64_t split = 0;     // index of this split in its chain
  int64_t partial = -1;  // first float of its partial state, or -1 (written directly)
};

// Keys of request r that row `row` (token-major (token, head-in-group)) may see: [lo, hi]; the
// row's position pos.
struct RowRange {
  int64_t lo, hi, pos;
};

// One OpenMP thread's buffers for its tasks: the calls of a task's passes, its packed query rows
// (fp32, or bf16 on the vdpbf16ps path), its accumulators, the kernel's scratch (64-byte
// aligned), the rows' key ranges, and for a predecoded fp8 cache the words of one KV tile's
// blocks (K slabs, then V slabs, `slab` words each) with the block ids 0, 1, ... the kernel
// reads them by.
struct ThreadBuffers {
  ThreadBuffers(int64_t rows, int64_t max_rows, int64_t head_size, int64_t tile_blocks,
                int64_t block_size)
      : calls(static_cast<size_t>((rows + max_rows - 1) / max_rows)),
        q(static_cast<size_t>(rows * head_size)),
        acc(static_cast<size_t>(rows * head_size)),
        scratch_floats(static_cast<size_t>(attention_scratch_floats(head_size) + 16)),
        ranges(static_cast<size_t>(rows)),
        slab(block_size * head_size),
        tile_words(tile_blocks * slab),
        // Left uninitialised (every word the kernel reads is decoded first), 64-byte aligned.
        words_storage(tile_blocks > 0 ? new uint16_t[size_t(2 * tile_words + 32)] : nullptr),
        word_blocks(static_cast<size_t>(tile_blocks)) {
    std::iota(word_blocks.begin(), word_blocks.end(), 0);
  }
  float* scratch() { return align64(scratch_floats.data()); }
  uint16_t* k_words() { return align64(words_storage.get()); }
  uint16_t* v_words() { return k_words() + tile_words; }

  std::vector<CpuAttnTileArgs> calls;
  std::vector<float> q, acc, scratch_floats;
  std::vector<RowRange> ranges;
  int64_t slab;        // elements of one block's K (or V) slab of one KV head
  int64_t tile_words;  // the K (or V) words of a tile's blocks
  std::unique_ptr<uint16_t[]> words_storage;
  std::vector<int32_t> word_blocks;
};

class CpuAttentionExecutable final : public Executable {
 public:
  CpuAttentionExecutable(OpSpec spec, Config config, X86Isa isa, const void* code, size_t size)
      : spec_(std::move(spec)),
        config_(std::move(config)),
        code_(code),
        size_(size),
        isa_(isa),
        dpbf16_(attention_uses_dpbf16(spec_, config_, isa)),
        predecode_(attention_predecodes_fp8(spec_, config_, isa)),
        group_tokens_(attention_token_group(spec_, isa)),
        max_rows_(attention_max_rows(spec_, isa)),
        fp8_decoder_(fp8_decoder_for(isa)) {
    if (predecode_) {
      words_ =
          make_fp8_tables16(spec_.get<ir::CpuAttentionParams>().kv == ir::KvCacheDtype::kFp8E5m2,
                            DType::kBF16, 1.0f, fp8_decoder_ == Fp8Decoder::kAvx2);
    }
  }

  const void* code_address() const override { return code_; }
  size_t code_size() const override { return size_; }

  Status run(const KernelArgs& args) const override {
    const auto& p = spec_.get<ir::CpuAttentionParams>();
    const std::string_view op = op_name(spec_.op);
    const Tensor& query = args.tensor(0);
    const Tensor& key_cache = args.tensor(1);
    const Tensor& table = args.tensor(7);
    const int64_t num_req = args.tensor(4).size(0) - 1;
    const int64_t left = int64_t(args.scalar(1));
    const int64_t right = p.causal ? 0 : int64_t(args.scalar(2));

    // Data-dependent checks, all before the first write.
    KILN_RETURN_IF_ERROR(ir::check_cpu_attn_sequences(op, args.tensor(4), args.tensor(5), table,
                                                      p.causal, p.block_size, query.size(0),
                                                      key_cache.size(0)));
    if (p.isa == CpuAttnIsa::kAmx && isa_ >= X86Isa::kAmx) {
      KILN_RETURN_IF_ERROR(request_amx_permission());
    }
    KILN_RETURN_IF_ERROR(check_metadata(op, p, args.tensor(8), args.tensor(5), args.tensor(4),
                                        num_req, left, right));
    run_checked(args, left, right);
    return Status::ok();
  }

 private:
  RowRange row_range(int64_t seq_len, int64_t base, int64_t token, int64_t left,
                     int64_t right) const {
    const int64_t pos = base + token;
    const int64_t lo = left == -1 ? 0 : std::max<int64_t>(0, pos - left);
    const int64_t hi = right == -1 ? seq_len - 1 : std::min(seq_len - 1, pos + right);
    return {lo, hi, pos};
  }

  void run_checked(const KernelArgs& args, int64_t left, int64_t right) const {
    const auto& p = spec_.get<ir::CpuAttentionParams>();
    const auto* qsl = args.tensor(4).data_as<const int32_t>();
    const auto* seq_lens = args.tensor(5).data_as<const int32_t>();
    const int64_t num_req = args.tensor(4).size(0) - 1;
    const int64_t group = p.head_count_q / p.head_count_kv;
    const int64_t d = p.head_size;
    const int64_t g_tokens = group_tokens_;
    int threads = int(config_.get(kThreads, 0));
    if (threads <= 0) threads = omp_get_max_threads();
    const int64_t rows_per_task =
        max_rows_ * std::max<int64_t>(1, config_.get(kQPassesKnob, kDefaultQPasses));
    const int64_t kv_tile =
        std::max(g_tokens, align_down(config_.get(kKvTile, kDefaultKvTile), g_tokens));
    const int64_t min_split = config_.get(kMinSplit, kDefaultMinSplit);

    // Tasks without splits: the KV range of a row range is the union of its rows' ranges.
    std::vector<Task> tasks;
    for (int64_t r = 0; r < num_req; ++r) {
      const int64_t q_len = qsl[r + 1] - qsl[r];
      const int64_t seq_len = seq_lens[r];
      const int64_t base = p.causal ? seq_len - q_len : 0;
      const int64_t rows = q_len * group;
      for (int64_t g = 0; g < p.head_count_kv; ++g) {
        for (int64_t rb = 0; rb < rows; rb += rows_per_task) {
          Task t;
          t.request = r;
          t.kv_head = g;
          t.row_begin = rb;
          t.row_end = std::min(rows, rb + rows_per_task);
          const RowRange first = row_range(seq_len, base, rb / group, left, right);
          const RowRange last = row_range(seq_len, base, (t.row_end - 1) / group, left, right);
          t.kv_begin = align_down(first.lo, g_tokens);
          t.kv_end = std::max(t.kv_begin, last.hi + 1);
          tasks.push_back(t);
        }
      }
    }
    // Flash-decoding splits when the tasks cannot keep 2 x threads busy.
    int64_t partial_floats = 0;
    const int64_t state_floats = d + 2;  // acc, m, l per row
    if (min_split > 0 && int64_t(tasks.size()) < 2 * threads) {
      const int64_t want = (2 * threads + int64_t(tasks.size()) - 1) / int64_t(tasks.size());
      std::vector<Task> split_tasks;
      for (const Task& t : tasks) {
        const int64_t len = t.kv_end - t.kv_begin;
        const int64_t n = std::min(want, len / std::max(min_split, g_tokens));
        if (n <= 1) {
          split_tasks.push_back(t);
          continue;
        }
        const int64_t chunk = align_up((len + n - 1) / n, g_tokens);
        int64_t s = 0;
        for (int64_t b = t.kv_begin; b < t.kv_end; b += chunk, ++s) {
          Task part = t;
          part.kv_begin = b;
          part.kv_end = std::min(t.kv_end, b + chunk);
          part.split = s;
          part.partial = partial_floats;
          partial_floats += (t.row_end - t.row_begin) * state_floats;
          split_tasks.push_back(part);
        }
      }
      tasks = std::move(split_tasks);
    }
    std::vector<float> partials(static_cast<size_t>(partial_floats));

    const auto fn = reinterpret_cast<KernelFn>(const_cast<void*>(code_));
    const int64_t task_count = int64_t(tasks.size());
    // The most keys a tile holds: the words buffer is sized by the work, not by kv_tile alone
    // (a decode of a short sequence, or a large kv_tile, would allocate for keys never read).
    int64_t tile_keys = 0;
    for (const Task& t : tasks) tile_keys = std::max(tile_keys, t.kv_end - t.kv_begin);
    tile_keys = std::min(tile_keys, kv_tile);
    threads = int(std::max<int64_t>(1, std::min<int64_t>(threads, task_count)));
#pragma omp parallel num_threads(threads)
    {
      ThreadBuffers buf(rows_per_task, max_rows_, d, predecode_ ? words_blocks(tile_keys) : 0,
                        p.block_size);
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < task_count; ++i) {
        run_task(args, tasks[size_t(i)], left, right, buf, partials.data(), fn, kv_tile);
      }
    }
    if (partial_floats == 0) return;
      // Merge the split chains: tasks of one chain are consecutive, split 0 first.
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t i = 0; i < task_count; ++i) {
      if (tasks[size_t(i)].partial < 0 || tasks[size_t(i)].split != 0) continue;
      int64_t n = 1;
      while (i + n < task_count && tasks[size_t(i + n)].split == n) ++n;
      merge_chain(args, &tasks[size_t(i)], n, partials.data());
    }
  }

  // Runs one task: packs its rows' queries, walks its KV range tile by tile over its passes,
  // then writes the output (or the partial state of a split).
  void run_task(const KernelArgs& args, const Task& t, int64_t left, int64_t right,
                ThreadBuffers& buf, float* partials, KernelFn fn, int64_t kv_tile) const {
    CpuAttnTileArgs* calls = buf.calls.data();
    float* q_buf = buf.q.data();
    float* acc_buf = buf.acc.data();
    RowRange* ranges = buf.ranges.data();
    const auto& p = spec_.get<ir::CpuAttentionParams>();
    const Tensor& query = args.tensor(0);
    const Tensor& key_cache = args.tensor(1);
    const Tensor& sinks = args.tensor(9);
    const auto* qsl = args.tensor(4).data_as<const int32_t>();
    const auto* seq_lens = args.tensor(5).data_as<const int32_t>();
    const Tensor& table = args.tensor(7);
    const int64_t group = p.head_count_q / p.head_count_kv;
    const int64_t d = p.head_size;
    const int64_t esize = int64_t(dtype_size(p.dtype));
    const int64_t seq_len = seq_lens[t.request];
    const int64_t q_len = qsl[t.request + 1] - qsl[t.request];
    const int64_t base = p.causal ? seq_len - q_len : 0;
    const int64_t rows = t.row_end - t.row_begin;
    const int64_t passes = (rows + max_rows_ - 1) / max_rows_;
    const auto* slopes = p.alibi ? args.tensor(6).data_as<const float>() : nullptr;
    const int64_t cache_elem = int64_t(key_cache.element_size());
    const int64_t head_offset = t.kv_head * key_cache.stride(1) * cache_elem;
    const auto* k_base = static_cast<const uint8_t*>(key_cache.data()) + head_offset;
    const auto* v_base = static_cast<const uint8_t*>(args.tensor(2).data()) + head_offset;
    std::fill(acc_buf, acc_buf + rows * d, 0.0f);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t row = t.row_begin + i;
      const int64_t token = qsl[t.request] + row / group;
      const int64_t head = t.kv_head * group + row % group;
      ranges[i] = row_range(seq_len, base, row / group, left, right);
      const auto* src = static_cast<const uint8_t*>(query.data()) +
                        (token * query.stride(0) + head * query.stride(1)) * esize;
      if (dpbf16_) {
        std::memcpy(reinterpret_cast<uint16_t*>(q_buf) + i * d, src, size_t(d * 2));
      } else {
        widen_row(q_buf + i * d, p.dtype, src, d);
      }
    }
    for (int64_t ps = 0; ps < passes; ++ps) {
      CpuAttnTileArgs& c = calls[ps];
      const int64_t r0 = ps * max_rows_;
      const int64_t n = std::min<int64_t>(max_rows_, rows - r0);
      c.q = dpbf16_ ? static_cast<const void*>(reinterpret_cast<uint16_t*>(q_buf) + r0 * d)
                    : static_cast<const void*>(q_buf + r0 * d);
      c.acc = acc_buf + r0 * d;
      c.block_row = table.data_as<const int32_t>() + t.request * table.stride(0);
      c.k_base = k_base;
      c.v_base = v_base;
      c.block_stride = key_cache.stride(0) * cache_elem;
      c.rows = n;
      c.scratch = buf.scratch();
      // fp8 caches (k = fp8·k_scale): the kernel decodes the codes exactly and k_scale is
      // folded into the logit scale, scale·<q, fp8·k_scale> = (scale·k_scale)·<q, fp8>.
      c.scale = p.kv == ir::KvCacheDtype::kAuto ? float(args.scalar(0))
                                                : float(args.scalar(0)) * float(args.scalar(4));
      c.softcap = float(args.scalar(3));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = t.row_begin + r0 + i;
        const int64_t head = t.kv_head * group + row % group;
        c.m[i] = -std::numeric_limits<float>::max();
        c.l[i] = 0.0f;
        if (p.sinks && t.split == 0) {
          widen_row(&c.m[i], sinks.dtype(), element_at(sinks.data(), sinks.dtype(), head), 1);
          c.l[i] = 1.0f;
        }
        c.slope[i] = slopes != nullptr ? slopes[head] : 0.0f;
        c.lo[i] = int32_t(ranges[r0 + i].lo);
        c.pos[i] = int32_t(ranges[r0 + i].pos);
      }
    }
    // Tiles outer, passes inner: each tile of K/V is reused by every pass from cache.
    for (int64_t tile = t.kv_begin; tile < t.kv_end; tile += kv_tile) {
      const int64_t tile_end = std::min(t.kv_end, tile + kv_tile);
      bool decoded = false;  // predecode_: the tile's blocks as bf16 words in buf
      for (int64_t ps = 0; ps < passes; ++ps) {
        CpuAttnTileArgs& c = calls[ps];
        const int64_t r0 = ps * max_rows_;
        int64_t lo = std::numeric_limits<int64_t>::max();
        int64_t hi = -1;
        for (int64_t i = 0; i < c.rows; ++i) {
          lo = std::min(lo, ranges[r0 + i].lo);
          hi = std::max(hi, ranges[r0 + i].hi);
        }
        const int64_t begin = std::max(tile, align_down(lo, group_tokens_));
        const int64_t end = std::min(tile_end, hi + 1);
        if (begin >= end) continue;
        c.kv_begin = begin;
        c.kv_end = end;
        c.first_block = begin / p.block_size;
        c.first_offset = begin % p.block_size;
        for (int64_t i = 0; i < c.rows; ++i)
          c.hi[i] = int32_t(std::min(ranges[r0 + i].hi, end - 1));
        if (!masked_values_finite(c)) {
          attend_with_ref(args, t, r0, c);
        } else if (!predecode_) {
          fn(&c, 0, 0);
        } else {
          if (!decoded) decode_tile(args, t, tile, tile_end, buf);
          decoded = true;
          // The call reads the words: the tile's blocks in order (column first_col of the
          // table is the buffer's block 0); the cache's fields are put back for the next tile.
          const CpuAttnTileArgs cache = c;
          const int64_t first_col = tile / p.block_size;
          c.block_row = buf.word_blocks.data();
          c.k_base = reinterpret_cast<const uint8_t*>(buf.k_words());
          c.v_base = reinterpret_cast<const uint8_t*>(buf.v_words());
          c.block_stride = buf.slab * 2;
          c.first_block -= first_col;
          fn(&c, 0, 0);
          c.block_row = cache.block_row;
          c.k_base = cache.k_base;
          c.v_base = cache.v_base;
          c.block_stride = cache.block_stride;
          c.first_block = cache.first_block;
        }
      }
    }
    // Output: out = acc / l, or the partial state of a split.
    for (int64_t i = 0; i < rows; ++i) {
      const CpuAttnTileArgs& c = calls[i / max_rows_];
      const int64_t k = i % max_rows_;
      const float* acc = acc_buf + i * d;
      if (t.partial >= 0) {
        float* dst = partials + t.partial + i * (d + 2);
        std::memcpy(dst, acc, size_t(d) * 4);
        dst[d] = c.m[k];
        dst[d + 1] = c.l[k];
        continue;
      }
      write_row(args, t, i, acc, c.l[k]);
    }
  }

  // predecode_: the fp8 codes of task t's KV head in the blocks holding keys [tile, tile_end),
  // K and V slabs alike, decoded into buf's words (fp8_to_words, exact). Whole blocks: the
  // kernel's groups read keys past kv_end inside the last block (masked), as in the cache.
  void decode_tile(const KernelArgs& args, const Task& t, int64_t tile, int64_t tile_end,
                   ThreadBuffers& buf) const {
    const auto& p = spec_.get<ir::CpuAttentionParams>();
    const Tensor& key_cache = args.tensor(1);
    const Tensor& table = args.tensor(7);
    const int32_t* block_row = table.data_as<const int32_t>() + t.request * table.stride(0);
    const int64_t head_offset = t.kv_head * key_cache.stride(1);  // bytes: one per code
    const auto* k_codes = static_cast<const uint8_t*>(key_cache.data()) + head_offset;
    const auto* v_codes = static_cast<const uint8_t*>(args.tensor(2).data()) + head_offset;
    const int64_t first_col = tile / p.block_size, last_col = (tile_end - 1) / p.block_size;
    for (int64_t col = first_col; col <= last_col; ++col) {
      const int64_t block = int64_t(block_row[col]) * key_cache.stride(0);
      const int64_t at = (col - first_col) * buf.slab;
      fp8_to_words(fp8_decoder_, k_codes + block, buf.slab, words_, buf.k_words() + at);
      fp8_to_words(fp8_decoder_, v_codes + block, buf.slab, words_, buf.v_words() + at);
    }
  }

  // Blocks a tile of `keys` keys can touch: its keys, and the block it starts inside.
  int64_t words_blocks(int64_t keys) const {
    const int64_t bs = spec_.get<ir::CpuAttentionParams>().block_size;
    return (keys + bs - 1) / bs + 1;
  }

  // Whether every value the kernel would weigh by p = 0 in call `c` is finite. The kernel's
  // P·V runs over all of [kv_begin, kv_end) for every row (a group's keys are one vector
  // operation), so a key masked for some row, one before the largest lo or past the smallest
  // hi, enters that row as 0·v: NaN for v = ±inf or NaN (an e5m2 cache holds infinities), where
  // the spec's softmax gives the key no weight. Only those keys' values are looked at (none in a
  // decode without a window; the diagonal of a causal prefill's pass; the keys before a
  // window inside its first group), a whole VNNI pair or dim group on the amx layout.
  bool masked_values_finite(const CpuAttnTileArgs& c) const {
    int64_t all_lo = c.kv_begin;  // keys every row may see: [all_lo, all_hi]
    int64_t all_hi = c.kv_end - 1;
    for (int64_t i = 0; i < c.rows; ++i) {
      all_lo = std::max<int64_t>(all_lo, c.lo[i]);
      all_hi = std::min<int64_t>(all_hi, c.hi[i]);
    }
    if (all_lo > all_hi) return values_finite(c, c.kv_begin, c.kv_end);
    return values_finite(c, c.kv_begin, all_lo) && values_finite(c, all_hi + 1, c.kv_end);
  }

  // Whether the values of keys [from, to) of call `c` are all finite (their exponent field is
  // not all ones: fp8 codes of the cache's kv dtype, or elements of the query dtype).
  bool values_finite(const CpuAttnTileArgs& c, int64_t from, int64_t to) const {
    const auto& p = spec_.get<ir::CpuAttentionParams>();
    const int64_t bs = p.block_size, d = p.head_size;
    const int64_t esize = p.kv == ir::KvCacheDtype::kAuto ? int64_t(dtype_size(p.dtype)) : 1;
    // Elements of one run of contiguous dims: the whole row (vec layouts) or 16 (amx).
    const int64_t run = p.isa == CpuAttnIsa::kAmx ? 16 : d;
    while (from < to) {
      const int64_t block = from / bs;
      const int64_t a = from % bs;
      const int64_t z = std::min(bs, a + (to - from));  // keys [a, z) of this block
      const uint8_t* slab = c.v_base + int64_t(c.block_row[block]) * c.block_stride;
      for (int64_t d0 = 0; d0 < d; d0 += run) {
        const int64_t first = ref::cpu_attn_value_index(p.isa, a, d0, bs, d);
        const int64_t last = ref::cpu_attn_value_index(p.isa, z - 1, d0 + run - 1, bs, d);
        if (!elements_finite(slab + first * esize, last + 1 - first)) return false;
      }
      from += z - a;
    }
    return true;
  }

  bool elements_finite(const uint8_t* bytes, int64_t count) const {
    const auto& p = spec_.get<ir::CpuAttentionParams>();
    const auto none_all_ones = [&](auto word, auto exponent) {
      bool all_ones = false;
      for (int64_t i = 0; i < count; ++i) {
        decltype(word) w;
        std::memcpy(&w, bytes + i * int64_t(sizeof(w)), sizeof(w));
        all_ones |= (w & exponent) == exponent;
      }
      return !all_ones;
    };
    switch (p.kv) {
      case ir::KvCacheDtype::kFp8E4m3: return none_all_ones(uint8_t{}, uint8_t{0x7F});  // NaN
      case ir::KvCacheDtype::kFp8E5m2: return none_all_ones(uint8_t{}, uint8_t{0x7C});
      default: break;
    }
    switch (p.dtype) {
      case DType::kBF16: return none_all_ones(uint16_t{}, uint16_t{0x7F80});
      case DType::kF16: return none_all_ones(uint16_t{}, uint16_t{0x7C00});
      default: return none_all_ones(uint32_t{}, uint32_t{0x7F800000});
    }
  }

  // Call `c` done by the ref's per-row softmax instead of the kernel (masked_values_finite
  // said the kernel would turn a masked non-finite value into NaN): each row's state over
  // [kv_begin, kv_end), which never reads a masked key, is merged into the running one as a
  // split is (the kernel's acc leaves v_scale to the normalisation, so does the ref's state):
  //   m' = max(m, m_ref),  l = l·e^(m − m') + sum_ref·e^(m_ref − m'),  acc likewise.
  // Rare (a non-finite value at a masked key) and slow (the ref's loops).
  void attend_with_ref(const KernelArgs& args, const Task& t, int64_t r0,
                       CpuAttnTileArgs& c) const {
    const auto& p = spec_.get<ir::CpuAttentionParams>();
    const int64_t group = p.head_count_q / p.head_count_kv;
    const int64_t d = p.head_size;
    for (int64_t i = 0; i < c.rows; ++i) {
      const int64_t row = t.row_begin + r0 + i;
      const ref::CpuAttnRowState st =
          ref::cpu_attention_row_state(spec_, args, t.request, row / group,
                                       t.kv_head * group + row % group, c.kv_begin, c.kv_end);
      if (st.m == -std::numeric_limits<double>::infinity()) continue;  // nothing allowed
      const double m = std::max(double(c.m[i]), st.m);
      const double alpha = std::exp(double(c.m[i]) - m);
      const double beta = std::exp(st.m - m);
      float* acc = c.acc + i * d;
      for (int64_t e = 0; e < d; ++e) {
        acc[e] = float(alpha * double(acc[e]) + beta * st.acc[size_t(e)]);
      }
      c.l[i] = float(alpha * double(c.l[i]) + beta * st.sum);
      c.m[i] = float(m);
    }
  }

  // output[token, head, :] = rnd_T(acc / l) (zeros when no key and no sink contributed).
  void write_row(const KernelArgs& args, const Task& t, int64_t i, const float* acc,
                 float l) const {
    const auto& p = spec_.get<ir::CpuAttentionParams>();
    const int64_t group = p.head_count_q / p.head_count_kv;
    const int64_t row = t.row_begin + i;
    const int64_t token = args.tensor(4).data_as<const int32_t>()[t.request] + row / group;
    const int64_t head = t.kv_head * group + row % group;
    const int64_t d = p.head_size;
    void* out = element_at(args.tensor(3).data(), p.dtype, (token * p.head_count_q + head) * d);
    // fp8 caches (v = fp8·v_scale): acc sums p·fp8, so v_scale joins the normalisation,
    // out = v_scale·acc / l.
    const float v_scale = p.kv == ir::KvCacheDtype::kAuto ? 1.0f : float(args.scalar(5));
    const float inv = l > 0.0f ? v_scale / l : 0.0f;
    round_row(out, p.dtype, acc, d, inv);
  }

  void merge_chain(const KernelArgs& args, const Task* chain, int64_t n,
                   const float* partials) const {
    const int64_t d = spec_.get<ir::CpuAttentionParams>().head_size;
    const int64_t rows = chain[0].row_end - chain[0].row_begin;
    std::vector<float> acc(static_cast<size_t>(d));
    for (int64_t i = 0; i < rows; ++i) {
      float m = -std::numeric_limits<float>::max();
      for (int64_t s = 0; s < n; ++s) m = std::max(m, partials[chain[s].partial + i * (d + 2) + d]);
      float l = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t s = 0; s < n; ++s) {
        const float* part = partials + chain[s].partial + i * (d + 2);
        const float w = std::exp(part[d] - m);
        l += w * part[d + 1];
        for (int64_t e = 0; e < d; ++e) acc[size_t(e)] += w * part[e];
      }
      write_row(args, chain[0], i, acc.data(), l);
    }
  }

  OpSpec spec_;
  Config config_;
  const void* code_;
  size_t size_;
  X86Isa isa_;
  bool dpbf16_;
  bool predecode_;  // attention_predecodes_fp8: the kernel reads the tile's codes as bf16 words
  int group_tokens_;
  int max_rows_;
  Fp8Decoder fp8_decoder_;
  Fp8Tables16 words_{};  // fp8 code -> its value as a bf16 word (predecode_)
};

}  // namespace

bool is_cpu_attention_op(OpKind op) {
  return op == OpKind::kCpuAttentionWithKvCache || op == OpKind::kCpuAttnReshapeAndCache ||
         is_paged_attention_op(op);
}

std::vector<std::string_view> cpu_attention_knob_names(OpKind op) {
  if (op == OpKind::kCpuAttentionWithKvCache) {
    return {kThreads, kDpbf16Knob, kPredecodeKnob, kKvTile, kQPassesKnob, kMinSplit};
  }
  if (is_paged_attention_op(op)) return {kThreads, kPagedDirectKnob, kPagedChunkKnob};
  return {kThreads};
}

Support cpu_attention_support(const OpSpec& spec, const Target& target) {
  if (is_paged_attention_op(spec.op)) return Support::yes();
  const CpuAttnIsa layout = spec.op == OpKind::kCpuAttentionWithKvCache
                                ? spec.get<ir::CpuAttentionParams>().isa
                                : spec.get<ir::CpuAttnCacheWriteParams>().isa;
  const ir::KvCacheDtype kv = spec.op == OpKind::kCpuAttentionWithKvCache
                                  ? spec.get<ir::CpuAttentionParams>().kv
                                  : spec.get<ir::CpuAttnCacheWriteParams>().kv;
  // fp8 caches (spec §3.6) are served in the vec layout: the cache write quantises, the
  // kernel's fp32 path decodes. The amx layout would need fp8 -> bf16 B tiles.
  if (kv != ir::KvCacheDtype::kAuto && layout == CpuAttnIsa::kAmx) {
    return Support::no(fmt::format(
        "{} with isa=amx and kv={} is not implemented on x86 (fp8 KV is served for isa=vec; the "
        "amx path would need fp8 -> bf16 tile conversion)",
        op_name(spec.op), enum_name(kv)));
  }
  // The amx slab write is plain moves (any x86 target); the attention needs the tiles.
  if (layout != CpuAttnIsa::kAmx || spec.op == OpKind::kCpuAttnReshapeAndCache) {
    return Support::yes();
  }
  // Without AMX the generator emulates the tiles with vdpbf16ps (same layout and numerics,
  // much slower): served from AVX512_BF16 up.
  if (target.isa < X86Isa::kAvx512Bf16) {
    return Support::no(fmt::format(
        "cpu_attention_with_kv_cache with isa=amx needs AMX-BF16 tiles (or AVX512_BF16 for the "
        "tile emulation); target is {}",
        x86_isa_name(target.isa)));
  }
  return Support::yes();
}

std::vector<Config> cpu_attention_configs(const OpSpec& spec, const Target& target) {
  std::vector<Config> space;
  space.push_back(Config{});  // heuristic default
  if (is_paged_attention_op(spec.op)) {
    for (int64_t threads : {1, 2}) space.push_back(Config().set(std::string(kThreads), threads));
    // Keys per chunk (kPagedChunkKnob; for v2 none past the partition rounded up to a power of
    // two, which would do the same work), and the kernel that is not the default where both
    // serve (kPagedDirectKnob).
    const auto& p = spec.get<ir::PagedAttentionParams>();
    for (int64_t chunk : {32, 64, 128, 256}) {
      if (p.partition_size == 0 || uint64_t(chunk) <= std::bit_ceil(uint64_t(p.partition_size))) {
        space.push_back(Config().set(std::string(kPagedChunkKnob), chunk));
      }
    }
    if (paged_direct_serves(p, target.isa)) {
      const int64_t other = paged_direct_default(p, target.isa) ? 0 : 1;
      space.push_back(Config().set(std::string(kPagedDirectKnob), other));
    }
    return space;
  }
  if (spec.op != OpKind::kCpuAttentionWithKvCache) return space;
  // Where vdpbf16ps and the fp32 path both serve, each runner config with either (which is
  // faster depends on the CPU; see kDpbf16Knob).
  const Config dot = Config().set(std::string(kDpbf16Knob), 1);
  const bool both_paths = spec.get<ir::CpuAttentionParams>().isa != CpuAttnIsa::kAmx &&
                          attention_config_status(spec, dot, target.isa).is_ok();
  const int64_t other = 1 - attention_default_dpbf16(spec, target.isa);
  if (both_paths) space.push_back(Config().set(std::string(kDpbf16Knob), other));
  // An fp8 cache on the fp32 path: the other way to decode it (prefill's many passes per tile
  // favour decoding once, a decode of one pass the kernel's own).
  if (attention_predecode_applies(spec, Config{}, target.isa)) {
    const int64_t other_predecode = 1 - attention_default_predecode(spec, Config{}, target.isa);
    space.push_back(Config().set(std::string(kPredecodeKnob), other_predecode));
  }
  for (int64_t tile : {128, 512, 2048}) {
    for (int64_t passes : {1, 4}) {
      for (int64_t split : {0, 256}) {
        const Config runner = Config()
                                  .set(std::string(kKvTile), tile)
                                  .set(std::string(kQPassesKnob), passes)
                                  .set(std::string(kMinSplit), split);
        space.push_back(runner);
        if (both_paths) space.push_back(Config(runner).set(std::string(kDpbf16Knob), other));
      }
    }
  }
  return space;
}

Result<std::vector<uint8_t>> generate_cpu_attention_op(const OpSpec& spec, const Config& config,
                                                       X86Isa isa) {
  if (is_paged_attention_op(spec.op)) return generate_paged_attention(spec, config, isa);
  if (spec.op == OpKind::kCpuAttentionWithKvCache) return generate_cpu_attention(spec, config, isa);
  return generate_cpu_attn_cache_write(spec, isa);
}

std::shared_ptr<const Executable> make_cpu_attention_executable(const OpSpec& spec,
                                                                const Config& config, X86Isa isa,
                                                                const void* code, size_t size) {
  if (is_paged_attention_op(spec.op)) {
    return make_paged_attention_executable(spec, config, isa, code, size);
  }
  if (spec.op == OpKind::kCpuAttentionWithKvCache) {
    return std::make_shared<CpuAttentionExecutable>(spec, config, isa, code, size);
  }
  return make_cpu_attn_cache_write_executable(spec, config, code, size);
}

}  // namespace jit::codegen::x86
