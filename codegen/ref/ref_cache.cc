// Reference KV-cache writes, gathers, swaps and quantisers, written from spec/cache_ops.md.
// Scalar, naive and explicit about every rounding step: this is the oracle the generated
// kernels are compared with.
//
// Numerics (spec §1.3, §1.4):
//   quantise     code = fp8_satfinite_rne(x / scale), x widened exactly to fp32 and the
//                division an IEEE fp32 division (no contraction: this file is compiled with
//                -ffp-contract=off);
//   dequantise   out = rnd_T(decode(code) * scale), the product in fp32;
//   auto caches  a bit copy of the input element (no conversion, NaN payloads kept).
//
// Checked mode, always on here (this is the oracle): every index read from a tensor (slots,
// block ids, block-table columns, request indices, positions) is validated in a first pass, and
// only when all are inside their ranges does a second pass write. A bad index is reported as
// kInvalidArgument naming the argument and the element, with every output untouched.
//
// KILN decisions implemented here (beyond vLLM's unchecked behaviour):
//   reshape_and_cache    every x-chunk is written (no 512-thread limit);
//   reshape_and_cache_flash  per-tensor or per-head scale chosen by the spec, any H*D;
//   indexer quantiser    per-group scales for every quant_block dividing head_dim; the ue8m0
//                        scale is the exact 2^ceil(log2(sc)) (vLLM: exp2f/log2f approximations);
//   indexer gather       rows >= cu_seq_lens[B] are untouched; scales go to dst_scale[tok, 4g];
//   gathers              request indices, negative positions, block-table columns and block
//                        ids are checked; cu_seq_lens / workspace_starts must be non-decreasing
//                        where they define row ranges.
#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codegen/ref/ref_elements.h"
#include "codegen/ref/ref_families.h"
#include "ir/check_args.h"
#include "ir/numeric.h"
#include "ir/params_cache.h"
#include "ir/params_norm_act.h"

namespace jit::codegen::ref {
namespace {

using ir::KvCacheDtype;

// fp8_ds_mla entry (spec §2.4.b): 512 e4m3 codes, 4 fp32 tile scales, 64 16-bit rope values.
constexpr int64_t kDsMlaRank = 512;
constexpr int64_t kDsMlaTile = 128;
constexpr int64_t kDsMlaScaleOffset = 512;
constexpr int64_t kDsMlaRopeOffset = 528;
constexpr int64_t kDsMlaPeDim = 64;
// max(acc, x) with a NaN x ignored, quiet or signalling (CUDA's fmaxf, the dynamic scales'
// reduction in vLLM's kernels): glibc's std::fmax returns NaN for a signalling operand (IEEE
// 754-2008 maxNum), so a group holding one would get its scale from the values after it.
float max_ignoring_nan(float acc, float x) {
  return std::isnan(x) ? acc : std::max(acc, x);
}

// Largest finite e4m3 value: the dynamic scales map a group's amax onto it.
constexpr float kE4m3Max = 448.0f;
// Floor of the indexer's amax: an all-zero group gets scale 1e-4 / 448, not 0.
constexpr float kIndexerAmaxFloor = 1e-4f;
// The bf16 row of the upconverting gather: 512 dequantised NoPE values, then 64 rope values.
constexpr int64_t kUpconvertRow = 576;

// ---- element access ------------------------------------------------------------------------

// Element `i` of a 1-D int64 tensor, through its stride.
int64_t at_i64(const Tensor& t, int64_t i) {
  return t.data_as<const int64_t>()[i * t.stride(0)];
}

// Element 0 of a float32 scale tensor (element `i` for per-head scales).
float scale_at(const Tensor& t, int64_t i = 0) {
  return t.data_as<const float>()[t.dim() == 0 ? 0 : i * t.stride(0)];
}

// code = fp8(x / scale): fp32 division, then saturating round-to-nearest-even (§1.3).
uint8_t quantise(KvCacheDtype kv, float x, float scale) {
  const float q = x / scale;
  return kv == KvCacheDtype::kFp8E5m2 ? numeric::f32_to_fp8_e5m2(q) : numeric::f32_to_fp8_e4m3(q);
}

// decode(code) * scale in fp32 (the caller rounds to the output type).
float dequantise(KvCacheDtype kv, uint8_t code, float scale) {
  const float decoded = kv == KvCacheDtype::kFp8E5m2 ? numeric::fp8_e5m2_to_f32(code)
                                                     : numeric::fp8_e4m3_to_f32(code);
  return decoded * scale;
}

// Writes one input element `src` (of `dtype`) into the cache element `dst`: a bit copy in
// auto mode, else the fp8 code of src / scale.
void put(DType dtype, KvCacheDtype kv, std::byte* dst, const std::byte* src, float scale) {
  if (kv == KvCacheDtype::kAuto) {
    std::memcpy(dst, src, dtype_size(dtype));
  } else {
    *dst = std::byte(quantise(kv, load(dtype, src, 0), scale));
  }
}

// ---- index validation ------------------------------------------------------------------------

// Where one gathered entry comes from and goes to.
struct GatherCopy {
  int64_t row = 0;     // destination row
  int64_t block = 0;   // physical cache block
  int64_t offset = 0;  // entry inside the block
};

// A block table [B, max_blocks] int32 read through its strides, with the cache's block count.
struct BlockTable {
  std::string_view op;
  const Tensor& table;
  int64_t num_blocks = 0;
  int64_t block_size = 0;

