// rotary_embedding, in place (spec: norm_act_cpu_ops.md §5). One block per token; the
// threads walk the (head, pair) grid of the query heads, then of the key heads.
//
//   pair j of a head: NeoX (h[j], h[E + j]), GPT-J (h[2j], h[2j + 1]), E = rot_dim / 2
//   c = rnd_T(cache[pos][j]), s = rnd_T(cache[pos][E + j])
//   x' = rnd_T(rnd_T(x·c) − rnd_T(y·s)),  y' = rnd_T(rnd_T(y·c) + rnd_T(x·s))
// Elements rot_dim..head_size-1 are not touched. Compiled with --fmad=false: a fused
// multiply-add would skip the product roundings above.
//
// Config: using T (query/key), using TC (cache); kHeadSize; kRotDim; kNeox; kHeadsQ; kHeadsKv;
// kKey; kThreads; kVec (pairs per access; divides rot_dim / 2; falls back to 1 at run time
// when a head or the cache is not aligned).
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

/// Rotates `heads` heads at `base`, W consecutive pairs per access: NeoX loads W x values at
/// j and W y values at E + j; GPT-J loads the 2W interleaved values at 2j.
template <class Cfg, int W>
KILN_FN void rotate_heads(typename Cfg::T* base, long long head_stride, int heads,
                          const typename Cfg::TC* cos_sin) {
  using T = typename Cfg::T;
  using TC = typename Cfg::TC;
  constexpr int kE = Cfg::kRotDim / 2;
  constexpr int kPacks = kE / W;
  static_assert(kE % W == 0, "the vector width must divide rot_dim / 2");
  for (int i = threadIdx.x; i < heads * kPacks; i += Cfg::kThreads) {
    const int j = (i % kPacks) * W;
    T* h = base + (i / kPacks) * head_stride;
    const Pack<TC, W> cp = load_pack<TC, W>(cos_sin + j);
    const Pack<TC, W> sp = load_pack<TC, W>(cos_sin + kE + j);
    float x[W], y[W];
    if constexpr (Cfg::kNeox) {
      const Pack<T, W> xp = load_pack<T, W>(h + j);
      const Pack<T, W> yp = load_pack<T, W>(h + kE + j);
#pragma unroll
      for (int k = 0; k < W; ++k) x[k] = to_float(xp.v[k]), y[k] = to_float(yp.v[k]);
    } else {
      const Pack<T, 2 * W> p = load_pack<T, 2 * W>(h + 2 * j);
#pragma unroll
      for (int k = 0; k < W; ++k) x[k] = to_float(p.v[2 * k]), y[k] = to_float(p.v[2 * k + 1]);
    }
    Pack<T, W> xo, yo;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float c = rnd<T>(to_float(cp.v[k]));
      const float s = rnd<T>(to_float(sp.v[k]));
      xo.v[k] = from_float<T>(rnd<T>(x[k] * c) - rnd<T>(y[k] * s));
      yo.v[k] = from_float<T>(rnd<T>(y[k] * c) + rnd<T>(x[k] * s));
    }
    if constexpr (Cfg::kNeox) {
      store_pack<T, W>(h + j, xo);
      store_pack<T, W>(h + kE + j, yo);
    } else {
      Pack<T, 2 * W> p;
#pragma unroll
      for (int k = 0; k < W; ++k) p.v[2 * k] = xo.v[k], p.v[2 * k + 1] = yo.v[k];
      store_pack<T, 2 * W>(h + 2 * j, p);
    }
  }
}

template <class Cfg, int W>
KILN_FN void rotate_token(const RopeArgs& a, long long token) {
  using T = typename Cfg::T;
  using TC = typename Cfg::TC;
  const TC* cos_sin = static_cast<const TC*>(a.cos_sin) + a.positions[token] * Cfg::kRotDim;
  rotate_heads<Cfg, W>(static_cast<T*>(a.query) + token * a.query_token_stride, a.query_head_stride,
                       Cfg::kHeadsQ, cos_sin);
  if constexpr (Cfg::kKey) {
    rotate_heads<Cfg, W>(static_cast<T*>(a.key) + token * a.key_token_stride, a.key_head_stride,
                         Cfg::kHeadsKv, cos_sin);
  }
}

template <class Cfg>
__global__ void rotary_kernel(RopeArgs a) {
  const long long token = blockIdx.x;
  if (a.vector_ok) {
    rotate_token<Cfg, Cfg::kVec>(a, token);
  } else {
    rotate_token<Cfg, 1>(a, token);
  }
}

}  // namespace kiln
