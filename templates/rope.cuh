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
// kKey; kThreads.
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

template <class Cfg>
KILN_FN void rotate_heads(typename Cfg::T* base, long long head_stride, int heads,
                          const typename Cfg::TC* cos_sin) {
  using T = typename Cfg::T;
  constexpr int kE = Cfg::kRotDim / 2;
  for (int i = threadIdx.x; i < heads * kE; i += Cfg::kThreads) {
    const int head = i / kE;
    const int j = i % kE;
    T* h = base + head * head_stride;
    const int ix = Cfg::kNeox ? j : 2 * j;
    const int iy = Cfg::kNeox ? kE + j : 2 * j + 1;
    const float c = rnd<T>(to_float(cos_sin[j]));
    const float s = rnd<T>(to_float(cos_sin[kE + j]));
    const float x = to_float(h[ix]);
    const float y = to_float(h[iy]);
    h[ix] = from_float<T>(rnd<T>(x * c) - rnd<T>(y * s));
    h[iy] = from_float<T>(rnd<T>(y * c) + rnd<T>(x * s));
  }
}

template <class Cfg>
__global__ void rotary_kernel(RopeArgs a) {
  using T = typename Cfg::T;
  using TC = typename Cfg::TC;
  const long long token = blockIdx.x;
  const long long pos = a.positions[token];
  const TC* cos_sin = static_cast<const TC*>(a.cos_sin) + pos * Cfg::kRotDim;
  rotate_heads<Cfg>(static_cast<T*>(a.query) + token * a.query_token_stride, a.query_head_stride,
                    Cfg::kHeadsQ, cos_sin);
  if constexpr (Cfg::kKey) {
    rotate_heads<Cfg>(static_cast<T*>(a.key) + token * a.key_token_stride, a.key_head_stride,
                      Cfg::kHeadsKv, cos_sin);
  }
}

}  // namespace kiln
