// Op cases of the cache family: realistic calls of every KV-cache write, gather, swap and
// quantiser (spec/cache_ops.md §2, fixtures as in vLLM's tests, §3).
//
// `size` is the op's main run-time size:
//   swap_blocks                                  block pairs in block_mapping
//   reshape_and_cache(_flash), concat_and_cache_mla(_rope_fused), indexer_k_quant_and_cache,
//   rotary_embedding_and_cache_flash             tokens (slot_mapping entries, some of them -1;
//                                                the fused op rotates one more row)
//   convert_fp8                                  elements converted
//   gather_and_maybe_dequant_cache, cp_gather_cache, cp_gather_and_upconvert_fp8_kv_cache,
//   cp_gather_indexer_k_quant_cache              rows gathered, split over up to 3 requests
//
// Every output is fully initialised (random cache contents, sentinel rows in over-allocated
// destinations), so the comparison of the whole tensor also proves what was left untouched.
// Tolerances (spec/testing.md): writes, copies, gathers and dequantisation bit-exact;
// quantisation bit-exact with NaN codes compared as "is NaN" (fp8 caches are typed fp8 so that
// compare() decodes them). The 1-byte caches that mix codes with fp32 scales (fp8_ds_mla, the
// indexer) are uint8 and compared byte for byte, so their adversarial inputs are finite: a NaN
// code's byte is not specified (§1.4). The rope-fused op's rotated q_pe/k_pe and its cache use
// the rotary tolerance (one ulp of the qk type; one fp8 step for an fp8 cache).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "ir/numeric.h"
#include "tests/harness/op_case_families.h"

namespace jit::test {
namespace {

using ir::KvCacheDtype;

// Bytes of the fp8_ds_mla entry and the offsets of its scales and rope values (§2.4.b).
constexpr int64_t kDsMlaEntryBytes = 656;
constexpr int64_t kDsMlaScaleOffset = 512;
constexpr int64_t kDsMlaRopeOffset = 528;
// Rows of the cos/sin table of the rope-fused case (positions are drawn below it).
constexpr int64_t kMaxPosition = 64;
// Requests a gather case splits its rows into.
constexpr int64_t kMaxRequests = 3;

// The cache tensor's dtype: the input type in auto mode, else the fp8 type of the mode.
DType cache_dtype(DType dtype, KvCacheDtype kv) {
  if (kv == KvCacheDtype::kAuto) return dtype;
  return kv == KvCacheDtype::kFp8E5m2 ? DType::kFp8E5m2 : DType::kFp8E4m3;
}

// Fills any supported dtype by `kind`. Float activations use the kind directly; fp8 tensors
// get valid codes (adversarial: saturated, subnormal and NaN codes via the float specials);
// integer tensors get bytes or small values.
void fill_values(HostTensor& t, InputKind kind, uint64_t seed) {
  const DType dtype = t.dtype();
  if (dtype == DType::kU8) return fill_uniform(t, seed, 0, 256);
  if (dtype == DType::kI8 || dtype == DType::kI32) return fill_small_int(t, seed, -100, 100);
  if (dtype == DType::kFp8E4m3 || dtype == DType::kFp8E5m2) {
    if (kind != InputKind::kAdversarial) return fill_normal(t, seed);
    HostTensor wide = HostTensor::zeros(DType::kF32, t.sizes());
    fill_adversarial(wide, seed);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, wide.get(i));
    return;
  }
  switch (kind) {
    case InputKind::kNormal: fill_normal(t, seed); break;
    case InputKind::kSmallInt: fill_small_int(t, seed); break;
    case InputKind::kEqual: fill_equal(t, 0.75); break;
    case InputKind::kAdversarial: fill_adversarial(t, seed); break;
  }
}

// fill_values with the non-finite adversarial values replaced by +-largest finite: for the
// byte-compared caches, where a NaN code (or inf / inf) would have an unspecified byte.
void fill_finite(HostTensor& t, InputKind kind, uint64_t seed) {
  fill_values(t, kind, seed);
  if (kind != InputKind::kAdversarial) return;
  // Largest finite value of the dtype: f16 65504, bf16 (2 - 2^-7) * 2^127, f32 FLT_MAX.
  double max = double(std::numeric_limits<float>::max());
  if (t.dtype() == DType::kF16) max = 65504.0;
  if (t.dtype() == DType::kBF16) max = std::ldexp(2.0 - std::ldexp(1.0, -7), 127);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.get(i);
    if (!std::isfinite(v)) t.set(i, v < 0 ? -max : max);
  }
}

