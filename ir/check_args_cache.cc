// Run-time argument checks of the KV-cache writes, gathers, swaps and quantisers
// (spec/cache_ops.md; argument order in docs/ops.md). Only what the call's shape decides is
// checked here; the indices held in the tensors (slots, block ids, positions) are validated by
// the backends before anything is written.
//
// KILN decisions beyond vLLM (which checks little and trusts the rest):
//   - slot_mapping must be int64 in every op (vLLM silently misreads an int32 mapping);
//   - an fp8 cache is a uint8 tensor or the fp8 dtype of the spec's kv (vLLM writes the bytes
//     whatever the declared flavour; a float8_e5m2 cache holding e4m3 codes would be misread by
//     everyone else); an auto cache has the input's dtype (vLLM copies bits across dtypes);
//   - every layout assumption vLLM leaves to the caller (dense rows, dense entries, equal key
//     and value strides) is checked;
//   - swap_blocks' src and dst are contiguous and hold whole blocks, so that every block id can
//     be bounds-checked (pass the parent [NB, 2, ...] tensor rather than its kv[:, 0] view: the
//     base pointer is the same).
#include <fmt/format.h>

#include <cmath>

#include "ir/check_args.h"
#include "ir/params_cache.h"

namespace jit::ir {
namespace {

// Entry of the DeepSeek fp8_ds_mla layout and the bf16 row the upconverting gather writes.
constexpr int64_t kDsMlaEntryBytes = 656;
constexpr int64_t kUpconvertRow = 576;

// Element `i` of a 1-D int32 index tensor, through its stride.
int64_t i32_at(const Tensor& t, int64_t i) {
  return t.data_as<const int32_t>()[i * t.stride(0)];
}

Status expect_at_least(std::string_view op, std::string_view arg, const Tensor& t, int dim,
                       int64_t min, std::string_view why) {
  if (t.size(dim) >= min) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' has size {} in dim {} ({}); expected at "
                  "least {} ({})",
                  op, arg, t.size(dim), dim, t.describe(), min, why));
}

Status expect_stride(std::string_view op, std::string_view arg, const Tensor& t, int dim,
                     int64_t stride, std::string_view why) {
  if (t.size(dim) == 1 || t.stride(dim) == stride) return Status::ok();
  return invalid_argument(fmt::format("{}: argument '{}' ({}) must have stride {} in dim {} ({})",
                                      op, arg, t.describe(), stride, dim, why));
}

// slot_mapping [T]: int64 in every op (KILN), dense.
Status expect_slot_mapping(std::string_view op, const Tensor& t) {
  KILN_RETURN_IF_ERROR(expect_tensor(op, "slot_mapping", t, DType::kI64, {1}));
  return expect_contiguous(op, "slot_mapping", t);
}

// A float32 scale tensor; only element 0 is read unless `heads` > 0 (one scale per head).
Status expect_scale(std::string_view op, std::string_view arg, const Tensor& t, int64_t heads) {
  KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
  KILN_RETURN_IF_ERROR(expect_dtype(op, arg, t, DType::kF32));
  if (heads > 0) {
    KILN_RETURN_IF_ERROR(expect_rank(op, arg, t, {1}));
    KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 0, heads));
    return expect_contiguous(op, arg, t);
  }
  if (t.numel() >= 1) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' ({}) is empty; a float32 scale holds at least one element", op,
                  arg, t.describe()));
}

// The element type of a cache written with input type `dtype` in mode `kv`.
Status expect_cache_dtype(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                          KvCacheDtype kv) {
  if (kv == KvCacheDtype::kAuto) {
    if (t.dtype() == dtype) return Status::ok();
    return invalid_argument(
        fmt::format("{}: argument '{}' has dtype {}; expected {} (kv=auto "
                    "stores the input type)",
                    op, arg, dtype_name(t.dtype()), dtype_name(dtype)));
  }
  const DType fp8 = kv == KvCacheDtype::kFp8E5m2 ? DType::kFp8E5m2 : DType::kFp8E4m3;
  if (t.dtype() == DType::kU8 || t.dtype() == fp8) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' has dtype {}; expected u8 or {} "
                  "(kv={} stores one fp8 code per element)",
                  op, arg, dtype_name(t.dtype()), dtype_name(fp8), enum_name(kv)));
}

// An int32 index tensor of `rank` whose last dim is dense (block tables, cu_seq_lens, ...).
Status expect_index(std::string_view op, std::string_view arg, const Tensor& t, int rank) {
  KILN_RETURN_IF_ERROR(expect_tensor(op, arg, t, DType::kI32, {rank}));
  return expect_unit_last_stride(op, arg, t);
}

// A scalar that vLLM declares `int`: integral and in [0, 2^31).
Status expect_count_scalar(std::string_view op, std::string_view name, double v) {
  if (v >= 0 && v < 2147483648.0 && std::floor(v) == v) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' = {} must be an integer in [0, 2^31)", op, name, v));
}

// Activation rows [rows, width] of `dtype`: row stride honoured, elements dense.
Status expect_rows2(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                    int64_t width) {
  KILN_RETURN_IF_ERROR(expect_tensor(op, arg, t, dtype, {2}));
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 1, width));
  return expect_unit_last_stride(op, arg, t);
}

