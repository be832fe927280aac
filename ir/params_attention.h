// Compile-time parameters of the attention family ops.
// PROVISIONAL field lists; see the spec for which are compile-time.
#pragma once

#include <cstdint>

#include "ir/estimate.h"
#include "ir/field.h"
#include "ir/op_kind.h"
#include "ir/status.h"

namespace jit::ir {

/// paged_attention_v1/v2.
struct PagedAttentionParams {
  DType dtype = DType::kBF16;  ///< query/out type
  KvCacheDtype kv = KvCacheDtype::kAuto;  ///< cache storage
  int64_t head_size = 0;  ///< D
  int64_t block_size = 0;  ///< BS
  int64_t heads_q = 0;  ///< query heads
  int64_t heads_kv = 0;  ///< kv heads
  bool alibi = false;  ///< ALiBi slopes given
  bool blocksparse = false;  ///< block-sparse mode
  int64_t partition_size = 0;  ///< v2 partition size (0 for v1)

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("kv", s.kv);
    v("head_size", s.head_size);
    v("block_size", s.block_size);
    v("heads_q", s.heads_q);
    v("heads_kv", s.heads_kv);
    v("alibi", s.alibi);
    v("blocksparse", s.blocksparse);
    v("partition_size", s.partition_size);
  }
  bool operator==(const PagedAttentionParams&) const = default;
};

/// merge_attn_states.
struct MergeAttnStatesParams {
  DType dtype = DType::kBF16;  ///< output type
  int64_t head_size = 0;  ///< D
  bool output_lse = false;  ///< write output_lse

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("dtype", s.dtype);
    v("head_size", s.head_size);
    v("output_lse", s.output_lse);
  }
  bool operator==(const MergeAttnStatesParams&) const = default;
};

/// convert_vertical_slash_indexes(_mergehead).
struct VerticalSlashParams {
  int64_t block_m = 64;  ///< BM
  int64_t block_n = 64;  ///< BN
  bool causal = true;  ///< causal

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("block_m", s.block_m);
    v("block_n", s.block_n);
    v("causal", s.causal);
  }
  bool operator==(const VerticalSlashParams&) const = default;
};

/// top_k_per_row_prefill/decode.
struct TopKParams {
  int64_t top_k = 2048;  ///< k
  int64_t next_n = 1;  ///< decode query tokens per request

  template <class Self, class V>
  static void fields(Self& s, V&& v) {
    v("top_k", s.top_k);
    v("next_n", s.next_n);
  }
  bool operator==(const TopKParams&) const = default;
};

Status validate(OpKind op, const PagedAttentionParams& p);
Status validate(OpKind op, const MergeAttnStatesParams& p);
Status validate(OpKind op, const VerticalSlashParams& p);
Status validate(OpKind op, const TopKParams& p);
Estimate estimate(OpKind op, const PagedAttentionParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const MergeAttnStatesParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const VerticalSlashParams& p, const ProblemSize& size);
Estimate estimate(OpKind op, const TopKParams& p, const ProblemSize& size);

}  // namespace jit::ir