// vLLM's test scale amax / 64 over the finite values (1 when all are zero); adversarial inputs
// get 0.5 so that the huge values saturate and the tiny ones underflow.
float amax_scale(const std::vector<const HostTensor*>& ts, InputKind kind) {
  if (kind == InputKind::kAdversarial) return 0.5f;
  double amax = 0;
  for (const HostTensor* t : ts) {
    for (int64_t i = 0; i < t->numel(); ++i) {
      const double v = std::fabs(t->get(i));
      if (std::isfinite(v)) amax = std::max(amax, v);
    }
  }
  return amax > 0 ? float(amax / 64) : 1.0f;
}

HostTensor scale_tensor(std::vector<float> values) {
  return HostTensor::from_values(DType::kF32, {int64_t(values.size())},
                                 std::vector<double>(values.begin(), values.end()));
}

// 0 .. n-1 in a random order.
std::vector<int64_t> shuffled(int64_t n, std::mt19937_64& rng) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

// Blocks for `tokens` written tokens: about half the slots stay free, plus two spare blocks.
int64_t blocks_for(int64_t tokens, int64_t block_size) {
  return (2 * tokens + block_size - 1) / block_size + 2;
}

// Distinct random slots of [0, num_blocks * block_size); about one token in eight is padding
// (-1), never the first, so that every call writes something.
HostTensor slot_mapping(int64_t tokens, int64_t num_blocks, int64_t block_size,
                        std::mt19937_64& rng) {
  const std::vector<int64_t> all = shuffled(num_blocks * block_size, rng);
  std::uniform_int_distribution<int> pad(0, 7);
  HostTensor slots = HostTensor::zeros(DType::kI64, {tokens});
  for (int64_t t = 0; t < tokens; ++t)
    slots.set(t, t > 0 && pad(rng) == 0 ? -1 : double(all[size_t(t)]));
  return slots;
}

// Splits `rows` into up to kMaxRequests request lengths (a request may be empty).
std::vector<int64_t> split_rows(int64_t rows, std::mt19937_64& rng) {
  const int64_t requests = std::clamp<int64_t>(rows, 1, kMaxRequests);
  std::uniform_int_distribution<int64_t> cut(0, rows);
  std::vector<int64_t> cuts{0, rows};
  for (int64_t r = 1; r < requests; ++r) cuts.push_back(cut(rng));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int64_t> lengths;
  for (size_t r = 0; r + 1 < cuts.size(); ++r) lengths.push_back(cuts[r + 1] - cuts[r]);
  return lengths;
}

// Prefix sums [0, l0, l0 + l1, ...] as int32.
HostTensor prefix_sums(const std::vector<int64_t>& lengths) {
  HostTensor cu = HostTensor::zeros(DType::kI32, {int64_t(lengths.size()) + 1});
  int64_t sum = 0;
  for (size_t r = 0; r < lengths.size(); ++r) cu.set(int64_t(r) + 1, double(sum += lengths[r]));
  return cu;
}

// Block tables: request r covers positions [0, extents[r]); its blocks are distinct entries
// of a shuffled permutation of all blocks (two spare blocks stay unused); unused columns hold
// 0, as vLLM pads them.
struct Paging {
  HostTensor table;
  int64_t num_blocks = 0;
};
Paging shuffled_blocks(const std::vector<int64_t>& extents, int64_t block_size,
                       std::mt19937_64& rng) {
  int64_t total = 0;
  int64_t columns = 1;
  for (int64_t e : extents) {
    const int64_t needed = (e + block_size - 1) / block_size;
    total += needed;
    columns = std::max(columns, needed + 1);
  }
  Paging paging;
  paging.num_blocks = total + 2;
  const std::vector<int64_t> perm = shuffled(paging.num_blocks, rng);
  paging.table = HostTensor::zeros(DType::kI32, {int64_t(extents.size()), columns});
  size_t next = 0;
  for (size_t r = 0; r < extents.size(); ++r) {
    for (int64_t c = 0; c * block_size < extents[r]; ++c) {
      paging.table.set(int64_t(r) * columns + c, double(perm[next++]));
    }
  }
  return paging;
}

// ---- per op --------------------------------------------------------------------------------