// key/value [T_in, H, D]: row stride honoured; heads at stride D, elements at stride 1.
Status expect_kv_rows(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                      int64_t heads, int64_t head_size, int64_t tokens) {
  KILN_RETURN_IF_ERROR(expect_tensor(op, arg, t, dtype, {3}));
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 1, heads));
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 2, head_size));
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, arg, t));
  KILN_RETURN_IF_ERROR(expect_stride(op, arg, t, 1, head_size, "the heads of a row are dense"));
  return expect_at_least(op, arg, t, 0, tokens, "one row per slot_mapping entry");
}

// ---- per op --------------------------------------------------------------------------------

// swap_blocks(src, dst, block_mapping)
Status check_swap_blocks(std::string_view op, const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<SwapBlocksParams>();
  KILN_RETURN_IF_ERROR(expect_count(op, args, 3, 0));
  for (int i = 0; i < 2; ++i) {
    const char* arg = i == 0 ? "src" : "dst";
    const Tensor& t = args.tensor(i);
    KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
    KILN_RETURN_IF_ERROR(expect_contiguous(op, arg, t));
    const int64_t bytes = t.numel() * int64_t(t.element_size());
    if (bytes % p.block_bytes != 0) {
      return invalid_argument(fmt::format(
          "{}: argument '{}' ({}) holds {} bytes, not a whole number of blocks of block_bytes={}",
          op, arg, t.describe(), bytes, p.block_bytes));
    }
  }
  const Tensor& src = args.tensor(0);
  const Tensor& dst = args.tensor(1);
  if (src.device().kind == Device::Kind::kCuda && dst.device().kind == Device::Kind::kCuda &&
      src.device().index != dst.device().index) {
    return invalid_argument(fmt::format("{}: src ({}) and dst ({}) must be on the same GPU", op,
                                        to_string(src.device()), to_string(dst.device())));
  }
  const Tensor& mapping = args.tensor(2);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "block_mapping", mapping, DType::kI64, {2}));
  KILN_RETURN_IF_ERROR(expect_size(op, "block_mapping", mapping, 1, 2));
  return expect_cpu(op, "block_mapping", mapping);
}

// reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
Status check_reshape_and_cache(std::string_view op, const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<PagedCacheWriteParams>();
  KILN_RETURN_IF_ERROR(expect_count(op, args, 7, 0));
  const Tensor& slots = args.tensor(4);
  KILN_RETURN_IF_ERROR(expect_slot_mapping(op, slots));
  const int64_t tokens = slots.size(0);
  KILN_RETURN_IF_ERROR(
      expect_kv_rows(op, "key", args.tensor(0), p.dtype, p.head_count_kv, p.head_size, tokens));
  KILN_RETURN_IF_ERROR(
      expect_kv_rows(op, "value", args.tensor(1), p.dtype, p.head_count_kv, p.head_size, tokens));
  const int64_t x = paged_key_x(p.dtype, p.kv);
  const Tensor& key_cache = args.tensor(2);
  const Tensor& value_cache = args.tensor(3);
  KILN_RETURN_IF_ERROR(expect_defined(op, "key_cache", key_cache));
  KILN_RETURN_IF_ERROR(expect_cache_dtype(op, "key_cache", key_cache, p.dtype, p.kv));
  KILN_RETURN_IF_ERROR(expect_rank(op, "key_cache", key_cache, {5}));
  // [NB, H, D/x, BS, x]
  const int64_t key_sizes[] = {key_cache.size(0), p.head_count_kv, p.head_size / x, p.block_size,
                               x};
  for (int d = 1; d < 5; ++d) {
    KILN_RETURN_IF_ERROR(expect_size(op, "key_cache", key_cache, d, key_sizes[d]));
  }
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "key_cache", key_cache));
  KILN_RETURN_IF_ERROR(expect_defined(op, "value_cache", value_cache));
  KILN_RETURN_IF_ERROR(expect_dtype(op, "value_cache", value_cache, key_cache.dtype()));
  KILN_RETURN_IF_ERROR(expect_rank(op, "value_cache", value_cache, {4}));
  // [NB, H, D, BS]
  KILN_RETURN_IF_ERROR(expect_size(op, "value_cache", value_cache, 0, key_cache.size(0)));
  KILN_RETURN_IF_ERROR(expect_size(op, "value_cache", value_cache, 1, p.head_count_kv));
  KILN_RETURN_IF_ERROR(expect_size(op, "value_cache", value_cache, 2, p.head_size));
  KILN_RETURN_IF_ERROR(expect_size(op, "value_cache", value_cache, 3, p.block_size));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "value_cache", value_cache));
  KILN_RETURN_IF_ERROR(expect_scale(op, "k_scale", args.tensor(5), 0));
  return expect_scale(op, "v_scale", args.tensor(6), 0);
}

