#include "codegen/cuda/render.h"

#include <fmt/format.h>

#include <algorithm>

#include "codegen/cuda/paged_attention.h"

namespace jit::codegen::cuda {
namespace {

constexpr int64_t kMaxThreads = 1024;
constexpr int64_t kVectorBytes = 16;  // one ld.global.v4.b32

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// The widest power-of-two element count <= max_elements that divides `width`.
int64_t widest_vec(int64_t width, int64_t max_elements) {
  int64_t vec = 1;
  while (vec * 2 <= max_elements && width % (vec * 2) == 0) vec *= 2;
  return vec;
}

// Threads for `units` independent work items per block: a multiple of 32, at most 1024.
int64_t threads_for(int64_t units, int64_t cap = kMaxThreads) {
  return std::clamp<int64_t>(round_up(std::max<int64_t>(units, 1), 32), 32, cap);
}

bool is_activation(OpKind op) {
  return op_family(op) == "activation";
}

// The ops with a template in templates/.
bool has_template(OpKind op) {
  switch (op) {
    case OpKind::kRmsNorm:
    case OpKind::kFusedAddRmsNorm:
    case OpKind::kRotaryEmbedding:
    case OpKind::kReshapeAndCache:
    case OpKind::kReshapeAndCacheFlash:
    case OpKind::kConcatAndCacheMla:
    case OpKind::kConvertFp8:
    case OpKind::kGatherAndMaybeDequantCache:
    case OpKind::kCpGatherCache:
    case OpKind::kMergeAttnStates:
    case OpKind::kConvertVerticalSlashIndexes:
    case OpKind::kConvertVerticalSlashIndexesMergehead:
    case OpKind::kTopKPerRowPrefill:
    case OpKind::kTopKPerRowDecode:
    case OpKind::kPagedAttentionV1:
    case OpKind::kPagedAttentionV2:
    case OpKind::kIndexerKQuantAndCache:
    case OpKind::kCpGatherIndexerKQuantCache:
    case OpKind::kConcatAndCacheMlaRopeFused:
    case OpKind::kCpGatherAndUpconvertFp8KvCache:
    case OpKind::kSwapBlocks: return true;
    default: return is_activation(op);
  }
}

// The vector width limit in elements for `op` with element size `esize`.
int64_t max_vec(OpKind op, int64_t esize) {
  // swigluoai loads 2·vec interleaved inputs per access; so does GPT-J rotary (pairs are
  // adjacent), and NeoX rotary keeps the same bound so that both styles tune alike.
  return op == OpKind::kSwigluoaiAndMul || op == OpKind::kRotaryEmbedding ? kVectorBytes / esize / 2
                                                                          : kVectorBytes / esize;
}

// The row width the vector width must divide (0: the kernel has no vector knob).
int64_t vector_width_of(const OpSpec& spec) {
  switch (spec.op) {
    case OpKind::kRmsNorm:
    case OpKind::kFusedAddRmsNorm: return spec.get<ir::NormParams>().hidden;
    case OpKind::kReshapeAndCacheFlash: return spec.get<ir::FlashCacheWriteParams>().head_size;
    // convert_fp8 vectorises a flat buffer (with a scalar tail): any power of two divides.
    case OpKind::kConvertFp8: return 1 << 30;
    case OpKind::kMergeAttnStates: return spec.get<ir::MergeAttnStatesParams>().head_size;
    case OpKind::kRotaryEmbedding: return spec.get<ir::RopeParams>().rot_dim / 2;
    default: return is_activation(spec.op) ? spec.get<ir::ActivationParams>().d : 0;
  }
}

// The widest element the vector accesses move (it bounds vec at 16 bytes).
DType element_dtype(const OpSpec& spec) {
  switch (spec.op) {
    case OpKind::kRmsNorm:
    case OpKind::kFusedAddRmsNorm: return spec.get<ir::NormParams>().dtype;
    case OpKind::kReshapeAndCacheFlash: return spec.get<ir::FlashCacheWriteParams>().dtype;
    case OpKind::kConvertFp8: {
      const auto& p = spec.get<ir::ConvertFp8Params>();
      return dtype_size(p.src) >= dtype_size(p.dst) ? p.src : p.dst;
    }
    case OpKind::kMergeAttnStates: return spec.get<ir::MergeAttnStatesParams>().dtype;
    case OpKind::kRotaryEmbedding: {
      // The widest of the two element types bounds the vector.
      const auto& p = spec.get<ir::RopeParams>();
      return dtype_size(p.cache_dtype) > dtype_size(p.dtype) ? p.cache_dtype : p.dtype;
    }
    default: return is_activation(spec.op) ? spec.get<ir::ActivationParams>().dtype : DType::kF32;
  }
}

// Threads of one block: enough for `units` vector accesses of a row, or the kernel's fixed
// choice (rope: one pair per thread; legacy cache: one element per thread; convert: 256).
int64_t default_threads(const OpSpec& spec, int64_t vec) {
  switch (spec.op) {
    case OpKind::kRotaryEmbedding: {
      const auto& p = spec.get<ir::RopeParams>();
      const int64_t heads = std::max(p.head_count_q, p.key ? p.head_count_kv : 0);
      return threads_for(heads * p.rot_dim / 2 / vec, 512);
    }
    case OpKind::kReshapeAndCache: {
      const auto& p = spec.get<ir::PagedCacheWriteParams>();
      return threads_for(p.head_count_kv * p.head_size, 512);
    }
    case OpKind::kReshapeAndCacheFlash: {
      const auto& p = spec.get<ir::FlashCacheWriteParams>();
      return threads_for(p.head_count_kv * p.head_size / vec, 512);
    }
    case OpKind::kConvertFp8: return 256;
    case OpKind::kGatherAndMaybeDequantCache:
      return threads_for(spec.get<ir::GatherCacheParams>().head_dim, 256);
    case OpKind::kCpGatherCache: return 256;
    case OpKind::kCpGatherIndexerKQuantCache: return 256;
    case OpKind::kCpGatherAndUpconvertFp8KvCache: return 64;
    case OpKind::kSwapBlocks: {
      const int64_t bytes = spec.get<ir::SwapBlocksParams>().block_bytes;
      return threads_for(bytes % 16 == 0 ? bytes / 16 : bytes, 512);
    }
    case OpKind::kConcatAndCacheMlaRopeFused: {
      const auto& p = spec.get<ir::MlaRopeCacheWriteParams>();
      return threads_for(std::max(p.kv_lora_rank + p.rot_dim, p.head_count_q * p.rot_dim / 2), 512);
    }
    case OpKind::kIndexerKQuantAndCache: {
      // One warp per scale group, at most 8 warps.
      const auto& p = spec.get<ir::IndexerQuantParams>();
      return std::min<int64_t>(8, p.head_dim / p.quant_block) * 32;
    }
    case OpKind::kConcatAndCacheMla: {
      const auto& p = spec.get<ir::MlaCacheWriteParams>();
      // ds_mla: one warp per 128-wide tile of the 512 latent values.
      if (p.kv == ir::KvCacheDtype::kFp8DsMla) return 128;
      return threads_for(p.kv_lora_rank + p.pe_dim, 512);
    }
    case OpKind::kPagedAttentionV1:
    case OpKind::kPagedAttentionV2:
      return paged_attention_default_threads(spec.get<ir::PagedAttentionParams>());
    case OpKind::kTopKPerRowPrefill:
    case OpKind::kTopKPerRowDecode: return spec.get<ir::TopKParams>().top_k >= 1024 ? 512 : 256;
    // One thread per row block (a sequential walk each); small blocks spread them over SMs.
    case OpKind::kConvertVerticalSlashIndexes:
    case OpKind::kConvertVerticalSlashIndexesMergehead: return 64;
    default: return threads_for(vector_width_of(spec) / vec);
  }
}

Config default_config(const OpSpec& spec) {
  Config config;
  const int64_t width = vector_width_of(spec);
  const int64_t vec =
      width > 0 ? widest_vec(width, max_vec(spec.op, int64_t(dtype_size(element_dtype(spec))))) : 1;
  config.set(std::string(kThreads), default_threads(spec, vec));
  if (width > 0) config.set(std::string(kVec), vec);
  if (is_paged_attention_op(spec.op)) {
    const auto& p = spec.get<ir::PagedAttentionParams>();
    config.set(std::string(kHeadsPerCta),
               paged_attention_heads_per_cta(p, paged_attention_default_threads(p)));
  }
  return config;
}

std::string bool_text(bool b) {
  return b ? "true" : "false";
}

}  // namespace

Result<Config> resolve_config(const OpSpec& spec, const Config& config) {
  const Config defaults = default_config(spec);
  Config resolved;
  // The knobs this op has: threads; vec where it moves vectors; heads_per_cta for paged attention.
  const bool paged = is_paged_attention_op(spec.op);
  const int64_t width = vector_width_of(spec);
  std::vector<std::string_view> knobs = {kThreads};
  if (paged) knobs.push_back(kHeadsPerCta);
  if (width > 0) knobs.push_back(kVec);
  KILN_RETURN_IF_ERROR(check_knob_names("cuda", spec, config, knobs));
  const int64_t threads = config.get(kThreads, defaults.get(kThreads, 256));
  if (threads < 32 || threads > kMaxThreads || threads % 32 != 0) {
    return invalid_argument(fmt::format(
        "cuda config: threads={} is not allowed; allowed: a multiple of 32 in 32..1024", threads));
  }
  resolved.set(std::string(kThreads), threads);
  if (width > 0) {
    const int64_t vec = config.get(kVec, defaults.get(kVec, 1));
    const int64_t limit = max_vec(spec.op, int64_t(dtype_size(element_dtype(spec))));
    if (vec < 1 || vec > limit || (vec & (vec - 1)) != 0 || width % vec != 0) {
      return invalid_argument(fmt::format(
          "cuda config: vec={} is not allowed for {}; allowed: a power of two <= {} that "
          "divides {}",
          vec, op_name(spec.op), limit, width));
    }
    resolved.set(std::string(kVec), vec);
  }
  if (paged) KILN_RETURN_IF_ERROR(resolve_paged_attention_config(spec, config, resolved));
  return resolved;
}

std::string_view cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float";
    case DType::kF16: return "kiln::f16";
    case DType::kBF16: return "kiln::bf16";
    case DType::kFp8E4m3: return "kiln::fp8e4m3";
    case DType::kFp8E5m2: return "kiln::fp8e5m2";
    case DType::kI8: return "kiln::i8";
    case DType::kU8: return "kiln::u8";
    case DType::kI32: return "kiln::i32";
    case DType::kI64: return "kiln::i64";
  }
  return "?";
}