  // Resolves position `pos` (>= 0) of request `r` to its block and offset, or the error naming
  // the block-table column or entry that is outside its range.
  Status locate(int64_t r, int64_t pos, GatherCopy& copy) const {
    int64_t block = 0;
    KILN_RETURN_IF_ERROR(
        ir::check_block_table_entry(op, table, num_blocks, block_size, r, pos, block));
    copy.block = block;
    copy.offset = pos % block_size;
    return Status::ok();
  }
};

// ---- swap_blocks -----------------------------------------------------------------------------

// dst[d*B : (d+1)*B] <- src[s*B : (s+1)*B] for each mapping row (s, d), in order.
Status swap_blocks(std::string_view op, const ir::SwapBlocksParams& p, const KernelArgs& args) {
  const Tensor& src = args.tensor(0);
  const Tensor& dst = args.tensor(1);
  const Tensor& mapping = args.tensor(2);
  const int64_t block_bytes = p.block_bytes;
  const int64_t src_blocks = src.numel() * int64_t(src.element_size()) / block_bytes;
  const int64_t dst_blocks = dst.numel() * int64_t(dst.element_size()) / block_bytes;
  KILN_RETURN_IF_ERROR(ir::check_block_mapping(op, mapping, src_blocks, dst_blocks));
  const auto* m = mapping.data_as<const int64_t>();
  const auto id = [&](int64_t i, int64_t j) {
    return m[i * mapping.stride(0) + j * mapping.stride(1)];
  };
  // memmove: src and dst may be the same buffer (a block copied onto itself is a no-op).
  for (int64_t i = 0; i < mapping.size(0); ++i) {
    std::memmove(bytes(dst) + id(i, 1) * block_bytes, bytes(src) + id(i, 0) * block_bytes,
                 size_t(block_bytes));
  }
  return Status::ok();
}

// ---- reshape_and_cache, reshape_and_cache_flash ----------------------------------------------

// Address of key/value[t, h, d] of an f32/f16/bf16 [T, H, D] tensor.
const std::byte* kv_element(const Tensor& t, int64_t token, int64_t head, int64_t d) {
  const int64_t index = token * t.stride(0) + head * t.stride(1) + d * t.stride(2);
  return bytes(t) + index * int64_t(t.element_size());
}

// key_cache[b, h, d/x, o, d%x] = Q(key[t, h, d]);  value_cache[b, h, d, o] = Q(value[t, h, d])
// for every d < D (KILN: all chunks, not only the first 512).
Status reshape_and_cache(std::string_view op, const ir::PagedCacheWriteParams& p,
                         const KernelArgs& args) {
  const Tensor& key = args.tensor(0);
  const Tensor& value = args.tensor(1);
  const Tensor& key_cache = args.tensor(2);
  const Tensor& value_cache = args.tensor(3);
  const Tensor& slots = args.tensor(4);
  const int64_t tokens = slots.size(0);
  KILN_RETURN_IF_ERROR(ir::check_slots(op, slots, tokens, key_cache.size(0), p.block_size));
  const float k_scale = scale_at(args.tensor(5));
  const float v_scale = scale_at(args.tensor(6));
  const int64_t heads = p.head_count_kv;
  const int64_t dim = p.head_size;
  const int64_t bs = p.block_size;
  const int64_t x = ir::paged_key_x(p.dtype, p.kv);
  const int64_t esize = int64_t(ir::cache_element_size(p.dtype, p.kv));
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t s = at_i64(slots, t);
    if (s < 0) continue;
    const int64_t b = s / bs;
    const int64_t o = s % bs;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < dim; ++d) {
        const int64_t k_index = (((b * heads + h) * (dim / x) + d / x) * bs + o) * x + d % x;
        const int64_t v_index = ((b * heads + h) * dim + d) * bs + o;
        put(p.dtype, p.kv, bytes(key_cache) + k_index * esize, kv_element(key, t, h, d), k_scale);
        put(p.dtype, p.kv, bytes(value_cache) + v_index * esize, kv_element(value, t, h, d),
            v_scale);
      }
    }
  }
  return Status::ok();
}

