// jit::ops for vLLM's CPU attention: the scheduler, the ISA-specific cache write and the
// varlen attention (spec/norm_act_cpu_ops.md section 3, docs/ops.md).
#include <fmt/format.h>

#include <cstring>

#include "codegen/ref/ref.h"
#include "ir/check_args.h"
#include "runtime/ops.h"
#include "runtime/ops_internal.h"

namespace jit::ops {

using detail::expect_float;
using detail::expect_tensor_rank;
using detail::fail;
using detail::run;
using detail::throw_if_error;

namespace {

// vLLM's dispatch runs head sizes that are multiples of 16 but not of 32 (80, 112) with the
// VEC16 kernels whatever ISA string is passed; the canonical spec says so.
ir::CpuAttnIsa effective_isa(ir::CpuAttnIsa isa, int64_t head_size) {
  return head_size % 32 != 0 && head_size % 16 == 0 ? ir::CpuAttnIsa::kVec16 : isa;
}

// The ISA recorded in a metadata blob: the blob is the ref scheduler's (codegen/ref/ref_cpu.cc)
// whose second little-endian int64 is the ISA's enum value. The attention's own check
// compares every other field of the blob with the call.
ir::CpuAttnIsa metadata_isa(std::string_view op, const Tensor& metadata) {
  constexpr std::string_view arg = "scheduler_metadata";
  throw_if_error(ir::expect_tensor(op, arg, metadata, DType::kI8, 1));
  throw_if_error(ir::expect_cpu(op, arg, metadata));
  throw_if_error(ir::expect_contiguous(op, arg, metadata));
  if (metadata.numel() != cpu_attn_metadata_bytes()) {
    fail(
        fmt::format("{}: argument '{}' ({}) must have {} bytes (build it with "
                    "cpu_attn_get_scheduler_metadata)",
                    op, arg, metadata.describe(), cpu_attn_metadata_bytes()));
  }
  int64_t isa = 0;
  std::memcpy(&isa, metadata.data_as<const char>() + sizeof(int64_t), sizeof(isa));
  if (isa < 0 || isa >= int64_t(ir::EnumNames<ir::CpuAttnIsa>::kNames.size())) {
    fail(
        fmt::format("{}: argument '{}' records ISA {} (allowed: {}); build it with "
                    "cpu_attn_get_scheduler_metadata",
                    op, arg, isa, ir::enum_choices<ir::CpuAttnIsa>()));
  }
  return static_cast<ir::CpuAttnIsa>(isa);
}

// The cache storage of a CPU-attention call: vLLM's kv_cache_dtype string ("auto", "float16",
// "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"); with "auto", a cache tensor of an fp8 dtype
// (torch.float8_e4m3fn / float8_e5m2) names its format. A u8 cache needs the string (vLLM
// allocates fp8 caches as uint8). Mismatches of string and tensor dtype are left to the
// argument checks, which name the cache and the dtypes allowed.
ir::KvCacheDtype cpu_attn_kv(std::string_view op, std::string_view kv_cache_dtype,
                             const Tensor& key_cache) {
  const ir::KvCacheDtype kv = detail::parse_kv_cache_dtype(op, kv_cache_dtype, false);
  if (kv != ir::KvCacheDtype::kAuto || !key_cache.defined()) return kv;
  if (key_cache.dtype() == DType::kFp8E4m3) return ir::KvCacheDtype::kFp8E4m3;
  if (key_cache.dtype() == DType::kFp8E5m2) return ir::KvCacheDtype::kFp8E5m2;
  return kv;
}

}  // namespace

int64_t cpu_attn_metadata_bytes() {
  return codegen::ref::cpu_attn_metadata_bytes();
}

void cpu_attn_get_scheduler_metadata(Tensor metadata, int64_t num_reqs, int64_t num_heads,
                                     int64_t num_kv_heads, int64_t head_dim, Tensor seq_lens,
                                     DType dtype, Tensor query_start_loc, bool causal,
                                     int64_t sliding_window_size, std::string_view isa,
                                     bool enable_kv_split) {
  constexpr std::string_view op = "cpu_attn_get_scheduler_metadata";
  if (!is_float_activation(dtype)) {
    fail(fmt::format("{}: argument 'dtype' = {} is not supported (allowed: f32, f16, bf16)", op,
                     dtype_name(dtype)));
  }
  ir::CpuAttnSchedulerParams p;
  p.isa = effective_isa(detail::parse_cpu_isa(op, "isa", isa), head_dim);
  p.dtype = dtype;
  p.head_size = head_dim;
  p.head_count_q = num_heads;
  p.head_count_kv = num_kv_heads;
  p.causal = causal;
  run(OpSpec::make(OpKind::kCpuAttnGetSchedulerMetadata, p),
      KernelArgs({metadata, seq_lens, query_start_loc},
                 {double(num_reqs), double(sliding_window_size), enable_kv_split ? 1.0 : 0.0}),
      num_reqs);
}

void cpu_attn_reshape_and_cache(Tensor key, Tensor value, Tensor key_cache, Tensor value_cache,
                                Tensor slot_mapping, std::string_view isa, double k_scale,
                                double v_scale, std::string_view kv_cache_dtype) {
  constexpr std::string_view op = "cpu_attn_reshape_and_cache";
  expect_float(op, "key", key);
  expect_tensor_rank(op, "key", key, {3});
  expect_tensor_rank(op, "key_cache", key_cache, {4});
  ir::CpuAttnCacheWriteParams p;
  p.head_size = key.size(2);
  p.isa = effective_isa(detail::parse_cpu_isa(op, "isa", isa), p.head_size);
  p.dtype = key.dtype();
  p.head_count_kv = key.size(1);
  p.block_size = key_cache.size(2);  // [NB, Hkv, BS, D]
  p.kv = cpu_attn_kv(op, kv_cache_dtype, key_cache);
  KernelArgs args({key, value, key_cache, value_cache, slot_mapping});
  if (p.kv != ir::KvCacheDtype::kAuto) args.add_scalar(k_scale).add_scalar(v_scale);
  run(OpSpec::make(OpKind::kCpuAttnReshapeAndCache, p), args, key.size(0));
}

void cpu_attention_with_kv_cache(Tensor query, Tensor key_cache, Tensor value_cache, Tensor output,
                                 Tensor query_start_loc, Tensor seq_lens, double scale, bool causal,
                                 Tensor alibi_slopes, int64_t sliding_window_left,
                                 int64_t sliding_window_right, Tensor block_table, double softcap,
                                 Tensor scheduler_metadata, Tensor s_aux, double k_scale,
                                 double v_scale, std::string_view kv_cache_dtype) {
  constexpr std::string_view op = "cpu_attention_with_kv_cache";
  expect_float(op, "query", query);
  expect_tensor_rank(op, "query", query, {3});
  expect_tensor_rank(op, "key_cache", key_cache, {4});
  ir::CpuAttentionParams p;
  p.isa = metadata_isa(op, scheduler_metadata);
  p.dtype = query.dtype();
  p.head_size = query.size(2);
  p.block_size = key_cache.size(2);
  p.head_count_q = query.size(1);
  p.head_count_kv = key_cache.size(1);
  p.causal = causal;
  // vLLM passes (-1, -1) for no window; any bounded edge turns the window code on.
  p.sliding_window = sliding_window_left != -1 || sliding_window_right != -1;
  p.alibi = alibi_slopes.defined();
  p.softcap = softcap != 0.0;
  p.sinks = s_aux.defined();
  p.kv = cpu_attn_kv(op, kv_cache_dtype, key_cache);
  KernelArgs args({query, key_cache, value_cache, output, query_start_loc, seq_lens, alibi_slopes,
                   block_table, scheduler_metadata, s_aux},
                  {scale, double(sliding_window_left), double(sliding_window_right), softcap});
  if (p.kv != ir::KvCacheDtype::kAuto) args.add_scalar(k_scale).add_scalar(v_scale);
  run(OpSpec::make(OpKind::kCpuAttentionWithKvCache, p), args, query.size(0));
}

}  // namespace jit::ops
