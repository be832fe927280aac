// cp_gather_and_upconvert_fp8_kv_cache (spec: cache_ops.md §4.3). One block per dst row o:
// r = the last request with workspace_starts[r] <= o, position o - workspace_starts[r]; the row is
// the bf16 upconversion of that fp8_ds_mla entry: 512 values bf16(e4m3(code_i) · scale_{i/128})
// (scales: fp32 at byte 512 + 4k), then the 64 rope values' 16-bit patterns from byte 528.
// The host resolves and checks every entry first.
//
// Config: kBlockSize; kThreads.
#pragma once

#include "kiln_args.cuh"
#include "kiln_common.cuh"

namespace kiln {

template <class Cfg>
__global__ void upconvert_kernel(UpconvertArgs a) {
  const long long o = blockIdx.x;
  // The request: workspace_starts is non-decreasing; a short linear search per row (batch is
  // the number of requests in a step).
  long long r = 0;
  while (r + 1 < a.batch && a.workspace_starts[r + 1] <= o) ++r;
  const long long pos = o - a.workspace_starts[r];
  const long long block = a.block_table[r * a.table_stride + pos / Cfg::kBlockSize];
  const u8* entry = static_cast<const u8*>(a.src) + block * a.src_block_stride +
                    (pos % Cfg::kBlockSize) * a.src_entry_stride;
  u16* row = static_cast<u16*>(a.dst) + o * a.dst_stride;
  for (int i = threadIdx.x; i < 576; i += Cfg::kThreads) {
    if (i < 512) {
      const int k = i / 128;
      const u32 bits = u32(entry[512 + 4 * k]) | (u32(entry[513 + 4 * k]) << 8) |
                       (u32(entry[514 + 4 * k]) << 16) | (u32(entry[515 + 4 * k]) << 24);
      row[i] = f32_to_bf16(fp8_e4m3_to_f32(entry[i]) * bits_f32(bits));
    } else {
      const int j = i - 512;
      row[i] = u16(u16(entry[528 + 2 * j]) | (u16(entry[529 + 2 * j]) << 8));
    }
  }
}

}  // namespace kiln
