#include "ir/params_cpu.h"

#include <fmt/format.h>

#include "ir/params_cache.h"

namespace jit::ir {
namespace {

// Largest K and N of the GEMMs (KILN limit, as for the norm rows).
constexpr int64_t kMaxGemmDim = int64_t(1) << 24;

double ceil_div(int64_t a, int64_t b) {
  return double((a + b - 1) / b);
}

// The rules every CPU-attention op shares: dtype per ISA, head size per ISA.
//
// Head sizes (a superset of vLLM, whose generated dispatch table only has 32, 64, 80, 96, 112,
// 128, 160, 192, 224, 256 and errors on the rest):
//   vec, vec16  any head size 1..kMaxHeadSize. Their slabs are K transposed (key t of dim d at
//               d·bs + t) and V natural (t·D + d): the formulas of spec §3.3 are well defined
//               for every D, so kiln serves e.g. 40, 72, 100 or 57 with the same layout, where
//               vLLM rejects them (its HeadDimAlignment of 32 / 16 is a tiling unit of its
//               fixed kernels, not a property of the layout). Backends mask the dim tails.
//   amx         a multiple of 32: the K slab packs 32-dim chunks into 16 x 64-byte B tiles and
//               the V slab 16-dim groups; another D has no tile layout.
//   neon        a multiple of 32 (vLLM's rule): the arm backend's kernels step the head in
//               whole 16-lane chunks without a tail.
Status check_isa_dtype_head(CpuAttnIsa isa, DType dtype, int64_t head_size) {
  KILN_RETURN_IF_ERROR(check_field_float("dtype", dtype));
  if (isa == CpuAttnIsa::kAmx && dtype != DType::kBF16) {
    return invalid_argument(fmt::format(
        "dtype={} is not supported with isa=amx (allowed: bf16; AMX tiles multiply bf16 only)",
        dtype_name(dtype)));
  }
  KILN_RETURN_IF_ERROR(check_field_range("head_size", head_size, 1, kMaxHeadSize));
  const int64_t align = cpu_attn_head_alignment(isa);
  if (head_size % align != 0) {
    return invalid_argument(fmt::format(
        "head_size={} must be a multiple of {} for isa={} ({}); isa=vec and isa=vec16 accept "
        "any head size 1..{}",
        head_size, align, enum_name(isa),
        isa == CpuAttnIsa::kAmx ? "its K/V slabs are AMX tiles of 32-dim chunks"
                                : "the neon kernels step the head in whole vectors",
        kMaxHeadSize));
  }
  return Status::ok();
}

Status check_isa_block(CpuAttnIsa isa, int64_t block_size) {
  KILN_RETURN_IF_ERROR(check_field_range("block_size", block_size, 1, kMaxBlockSize));
  const int64_t align = cpu_attn_block_alignment(isa);
  if (block_size % align != 0) {
    return invalid_argument(
        fmt::format("block_size={} must be a multiple of {} for isa={} (its BlockSizeAlignment)",
                    block_size, align, enum_name(isa)));
  }
  return Status::ok();
}

// fp8 KV caches (spec §3.6): kv_cache_dtype fp8 / fp8_e4m3 / fp8_e5m2, on the x86 ISAs
// VEC and AMX only (vLLM has no fp8 kernels for VEC16 or NEON).
Status check_isa_kv(CpuAttnIsa isa, KvCacheDtype kv) {
  KILN_RETURN_IF_ERROR(check_field_kv_plain(kv));
  if (kv != KvCacheDtype::kAuto && isa != CpuAttnIsa::kVec && isa != CpuAttnIsa::kAmx) {
    return invalid_argument(
        fmt::format("kv={} is not supported with isa={} (fp8 KV caches exist for isa=vec and "
                    "isa=amx only{}); use kv=auto",
                    enum_name(kv), enum_name(isa),
                    isa == CpuAttnIsa::kVec16
                        ? ", and vLLM picks isa=vec16 for head sizes that are multiples of 16 "
                          "but not of 32"
                        : ""));
  }
  return Status::ok();
}

}  // namespace

DType cpu_attn_cache_dtype(DType dtype, KvCacheDtype kv) {
  switch (kv) {
    case KvCacheDtype::kAuto: return dtype;
    case KvCacheDtype::kFp8E5m2: return DType::kFp8E5m2;
    default: return DType::kFp8E4m3;
  }
}

int64_t cpu_attn_block_alignment(CpuAttnIsa isa) {
  return isa == CpuAttnIsa::kVec16 ? 16 : 32;
}

int64_t cpu_attn_head_alignment(CpuAttnIsa isa) {
  return isa == CpuAttnIsa::kAmx || isa == CpuAttnIsa::kNeon ? 32 : 1;
}

Status validate(OpKind, const CpuAttnSchedulerParams& p) {
  KILN_RETURN_IF_ERROR(check_isa_dtype_head(p.isa, p.dtype, p.head_size));
  return check_head_counts(p.head_count_q, p.head_count_kv);
}

Status validate(OpKind, const CpuAttnCacheWriteParams& p) {
  KILN_RETURN_IF_ERROR(check_isa_dtype_head(p.isa, p.dtype, p.head_size));
  KILN_RETURN_IF_ERROR(check_field_range("heads_kv", p.head_count_kv, 1, kMaxHeads));
  KILN_RETURN_IF_ERROR(check_isa_block(p.isa, p.block_size));
  KILN_RETURN_IF_ERROR(check_isa_kv(p.isa, p.kv));
  return check_block_extent(p.head_count_kv, p.head_size, p.block_size,
                            cache_element_size(p.dtype, p.kv));
}

Status validate(OpKind, const CpuAttentionParams& p) {
  KILN_RETURN_IF_ERROR(check_isa_dtype_head(p.isa, p.dtype, p.head_size));
  KILN_RETURN_IF_ERROR(check_isa_block(p.isa, p.block_size));
  KILN_RETURN_IF_ERROR(check_head_counts(p.head_count_q, p.head_count_kv));
  KILN_RETURN_IF_ERROR(check_isa_kv(p.isa, p.kv));
  return check_block_extent(p.head_count_kv, p.head_size, p.block_size,
                            cache_element_size(p.dtype, p.kv));
}

Status validate(OpKind, const GemmParams& p) {
  KILN_RETURN_IF_ERROR(check_field_float("dtype", p.dtype));
  KILN_RETURN_IF_ERROR(check_field_range("k", p.k, 1, kMaxGemmDim));
  return check_field_range("n", p.n, 1, kMaxGemmDim);
}

Status validate(OpKind, const ScaledGemmParams& p) {
  KILN_RETURN_IF_ERROR(check_field_float("out_dtype", p.out_dtype));
  KILN_RETURN_IF_ERROR(check_field_range("k", p.k, 1, kMaxGemmDim));
  return check_field_range("n", p.n, 1, kMaxGemmDim);
}

Estimate estimate(OpKind, const CpuAttnSchedulerParams&, const ProblemSize& size) {
  // seq_lens [B] and query_start_loc [B + 1]; the blob written is the backend's business.
  return {4.0 * double(2 * size.batch + 1), 0.0};
}

Estimate estimate(OpKind, const CpuAttnCacheWriteParams& p, const ProblemSize& size) {
  const double elems = double(size.tokens) * double(p.head_count_kv) * double(p.head_size);
  // key and value read, both caches written (fp8: one byte per element and one divide each),
  // one int64 slot per token.
  const double per_elem = double(dtype_size(p.dtype) + cache_element_size(p.dtype, p.kv));
  const bool fp8 = p.kv != KvCacheDtype::kAuto;
  return {2.0 * elems * per_elem + 8.0 * double(size.tokens), fp8 ? 2.0 * elems : 0.0};
}

Estimate estimate(OpKind, const CpuAttentionParams& p, const ProblemSize& size) {
  const double requests = double(size.batch);
  const double context = double(size.context);
  const double tokens = double(size.tokens);
  const double d = double(p.head_size);
  const double hq = double(p.head_count_q);
  const double elem = double(dtype_size(p.dtype));
  const double kv_elem = double(cache_element_size(p.dtype, p.kv));  // 1 for fp8 codes
  double bytes =
      requests * context * double(p.head_count_kv) * d * 2.0 * kv_elem +
      2.0 * tokens * hq * d * elem + 4.0 * requests * ceil_div(size.context, p.block_size) +
      4.0 * double(2 * size.batch + 1) + (p.alibi ? 4.0 * hq : 0.0) + (p.sinks ? 2.0 * hq : 0.0);
  // (query, key) pairs attended per request: all of them, or, causally, query i of q sees the
  // first context - q + i + 1 keys (the window only trims further).
  const double q = requests > 0 ? tokens / requests : 0.0;
  double pairs = q * context;
  if (p.causal && q <= context) pairs -= q * (q - 1.0) / 2.0;
  // Q.K and P.V: one multiply-add each per (pair, head, dim).
  return {bytes, 4.0 * requests * pairs * hq * d};
}

Estimate estimate(OpKind op, const GemmParams& p, const ProblemSize& size) {
  const double e = double(dtype_size(p.dtype));
  const double k = double(p.k);
  const double n = double(p.n);
  if (op == OpKind::kCreateOnednnMm) return {2.0 * k * n * e, 0.0};  // reorder b once
  const double m = double(size.tokens);
  return {(m * k + k * n + m * n) * e, 2.0 * m * n * k};
}

Estimate estimate(OpKind op, const ScaledGemmParams& p, const ProblemSize& size) {
  const double k = double(p.k);
  const double n = double(p.n);
  const double b_scales = p.per_channel ? 4.0 * n : 4.0;
  if (op == OpKind::kCreateOnednnScaledMm) return {2.0 * k * n + b_scales, 0.0};
  const double m = double(size.tokens);
  // int8 a and b, c of out_dtype, a_scales per token or one, zero points (+ azp_adj per column
  // in the dynamic epilogue).
  double bytes = m * k + k * n + m * n * double(dtype_size(p.out_dtype)) + b_scales +
                 (p.dynamic ? 4.0 * m : 4.0);
  if (p.azp) bytes += p.dynamic ? 4.0 * m + 4.0 * n : 4.0;
  return {bytes, 2.0 * m * n * k};
}

}  // namespace jit::ir
