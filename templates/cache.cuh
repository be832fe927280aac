// KV-cache writes and the fp8 converter (spec: cache_ops.md §1-§3).
//
//   quantise     code = fp8_satfinite_rne(x / scale)    (IEEE fp32 division)
//   dequantise   out  = rnd_T(decode(code) · scale)      (fp32 product)
//   kv=auto      a bit copy of the input element
//
// reshape_and_cache_flash: cache[b, o, h, d] through the cache's strides (NHD or HND), b/o from
// the slot; reshape_and_cache: key_cache[b, h, d/x, o, d%x], value_cache[b, h, d, o] with
// x = 16 / cache element size. One block per token; a negative slot is padding (skipped). The
// host checks every slot against the cache before the launch (checked mode).
//
// Config: using T (input), using C (cache element: T, or u8 codes); kKv (0 auto, 1 e4m3,
// 2 e5m2); kHeads; kHeadSize; kBlockSize; kFlash; kPerHeadScale; kX (legacy key chunk);
// kThreads; kVec (elements per access along D, flash only).
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

template <int N>
struct CacheWidth {
  static constexpr int value = N;
};

/// One cache element from one input element: a copy, or the fp8 code of x / scale.
template <class T, class C, int kKv>
KILN_FN C cache_code(T x, float scale) {
  if constexpr (kKv == 0) {
    return x;
  } else if constexpr (kKv == 1) {
    return C(f32_to_fp8_e4m3(to_float(x) / scale));
  } else {
    return C(f32_to_fp8_e5m2(to_float(x) / scale));
  }
}

template <class Cfg>
__global__ void cache_write_kernel(CacheWriteArgs a) {
  using T = typename Cfg::T;
  using C = typename Cfg::C;
  constexpr int kH = Cfg::kHeads;
  constexpr int kD = Cfg::kHeadSize;
  constexpr int kBS = Cfg::kBlockSize;
  const long long token = blockIdx.x;
  const long long slot = a.slots[token];
  if (slot < 0) return;
  const long long b = slot / kBS;
  const long long o = slot % kBS;
  for (int pair = 0; pair < 2; ++pair) {
    const T* src = static_cast<const T*>(pair == 0 ? a.key : a.value) +
                   token * (pair == 0 ? a.key_stride : a.value_stride);
    C* cache = static_cast<C*>(pair == 0 ? a.key_cache : a.value_cache);
    const float* scales = pair == 0 ? a.k_scale : a.v_scale;
    if constexpr (Cfg::kFlash) {
      const long long* s = pair == 0 ? a.key_cache_strides : a.value_cache_strides;
      auto body = [&](auto width) {
        constexpr int W = decltype(width)::value;
        for (int i = threadIdx.x * W; i < kH * kD; i += Cfg::kThreads * W) {
          const int h = i / kD;
          const int d = i % kD;
          const float scale = Cfg::kKv == 0 ? 1.0f : scales[Cfg::kPerHeadScale ? h : 0];
          const Pack<T, W> x = load_pack<T, W>(src + i);
          Pack<C, W> y;
#pragma unroll
          for (int k = 0; k < W; ++k) y.v[k] = cache_code<T, C, Cfg::kKv>(x.v[k], scale);
          store_pack<C, W>(cache + b * s[0] + o * s[1] + h * s[2] + d, y);
        }
      };
      if (a.vector_ok) {
        body(CacheWidth<Cfg::kVec>{});
      } else {
        body(CacheWidth<1>{});
      }
    } else {
      const float scale = Cfg::kKv == 0 ? 1.0f : scales[0];
      constexpr int kX = Cfg::kX;
      for (int i = threadIdx.x; i < kH * kD; i += Cfg::kThreads) {
        const int h = i / kD;
        const int d = i % kD;
        const long long index = pair == 0
                                    ? (((b * kH + h) * (kD / kX) + d / kX) * kBS + o) * kX + d % kX
                                    : ((b * kH + h) * kD + d) * kBS + o;
        cache[index] = cache_code<T, C, Cfg::kKv>(src[i], scale);
      }
    }
  }
}

/// convert_fp8 over `count` elements, kVec per access, grid-stride.
template <class Cfg>
__global__ void convert_fp8_kernel(ConvertArgs a) {
  using S = typename Cfg::S;
  using D = typename Cfg::D;
  const S* src = static_cast<const S*>(a.src);
  D* dst = static_cast<D*>(a.dst);
  auto convert = [&](S x) -> D {
    if constexpr (Cfg::kQuantise) {
      return D(f32_to_fp8_e4m3(to_float(x) / a.scale));
    } else {
      return from_float<D>(fp8_e4m3_to_f32(x) * a.scale);
    }
  };
  const long long stride = (long long)gridDim.x * Cfg::kThreads;
  const long long first = (long long)blockIdx.x * Cfg::kThreads + threadIdx.x;
  constexpr int V = Cfg::kVec;
  if (a.vector_ok) {
    const long long packs = a.count / V;
    for (long long p = first; p < packs; p += stride) {
      const Pack<S, V> x = load_pack<S, V>(src + p * V);
      Pack<D, V> y;
#pragma unroll
      for (int k = 0; k < V; ++k) y.v[k] = convert(x.v[k]);
      store_pack<D, V>(dst + p * V, y);
    }
    for (long long i = packs * V + first; i < a.count; i += stride) dst[i] = convert(src[i]);
  } else {
    for (long long i = first; i < a.count; i += stride) dst[i] = convert(src[i]);
  }
}

}  // namespace kiln
