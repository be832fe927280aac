#include "tests/cuda/cuda_specs.h"

#include <fmt/format.h>

#include <tuple>

#include "tests/cuda/simt_registry.h"

namespace jit::test::cuda {
namespace {

constexpr DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr OpKind kActivations[] = {OpKind::kSiluAndMul,    OpKind::kMulAndSilu,
                                   OpKind::kGeluAndMul,    OpKind::kGeluTanhAndMul,
                                   OpKind::kFatreluAndMul, OpKind::kSwigluoaiAndMul};

ir::RopeParams rope(DType dtype, int64_t head_size, int64_t rot_dim, ir::RopeStyle style,
                    int64_t heads_q, int64_t heads_kv, bool key) {
  ir::RopeParams p;
  p.dtype = dtype;
  p.cache_dtype = dtype;
  p.head_size = head_size;
  p.rot_dim = rot_dim;
  p.style = style;
  p.head_count_q = heads_q;
  p.head_count_kv = heads_kv;
  p.key = key;
  return p;
}

// The cache writes and convert_fp8: every input and cache dtype, both flash layouts,
// per-head scales, block sizes 1 and 16, odd head sizes.
std::vector<OpSpec> cache_specs() {
  std::vector<OpSpec> specs;
  const ir::KvCacheDtype kvs[] = {ir::KvCacheDtype::kAuto, ir::KvCacheDtype::kFp8E4m3,
                                  ir::KvCacheDtype::kFp8E5m2};
  for (int64_t block : {1, 16, 64}) {
    specs.push_back(
        OpSpec::make(OpKind::kCpGatherAndUpconvertFp8KvCache, ir::UpconvertGatherParams{block}));
  }
  for (DType dt : kFloatTypes) {
    for (ir::KvCacheDtype kv :
         {ir::KvCacheDtype::kAuto, ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
      for (auto style : {ir::RopeStyle::kGptj, ir::RopeStyle::kNeox}) {
        ir::MlaRopeCacheWriteParams p;
        p.dtype = dt, p.kv = kv, p.kv_lora_rank = style == ir::RopeStyle::kGptj ? 512 : 40;
        p.rot_dim = style == ir::RopeStyle::kGptj ? 64 : 16;
        p.head_count_q = style == ir::RopeStyle::kGptj ? 4 : 3;
        p.style = style, p.block_size = style == ir::RopeStyle::kGptj ? 16 : 1;
        specs.push_back(OpSpec::make(OpKind::kConcatAndCacheMlaRopeFused, p));
      }
    }
  }
  for (DType dt : {DType::kF16, DType::kBF16}) {
    for (auto fmt : {ir::ScaleFormat::kPlain, ir::ScaleFormat::kUe8m0}) {
      for (auto [dim, qb, block] :
           {std::tuple{128, 128, 64}, std::tuple{128, 32, 1}, std::tuple{64, 16, 16}}) {
        ir::IndexerQuantParams p;
        p.dtype = dt, p.head_dim = dim, p.quant_block = qb, p.block_size = block;
        p.scale_fmt = fmt;
        specs.push_back(OpSpec::make(OpKind::kIndexerKQuantAndCache, p));
      }
    }
  }
  for (auto [dim, qb, block] : {std::tuple{128, 128, 64}, std::tuple{128, 32, 1}}) {
    ir::IndexerGatherParams p;
    p.head_dim = dim, p.quant_block = qb, p.block_size = block;
    specs.push_back(OpSpec::make(OpKind::kCpGatherIndexerKQuantCache, p));
  }
  for (DType dt : kFloatTypes) {
    for (ir::KvCacheDtype kv : kvs) {
      for (auto layout : {ir::CacheLayout::kNhd, ir::CacheLayout::kHnd}) {
        for (auto [heads, head_size, block] : {std::tuple{2, 64, 16}, std::tuple{3, 40, 1}}) {
          ir::FlashCacheWriteParams p;
          p.dtype = dt, p.kv = kv, p.head_count_kv = heads, p.head_size = head_size;
          p.block_size = block, p.layout = layout;
          p.per_head_scale = kv != ir::KvCacheDtype::kAuto && heads == 3;
          specs.push_back(OpSpec::make(OpKind::kReshapeAndCacheFlash, p));
        }
      }
      ir::PagedCacheWriteParams p;
      p.dtype = dt, p.kv = kv, p.head_count_kv = 2, p.head_size = 64, p.block_size = 16;
      specs.push_back(OpSpec::make(OpKind::kReshapeAndCache, p));
      p.head_count_kv = 8, p.head_size = 128, p.block_size = 8;
      specs.push_back(OpSpec::make(OpKind::kReshapeAndCache, p));
    }
    for (ir::KvCacheDtype kv : kvs) {
      for (auto [rank, pe, block] : {std::tuple{512, 64, 16}, std::tuple{40, 8, 1}}) {
        ir::MlaCacheWriteParams p;
        p.dtype = dt, p.kv = kv, p.kv_lora_rank = rank, p.pe_dim = pe, p.block_size = block;
        specs.push_back(OpSpec::make(OpKind::kConcatAndCacheMla, p));
      }
    }
    if (dt != DType::kF32) {
      ir::MlaCacheWriteParams p;
      p.dtype = dt, p.kv = ir::KvCacheDtype::kFp8DsMla, p.kv_lora_rank = 512, p.pe_dim = 64;
      p.block_size = 16;
      specs.push_back(OpSpec::make(OpKind::kConcatAndCacheMla, p));
    }
    for (ir::KvCacheDtype kv : kvs) {
      for (auto [head_dim, block] : {std::tuple{576, 16}, std::tuple{40, 1}}) {
        ir::GatherCacheParams p;
        p.dtype = dt, p.kv = kv, p.head_dim = head_dim, p.block_size = block;
        specs.push_back(OpSpec::make(OpKind::kGatherAndMaybeDequantCache, p));
      }
    }
    for (auto [entry, block] : {std::tuple{576, 64}, std::tuple{17, 1}, std::tuple{128, 16}}) {
      specs.push_back(
          OpSpec::make(OpKind::kCpGatherCache, ir::CpGatherCacheParams{dt, entry, block}));
    }
    specs.push_back(OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{DType::kFp8E4m3, dt}));
    specs.push_back(OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{dt, DType::kFp8E4m3}));
  }
  return specs;
}

// merge_attn_states: every input type, fp8 output, with and without the LSE output, odd
// head sizes.
std::vector<OpSpec> merge_specs() {
  std::vector<OpSpec> specs;
  for (DType dt : kFloatTypes) {
    for (DType out : {dt, DType::kFp8E4m3}) {
      for (auto [heads, head_size, lse] :
           {std::tuple{4, 128, true}, std::tuple{3, 40, false}, std::tuple{2, 7, true}}) {
        ir::MergeAttnStatesParams p;
        p.dtype = dt, p.out_dtype = out, p.head_count = heads, p.head_size = head_size;
        p.output_lse = lse;
        specs.push_back(OpSpec::make(OpKind::kMergeAttnStates, p));
      }
    }
  }
  return specs;
}

// top-k: k = 1, 7 (sub-warp), 64, 2048 (vLLM's default), prefill and decode.
std::vector<OpSpec> topk_specs() {
  std::vector<OpSpec> specs;
  for (int64_t k : {1, 7, 64, 2048}) {
    specs.push_back(OpSpec::make(OpKind::kTopKPerRowPrefill, ir::TopKParams{k}));
    specs.push_back(OpSpec::make(OpKind::kTopKPerRowDecode, ir::TopKParams{k}));
  }
  return specs;
}

// The vertical/slash converters: causal and not, block sizes 64 and 128 (block_n == block_m).
std::vector<OpSpec> vertical_slash_specs() {
  std::vector<OpSpec> specs;
  for (OpKind op :
       {OpKind::kConvertVerticalSlashIndexes, OpKind::kConvertVerticalSlashIndexesMergehead}) {
    for (bool causal : {true, false}) {
      for (int64_t block : {64, 128}) {
        specs.push_back(OpSpec::make(op, ir::VerticalSlashParams{block, block, causal}));
      }
    }
  }
  return specs;
}

}  // namespace

