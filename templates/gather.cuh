// The paged-cache gathers (spec: cache_ops.md §4). The host resolves and checks every
// block-table entry the call reads before the launch (checked mode), so the kernels only copy.
//
//   gather_and_maybe_dequant_cache: for token tok < num_tokens, r = token_to_seq[tok]; skipped
//     when tok >= cu_seq_lens[r + 1]; else pos = tok - cu_seq_lens[r] (+ seq_starts[r]) and
//     dst[tok, 0..HD) = DQ(entry at pos): a copy (kv=auto) or rnd_T(decode(code) · scale).
//   cp_gather_cache: dst[cu_seq_lens[r] + p] = entry at position p (+ seq_starts[r]) of request
//     r, a bit copy of entry_size elements.
// Entry at position pos of request r: block_table[r, pos / BS], offset pos % BS.
//
// Config (gather): using T (dst), using C (cache element); kKv (0 auto, 1 e4m3, 2 e5m2);
// kHeadDim; kBlockSize; kThreads. (cp_gather): using E (element bits type); kEntry; kBlockSize;
// kThreads.
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

template <class C>
KILN_FN const C* paged_entry(const GatherArgs& a, long long r, long long pos, int block_size) {
  const long long block = a.block_table[r * a.table_stride + pos / block_size];
  return static_cast<const C*>(a.src) + block * a.src_block_stride +
         (pos % block_size) * a.src_entry_stride;
}

template <class Cfg>
__global__ void gather_dequant_kernel(GatherArgs a) {
  using T = typename Cfg::T;
  using C = typename Cfg::C;
  const long long tok = blockIdx.x;
  const long long r = a.token_to_seq[tok];
  if (tok >= a.cu_seq_lens[r + 1]) return;
  const long long pos = tok - a.cu_seq_lens[r] + (a.seq_starts ? a.seq_starts[r] : 0);
  const C* entry = paged_entry<C>(a, r, pos, Cfg::kBlockSize);
  T* row = static_cast<T*>(a.dst) + tok * a.dst_stride;
  const float scale = Cfg::kKv == 0 ? 1.0f : a.scale[0];
  for (int i = threadIdx.x; i < Cfg::kHeadDim; i += Cfg::kThreads) {
    if constexpr (Cfg::kKv == 0) {
      row[i] = entry[i];
    } else if constexpr (Cfg::kKv == 1) {
      row[i] = from_float<T>(fp8_e4m3_to_f32(entry[i]) * scale);
    } else {
      row[i] = from_float<T>(fp8_e5m2_to_f32(entry[i]) * scale);
    }
  }
}

template <class Cfg>
__global__ void cp_gather_kernel(GatherArgs a) {
  using E = typename Cfg::E;
  constexpr long long kE = Cfg::kEntry;
  const long long r = blockIdx.x;
  const long long begin = a.cu_seq_lens[r];
  const long long end = a.cu_seq_lens[r + 1];
  const long long start = a.seq_starts ? a.seq_starts[r] : 0;
  E* dst = static_cast<E*>(a.dst);
  for (long long idx = threadIdx.x; idx < (end - begin) * kE; idx += Cfg::kThreads) {
    const long long p = idx / kE;
    const long long e = idx % kE;
    dst[(begin + p) * a.dst_stride + e] = paged_entry<E>(a, r, p + start, Cfg::kBlockSize)[e];
  }
}

}  // namespace kiln
