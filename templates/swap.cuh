// swap_blocks (spec: cache_ops.md §1.5): dst[d·B : (d+1)·B] <- src[s·B : (s+1)·B] for each
// mapping pair (s, d), B = block_bytes. One CUDA block per pair of this launch, 16-byte vector
// copies when the buffers allow. Pairs run in parallel: a mapping whose destination block is
// another pair's source (a chain) is order-dependent, which vLLM's sequence of copies resolves
// in mapping order and this kernel does not.
//
// Config: kBlockBytes; kThreads.
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

template <class Cfg>
__global__ void swap_blocks_kernel(SwapArgs a) {
  constexpr long long kB = Cfg::kBlockBytes;
  const int pair = blockIdx.x;
  const u8* src = static_cast<const u8*>(a.src) + a.pairs[pair][0] * kB;
  u8* dst = static_cast<u8*>(a.dst) + a.pairs[pair][1] * kB;
  if constexpr (kB % 16 == 0) {
    if (a.vector_ok) {
      for (long long i = threadIdx.x * 16LL; i < kB; i += Cfg::kThreads * 16LL) {
        store_pack<u8, 16>(dst + i, load_pack<u8, 16>(src + i));
      }
      return;
    }
  }
  for (long long i = threadIdx.x; i < kB; i += Cfg::kThreads) dst[i] = src[i];
}

}  // namespace kiln