std::vector<OpSpec> compile_specs() {
  // One spec per kernel variant (the dtype changes only conversions; every dtype is compiled
  // for norms, where it also changes the vector width): ~35 kernels x 3 archs keep the test
  // near 10 s of NVRTC time on two cores.
  std::vector<OpSpec> specs;
  for (DType dt : kFloatTypes) {
    specs.push_back(OpSpec::make(OpKind::kRmsNorm, ir::NormParams{dt, 4096, true}));
    specs.push_back(OpSpec::make(OpKind::kFusedAddRmsNorm, ir::NormParams{dt, 4096, true}));
  }
  specs.push_back(OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kBF16, 5120, false}));
  specs.push_back(
      OpSpec::make(OpKind::kFusedAddRmsNorm, ir::NormParams{DType::kBF16, 8192, false}));
  for (OpKind op : kActivations) {
    specs.push_back(OpSpec::make(op, ir::ActivationParams{DType::kBF16, 11008}));
  }
  specs.push_back(OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kF32, 14336}));
  specs.push_back(OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kF16, 14336}));
  specs.push_back(OpSpec::make(OpKind::kRotaryEmbedding,
                               rope(DType::kBF16, 128, 128, ir::RopeStyle::kNeox, 32, 8, true)));
  specs.push_back(OpSpec::make(OpKind::kRotaryEmbedding,
                               rope(DType::kF32, 128, 64, ir::RopeStyle::kGptj, 32, 8, true)));
  for (ir::KvCacheDtype kv :
       {ir::KvCacheDtype::kAuto, ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8E5m2}) {
    ir::FlashCacheWriteParams f;
    f.dtype = DType::kBF16, f.kv = kv, f.head_count_kv = 8, f.head_size = 128;
    f.block_size = 16;
    specs.push_back(OpSpec::make(OpKind::kReshapeAndCacheFlash, f));
    ir::PagedCacheWriteParams p;
    p.dtype = DType::kF16, p.kv = kv, p.head_count_kv = 8, p.head_size = 128, p.block_size = 16;
    specs.push_back(OpSpec::make(OpKind::kReshapeAndCache, p));
  }
  ir::FlashCacheWriteParams hnd;
  hnd.dtype = DType::kF16, hnd.kv = ir::KvCacheDtype::kFp8E4m3, hnd.head_count_kv = 8;
  hnd.head_size = 128, hnd.block_size = 16, hnd.layout = ir::CacheLayout::kHnd;
  hnd.per_head_scale = true;
  specs.push_back(OpSpec::make(OpKind::kReshapeAndCacheFlash, hnd));
  for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kFp8E4m3, ir::KvCacheDtype::kFp8DsMla}) {
    ir::MlaCacheWriteParams mla;
    mla.dtype = DType::kBF16, mla.kv = kv, mla.kv_lora_rank = 512, mla.pe_dim = 64;
    mla.block_size = 64;
    specs.push_back(OpSpec::make(OpKind::kConcatAndCacheMla, mla));
  }
  for (ir::KvCacheDtype kv : {ir::KvCacheDtype::kAuto, ir::KvCacheDtype::kFp8E4m3}) {
    ir::GatherCacheParams g;
    g.dtype = DType::kBF16, g.kv = kv, g.head_dim = 576, g.block_size = 64;
    specs.push_back(OpSpec::make(OpKind::kGatherAndMaybeDequantCache, g));
  }
  specs.push_back(
      OpSpec::make(OpKind::kCpGatherCache, ir::CpGatherCacheParams{DType::kBF16, 576, 64}));
  {
    ir::IndexerQuantParams q;
    q.dtype = DType::kBF16, q.head_dim = 128, q.quant_block = 128, q.block_size = 64;
    q.scale_fmt = ir::ScaleFormat::kUe8m0;
    specs.push_back(OpSpec::make(OpKind::kIndexerKQuantAndCache, q));
    ir::IndexerGatherParams g;
    g.head_dim = 128, g.quant_block = 128, g.block_size = 64;
    specs.push_back(OpSpec::make(OpKind::kCpGatherIndexerKQuantCache, g));
  }
  {
    ir::MlaRopeCacheWriteParams mr;
    mr.dtype = DType::kBF16, mr.kv = ir::KvCacheDtype::kFp8E4m3, mr.kv_lora_rank = 512;
    mr.rot_dim = 64, mr.head_count_q = 16, mr.block_size = 64;
    specs.push_back(OpSpec::make(OpKind::kConcatAndCacheMlaRopeFused, mr));
    specs.push_back(
        OpSpec::make(OpKind::kCpGatherAndUpconvertFp8KvCache, ir::UpconvertGatherParams{64}));
  }
  specs.push_back(OpSpec::make(OpKind::kSwapBlocks, ir::SwapBlocksParams{65536}));
  specs.push_back(
      OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{DType::kFp8E4m3, DType::kBF16}));
  specs.push_back(
      OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{DType::kF32, DType::kFp8E4m3}));
  for (DType out : {DType::kBF16, DType::kFp8E4m3}) {
    ir::MergeAttnStatesParams m;
    m.dtype = DType::kBF16, m.out_dtype = out, m.head_count = 32, m.head_size = 128;
    m.output_lse = true;
    specs.push_back(OpSpec::make(OpKind::kMergeAttnStates, m));
  }
  specs.push_back(OpSpec::make(OpKind::kTopKPerRowPrefill, ir::TopKParams{2048}));
  specs.push_back(OpSpec::make(OpKind::kTopKPerRowDecode, ir::TopKParams{2048}));
  specs.push_back(
      OpSpec::make(OpKind::kConvertVerticalSlashIndexes, ir::VerticalSlashParams{64, 64, true}));
  specs.push_back(OpSpec::make(OpKind::kConvertVerticalSlashIndexesMergehead,
                               ir::VerticalSlashParams{64, 64, false}));
  // Paged attention: one v1 and one v2 (the rest: test_cuda_paged_attention).
  const std::vector<OpSpec> paged = paged_attention_compile_specs();
  specs.push_back(paged.front());
  specs.push_back(paged.back());
  return specs;
}

