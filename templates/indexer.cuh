// The DeepSeek indexer's K quantiser and its gather (spec: cache_ops.md §5).
//
// indexer_k_quant_and_cache, per token and group g of quant_block elements (one warp a group):
//   sc = max(amax, 1e-4) / 448, amax = max |k| (fmaxf: NaN ignored); ue8m0: sc rounded up to a
//   power of two exactly (2^ceil(log2 sc), by the bits); codes e4m3(k / sc) at byte o·D + i of
//   the block, sc (fp32 bytes) at BS·D + 4·(o·G + g). A padding slot (< 0) is skipped.
// cp_gather_indexer_k_quant_cache, per request r and row p of [cu[r], cu[r+1]): the D code
//   bytes and the 4G scale bytes of the entry at position p (block_table[r, p / BS], p % BS).
//
// Config (quant): using T; kHeadDim; kQuantBlock; kBlockSize; kUe8m0; kThreads.
// (gather): kHeadDim; kQuantBlock; kBlockSize; kThreads.
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

/// 2^ceil(log2(sc)) for a positive normal sc, exact; inf stays inf.
KILN_FN float power_of_two_ceil(float sc) {
  u32 bits = f32_bits(sc);
  if ((bits >> 23) < 255u && (bits & 0x7FFFFFu) != 0) bits = ((bits >> 23) + 1u) << 23;
  return bits_f32(bits);
}

template <class Cfg>
__global__ void indexer_quant_kernel(IndexerArgs a) {
  using T = typename Cfg::T;
  constexpr int kD = Cfg::kHeadDim;
  constexpr int kQ = Cfg::kQuantBlock;
  constexpr int kG = kD / kQ;
  const long long token = blockIdx.x;
  const long long slot = a.slots[token];
  if (slot < 0) return;
  const long long o = slot % Cfg::kBlockSize;
  u8* block = static_cast<u8*>(a.cache) + (slot / Cfg::kBlockSize) * a.cache_block_stride;
  const T* row = static_cast<const T*>(a.k) + token * kD;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  for (int g = warp; g < kG; g += Cfg::kThreads / kWarpSize) {
    float amax = 0.0f;
    for (int i = g * kQ + lane; i < (g + 1) * kQ; i += kWarpSize) {
      amax = fmaxf(amax, fabsf(to_float(row[i])));
    }
#pragma unroll
    for (int mask = kWarpSize / 2; mask > 0; mask /= 2) {
      amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, mask));
    }
    float sc = fmaxf(amax, 1e-4f) / 448.0f;
    if constexpr (Cfg::kUe8m0) sc = power_of_two_ceil(sc);
    for (int i = g * kQ + lane; i < (g + 1) * kQ; i += kWarpSize) {
      block[o * kD + i] = f32_to_fp8_e4m3(to_float(row[i]) / sc);
    }
    if (lane == 0) {
      const u32 bits = f32_bits(sc);
      u8* dst = block + Cfg::kBlockSize * kD + 4 * (o * kG + g);
      for (int byte = 0; byte < 4; ++byte) dst[byte] = u8(bits >> (8 * byte));
    }
  }
}

template <class Cfg>
__global__ void indexer_gather_kernel(IndexerArgs a) {
  constexpr int kD = Cfg::kHeadDim;
  constexpr int kScaleBytes = 4 * (kD / Cfg::kQuantBlock);
  const long long r = blockIdx.x;
  const long long begin = a.cu_seq_lens[r];
  const long long end = a.cu_seq_lens[r + 1];
  const u8* cache = static_cast<const u8*>(a.cache);
  for (long long idx = threadIdx.x; idx < (end - begin) * (kD + kScaleBytes);
       idx += Cfg::kThreads) {
    const long long p = idx / (kD + kScaleBytes);
    const int e = int(idx % (kD + kScaleBytes));
    const long long block = a.block_table[r * a.table_stride + p / Cfg::kBlockSize];
    const long long offset = p % Cfg::kBlockSize;
    const u8* base = cache + block * a.cache_block_stride;
    const long long row = begin + p;
    if (e < kD) {
      static_cast<u8*>(a.dst_k)[row * a.dst_k_stride + e] = base[offset * kD + e];
    } else {
      static_cast<u8*>(a.dst_scale)[row * a.dst_scale_stride + (e - kD)] =
          base[Cfg::kBlockSize * kD + offset * kScaleBytes + (e - kD)];
    }
  }
}

}  // namespace kiln
