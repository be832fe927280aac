// concat_and_cache_mla (spec: cache_ops.md §2.4). One block per token; a padding slot (< 0) is
// skipped.
//
//   kv=auto/fp8_e4m3/fp8_e5m2: entry = [Q(kv_c[t, 0..R)) | Q(k_pe[t, 0..P))]
//   kv=fp8_ds_mla (R = 512, P = 64, 16-bit inputs): the 656-byte DeepSeek entry; per 128-wide
//     tile k (one warp each): amax_k = max |kv_c| (fmaxf: NaN ignored), scale_k =
//     max(amax_k / 448, FLT_MIN), codes e4m3(kv_c / scale_k) at bytes 0..511, scale_k as fp32 at
//     byte 512 + 4k, then the 64 rope values' 16-bit patterns at byte 528.
//
// Config: using T (inputs), using C (cache element); kKv (0 auto, 1 e4m3, 2 e5m2, 3 ds_mla);
// kRank; kPeDim; kBlockSize; kThreads.
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

template <class Cfg>
__global__ void mla_cache_kernel(MlaWriteArgs a) {
  using T = typename Cfg::T;
  using C = typename Cfg::C;
  constexpr int kR = Cfg::kRank;
  constexpr int kP = Cfg::kPeDim;
  const long long token = blockIdx.x;
  const long long slot = a.slots[token];
  if (slot < 0) return;
  const T* kv_c = static_cast<const T*>(a.kv_c) + token * a.kv_c_stride;
  const T* k_pe = static_cast<const T*>(a.k_pe) + token * a.k_pe_stride;
  C* entry = static_cast<C*>(a.cache) + (slot / Cfg::kBlockSize) * a.cache_block_stride +
             (slot % Cfg::kBlockSize) * a.cache_entry_stride;
  if constexpr (Cfg::kKv == 3) {
    constexpr int kTile = 128;
    static_assert(kR == 512 && kP == 64, "fp8_ds_mla: R = 512, P = 64");
    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (warp < kR / kTile) {
      float amax = 0.0f;
      for (int i = warp * kTile + lane; i < (warp + 1) * kTile; i += kWarpSize) {
        amax = fmaxf(amax, fabsf(to_float(kv_c[i])));
      }
#pragma unroll
      for (int mask = kWarpSize / 2; mask > 0; mask /= 2) {
        amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, mask));
      }
      const float scale = kmax(amax / 448.0f, 1.17549435e-38f);  // FLT_MIN
      for (int i = warp * kTile + lane; i < (warp + 1) * kTile; i += kWarpSize) {
        entry[i] = C(f32_to_fp8_e4m3(to_float(kv_c[i]) / scale));
      }
      if (lane == 0) {
        const u32 bits = f32_bits(scale);
        for (int byte = 0; byte < 4; ++byte) entry[512 + 4 * warp + byte] = C(bits >> (8 * byte));
      }
    }
    for (int j = threadIdx.x; j < kP; j += Cfg::kThreads) {
      const u16 bits = reinterpret_cast<const u16*>(k_pe)[j];
      entry[528 + 2 * j] = C(bits & 0xFF);
      entry[528 + 2 * j + 1] = C(bits >> 8);
    }
  } else {
    const float scale = Cfg::kKv == 0 ? 1.0f : a.scale[0];
    for (int i = threadIdx.x; i < kR + kP; i += Cfg::kThreads) {
      const T x = i < kR ? kv_c[i] : k_pe[i - kR];
      if constexpr (Cfg::kKv == 0) {
        entry[i] = x;
      } else if constexpr (Cfg::kKv == 1) {
        entry[i] = C(f32_to_fp8_e4m3(to_float(x) / scale));
      } else {
        entry[i] = C(f32_to_fp8_e5m2(to_float(x) / scale));
      }
    }
  }
}

}  // namespace kiln