// cache[b, o, h, d] (logical, through the cache's strides) = Q(src[t, h, d], scale[h or 0]).
Status reshape_and_cache_flash(std::string_view op, const ir::FlashCacheWriteParams& p,
                               const KernelArgs& args) {
  const Tensor& key_cache = args.tensor(2);
  const Tensor& slots = args.tensor(4);
  const int64_t tokens = slots.size(0);
  KILN_RETURN_IF_ERROR(ir::check_slots(op, slots, tokens, key_cache.size(0), p.block_size));
  const int64_t esize = int64_t(ir::cache_element_size(p.dtype, p.kv));
  for (int pair = 0; pair < 2; ++pair) {
    const Tensor& src = args.tensor(pair);
    const Tensor& cache = args.tensor(2 + pair);
    const Tensor& scale = args.tensor(5 + pair);
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t s = at_i64(slots, t);
      if (s < 0) continue;
      const int64_t b = s / p.block_size;
      const int64_t o = s % p.block_size;
      for (int64_t h = 0; h < p.head_count_kv; ++h) {
        const float sc = scale_at(scale, p.per_head_scale ? h : 0);
        for (int64_t d = 0; d < p.head_size; ++d) {
          const int64_t index =
              b * cache.stride(0) + o * cache.stride(1) + h * cache.stride(2) + d * cache.stride(3);
          put(p.dtype, p.kv, bytes(cache) + index * esize, kv_element(src, t, h, d), sc);
        }
      }
    }
  }
  return Status::ok();
}

// ---- concat_and_cache_mla --------------------------------------------------------------------

// Address of row `t`, element `i` of a [T, W] f32/f16/bf16 tensor.
const std::byte* row_element(const Tensor& t, int64_t row, int64_t i) {
  return bytes(t) + (row * t.stride(0) + i * t.stride(1)) * int64_t(t.element_size());
}

// The 656-byte DeepSeek entry of one token. Per 128-element tile k:
//   amax_k  = max |kv_c|  (fmaxf: NaN ignored)
//   scale_k = max(amax_k / 448, FLT_MIN)
//   code_i  = e4m3(kv_c_i / scale_k),  scale_k stored as fp32 at byte 512 + 4k,
// then the 64 rope values copied as 16-bit bits at byte 528.
void write_ds_mla_entry(DType dtype, const Tensor& kv_c, const Tensor& k_pe, int64_t t,
                        std::byte* entry) {
  for (int64_t k = 0; k < kDsMlaRank / kDsMlaTile; ++k) {
    float amax = 0.0f;
    for (int64_t i = k * kDsMlaTile; i < (k + 1) * kDsMlaTile; ++i) {
      amax = max_ignoring_nan(amax, std::fabs(load(dtype, row_element(kv_c, t, i), 0)));
    }
    const float scale = std::max(amax / kE4m3Max, FLT_MIN);
    for (int64_t i = k * kDsMlaTile; i < (k + 1) * kDsMlaTile; ++i) {
      entry[i] = std::byte(
          quantise(KvCacheDtype::kFp8E4m3, load(dtype, row_element(kv_c, t, i), 0), scale));
    }
    std::memcpy(entry + kDsMlaScaleOffset + 4 * k, &scale, 4);
  }
  for (int64_t j = 0; j < kDsMlaPeDim; ++j) {
    std::memcpy(entry + kDsMlaRopeOffset + 2 * j, row_element(k_pe, t, j), 2);
  }
}

