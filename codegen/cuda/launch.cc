#include "codegen/cuda/launch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "codegen/cuda/paged_attention.h"
#include "codegen/cuda/render.h"
#include "ir/check_args.h"
#include "kiln_args.cuh"

namespace jit::codegen::cuda {
namespace {

// Blocks along grid.x are limited to 2^31 - 1.
constexpr int64_t kMaxGridX = 2147483647;

bool is_activation(OpKind op) {
  return op_family(op) == "activation";
}

bool aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % uint64_t(bytes) == 0;
}

// One block per row, `threads` threads; an error when rows exceed grid.x.
Status set_rows(LaunchPlan& plan, std::string_view op, int64_t rows, int64_t threads) {
  if (rows > kMaxGridX) {
    return invalid_argument(
        fmt::format("{}: {} rows exceed the cuda backend's grid limit of {} rows per call", op,
                    rows, kMaxGridX));
  }
  plan.empty = rows == 0;
  plan.grid[0] = unsigned(rows == 0 ? 1 : rows);
  plan.block[0] = unsigned(threads);
  return Status::ok();
}

// The checked mode of the cache writes: every slot is padding (< 0) or inside the cache.
Status check_slots(std::string_view op, const Tensor& slots, int64_t num_blocks,
                   int64_t block_size) {
  return ir::check_slots(op, slots, slots.size(0), num_blocks, block_size);
}

// Fills the fields the gathers share: source strides, dst and table strides.
kiln::GatherArgs gather_args(const KernelArgs& args) {
  kiln::GatherArgs a{};
  const Tensor& src = args.tensor(0);
  const Tensor& dst = args.tensor(1);
  a.src = src.data();
  a.dst = dst.data();
  a.block_table = args.tensor(2).data_as<const int>();
  a.cu_seq_lens = args.tensor(3).data_as<const int>();
  a.src_block_stride = src.stride(0);
  a.src_entry_stride = src.stride(1);
  a.dst_stride = dst.stride(0);
  a.table_stride = args.tensor(2).stride(0);
  return a;
}

// The gathers' checked mode (the ref's checks and messages): every position a call reads
// resolves through the block table to a block inside the cache.
Status check_gather(const OpSpec& spec, const KernelArgs& args) {
  const std::string_view op = op_name(spec.op);
  const Tensor& src = args.tensor(0);
  const Tensor& table = args.tensor(2);
  const Tensor& cu = args.tensor(3);
  int64_t block = 0;
  if (spec.op == OpKind::kGatherAndMaybeDequantCache) {
    const auto& p = spec.get<ir::GatherCacheParams>();
    const Tensor& token_to_seq = args.tensor(4);
    const Tensor& seq_starts = args.tensor(6);
    const int64_t batch = table.size(0);
    for (int64_t tok = 0; tok < int64_t(args.scalar(0)); ++tok) {
      int64_t r = 0, pos = 0;
      KILN_RETURN_IF_ERROR(
          ir::check_token_position(op, cu, token_to_seq, seq_starts, batch, tok, r, pos));
      if (pos < 0) continue;  // past its request's end: skipped
      KILN_RETURN_IF_ERROR(
          ir::check_block_table_entry(op, table, src.size(0), p.block_size, r, pos, block));
    }
    return Status::ok();
  }
  const auto& p = spec.get<ir::CpGatherCacheParams>();
  const Tensor& seq_starts = args.tensor(4);
  for (int64_t r = 0; r < int64_t(args.scalar(0)); ++r) {
    int64_t begin = 0, end = 0;
    KILN_RETURN_IF_ERROR(ir::check_request_rows(op, cu, r, args.tensor(1).size(0), begin, end));
    int64_t start = 0;
    KILN_RETURN_IF_ERROR(ir::check_seq_start(op, seq_starts, r, start));
    for (int64_t row = begin; row < end; ++row) {
      KILN_RETURN_IF_ERROR(ir::check_block_table_entry(op, table, src.size(0), p.block_size, r,
                                                       row - begin + start, block));
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<LaunchPlan>> plan_launch(const OpSpec& spec, const Config& config,
                                            const KernelArgs& args, bool host_data) {
  LaunchPlan plan;
  const int64_t threads = config.get(kThreads, 256);
  const int64_t vec = config.get(kVec, 1);
  const std::string_view op = op_name(spec.op);
  if (spec.op == OpKind::kRmsNorm || spec.op == OpKind::kFusedAddRmsNorm) {
    const auto& p = spec.get<ir::NormParams>();
    const int64_t esize = int64_t(dtype_size(p.dtype));
    const int64_t vbytes = vec * esize;
    kiln::NormArgs a{};
    const Tensor& first = args.tensor(0);   // out (rms_norm) or input (fused)
    const Tensor& second = args.tensor(1);  // input (rms_norm) or residual (fused)
    const Tensor& weight = args.tensor(2);
    if (spec.op == OpKind::kFusedAddRmsNorm) {
      a.dst = first.data();
      a.src = first.data();
      a.dst_stride = a.src_stride = ir::row_stride(first);
      a.residual = second.data();
      a.residual_stride = ir::row_stride(second);
    } else {
      a.dst = first.data();
      a.dst_stride = p.hidden;
      a.src = second.data();
      a.src_stride = ir::row_stride(second);
    }
    a.weight = p.weight ? weight.data() : nullptr;
    a.epsilon = float(args.scalar(0));
    a.rows = second.numel() / p.hidden;
    a.vector_ok = aligned(a.dst, vbytes) && aligned(a.src, vbytes) &&
                  (a.dst_stride * esize) % vbytes == 0 && (a.src_stride * esize) % vbytes == 0 &&
                  (!p.weight || aligned(a.weight, vbytes)) &&
                  (a.residual == nullptr ||
                   (aligned(a.residual, vbytes) && (a.residual_stride * esize) % vbytes == 0));
    KILN_RETURN_IF_ERROR(set_rows(plan, op, a.rows, threads));
    plan.set_params(a);
  } else if (is_activation(spec.op)) {
    const auto& p = spec.get<ir::ActivationParams>();
    const int64_t esize = int64_t(dtype_size(p.dtype));
    // swigluoai reads 2·vec inputs per access.
    const int64_t vbytes = vec * esize * (spec.op == OpKind::kSwigluoaiAndMul ? 2 : 1);
    kiln::ActivationArgs a{};
    a.dst = args.tensor(0).data();
    a.src = args.tensor(1).data();
    a.rows = args.tensor(1).numel() / (2 * p.d);
    a.p0 = args.scalar_count > 0 ? float(args.scalar(0)) : 0.0f;
    a.p1 = args.scalar_count > 1 ? float(args.scalar(1)) : 0.0f;
    a.vector_ok = aligned(a.dst, vbytes) && aligned(a.src, vbytes);
    KILN_RETURN_IF_ERROR(set_rows(plan, op, a.rows, threads));
    plan.set_params(a);
  } else if (spec.op == OpKind::kRotaryEmbedding) {
    const auto& p = spec.get<ir::RopeParams>();
    const Tensor& positions = args.tensor(0);
    const Tensor& cache = args.tensor(3);
    if (host_data) KILN_RETURN_IF_ERROR(ir::check_rope_positions(positions, cache.size(0)));
    const int lead = positions.dim();
    kiln::RopeArgs a{};
    a.positions = positions.data_as<const long long>();
    a.query = args.tensor(1).data();
    a.cos_sin = cache.data();
    const ir::RopeStrides q = ir::rope_strides(args.tensor(1), lead, p.head_size);
    a.query_token_stride = q.token;
    a.query_head_stride = q.head;
    if (p.key) {
      const ir::RopeStrides k = ir::rope_strides(args.tensor(2), lead, p.head_size);
      a.key = args.tensor(2).data();
      a.key_token_stride = k.token;
      a.key_head_stride = k.head;
    }
    a.tokens = positions.numel();
    // Vector accesses of vec pairs: NeoX reads vec elements at j and E + j, GPT-J 2·vec at 2j;
    // every head start and the cache rows (rot_dim apart) must be aligned for them.
    const int64_t esize = int64_t(dtype_size(p.dtype));
    const int64_t span = (p.style == ir::RopeStyle::kNeox ? 1 : 2) * vec;
    const auto operand_ok = [&](const void* data, int64_t token_stride, int64_t head_stride) {
      return aligned(data, span * esize) && token_stride % span == 0 && head_stride % span == 0;
    };
    a.vector_ok = operand_ok(a.query, a.query_token_stride, a.query_head_stride) &&
                  (!p.key || operand_ok(a.key, a.key_token_stride, a.key_head_stride)) &&
                  aligned(a.cos_sin, vec * int64_t(dtype_size(p.cache_dtype)));
    KILN_RETURN_IF_ERROR(set_rows(plan, op, a.tokens, threads));
    plan.set_params(a);
  } else if (spec.op == OpKind::kReshapeAndCache || spec.op == OpKind::kReshapeAndCacheFlash) {
    const bool flash = spec.op == OpKind::kReshapeAndCacheFlash;
    DType dtype;
    ir::KvCacheDtype kv;
    int64_t block_size;
    if (flash) {
      const auto& p = spec.get<ir::FlashCacheWriteParams>();
      dtype = p.dtype, kv = p.kv, block_size = p.block_size;
    } else {
      const auto& p = spec.get<ir::PagedCacheWriteParams>();
      dtype = p.dtype, kv = p.kv, block_size = p.block_size;
    }
    const Tensor& slots = args.tensor(4);
    const Tensor& key_cache = args.tensor(2);
    const Tensor& value_cache = args.tensor(3);
    if (host_data) KILN_RETURN_IF_ERROR(check_slots(op, slots, key_cache.size(0), block_size));
    // vLLM's slot_mapping is int64 and dense here (check_args); the kernel indexes it by token.
    if (slots.stride(0) != 1 && slots.size(0) > 1) {
      return invalid_argument(fmt::format("{}: the cuda backend needs a dense slot_mapping ({})",
                                          op, slots.describe()));
    }
    kiln::CacheWriteArgs a{};
    a.key = args.tensor(0).data();
    a.value = args.tensor(1).data();
    a.key_cache = key_cache.data();
    a.value_cache = value_cache.data();
    a.slots = slots.data_as<const long long>();
    a.k_scale = args.tensor(5).data_as<const float>();
    a.v_scale = args.tensor(6).data_as<const float>();
    a.key_stride = args.tensor(0).stride(0);
    a.value_stride = args.tensor(1).stride(0);
    a.tokens = slots.size(0);
    const int64_t in_size = int64_t(dtype_size(dtype));
    const int64_t cache_size = int64_t(ir::cache_element_size(dtype, kv));
    a.vector_ok = aligned(a.key, vec * in_size) && aligned(a.value, vec * in_size) &&
                  a.key_stride % vec == 0 && a.value_stride % vec == 0 &&
                  aligned(a.key_cache, vec * cache_size) &&
                  aligned(a.value_cache, vec * cache_size);
    if (flash) {
      for (int d = 0; d < 3; ++d) {
        a.key_cache_strides[d] = key_cache.stride(d);
        a.value_cache_strides[d] = value_cache.stride(d);
        a.vector_ok =
            a.vector_ok && key_cache.stride(d) % vec == 0 && value_cache.stride(d) % vec == 0;
      }
    }
    KILN_RETURN_IF_ERROR(set_rows(plan, op, a.tokens, threads));
    plan.set_params(a);
  } else if (spec.op == OpKind::kSwapBlocks) {
    // The mapping is a CPU tensor (as in vLLM), read here whatever the data's device.
    const auto& p = spec.get<ir::SwapBlocksParams>();
    const Tensor& src = args.tensor(0);
    const Tensor& dst = args.tensor(1);
    const Tensor& mapping = args.tensor(2);
    const int64_t src_blocks = src.numel() * int64_t(src.element_size()) / p.block_bytes;
    const int64_t dst_blocks = dst.numel() * int64_t(dst.element_size()) / p.block_bytes;
    const auto* m = mapping.data_as<const int64_t>();
    const auto id = [&](int64_t i, int64_t j) {
      return m[i * mapping.stride(0) + j * mapping.stride(1)];
    };
    KILN_RETURN_IF_ERROR(ir::check_block_mapping(op, mapping, src_blocks, dst_blocks));
    std::vector<LaunchPlan> plans;
    for (int64_t first = 0; first < mapping.size(0); first += kiln::kSwapPairs) {
      kiln::SwapArgs a{};
      a.src = src.data();
      a.dst = dst.data();
      a.count = int(std::min<int64_t>(kiln::kSwapPairs, mapping.size(0) - first));
      for (int k = 0; k < a.count; ++k) {
        a.pairs[k][0] = id(first + k, 0);
        a.pairs[k][1] = id(first + k, 1);
      }
      a.vector_ok = aligned(a.src, 16) && aligned(a.dst, 16);
      LaunchPlan one;
      one.grid[0] = unsigned(a.count);
      one.block[0] = unsigned(threads);
      one.set_params(a);
      plans.push_back(one);
    }
    return plans;
  } else if (spec.op == OpKind::kConcatAndCacheMlaRopeFused) {
    const auto& p = spec.get<ir::MlaRopeCacheWriteParams>();
    const Tensor& positions = args.tensor(0);
    const Tensor& q_pe = args.tensor(1);
    const Tensor& cos_sin = args.tensor(4);
    const Tensor& slots = args.tensor(5);
    const Tensor& cache = args.tensor(6);
    const int64_t tokens = q_pe.size(0);
    if (host_data)
      KILN_RETURN_IF_ERROR(ir::check_positions(op, positions, tokens, cos_sin.size(0)));
    if (host_data) KILN_RETURN_IF_ERROR(check_slots(op, slots, cache.size(0), p.block_size));
    if ((slots.stride(0) != 1 && tokens > 1) || (positions.stride(0) != 1 && tokens > 1)) {
      return invalid_argument(
          fmt::format("{}: the cuda backend needs dense positions and slot_mapping ({}, {})", op,
                      positions.describe(), slots.describe()));
    }
    kiln::MlaRopeArgs a{};
    a.positions = positions.data_as<const long long>();
    a.q_pe = q_pe.data();
    a.k_pe = args.tensor(2).data();
    a.kv_c = args.tensor(3).data();
    a.cos_sin = cos_sin.data();
    a.slots = slots.data_as<const long long>();
    a.cache = cache.data();
    a.scale = args.tensor(7).data_as<const float>();
    a.q_token_stride = q_pe.stride(0);
    a.q_head_stride = q_pe.stride(1);
    a.k_stride = args.tensor(2).stride(0);
    a.kv_c_stride = args.tensor(3).stride(0);
    a.cache_block_stride = cache.stride(0);
    a.cache_entry_stride = cache.stride(1);
    a.tokens = tokens;
    KILN_RETURN_IF_ERROR(set_rows(plan, op, tokens, threads));
    plan.set_params(a);
  } else if (spec.op == OpKind::kCpGatherAndUpconvertFp8KvCache) {
    const auto& p = spec.get<ir::UpconvertGatherParams>();
    const Tensor& src = args.tensor(0);
    const Tensor& dst = args.tensor(1);
    const Tensor& table = args.tensor(2);
    const Tensor& starts = args.tensor(4);
    const int64_t batch = int64_t(args.scalar(0));
    const int64_t rows = dst.size(0);
    if (host_data) {
      KILN_RETURN_IF_ERROR(ir::check_workspace_starts(op, starts, batch, rows));
      int64_t r = 0, block = 0;
      for (int64_t o = 0; o < rows; ++o) {
        int64_t pos = 0;
        KILN_RETURN_IF_ERROR(ir::check_workspace_row(op, starts, batch, o, r, pos));
        KILN_RETURN_IF_ERROR(
            ir::check_block_table_entry(op, table, src.size(0), p.block_size, r, pos, block));
      }
    }
    kiln::UpconvertArgs a{};
    a.src = src.data();
    a.dst = dst.data();
    a.block_table = table.data_as<const int>();
    a.workspace_starts = starts.data_as<const int>();
    a.src_block_stride = src.stride(0);
    a.src_entry_stride = src.stride(1);
    a.dst_stride = dst.stride(0);
    a.table_stride = table.stride(0);
    a.batch = batch;
    a.rows = rows;
    KILN_RETURN_IF_ERROR(set_rows(plan, op, rows, threads));
    plan.set_params(a);
  } else if (spec.op == OpKind::kIndexerKQuantAndCache) {
    const auto& p = spec.get<ir::IndexerQuantParams>();
    const Tensor& k = args.tensor(0);
    const Tensor& cache = args.tensor(1);
    const Tensor& slots = args.tensor(2);
    if (host_data) KILN_RETURN_IF_ERROR(check_slots(op, slots, cache.size(0), p.block_size));
    if (slots.stride(0) != 1 && slots.size(0) > 1) {
      return invalid_argument(fmt::format("{}: the cuda backend needs a dense slot_mapping ({})",
                                          op, slots.describe()));
    }
    kiln::IndexerArgs a{};
    a.k = k.data();
    a.cache = cache.data();
    a.slots = slots.data_as<const long long>();
    // The ref addresses blocks by their byte size: BS * (D + 4G).
    a.cache_block_stride = p.block_size * (p.head_dim + 4 * (p.head_dim / p.quant_block));
    a.count = k.size(0);
    KILN_RETURN_IF_ERROR(set_rows(plan, op, a.count, threads));
    plan.set_params(a);
  } else if (spec.op == OpKind::kCpGatherIndexerKQuantCache) {
    const auto& p = spec.get<ir::IndexerGatherParams>();
    const Tensor& cache = args.tensor(0);
    const Tensor& table = args.tensor(3);
    const Tensor& cu = args.tensor(4);
    int64_t block = 0;
    for (int64_t r = 0; host_data && r < table.size(0); ++r) {
      int64_t begin = 0, end = 0;
      KILN_RETURN_IF_ERROR(ir::check_request_rows(op, cu, r, args.tensor(1).size(0), begin, end));
      for (int64_t row = begin; row < end; ++row) {
        KILN_RETURN_IF_ERROR(ir::check_block_table_entry(op, table, cache.size(0), p.block_size, r,
                                                         row - begin, block));
      }
    }
    if (cu.stride(0) != 1 && cu.size(0) > 1) {
      return invalid_argument(
          fmt::format("{}: the cuda backend needs a dense cu_seq_lens ({})", op, cu.describe()));
    }
    kiln::IndexerArgs a{};
    a.cache = cache.data();
    a.dst_k = args.tensor(1).data();
    a.dst_scale = args.tensor(2).data();
    a.block_table = table.data_as<const int>();
    a.cu_seq_lens = cu.data_as<const int>();
    a.cache_block_stride = cache.stride(0);
    a.dst_k_stride = args.tensor(1).stride(0);
    a.dst_scale_stride = args.tensor(2).stride(0);
    a.table_stride = table.stride(0);
    a.count = table.size(0);
    KILN_RETURN_IF_ERROR(set_rows(plan, op, a.count, threads));
    plan.set_params(a);
  } else if (spec.op == OpKind::kGatherAndMaybeDequantCache || spec.op == OpKind::kCpGatherCache) {
    const bool dequant = spec.op == OpKind::kGatherAndMaybeDequantCache;
    if (host_data) KILN_RETURN_IF_ERROR(check_gather(spec, args));
    kiln::GatherArgs a = gather_args(args);
    if (dequant) {
      a.token_to_seq = args.tensor(4).data_as<const int>();
      a.scale = args.tensor(5).data_as<const float>();
      a.seq_starts = args.tensor(6).defined() ? args.tensor(6).data_as<const int>() : nullptr;
    } else {
      a.seq_starts = args.tensor(4).defined() ? args.tensor(4).data_as<const int>() : nullptr;
    }
    // The kernels index cu_seq_lens densely; a strided one is rare enough to refuse clearly.
    if (args.tensor(3).stride(0) != 1 && args.tensor(3).size(0) > 1) {
      return invalid_argument(fmt::format("{}: the cuda backend needs a dense cu_seq_lens ({})", op,
                                          args.tensor(3).describe()));
    }
    a.count = int64_t(args.scalar(0));
    KILN_RETURN_IF_ERROR(set_rows(plan, op, a.count, threads));
    plan.set_params(a);
  } else if (spec.op == OpKind::kConcatAndCacheMla) {
    const auto& p = spec.get<ir::MlaCacheWriteParams>();
    const Tensor& slots = args.tensor(3);
    const Tensor& cache = args.tensor(2);
    if (host_data) KILN_RETURN_IF_ERROR(check_slots(op, slots, cache.size(0), p.block_size));
    if (slots.stride(0) != 1 && slots.size(0) > 1) {
      return invalid_argument(fmt::format("{}: the cuda backend needs a dense slot_mapping ({})",
                                          op, slots.describe()));
    }
    kiln::MlaWriteArgs a{};
    a.kv_c = args.tensor(0).data();
    a.k_pe = args.tensor(1).data();
    a.cache = cache.data();
    a.slots = slots.data_as<const long long>();
    a.scale = args.tensor(4).data_as<const float>();
    a.kv_c_stride = args.tensor(0).stride(0);
    a.k_pe_stride = args.tensor(1).stride(0);
    a.cache_block_stride = cache.stride(0);
    a.cache_entry_stride = cache.stride(1);
    a.tokens = slots.size(0);
    KILN_RETURN_IF_ERROR(set_rows(plan, op, a.tokens, threads));
    plan.set_params(a);
  } else if (spec.op == OpKind::kConvertVerticalSlashIndexes ||
             spec.op == OpKind::kConvertVerticalSlashIndexesMergehead) {
    const auto& p = spec.get<ir::VerticalSlashParams>();
    const bool mergehead = spec.op == OpKind::kConvertVerticalSlashIndexesMergehead;
    if (host_data)
      KILN_RETURN_IF_ERROR(ir::check_vertical_slash_indexes(op, p, mergehead, args).status());
    kiln::VerticalSlashArgs a{};
    a.block_count = args.tensor(0).data_as<int>();
    a.block_offset = args.tensor(1).data_as<int>();
    a.column_count = args.tensor(2).data_as<int>();
    a.column_index = args.tensor(3).data_as<int>();
    a.q_seqlens = args.tensor(4).data_as<const int>();
    a.kv_seqlens = args.tensor(5).data_as<const int>();
    a.vertical = args.tensor(6).data_as<const int>();
    a.slash = args.tensor(7).data_as<const int>();
    if (mergehead) {
      a.vertical_counts = args.tensor(8).data_as<const int>();
      a.slash_counts = args.tensor(9).data_as<const int>();
    }
    a.batch = args.tensor(7).size(0);
    a.heads = args.tensor(7).size(1);
    a.nnz_s = args.tensor(7).size(2);
    a.nnz_v = args.tensor(6).size(2);
    a.rows = args.tensor(0).size(2);
    const int64_t units = a.batch * a.heads * a.rows;
    KILN_RETURN_IF_ERROR(set_rows(plan, op, (units + threads - 1) / threads, threads));
    plan.set_params(a);
  } else if (spec.op == OpKind::kTopKPerRowPrefill || spec.op == OpKind::kTopKPerRowDecode) {
    const bool decode = spec.op == OpKind::kTopKPerRowDecode;
    const int sc = decode ? 1 : 0;
    kiln::TopKArgs a{};
    const Tensor& logits = args.tensor(0);
    a.logits = logits.data_as<const float>();
    a.rows = int64_t(args.scalar(sc));
    a.stride0 = int64_t(args.scalar(sc + 1));
    a.stride1 = int64_t(args.scalar(sc + 2));
    a.columns = logits.size(1);
    a.indices = args.tensor(decode ? 2 : 3).data_as<int>();
    if (decode) {
      a.next_n = int64_t(args.scalar(0));
      a.seq_lens = args.tensor(1).data_as<const int>();
    } else {
      a.row_starts = args.tensor(1).data_as<const int>();
      a.row_ends = args.tensor(2).data_as<const int>();
    }
    // The ranges, checked on the host before the launch (the ref's messages and order).
    for (int64_t r = 0; host_data && r < a.rows; ++r) {
      if (decode) {
        const int64_t len = a.seq_lens[r / a.next_n];
        const int64_t end = std::max<int64_t>(len - a.next_n + r % a.next_n + 1, 0);
        if (end > a.columns) {
          return invalid_argument(fmt::format(
              "{}: argument 'seq_lens' has seq_lens[{}] = {}, so row {} ends at {}, past the "
              "{} logits columns",
              op, r / a.next_n, len, r, end, a.columns));
        }
      } else if (a.row_starts[r] < 0 || a.row_starts[r] > a.row_ends[r] ||
                 a.row_ends[r] > a.columns) {
        return invalid_argument(fmt::format(
            "{}: arguments 'rowStarts'/'rowEnds' give row {} the range [{}, {}), not inside "
            "[0, {}] in order",
            op, r, a.row_starts[r], a.row_ends[r], a.columns));
      }
    }
    KILN_RETURN_IF_ERROR(set_rows(plan, op, a.rows, threads));
    plan.set_params(a);
  } else if (spec.op == OpKind::kMergeAttnStates) {
    const auto& p = spec.get<ir::MergeAttnStatesParams>();
    const Tensor& output = args.tensor(0);
    const Tensor& prefix = args.tensor(2);
    const Tensor& suffix = args.tensor(4);
    kiln::MergeArgs a{};
    a.output = output.data();
    a.output_lse = p.output_lse ? args.tensor(1).data_as<float>() : nullptr;
    a.prefix = prefix.data();
    a.prefix_lse = args.tensor(3).data_as<const float>();
    a.suffix = suffix.data();
    a.suffix_lse = args.tensor(5).data_as<const float>();
    a.output_scale =
        p.out_dtype == DType::kFp8E4m3 ? args.tensor(6).data_as<const float>() : nullptr;
    const Tensor* views[] = {&output, &prefix, &suffix};
    long long* strides[] = {a.output_strides, a.prefix_strides, a.suffix_strides};
    a.vector_ok = true;
    for (int i = 0; i < 3; ++i) {
      strides[i][0] = views[i]->stride(0);
      strides[i][1] = views[i]->stride(1);
      const int64_t vbytes = vec * int64_t(views[i]->element_size());
      a.vector_ok = a.vector_ok && aligned(views[i]->data(), vbytes) && strides[i][0] % vec == 0 &&
                    strides[i][1] % vec == 0;
    }
    a.tokens = prefix.size(0);
    a.with_context = args.scalar(0) < 0 ? double(a.tokens) : args.scalar(0);
    KILN_RETURN_IF_ERROR(set_rows(plan, op, a.tokens * p.head_count, threads));
    plan.set_params(a);
  } else if (spec.op == OpKind::kConvertFp8) {
    const auto& p = spec.get<ir::ConvertFp8Params>();
    kiln::ConvertArgs a{};
    a.dst = args.tensor(0).data();
    a.src = args.tensor(1).data();
    a.count = args.tensor(1).numel();
    a.scale = float(args.scalar(0));
    a.vector_ok = aligned(a.dst, vec * int64_t(dtype_size(p.dst))) &&
                  aligned(a.src, vec * int64_t(dtype_size(p.src)));
    // Grid-stride: enough blocks for one pass, capped (each thread then loops).
    constexpr int64_t kMaxBlocks = 65536;
    const int64_t blocks = std::min<int64_t>(
        kMaxBlocks, std::max<int64_t>(1, (a.count + threads * vec - 1) / (threads * vec)));
    plan.empty = a.count == 0;
    plan.grid[0] = unsigned(blocks);
    plan.block[0] = unsigned(threads);
    plan.set_params(a);
  } else if (is_paged_attention_op(spec.op)) {
    Result<LaunchPlan> paged = plan_paged_attention(spec, config, args, host_data);
    if (!paged.is_ok()) return paged.status();
    return std::vector<LaunchPlan>{std::move(paged).value()};
  } else {
    return Status(StatusCode::kUnsupported,
                  fmt::format("the cuda backend has no launch plan for {}", op));
  }
  return std::vector<LaunchPlan>{plan};
}

}  // namespace jit::codegen::cuda
