// paged_attention_v1 / v2 (spec: attention_ops.md §2, §3): one query token per sequence
// against the legacy paged cache, key [NB, Hkv, D/x, BS, x], value [NB, Hkv, D, BS].
//
// GQA-aware: one CTA serves kHeadsPerCta query heads that share one kv head, so each key and
// value element is read once per CTA and used for every query head of the group (vLLM's CTA per
// query head reads it Hq/Hkv times).
//
// Per CTA (tokens [t0, t1): the whole sequence for v1, one partition for v2), in chunks of
// kThreads tokens, an online softmax (flash-decoding inside the CTA):
//   Q·K   thread i owns token c0 + i: z_h = scale · Σ_d q_h[d] K[d] + bias_h(j)
//         (its key is D/x coalesced 16-byte loads: the slots of a block are adjacent per chunk)
//   max   m'_h = max(m_h, max_chunk z_h);  α = e^(m_h - m'_h)   (0 on the first chunk)
//   sum   s_h = s_h · α + e^(z_h - m'_h)   (each thread keeps its own share; one block sum at
//         the end: S_h = Σ_threads s_h)
//   P·V   acc_h[d] = acc_h[d] · α + Σ_t p_h[t] V[d, t], the value row read 16 bytes at a time
//         where the tokens come in aligned groups of x. With kThreads >= 2·D the threads form
//         kSlices = kThreads / D slices of D (thread i: dim i % D, slice i / D) that each sum a
//         contiguous share of the chunk's tokens, the slices' acc added once after the last
//         chunk (fewer than D threads idle, where kThreads - D did: half the CTA at D = 64 and
//         128 threads); else thread i owns dims i, i + kThreads, ...
// out_h[d] = acc_h[d] · __fdividef(1, S_h + 1e-6) (vLLM's 2-ulp reciprocal: the IEEE one has a
// slow-path subroutine whose call made ptxas spill). Products and sums are fused (fmaf, vLLM's
// FMA chains; the module builds with --fmad=false), and q and p are read four floats per
// shared load: one load per four FMAs, where a load per FMA bound the H100 (docs/cuda.md). Slots
// past the sequence are neither read as keys nor as values (the cache may hold NaN there). L <= 0:
// zeros (v1); v2 writes nothing for a partition that starts at or past L, and its reduce writes
// zeros.
//
// v2 phase 1 writes max_logits = m, exp_sums = S and tmp_out = rnd_T(out) per partition; the
// reduce (phase 1 of the args, one CTA per (query head, sequence)) computes, with n = ceil(L/P):
//   n == 1: out = tmp_out[0];  else  M = max_p m_p,  w_p = S_p · e^(m_p - M),
//   out = Σ_p tmp_out[p] · w_p / (Σ_p w_p + 1e-6)        (fp32, accurate expf, __fdividef)
//
// Config: using T (query/out), using Kv (KvAuto<T> / KvFp8<T, fp8e4m3|fp8e5m2>: the cache
// element and its dequantisation), using Bias (NoAlibi / Alibi), using Sparse (Dense /
// BlockSparse); kHeadSize, kBlockSize,
// kHeadsQ, kHeadsKv, kHeadsPerCta (divides Hq / Hkv), kPartitionSize (0: v1), kThreads.
#pragma once

#include "kiln_common.cuh"
#include "paged_attention_args.cuh"

