// top_k_per_row_prefill / top_k_per_row_decode (spec: attention_ops.md §6). One block per row.
//
// Output: the positions (relative to the row start) of the k largest logits, in ascending
// position order; a row of len <= k gives 0..len-1 then -1. Order of values: NaN above +inf,
// ties at the k-th value go to the lower positions (torch.topk's stable order).
//
// 1. Radix select on an order-preserving 32-bit key (NaN -> 0xFFFFFFFF; x >= 0 -> bits | 2^31;
//    x < 0 -> ~bits): four passes of 8 bits, each a 256-bin shared histogram of the keys that
//    match the bits found so far, narrow the k-th largest key T and the number of elements equal
//    to T that belong to the top k (`ties`).
// 2. An ordered pass over the row in chunks of kThreads: an element is selected when its key is
//    above T, or equal to T and among the first `ties` such (a block-wide prefix sum of the
//    tie flags); a second prefix sum places the selected positions in ascending order.
//
// Config: kTopK; kDecode; kThreads.
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

KILN_FN u32 topk_key(float x) {
  const u32 bits = f32_bits(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0xFFFFFFFFu;  // every NaN ranks first
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

/// Exclusive prefix sum of `v` over a block of kThreads threads; `total` gets the block's sum.
template <int kThreads>
KILN_FN int block_exclusive_scan(int v, int& total) {
  constexpr int kWarps = kThreads / kWarpSize;
  __shared__ int warp_totals[kWarps];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  int x = v;
#pragma unroll
  for (int d = 1; d < kWarpSize; d *= 2) {
    const int y = __shfl_up_sync(kFullMask, x, d);
    if (lane >= d) x += y;
  }
  if (lane == kWarpSize - 1) warp_totals[warp] = x;
  __syncthreads();
  int offset = 0, sum = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) offset += warp_totals[w];
    sum += warp_totals[w];
  }
  __syncthreads();  // warp_totals is reused by the next scan
  total = sum;
  return offset + x - v;
}

template <class Cfg>
__global__ void top_k_kernel(TopKArgs a) {
  constexpr int kK = Cfg::kTopK;
  constexpr int kN = Cfg::kThreads;
  const long long r = blockIdx.x;
  long long start = 0, end = 0;
  if constexpr (Cfg::kDecode) {
    end = a.seq_lens[r / a.next_n] - a.next_n + r % a.next_n + 1;
  } else {
    start = a.row_starts[r];
    end = a.row_ends[r];
  }
  // The host validated the ranges; clamping keeps a device-side call from reading outside.
  end = kmin(kmax(end, 0LL), a.columns);
  start = kmin(kmax(start, 0LL), end);
  const long long len = end - start;
  int* out = a.indices + r * kK;
  const float* row = a.logits + r * a.stride0 + start * a.stride1;
  if (len <= kK) {
    for (int i = threadIdx.x; i < kK; i += kN) out[i] = i < len ? i : -1;
    return;
  }

  // 1. Radix select of the k-th largest key.
  __shared__ u32 hist[256];
  __shared__ u32 s_prefix;
  __shared__ u32 s_remaining;
  if (threadIdx.x == 0) {
    s_prefix = 0;
    s_remaining = kK;
  }
  u32 mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kN) hist[i] = 0;
    __syncthreads();
    const u32 prefix = s_prefix;
    for (long long i = threadIdx.x; i < len; i += kN) {
      const u32 key = topk_key(row[i * a.stride1]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // From the top bin down: the bin where the remaining count is reached holds the k-th.
      u32 remaining = s_remaining;
      for (int b = 255; b >= 0; --b) {
        if (hist[b] >= remaining) {
          s_prefix = prefix | (u32(b) << shift);
          break;
        }
        remaining -= hist[b];
      }
      s_remaining = remaining;
    }
    __syncthreads();
    mask |= 255u << shift;
  }
  const u32 threshold = s_prefix;
  const int ties = int(s_remaining);

  // 2. Ordered selection: ascending positions.
  int base = 0, tie_base = 0;
  for (long long chunk = 0; chunk < len; chunk += kN) {
    const long long i = chunk + threadIdx.x;
    const bool inside = i < len;
    const u32 key = inside ? topk_key(row[i * a.stride1]) : 0u;
    const int is_tie = inside && key == threshold ? 1 : 0;
    int tie_total = 0;
    const int tie_rank = tie_base + block_exclusive_scan<kN>(is_tie, tie_total);
    const int selected = inside && (key > threshold || (is_tie && tie_rank < ties)) ? 1 : 0;
    int selected_total = 0;
    const int pos = base + block_exclusive_scan<kN>(selected, selected_total);
    if (selected) out[pos] = int(i);
    base += selected_total;
    tie_base += tie_total;
  }
}

}  // namespace kiln
