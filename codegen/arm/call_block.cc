#include "codegen/arm/call_block.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "ir/check_args.h"
#include "ir/numeric.h"
#include "ir/params_cache.h"
#include "ir/params_cpu.h"
#include "ir/params_norm_act.h"

namespace jit::codegen::arm {
namespace {

// Writes words into a block in layout order.
class BlockWriter {
 public:
  explicit BlockWriter(CallBlock& block, int pointer_count, int word_count) : block_(block) {
    block_.pointer_count = pointer_count;
    block_.word_count = word_count;
  }
  void ptr(int i, const void* p) { block_.words[i] = reinterpret_cast<uintptr_t>(p); }
  void i64(int i, int64_t v) { block_.words[i] = uint64_t(v); }
  void f32(int i, double v) { block_.words[i] = std::bit_cast<uint32_t>(float(v)); }

 private:
  CallBlock& block_;
};

CallPlan plan_norm(const OpSpec& spec, const KernelArgs& args) {
  using namespace norm_words;
  const auto& p = spec.get<ir::NormParams>();
  const int64_t esize = int64_t(dtype_size(p.dtype));
  const Tensor& a = args.tensor(0);  // out (rms_norm) or input (fused, in place)
  const Tensor& b = args.tensor(1);  // input (rms_norm) or residual (fused)
  CallPlan plan;
  BlockWriter w(plan.block, kPointers, kCount);
  if (spec.op == OpKind::kFusedAddRmsNorm) {
    w.ptr(kDst, a.data());
    w.ptr(kSrc, a.data());
    w.i64(kDstStride, ir::row_stride(a) * esize);
    w.i64(kSrcStride, ir::row_stride(a) * esize);
    w.ptr(kResidual, b.data());
    w.i64(kResidualStride, ir::row_stride(b) * esize);
  } else {
    w.ptr(kDst, a.data());
    w.i64(kDstStride, p.hidden * esize);  // out is dense
    w.ptr(kSrc, b.data());
    w.i64(kSrcStride, ir::row_stride(b) * esize);
  }
  w.ptr(kWeight, p.weight ? args.tensor(2).data() : nullptr);
  w.f32(kEpsilon, args.scalar(0));  // vLLM's kernels take epsilon as a float
  plan.rows = b.numel() / p.hidden;
  return plan;
}

CallPlan plan_activation(const OpSpec& spec, const KernelArgs& args) {
  using namespace act_words;
  const auto& p = spec.get<ir::ActivationParams>();
  CallPlan plan;
  BlockWriter w(plan.block, kPointers, kCount);
  w.ptr(kDst, args.tensor(0).data());
  w.ptr(kSrc, args.tensor(1).data());
  if (spec.op == OpKind::kFatreluAndMul) w.f32(kThreshold, args.scalar(0));
  if (spec.op == OpKind::kSwigluoaiAndMul) {
    w.f32(kAlpha, args.scalar(0));
    w.f32(kLimit, args.scalar(1));
  }
  plan.rows = args.tensor(0).numel() / p.d;
  return plan;
}

Result<CallPlan> plan_rope(const OpSpec& spec, const KernelArgs& args) {
  using namespace rope_words;
  const auto& p = spec.get<ir::RopeParams>();
  const Tensor& positions = args.tensor(0);
  // Checked before any write: the kernel indexes the cache with the positions.
  KILN_RETURN_IF_ERROR(ir::check_rope_positions(positions, args.tensor(3).size(0)));
  const int64_t esize = int64_t(dtype_size(p.dtype));
  const int lead = positions.dim();
  CallPlan plan;
  BlockWriter w(plan.block, kPointers, kCount);
  w.ptr(kPositions, positions.data());
  w.ptr(kQuery, args.tensor(1).data());
  w.ptr(kCache, args.tensor(3).data());
  const ir::RopeStrides q = ir::rope_strides(args.tensor(1), lead, p.head_size);
  w.i64(kQueryTokenStride, q.token * esize);
  w.i64(kQueryHeadStride, q.head * esize);
  if (p.key) {
    const ir::RopeStrides k = ir::rope_strides(args.tensor(2), lead, p.head_size);
    w.ptr(kKey, args.tensor(2).data());
    w.i64(kKeyTokenStride, k.token * esize);
    w.i64(kKeyHeadStride, k.head * esize);
  }
  plan.rows = positions.numel();
  return plan;
}

// ---- cache ops: the x86 runner's checks (codegen/x86/x86_backend.cc), in the same order and
// with the same messages, so both backends reject the same calls the same way.

int64_t at_i32(const Tensor& t, int64_t i) {
  return t.data_as<const int32_t>()[i * t.stride(0)];
}

// Byte offset in `cache` of position `pos` of request `r` through the block table.
Status locate(std::string_view op, const Tensor& table, const Tensor& cache, int64_t block_size,
              int64_t r, int64_t pos, int64_t& offset) {
  int64_t block = 0;
  KILN_RETURN_IF_ERROR(
      ir::check_block_table_entry(op, table, cache.size(0), block_size, r, pos, block));
  offset = (block * cache.stride(0) + (pos % block_size) * cache.stride(1)) *
           int64_t(cache.element_size());
  return Status::ok();
}

// A side array owned by the plan; returns its address for a pointer word.
const void* keep(CallPlan& plan, const std::vector<int64_t>& values) {
  auto& bytes = plan.side.emplace_back(values.size() * sizeof(int64_t));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes.data();
}

Result<CallPlan> plan_cache_write(const OpSpec& spec, const KernelArgs& args) {
  using namespace cache_write_words;
  const bool mla = spec.op == OpKind::kConcatAndCacheMla;
  DType dtype;
  int64_t block_size;
  if (mla) {
    dtype = spec.get<ir::MlaCacheWriteParams>().dtype;
    block_size = spec.get<ir::MlaCacheWriteParams>().block_size;
  } else if (spec.op == OpKind::kReshapeAndCacheFlash) {
    dtype = spec.get<ir::FlashCacheWriteParams>().dtype;
    block_size = spec.get<ir::FlashCacheWriteParams>().block_size;
  } else {
    dtype = spec.get<ir::PagedCacheWriteParams>().dtype;
    block_size = spec.get<ir::PagedCacheWriteParams>().block_size;
  }
  // concat_and_cache_mla: {kv_c, k_pe, kv_cache, slot_mapping, scale}; the writes:
  // {key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale}.
  const Tensor& key = args.tensor(0);
  const Tensor& value = args.tensor(1);
  const Tensor& cache = args.tensor(2);
  const Tensor& slots = args.tensor(mla ? 3 : 4);
  const int64_t tokens = slots.size(0);
  KILN_RETURN_IF_ERROR(ir::check_slots(op_name(spec.op), slots, tokens, cache.size(0), block_size));
  const int64_t esize = int64_t(dtype_size(dtype));
  const int64_t csize = int64_t(cache.element_size());
  CallPlan plan;
  BlockWriter w(plan.block, kPointers, kCount);
  w.ptr(kKey, key.data());
  w.ptr(kValue, value.data());
  w.ptr(kKeyCache, cache.data());
  w.ptr(kSlots, slots.data());
  w.i64(kKeyRowStride, key.stride(0) * esize);
  w.i64(kValueRowStride, value.stride(0) * esize);
  w.i64(kBlockStride, cache.stride(0) * csize);
  if (mla) {
    w.ptr(kKScale, args.tensor(4).data());
    w.i64(kEntryStride, cache.stride(1) * csize);
  } else {
    w.ptr(kValueCache, args.tensor(3).data());
    w.ptr(kKScale, args.tensor(5).data());
    w.ptr(kVScale, args.tensor(6).data());
  }
  plan.rows = tokens;
  return plan;
}

Result<CallPlan> plan_swap_blocks(const OpSpec& spec, const KernelArgs& args) {
  using namespace swap_words;
  const int64_t block_bytes = spec.get<ir::SwapBlocksParams>().block_bytes;
  const Tensor& src = args.tensor(0);
  const Tensor& dst = args.tensor(1);
  const Tensor& mapping = args.tensor(2);
  const int64_t blocks[2] = {src.numel() * int64_t(src.element_size()) / block_bytes,
                             dst.numel() * int64_t(dst.element_size()) / block_bytes};
  const int64_t pairs = mapping.size(0);
  const auto* m = mapping.data_as<const int64_t>();
  KILN_RETURN_IF_ERROR(ir::check_block_mapping(op_name(spec.op), mapping, blocks[0], blocks[1]));
  std::vector<int64_t> offsets(size_t(2 * pairs));
  for (int64_t i = 0; i < pairs; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      offsets[size_t(2 * i + j)] = m[i * mapping.stride(0) + j * mapping.stride(1)] * block_bytes;
    }
  }
  CallPlan plan;
  BlockWriter w(plan.block, kPointers, kCount);
  w.ptr(kSrc, src.data());
  w.ptr(kDst, dst.data());
  w.ptr(kPairs, keep(plan, offsets));
  // In mapping order on one thread (the runner never splits swap_blocks): a later pair may
  // read what an earlier one wrote, as with vLLM's stream-ordered copies.
  plan.rows = pairs;
  plan.parallel = false;
  return plan;
}

CallPlan plan_convert_fp8(const KernelArgs& args) {
  using namespace convert_words;
  CallPlan plan;
  BlockWriter w(plan.block, kPointers, kCount);
  const Tensor& src = args.tensor(1);
  w.ptr(kDst, args.tensor(0).data());
  w.ptr(kSrc, src.data());
  w.i64(kElements, src.numel());
  w.f32(kScale, args.scalar(0));  // the schema's double, used as fp32 like the kernels
  plan.rows = (src.numel() + kConvertRowElements - 1) / kConvertRowElements;
  return plan;
}

// cp_gather_cache: {src_cache, dst, block_table, cu_seq_lens, seq_starts}, scalar
// {batch_size}; rows are dst rows [cu_seq_lens[0], cu_seq_lens[B]).
Result<CallPlan> plan_cp_gather(const OpSpec& spec, const KernelArgs& args) {
  using namespace gather_words;
  const std::string_view op = op_name(spec.op);
  const Tensor& src = args.tensor(0);
  const Tensor& dst = args.tensor(1);
  const Tensor& table = args.tensor(2);
  const Tensor& cu = args.tensor(3);
  const Tensor& seq_starts = args.tensor(4);
  const auto batch = static_cast<int64_t>(args.scalar(0));
  const int64_t block_size = spec.get<ir::CpGatherCacheParams>().block_size;
  std::vector<int64_t> offsets;
  for (int64_t r = 0; r < batch; ++r) {
    int64_t begin = 0;
    int64_t end = 0;
    KILN_RETURN_IF_ERROR(ir::check_request_rows(op, cu, r, dst.size(0), begin, end));
    int64_t start = 0;
    KILN_RETURN_IF_ERROR(ir::check_seq_start(op, seq_starts, r, start));
    for (int64_t row = begin; row < end; ++row) {
      int64_t offset = 0;
      KILN_RETURN_IF_ERROR(locate(op, table, src, block_size, r, row - begin + start, offset));
      offsets.push_back(offset);
    }
  }
  CallPlan plan;
  BlockWriter w(plan.block, kPointers, kCount);
  if (offsets.empty()) return plan;  // rows = 0: nothing to run
  const int64_t row_stride = dst.stride(0) * int64_t(dst.element_size());
  w.ptr(kSrc, src.data());
  w.ptr(kDst, static_cast<uint8_t*>(dst.data()) + at_i32(cu, 0) * row_stride);
  w.ptr(kOffsets, keep(plan, offsets));
  w.i64(kDstRowStride, row_stride);
  plan.rows = int64_t(offsets.size());
  return plan;
}

// gather_and_maybe_dequant_cache: {src_cache, dst, block_table, cu_seq_lens, token_to_seq,
// scale, seq_starts}, scalar {num_tokens}; row = token = dst row, offset -1 = skipped.
Result<CallPlan> plan_gather_dequant(const OpSpec& spec, const KernelArgs& args) {
  using namespace gather_words;
  const std::string_view op = op_name(spec.op);
  const Tensor& src = args.tensor(0);
  const Tensor& dst = args.tensor(1);
  const Tensor& table = args.tensor(2);
  const Tensor& cu = args.tensor(3);
  const Tensor& token_to_seq = args.tensor(4);
  const Tensor& seq_starts = args.tensor(6);
  const auto tokens = static_cast<int64_t>(args.scalar(0));
  const int64_t block_size = spec.get<ir::GatherCacheParams>().block_size;
  const int64_t batch = table.size(0);
  std::vector<int64_t> offsets(size_t(tokens), -1);
  for (int64_t tok = 0; tok < tokens; ++tok) {
    int64_t r = 0;
    int64_t pos = 0;
    KILN_RETURN_IF_ERROR(
        ir::check_token_position(op, cu, token_to_seq, seq_starts, batch, tok, r, pos));
    if (pos < 0) continue;  // past its request's end: skipped (offset -1)
    KILN_RETURN_IF_ERROR(locate(op, table, src, block_size, r, pos, offsets[size_t(tok)]));
  }
  CallPlan plan;
  BlockWriter w(plan.block, kPointers, kCount);
  w.ptr(kSrc, src.data());
  w.ptr(kDst, dst.data());
  w.ptr(kOffsets, keep(plan, offsets));
  w.ptr(kScale, args.tensor(5).data());
  w.i64(kDstRowStride, dst.stride(0) * int64_t(dst.element_size()));
  plan.rows = tokens;
  return plan;
}

template <class T>
const void* keep_values(CallPlan& plan, const std::vector<T>& values) {
  auto& bytes = plan.side.emplace_back(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes.data();
}

// cpu_attention_with_kv_cache(query, key_cache, value_cache, output, query_start_loc,
// seq_lens, alibi_slopes, block_table, scheduler_metadata, s_aux; scale, window_left,
// window_right, softcap). The length and block-table checks are the ref's (same order and
// messages); the scheduler metadata is not read: the arm kernel splits work by query token.
Result<CallPlan> plan_attention(const OpSpec& spec, const KernelArgs& args) {
  using namespace attention_words;
  const auto& p = spec.get<ir::CpuAttentionParams>();
  const std::string_view op = op_name(spec.op);
  const Tensor& query = args.tensor(0);
  const Tensor& key_cache = args.tensor(1);
  const Tensor& value_cache = args.tensor(2);
  const Tensor& table = args.tensor(7);
  const auto* qsl = args.tensor(4).data_as<const int32_t>();
  const auto* seq_lens = args.tensor(5).data_as<const int32_t>();
  const int64_t num_req = args.tensor(4).size(0) - 1;
  const int64_t left = int64_t(args.scalar(1));
  const int64_t right = p.causal ? 0 : int64_t(args.scalar(2));  // causal: right edge 0
  KILN_RETURN_IF_ERROR(ir::check_cpu_attn_sequences(op, args.tensor(4), args.tensor(5), table,
                                                    p.causal, p.block_size, query.size(0),
                                                    key_cache.size(0)));
  // Per token: position p = base + i, allowed keys [lo, hi) (seq_len and the window).
  std::vector<int64_t> tokens;
  for (int64_t r = 0; r < num_req; ++r) {
    const int64_t seq_len = seq_lens[r];
    const int64_t q_len = qsl[r + 1] - qsl[r];
    const int64_t base = p.causal ? seq_len - q_len : 0;
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t pos = base + i;
      const int64_t lo = left == -1 ? 0 : std::max<int64_t>(0, pos - left);
      int64_t hi = right == -1 ? seq_len : std::min<int64_t>(seq_len, pos + right + 1);
      hi = std::max(hi, lo);
      tokens.insert(tokens.end(), {pos, lo, hi, r * table.stride(0) * 4});
    }
  }
  std::vector<float> sinks;
  if (p.sinks) {
    const Tensor& s = args.tensor(9);
    for (int64_t h = 0; h < p.head_count_q; ++h) {
      const auto* at =
          static_cast<const uint8_t*>(s.data()) + h * s.stride(0) * int64_t(s.element_size());
      float v = 0;
      if (s.dtype() == DType::kF32) {
        std::memcpy(&v, at, 4);
      } else {
        uint16_t bits;
        std::memcpy(&bits, at, 2);
        v = s.dtype() == DType::kBF16 ? numeric::bf16_to_f32(bits) : numeric::f16_to_f32(bits);
      }
      sinks.push_back(v);
    }
  }
  const int64_t esize = int64_t(dtype_size(p.dtype));
  CallPlan plan;
  BlockWriter w(plan.block, kPointers, kCount);
  w.ptr(kQuery, query.data());
  w.ptr(kKeyCache, key_cache.data());
  w.ptr(kValueCache, value_cache.data());
  w.ptr(kOutput, args.tensor(3).data());
  w.ptr(kBlockTable, table.data());
  w.ptr(kSlopes, p.alibi ? args.tensor(6).data() : nullptr);
  w.ptr(kSinks, p.sinks ? keep_values(plan, sinks) : nullptr);
  w.ptr(kTokens, tokens.empty() ? nullptr : keep_values(plan, tokens));
  w.i64(kQueryTokenStride, query.stride(0) * esize);
  w.i64(kQueryHeadStride, query.stride(1) * esize);
  w.i64(kKeyBlockStride, key_cache.stride(0) * esize);
  w.i64(kKeyHeadStride, key_cache.stride(1) * esize);
  w.i64(kValueBlockStride, value_cache.stride(0) * esize);
  w.i64(kValueHeadStride, value_cache.stride(1) * esize);
  w.f32(kScale, args.scalar(0));  // vLLM's scale and softcap are fp32 parameters
  w.f32(kSoftcap, args.scalar(3));
  plan.rows = int64_t(tokens.size() / 4);
  return plan;
}

}  // namespace