OpCase swap_blocks_case(const ir::SwapBlocksParams& p, int64_t pairs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Two spare blocks on each side; distinct destinations so the result is order-independent.
  const int64_t blocks = pairs + 2;
  HostTensor src = HostTensor::zeros(DType::kU8, {blocks, p.block_bytes});
  HostTensor dst = HostTensor::zeros(DType::kU8, {blocks, p.block_bytes});
  fill_values(src, InputKind::kNormal, seed + 1);
  fill_values(dst, InputKind::kNormal, seed + 2);
  const std::vector<int64_t> src_ids = shuffled(blocks, rng);
  const std::vector<int64_t> dst_ids = shuffled(blocks, rng);
  HostTensor mapping = HostTensor::zeros(DType::kI64, {pairs, 2});
  for (int64_t i = 0; i < pairs; ++i) {
    mapping.set(2 * i, double(src_ids[size_t(i)]));
    mapping.set(2 * i + 1, double(dst_ids[size_t(i)]));
  }
  OpCase c;
  c.tensors = {src, dst, mapping};
  c.names = {"src", "dst", "block_mapping"};
  c.outputs = {1};
  return c;
}

// key/value as vLLM's tests make them: views [T_in, H, D] of qkv [T_in, 3, H, D], with one
// extra CUDA-graph row beyond the slot_mapping.
HostTensor kv_rows(DType dtype, int64_t tokens, int64_t heads, int64_t dim, InputKind kind,
                   uint64_t seed) {
  HostTensor t = HostTensor::strided(dtype, {tokens + 1, heads, dim}, {3 * heads * dim, dim, 1});
  fill_values(t, kind, seed);
  return t;
}

OpCase reshape_and_cache_case(const ir::PagedCacheWriteParams& p, int64_t tokens, InputKind kind,
                              uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t blocks = blocks_for(tokens, p.block_size);
  const int64_t x = ir::paged_key_x(p.dtype, p.kv);
  const int64_t h = p.head_count_kv;
  const int64_t d = p.head_size;
  HostTensor key = kv_rows(p.dtype, tokens, h, d, kind, seed + 1);
  HostTensor value = kv_rows(p.dtype, tokens, h, d, kind, seed + 2);
  const DType cdt = cache_dtype(p.dtype, p.kv);
  HostTensor key_cache = HostTensor::zeros(cdt, {blocks, h, d / x, p.block_size, x});
  HostTensor value_cache = HostTensor::zeros(cdt, {blocks, h, d, p.block_size});
  fill_values(key_cache, InputKind::kNormal, seed + 3);
  fill_values(value_cache, InputKind::kNormal, seed + 4);
  OpCase c;
  c.tensors = {key,
               value,
               key_cache,
               value_cache,
               slot_mapping(tokens, blocks, p.block_size, rng),
               scale_tensor({amax_scale({&key}, kind)}),
               scale_tensor({amax_scale({&value}, kind)})};
  c.names = {"key", "value", "key_cache", "value_cache", "slot_mapping", "k_scale", "v_scale"};
  c.outputs = {2, 3};
  return c;
}

// Per-head scale: amax over the head's elements / 64 (0.5 for adversarial inputs).
std::vector<float> head_scales(const HostTensor& t, int64_t heads, int64_t dim, InputKind kind) {
  std::vector<float> scales(size_t(heads), 0.5f);
  if (kind == InputKind::kAdversarial) return scales;
  for (int64_t h = 0; h < heads; ++h) {
    double amax = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      if ((i / dim) % heads == h && std::isfinite(t.get(i)))
        amax = std::max(amax, std::fabs(t.get(i)));
    }
    scales[size_t(h)] = amax > 0 ? float(amax / 64) : 1.0f;
  }
  return scales;
}