namespace kiln {

constexpr float kFltMax = 3.402823466e+38f;

// ---- policies ----------------------------------------------------------------------------------

/// Cache holds the query type: elements are read as they are (k_scale / v_scale unused).
template <class T>
struct KvAuto {
  using C = T;
  static constexpr int kX = 16 / int(sizeof(T));  ///< elements per 16-byte key group
  KILN_FN explicit KvAuto(const float*) {}
  KILN_FN float operator()(C c) const { return to_float(c); }
};

/// fp8 cache (F = fp8e4m3 or fp8e5m2 codes as bytes): dequant(b) = rnd_T(float(fp8(b)) · s)
/// (spec §1.2: the fp8 value is exact in half, the product is rounded to the query type).
template <class T, class F>
struct KvFp8 {
  using C = u8;
  static constexpr int kX = 16;
  float scale;
  KILN_FN explicit KvFp8(const float* s) : scale(*s) {}
  KILN_FN float operator()(u8 c) const { return rnd<T>(to_float(F{c}) * scale); }
};

/// No positional bias.
struct NoAlibi {
  static KILN_FN float slope(const PagedAttentionArgs&, int) { return 0.0f; }
  static KILN_FN float bias(float, long long, long long) { return 0.0f; }
};

/// ALiBi: z_j += slope_h · (j - L + 1) (0 for the newest token, negative for older ones).
struct Alibi {
  static KILN_FN float slope(const PagedAttentionArgs& a, int head) { return a.alibi_slopes[head]; }
  static KILN_FN float bias(float slope, long long j, long long len) {
    return slope * float(j - len + 1);
  }
};

/// Dense: every token of the range is attended.
struct Dense {
  static constexpr bool kSparse = false;
  static KILN_FN long long offset(const PagedAttentionArgs&, int, int, int, int) { return 0; }
  static KILN_FN bool attended(const PagedAttentionArgs&, long long, long long, long long) {
    return true;
  }
};

/// Block-sparse (spec §2.5): sparse block kb = j / bs is attended iff (kb + off) % vert == 0 or
/// kb > qb - local, qb = (L - 1) / bs, off = (tp_rank·Hq + h)·step + 1 (step >= 0, per query
/// head) or (tp_rank·Hkv + g)·(-step) + 1 (per kv head). A masked token has z = -FLT_MAX: it
/// still adds e^(z - m) to the sum (1 when everything is masked, vLLM's QUIRK) but no value.
struct BlockSparse {
  static constexpr bool kSparse = true;
  static KILN_FN long long offset(const PagedAttentionArgs& a, int head, int kv_head, int heads_q,
                                  int heads_kv) {
    return a.sparse_step >= 0 ? (a.tp_rank * heads_q + head) * a.sparse_step + 1
                              : (a.tp_rank * heads_kv + kv_head) * -a.sparse_step + 1;
  }
  static KILN_FN bool attended(const PagedAttentionArgs& a, long long off, long long j,
                               long long len) {
    const long long qb = (len - 1) / a.sparse_block;
    const long long kb = j / a.sparse_block;
    return (kb + off) % a.sparse_vert == 0 || kb > qb - a.sparse_local;
  }
};

// sum(h) += Σ_e row_h[e] · x[e] for each of the H heads, e = 0 .. X-1 in order (fused), with
// row_h = rows + h·kStride in shared memory read four floats per load: one load per four FMAs,
// where one per FMA bound the H100 (docs/cuda.md). Rows must be 16-byte aligned, X % 4 == 0. Q·K
// (rows of q, x a key group) and P·V (rows of p, x a value group) both sum this way.
template <int H, int X, int kStride, class Sum>
KILN_FN void fma_shared_rows(const float (&x)[X], const float* rows, Sum sum) {
#pragma unroll
  for (int e = 0; e < X; e += 4) {
#pragma unroll
    for (int h = 0; h < H; ++h) {
      const Pack<float, 4> r = load_pack<float, 4>(rows + h * kStride + e);
#pragma unroll
      for (int u = 0; u < 4; ++u) sum(h) = fmaf(r.v[u], x[e + u], sum(h));
    }
  }
}

// ---- phase 0: attention over one partition ------------------------------------------------------

template <class Cfg>
KILN_FN void paged_attention_partition(const PagedAttentionArgs& a) {
  using T = typename Cfg::T;
  using Kv = typename Cfg::Kv;
  using C = typename Kv::C;
  using Bias = typename Cfg::Bias;
  using Sparse = typename Cfg::Sparse;
  constexpr int D = Cfg::kHeadSize;
  constexpr int BS = Cfg::kBlockSize;
  constexpr int H = Cfg::kHeadsPerCta;
  constexpr int N = Cfg::kThreads;
  constexpr int X = Kv::kX;
  constexpr int kGroup = Cfg::kHeadsQ / Cfg::kHeadsKv;
  constexpr int kWarps = N / kWarpSize;
  // P·V: with at least 2·D threads, the threads split into kSlices slices of D (one dim each,
  // those past kSlices·D idle), each slice summing its share of the chunk's tokens, and the
  // slices' sums are added after the last chunk; otherwise thread i owns dims i, i + N, ... (the
  // last ones masked).
  constexpr int kSlices = N >= 2 * D ? N / D : 1;
  constexpr int kDims = kSlices > 1 ? 1 : (D + N - 1) / N;  // head dims per thread in P·V
  constexpr bool kV2 = Cfg::kPartitionSize > 0;
  // P·V loads X tokens of a value row (16 bytes, the key group's width) at once when every chunk
  // starts on a block boundary (N % BS == 0, and for v2 P % BS == 0) and X divides BS: a group
  // then lies in one block at a 16-byte aligned offset (the key cache's block and head strides
  // are multiples of x, checked at launch; check_args makes the value cache's strides equal).
  // A block-sparse block holds whole cache blocks, so a group is attended or skipped as one.
  // Scalar loads otherwise.
  constexpr bool kValueGroups =
      BS % X == 0 && N % BS == 0 && (!kV2 || Cfg::kPartitionSize % BS == 0);
  constexpr int kInFlight = 4;  // value groups loaded before their FMAs
  static_assert(D % X == 0 && kGroup % H == 0, "head_size % x, group % heads per CTA");
  static_assert(X % 4 == 0, "q and p are read four floats per shared load");

  const int tid = threadIdx.x;
  const int slice = kSlices > 1 ? tid / D : 0;   // kSlices for the idle threads past kSlices·D
  const int dim0 = kSlices > 1 ? tid % D : tid;  // the thread's first P·V dim
  const int lane = tid % kWarpSize;
  const int warp = tid / kWarpSize;
  const int head0 = blockIdx.x * H;  // first query head of the CTA
  const int kv_head = head0 / kGroup;
  const long long seq = blockIdx.y;
  const int part = blockIdx.z;
  const long long len = a.seq_lens[seq];
  const long long t0 = kV2 ? (long long)part * Cfg::kPartitionSize : 0;
  const long long t1 = kV2 ? kmin<long long>(len, t0 + Cfg::kPartitionSize) : len;
  const long long row0 = seq * Cfg::kHeadsQ + head0;  // out row of head0; the H rows follow
  if (kV2 && t0 >= len) return;  // an empty partition writes nothing (the reduce skips it)
  if (len <= 0) {
    T* out = static_cast<T*>(a.out) + row0 * D;
    for (int i = tid; i < H * D; i += N) out[i] = from_float<T>(0.0f);
    return;
  }

  // 16-byte aligned rows (D % 4 == 0 as x divides D; N % 32 == 0) for the four-float loads.
  alignas(16) __shared__ float q_s[H][D];
  alignas(16) __shared__ float p_s[H][N];  // the chunk's probabilities
  __shared__ long long base_s[N];          // the chunk's token -> cache offset of (block, kv head)
  __shared__ float red_s[H][kWarps];
  const T* q = static_cast<const T*>(a.query) + seq * a.query_stride + (long long)head0 * D;
  for (int i = tid; i < H * D; i += N) q_s[i / D][i % D] = to_float(q[i]);

  const Kv k_dq(a.k_scale);
  const Kv v_dq(a.v_scale);
  const C* key_cache = static_cast<const C*>(a.key_cache);
  const C* value_cache = static_cast<const C*>(a.value_cache);
  const int* table = a.block_tables + seq * a.table_width;
  float slope[H], m[H], s_part[H], acc[H][kDims];
  long long sparse_off[H];
#pragma unroll
  for (int h = 0; h < H; ++h) {
    slope[h] = Bias::slope(a, head0 + h);
    sparse_off[h] = Sparse::offset(a, head0 + h, kv_head, Cfg::kHeadsQ, Cfg::kHeadsKv);
    m[h] = -kFltMax;
    s_part[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDims; ++i) acc[h][i] = 0.0f;
  }
  __syncthreads();  // q_s

  for (long long c0 = t0; c0 < t1; c0 += N) {
    const long long j = c0 + tid;
    const bool valid = j < t1;
    bool attend[H];  // valid and not masked by the block-sparse pattern, per head
    bool any = false;
#pragma unroll
    for (int h = 0; h < H; ++h) {
      attend[h] = valid && Sparse::attended(a, sparse_off[h], j, len);
      any = any || attend[h];
    }
    float z[H];
    if (any) {
      // Q·K of token j against every query head of the group; one key read.
      const long long base = (long long)table[j / BS] * a.block_stride + kv_head * a.head_stride;
      base_s[tid] = base;
      const C* key = key_cache + base + (j % BS) * X;
      float dot[H];
#pragma unroll
      for (int h = 0; h < H; ++h) dot[h] = 0.0f;
      for (int k = 0; k < D / X; ++k) {
        const Pack<C, X> kp = load_pack<C, X>(key + (long long)k * BS * X);
        // The key group dequantised, then dotted with each head's q (a broadcast: every
        // thread reads the same q).
        float kv[X];
#pragma unroll
        for (int e = 0; e < X; ++e) kv[e] = k_dq(kp.v[e]);
        fma_shared_rows<H, X, D>(kv, &q_s[0][k * X], [&](int h) -> float& { return dot[h]; });
      }
#pragma unroll
      for (int h = 0; h < H; ++h) {
        z[h] = attend[h] ? a.scale * dot[h] + Bias::bias(slope[h], j, len) : -kFltMax;
      }
    } else {
      base_s[tid] = -1;  // no head attends: the value is not read either
#pragma unroll
      for (int h = 0; h < H; ++h) z[h] = -kFltMax;
    }
    // The chunk maximum per head: warp butterflies, then every thread folds the warp maxima.
#pragma unroll
    for (int h = 0; h < H; ++h) {
      float v = z[h];
#pragma unroll
      for (int mask = kWarpSize / 2; mask > 0; mask /= 2) {
        v = fmaxf(v, __shfl_xor_sync(kFullMask, v, mask));
      }
      if (lane == 0) red_s[h][warp] = v;
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < H; ++h) {
      float chunk_max = red_s[h][0];
      for (int w = 1; w < kWarps; ++w) chunk_max = fmaxf(chunk_max, red_s[h][w]);
      const float m_new = fmaxf(m[h], chunk_max);
      const float alpha = expf(m[h] - m_new);
      m[h] = m_new;
      const float p = valid ? expf(z[h] - m_new) : 0.0f;
      s_part[h] = s_part[h] * alpha + p;
      p_s[h][tid] = attend[h] ? p : 0.0f;
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[h][i] *= alpha;
    }
    __syncthreads();  // p_s, base_s
    // P·V: one value read per (dim, token), used by every query head of the group. A slice
    // takes a contiguous run of whole value groups (units of X tokens, or single tokens on the
    // scalar path); the last slice also takes the tokens after the last whole group.
    const int count = int(kmin<long long>(N, t1 - c0));
    constexpr int kUnit = kValueGroups ? X : 1;
    const int units = count / kUnit;
    const int unit0 = units * slice / kSlices;
    const int unit1 = units * (slice + 1) / kSlices;
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      const int d = dim0 + i * N;
      if ((kSlices > 1 && slice >= kSlices) || (kSlices == 1 && D % N != 0 && d >= D)) continue;
      if constexpr (kValueGroups) {
        // Whole groups of X tokens of the slice's share (those past t1 are never read), loaded
        // kInFlight at a time so the loads overlap, then the rest one by one; each slice sums
        // its tokens in order (the slices' sums are added after the last chunk). p is read four
        // tokens per shared load (tg is a multiple of X, so 16-byte aligned).
        auto accumulate = [&](const Pack<C, X>& vp, int tg) {
          float v[X];
#pragma unroll
          for (int e = 0; e < X; ++e) v[e] = v_dq(vp.v[e]);
          fma_shared_rows<H, X, N>(v, &p_s[0][tg], [&](int h) -> float& { return acc[h][i]; });
        };
        auto value_group = [&](int tg) {
          return load_pack<C, X>(value_cache + base_s[tg] + (long long)d * BS + (c0 + tg) % BS);
        };
        int g = unit0;
        // Block-sparse chunks may skip groups (base_s < 0): those go one by one.
        for (; !Sparse::kSparse && g + kInFlight <= unit1; g += kInFlight) {
          Pack<C, X> vp[kInFlight];
#pragma unroll
          for (int u = 0; u < kInFlight; ++u) vp[u] = value_group((g + u) * X);
#pragma unroll
          for (int u = 0; u < kInFlight; ++u) accumulate(vp[u], (g + u) * X);
        }
        for (; g < unit1; ++g) {
          if (!Sparse::kSparse || base_s[g * X] >= 0) accumulate(value_group(g * X), g * X);
        }
      }
      // Single tokens: the scalar path's share, or the last slice's tokens after the groups.
      const int single0 = kValueGroups ? (slice == kSlices - 1 ? units * X : count) : unit0;
      const int single1 = kValueGroups ? count : unit1;
      for (int t = single0; t < single1; ++t) {
        if (Sparse::kSparse && base_s[t] < 0) continue;
        const float v = v_dq(value_cache[base_s[t] + (long long)d * BS + (c0 + t) % BS]);
#pragma unroll
        for (int h = 0; h < H; ++h) acc[h][i] = fmaf(p_s[h][t], v, acc[h][i]);
      }
    }
    __syncthreads();  // the next chunk rewrites p_s, base_s and red_s
  }