// kv_cache[b, o] = [Q(kv_c[t]) | Q(k_pe[t])], or the fp8_ds_mla entry.
Status concat_and_cache_mla(std::string_view op, const ir::MlaCacheWriteParams& p,
                            const KernelArgs& args) {
  const Tensor& kv_c = args.tensor(0);
  const Tensor& k_pe = args.tensor(1);
  const Tensor& cache = args.tensor(2);
  const Tensor& slots = args.tensor(3);
  const int64_t tokens = slots.size(0);
  KILN_RETURN_IF_ERROR(ir::check_slots(op, slots, tokens, cache.size(0), p.block_size));
  const float scale = scale_at(args.tensor(4));
  const int64_t esize = int64_t(cache.element_size());
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t s = at_i64(slots, t);
    if (s < 0) continue;
    std::byte* entry =
        bytes(cache) +
        ((s / p.block_size) * cache.stride(0) + (s % p.block_size) * cache.stride(1)) * esize;
    if (p.kv == KvCacheDtype::kFp8DsMla) {
      write_ds_mla_entry(p.dtype, kv_c, k_pe, t, entry);
      continue;
    }
    for (int64_t i = 0; i < p.kv_lora_rank; ++i) {
      put(p.dtype, p.kv, entry + i * esize, row_element(kv_c, t, i), scale);
    }
    for (int64_t j = 0; j < p.pe_dim; ++j) {
      put(p.dtype, p.kv, entry + (p.kv_lora_rank + j) * esize, row_element(k_pe, t, j), scale);
    }
  }
  return Status::ok();
}

// ---- concat_and_cache_mla_rope_fused ---------------------------------------------------------

// Rotates the rot_dim values at `v` (element stride 1) in place with the c10 rounding of the
// qk type T: pairs (i, half+i) for NeoX, (2i, 2i+1) for GPT-J, and
//   x' = rnd(rnd(x·c) − rnd(y·s)),  y' = rnd(rnd(y·c) + rnd(x·s))   (f32: plain fp32).
void rotate(const ir::MlaRopeCacheWriteParams& p, std::byte* v, const std::byte* cos_sin) {
  const int64_t half = p.rot_dim / 2;
  const DType dt = p.dtype;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t ix = p.style == ir::RopeStyle::kNeox ? i : 2 * i;
    const int64_t iy = p.style == ir::RopeStyle::kNeox ? half + i : 2 * i + 1;
    const float c = load(dt, cos_sin, i);
    const float s = load(dt, cos_sin, half + i);
    const float x = load(dt, v, ix);
    const float y = load(dt, v, iy);
    store(dt, v, ix, rnd(dt, rnd(dt, x * c) - rnd(dt, y * s)));
    store(dt, v, iy, rnd(dt, rnd(dt, y * c) + rnd(dt, x * s)));
  }
}

