// concat_and_cache_mla_rope_fused (spec: cache_ops.md §2.5). One block per token:
//   1. every head of q_pe rotated in place (pairs: NeoX (i, E + i), GPT-J (2i, 2i + 1));
//   2. for a written token (slot >= 0): k_pe rotated in place, then the entry
//      [Q(kv_c) | Q(rotated k_pe)] written (Q: copy, or fp8 of x / scale);
//   x' = rnd_T(rnd_T(x·c) − rnd_T(y·s)), y' = rnd_T(rnd_T(y·c) + rnd_T(x·s)).
// A padding slot (< 0) rotates q_pe only. The host checks positions and slots first.
//
// Config: using T; using C (cache element); kKv (0 auto, 1 e4m3, 2 e5m2); kRank; kRotDim;
// kHeadsQ; kNeox; kBlockSize; kThreads.
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

template <class Cfg>
KILN_FN void rotate_pair(typename Cfg::T* v, int i, const typename Cfg::T* cos_sin) {
  using T = typename Cfg::T;
  constexpr int kE = Cfg::kRotDim / 2;
  const int ix = Cfg::kNeox ? i : 2 * i;
  const int iy = Cfg::kNeox ? kE + i : 2 * i + 1;
  const float c = to_float(cos_sin[i]);
  const float s = to_float(cos_sin[kE + i]);
  const float x = to_float(v[ix]);
  const float y = to_float(v[iy]);
  v[ix] = from_float<T>(rnd<T>(x * c) - rnd<T>(y * s));
  v[iy] = from_float<T>(rnd<T>(y * c) + rnd<T>(x * s));
}

template <class Cfg>
__global__ void mla_rope_kernel(MlaRopeArgs a) {
  using T = typename Cfg::T;
  using C = typename Cfg::C;
  constexpr int kE = Cfg::kRotDim / 2;
  constexpr int kR = Cfg::kRank;
  const long long token = blockIdx.x;
  const T* cos_sin = static_cast<const T*>(a.cos_sin) + a.positions[token] * Cfg::kRotDim;
  T* q = static_cast<T*>(a.q_pe) + token * a.q_token_stride;
  for (int idx = threadIdx.x; idx < Cfg::kHeadsQ * kE; idx += Cfg::kThreads) {
    rotate_pair<Cfg>(q + (idx / kE) * a.q_head_stride, idx % kE, cos_sin);
  }
  const long long slot = a.slots[token];
  T* k = static_cast<T*>(a.k_pe) + token * a.k_stride;
  if (slot >= 0) {
    for (int i = threadIdx.x; i < kE; i += Cfg::kThreads) rotate_pair<Cfg>(k, i, cos_sin);
  }
  __syncthreads();  // the entry below reads k_pe values other threads rotated
  if (slot < 0) return;
  const T* kv_c = static_cast<const T*>(a.kv_c) + token * a.kv_c_stride;
  C* entry = static_cast<C*>(a.cache) + (slot / Cfg::kBlockSize) * a.cache_block_stride +
             (slot % Cfg::kBlockSize) * a.cache_entry_stride;
  const float scale = Cfg::kKv == 0 ? 1.0f : a.scale[0];
  for (int i = threadIdx.x; i < kR + Cfg::kRotDim; i += Cfg::kThreads) {
    const T x = i < kR ? kv_c[i] : k[i - kR];
    if constexpr (Cfg::kKv == 0) {
      entry[i] = x;
    } else if constexpr (Cfg::kKv == 1) {
      entry[i] = C(f32_to_fp8_e4m3(to_float(x) / scale));
    } else {
      entry[i] = C(f32_to_fp8_e5m2(to_float(x) / scale));
    }
  }
}

}  // namespace kiln
