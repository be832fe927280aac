#include "codegen/x86/x86_backend.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "codegen/code_arena.h"
#include "codegen/x86/attention_kernel.h"
#include "codegen/x86/generator.h"
#include "codegen/x86/kernels.h"
#include "ir/check_args.h"
#include "ir/params_attention.h"
#include "ir/params_cache.h"

namespace jit::codegen::x86 {
namespace {

// Config knobs (tuning space):
//   threads: OpenMP threads across rows (0 = omp_get_max_threads()).
//   min_parallel_kib: below this many KiB moved per call, run on the calling thread (a
//     parallel region costs a few microseconds, more than a decode-sized row takes).
//   rep_movsb (swap_blocks only): 1 copies each block with `rep movsb`, 0 with vector loops
//     (the direction that avoids 4K aliasing, streaming stores for large calls). Default: 1
//     where host_core_traits().prefers_rep_movsb (Zen 5), else 0.
constexpr std::string_view kThreads = "threads";
constexpr std::string_view kMinParallelKib = "min_parallel_kib";
constexpr std::string_view kRepMovsb = "rep_movsb";
constexpr int64_t kDefaultMinParallelKib = 256;

bool is_norm(OpKind op) {
  return op == OpKind::kRmsNorm || op == OpKind::kFusedAddRmsNorm;
}
bool is_activation(OpKind op) {
  return op_family(op) == "activation";
}
bool is_rope(OpKind op) {
  return op == OpKind::kRotaryEmbedding;
}
bool is_cache_write(OpKind op) {
  return op == OpKind::kReshapeAndCacheFlash || op == OpKind::kReshapeAndCache;
}
bool is_mla_write(OpKind op) {
  return op == OpKind::kConcatAndCacheMla;
}
bool is_cache_copy(OpKind op) {
  return op == OpKind::kSwapBlocks || op == OpKind::kConvertFp8;
}
bool is_gather(OpKind op) {
  return op == OpKind::kCpGatherCache || op == OpKind::kGatherAndMaybeDequantCache;
}
// The MLA/indexer cache ops and merge_attn_states (mla_kernel.cc, indexer_kernel.cc,
// merge_kernel.cc).
bool is_mla_indexer_merge(OpKind op) {
  return op == OpKind::kConcatAndCacheMlaRopeFused ||
         op == OpKind::kCpGatherAndUpconvertFp8KvCache || op == OpKind::kIndexerKQuantAndCache ||
         op == OpKind::kCpGatherIndexerKQuantCache || op == OpKind::kMergeAttnStates ||
         op == OpKind::kRotaryEmbeddingAndCacheFlash;
}

// Element `i` of a 1-D int32 index tensor, through its stride.
int64_t at_i32(const Tensor& t, int64_t i) {
  return t.data_as<const int32_t>()[i * t.stride(0)];
}

// The gathers' checked mode, always on (the ref's checks, in the ref's order, with its
// messages): a block table [B, max_blocks] int32 and the paged cache [NB, BS, entry...] it
// indexes. Validating a row resolves it, so the runner hands the kernel the entry's byte
// offset instead of letting it re-read the table: one 8-byte store per row in a pass that
// must read the table anyway, against the entry_size·element bytes the row moves.
struct BlockTableView {
  std::string_view op;
  const Tensor& table;
  const Tensor& cache;
  int64_t block_size = 0;

  // Byte offset in `cache` of position `pos` (>= 0) of request `r`, or the error naming the
  // block-table column or entry outside its range. The block of the last lookup is kept:
  // consecutive positions of a request share a block for block_size rows, and the checked
  // lookup with its divisions cost ~3 ns a row, ~5% of a 1152-byte row's copy (cp_gather_cache,
  // 1 thread). A position inside the kept block's range was checked with it.
  Status locate(int64_t r, int64_t pos, int64_t& offset) const {
    if (r != kept_request_ || pos < kept_first_ || pos >= kept_first_ + block_size) {
      int64_t block = 0;
      KILN_RETURN_IF_ERROR(
          ir::check_block_table_entry(op, table, cache.size(0), block_size, r, pos, block));
      kept_request_ = r;
      kept_first_ = pos - pos % block_size;
      kept_base_ = block * cache.stride(0) * int64_t(cache.element_size());
    }
    offset = kept_base_ + (pos - kept_first_) * cache.stride(1) * int64_t(cache.element_size());
    return Status::ok();
  }