std::vector<OpSpec> emulator_specs() {
  std::vector<OpSpec> specs = cache_specs();
  for (const OpSpec& spec : merge_specs()) specs.push_back(spec);
  for (const OpSpec& spec : topk_specs()) specs.push_back(spec);
  for (const OpSpec& spec : vertical_slash_specs()) specs.push_back(spec);
  const int64_t widths[] = {1, 2, 3, 4, 7, 8, 9, 16, 17, 33, 40, 64, 65, 127, 5125};
  for (DType dt : kFloatTypes) {
    for (int64_t w : widths) {
      specs.push_back(OpSpec::make(OpKind::kRmsNorm, ir::NormParams{dt, w, true}));
      specs.push_back(OpSpec::make(OpKind::kFusedAddRmsNorm, ir::NormParams{dt, w, true}));
      for (OpKind op : kActivations) specs.push_back(OpSpec::make(op, ir::ActivationParams{dt, w}));
    }
    for (int64_t w : {17, 4096}) {
      specs.push_back(OpSpec::make(OpKind::kRmsNorm, ir::NormParams{dt, w, false}));
      specs.push_back(OpSpec::make(OpKind::kFusedAddRmsNorm, ir::NormParams{dt, w, false}));
    }
    for (auto style : {ir::RopeStyle::kNeox, ir::RopeStyle::kGptj}) {
      specs.push_back(OpSpec::make(OpKind::kRotaryEmbedding, rope(dt, 64, 64, style, 4, 2, true)));
      specs.push_back(OpSpec::make(OpKind::kRotaryEmbedding, rope(dt, 80, 32, style, 3, 1, true)));
      specs.push_back(OpSpec::make(OpKind::kRotaryEmbedding, rope(dt, 40, 40, style, 2, 0, false)));
      specs.push_back(
          OpSpec::make(OpKind::kRotaryEmbedding, rope(dt, 256, 256, style, 8, 8, true)));
    }
  }
  return specs;
}

std::string simt_key(const OpSpec& spec, const Config& config) {
  return fmt::format("{}|{}", to_string(spec), config.to_string());
}

std::vector<OpSpec> emulator_tuning_specs() {
  return {OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kBF16, 1000, true}),
          OpSpec::make(OpKind::kFusedAddRmsNorm, ir::NormParams{DType::kF16, 2048, true}),
          OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kF16, 1024}),
          OpSpec::make(OpKind::kSwigluoaiAndMul, ir::ActivationParams{DType::kBF16, 96}),
          OpSpec::make(OpKind::kRotaryEmbedding,
                       rope(DType::kBF16, 128, 128, ir::RopeStyle::kNeox, 16, 4, true))};
}

}  // namespace jit::test::cuda