// The flash-layout caches [NB, BS, H, D] (NHD or HND order) and their scales, shared by
// reshape_and_cache_flash and rotary_embedding_and_cache_flash.
Status expect_flash_caches(std::string_view op, const FlashCacheWriteParams& p,
                           const Tensor& key_cache, const Tensor& value_cache,
                           const Tensor& k_scale, const Tensor& v_scale) {
  const bool nhd = p.layout == CacheLayout::kNhd;
  const int64_t page_stride = nhd ? p.head_count_kv * p.head_size : p.head_size;
  const int64_t head_stride = nhd ? p.head_size : p.block_size * p.head_size;
  const std::string_view why = nhd ? "layout=nhd: a block is [block_size, heads, head_size]"
                                   : "layout=hnd: a block is [heads, block_size, head_size]";
  for (int i = 2; i < 4; ++i) {
    const char* arg = i == 2 ? "key_cache" : "value_cache";
    const Tensor& t = i == 2 ? key_cache : value_cache;
    KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
    KILN_RETURN_IF_ERROR(expect_cache_dtype(op, arg, t, p.dtype, p.kv));
    KILN_RETURN_IF_ERROR(expect_rank(op, arg, t, {4}));
    KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 1, p.block_size));
    KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 2, p.head_count_kv));
    KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 3, p.head_size));
    KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, arg, t));
    KILN_RETURN_IF_ERROR(expect_stride(op, arg, t, 1, page_stride, why));
    KILN_RETURN_IF_ERROR(expect_stride(op, arg, t, 2, head_stride, why));
  }
  KILN_RETURN_IF_ERROR(expect_dtype(op, "value_cache", value_cache, key_cache.dtype()));
  KILN_RETURN_IF_ERROR(expect_size(op, "value_cache", value_cache, 0, key_cache.size(0)));
  if (key_cache.size(0) > 1 && key_cache.stride(0) != value_cache.stride(0)) {
    return invalid_argument(
        fmt::format("{}: key_cache ({}) and value_cache ({}) must have the "
                    "same block stride",
                    op, key_cache.describe(), value_cache.describe()));
  }
  const int64_t heads = p.per_head_scale ? p.head_count_kv : 0;
  KILN_RETURN_IF_ERROR(expect_scale(op, "k_scale", k_scale, heads));
  return expect_scale(op, "v_scale", v_scale, heads);
}

// reshape_and_cache_flash: same arguments; caches logical [NB, BS, H, D] (NHD or HND order).
Status check_reshape_and_cache_flash(std::string_view op, const OpSpec& spec,
                                     const KernelArgs& args) {
  const auto& p = spec.get<FlashCacheWriteParams>();
  KILN_RETURN_IF_ERROR(expect_count(op, args, 7, 0));
  const Tensor& slots = args.tensor(4);
  KILN_RETURN_IF_ERROR(expect_slot_mapping(op, slots));
  const int64_t tokens = slots.size(0);
  KILN_RETURN_IF_ERROR(
      expect_kv_rows(op, "key", args.tensor(0), p.dtype, p.head_count_kv, p.head_size, tokens));
  KILN_RETURN_IF_ERROR(
      expect_kv_rows(op, "value", args.tensor(1), p.dtype, p.head_count_kv, p.head_size, tokens));
  return expect_flash_caches(op, p, args.tensor(2), args.tensor(3), args.tensor(5), args.tensor(6));
}

// concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, scale)
Status check_concat_and_cache_mla(std::string_view op, const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<MlaCacheWriteParams>();
  KILN_RETURN_IF_ERROR(expect_count(op, args, 5, 0));
  const Tensor& slots = args.tensor(3);
  KILN_RETURN_IF_ERROR(expect_slot_mapping(op, slots));
  const int64_t tokens = slots.size(0);
  const std::string_view why = "one row per slot_mapping entry";
  KILN_RETURN_IF_ERROR(expect_rows2(op, "kv_c", args.tensor(0), p.dtype, p.kv_lora_rank));
  KILN_RETURN_IF_ERROR(expect_at_least(op, "kv_c", args.tensor(0), 0, tokens, why));
  KILN_RETURN_IF_ERROR(expect_rows2(op, "k_pe", args.tensor(1), p.dtype, p.pe_dim));
  KILN_RETURN_IF_ERROR(expect_at_least(op, "k_pe", args.tensor(1), 0, tokens, why));
  const Tensor& cache = args.tensor(2);
  KILN_RETURN_IF_ERROR(expect_defined(op, "kv_cache", cache));
  const bool ds_mla = p.kv == KvCacheDtype::kFp8DsMla;
  // fp8_ds_mla addresses its 656-byte entries in bytes: a raw or e4m3 1-byte tensor.
  KILN_RETURN_IF_ERROR(expect_cache_dtype(op, "kv_cache", cache, p.dtype, p.kv));
  KILN_RETURN_IF_ERROR(expect_rank(op, "kv_cache", cache, {3}));
  KILN_RETURN_IF_ERROR(expect_size(op, "kv_cache", cache, 1, p.block_size));
  KILN_RETURN_IF_ERROR(
      expect_size(op, "kv_cache", cache, 2, ds_mla ? kDsMlaEntryBytes : p.kv_lora_rank + p.pe_dim));
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, "kv_cache", cache));
  return expect_scale(op, "scale", args.tensor(4), 0);
}