  // The last block looked up (locate's, not for callers): positions [kept_first_, kept_first_ +
  // block_size) of request kept_request_ start at byte kept_base_.
  mutable int64_t kept_request_ = -1, kept_first_ = 0, kept_base_ = 0;
};

constexpr int64_t kMaxThreads = 1024;           // run_rows casts to int; OpenMP pools are smaller
constexpr int64_t kMaxParallelKib = 1ll << 40;  // 1 PiB: any call is below it

// The knobs of every op but the attention ones (run_rows reads them): threads (0: every core)
// and min_parallel_kib, both >= 0. Anything else is refused, naming what is allowed: a knob
// that nothing reads would otherwise be accepted and ignored.
Status check_row_op_config(const OpSpec& spec, const Config& config) {
  constexpr std::string_view kRowOpKnobs[] = {kThreads, kMinParallelKib};
  constexpr std::string_view kSwapKnobs[] = {kThreads, kMinParallelKib, kRepMovsb};
  KILN_RETURN_IF_ERROR(check_knob_names("x86", spec, config,
                                        spec.op == OpKind::kSwapBlocks
                                            ? std::span<const std::string_view>(kSwapKnobs)
                                            : std::span<const std::string_view>(kRowOpKnobs)));
  for (const auto& [name, value] : config.knobs) {
    if (name == kRepMovsb) {
      if (value != 0 && value != 1) {
        return invalid_argument(fmt::format(
            "x86 config: rep_movsb={} is not allowed; allowed: 1 (rep movsb per block) or 0 "
            "(vector loops)",
            value));
      }
      continue;
    }
    const int64_t limit = name == kThreads ? kMaxThreads : kMaxParallelKib;
    if (value < 0 || value > limit) {
      return invalid_argument(fmt::format(
          "x86 config: {}={} is not allowed; allowed: {}", name, value,
          name == kThreads ? fmt::format("0 (every core) or a thread count up to {}", limit)
                           : fmt::format("a size in KiB from 0 to {}", limit)));
    }
  }
  return Status::ok();
}

// The attention ops' knob names, and the CPU attention kernel's own knobs (dpbf16, predecode);
// the other values are checked where they are read (the paged generator for direct / chunk,
// the runners for the rest).
Status check_attention_knob_names(const OpSpec& spec, const Config& config, X86Isa isa) {
  KILN_RETURN_IF_ERROR(check_knob_names("x86", spec, config, cpu_attention_knob_names(spec.op)));
  // The knobs the tile kernel is generated by (dpbf16, predecode): load must not build a runner
  // that disagrees with the code (a disk-cache entry stored before a check existed).
  if (spec.op == OpKind::kCpuAttentionWithKvCache) {
    return attention_config_status(spec, config, isa);
  }
  return Status::ok();
}

// The knobs of an op's config: the row ops' or the attention ops'.
Status check_config(const OpSpec& spec, const Config& config, X86Isa isa) {
  return is_cpu_attention_op(spec.op) ? check_attention_knob_names(spec, config, isa)
                                      : check_row_op_config(spec, config);
}

// Splits rows [0, rows) over threads, each running the kernel on a contiguous range.
void run_rows(KernelFn fn, const void* call_args, int64_t rows, double bytes,
              const Config& config) {
  if (rows <= 0) return;
  int threads = int(config.get(kThreads, 0));
  if (threads <= 0) threads = omp_get_max_threads();
  const double min_bytes = double(config.get(kMinParallelKib, kDefaultMinParallelKib)) * 1024;
  threads = int(std::min<int64_t>(threads, rows));
  if (threads <= 1 || bytes < min_bytes) {
    fn(call_args, 0, rows);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t n = omp_get_num_threads();
    const int64_t begin = rows * t / n;
    const int64_t end = rows * (t + 1) / n;
    if (begin < end) fn(call_args, begin, end);
  }
}

class X86Executable final : public Executable {
 public:
  X86Executable(OpSpec spec, Config config, const void* code, size_t size)
      : spec_(std::move(spec)), config_(std::move(config)), code_(code), size_(size) {}

  Status run(const KernelArgs& args) const override {
    const auto fn = reinterpret_cast<KernelFn>(const_cast<void*>(code_));
    if (is_norm(spec_.op)) {
      run_norm(fn, args);
    } else if (is_rope(spec_.op)) {
      return run_rope(fn, args);
    } else if (is_cache_write(spec_.op)) {
      return run_cache_write(fn, args);
    } else if (is_mla_write(spec_.op)) {
      return run_mla_write(fn, args);
    } else if (spec_.op == OpKind::kSwapBlocks) {
      return run_swap_blocks(fn, args);
    } else if (spec_.op == OpKind::kConvertFp8) {
      run_convert_fp8(fn, args);
    } else if (spec_.op == OpKind::kCpGatherCache) {
      return run_cp_gather(fn, args);
    } else if (spec_.op == OpKind::kGatherAndMaybeDequantCache) {
      return run_gather_dequant(fn, args);
    } else if (spec_.op == OpKind::kConcatAndCacheMlaRopeFused) {
      return run_mla_rope_fused(fn, args);
    } else if (spec_.op == OpKind::kCpGatherAndUpconvertFp8KvCache) {
      return run_upconvert_gather(fn, args);
    } else if (spec_.op == OpKind::kIndexerKQuantAndCache) {
      return run_indexer_quant(fn, args);
    } else if (spec_.op == OpKind::kCpGatherIndexerKQuantCache) {
      return run_indexer_gather(fn, args);
    } else if (spec_.op == OpKind::kMergeAttnStates) {
      run_merge(fn, args);
    } else if (spec_.op == OpKind::kRotaryEmbeddingAndCacheFlash) {
      return run_rope_cache_flash(fn, args);
    } else {
      run_activation(fn, args);
    }
    return Status::ok();
  }
  const void* code_address() const override { return code_; }
  size_t code_size() const override { return size_; }