  if constexpr (kSlices > 1) {
    // Slices 1.. hand their sums to slice 0 through p_s (free after the last chunk's barrier):
    // (kSlices - 1)·H·D <= H·N floats.
    float* partial = &p_s[0][0];
    if (slice >= 1 && slice < kSlices) {
#pragma unroll
      for (int h = 0; h < H; ++h) partial[((slice - 1) * H + h) * D + dim0] = acc[h][0];
    }
    __syncthreads();
    if (slice == 0) {
      for (int s = 1; s < kSlices; ++s) {
#pragma unroll
        for (int h = 0; h < H; ++h) acc[h][0] += partial[((s - 1) * H + h) * D + dim0];
      }
    }
  }
  float total[H];
#pragma unroll
  for (int h = 0; h < H; ++h) total[h] = block_sum<N>(s_part[h]);
  T* dst = kV2 ? static_cast<T*>(a.tmp_out) : static_cast<T*>(a.out);
#pragma unroll
  for (int h = 0; h < H; ++h) {
    // v2: tmp_out[s, h, part, :]; v1: out[s, h, :].
    const long long row = kV2 ? (row0 + h) * a.partitions + part : row0 + h;
    const float inv = __fdividef(1.0f, total[h] + 1e-6f);
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      const int d = dim0 + i * N;
      if ((kSlices > 1 && slice != 0) || (kSlices == 1 && D % N != 0 && d >= D)) continue;
      dst[row * D + d] = from_float<T>(acc[h][i] * inv);
    }
    if (kV2 && tid == 0) {
      a.max_logits[(row0 + h) * a.partitions + part] = m[h];
      a.exp_sums[(row0 + h) * a.partitions + part] = total[h];
    }
  }
}