// concat_and_cache_mla_rope_fused(positions, q_pe, k_pe, kv_c, cos_sin_cache, slot_mapping,
//                                 kv_cache, kv_cache_scale)
Status check_mla_rope_fused(std::string_view op, const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<MlaRopeCacheWriteParams>();
  KILN_RETURN_IF_ERROR(expect_count(op, args, 8, 0));
  const Tensor& q_pe = args.tensor(1);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "q_pe", q_pe, p.dtype, {3}));
  KILN_RETURN_IF_ERROR(expect_size(op, "q_pe", q_pe, 1, p.head_count_q));
  KILN_RETURN_IF_ERROR(expect_size(op, "q_pe", q_pe, 2, p.rot_dim));
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, "q_pe", q_pe));
  const int64_t tokens = q_pe.size(0);
  const Tensor& positions = args.tensor(0);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "positions", positions, DType::kI64, {1}));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "positions", positions));
  KILN_RETURN_IF_ERROR(
      expect_at_least(op, "positions", positions, 0, tokens, "one position per q_pe token"));
  KILN_RETURN_IF_ERROR(expect_rows2(op, "k_pe", args.tensor(2), p.dtype, p.rot_dim));
  KILN_RETURN_IF_ERROR(expect_size(op, "k_pe", args.tensor(2), 0, tokens));
  KILN_RETURN_IF_ERROR(expect_rows2(op, "kv_c", args.tensor(3), p.dtype, p.kv_lora_rank));
  KILN_RETURN_IF_ERROR(expect_size(op, "kv_c", args.tensor(3), 0, tokens));
  const Tensor& cos_sin = args.tensor(4);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "cos_sin_cache", cos_sin, p.dtype, {2}));
  KILN_RETURN_IF_ERROR(expect_size(op, "cos_sin_cache", cos_sin, 1, p.rot_dim));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "cos_sin_cache", cos_sin));
  const Tensor& slots = args.tensor(5);
  KILN_RETURN_IF_ERROR(expect_slot_mapping(op, slots));
  KILN_RETURN_IF_ERROR(expect_size(op, "slot_mapping", slots, 0, tokens));
  const Tensor& cache = args.tensor(6);
  KILN_RETURN_IF_ERROR(expect_defined(op, "kv_cache", cache));
  KILN_RETURN_IF_ERROR(expect_cache_dtype(op, "kv_cache", cache, p.dtype, p.kv));
  KILN_RETURN_IF_ERROR(expect_rank(op, "kv_cache", cache, {3}));
  KILN_RETURN_IF_ERROR(expect_size(op, "kv_cache", cache, 1, p.block_size));
  KILN_RETURN_IF_ERROR(expect_size(op, "kv_cache", cache, 2, p.kv_lora_rank + p.rot_dim));
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, "kv_cache", cache));
  const Tensor& scale = args.tensor(7);
  KILN_RETURN_IF_ERROR(expect_scale(op, "kv_cache_scale", scale, 0));
  if (scale.numel() == 1) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument 'kv_cache_scale' ({}) must hold exactly one "
                  "element",
                  op, scale.describe()));
}

// convert_fp8(dst_cache, src_cache; scale): flat dense buffers of the same element count.
Status check_convert_fp8(std::string_view op, const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ConvertFp8Params>();
  KILN_RETURN_IF_ERROR(expect_count(op, args, 2, 1));
  const Tensor& dst = args.tensor(0);
  const Tensor& src = args.tensor(1);
  for (int i = 0; i < 2; ++i) {
    const char* arg = i == 0 ? "dst_cache" : "src_cache";
    const Tensor& t = args.tensor(i);
    const DType dtype = i == 0 ? p.dst : p.src;
    KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
    // The fp8 side may be a raw uint8 buffer (vLLM's caches are uint8).
    if (!(dtype == DType::kFp8E4m3 && t.dtype() == DType::kU8)) {
      KILN_RETURN_IF_ERROR(expect_dtype(op, arg, t, dtype));
    }
    KILN_RETURN_IF_ERROR(expect_contiguous(op, arg, t));
  }
  if (dst.numel() != src.numel()) {
    return invalid_argument(
        fmt::format("{}: dst_cache ({}) and src_cache ({}) must have the same "
                    "number of elements",
                    op, dst.describe(), src.describe()));
  }
  return Status::ok();
}

// A paged source cache [NB, BS, entry...] whose entry (dims 2..) is dense and holds at least
// `width` elements; blocks and entries at their own strides.
Status expect_paged_source(std::string_view op, std::string_view arg, const Tensor& t,
                           int64_t block_size, int64_t width, bool exact_width) {
  if (t.dim() < 3) {
    return invalid_argument(
        fmt::format("{}: argument '{}' has rank {} ({}); expected [blocks, "
                    "block_size, entry...] (rank 3 or more)",
                    op, arg, t.dim(), t.describe()));
  }
  KILN_RETURN_IF_ERROR(expect_size(op, arg, t, 1, block_size));
  int64_t entry = 1;
  for (int d = t.dim() - 1; d >= 2; --d) {
    if (t.size(d) != 1 && t.stride(d) != entry) {
      return invalid_argument(
          fmt::format("{}: argument '{}' ({}) must have a dense entry (dims 2.. contiguous)", op,
                      arg, t.describe()));
    }
    entry *= t.size(d);
  }
  if (exact_width ? entry == width : entry >= width) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' ({}) has entries of {} elements; expected "
                  "{}{}",
                  op, arg, t.describe(), entry, exact_width ? "" : "at least ", width));
}