 private:
  void run_norm(KernelFn fn, const KernelArgs& args) const {
    const auto& p = spec_.get<ir::NormParams>();
    const size_t esize = dtype_size(p.dtype);
    const Tensor& a = args.tensor(0);  // out (rms_norm) or input (fused)
    const Tensor& b = args.tensor(1);  // input (rms_norm) or residual (fused)
    NormCallArgs call{};
    if (spec_.op == OpKind::kFusedAddRmsNorm) {
      call.dst = a.data();
      call.src = a.data();
      call.dst_row_stride = call.src_row_stride = ir::row_stride(a) * int64_t(esize);
      call.residual = b.data();
      call.residual_row_stride = ir::row_stride(b) * int64_t(esize);
    } else {
      call.dst = a.data();
      call.dst_row_stride = p.hidden * int64_t(esize);
      call.src = b.data();
      call.src_row_stride = ir::row_stride(b) * int64_t(esize);
    }
    call.weight = args.tensor(2).data();
    call.epsilon = float(args.scalar(0));
    const int64_t rows = b.numel() / p.hidden;
    run_rows(fn, &call, rows, estimates(spec_, {.tokens = rows}).bytes, config_);
  }

  Status run_rope(KernelFn fn, const KernelArgs& args) const {
    const auto& p = spec_.get<ir::RopeParams>();
    const Tensor& positions = args.tensor(0);
    const Tensor& query = args.tensor(1);
    const Tensor& key = args.tensor(2);
    // Checked before any write: the kernel indexes the cache with the positions.
    KILN_RETURN_IF_ERROR(ir::check_rope_positions(positions, args.tensor(3).size(0)));
    const int64_t esize = int64_t(dtype_size(p.dtype));
    const int lead = positions.dim();
    RopeCallArgs call{};
    call.positions = positions.data_as<const int64_t>();
    call.query = query.data();
    call.cos_sin_cache = args.tensor(3).data();
    const ir::RopeStrides q = ir::rope_strides(query, lead, p.head_size);
    call.query_token_stride = q.token * esize;
    call.query_head_stride = q.head * esize;
    if (p.key) {
      const ir::RopeStrides k = ir::rope_strides(key, lead, p.head_size);
      call.key = key.data();
      call.key_token_stride = k.token * esize;
      call.key_head_stride = k.head * esize;
    }
    const int64_t tokens = positions.numel();
    run_rows(fn, &call, tokens, estimates(spec_, {.tokens = tokens}).bytes, config_);
    return Status::ok();
  }

  // reshape_and_cache(_flash): {key, value, key_cache, value_cache, slot_mapping, k_scale,
  // v_scale}; one row per slot_mapping entry.
  Status run_cache_write(KernelFn fn, const KernelArgs& args) const {
    const bool flash = spec_.op == OpKind::kReshapeAndCacheFlash;
    DType dtype;
    int64_t block_size;
    size_t csize;
    if (flash) {
      const auto& p = spec_.get<ir::FlashCacheWriteParams>();
      dtype = p.dtype;
      block_size = p.block_size;
      csize = ir::cache_element_size(p.dtype, p.kv);
    } else {
      const auto& p = spec_.get<ir::PagedCacheWriteParams>();
      dtype = p.dtype;
      block_size = p.block_size;
      csize = ir::cache_element_size(p.dtype, p.kv);
    }
    const Tensor& key = args.tensor(0);
    const Tensor& value = args.tensor(1);
    const Tensor& key_cache = args.tensor(2);
    const Tensor& slots = args.tensor(4);
    const int64_t tokens = slots.size(0);
    KILN_RETURN_IF_ERROR(
        ir::check_slots(op_name(spec_.op), slots, tokens, key_cache.size(0), block_size));
    const int64_t esize = int64_t(dtype_size(dtype));
    CacheWriteCallArgs call{};
    call.key = key.data();
    call.value = value.data();
    call.key_cache = key_cache.data();
    call.value_cache = args.tensor(3).data();
    call.slots = slots.data_as<const int64_t>();
    call.k_scale = args.tensor(5).data_as<const float>();
    call.v_scale = args.tensor(6).data_as<const float>();
    call.key_row_stride = key.stride(0) * esize;
    call.value_row_stride = value.stride(0) * esize;
    call.block_stride = key_cache.stride(0) * int64_t(csize);
    run_rows(fn, &call, tokens, estimates(spec_, {.tokens = tokens}).bytes, config_);
    return Status::ok();
  }

  // concat_and_cache_mla: {kv_c, k_pe, kv_cache, slot_mapping, scale}; one row per
  // slot_mapping entry. Row strides of kv_c/k_pe and the cache's block/entry strides honoured.
  Status run_mla_write(KernelFn fn, const KernelArgs& args) const {
    const auto& p = spec_.get<ir::MlaCacheWriteParams>();
    const Tensor& kv_c = args.tensor(0);
    const Tensor& k_pe = args.tensor(1);
    const Tensor& cache = args.tensor(2);
    const Tensor& slots = args.tensor(3);
    const int64_t tokens = slots.size(0);
    KILN_RETURN_IF_ERROR(
        ir::check_slots(op_name(spec_.op), slots, tokens, cache.size(0), p.block_size));
    const int64_t esize = int64_t(dtype_size(p.dtype));
    const int64_t csize = int64_t(cache.element_size());
    CacheWriteCallArgs call{};
    call.key = kv_c.data();
    call.value = k_pe.data();
    call.key_cache = cache.data();
    call.slots = slots.data_as<const int64_t>();
    call.k_scale = args.tensor(4).data_as<const float>();
    call.key_row_stride = kv_c.stride(0) * esize;
    call.value_row_stride = k_pe.stride(0) * esize;
    call.block_stride = cache.stride(0) * csize;
    call.entry_stride = cache.stride(1) * csize;
    run_rows(fn, &call, tokens, estimates(spec_, {.tokens = tokens}).bytes, config_);
    return Status::ok();
  }

