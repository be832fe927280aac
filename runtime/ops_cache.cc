// jit::ops for the KV-cache writes, gathers and quantisers (spec/cache_ops.md, docs/ops.md).
// Each function reads the compile-time parameters off its tensors' shapes and dtypes and its
// string arguments, then compiles (memoised) and runs; check_args does the rest of the checks.
#include <fmt/format.h>

#include "ir/check_args.h"
#include "runtime/ops.h"
#include "runtime/ops_internal.h"

namespace jit::ops {

using detail::expect_float;
using detail::expect_tensor_rank;
using detail::fail;
using detail::parse_kv_cache_dtype;
using detail::run;
using detail::throw_if_error;

namespace {

// Token count of the cache writes: slot_mapping's length (extra CUDA-graph rows of the
// activations are ignored).
int64_t slot_count(std::string_view op, const Tensor& slot_mapping) {
  expect_tensor_rank(op, "slot_mapping", slot_mapping, {1});
  return slot_mapping.size(0);
}

// reshape_and_cache and reshape_and_cache_flash share the key/value reading.
struct KvShape {
  DType dtype;
  int64_t heads;
  int64_t head_size;
};
KvShape kv_shape(std::string_view op, const Tensor& key) {
  expect_float(op, "key", key);
  expect_tensor_rank(op, "key", key, {3});
  return {key.dtype(), key.size(1), key.size(2)};
}

}  // namespace

void swap_blocks(Tensor src, Tensor dst, int64_t block_size_in_bytes, Tensor block_mapping) {
  constexpr std::string_view op = "swap_blocks";
  detail::expect_int_range(op, "block_size_in_bytes", block_size_in_bytes, 1,
                           (int64_t(1) << 31) - 1);
  expect_tensor_rank(op, "block_mapping", block_mapping, {2});
  ir::SwapBlocksParams p;
  p.block_bytes = block_size_in_bytes;
  run(OpSpec::make(OpKind::kSwapBlocks, p), KernelArgs({src, dst, block_mapping}),
      block_mapping.size(0));
}

void reshape_and_cache(Tensor key, Tensor value, Tensor key_cache, Tensor value_cache,
                       Tensor slot_mapping, std::string_view kv_cache_dtype, Tensor k_scale,
                       Tensor v_scale) {
  constexpr std::string_view op = "reshape_and_cache";
  const KvShape kv = kv_shape(op, key);
  expect_tensor_rank(op, "key_cache", key_cache, {5});
  const int64_t tokens = slot_count(op, slot_mapping);
  ir::PagedCacheWriteParams p;
  p.dtype = kv.dtype;
  p.kv = parse_kv_cache_dtype(op, kv_cache_dtype, false);
  p.head_count_kv = kv.heads;
  p.head_size = kv.head_size;
  p.block_size = key_cache.size(3);  // [NB, H, D/x, BS, x]
  run(OpSpec::make(OpKind::kReshapeAndCache, p),
      KernelArgs({key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale}), tokens);
}

void reshape_and_cache_flash(Tensor key, Tensor value, Tensor key_cache, Tensor value_cache,
                             Tensor slot_mapping, std::string_view kv_cache_dtype, Tensor k_scale,
                             Tensor v_scale) {
  constexpr std::string_view op = "reshape_and_cache_flash";
  const KvShape kv = kv_shape(op, key);
  expect_tensor_rank(op, "key_cache", key_cache, {4});
  const int64_t tokens = slot_count(op, slot_mapping);
  ir::FlashCacheWriteParams p;
  p.dtype = kv.dtype;
  p.kv = parse_kv_cache_dtype(op, kv_cache_dtype, false);
  p.head_count_kv = kv.heads;
  p.head_size = kv.head_size;
  p.block_size = key_cache.size(1);  // logical [NB, BS, H, D]
  // NHD stores a block's tokens H*D apart; HND (viewed as [NB, BS, H, D]) stores them D apart
  // and its heads BS*D apart. One head reads the same either way: call it NHD.
  const bool nhd = kv.heads == 1 || key_cache.stride(1) == kv.heads * kv.head_size;
  p.layout = nhd ? ir::CacheLayout::kNhd : ir::CacheLayout::kHnd;
  p.per_head_scale = k_scale.defined() && k_scale.numel() > 1;
  run(OpSpec::make(OpKind::kReshapeAndCacheFlash, p),
      KernelArgs({key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale}), tokens);
}

void concat_and_cache_mla(Tensor kv_c, Tensor k_pe, Tensor kv_cache, Tensor slot_mapping,
                          std::string_view kv_cache_dtype, Tensor scale) {
  constexpr std::string_view op = "concat_and_cache_mla";
  expect_float(op, "kv_c", kv_c);
  expect_tensor_rank(op, "kv_c", kv_c, {2});
  expect_tensor_rank(op, "k_pe", k_pe, {2});
  expect_tensor_rank(op, "kv_cache", kv_cache, {3});
  const int64_t tokens = slot_count(op, slot_mapping);
  ir::MlaCacheWriteParams p;
  p.dtype = kv_c.dtype();
  p.kv = parse_kv_cache_dtype(op, kv_cache_dtype, true);
  p.kv_lora_rank = kv_c.size(1);
  p.pe_dim = k_pe.size(1);
  p.block_size = kv_cache.size(1);
  run(OpSpec::make(OpKind::kConcatAndCacheMla, p),
      KernelArgs({kv_c, k_pe, kv_cache, slot_mapping, scale}), tokens);
}

void concat_and_cache_mla_rope_fused(Tensor positions, Tensor q_pe, Tensor k_pe, Tensor kv_c,
                                     Tensor cos_sin_cache, bool is_neox, Tensor slot_mapping,
                                     Tensor kv_cache, std::string_view kv_cache_dtype,
                                     Tensor kv_cache_scale) {
  constexpr std::string_view op = "concat_and_cache_mla_rope_fused";
  expect_float(op, "q_pe", q_pe);
  expect_tensor_rank(op, "q_pe", q_pe, {3});
  expect_tensor_rank(op, "kv_c", kv_c, {2});
  expect_tensor_rank(op, "kv_cache", kv_cache, {3});
  const int64_t tokens = slot_count(op, slot_mapping);
  const ir::KvCacheDtype kv = parse_kv_cache_dtype(op, kv_cache_dtype, true);
  if (kv == ir::KvCacheDtype::kFp8DsMla) {
    fail(
        fmt::format("{}: argument 'kv_cache_dtype' = \"fp8_ds_mla\" is not supported (allowed: "
                    "auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2)",
                    op));
  }
  ir::MlaRopeCacheWriteParams p;
  p.dtype = q_pe.dtype();
  p.kv = kv;
  p.kv_lora_rank = kv_c.size(1);
  p.rot_dim = q_pe.size(2);
  p.head_count_q = q_pe.size(1);
  p.style = is_neox ? ir::RopeStyle::kNeox : ir::RopeStyle::kGptj;
  p.block_size = kv_cache.size(1);
  run(OpSpec::make(OpKind::kConcatAndCacheMlaRopeFused, p),
      KernelArgs(
          {positions, q_pe, k_pe, kv_c, cos_sin_cache, slot_mapping, kv_cache, kv_cache_scale}),
      tokens);
}

void convert_fp8(Tensor dst_cache, Tensor src_cache, double scale,
                 std::string_view kv_cache_dtype) {
  constexpr std::string_view op = "convert_fp8";
  throw_if_error(ir::expect_defined(op, "dst_cache", dst_cache));
  throw_if_error(ir::expect_defined(op, "src_cache", src_cache));
  if (parse_kv_cache_dtype(op, kv_cache_dtype, false) != ir::KvCacheDtype::kFp8E4m3) {
    fail(
        fmt::format("{}: argument 'kv_cache_dtype' = \"{}\" is not supported (allowed: fp8, "
                    "fp8_e4m3)",
                    op, kv_cache_dtype));
  }
  // The float side gives the direction; the other side holds e4m3 codes (u8 accepted).
  ir::ConvertFp8Params p;
  if (is_float_activation(src_cache.dtype())) {
    p.src = src_cache.dtype();
    p.dst = DType::kFp8E4m3;
  } else if (is_float_activation(dst_cache.dtype())) {
    p.src = DType::kFp8E4m3;
    p.dst = dst_cache.dtype();
  } else {
    fail(
        fmt::format("{}: one of 'dst_cache' ({}) and 'src_cache' ({}) must be f32, f16 or bf16 "
                    "(the other holds e4m3 codes: fp8_e4m3 or u8)",
                    op, dst_cache.describe(), src_cache.describe()));
  }
  run(OpSpec::make(OpKind::kConvertFp8, p), KernelArgs({dst_cache, src_cache}, {scale}),
      src_cache.numel());
}

void gather_and_maybe_dequant_cache(Tensor src_cache, Tensor dst, Tensor block_table,
                                    Tensor cu_seq_lens, Tensor token_to_seq, int64_t num_tokens,
                                    std::string_view kv_cache_dtype, Tensor scale,
                                    Tensor seq_starts) {
  constexpr std::string_view op = "gather_and_maybe_dequant_cache";
  expect_float(op, "dst", dst);
  expect_tensor_rank(op, "dst", dst, {2});
  expect_tensor_rank(op, "src_cache", src_cache, {3, 4, 5});
  ir::GatherCacheParams p;
  p.dtype = dst.dtype();
  p.kv = parse_kv_cache_dtype(op, kv_cache_dtype, false);
  p.head_dim = dst.size(1);
  p.block_size = src_cache.size(1);
  run(OpSpec::make(OpKind::kGatherAndMaybeDequantCache, p),
      KernelArgs({src_cache, dst, block_table, cu_seq_lens, token_to_seq, scale, seq_starts},
                 {double(num_tokens)}),
      num_tokens);
}

void cp_gather_cache(Tensor src_cache, Tensor dst, Tensor block_table, Tensor cu_seq_lens,
                     int64_t batch_size, Tensor seq_starts) {
  constexpr std::string_view op = "cp_gather_cache";
  expect_tensor_rank(op, "src_cache", src_cache, {3, 4, 5});
  throw_if_error(ir::expect_defined(op, "dst", dst));
  ir::CpGatherCacheParams p;
  p.dtype = src_cache.dtype();
  p.block_size = src_cache.size(1);
  p.entry_size = 1;
  for (int d = 2; d < src_cache.dim(); ++d) p.entry_size *= src_cache.size(d);
  run(OpSpec::make(OpKind::kCpGatherCache, p),
      KernelArgs({src_cache, dst, block_table, cu_seq_lens, seq_starts}, {double(batch_size)}),
      dst.dim() > 0 ? dst.size(0) : 0);
}

void cp_gather_and_upconvert_fp8_kv_cache(Tensor src_cache, Tensor dst, Tensor block_table,
                                          Tensor seq_lens, Tensor workspace_starts,
                                          int64_t batch_size) {
  constexpr std::string_view op = "cp_gather_and_upconvert_fp8_kv_cache";
  expect_tensor_rank(op, "src_cache", src_cache, {3});
  expect_tensor_rank(op, "dst", dst, {2});
  ir::UpconvertGatherParams p;
  p.block_size = src_cache.size(1);
  run(OpSpec::make(OpKind::kCpGatherAndUpconvertFp8KvCache, p),
      KernelArgs({src_cache, dst, block_table, seq_lens, workspace_starts}, {double(batch_size)}),
      dst.size(0));
}

void indexer_k_quant_and_cache(Tensor k, Tensor kv_cache, Tensor slot_mapping,
                               int64_t quant_block_size, std::string_view kv_cache_dtype) {
  constexpr std::string_view op = "indexer_k_quant_and_cache";
  expect_float(op, "k", k);
  expect_tensor_rank(op, "k", k, {2});
  expect_tensor_rank(op, "kv_cache", kv_cache, {3});
  expect_tensor_rank(op, "slot_mapping", slot_mapping, {1});
  // vLLM's C++ reads this string as the scale format: exactly "ue8m0" means power-of-two
  // scales and any other string plain ones. kiln names the strings it accepts for plain.
  ir::ScaleFormat fmt_kind = ir::ScaleFormat::kPlain;
  if (kv_cache_dtype == "ue8m0") {
    fmt_kind = ir::ScaleFormat::kUe8m0;
  } else if (kv_cache_dtype != "" && kv_cache_dtype != "plain" && kv_cache_dtype != "auto" &&
             kv_cache_dtype != "fp8" && kv_cache_dtype != "fp8_e4m3") {
    fail(
        fmt::format("{}: argument 'kv_cache_dtype' (the scale format) = \"{}\" is not supported "
                    "(allowed: ue8m0; plain scales: \"\", plain, auto, fp8, fp8_e4m3)",
                    op, kv_cache_dtype));
  }
  ir::IndexerQuantParams p;
  p.dtype = k.dtype();
  p.head_dim = k.size(1);
  p.quant_block = quant_block_size;
  p.block_size = kv_cache.size(1);
  p.scale_fmt = fmt_kind;
  run(OpSpec::make(OpKind::kIndexerKQuantAndCache, p), KernelArgs({k, kv_cache, slot_mapping}),
      k.size(0));
}

void cp_gather_indexer_k_quant_cache(Tensor kv_cache, Tensor dst_k, Tensor dst_scale,
                                     Tensor block_table, Tensor cu_seq_lens) {
  constexpr std::string_view op = "cp_gather_indexer_k_quant_cache";
  expect_tensor_rank(op, "kv_cache", kv_cache, {3});
  expect_tensor_rank(op, "dst_k", dst_k, {2});
  expect_tensor_rank(op, "dst_scale", dst_scale, {2});
  // vLLM derives the group size from the scale bytes per row: 4 * D / quant_block.
  const int64_t head_dim = dst_k.size(1);
  const int64_t scale_bytes = dst_scale.size(1);
  if (scale_bytes < 4 || scale_bytes % 4 != 0 || (4 * head_dim) % scale_bytes != 0) {
    fail(
        fmt::format("{}: argument 'dst_scale' ({}) must have 4 * head_dim / quant_block bytes "
                    "per row for some quant_block dividing head_dim = {}",
                    op, dst_scale.describe(), head_dim));
  }
  ir::IndexerGatherParams p;
  p.head_dim = head_dim;
  p.quant_block = 4 * head_dim / scale_bytes;
  p.block_size = kv_cache.size(1);
  run(OpSpec::make(OpKind::kCpGatherIndexerKQuantCache, p),
      KernelArgs({kv_cache, dst_k, dst_scale, block_table, cu_seq_lens}), dst_k.size(0));
}

}  // namespace jit::ops