OpCase reshape_and_cache_flash_case(const ir::FlashCacheWriteParams& p, int64_t tokens,
                                    InputKind kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t blocks = blocks_for(tokens, p.block_size);
  const int64_t h = p.head_count_kv;
  const int64_t d = p.head_size;
  const int64_t bs = p.block_size;
  HostTensor key = kv_rows(p.dtype, tokens, h, d, kind, seed + 1);
  HostTensor value = kv_rows(p.dtype, tokens, h, d, kind, seed + 2);
  // kv[:, 0] and kv[:, 1] of vLLM's [NB, 2, BS, H, D] allocation (HND: [NB, 2, H, BS, D]
  // permuted back): block stride 2 * BS * H * D.
  const std::vector<int64_t> strides = p.layout == ir::CacheLayout::kNhd
                                           ? std::vector<int64_t>{2 * bs * h * d, h * d, d, 1}
                                           : std::vector<int64_t>{2 * bs * h * d, d, bs * d, 1};
  const DType cdt = cache_dtype(p.dtype, p.kv);
  HostTensor key_cache = HostTensor::strided(cdt, {blocks, bs, h, d}, strides);
  HostTensor value_cache = HostTensor::strided(cdt, {blocks, bs, h, d}, strides);
  fill_values(key_cache, InputKind::kNormal, seed + 3);
  fill_values(value_cache, InputKind::kNormal, seed + 4);
  OpCase c;
  c.tensors = {key, value, key_cache, value_cache, slot_mapping(tokens, blocks, bs, rng)};
  if (p.per_head_scale) {
    c.tensors.push_back(scale_tensor(head_scales(key, h, d, kind)));
    c.tensors.push_back(scale_tensor(head_scales(value, h, d, kind)));
  } else {
    c.tensors.push_back(scale_tensor({amax_scale({&key}, kind)}));
    c.tensors.push_back(scale_tensor({amax_scale({&value}, kind)}));
  }
  c.names = {"key", "value", "key_cache", "value_cache", "slot_mapping", "k_scale", "v_scale"};
  c.outputs = {2, 3};
  return c;
}

// cos/sin rows as vLLM's RotaryEmbedding builds them (base 10000), in `dtype`.
HostTensor cos_sin_table(DType dtype, int64_t rot) {
  HostTensor cos_sin = HostTensor::zeros(dtype, {kMaxPosition, rot});
  const int64_t half = rot / 2;
  for (int64_t pos = 0; pos < kMaxPosition; ++pos) {
    for (int64_t j = 0; j < half; ++j) {
      const double angle = double(pos) * std::pow(10000.0, -2.0 * double(j) / double(rot));
      cos_sin.set(pos * rot + j, std::cos(angle));
      cos_sin.set(pos * rot + half + j, std::sin(angle));
    }
  }
  return cos_sin;
}

// rotary_embedding_and_cache_flash: the reshape_and_cache_flash case (its key/value rows are
// views of a qkv projection with one extra row) plus T = tokens + 1 positions (the extra row
// is rotated but has no slot; none for an empty call), a query view [T, Hq, D] of its own q/k/v
// projection, and the cos/sin table.
OpCase rope_and_cache_flash_case(const ir::RopeFlashCacheWriteParams& p, int64_t tokens,
                                 InputKind kind, uint64_t seed) {
  const ir::FlashCacheWriteParams flash{p.dtype,      p.kv,     p.head_count_kv, p.head_size,
                                        p.block_size, p.layout, p.per_head_scale};
  OpCase f = reshape_and_cache_flash_case(flash, tokens, kind, seed);
  const int64_t rows = tokens == 0 ? 0 : tokens + 1;
  const int64_t d = p.head_size;
  const int64_t row_stride = (p.head_count_q + 2 * p.head_count_kv) * d;
  HostTensor query = HostTensor::strided(p.dtype, {rows, p.head_count_q, d}, {row_stride, d, 1});
  fill_values(query, kind, seed + 7);
  HostTensor positions = HostTensor::zeros(DType::kI64, {rows});
  fill_uniform(positions, seed + 8, 0, kMaxPosition);
  OpCase c;
  c.tensors = {
      positions,    query,        f.tensors[0], f.tensors[1], cos_sin_table(p.dtype, p.rot_dim),
      f.tensors[2], f.tensors[3], f.tensors[4], f.tensors[5], f.tensors[6]};
  c.names = {"positions", "query",       "key",          "value",   "cos_sin_cache",
             "key_cache", "value_cache", "slot_mapping", "k_scale", "v_scale"};
  c.outputs = {1, 2, 5, 6};
  const Tolerance rope = tolerance_for(OpKind::kRotaryEmbedding, p.dtype);
  // A one-ulp difference in a rotated key can move its fp8 code by one step.
  const Tolerance cache = p.kv == KvCacheDtype::kAuto ? rope : Tolerance::ulp(1);
  c.tolerances = {rope, rope, cache, cache};
  return c;
}