  // swap_blocks: {src, dst, block_mapping}. Every block id is checked first; the pairs become
  // byte offsets. Pairs run in parallel only when the order cannot matter (distinct
  // destinations in a buffer that does not overlap the source); otherwise in mapping order on
  // one thread, as vLLM's stream-ordered copies.
  Status run_swap_blocks(KernelFn fn, const KernelArgs& args) const {
    const int64_t block_bytes = spec_.get<ir::SwapBlocksParams>().block_bytes;
    const Tensor& src = args.tensor(0);
    const Tensor& dst = args.tensor(1);
    const Tensor& mapping = args.tensor(2);
    const int64_t src_bytes = src.numel() * int64_t(src.element_size());
    const int64_t dst_bytes = dst.numel() * int64_t(dst.element_size());
    const int64_t blocks[2] = {src_bytes / block_bytes, dst_bytes / block_bytes};
    const int64_t pairs = mapping.size(0);
    const auto* m = mapping.data_as<const int64_t>();
    std::vector<int64_t> offsets(size_t(2 * pairs));
    std::vector<bool> written(size_t(blocks[1]), false);
    bool distinct = true;
    KILN_RETURN_IF_ERROR(ir::check_block_mapping(op_name(spec_.op), mapping, blocks[0], blocks[1]));
    for (int64_t i = 0; i < pairs; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        offsets[size_t(2 * i + j)] = m[i * mapping.stride(0) + j * mapping.stride(1)] * block_bytes;
      }
      const auto d = size_t(offsets[size_t(2 * i + 1)] / block_bytes);
      distinct = distinct && !written[d];
      written[d] = true;
    }
    const auto* s0 = static_cast<const std::byte*>(src.data());
    const auto* d0 = static_cast<const std::byte*>(dst.data());
    const bool overlap = s0 < d0 + dst_bytes && d0 < s0 + src_bytes;
    SwapBlocksCallArgs call{static_cast<const uint8_t*>(src.data()),
                            static_cast<uint8_t*>(dst.data()), offsets.data()};
    if (!distinct || overlap) {
      if (pairs > 0) fn(&call, 0, pairs);
      return Status::ok();
    }
    run_rows(fn, &call, pairs, estimates(spec_, {.tokens = pairs}).bytes, config_);
    return Status::ok();
  }

  // convert_fp8: {dst_cache, src_cache}, scalar {scale}; rows of kConvertRowElements.
  void run_convert_fp8(KernelFn fn, const KernelArgs& args) const {
    const Tensor& src = args.tensor(1);
    ConvertFp8CallArgs call{};
    call.dst = args.tensor(0).data();
    call.src = src.data();
    call.elements = src.numel();
    call.scale = static_cast<float>(args.scalar(0));
    const int64_t rows = (call.elements + kConvertRowElements - 1) / kConvertRowElements;
    run_rows(fn, &call, rows, estimates(spec_, {.tokens = call.elements}).bytes, config_);
  }

  // cp_gather_cache: {src_cache, dst, block_table, cu_seq_lens, seq_starts}, scalar
  // {batch_size}. The requests' row ranges are consecutive (cu_seq_lens is non-decreasing), so
  // the kernel's rows are dst rows [cu_seq_lens[0], cu_seq_lens[B]), none skipped, and distinct
  // rows can run on any thread.
  Status run_cp_gather(KernelFn fn, const KernelArgs& args) const {
    const std::string_view op = op_name(spec_.op);
    const Tensor& src = args.tensor(0);
    const Tensor& dst = args.tensor(1);
    const Tensor& cu = args.tensor(3);
    const Tensor& seq_starts = args.tensor(4);
    const auto batch = static_cast<int64_t>(args.scalar(0));
    const BlockTableView table{op, args.tensor(2), src,
                               spec_.get<ir::CpGatherCacheParams>().block_size};
    std::vector<int64_t> offsets;
    // The row count when cu_seq_lens is valid (the scan below decides whether it is).
    if (batch > 0) {
      offsets.reserve(
          size_t(std::clamp<int64_t>(at_i32(cu, batch) - at_i32(cu, 0), 0, dst.size(0))));
    }
    for (int64_t r = 0; r < batch; ++r) {
      int64_t begin = 0;
      int64_t end = 0;
      KILN_RETURN_IF_ERROR(ir::check_request_rows(op, cu, r, dst.size(0), begin, end));
      int64_t start = 0;
      KILN_RETURN_IF_ERROR(ir::check_seq_start(op, seq_starts, r, start));
      for (int64_t row = begin; row < end; ++row) {
        int64_t offset = 0;
        KILN_RETURN_IF_ERROR(table.locate(r, row - begin + start, offset));
        offsets.push_back(offset);
      }
    }
    if (offsets.empty()) return Status::ok();
    const int64_t row_stride = dst.stride(0) * int64_t(dst.element_size());
    GatherCallArgs call{};
    call.src = static_cast<const uint8_t*>(src.data());
    call.dst = static_cast<uint8_t*>(dst.data()) + at_i32(cu, 0) * row_stride;
    call.src_offsets = offsets.data();
    call.dst_row_stride = row_stride;
    const auto rows = int64_t(offsets.size());
    run_rows(fn, &call, rows, estimates(spec_, {.tokens = rows, .batch = batch}).bytes, config_);
    return Status::ok();
  }