// q_pe rotated for every token; for written tokens k_pe rotated and [kv_c | k_pe] cached.
Status mla_rope_fused(std::string_view op, const ir::MlaRopeCacheWriteParams& p,
                      const KernelArgs& args) {
  const Tensor& positions = args.tensor(0);
  const Tensor& q_pe = args.tensor(1);
  const Tensor& k_pe = args.tensor(2);
  const Tensor& kv_c = args.tensor(3);
  const Tensor& cos_sin = args.tensor(4);
  const Tensor& slots = args.tensor(5);
  const Tensor& cache = args.tensor(6);
  const int64_t tokens = q_pe.size(0);
  const int64_t max_position = cos_sin.size(0);
  // vLLM reads the cos/sin row of every token unchecked; the oracle refuses a position outside
  // the table before anything is rotated.
  KILN_RETURN_IF_ERROR(ir::check_positions(op, positions, tokens, max_position));
  KILN_RETURN_IF_ERROR(ir::check_slots(op, slots, tokens, cache.size(0), p.block_size));
  const float scale = scale_at(args.tensor(7));
  const int64_t qk_size = int64_t(dtype_size(p.dtype));
  const int64_t esize = int64_t(cache.element_size());
  for (int64_t t = 0; t < tokens; ++t) {
    const std::byte* row = bytes(cos_sin) + at_i64(positions, t) * p.rot_dim * qk_size;
    for (int64_t h = 0; h < p.head_count_q; ++h) {
      rotate(p, bytes(q_pe) + (t * q_pe.stride(0) + h * q_pe.stride(1)) * qk_size, row);
    }
    const int64_t s = at_i64(slots, t);
    if (s < 0) continue;  // padding: k_pe is not rotated, the cache is untouched
    rotate(p, bytes(k_pe) + t * k_pe.stride(0) * qk_size, row);
    std::byte* entry =
        bytes(cache) +
        ((s / p.block_size) * cache.stride(0) + (s % p.block_size) * cache.stride(1)) * esize;
    for (int64_t i = 0; i < p.kv_lora_rank; ++i) {
      put(p.dtype, p.kv, entry + i * esize, row_element(kv_c, t, i), scale);
    }
    // The cache gets the rotated value as rounded to T (then quantised in fp8 modes).
    for (int64_t j = 0; j < p.rot_dim; ++j) {
      put(p.dtype, p.kv, entry + (p.kv_lora_rank + j) * esize, row_element(k_pe, t, j), scale);
    }
  }
  return Status::ok();
}

// ---- convert_fp8 -----------------------------------------------------------------------------

// Element-wise over the flat buffers: quantise (float src) or dequantise (e4m3 src).
Status convert_fp8(const ir::ConvertFp8Params& p, const KernelArgs& args) {
  const Tensor& dst = args.tensor(0);
  const Tensor& src = args.tensor(1);
  // The schema's scale is a double; the kernels use it as fp32.
  const auto scale = static_cast<float>(args.scalar(0));
  const int64_t n = src.numel();
  if (is_float_activation(p.src)) {
    for (int64_t k = 0; k < n; ++k) {
      bytes(dst)[k] =
          std::byte(quantise(KvCacheDtype::kFp8E4m3, load(p.src, bytes(src), k), scale));
    }
  } else {
    for (int64_t k = 0; k < n; ++k) {
      store(p.dst, bytes(dst), k,
            dequantise(KvCacheDtype::kFp8E4m3, uint8_t(bytes(src)[k]), scale));
    }
  }
  return Status::ok();
}

// ---- gathers ---------------------------------------------------------------------------------

// Address of entry (block, offset) of a paged cache [NB, BS, entry...] with a dense entry.
const std::byte* cache_entry(const Tensor& cache, const GatherCopy& copy) {
  return bytes(cache) + (copy.block * cache.stride(0) + copy.offset * cache.stride(1)) *
                            int64_t(cache.element_size());
}

// For tok < num_tokens: r = token_to_seq[tok]; skipped when tok >= cu_seq_lens[r+1]; else
// dst[tok] = DQ(entry at position tok - cu_seq_lens[r] (+ seq_starts[r])).
Status gather_and_maybe_dequant(std::string_view op, const ir::GatherCacheParams& p,
                                const KernelArgs& args) {
  const Tensor& src = args.tensor(0);
  const Tensor& dst = args.tensor(1);
  const Tensor& cu = args.tensor(3);
  const Tensor& token_to_seq = args.tensor(4);
  const Tensor& seq_starts = args.tensor(6);
  const auto tokens = static_cast<int64_t>(args.scalar(0));
  const BlockTable table{op, args.tensor(2), src.size(0), p.block_size};
  const int64_t batch = table.table.size(0);
  std::vector<GatherCopy> plan;
  for (int64_t tok = 0; tok < tokens; ++tok) {
    int64_t r = 0;
    int64_t pos = 0;
    KILN_RETURN_IF_ERROR(
        ir::check_token_position(op, cu, token_to_seq, seq_starts, batch, tok, r, pos));
    if (pos < 0) continue;  // past its request's end: skipped
    GatherCopy copy;
    copy.row = tok;
    KILN_RETURN_IF_ERROR(table.locate(r, pos, copy));
    plan.push_back(copy);
  }
  const float scale = scale_at(args.tensor(5));
  const int64_t dst_size = int64_t(dtype_size(p.dtype));
  for (const GatherCopy& copy : plan) {
    const std::byte* entry = cache_entry(src, copy);
    std::byte* row = bytes(dst) + copy.row * dst.stride(0) * dst_size;
    if (p.kv == KvCacheDtype::kAuto) {
      std::memcpy(row, entry, size_t(p.head_dim * dst_size));
      continue;
    }
    for (int64_t i = 0; i < p.head_dim; ++i) {
      store(p.dtype, row, i, dequantise(p.kv, uint8_t(entry[i]), scale));
    }
  }
  return Status::ok();
}