OpCase concat_and_cache_mla_case(const ir::MlaCacheWriteParams& p, int64_t tokens, InputKind kind,
                                 uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t blocks = blocks_for(tokens, p.block_size);
  const int64_t width = p.kv_lora_rank + p.pe_dim;
  const bool ds_mla = p.kv == KvCacheDtype::kFp8DsMla;
  // kv_c and k_pe as the two splits of one [T_in, R + P] projection (row stride R + P).
  HostTensor kv_c = HostTensor::row_strided(p.dtype, {tokens + 1, p.kv_lora_rank}, width);
  HostTensor k_pe = HostTensor::row_strided(p.dtype, {tokens + 1, p.pe_dim}, width);
  HostTensor cache;
  if (ds_mla) {
    fill_finite(kv_c, kind, seed + 1);
    fill_finite(k_pe, kind, seed + 2);
    cache = HostTensor::zeros(DType::kU8, {blocks, p.block_size, kDsMlaEntryBytes});
  } else {
    fill_values(kv_c, kind, seed + 1);
    fill_values(k_pe, kind, seed + 2);
    cache = HostTensor::zeros(cache_dtype(p.dtype, p.kv), {blocks, p.block_size, width});
  }
  fill_values(cache, InputKind::kNormal, seed + 3);
  OpCase c;
  c.tensors = {kv_c, k_pe, cache, slot_mapping(tokens, blocks, p.block_size, rng),
               scale_tensor({amax_scale({&kv_c, &k_pe}, kind)})};
  c.names = {"kv_c", "k_pe", "kv_cache", "slot_mapping", "scale"};
  c.outputs = {2};
  return c;
}

OpCase mla_rope_fused_case(const ir::MlaRopeCacheWriteParams& p, int64_t tokens, InputKind kind,
                           uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t blocks = blocks_for(tokens, p.block_size);
  const int64_t rot = p.rot_dim;
  const int64_t rank = p.kv_lora_rank;
  // The strided model views of vLLM's fusion test: q_pe = q[..., nope:] of q [T, Hq, nope + rot]
  // and k_pe the trailing split of [T, R + rot] (kv_c its leading split).
  constexpr int64_t kNope = 16;
  HostTensor q_pe = HostTensor::strided(p.dtype, {tokens, p.head_count_q, rot},
                                        {p.head_count_q * (kNope + rot), kNope + rot, 1}, kNope);
  HostTensor k_pe = HostTensor::strided(p.dtype, {tokens, rot}, {rank + rot, 1}, rank);
  HostTensor kv_c = HostTensor::row_strided(p.dtype, {tokens, rank}, rank + rot);
  fill_values(q_pe, kind, seed + 1);
  fill_values(k_pe, kind, seed + 2);
  fill_values(kv_c, kind, seed + 3);
  // One extra position (CUDA-graph padding), positions below the table's rows.
  HostTensor positions = HostTensor::zeros(DType::kI64, {tokens + 1});
  fill_uniform(positions, seed + 4, 0, kMaxPosition);
  // cos/sin rows as vLLM's RotaryEmbedding builds them (base 10000), rounded to the qk type.
  HostTensor cos_sin = HostTensor::zeros(p.dtype, {kMaxPosition, rot});
  const int64_t half = rot / 2;
  for (int64_t pos = 0; pos < kMaxPosition; ++pos) {
    for (int64_t j = 0; j < half; ++j) {
      const double angle = double(pos) * std::pow(10000.0, -2.0 * double(j) / double(rot));
      cos_sin.set(pos * rot + j, std::cos(angle));
      cos_sin.set(pos * rot + half + j, std::sin(angle));
    }
  }
  HostTensor cache =
      HostTensor::zeros(cache_dtype(p.dtype, p.kv), {blocks, p.block_size, rank + rot});
  fill_values(cache, InputKind::kNormal, seed + 5);
  OpCase c;
  c.tensors = {positions, q_pe,
               k_pe,      kv_c,
               cos_sin,   slot_mapping(tokens, blocks, p.block_size, rng),
               cache,     scale_tensor({amax_scale({&kv_c, &k_pe}, kind)})};
  c.names = {"positions",     "q_pe",         "k_pe",     "kv_c",
             "cos_sin_cache", "slot_mapping", "kv_cache", "kv_cache_scale"};
  c.outputs = {1, 2, 6};
  const Tolerance rope = tolerance_for(OpKind::kRotaryEmbedding, p.dtype);
  // A one-ulp difference in a rotated k_pe value can move its fp8 code by one step.
  c.tolerances = {rope, rope, p.kv == KvCacheDtype::kAuto ? rope : Tolerance::ulp(1)};
  return c;
}

