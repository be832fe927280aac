// merge_attn_states (spec: attention_ops.md §4). One block per (token, head); the threads walk
// head_size in vectors.
//
//   lp, ls = the prefix/suffix LSE, +-inf both meaning "empty" (-inf)
//   M = max(lp, ls);  a = e^(lp - M), b = e^(ls - M), Z = a + b
//   out = x · (a/Z) + y · (b/Z),  lse = log Z + M
// Both empty (M = -inf): out = prefix, lse = -inf. A token at or past prefill_tokens_with_context
// has no prefix: out = suffix and lse = the suffix LSE unchanged. fp8 output:
// code = e4m3(clamp(v · (1/scale), ±448)).
//
// Config: using T (inputs), using O (output element: T or u8 codes); kFp8Out; kHeads;
// kHeadSize; kOutputLse; kThreads; kVec.
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

template <int N>
struct MergeWidth {
  static constexpr int value = N;
};

template <class Cfg>
KILN_FN typename Cfg::O merge_out(float v, float inv_scale) {
  if constexpr (Cfg::kFp8Out) {
    // clamp keeps NaN (comparisons with NaN are false).
    v = v * inv_scale;
    v = v > 448.0f ? 448.0f : (v < -448.0f ? -448.0f : v);
    return typename Cfg::O(f32_to_fp8_e4m3(v));
  } else {
    return from_float<typename Cfg::O>(v);
  }
}

KILN_FN float empty_if_inf(float lse) {
  // +inf means "empty" (FlashAttention-2 for zero-length sequences), like -inf.
  return (lse == 1.0f / 0.0f || lse == -1.0f / 0.0f) ? -1.0f / 0.0f : lse;
}

template <class Cfg>
__global__ void merge_attn_states_kernel(MergeArgs a) {
  using T = typename Cfg::T;
  using O = typename Cfg::O;
  constexpr int kH = Cfg::kHeads;
  const long long token = blockIdx.x / kH;
  const int head = blockIdx.x % kH;
  const long long lse_index = head * a.tokens + token;
  const T* x =
      static_cast<const T*>(a.prefix) + token * a.prefix_strides[0] + head * a.prefix_strides[1];
  const T* y =
      static_cast<const T*>(a.suffix) + token * a.suffix_strides[0] + head * a.suffix_strides[1];
  O* out = static_cast<O*>(a.output) + token * a.output_strides[0] + head * a.output_strides[1];
  const float inv_scale = Cfg::kFp8Out ? 1.0f / a.output_scale[0] : 1.0f;
  const float raw_s = a.suffix_lse[lse_index];
  // copy: 0 merges x·wx + y·wy; 1 copies x (both empty); 2 copies y (no prefix).
  int copy = 0;
  float wx = 0.0f, wy = 0.0f, lse;
  if (double(token) >= a.with_context) {
    copy = 2, lse = raw_s;
  } else {
    const float lp = empty_if_inf(a.prefix_lse[lse_index]);
    const float ls = empty_if_inf(raw_s);
    const float m = fmaxf(lp, ls);  // a NaN operand is ignored if the other is not
    if (m == -1.0f / 0.0f) {
      copy = 1, lse = m;
    } else {
      const float ea = expf(lp - m);
      const float eb = expf(ls - m);
      const float z = ea + eb;
      wx = ea / z, wy = eb / z, lse = logf(z) + m;
    }
  }
  auto body = [&](auto width) {
    constexpr int W = decltype(width)::value;
    for (int d = threadIdx.x * W; d < Cfg::kHeadSize; d += Cfg::kThreads * W) {
      const Pack<T, W> xv = load_pack<T, W>(x + d);
      const Pack<T, W> yv = load_pack<T, W>(y + d);
      Pack<O, W> o;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        // The copies read only their side: an inf/NaN in the other input must not leak in.
        float v;
        if (copy == 1) {
          v = to_float(xv.v[k]);
        } else if (copy == 2) {
          v = to_float(yv.v[k]);
        } else {
          v = to_float(xv.v[k]) * wx + to_float(yv.v[k]) * wy;
        }
        o.v[k] = merge_out<Cfg>(v, inv_scale);
      }
      store_pack<O, W>(out + d, o);
    }
  };
  if (a.vector_ok) {
    body(MergeWidth<Cfg::kVec>{});
  } else {
    body(MergeWidth<1>{});
  }
  if (Cfg::kOutputLse && threadIdx.x == 0) a.output_lse[lse_index] = lse;
}

}  // namespace kiln