// gather_and_maybe_dequant_cache(src_cache, dst, block_table, cu_seq_lens, token_to_seq,
//                                scale, seq_starts?; num_tokens)
Status check_gather_and_maybe_dequant(std::string_view op, const OpSpec& spec,
                                      const KernelArgs& args) {
  const auto& p = spec.get<GatherCacheParams>();
  KILN_RETURN_IF_ERROR(expect_count(op, args, 7, 1));
  const Tensor& src = args.tensor(0);
  KILN_RETURN_IF_ERROR(expect_defined(op, "src_cache", src));
  KILN_RETURN_IF_ERROR(expect_cache_dtype(op, "src_cache", src, p.dtype, p.kv));
  KILN_RETURN_IF_ERROR(expect_paged_source(op, "src_cache", src, p.block_size, p.head_dim, false));
  const double num_tokens = args.scalar(0);
  KILN_RETURN_IF_ERROR(expect_count_scalar(op, "num_tokens", num_tokens));
  const int64_t tokens = int64_t(num_tokens);
  const Tensor& dst = args.tensor(1);
  KILN_RETURN_IF_ERROR(expect_rows2(op, "dst", dst, p.dtype, p.head_dim));
  KILN_RETURN_IF_ERROR(expect_at_least(op, "dst", dst, 0, tokens, "one row per num_tokens"));
  const Tensor& table = args.tensor(2);
  KILN_RETURN_IF_ERROR(expect_index(op, "block_table", table, 2));
  const int64_t batch = table.size(0);
  const Tensor& cu = args.tensor(3);
  KILN_RETURN_IF_ERROR(expect_index(op, "cu_seq_lens", cu, 1));
  KILN_RETURN_IF_ERROR(
      expect_at_least(op, "cu_seq_lens", cu, 0, batch + 1, "one more entry than block_table rows"));
  const Tensor& token_to_seq = args.tensor(4);
  KILN_RETURN_IF_ERROR(expect_index(op, "token_to_seq", token_to_seq, 1));
  KILN_RETURN_IF_ERROR(expect_at_least(op, "token_to_seq", token_to_seq, 0, tokens,
                                       "one request index per num_tokens"));
  KILN_RETURN_IF_ERROR(expect_scale(op, "scale", args.tensor(5), 0));
  const Tensor& seq_starts = args.tensor(6);
  if (!seq_starts.defined()) return Status::ok();
  KILN_RETURN_IF_ERROR(expect_index(op, "seq_starts", seq_starts, 1));
  return expect_at_least(op, "seq_starts", seq_starts, 0, batch, "one entry per block_table row");
}

// cp_gather_cache(src_cache, dst, block_table, cu_seq_lens, seq_starts?; batch_size)
Status check_cp_gather_cache(std::string_view op, const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<CpGatherCacheParams>();
  KILN_RETURN_IF_ERROR(expect_count(op, args, 5, 1));
  const Tensor& src = args.tensor(0);
  KILN_RETURN_IF_ERROR(expect_defined(op, "src_cache", src));
  KILN_RETURN_IF_ERROR(expect_dtype(op, "src_cache", src, p.dtype));
  KILN_RETURN_IF_ERROR(expect_paged_source(op, "src_cache", src, p.block_size, p.entry_size, true));
  const Tensor& dst = args.tensor(1);
  KILN_RETURN_IF_ERROR(expect_defined(op, "dst", dst));
  KILN_RETURN_IF_ERROR(expect_dtype(op, "dst", dst, p.dtype));
  if (dst.dim() < 2) {
    return invalid_argument(
        fmt::format("{}: argument 'dst' has rank {} ({}); expected [rows, "
                    "entry...] (rank 2 or more)",
                    op, dst.dim(), dst.describe()));
  }
  int64_t row = 1;
  for (int d = dst.dim() - 1; d >= 1; --d) {
    if (dst.size(d) != 1 && dst.stride(d) != row) {
      return invalid_argument(
          fmt::format("{}: argument 'dst' ({}) must have dense rows (dims 1.. contiguous)", op,
                      dst.describe()));
    }
    row *= dst.size(d);
  }
  if (row < p.entry_size) {
    return invalid_argument(
        fmt::format("{}: argument 'dst' ({}) has rows of {} elements; expected "
                    "at least entry_size={}",
                    op, dst.describe(), row, p.entry_size));
  }
  const double batch_size = args.scalar(0);
  KILN_RETURN_IF_ERROR(expect_count_scalar(op, "batch_size", batch_size));
  const int64_t batch = int64_t(batch_size);
  const Tensor& table = args.tensor(2);
  KILN_RETURN_IF_ERROR(expect_index(op, "block_table", table, 2));
  KILN_RETURN_IF_ERROR(
      expect_at_least(op, "block_table", table, 0, batch, "one row per request (batch_size)"));
  const Tensor& cu = args.tensor(3);
  KILN_RETURN_IF_ERROR(expect_index(op, "cu_seq_lens", cu, 1));
  KILN_RETURN_IF_ERROR(expect_at_least(op, "cu_seq_lens", cu, 0, batch + 1, "batch_size + 1"));
  const Tensor& seq_starts = args.tensor(4);
  if (!seq_starts.defined()) return Status::ok();
  KILN_RETURN_IF_ERROR(expect_index(op, "seq_starts", seq_starts, 1));
  return expect_at_least(op, "seq_starts", seq_starts, 0, batch, "one entry per request");
}