std::string RenderedKernel::config_struct(std::string_view name) const {
  return fmt::format("struct {} {{\n{}}};\n", name, config_members);
}

std::string RenderedKernel::name_expression(std::string_view config_name) const {
  return fmt::format("{}<{}>", kernel_template, config_name);
}

std::string RenderedKernel::unit() const {
  return fmt::format(
      "// kiln CUDA kernel: {}\n#include \"{}\"\n\n{}\ntemplate __global__ void {}({});\n",
      description, header, config_struct("KilnCfg"), name_expression("KilnCfg"), args_type);
}

Support cuda_supports(const OpSpec& spec) {
  const OpKind op = spec.op;
  const bool templated = has_template(op);
  if (!templated) {
    return Support::no(fmt::format("the cuda backend has no template for {} yet", op_name(op)));
  }
  if (is_paged_attention_op(op)) {
    return paged_attention_support(spec);
  }
  const Status valid = validate(spec);
  if (!valid.is_ok()) return Support::no(valid.message());
  return Support::yes();
}

std::vector<Config> cuda_configs(const OpSpec& spec) {
  std::vector<Config> space = {default_config(spec)};
  const Config base = space.front();  // a copy: push_back reallocates
  // Each point is stored resolved (every knob set), so that two spellings of one kernel are
  // one point.
  auto add = [&](const Config& c) {
    Result<Config> resolved = resolve_config(spec, c);
    if (resolved.is_ok() && std::find(space.begin(), space.end(), *resolved) == space.end()) {
      space.push_back(std::move(resolved).value());
    }
  };
  const bool paged = is_paged_attention_op(spec.op);
  for (int64_t threads : {128, 256, 512, 1024}) {
    if (!paged) {
      add(Config(base).set(std::string(kThreads), threads));
      continue;
    }
    // Paged attention: every heads per CTA allowed at each thread count (the fastest point
    // moves with the grid: fewer heads for small batches, more for large ones).
    const auto& p = spec.get<ir::PagedAttentionParams>();
    for (int64_t heads : paged_attention_heads_choices(p, threads)) {
      add(Config().set(std::string(kThreads), threads).set(std::string(kHeadsPerCta), heads));
    }
  }
  if (vector_width_of(spec) > 0) add(Config(base).set(std::string(kVec), 1));
  return space;
}

