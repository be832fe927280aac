// The paged attention specs the CUDA tests compile (NVRTC) and emulate (SIMT), next to the other
// ops' lists in cuda_specs.cc; gen_simt_kernels instantiates paged_attention_specs() too.
#include <tuple>

#include "tests/cuda/cuda_specs.h"

namespace jit::test::cuda {
namespace {

using Kv = ir::KvCacheDtype;

OpSpec paged(DType dtype, int64_t head_size, int64_t block_size, int64_t heads_q, int64_t heads_kv,
             Kv kv, bool alibi, int64_t partition_size, bool blocksparse = false) {
  ir::PagedAttentionParams p;
  p.dtype = dtype, p.kv = kv, p.head_size = head_size, p.block_size = block_size;
  p.head_count_q = heads_q, p.head_count_kv = heads_kv, p.alibi = alibi;
  p.partition_size = partition_size, p.blocksparse = blocksparse;
  return OpSpec::make(partition_size > 0 ? OpKind::kPagedAttentionV2 : OpKind::kPagedAttentionV1,
                      p);
}

}  // namespace

std::vector<OpSpec> paged_attention_compile_specs() {
  // vLLM's common decode shapes: bf16, head 128, block 16, GQA 8 (32 q / 4 kv heads), plus the
  // policies (fp8 e4m3 / e5m2 caches, ALiBi), head 256 and 80, and v2 with 512-token partitions.
  return {paged(DType::kBF16, 128, 16, 32, 4, Kv::kAuto, false, 0),
          paged(DType::kBF16, 128, 16, 32, 4, Kv::kFp8E4m3, false, 0),
          paged(DType::kF16, 128, 32, 32, 32, Kv::kFp8E5m2, true, 0),
          paged(DType::kF16, 256, 16, 16, 2, Kv::kAuto, false, 0),
          paged(DType::kBF16, 80, 32, 40, 40, Kv::kAuto, true, 0),
          paged(DType::kF32, 64, 16, 8, 1, Kv::kAuto, false, 0),
          paged(DType::kBF16, 128, 16, 32, 4, Kv::kAuto, false, 512),
          paged(DType::kF16, 256, 32, 64, 8, Kv::kFp8E4m3, true, 512),
          paged(DType::kBF16, 128, 16, 32, 4, Kv::kAuto, false, 512, true)};
}

std::vector<OpSpec> paged_attention_specs() {
  // Head sizes 64, 80, 128, 256 and the odd 40 (bf16, x = 8) and 36 (f32, x = 4); block sizes
  // 1, 16, 32, 128; GQA group 1, 2, 4, 8; fp8 e4m3 and e5m2 caches; ALiBi; v2 with partitions of
  // 32, 48, 64 and vLLM's 512 (the cases make 2-3 partitions per long sequence); block-sparse.
  return {
      paged(DType::kBF16, 64, 16, 4, 1, Kv::kAuto, false, 0),
      paged(DType::kF16, 80, 32, 2, 2, Kv::kAuto, true, 0),
      paged(DType::kBF16, 128, 1, 8, 1, Kv::kAuto, false, 0),
      paged(DType::kF32, 256, 16, 4, 4, Kv::kAuto, false, 0),
      paged(DType::kBF16, 40, 16, 8, 2, Kv::kAuto, true, 0),
      paged(DType::kF32, 36, 32, 4, 1, Kv::kAuto, false, 0),
      paged(DType::kBF16, 128, 16, 8, 1, Kv::kFp8E4m3, false, 0),
      paged(DType::kF16, 64, 32, 4, 2, Kv::kFp8E5m2, true, 0),
      paged(DType::kBF16, 128, 128, 2, 1, Kv::kAuto, false, 0),
      paged(DType::kF16, 80, 16, 16, 2, Kv::kAuto, false, 0),
      paged(DType::kBF16, 128, 16, 8, 1, Kv::kAuto, false, 32),
      paged(DType::kF16, 64, 32, 4, 1, Kv::kAuto, true, 64),
      paged(DType::kF32, 80, 1, 2, 2, Kv::kAuto, false, 32),
      paged(DType::kBF16, 256, 16, 4, 1, Kv::kFp8E4m3, false, 32),
      paged(DType::kBF16, 40, 16, 8, 8, Kv::kAuto, true, 48),
      paged(DType::kF16, 128, 32, 8, 1, Kv::kAuto, false, 512),
      // Block-sparse (the cases: 2 local sparse blocks of 2 cache blocks, vertical stride 3,
      // sliding step +1 or -1): v2 makes sequences long enough for masked sparse blocks.
      paged(DType::kF16, 64, 16, 4, 1, Kv::kAuto, true, 32, true),
      paged(DType::kBF16, 128, 1, 8, 2, Kv::kAuto, false, 32, true),
      paged(DType::kF32, 36, 4, 2, 2, Kv::kAuto, false, 0, true),
  };
}

std::vector<OpSpec> paged_attention_tuning_specs() {
  // A group of 8 (heads_per_cta 1, 2, 4, 8) and, for v2 with ALiBi, a group of 4 (1, 2, 4).
  return {paged(DType::kBF16, 64, 16, 8, 1, Kv::kAuto, false, 0),
          paged(DType::kF16, 80, 32, 8, 2, Kv::kAuto, true, 64)};
}

}  // namespace jit::test::cuda