// dst[cu_seq_lens[r] + p] = entry at position p (+ seq_starts[r]) of request r, a byte copy.
Status cp_gather_cache(std::string_view op, const ir::CpGatherCacheParams& p,
                       const KernelArgs& args) {
  const Tensor& src = args.tensor(0);
  const Tensor& dst = args.tensor(1);
  const Tensor& cu = args.tensor(3);
  const Tensor& seq_starts = args.tensor(4);
  const auto batch = static_cast<int64_t>(args.scalar(0));
  const BlockTable table{op, args.tensor(2), src.size(0), p.block_size};
  std::vector<GatherCopy> plan;
  for (int64_t r = 0; r < batch; ++r) {
    int64_t begin = 0;
    int64_t end = 0;
    KILN_RETURN_IF_ERROR(ir::check_request_rows(op, cu, r, dst.size(0), begin, end));
    int64_t start = 0;
    KILN_RETURN_IF_ERROR(ir::check_seq_start(op, seq_starts, r, start));
    for (int64_t row = begin; row < end; ++row) {
      GatherCopy copy;
      copy.row = row;
      KILN_RETURN_IF_ERROR(table.locate(r, row - begin + start, copy));
      plan.push_back(copy);
    }
  }
  const int64_t esize = int64_t(dtype_size(p.dtype));
  for (const GatherCopy& copy : plan) {
    std::memcpy(bytes(dst) + copy.row * dst.stride(0) * esize, cache_entry(src, copy),
                size_t(p.entry_size * esize));
  }
  return Status::ok();
}

// Row o belongs to the last request r with workspace_starts[r] <= o (r = 0 if none), position
// o - workspace_starts[r]; the row is the bf16 upconversion of that fp8_ds_mla entry.
Status upconvert_gather(std::string_view op, const ir::UpconvertGatherParams& p,
                        const KernelArgs& args) {
  const Tensor& src = args.tensor(0);
  const Tensor& dst = args.tensor(1);
  const Tensor& starts = args.tensor(4);
  const auto batch = static_cast<int64_t>(args.scalar(0));
  const int64_t rows = dst.size(0);
  const BlockTable table{op, args.tensor(2), src.size(0), p.block_size};
  KILN_RETURN_IF_ERROR(ir::check_workspace_starts(op, starts, batch, rows));
  std::vector<GatherCopy> plan;
  int64_t r = 0;
  for (int64_t o = 0; o < rows; ++o) {
    int64_t pos = 0;
    KILN_RETURN_IF_ERROR(ir::check_workspace_row(op, starts, batch, o, r, pos));
    GatherCopy copy;
    copy.row = o;
    KILN_RETURN_IF_ERROR(table.locate(r, pos, copy));
    plan.push_back(copy);
  }
  for (const GatherCopy& copy : plan) {
    const std::byte* entry = cache_entry(src, copy);
    std::byte* row = bytes(dst) + copy.row * dst.stride(0) * 2;
    float tile_scale[kDsMlaRank / kDsMlaTile];
    std::memcpy(tile_scale, entry + kDsMlaScaleOffset, sizeof(tile_scale));
    for (int64_t i = 0; i < kDsMlaRank; ++i) {
      const float v = numeric::fp8_e4m3_to_f32(uint8_t(entry[i])) * tile_scale[i / kDsMlaTile];
      store(DType::kBF16, row, i, v);
    }
    std::memcpy(row + 2 * kDsMlaRank, entry + kDsMlaRopeOffset,
                size_t(2 * (kUpconvertRow - kDsMlaRank)));
  }
  return Status::ok();
}