  // gather_and_maybe_dequant_cache: {src_cache, dst, block_table, cu_seq_lens, token_to_seq,
  // scale, seq_starts}, scalar {num_tokens}. Kernel row = token = dst row; a token at or past
  // its request's end (cu_seq_lens[r+1]) is skipped (offset -1), as in vLLM.
  Status run_gather_dequant(KernelFn fn, const KernelArgs& args) const {
    const std::string_view op = op_name(spec_.op);
    const Tensor& src = args.tensor(0);
    const Tensor& dst = args.tensor(1);
    const Tensor& cu = args.tensor(3);
    const Tensor& token_to_seq = args.tensor(4);
    const Tensor& seq_starts = args.tensor(6);
    const auto tokens = static_cast<int64_t>(args.scalar(0));
    const BlockTableView table{op, args.tensor(2), src,
                               spec_.get<ir::GatherCacheParams>().block_size};
    const int64_t batch = table.table.size(0);
    std::vector<int64_t> offsets(size_t(tokens), -1);
    for (int64_t tok = 0; tok < tokens; ++tok) {
      int64_t r = 0;
      int64_t pos = 0;
      KILN_RETURN_IF_ERROR(
          ir::check_token_position(op, cu, token_to_seq, seq_starts, batch, tok, r, pos));
      if (pos < 0) continue;  // past its request's end: skipped (offset -1)
      KILN_RETURN_IF_ERROR(table.locate(r, pos, offsets[size_t(tok)]));
    }
    GatherCallArgs call{};
    call.src = static_cast<const uint8_t*>(src.data());
    call.dst = dst.data();
    call.src_offsets = offsets.data();
    call.scale = args.tensor(5).data_as<const float>();
    call.dst_row_stride = dst.stride(0) * int64_t(dst.element_size());
    run_rows(fn, &call, tokens, estimates(spec_, {.tokens = tokens, .batch = batch}).bytes,
             config_);
    return Status::ok();
  }

  // concat_and_cache_mla_rope_fused: {positions, q_pe, k_pe, kv_c, cos_sin_cache,
  // slot_mapping, kv_cache, kv_cache_scale}; one row per token (q_pe.size(0)). Positions (the
  // ref's check and message) and slots are checked before anything is rotated.
  Status run_mla_rope_fused(KernelFn fn, const KernelArgs& args) const {
    const auto& p = spec_.get<ir::MlaRopeCacheWriteParams>();
    const std::string_view op = op_name(spec_.op);
    const Tensor& positions = args.tensor(0);
    const Tensor& q_pe = args.tensor(1);
    const Tensor& k_pe = args.tensor(2);
    const Tensor& kv_c = args.tensor(3);
    const Tensor& cos_sin = args.tensor(4);
    const Tensor& slots = args.tensor(5);
    const Tensor& cache = args.tensor(6);
    const int64_t tokens = q_pe.size(0);
    const int64_t max_position = cos_sin.size(0);
    KILN_RETURN_IF_ERROR(ir::check_positions(op, positions, tokens, max_position));
    KILN_RETURN_IF_ERROR(ir::check_slots(op, slots, tokens, cache.size(0), p.block_size));
    const int64_t esize = int64_t(dtype_size(p.dtype));
    const int64_t csize = int64_t(cache.element_size());
    MlaRopeCallArgs call{};
    call.positions = positions.data_as<const int64_t>();
    call.q_pe = q_pe.data();
    call.k_pe = k_pe.data();
    call.kv_c = kv_c.data();
    call.cos_sin_cache = cos_sin.data();
    call.slots = slots.data_as<const int64_t>();
    call.kv_cache = cache.data();
    call.scale = args.tensor(7).data_as<const float>();
    call.q_token_stride = q_pe.stride(0) * esize;
    call.q_head_stride = q_pe.stride(1) * esize;
    call.k_pe_row_stride = k_pe.stride(0) * esize;
    call.kv_c_row_stride = kv_c.stride(0) * esize;
    call.block_stride = cache.stride(0) * csize;
    call.entry_stride = cache.stride(1) * csize;
    run_rows(fn, &call, tokens, estimates(spec_, {.tokens = tokens}).bytes, config_);
    return Status::ok();
  }

  // cp_gather_and_upconvert_fp8_kv_cache: {src_cache, dst, block_table, seq_lens,
  // workspace_starts}, scalar {batch_size}. The ref's checks, in its order and with its
  // messages, resolve every row to its entry's byte offset before the launch.
  Status run_upconvert_gather(KernelFn fn, const KernelArgs& args) const {
    const std::string_view op = op_name(spec_.op);
    const Tensor& src = args.tensor(0);
    const Tensor& dst = args.tensor(1);
    const Tensor& starts = args.tensor(4);
    const auto batch = static_cast<int64_t>(args.scalar(0));
    const int64_t rows = dst.size(0);
    const BlockTableView table{op, args.tensor(2), src,
                               spec_.get<ir::UpconvertGatherParams>().block_size};
    KILN_RETURN_IF_ERROR(ir::check_workspace_starts(op, starts, batch, rows));
    std::vector<int64_t> offsets(size_t(std::max<int64_t>(rows, 0)));
    const int64_t block_size = table.block_size;
    const int64_t entry_stride = src.stride(1) * int64_t(src.element_size());
    // A request's positions run 0, 1, ...: its block-table entry is checked once per block
    // (at the block's first position, the row the ref would report), then reused.
    int64_t r = 0, checked_r = -1, checked_column = -1, block_offset = 0;
    for (int64_t o = 0; o < rows; ++o) {
      int64_t pos = 0;
      KILN_RETURN_IF_ERROR(ir::check_workspace_row(op, starts, batch, o, r, pos));
      if (r != checked_r || pos / block_size != checked_column) {
        KILN_RETURN_IF_ERROR(table.locate(r, pos, block_offset));
        block_offset -= (pos % block_size) * entry_stride;
        checked_r = r;
        checked_column = pos / block_size;
      }
      offsets[size_t(o)] = block_offset + (pos % block_size) * entry_stride;
    }
    GatherCallArgs call{};
    call.src = static_cast<const uint8_t*>(src.data());
    call.dst = dst.data();
    call.src_offsets = offsets.data();
    call.dst_row_stride = dst.stride(0) * int64_t(dst.element_size());
    run_rows(fn, &call, rows, estimates(spec_, {.tokens = rows, .batch = batch}).bytes, config_);
    return Status::ok();
  }