OpCase convert_fp8_case(const ir::ConvertFp8Params& p, int64_t elements, InputKind kind,
                        uint64_t seed) {
  HostTensor src = HostTensor::zeros(p.src, {elements});
  fill_values(src, kind, seed + 1);
  HostTensor dst = HostTensor::zeros(p.dst, {elements});
  fill_values(dst, InputKind::kNormal, seed + 2);
  // Quantise: amax / 64 as the cache writers' tests; dequantise: vLLM's test scale 0.1.
  const double scale = is_float_activation(p.src) ? double(amax_scale({&src}, kind)) : 0.1;
  OpCase c;
  c.tensors = {dst, src};
  c.names = {"dst_cache", "src_cache"};
  c.scalars = {scale};
  c.outputs = {0};
  return c;
}

OpCase gather_and_maybe_dequant_case(const ir::GatherCacheParams& p, int64_t rows, InputKind kind,
                                     uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> lengths = split_rows(rows, rng);
  const int64_t batch = int64_t(lengths.size());
  // Logical start offsets inside each request, not block aligned.
  HostTensor seq_starts = HostTensor::zeros(DType::kI32, {batch});
  std::uniform_int_distribution<int64_t> start(0, 2 * p.block_size);
  std::vector<int64_t> extents;
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t s = start(rng);
    seq_starts.set(r, double(s));
    extents.push_back(s + lengths[size_t(r)]);
  }
  Paging paging = shuffled_blocks(extents, p.block_size, rng);
  HostTensor token_to_seq = HostTensor::zeros(DType::kI32, {rows});
  for (int64_t r = 0, tok = 0; r < batch; ++r) {
    for (int64_t i = 0; i < lengths[size_t(r)]; ++i) token_to_seq.set(tok++, double(r));
  }
  HostTensor src =
      HostTensor::zeros(cache_dtype(p.dtype, p.kv), {paging.num_blocks, p.block_size, p.head_dim});
  fill_values(src, kind, seed + 1);
  // Two rows beyond num_tokens stay as they are.
  HostTensor dst = HostTensor::zeros(p.dtype, {rows + 2, p.head_dim});
  fill_values(dst, InputKind::kNormal, seed + 2);
  OpCase c;
  c.tensors = {
      src, dst, paging.table, prefix_sums(lengths), token_to_seq, scale_tensor({0.1f}), seq_starts};
  c.names = {"src_cache",    "dst",   "block_table", "cu_seq_lens",
             "token_to_seq", "scale", "seq_starts"};
  c.scalars = {double(rows)};
  c.outputs = {1};
  return c;
}

OpCase cp_gather_cache_case(const ir::CpGatherCacheParams& p, int64_t rows, InputKind kind,
                            uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> lengths = split_rows(rows, rng);
  const int64_t batch = int64_t(lengths.size());
  HostTensor seq_starts = HostTensor::zeros(DType::kI32, {batch});
  std::uniform_int_distribution<int64_t> start(0, p.block_size);
  std::vector<int64_t> extents;
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t s = start(rng);
    seq_starts.set(r, double(s));
    extents.push_back(s + lengths[size_t(r)]);
  }
  Paging paging = shuffled_blocks(extents, p.block_size, rng);
  HostTensor src = HostTensor::zeros(p.dtype, {paging.num_blocks, p.block_size, p.entry_size});
  fill_values(src, kind, seed + 1);
  HostTensor dst = HostTensor::zeros(p.dtype, {rows + 1, p.entry_size});
  fill_values(dst, InputKind::kNormal, seed + 2);
  OpCase c;
  c.tensors = {src, dst, paging.table, prefix_sums(lengths), seq_starts};
  c.names = {"src_cache", "dst", "block_table", "cu_seq_lens", "seq_starts"};
  c.scalars = {double(batch)};
  c.outputs = {1};
  return c;
}