// ---- DeepSeek indexer ------------------------------------------------------------------------

// The smallest power of two >= sc (sc > 0): 2^ceil(log2(sc)), computed exactly; inf stays inf.
float power_of_two_ceil(float sc) {
  if (!std::isfinite(sc)) return sc;
  int exponent = 0;
  const float mantissa = std::frexp(sc, &exponent);  // sc = mantissa * 2^exponent, [0.5, 1)
  return mantissa == 0.5f ? sc : std::ldexp(1.0f, exponent);
}

// Per token and group g of quant_block elements:
//   sc = max(amax, 1e-4) / 448   (ue8m0: rounded up to a power of two)
//   codes = e4m3(x / sc) at byte o*D + g*qbs of the block, sc (fp32) at BS*D + 4*(o*G + g).
Status indexer_quant(std::string_view op, const ir::IndexerQuantParams& p, const KernelArgs& args) {
  const Tensor& k = args.tensor(0);
  const Tensor& cache = args.tensor(1);
  const Tensor& slots = args.tensor(2);
  const int64_t tokens = k.size(0);
  KILN_RETURN_IF_ERROR(ir::check_slots(op, slots, tokens, cache.size(0), p.block_size));
  const int64_t dim = p.head_dim;
  const int64_t groups = dim / p.quant_block;
  const int64_t block_bytes = p.block_size * (dim + 4 * groups);
  const int64_t k_size = int64_t(dtype_size(p.dtype));
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t s = at_i64(slots, t);
    if (s < 0) continue;
    const int64_t o = s % p.block_size;
    std::byte* block = bytes(cache) + (s / p.block_size) * block_bytes;
    const std::byte* row = bytes(k) + t * dim * k_size;
    for (int64_t g = 0; g < groups; ++g) {
      float amax = 0.0f;
      for (int64_t i = g * p.quant_block; i < (g + 1) * p.quant_block; ++i) {
        amax = max_ignoring_nan(amax, std::fabs(load(p.dtype, row, i)));
      }
      float sc = std::fmax(amax, kIndexerAmaxFloor) / kE4m3Max;
      if (p.scale_fmt == ir::ScaleFormat::kUe8m0) sc = power_of_two_ceil(sc);
      for (int64_t i = g * p.quant_block; i < (g + 1) * p.quant_block; ++i) {
        block[o * dim + i] = std::byte(quantise(KvCacheDtype::kFp8E4m3, load(p.dtype, row, i), sc));
      }
      std::memcpy(block + p.block_size * dim + 4 * (o * groups + g), &sc, 4);
    }
  }
  return Status::ok();
}

// dst_k[tok] = value bytes, dst_scale[tok] = the token's G scales (4G bytes), tok =
// cu_seq_lens[r] + p; rows outside [cu_seq_lens[0], cu_seq_lens[B]) untouched.
Status indexer_gather(std::string_view op, const ir::IndexerGatherParams& p,
                      const KernelArgs& args) {
  const Tensor& cache = args.tensor(0);
  const Tensor& dst_k = args.tensor(1);
  const Tensor& dst_scale = args.tensor(2);
  const Tensor& cu = args.tensor(4);
  const BlockTable table{op, args.tensor(3), cache.size(0), p.block_size};
  std::vector<GatherCopy> plan;
  for (int64_t r = 0; r < table.table.size(0); ++r) {
    int64_t begin = 0;
    int64_t end = 0;
    KILN_RETURN_IF_ERROR(ir::check_request_rows(op, cu, r, dst_k.size(0), begin, end));
    for (int64_t row = begin; row < end; ++row) {
      GatherCopy copy;
      copy.row = row;
      KILN_RETURN_IF_ERROR(table.locate(r, row - begin, copy));
      plan.push_back(copy);
    }
  }
  const int64_t dim = p.head_dim;
  const int64_t scale_bytes = 4 * (dim / p.quant_block);
  for (const GatherCopy& copy : plan) {
    const std::byte* block = bytes(cache) + copy.block * cache.stride(0);
    std::memcpy(bytes(dst_k) + copy.row * dst_k.stride(0), block + copy.offset * dim, size_t(dim));
    std::memcpy(bytes(dst_scale) + copy.row * dst_scale.stride(0),
                block + p.block_size * dim + copy.offset * scale_bytes, size_t(scale_bytes));
  }
  return Status::ok();
}

