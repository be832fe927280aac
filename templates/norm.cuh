// rms_norm and fused_add_rms_norm (spec: norm_act_cpu_ops.md §1). One block per row.
//
//   fused:  z_i = rnd_T(x_i + r_i), written back to the residual row
//   inv   = 1 / sqrt(Σ z_i² / H + eps)        (fp32 sum, block-wide tree reduction)
//   y_i   = rnd_T(rnd_T(z_i · inv) · w_i)     (no weight: y_i = rnd_T(z_i · inv))
//
// Two passes over the row: the second re-reads the row (from L1/L2), as vLLM's kernel does,
// so any hidden size runs without spilling. Each thread touches the same elements in both
// passes, so the fused variant's residual write needs no barrier before it is re-read.
//
// Config (a struct rendered by codegen/cuda/render.cc):
//   using T              element type (float, f16, bf16)
//   kHidden              H
//   kWeight, kFused      weight present; fused_add variant
//   kThreads             threads per block (a multiple of 32)
//   kVec                 elements per vector access (kHidden % kVec == 0)
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

template <int N>
struct Width {
  static constexpr int value = N;
};

template <class Cfg>
__global__ void rms_norm_kernel(NormArgs a) {
  using T = typename Cfg::T;
  constexpr int kH = Cfg::kHidden;
  constexpr int kN = Cfg::kThreads;
  static_assert(kH % Cfg::kVec == 0, "kVec must divide kHidden");
  const long long row = blockIdx.x;
  T* dst = static_cast<T*>(a.dst) + row * a.dst_stride;
  const T* src = static_cast<const T*>(a.src) + row * a.src_stride;
  T* res = static_cast<T*>(a.residual) + (Cfg::kFused ? row * a.residual_stride : 0);
  const T* weight = static_cast<const T*>(a.weight);

  // Pass 1: Σ z² (and z -> residual for the fused variant), W elements per access.
  float ss = 0.0f;
  auto pass1 = [&](auto width) {
    constexpr int W = decltype(width)::value;
    for (int i = threadIdx.x * W; i < kH; i += kN * W) {
      Pack<T, W> x = load_pack<T, W>(src + i);
      if constexpr (Cfg::kFused) {
        const Pack<T, W> r = load_pack<T, W>(res + i);
#pragma unroll
        for (int k = 0; k < W; ++k) x.v[k] = from_float<T>(to_float(x.v[k]) + to_float(r.v[k]));
        store_pack<T, W>(res + i, x);
      }
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float f = to_float(x.v[k]);
        ss += f * f;
      }
    }
  };
  if (a.vector_ok) {
    pass1(Width<Cfg::kVec>{});
  } else {
    pass1(Width<1>{});
  }
  ss = block_sum<kN>(ss);
  const float inv = 1.0f / sqrtf(ss / float(kH) + a.epsilon);

  // Pass 2: y = rnd(rnd(z·inv)·w).
  const T* z_row = Cfg::kFused ? res : src;
  auto pass2 = [&](auto width) {
    constexpr int W = decltype(width)::value;
    for (int i = threadIdx.x * W; i < kH; i += kN * W) {
      const Pack<T, W> z = load_pack<T, W>(z_row + i);
      Pack<T, W> y;
      if constexpr (Cfg::kWeight) {
        const Pack<T, W> w = load_pack<T, W>(weight + i);
#pragma unroll
        for (int k = 0; k < W; ++k) {
          y.v[k] = from_float<T>(rnd<T>(to_float(z.v[k]) * inv) * to_float(w.v[k]));
        }
      } else {
#pragma unroll
        for (int k = 0; k < W; ++k) y.v[k] = from_float<T>(to_float(z.v[k]) * inv);
      }
      store_pack<T, W>(dst + i, y);
    }
  };
  if (a.vector_ok) {
    pass2(Width<Cfg::kVec>{});
  } else {
    pass2(Width<1>{});
  }
}

}  // namespace kiln