// A cache of valid fp8_ds_mla entries: random e4m3 codes, tile scales in [0.1, 2.1], bf16
// rope values (as vLLM's upconvert test builds it by hand).
HostTensor ds_mla_cache(int64_t blocks, int64_t block_size, InputKind kind, uint64_t seed) {
  HostTensor cache = HostTensor::zeros(DType::kU8, {blocks, block_size, kDsMlaEntryBytes});
  const int64_t entries = blocks * block_size;
  HostTensor codes = HostTensor::zeros(DType::kFp8E4m3, {entries, kDsMlaScaleOffset});
  fill_values(codes, kind, seed);
  HostTensor rope =
      HostTensor::zeros(DType::kBF16, {entries, (kDsMlaEntryBytes - kDsMlaRopeOffset) / 2});
  fill_values(rope, kind, seed + 1);
  std::mt19937_64 rng(seed + 2);
  std::uniform_real_distribution<float> tile_scale(0.1f, 2.1f);
  for (int64_t e = 0; e < entries; ++e) {
    std::byte entry[kDsMlaEntryBytes];
    for (int64_t i = 0; i < kDsMlaScaleOffset; ++i) {
      entry[i] = std::byte(numeric::f32_to_fp8_e4m3(float(codes.get(e * kDsMlaScaleOffset + i))));
    }
    for (int64_t k = 0; k < 4; ++k) {
      const float s = tile_scale(rng);
      std::memcpy(entry + kDsMlaScaleOffset + 4 * k, &s, 4);
    }
    for (int64_t j = 0; j < rope.sizes()[1]; ++j) {
      const uint16_t bits = numeric::f32_to_bf16(float(rope.get(e * rope.sizes()[1] + j)));
      std::memcpy(entry + kDsMlaRopeOffset + 2 * j, &bits, 2);
    }
    for (int64_t i = 0; i < kDsMlaEntryBytes; ++i) {
      cache.set(e * kDsMlaEntryBytes + i, double(uint8_t(entry[i])));
    }
  }
  return cache;
}

OpCase upconvert_gather_case(const ir::UpconvertGatherParams& p, int64_t rows, InputKind kind,
                             uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> lengths = split_rows(rows, rng);
  const int64_t batch = int64_t(lengths.size());
  Paging paging = shuffled_blocks(lengths, p.block_size, rng);
  HostTensor seq_lens = HostTensor::zeros(DType::kI32, {batch});
  HostTensor starts = HostTensor::zeros(DType::kI32, {batch});
  for (int64_t r = 0, sum = 0; r < batch; sum += lengths[size_t(r)], ++r) {
    seq_lens.set(r, double(lengths[size_t(r)]));
    starts.set(r, double(sum));
  }
  HostTensor dst = HostTensor::zeros(DType::kBF16, {rows, 576});
  fill_values(dst, InputKind::kNormal, seed + 1);
  OpCase c;
  c.tensors = {ds_mla_cache(paging.num_blocks, p.block_size, kind, seed + 2), dst, paging.table,
               seq_lens, starts};
  c.names = {"src_cache", "dst", "block_table", "seq_lens", "workspace_starts"};
  c.scalars = {double(batch)};
  c.outputs = {1};
  return c;
}

OpCase indexer_quant_case(const ir::IndexerQuantParams& p, int64_t tokens, InputKind kind,
                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t blocks = blocks_for(tokens, p.block_size);
  HostTensor k = HostTensor::zeros(p.dtype, {tokens, p.head_dim});
  fill_finite(k, kind, seed + 1);
  HostTensor cache = HostTensor::zeros(
      DType::kU8, {blocks, p.block_size, p.head_dim + 4 * (p.head_dim / p.quant_block)});
  fill_values(cache, InputKind::kNormal, seed + 2);
  OpCase c;
  c.tensors = {k, cache, slot_mapping(tokens, blocks, p.block_size, rng)};
  c.names = {"k", "kv_cache", "slot_mapping"};
  c.outputs = {1};
  return c;
}