  // indexer_k_quant_and_cache: {k, kv_cache, slot_mapping}; one row per k row.
  Status run_indexer_quant(KernelFn fn, const KernelArgs& args) const {
    const auto& p = spec_.get<ir::IndexerQuantParams>();
    const Tensor& k = args.tensor(0);
    const Tensor& cache = args.tensor(1);
    const Tensor& slots = args.tensor(2);
    const int64_t tokens = k.size(0);
    KILN_RETURN_IF_ERROR(
        ir::check_slots(op_name(spec_.op), slots, tokens, cache.size(0), p.block_size));
    IndexerQuantCallArgs call{k.data(), static_cast<uint8_t*>(cache.data()),
                              slots.data_as<const int64_t>()};
    run_rows(fn, &call, tokens, estimates(spec_, {.tokens = tokens}).bytes, config_);
    return Status::ok();
  }

  // cp_gather_indexer_k_quant_cache: {kv_cache, dst_k, dst_scale, block_table, cu_seq_lens}.
  // Rows [cu_seq_lens[0], cu_seq_lens[B]) of the destinations, each resolved (and checked) to
  // the value and scale byte offsets of its cache entry; other rows untouched.
  Status run_indexer_gather(KernelFn fn, const KernelArgs& args) const {
    const auto& p = spec_.get<ir::IndexerGatherParams>();
    const std::string_view op = op_name(spec_.op);
    const Tensor& cache = args.tensor(0);
    const Tensor& dst_k = args.tensor(1);
    const Tensor& dst_scale = args.tensor(2);
    const Tensor& block_table = args.tensor(3);
    const Tensor& cu = args.tensor(4);
    const int64_t batch = block_table.size(0);
    // Runs of rows inside one block: {first row, count, block byte offset, first position}.
    std::vector<int64_t> runs;
    int64_t rows = 0;
    for (int64_t r = 0; r < batch; ++r) {
      int64_t begin = 0;
      int64_t end = 0;
      KILN_RETURN_IF_ERROR(ir::check_request_rows(op, cu, r, dst_k.size(0), begin, end));
      // Positions 0, 1, ...: one block-table check per block, at its first position.
      for (int64_t first = begin; first < end; first += p.block_size) {
        int64_t block = 0;
        KILN_RETURN_IF_ERROR(ir::check_block_table_entry(op, block_table, cache.size(0),
                                                         p.block_size, r, first - begin, block));
        const int64_t count = std::min(end, first + p.block_size) - first;
        runs.insert(runs.end(), {first, count, block * cache.stride(0), 0});
        rows += count;
      }
    }
    if (runs.empty()) return Status::ok();
    IndexerGatherCallArgs call{};
    call.cache = static_cast<const uint8_t*>(cache.data());
    call.dst_k = static_cast<uint8_t*>(dst_k.data());
    call.dst_scale = static_cast<uint8_t*>(dst_scale.data());
    call.runs = runs.data();
    call.dst_k_row_stride = dst_k.stride(0);
    call.dst_scale_row_stride = dst_scale.stride(0);
    const auto run_count = int64_t(runs.size() / 4);
    run_rows(fn, &call, run_count, estimates(spec_, {.tokens = rows, .batch = batch}).bytes,
             config_);
    return Status::ok();
  }

  // merge_attn_states: {output, output_lse, prefix_output, prefix_lse, suffix_output,
  // suffix_lse, output_scale}, scalar prefill_tokens_with_context (< 0: None, i.e. T).
  void run_merge(KernelFn fn, const KernelArgs& args) const {
    const auto& p = spec_.get<ir::MergeAttnStatesParams>();
    const Tensor& output = args.tensor(0);
    const Tensor& prefix = args.tensor(2);
    const Tensor& suffix = args.tensor(4);
    const int64_t tokens = prefix.size(0);
    const int64_t esize = int64_t(dtype_size(p.dtype));
    const int64_t osize = int64_t(dtype_size(p.out_dtype));
    MergeCallArgs call{};
    call.output = output.data();
    call.output_lse = p.output_lse ? args.tensor(1).data_as<float>() : nullptr;
    call.prefix = prefix.data();
    call.prefix_lse = args.tensor(3).data_as<const float>();
    call.suffix = suffix.data();
    call.suffix_lse = args.tensor(5).data_as<const float>();
    call.output_token_stride = output.stride(0) * osize;
    call.output_head_stride = output.stride(1) * osize;
    call.prefix_token_stride = prefix.stride(0) * esize;
    call.prefix_head_stride = prefix.stride(1) * esize;
    call.suffix_token_stride = suffix.stride(0) * esize;
    call.suffix_head_stride = suffix.stride(1) * esize;
    call.lse_head_stride = tokens * 4;
    call.with_context = args.scalar(0) < 0 ? tokens : static_cast<int64_t>(args.scalar(0));
    if (p.out_dtype == DType::kFp8E4m3) {
      call.inv_scale = 1.0f / args.tensor(6).data_as<const float>()[0];
    }
    call.output_aligned = reinterpret_cast<uintptr_t>(call.output) % 64 == 0 &&
                          call.output_token_stride % 64 == 0 && call.output_head_stride % 64 == 0;
    run_rows(fn, &call, tokens, estimates(spec_, {.tokens = tokens}).bytes, config_);
  }