Result<RenderedKernel> render(const OpSpec& spec, const Config& config) {
  const Support support = cuda_supports(spec);
  if (!support.ok) return Status(StatusCode::kUnsupported, support.reason);
  Result<Config> resolved = resolve_config(spec, config);
  if (!resolved.is_ok()) return resolved.status();
  const int64_t threads = resolved->get(kThreads, 256);
  const int64_t vec = resolved->get(kVec, 1);
  RenderedKernel r;
  r.description = fmt::format("{} config {}", to_string(spec), resolved->to_string());
  std::string& m = r.config_members;
  if (spec.op == OpKind::kRmsNorm || spec.op == OpKind::kFusedAddRmsNorm) {
    const auto& p = spec.get<ir::NormParams>();
    r.header = "norm.cuh";
    r.kernel_template = "kiln::rms_norm_kernel";
    r.args_type = "kiln::NormArgs";
    m += fmt::format("  using T = {};\n", cuda_type(p.dtype));
    m += fmt::format("  static constexpr int kHidden = {};\n", p.hidden);
    m += fmt::format("  static constexpr bool kWeight = {};\n", bool_text(p.weight));
    m += fmt::format("  static constexpr bool kFused = {};\n",
                     bool_text(spec.op == OpKind::kFusedAddRmsNorm));
  } else if (is_activation(spec.op)) {
    const auto& p = spec.get<ir::ActivationParams>();
    r.header = "activation.cuh";
    r.kernel_template = "kiln::gated_activation_kernel";
    r.args_type = "kiln::ActivationArgs";
    // kOp follows the activations' order in ir/op_list.def (kiln::ActOp).
    const int op_index = int(spec.op) - int(OpKind::kSiluAndMul);
    m += fmt::format("  using T = {};\n", cuda_type(p.dtype));
    m += fmt::format("  static constexpr int kD = {};\n", p.d);
    m += fmt::format("  static constexpr int kOp = {};\n", op_index);
  } else if (spec.op == OpKind::kReshapeAndCache || spec.op == OpKind::kReshapeAndCacheFlash) {
    const bool flash = spec.op == OpKind::kReshapeAndCacheFlash;
    DType dtype;
    ir::KvCacheDtype kv;
    int64_t heads, head_size, block_size;
    bool per_head = false;
    if (flash) {
      const auto& p = spec.get<ir::FlashCacheWriteParams>();
      dtype = p.dtype, kv = p.kv, heads = p.head_count_kv, head_size = p.head_size;
      block_size = p.block_size, per_head = p.per_head_scale;
    } else {
      const auto& p = spec.get<ir::PagedCacheWriteParams>();
      dtype = p.dtype, kv = p.kv, heads = p.head_count_kv, head_size = p.head_size;
      block_size = p.block_size;
    }
    r.header = "cache.cuh";
    r.kernel_template = "kiln::cache_write_kernel";
    r.args_type = "kiln::CacheWriteArgs";
    m += fmt::format("  using T = {};\n", cuda_type(dtype));
    m += fmt::format("  using C = {};\n",
                     kv == ir::KvCacheDtype::kAuto ? cuda_type(dtype) : "kiln::u8");
    m += fmt::format("  static constexpr int kKv = {};\n", int(kv));
    m += fmt::format("  static constexpr int kHeads = {};\n", heads);
    m += fmt::format("  static constexpr int kHeadSize = {};\n", head_size);
    m += fmt::format("  static constexpr int kBlockSize = {};\n", block_size);
    m += fmt::format("  static constexpr bool kFlash = {};\n", bool_text(flash));
    m += fmt::format("  static constexpr bool kPerHeadScale = {};\n", bool_text(per_head));
    m += fmt::format("  static constexpr int kX = {};\n", flash ? 1 : ir::paged_key_x(dtype, kv));
  } else if (spec.op == OpKind::kSwapBlocks) {
    r.header = "swap.cuh";
    r.kernel_template = "kiln::swap_blocks_kernel";
    r.args_type = "kiln::SwapArgs";
    m += fmt::format("  static constexpr long long kBlockBytes = {};\n",
                     spec.get<ir::SwapBlocksParams>().block_bytes);
  } else if (spec.op == OpKind::kConcatAndCacheMlaRopeFused) {
    const auto& p = spec.get<ir::MlaRopeCacheWriteParams>();
    r.header = "mla_rope.cuh";
    r.kernel_template = "kiln::mla_rope_kernel";
    r.args_type = "kiln::MlaRopeArgs";
    m += fmt::format("  using T = {};\n", cuda_type(p.dtype));
    m += fmt::format("  using C = {};\n",
                     p.kv == ir::KvCacheDtype::kAuto ? cuda_type(p.dtype) : "kiln::u8");
    m += fmt::format("  static constexpr int kKv = {};\n", int(p.kv));
    m += fmt::format("  static constexpr int kRank = {};\n", p.kv_lora_rank);
    m += fmt::format("  static constexpr int kRotDim = {};\n", p.rot_dim);
    m += fmt::format("  static constexpr int kHeadsQ = {};\n", p.head_count_q);
    m += fmt::format("  static constexpr bool kNeox = {};\n",
                     bool_text(p.style == ir::RopeStyle::kNeox));
    m += fmt::format("  static constexpr int kBlockSize = {};\n", p.block_size);
  } else if (spec.op == OpKind::kCpGatherAndUpconvertFp8KvCache) {
    r.header = "upconvert.cuh";
    r.kernel_template = "kiln::upconvert_kernel";
    r.args_type = "kiln::UpconvertArgs";
    m += fmt::format("  static constexpr int kBlockSize = {};\n",
                     spec.get<ir::UpconvertGatherParams>().block_size);
  } else if (spec.op == OpKind::kIndexerKQuantAndCache) {
    const auto& p = spec.get<ir::IndexerQuantParams>();
    r.header = "indexer.cuh";
    r.kernel_template = "kiln::indexer_quant_kernel";
    r.args_type = "kiln::IndexerArgs";
    m += fmt::format("  using T = {};\n", cuda_type(p.dtype));
    m += fmt::format("  static constexpr int kHeadDim = {};\n", p.head_dim);
    m += fmt::format("  static constexpr int kQuantBlock = {};\n", p.quant_block);
    m += fmt::format("  static constexpr int kBlockSize = {};\n", p.block_size);
    m += fmt::format("  static constexpr bool kUe8m0 = {};\n",
                     bool_text(p.scale_fmt == ir::ScaleFormat::kUe8m0));
  } else if (spec.op == OpKind::kCpGatherIndexerKQuantCache) {
    const auto& p = spec.get<ir::IndexerGatherParams>();
    r.header = "indexer.cuh";
    r.kernel_template = "kiln::indexer_gather_kernel";
    r.args_type = "kiln::IndexerArgs";
    m += fmt::format("  static constexpr int kHeadDim = {};\n", p.head_dim);
    m += fmt::format("  static constexpr int kQuantBlock = {};\n", p.quant_block);
    m += fmt::format("  static constexpr int kBlockSize = {};\n", p.block_size);
  } else if (spec.op == OpKind::kGatherAndMaybeDequantCache) {
    const auto& p = spec.get<ir::GatherCacheParams>();
    r.header = "gather.cuh";
    r.kernel_template = "kiln::gather_dequant_kernel";
    r.args_type = "kiln::GatherArgs";
    m += fmt::format("  using T = {};\n", cuda_type(p.dtype));
    m += fmt::format("  using C = {};\n",
                     p.kv == ir::KvCacheDtype::kAuto ? cuda_type(p.dtype) : "kiln::u8");
    m += fmt::format("  static constexpr int kKv = {};\n", int(p.kv));
    m += fmt::format("  static constexpr int kHeadDim = {};\n", p.head_dim);
    m += fmt::format("  static constexpr int kBlockSize = {};\n", p.block_size);
  } else if (spec.op == OpKind::kCpGatherCache) {
    const auto& p = spec.get<ir::CpGatherCacheParams>();
    r.header = "gather.cuh";
    r.kernel_template = "kiln::cp_gather_kernel";
    r.args_type = "kiln::GatherArgs";
    // A bit copy: the element's size is all that matters.
    const size_t esize = dtype_size(p.dtype);
    m += fmt::format("  using E = {};\n", esize == 1   ? "kiln::u8"
                                          : esize == 2 ? "kiln::u16"
                                          : esize == 4 ? "kiln::u32"
                                                       : "kiln::u64");
    m += fmt::format("  static constexpr int kEntry = {};\n", p.entry_size);
    m += fmt::format("  static constexpr int kBlockSize = {};\n", p.block_size);
  } else if (spec.op == OpKind::kConcatAndCacheMla) {
    const auto& p = spec.get<ir::MlaCacheWriteParams>();
    r.header = "mla_cache.cuh";
    r.kernel_template = "kiln::mla_cache_kernel";
    r.args_type = "kiln::MlaWriteArgs";
    m += fmt::format("  using T = {};\n", cuda_type(p.dtype));
    m += fmt::format("  using C = {};\n",
                     p.kv == ir::KvCacheDtype::kAuto ? cuda_type(p.dtype) : "kiln::u8");
    m += fmt::format("  static constexpr int kKv = {};\n", int(p.kv));
    m += fmt::format("  static constexpr int kRank = {};\n", p.kv_lora_rank);
    m += fmt::format("  static constexpr int kPeDim = {};\n", p.pe_dim);
    m += fmt::format("  static constexpr int kBlockSize = {};\n", p.block_size);
  } else if (spec.op == OpKind::kConvertVerticalSlashIndexes ||
             spec.op == OpKind::kConvertVerticalSlashIndexesMergehead) {
    const auto& p = spec.get<ir::VerticalSlashParams>();
    r.header = "vertical_slash.cuh";
    r.kernel_template = "kiln::vertical_slash_kernel";
    r.args_type = "kiln::VerticalSlashArgs";
    m += fmt::format("  static constexpr int kBlockM = {};\n", p.block_m);
    m += fmt::format("  static constexpr int kBlockN = {};\n", p.block_n);
    m += fmt::format("  static constexpr bool kCausal = {};\n", bool_text(p.causal));
  } else if (spec.op == OpKind::kTopKPerRowPrefill || spec.op == OpKind::kTopKPerRowDecode) {
    r.header = "topk.cuh";
    r.kernel_template = "kiln::top_k_kernel";
    r.args_type = "kiln::TopKArgs";
    m += fmt::format("  static constexpr int kTopK = {};\n", spec.get<ir::TopKParams>().top_k);
    m += fmt::format("  static constexpr bool kDecode = {};\n",
                     bool_text(spec.op == OpKind::kTopKPerRowDecode));
  } else if (spec.op == OpKind::kMergeAttnStates) {
    const auto& p = spec.get<ir::MergeAttnStatesParams>();
    const bool fp8 = p.out_dtype == DType::kFp8E4m3;
    r.header = "merge_attn_states.cuh";
    r.kernel_template = "kiln::merge_attn_states_kernel";
    r.args_type = "kiln::MergeArgs";
    m += fmt::format("  using T = {};\n", cuda_type(p.dtype));
    m += fmt::format("  using O = {};\n", fp8 ? "kiln::u8" : cuda_type(p.out_dtype));
    m += fmt::format("  static constexpr bool kFp8Out = {};\n", bool_text(fp8));
    m += fmt::format("  static constexpr int kHeads = {};\n", p.head_count);
    m += fmt::format("  static constexpr int kHeadSize = {};\n", p.head_size);
    m += fmt::format("  static constexpr bool kOutputLse = {};\n", bool_text(p.output_lse));
  } else if (is_paged_attention_op(spec.op)) {
    render_paged_attention(spec, *resolved, r);
  } else if (spec.op == OpKind::kConvertFp8) {
    const auto& p = spec.get<ir::ConvertFp8Params>();
    const bool quantise = p.dst == DType::kFp8E4m3;
    r.header = "cache.cuh";
    r.kernel_template = "kiln::convert_fp8_kernel";
    r.args_type = "kiln::ConvertArgs";
    // fp8 codes travel as raw bytes (vLLM's caches are uint8 tensors).
    m += fmt::format("  using S = {};\n", quantise ? cuda_type(p.src) : "kiln::u8");
    m += fmt::format("  using D = {};\n", quantise ? "kiln::u8" : cuda_type(p.dst));
    m += fmt::format("  static constexpr bool kQuantise = {};\n", bool_text(quantise));
  } else {
    const auto& p = spec.get<ir::RopeParams>();
    r.header = "rope.cuh";
    r.kernel_template = "kiln::rotary_kernel";
    r.args_type = "kiln::RopeArgs";
    m += fmt::format("  using T = {};\n", cuda_type(p.dtype));
    m += fmt::format("  using TC = {};\n", cuda_type(p.cache_dtype));
    m += fmt::format("  static constexpr int kHeadSize = {};\n", p.head_size);
    m += fmt::format("  static constexpr int kRotDim = {};\n", p.rot_dim);
    m += fmt::format("  static constexpr bool kNeox = {};\n",
                     bool_text(p.style == ir::RopeStyle::kNeox));
    m += fmt::format("  static constexpr int kHeadsQ = {};\n", p.head_count_q);
    m += fmt::format("  static constexpr int kHeadsKv = {};\n", p.key ? p.head_count_kv : 0);
    m += fmt::format("  static constexpr bool kKey = {};\n", bool_text(p.key));
  }
  m += fmt::format("  static constexpr int kThreads = {};\n", threads);
  if (vector_width_of(spec) > 0) m += fmt::format("  static constexpr int kVec = {};\n", vec);
  return r;
}

}  // namespace jit::codegen::cuda
