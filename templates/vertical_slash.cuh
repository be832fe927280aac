// convert_vertical_slash_indexes(_mergehead) (spec: attention_ops.md §5). One thread per
// (batch, head, row block), like vLLM's kernel: a sequential walk that merges the ascending
// vertical columns with the key ranges of the descending slash offsets.
//
//   shift = kv - q (causal) or kv (not causal); slash offset o covers the key range ending at
//   E(o) = max(r1 + shift - o, BM) for the row block [r0, r1); ranges closer than a block merge
//   (extended by one block), farther ones flush their blocks of BN columns; verticals inside a
//   range are covered, the others become single columns.
// Row blocks with r0 >= q_len are left untouched. Outputs are bounded by nnz_s / nnz_v (the
// host validates the inputs that guarantee it, as the ref does).
//
// Config: kBlockM; kBlockN; kCausal; kThreads.
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

template <class Cfg>
__global__ void vertical_slash_kernel(VerticalSlashArgs a) {
  constexpr long long kBM = Cfg::kBlockM;
  constexpr long long kBN = Cfg::kBlockN;
  constexpr bool kCausal = Cfg::kCausal;
  const long long unit = (long long)blockIdx.x * Cfg::kThreads + threadIdx.x;
  if (unit >= a.batch * a.heads * a.rows) return;
  const long long m = unit % a.rows;
  const long long h = (unit / a.rows) % a.heads;
  const long long b = unit / (a.rows * a.heads);
  const long long q_len = a.q_seqlens[b];
  const long long kv_len = a.kv_seqlens[b];
  const long long r0 = m * kBM;
  if (r0 >= q_len) return;
  const long long r1 = r0 + kBM;
  const long long nv = a.vertical_counts ? a.vertical_counts[h] : a.nnz_v;
  const long long ns = a.slash_counts ? a.slash_counts[h] : a.nnz_s;
  const int* v = a.vertical + (b * a.heads + h) * a.nnz_v;
  const int* s = a.slash + (b * a.heads + h) * a.nnz_s;
  int* offsets = a.block_offset + unit * a.nnz_s;
  int* columns = a.column_index + unit * a.nnz_v;
  long long block_n = 0, column_n = 0;
  const long long shift = kCausal ? kv_len - q_len : kv_len;
  auto range_end_of = [&](long long offset) { return kmax(r1 + shift - offset, kBM); };
  // Emits block starts rs, rs + BN, ... below min(re, kv_len).
  auto flush = [&](long long rs, long long re) {
    const long long stop = kmin(re, kv_len);
    for (long long start = rs; rs < kv_len && start < stop; start += kBN) {
      if (block_n < a.nnz_s) offsets[block_n] = int(start);
      ++block_n;
    }
  };
  auto add_column = [&](long long c) {
    if (column_n < a.nnz_v) columns[column_n] = int(c);
    ++column_n;
  };
  long long vi = 1, si = 1;
  long long vert = v[0];
  long long slash = s[0];
  while (slash >= r1 + shift && si < ns) slash = s[si++];
  long long rs, re;
  if (slash > r1 + shift) {
    rs = kCausal ? r1 + shift : kv_len;
    re = rs + kBN;
  } else {
    re = range_end_of(slash);
    rs = re - kBM;
  }
  bool slashes_done = false;
  bool finished = false;
  for (long long steps = 0; steps <= nv + ns + 2 && !finished; ++steps) {
    if (vert < re) {
      if (vert < rs) add_column(vert);
      vert = vi < nv ? v[vi++] : r1 + kBN + shift;
      continue;
    }
    const bool slash_left = si < ns && (kCausal || s[si] >= r0);
    if (slash_left) {
      const long long end = range_end_of(s[si++]);
      if (slashes_done) continue;
      if (end > re + kBM) {
        flush(rs, re);
        rs = end - kBM;
        re = end;
      } else if (end > re) {
        re += kBM;
      }
      continue;
    }
    if (vi == nv || kCausal) {
      if (vi == nv && !kCausal && vert < kv_len) add_column(vert);
      flush(rs, re);
      finished = true;
      break;
    }
    flush(rs, re);
    rs = kv_len;
    re = kv_len + kBN;
    slashes_done = true;
  }
  a.block_count[unit] = int(kmin(block_n, a.nnz_s));
  a.column_count[unit] = int(kmin(column_n, a.nnz_v));
}

}  // namespace kiln