  // rotary_embedding_and_cache_flash: {positions, query, key, value, cos_sin_cache, key_cache,
  // value_cache, slot_mapping, k_scale, v_scale}; one row per position. Positions and slots are
  // checked (the ref's order and messages) before anything is rotated or written.
  Status run_rope_cache_flash(KernelFn fn, const KernelArgs& args) const {
    const auto& p = spec_.get<ir::RopeFlashCacheWriteParams>();
    const std::string_view op = op_name(spec_.op);
    const Tensor& positions = args.tensor(0);
    const Tensor& query = args.tensor(1);
    const Tensor& key = args.tensor(2);
    const Tensor& value = args.tensor(3);
    const Tensor& cos_sin = args.tensor(4);
    const Tensor& key_cache = args.tensor(5);
    const Tensor& slots = args.tensor(7);
    const int64_t tokens = positions.size(0);
    const int64_t max_position = cos_sin.size(0);
    KILN_RETURN_IF_ERROR(ir::check_positions(op, positions, tokens, max_position));
    KILN_RETURN_IF_ERROR(
        ir::check_slots(op, slots, slots.size(0), key_cache.size(0), p.block_size));
    const int64_t esize = int64_t(dtype_size(p.dtype));
    RopeFlashCallArgs call{};
    call.cache.key = key.data();
    call.cache.value = value.data();
    call.cache.key_cache = key_cache.data();
    call.cache.value_cache = args.tensor(6).data();
    call.cache.slots = slots.data_as<const int64_t>();
    call.cache.k_scale = args.tensor(8).data_as<const float>();
    call.cache.v_scale = args.tensor(9).data_as<const float>();
    call.cache.key_row_stride = key.stride(0) * esize;
    call.cache.value_row_stride = value.stride(0) * esize;
    call.cache.block_stride = key_cache.stride(0) * int64_t(ir::cache_element_size(p.dtype, p.kv));
    call.positions = positions.data_as<const int64_t>();
    call.query = query.data();
    call.cos_sin_cache = cos_sin.data();
    call.query_token_stride = query.stride(0) * esize;
    call.query_head_stride = query.stride(1) * esize;
    call.slot_tokens = slots.size(0);
    run_rows(fn, &call, tokens, estimates(spec_, {.tokens = tokens}).bytes, config_);
    return Status::ok();
  }

  void run_activation(KernelFn fn, const KernelArgs& args) const {
    const auto& p = spec_.get<ir::ActivationParams>();
    const int64_t esize = int64_t(dtype_size(p.dtype));
    ActivationCallArgs call{};
    call.dst = args.tensor(0).data();
    call.src = args.tensor(1).data();
    call.dst_row_stride = p.d * esize;
    call.src_row_stride = 2 * p.d * esize;
    if (spec_.op == OpKind::kFatreluAndMul) call.threshold = float(args.scalar(0));
    if (spec_.op == OpKind::kSwigluoaiAndMul) {
      call.alpha = float(args.scalar(0));
      call.limit = float(args.scalar(1));
    }
    const int64_t rows = args.tensor(0).numel() / p.d;
    run_rows(fn, &call, rows, estimates(spec_, {.tokens = rows}).bytes, config_);
  }