std::string kernel_symbol(const OpSpec& spec) {
  return fmt::format("kiln_{}_{}", op_name(spec.op), hash128(spec).hex().substr(0, 16));
}

Result<CallPlan> plan_call(const OpSpec& spec, const KernelArgs& args) {
  const std::string_view family = op_family(spec.op);
  if (family == "norm") return plan_norm(spec, args);
  if (family == "activation") return plan_activation(spec, args);
  if (family == "rope") return plan_rope(spec, args);
  switch (spec.op) {
    case OpKind::kReshapeAndCache:
    case OpKind::kReshapeAndCacheFlash:
    case OpKind::kConcatAndCacheMla: return plan_cache_write(spec, args);
    case OpKind::kSwapBlocks: return plan_swap_blocks(spec, args);
    case OpKind::kConvertFp8: return plan_convert_fp8(args);
    case OpKind::kCpGatherCache: return plan_cp_gather(spec, args);
    case OpKind::kGatherAndMaybeDequantCache: return plan_gather_dequant(spec, args);
    case OpKind::kCpuAttentionWithKvCache: return plan_attention(spec, args);
    default: break;
  }
  return Status(StatusCode::kInternal,
                fmt::format("arm backend: no call plan for {}", op_name(spec.op)));
}

}  // namespace jit::codegen::arm