// cp_gather_and_upconvert_fp8_kv_cache(src_cache, dst, block_table, seq_lens,
//                                      workspace_starts; batch_size)
Status check_upconvert_gather(std::string_view op, const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<UpconvertGatherParams>();
  KILN_RETURN_IF_ERROR(expect_count(op, args, 5, 1));
  const Tensor& src = args.tensor(0);
  KILN_RETURN_IF_ERROR(expect_defined(op, "src_cache", src));
  // vLLM accepts all three 1-byte types and always decodes e4m3.
  const DType d = src.dtype();
  if (d != DType::kU8 && d != DType::kFp8E4m3 && d != DType::kFp8E5m2) {
    return invalid_argument(
        fmt::format("{}: argument 'src_cache' has dtype {}; expected u8, "
                    "fp8_e4m3 or fp8_e5m2 (656-byte fp8_ds_mla entries)",
                    op, dtype_name(d)));
  }
  KILN_RETURN_IF_ERROR(expect_rank(op, "src_cache", src, {3}));
  KILN_RETURN_IF_ERROR(expect_size(op, "src_cache", src, 1, p.block_size));
  KILN_RETURN_IF_ERROR(expect_size(op, "src_cache", src, 2, kDsMlaEntryBytes));
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, "src_cache", src));
  KILN_RETURN_IF_ERROR(expect_rows2(op, "dst", args.tensor(1), DType::kBF16, kUpconvertRow));
  const double batch_size = args.scalar(0);
  KILN_RETURN_IF_ERROR(expect_count_scalar(op, "batch_size", batch_size));
  const int64_t batch = int64_t(batch_size);
  const Tensor& table = args.tensor(2);
  KILN_RETURN_IF_ERROR(expect_index(op, "block_table", table, 2));
  KILN_RETURN_IF_ERROR(
      expect_at_least(op, "block_table", table, 0, batch, "one row per request (batch_size)"));
  KILN_RETURN_IF_ERROR(expect_index(op, "seq_lens", args.tensor(3), 1));
  KILN_RETURN_IF_ERROR(expect_at_least(op, "seq_lens", args.tensor(3), 0, batch, "batch_size"));
  KILN_RETURN_IF_ERROR(expect_index(op, "workspace_starts", args.tensor(4), 1));
  return expect_at_least(op, "workspace_starts", args.tensor(4), 0, batch, "batch_size");
}

// indexer_k_quant_and_cache(k, kv_cache, slot_mapping)
Status check_indexer_quant(std::string_view op, const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<IndexerQuantParams>();
  KILN_RETURN_IF_ERROR(expect_count(op, args, 3, 0));
  const Tensor& k = args.tensor(0);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "k", k, p.dtype, {2}));
  KILN_RETURN_IF_ERROR(expect_size(op, "k", k, 1, p.head_dim));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "k", k));
  const Tensor& cache = args.tensor(1);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "kv_cache", cache, DType::kU8, {3}));
  KILN_RETURN_IF_ERROR(expect_size(op, "kv_cache", cache, 1, p.block_size));
  // D e4m3 codes plus one fp32 scale per group of quant_block elements.
  KILN_RETURN_IF_ERROR(
      expect_size(op, "kv_cache", cache, 2, p.head_dim + 4 * (p.head_dim / p.quant_block)));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "kv_cache", cache));
  const Tensor& slots = args.tensor(2);
  KILN_RETURN_IF_ERROR(expect_slot_mapping(op, slots));
  return expect_at_least(op, "slot_mapping", slots, 0, k.size(0), "one slot per row of k");
}

// cp_gather_indexer_k_quant_cache(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)
Status check_indexer_gather(std::string_view op, const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<IndexerGatherParams>();
  KILN_RETURN_IF_ERROR(expect_count(op, args, 5, 0));
  const int64_t groups = p.head_dim / p.quant_block;
  const Tensor& cache = args.tensor(0);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "kv_cache", cache, DType::kU8, {3}));
  KILN_RETURN_IF_ERROR(expect_size(op, "kv_cache", cache, 1, p.block_size));
  KILN_RETURN_IF_ERROR(expect_size(op, "kv_cache", cache, 2, p.head_dim + 4 * groups));
  // A block is one flat region of block_size * C bytes; only the block stride is free.
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, "kv_cache", cache));
  KILN_RETURN_IF_ERROR(expect_stride(op, "kv_cache", cache, 1, p.head_dim + 4 * groups,
                                     "a block is one dense region of block_size entries"));
  const Tensor& dst_k = args.tensor(1);
  KILN_RETURN_IF_ERROR(expect_defined(op, "dst_k", dst_k));
  if (dst_k.dtype() != DType::kU8 && dst_k.dtype() != DType::kFp8E4m3) {
    return invalid_argument(
        fmt::format("{}: argument 'dst_k' has dtype {}; expected u8 or "
                    "fp8_e4m3",
                    op, dtype_name(dst_k.dtype())));
  }
  KILN_RETURN_IF_ERROR(expect_rank(op, "dst_k", dst_k, {2}));
  KILN_RETURN_IF_ERROR(expect_size(op, "dst_k", dst_k, 1, p.head_dim));
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, "dst_k", dst_k));
  const Tensor& dst_scale = args.tensor(2);
  // The scales travel as raw bytes: a float32 [N, groups] tensor would make vLLM derive
  // quant_block wrongly, so kiln asks for the uint8 view vLLM's callers pass.
  KILN_RETURN_IF_ERROR(expect_tensor(op, "dst_scale", dst_scale, DType::kU8, {2}));
  KILN_RETURN_IF_ERROR(expect_size(op, "dst_scale", dst_scale, 0, dst_k.size(0)));
  KILN_RETURN_IF_ERROR(expect_size(op, "dst_scale", dst_scale, 1, 4 * groups));
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, "dst_scale", dst_scale));
  const Tensor& table = args.tensor(3);
  KILN_RETURN_IF_ERROR(expect_index(op, "block_table", table, 2));
  // vLLM reads row r at r * size(1).
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "block_table", table));
  const Tensor& cu = args.tensor(4);
  KILN_RETURN_IF_ERROR(expect_index(op, "cu_seq_lens", cu, 1));
  return expect_size(op, "cu_seq_lens", cu, 0, table.size(0) + 1);
}