// ---- rotary_embedding_and_cache_flash (kiln) -------------------------------------------------

// By definition rotary_embedding(positions, query, key, cos_sin_cache) followed by
// reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
// the two oracles in sequence, after both ops' index checks (positions, then slots) so that a
// bad index writes nothing.
Status rope_and_cache_flash(std::string_view op, const ir::RopeFlashCacheWriteParams& p,
                            const KernelArgs& args) {
  const Tensor& positions = args.tensor(0);
  const Tensor& key = args.tensor(2);
  const Tensor& cos_sin = args.tensor(4);
  const Tensor& key_cache = args.tensor(5);
  const Tensor& slots = args.tensor(7);
  const int64_t tokens = positions.size(0);
  const int64_t max_position = cos_sin.size(0);
  KILN_RETURN_IF_ERROR(ir::check_positions(op, positions, tokens, max_position));
  KILN_RETURN_IF_ERROR(ir::check_slots(op, slots, slots.size(0), key_cache.size(0), p.block_size));
  const OpSpec rope = OpSpec::make(OpKind::kRotaryEmbedding,
                                   ir::RopeParams{p.dtype, p.dtype, p.head_size, p.rot_dim, p.style,
                                                  p.head_count_q, p.head_count_kv, true});
  KILN_RETURN_IF_ERROR(run_norm_act(rope, KernelArgs({positions, args.tensor(1), key, cos_sin})));
  const OpSpec flash =
      OpSpec::make(OpKind::kReshapeAndCacheFlash,
                   ir::FlashCacheWriteParams{p.dtype, p.kv, p.head_count_kv, p.head_size,
                                             p.block_size, p.layout, p.per_head_scale});
  return run_cache(flash, KernelArgs({key, args.tensor(3), key_cache, args.tensor(6), slots,
                                      args.tensor(8), args.tensor(9)}));
}

}  // namespace

bool implements_cache(OpKind op) {
  return op_family(op) == "cache";
}

Status run_cache(const OpSpec& spec, const KernelArgs& args) {
  const std::string_view op = op_name(spec.op);
  switch (spec.op) {
    case OpKind::kSwapBlocks: return swap_blocks(op, spec.get<ir::SwapBlocksParams>(), args);
    case OpKind::kReshapeAndCache:
      return reshape_and_cache(op, spec.get<ir::PagedCacheWriteParams>(), args);
    case OpKind::kReshapeAndCacheFlash:
      return reshape_and_cache_flash(op, spec.get<ir::FlashCacheWriteParams>(), args);
    case OpKind::kConcatAndCacheMla:
      return concat_and_cache_mla(op, spec.get<ir::MlaCacheWriteParams>(), args);
    case OpKind::kConcatAndCacheMlaRopeFused:
      return mla_rope_fused(op, spec.get<ir::MlaRopeCacheWriteParams>(), args);
    case OpKind::kConvertFp8: return convert_fp8(spec.get<ir::ConvertFp8Params>(), args);
    case OpKind::kGatherAndMaybeDequantCache:
      return gather_and_maybe_dequant(op, spec.get<ir::GatherCacheParams>(), args);
    case OpKind::kCpGatherCache:
      return cp_gather_cache(op, spec.get<ir::CpGatherCacheParams>(), args);
    case OpKind::kCpGatherAndUpconvertFp8KvCache:
      return upconvert_gather(op, spec.get<ir::UpconvertGatherParams>(), args);
    case OpKind::kIndexerKQuantAndCache:
      return indexer_quant(op, spec.get<ir::IndexerQuantParams>(), args);
    case OpKind::kCpGatherIndexerKQuantCache:
      return indexer_gather(op, spec.get<ir::IndexerGatherParams>(), args);
    case OpKind::kRotaryEmbeddingAndCacheFlash:
      return rope_and_cache_flash(op, spec.get<ir::RopeFlashCacheWriteParams>(), args);
    default:
      return {StatusCode::kInternal,
              fmt::format("ref: {} is not in the cache family", op_name(spec.op))};
  }
}

}  // namespace jit::codegen::ref