OpCase indexer_gather_case(const ir::IndexerGatherParams& p, int64_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> lengths = split_rows(rows, rng);
  Paging paging = shuffled_blocks(lengths, p.block_size, rng);
  const int64_t groups = p.head_dim / p.quant_block;
  HostTensor cache =
      HostTensor::zeros(DType::kU8, {paging.num_blocks, p.block_size, p.head_dim + 4 * groups});
  fill_values(cache, InputKind::kNormal, seed + 1);
  // Over-allocated destinations (vLLM's upper-bound test): the last two rows stay untouched.
  HostTensor dst_k = HostTensor::zeros(DType::kU8, {rows + 2, p.head_dim});
  HostTensor dst_scale = HostTensor::zeros(DType::kU8, {rows + 2, 4 * groups});
  fill_values(dst_k, InputKind::kNormal, seed + 2);
  fill_values(dst_scale, InputKind::kNormal, seed + 3);
  OpCase c;
  c.tensors = {cache, dst_k, dst_scale, paging.table, prefix_sums(lengths)};
  c.names = {"kv_cache", "dst_k", "dst_scale", "block_table", "cu_seq_lens"};
  c.outputs = {1, 2};
  return c;
}

}  // namespace

Result<OpCase> make_cache_case(const OpSpec& spec, int64_t size, InputKind kind, uint64_t seed) {
  if (size < 0) {
    return invalid_argument(fmt::format("{}: case size {} must be >= 0", op_name(spec.op), size));
  }
  OpCase c;
  switch (spec.op) {
    case OpKind::kSwapBlocks:
      c = swap_blocks_case(spec.get<ir::SwapBlocksParams>(), size, seed);
      break;
    case OpKind::kReshapeAndCache:
      c = reshape_and_cache_case(spec.get<ir::PagedCacheWriteParams>(), size, kind, seed);
      break;
    case OpKind::kReshapeAndCacheFlash:
      c = reshape_and_cache_flash_case(spec.get<ir::FlashCacheWriteParams>(), size, kind, seed);
      break;
    case OpKind::kConcatAndCacheMla:
      c = concat_and_cache_mla_case(spec.get<ir::MlaCacheWriteParams>(), size, kind, seed);
      break;
    case OpKind::kConcatAndCacheMlaRopeFused:
      c = mla_rope_fused_case(spec.get<ir::MlaRopeCacheWriteParams>(), size, kind, seed);
      break;
    case OpKind::kConvertFp8:
      c = convert_fp8_case(spec.get<ir::ConvertFp8Params>(), size, kind, seed);
      break;
    case OpKind::kGatherAndMaybeDequantCache:
      c = gather_and_maybe_dequant_case(spec.get<ir::GatherCacheParams>(), size, kind, seed);
      break;
    case OpKind::kCpGatherCache:
      c = cp_gather_cache_case(spec.get<ir::CpGatherCacheParams>(), size, kind, seed);
      break;
    case OpKind::kCpGatherAndUpconvertFp8KvCache:
      c = upconvert_gather_case(spec.get<ir::UpconvertGatherParams>(), size, kind, seed);
      break;
    case OpKind::kIndexerKQuantAndCache:
      c = indexer_quant_case(spec.get<ir::IndexerQuantParams>(), size, kind, seed);
      break;
    case OpKind::kCpGatherIndexerKQuantCache:
      c = indexer_gather_case(spec.get<ir::IndexerGatherParams>(), size, seed);
      break;
    case OpKind::kRotaryEmbeddingAndCacheFlash:
      c = rope_and_cache_flash_case(spec.get<ir::RopeFlashCacheWriteParams>(), size, kind, seed);
      break;
    default:
      return Status(StatusCode::kInternal,
                    fmt::format("{} is not in the cache family", op_name(spec.op)));
  }
  c.present.assign(c.tensors.size(), true);
  // Writes, copies, gathers and (de)quantisation are bit-exact (NaN codes as NaN); the
  // rope-fused case set its own.
  if (c.tolerances.empty()) c.tolerances.assign(c.outputs.size(), Tolerance::exact());
  return c;
}

std::vector<InputKind> cache_input_kinds(OpKind op) {
  switch (op) {
    // Byte copies: the values do not matter beyond their bits.
    case OpKind::kSwapBlocks:
    case OpKind::kCpGatherIndexerKQuantCache: return {InputKind::kNormal};
    // Gathers: normal values and special codes / bit patterns (NaN, inf, saturated codes).
    case OpKind::kGatherAndMaybeDequantCache:
    case OpKind::kCpGatherCache:
    case OpKind::kCpGatherAndUpconvertFp8KvCache:
      return {InputKind::kNormal, InputKind::kAdversarial};
    default:
      return {InputKind::kNormal, InputKind::kSmallInt, InputKind::kEqual, InputKind::kAdversarial};
  }
}

}  // namespace jit::test