// rotary_embedding_and_cache_flash(positions, query, key, value, cos_sin_cache, key_cache,
// value_cache, slot_mapping, k_scale, v_scale): query [T, Hq, D] (token and head strides
// honoured), key/value rows as reshape_and_cache_flash's (key: at least T rows, value: at least
// one per slot), T = positions.size(0) >= slot_mapping.size(0).
Status check_rope_and_cache_flash(std::string_view op, const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<RopeFlashCacheWriteParams>();
  KILN_RETURN_IF_ERROR(expect_count(op, args, 10, 0));
  const Tensor& positions = args.tensor(0);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "positions", positions, DType::kI64, {1}));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "positions", positions));
  const int64_t tokens = positions.size(0);
  const Tensor& query = args.tensor(1);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "query", query, p.dtype, {3}));
  KILN_RETURN_IF_ERROR(expect_size(op, "query", query, 1, p.head_count_q));
  KILN_RETURN_IF_ERROR(expect_size(op, "query", query, 2, p.head_size));
  KILN_RETURN_IF_ERROR(expect_unit_last_stride(op, "query", query));
  KILN_RETURN_IF_ERROR(expect_at_least(op, "query", query, 0, tokens, "one row per position"));
  const Tensor& slots = args.tensor(7);
  KILN_RETURN_IF_ERROR(expect_slot_mapping(op, slots));
  if (slots.size(0) > tokens) {
    return invalid_argument(fmt::format(
        "{}: argument 'slot_mapping' ({}) has more entries than positions ({}); expected at most "
        "one slot per rotated token",
        op, slots.describe(), positions.describe()));
  }
  KILN_RETURN_IF_ERROR(
      expect_kv_rows(op, "key", args.tensor(2), p.dtype, p.head_count_kv, p.head_size, tokens));
  KILN_RETURN_IF_ERROR(expect_kv_rows(op, "value", args.tensor(3), p.dtype, p.head_count_kv,
                                      p.head_size, slots.size(0)));
  const Tensor& cos_sin = args.tensor(4);
  KILN_RETURN_IF_ERROR(expect_tensor(op, "cos_sin_cache", cos_sin, p.dtype, {2}));
  KILN_RETURN_IF_ERROR(expect_size(op, "cos_sin_cache", cos_sin, 1, p.rot_dim));
  KILN_RETURN_IF_ERROR(expect_contiguous(op, "cos_sin_cache", cos_sin));
  const FlashCacheWriteParams flash{p.dtype,      p.kv,     p.head_count_kv, p.head_size,
                                    p.block_size, p.layout, p.per_head_scale};
  return expect_flash_caches(op, flash, args.tensor(5), args.tensor(6), args.tensor(8),
                             args.tensor(9));
}

}  // namespace

Status check_request_rows(std::string_view op, const Tensor& cu, int64_t r, int64_t dst_rows,
                          int64_t& begin, int64_t& end) {
  const auto* values = cu.data_as<const int32_t>();
  begin = values[r * cu.stride(0)];
  end = values[(r + 1) * cu.stride(0)];
  if (begin < 0 || end < begin || end > dst_rows) {
    return invalid_argument(fmt::format(
        "{}: argument 'cu_seq_lens' gives request {} the rows [{}, {}) (cu_seq_lens[{}] = {}, "
        "cu_seq_lens[{}] = {}); rows must be non-decreasing and inside the {} destination rows",
        op, r, begin, end, r, begin, r + 1, end, dst_rows));
  }
  return Status::ok();
}

Status check_block_table_entry(std::string_view op, const Tensor& table, int64_t num_blocks,
                               int64_t block_size, int64_t r, int64_t pos, int64_t& block) {
  const int64_t column = pos / block_size;
  if (column >= table.size(1)) {
    return invalid_argument(fmt::format(
        "{}: argument 'block_table' ({}) has no column {} for position {} of request {} "
        "(block_size {})",
        op, table.describe(), column, pos, r, block_size));
  }
  block = table.data_as<const int32_t>()[r * table.stride(0) + column * table.stride(1)];
  if (block < 0 || block >= num_blocks) {
    return invalid_argument(fmt::format(
        "{}: argument 'block_table' has block_table[{}, {}] = {}, outside the cache blocks "
        "[0, {})",
        op, r, column, block, num_blocks));
  }
  return Status::ok();
}

Status check_slots(std::string_view op, const Tensor& slots, int64_t tokens, int64_t num_blocks,
                   int64_t block_size) {
  const int64_t capacity = num_blocks * block_size;
  const auto* s = slots.data_as<const int64_t>();
  const int64_t stride = slots.stride(0);
  for (int64_t t = 0; t < tokens; ++t) {
    if (s[t * stride] >= capacity) {
      return invalid_argument(fmt::format(
          "{}: argument 'slot_mapping' has slot_mapping[{}] = {}, outside the cache (num_blocks "
          "{} x block_size {} = {} slots; negative slots are padding)",
          op, t, s[t * stride], num_blocks, block_size, capacity));
    }
  }
  return Status::ok();
}

