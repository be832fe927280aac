// The six gated activations (spec: norm_act_cpu_ops.md §2). One block per row.
//
//   split ops:  x = in[i], y = in[d + i];  out[i] = rnd_T(rnd_T(act(x)) · y)
//               (mul_and_silu: act(y) · x; fatrelu: rnd_T((x > threshold ? x : 0) · y))
//   swigluoai:  gate = in[2i], up = in[2i + 1];  g = min(gate, limit),
//               u = clamp(up, -limit, limit);  out[i] = rnd_T((u + 1) · g · sigmoid(alpha·g))
//
// act in fp32: silu(x) = x / (1 + e^-x); gelu(x) = x/2 · erfc(-x/√2) (erfc keeps the relative
// accuracy where 1 + erf would cancel, x < -8); gelu_tanh(x) = x / (1 + e^(-2u)) with
// u = √(2/π)(x + 0.044715 x³), the same function as x/2 (1 + tanh u) without its cancellation.
//
// Config: using T; kD (output width); kOp (ActOp); kThreads; kVec (kD % kVec == 0).
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

/// Which activation (the order of ir/op_list.def).
enum ActOp : int {
  kSiluAndMul = 0,
  kMulAndSilu = 1,
  kGeluAndMul = 2,
  kGeluTanhAndMul = 3,
  kFatreluAndMul = 4,
  kSwigluoaiAndMul = 5,
};

template <int N>
struct ActWidth {
  static constexpr int value = N;
};

KILN_FN float act_silu(float x) {
  return x / (1.0f + expf(-x));
}
KILN_FN float act_gelu(float x) {
  return 0.5f * x * erfcf(-x * 0.7071067811865475f);
}
KILN_FN float act_gelu_tanh(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + expf(-2.0f * u));
}

/// One output element of a split op from its x and y.
template <class T, int kOp>
KILN_FN T gated(float x, float y, float threshold) {
  if constexpr (kOp == kFatreluAndMul) return from_float<T>((x > threshold ? x : 0.0f) * y);
  float act;
  if constexpr (kOp == kSiluAndMul) {
    act = act_silu(x);
  } else if constexpr (kOp == kMulAndSilu) {
    act = act_silu(y);
    y = x;
  } else if constexpr (kOp == kGeluAndMul) {
    act = act_gelu(x);
  } else {
    act = act_gelu_tanh(x);
  }
  return from_float<T>(rnd<T>(act) * y);
}

/// swigluoai on one (gate, up) pair; comparisons keep a NaN operand (fminf would drop it).
template <class T>
KILN_FN T swigluoai(float gate, float up, float alpha, float limit) {
  const float g = gate > limit ? limit : gate;
  const float u = up > limit ? limit : (up < -limit ? -limit : up);
  // g·sigmoid(alpha·g) first: for a huge negative g the sigmoid underflows to 0 and the
  // product is -0 (as in exact arithmetic), where (u + 1)·g / (1 + e^(-alpha·g)) would be
  // (-inf) / inf = NaN in fp32.
  const float sig = 1.0f / (1.0f + expf(-alpha * g));
  return from_float<T>((u + 1.0f) * (g * sig));
}

template <class Cfg>
__global__ void gated_activation_kernel(ActivationArgs a) {
  using T = typename Cfg::T;
  constexpr int kD = Cfg::kD;
  constexpr int kN = Cfg::kThreads;
  static_assert(kD % Cfg::kVec == 0, "kVec must divide kD");
  const long long row = blockIdx.x;
  const T* src = static_cast<const T*>(a.src) + row * 2 * kD;
  T* dst = static_cast<T*>(a.dst) + row * kD;
  auto body = [&](auto width) {
    constexpr int W = decltype(width)::value;
    for (int i = threadIdx.x * W; i < kD; i += kN * W) {
      Pack<T, W> out;
      if constexpr (Cfg::kOp == kSwigluoaiAndMul) {
        // The pairs of W outputs are 2W interleaved inputs (kVec is chosen so 2W fit 16 bytes).
        const Pack<T, 2 * W> in = load_pack<T, 2 * W>(src + 2 * i);
#pragma unroll
        for (int k = 0; k < W; ++k) {
          out.v[k] = swigluoai<T>(to_float(in.v[2 * k]), to_float(in.v[2 * k + 1]), a.p0, a.p1);
        }
      } else {
        const Pack<T, W> x = load_pack<T, W>(src + i);
        const Pack<T, W> y = load_pack<T, W>(src + kD + i);
#pragma unroll
        for (int k = 0; k < W; ++k) {
          out.v[k] = gated<T, Cfg::kOp>(to_float(x.v[k]), to_float(y.v[k]), a.p0);
        }
      }
      store_pack<T, W>(dst + i, out);
    }
  };
  if (a.vector_ok) {
    body(ActWidth<Cfg::kVec>{});
  } else {
    body(ActWidth<1>{});
  }
}

}  // namespace kiln