// ---- phase 1 (v2): the reduce over partitions ---------------------------------------------------

template <class Cfg>
KILN_FN void paged_attention_reduce(const PagedAttentionArgs& a) {
  using T = typename Cfg::T;
  constexpr int D = Cfg::kHeadSize;
  constexpr int N = Cfg::kThreads;
  constexpr long long P = Cfg::kPartitionSize > 0 ? Cfg::kPartitionSize : 1;
  const int tid = threadIdx.x;
  const long long seq = blockIdx.y;
  const long long row = seq * Cfg::kHeadsQ + blockIdx.x;
  const long long len = a.seq_lens[seq];
  T* out = static_cast<T*>(a.out) + row * D;
  const T* tmp = static_cast<const T*>(a.tmp_out) + row * a.partitions * D;
  if (len <= 0) {
    for (int d = tid; d < D; d += N) out[d] = from_float<T>(0.0f);
    return;
  }
  const long long n = (len + P - 1) / P;
  if (n == 1) {
    for (int d = tid; d < D; d += N) out[d] = tmp[d];
    return;
  }
  const float* max_logits = a.max_logits + row * a.partitions;
  const float* exp_sums = a.exp_sums + row * a.partitions;
  float* w_s = kiln_dynamic_shared<float>();  // [partitions]: w_p
  float max_all = max_logits[0];
  for (long long p = 1; p < n; ++p) max_all = fmaxf(max_all, max_logits[p]);
  for (long long p = tid; p < n; p += N) w_s[p] = exp_sums[p] * expf(max_logits[p] - max_all);
  __syncthreads();
  float w_sum = 0.0f;
  for (long long p = 0; p < n; ++p) w_sum += w_s[p];
  const float inv = __fdividef(1.0f, w_sum + 1e-6f);
  for (int d = tid; d < D; d += N) {
    float acc = 0.0f;
    for (long long p = 0; p < n; ++p) acc = fmaf(to_float(tmp[p * D + d]), w_s[p], acc);
    out[d] = from_float<T>(acc * inv);
  }
}

/// Both phases in one kernel (the host launches phase 0, then for v2 phase 1 on the same
/// stream), so that one compiled module serves the op.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) paged_attention_kernel(PagedAttentionArgs a) {
  if constexpr (Cfg::kPartitionSize > 0) {  // v1 has no reduce: its code is not compiled
    if (a.phase == 1) {
      paged_attention_reduce<Cfg>(a);
      return;
    }
  }
  paged_attention_partition<Cfg>(a);
}

}  // namespace kiln