Status check_block_mapping(std::string_view op, const Tensor& mapping, int64_t src_blocks,
                           int64_t dst_blocks) {
  const int64_t blocks[2] = {src_blocks, dst_blocks};
  const auto* m = mapping.data_as<const int64_t>();
  for (int64_t i = 0; i < mapping.size(0); ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      const int64_t id = m[i * mapping.stride(0) + j * mapping.stride(1)];
      if (id < 0 || id >= blocks[j]) {
        return invalid_argument(fmt::format(
            "{}: argument 'block_mapping' has block_mapping[{}, {}] = {}, outside the {} blocks "
            "[0, {})",
            op, i, j, id, j == 0 ? "src" : "dst", blocks[j]));
      }
    }
  }
  return Status::ok();
}

Status check_seq_start(std::string_view op, const Tensor& seq_starts, int64_t r, int64_t& start) {
  start = seq_starts.defined() ? i32_at(seq_starts, r) : 0;
  if (start < 0) {
    return invalid_argument(fmt::format(
        "{}: argument 'seq_starts' has seq_starts[{}] = {}; offsets must be >= 0", op, r, start));
  }
  return Status::ok();
}

Status check_token_position(std::string_view op, const Tensor& cu, const Tensor& token_to_seq,
                            const Tensor& seq_starts, int64_t batch, int64_t tok, int64_t& r,
                            int64_t& pos) {
  r = i32_at(token_to_seq, tok);
  pos = -1;
  if (r < 0 || r >= batch) {
    return invalid_argument(fmt::format(
        "{}: argument 'token_to_seq' has token_to_seq[{}] = {}, outside the requests [0, {})", op,
        tok, r, batch));
  }
  if (tok >= i32_at(cu, r + 1)) return Status::ok();  // past the request's end: skipped
  const int64_t start = seq_starts.defined() ? i32_at(seq_starts, r) : 0;
  pos = tok - i32_at(cu, r) + start;
  if (pos < 0) {
    return invalid_argument(
        fmt::format("{}: argument 'cu_seq_lens' puts token {} at position {} of request {} "
                    "(cu_seq_lens[{}] = {}, seq_starts {}): positions must be >= 0",
                    op, tok, pos, r, r, i32_at(cu, r), start));
  }
  return Status::ok();
}

Status check_workspace_starts(std::string_view op, const Tensor& starts, int64_t batch,
                              int64_t rows) {
  if (rows > 0 && batch == 0) {
    return invalid_argument(
        fmt::format("{}: argument 'batch_size' is 0 but dst has {} rows to fill", op, rows));
  }
  for (int64_t r = 1; r < batch; ++r) {
    if (i32_at(starts, r) < i32_at(starts, r - 1)) {
      return invalid_argument(fmt::format(
          "{}: argument 'workspace_starts' decreases at index {} ({} after {}); it must be "
          "non-decreasing",
          op, r, i32_at(starts, r), i32_at(starts, r - 1)));
    }
  }
  return Status::ok();
}

Status check_workspace_row(std::string_view op, const Tensor& starts, int64_t batch, int64_t o,
                           int64_t& r, int64_t& pos) {
  while (r + 1 < batch && i32_at(starts, r + 1) <= o) ++r;
  pos = o - i32_at(starts, r);
  if (pos < 0) {
    return invalid_argument(
        fmt::format("{}: argument 'workspace_starts' leaves row {} before the first request "
                    "(workspace_starts[0] = {}); it must start at 0",
                    op, o, i32_at(starts, 0)));
  }
  return Status::ok();
}

Status check_cache_args(const OpSpec& spec, const KernelArgs& args) {
  const std::string_view op = op_name(spec.op);
  switch (spec.op) {
    case OpKind::kSwapBlocks: return check_swap_blocks(op, spec, args);
    case OpKind::kReshapeAndCache: return check_reshape_and_cache(op, spec, args);
    case OpKind::kReshapeAndCacheFlash: return check_reshape_and_cache_flash(op, spec, args);
    case OpKind::kConcatAndCacheMla: return check_concat_and_cache_mla(op, spec, args);
    case OpKind::kConcatAndCacheMlaRopeFused: return check_mla_rope_fused(op, spec, args);
    case OpKind::kConvertFp8: return check_convert_fp8(op, spec, args);
    case OpKind::kGatherAndMaybeDequantCache: return check_gather_and_maybe_dequant(op, spec, args);
    case OpKind::kCpGatherCache: return check_cp_gather_cache(op, spec, args);
    case OpKind::kCpGatherAndUpconvertFp8KvCache: return check_upconvert_gather(op, spec, args);
    case OpKind::kIndexerKQuantAndCache: return check_indexer_quant(op, spec, args);
    case OpKind::kCpGatherIndexerKQuantCache: return check_indexer_gather(op, spec, args);
    case OpKind::kRotaryEmbeddingAndCacheFlash: return check_rope_and_cache_flash(op, spec, args);
    default: return {StatusCode::kInternal, fmt::format("{} is not in the cache family", op)};
  }
}

}  // namespace jit::ir