  OpSpec spec_;
  Config config_;
  const void* code_;
  size_t size_;
};

class X86Backend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kX86; }

  Support supports(const OpSpec& spec, const Target& target) const override {
    if (target.isa < X86Isa::kAvx2) {
      return Support::no(
          fmt::format("x86 backend needs AVX2+FMA+F16C; target is {}", x86_isa_name(target.isa)));
    }
    if (is_cpu_attention_op(spec.op)) return cpu_attention_support(spec, target);
    if (!is_norm(spec.op) && !is_activation(spec.op) && !is_rope(spec.op) &&
        !is_cache_write(spec.op) && !is_mla_write(spec.op) && !is_cache_copy(spec.op) &&
        !is_gather(spec.op) && !is_mla_indexer_merge(spec.op)) {
      return Support::no(fmt::format(
          "x86 backend does not generate {} yet (served: rms_norm, fused_add_rms_norm, "
          "rotary_embedding, silu_and_mul, mul_and_silu, gelu_and_mul, gelu_tanh_and_mul, "
          "fatrelu_and_mul, swigluoai_and_mul, reshape_and_cache, reshape_and_cache_flash, "
          "concat_and_cache_mla, swap_blocks, convert_fp8, cp_gather_cache, "
          "gather_and_maybe_dequant_cache, concat_and_cache_mla_rope_fused, "
          "cp_gather_and_upconvert_fp8_kv_cache, indexer_k_quant_and_cache, "
          "cp_gather_indexer_k_quant_cache, merge_attn_states, rotary_embedding_and_cache_flash)",
          op_name(spec.op)));
    }
    return Support::yes();  // every dtype and width validate() accepts
  }

  std::vector<Config> configs(const OpSpec& spec, const Target& target) const override {
    if (is_cpu_attention_op(spec.op)) return cpu_attention_configs(spec, target);
    // swap_blocks: each point with either copy; the default is the host's (`target` is the
    // host's, capped at most, when configs() serves a compile or `kiln tune`).
    const bool swap = spec.op == OpKind::kSwapBlocks;
    const std::vector<int64_t> copies = swap ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{};
    std::vector<Config> space;
    space.push_back(swap && host_core_traits().prefers_rep_movsb
                        ? Config().set(std::string(kRepMovsb), 1)
                        : Config{});  // heuristic default
    for (int64_t threads : {1, 2}) {
      for (int64_t kib : {64, 256, 1024}) {
        const Config point =
            Config().set(std::string(kThreads), threads).set(std::string(kMinParallelKib), kib);
        if (!swap) space.push_back(point);
        for (int64_t copy : copies)
          space.push_back(Config(point).set(std::string(kRepMovsb), copy));
      }
    }
    return space;
  }

  Result<Artifact> lower(const OpSpec& spec, const Config& config,
                         const Target& target) const override {
    KILN_RETURN_IF_ERROR(check_config(spec, config, target.isa));
    Result<std::vector<uint8_t>> code = generate(spec, config, target.isa);
    if (!code.is_ok()) return code.status();
    Artifact artifact;
    artifact.code = std::move(code).value();
    artifact.config = config;
    if (spec.op == OpKind::kCpuAttentionWithKvCache &&
        attention_predecode_applies(spec, config, target.isa)) {
      // The code was generated for one way of decoding the fp8 cache: the artifact says which,
      // so the runner that load builds agrees with it whatever the default becomes.
      artifact.config.set(std::string(kPredecodeKnob),
                          attention_predecodes_fp8(spec, config, target.isa) ? 1 : 0);
    }
    return artifact;
  }

  Result<std::shared_ptr<const Executable>> load(const OpSpec& spec, const Artifact& artifact,
                                                 const Target& target) const override {
    if (artifact.code.empty()) {
      return Status(StatusCode::kInternal, "x86 artifact has no code");
    }
    // Also here: a disk-cache entry stored before lower checked the knobs may carry others.
    KILN_RETURN_IF_ERROR(check_config(spec, artifact.config, target.isa));
    Result<const void*> address = CodeArena::global().add(artifact.code);
    if (!address.is_ok()) return address.status();
    if (is_cpu_attention_op(spec.op)) {
      return make_cpu_attention_executable(spec, artifact.config, target.isa, address.value(),
                                           artifact.code.size());
    }
    return std::shared_ptr<const Executable>(std::make_shared<X86Executable>(
        spec, artifact.config, address.value(), artifact.code.size()));
  }

  std::string_view codegen_version() const override { return kCodegenVersion; }

 private:
  // `config` matters to the attention kernels (the dpbf16 knob) and to swap_blocks (rep_movsb);
  // the other generators' knobs are read by their runners.
  static Result<std::vector<uint8_t>> generate(const OpSpec& spec, const Config& config,
                                               X86Isa isa) {
    if (is_cpu_attention_op(spec.op)) return generate_cpu_attention_op(spec, config, isa);
    if (is_norm(spec.op)) return generate_norm(spec, isa);
    if (is_rope(spec.op)) return generate_rope(spec, isa);
    if (is_cache_write(spec.op)) return generate_cache_write(spec, isa);
    if (is_mla_write(spec.op)) {
      if (spec.get<ir::MlaCacheWriteParams>().kv == ir::KvCacheDtype::kFp8DsMla) {
        return generate_ds_mla_cache_write(spec, isa);
      }
      return generate_mla_cache_write(spec, isa);
    }
    if (spec.op == OpKind::kConcatAndCacheMlaRopeFused) return generate_mla_rope_fused(spec, isa);
    if (spec.op == OpKind::kCpGatherAndUpconvertFp8KvCache) {
      return generate_upconvert_gather(spec, isa);
    }
    if (spec.op == OpKind::kIndexerKQuantAndCache) return generate_indexer_quant(spec, isa);
    if (spec.op == OpKind::kCpGatherIndexerKQuantCache) return generate_indexer_gather(spec, isa);
    if (spec.op == OpKind::kMergeAttnStates) return generate_merge_attn_states(spec, isa);
    if (spec.op == OpKind::kRotaryEmbeddingAndCacheFlash)
      return generate_rope_cache_flash(spec, isa);
    if (spec.op == OpKind::kSwapBlocks) {
      return generate_swap_blocks(spec, config.get(kRepMovsb, 0) != 0, isa);
    }
    if (spec.op == OpKind::kConvertFp8) return generate_convert_fp8(spec, isa);
    if (is_gather(spec.op)) return generate_gather(spec, isa);
    return generate_activation(spec, isa);
  }
};

}  // namespace

std::unique_ptr<Backend> make_backend() {
  return std::make_unique<X86Backend>();
}

}  // namespace jit::codegen::x86
