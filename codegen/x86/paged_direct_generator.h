// What paged attention's two direct-kernel generators share (paged_direct.cc at AVX-512,
// paged_direct_avx2.cc at AVX2; attention_kernel.h, PagedDirectArgs): the dispatch on the call's
// row count, Q·Kᵀ's walk over the chunk's groups and its prefetches, the softmax's per-row state
// update and P·V's walk over sets of dims. Each generator supplies the register tiles.
#pragma once

#include <xbyak/xbyak.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "codegen/x86/attention_kernel.h"
#include "codegen/x86/generator.h"
#include "ir/params_attention.h"

namespace jit::codegen::x86 {

/// A group of 32 keys: two halves of kPagedDirectHalf, each inside one block.
inline constexpr int kPagedDirectGroup = 2 * kPagedDirectHalf;
static_assert(kPagedDirectGroup == 32, "groups = (tokens + 31) >> 5");
/// Bytes of one row's logits (then probabilities) per group.
inline constexpr int kPagedDirectRowBytes = kPagedDirectGroup * 4;

class PagedDirectGeneratorBase : public Generator {
 public:
  /// The kernel: a variant (emit_variant) per row count, picked by PagedDirectArgs::rows.
  void generate();

 protected:
  PagedDirectGeneratorBase(const ir::PagedAttentionParams& p, bool contiguous,
                           const std::vector<int>& row_counts, X86Isa isa);
  /// Q·Kᵀ, the softmax and P·V of a call with `rows` query rows.
  virtual void emit_variant(int rows) = 0;

  // ---- Q·Kᵀ's walk over the groups: r12 the half-pointer cursor, r13 tokens, r14 the group's
  // first key, r15 the logits cursor; rax / rcx the next group's key runs and rsi / rdx this
  // group's value rows (the prefetch cursors).
  void begin_group_walk();
  /// At a group's start: the prefetch cursors.
  void load_prefetch_cursors();
  /// In the dims loop, once per half h per 8 dims: the next group's key-run lines of half h into
  /// L1, this group's value rows of those dims into L2 (a group in one block shares its value
  /// lines between the halves); advances the cursors.
  void prefetch_half(int h);
  /// After a group's logits are stored: the cursors to the next group, and the loop back.
  void next_group(int rows, const Xbyak::Label& l_group);

  // ---- softmax: rbx the chunk's groups (count_groups), r12 a row's logits cursor, r11 a group
  // counter.
  void count_groups();
  /// r12 at row r's logits of the first group, r11 the groups.
  void start_row(int r);
  /// m' = max(m_r, the row's logits) in every lane of `m_new`, α = e^(m_r − m') in lane 0 of
  /// `alpha` (stored to PagedDirectArgs::alpha[r]), m_r = m'; t0, t1 exp_ps's temporaries.
  void update_row_max(int r, int rows, const Xmm& m_new, const Xmm& alpha, const Xmm& t0,
                      const Xmm& t1);
  /// l_r = α·l_r + the sum of `sum`'s lanes (sum clobbered); `tmp` an xmm.
  void update_row_sum(int r, const Xmm& sum, const Xmm& alpha, const Xmm& tmp);

  // ---- P·V's walk: for each set of `dims` dims (rbp its first value row in bytes), vector
  // registers 0 .. accumulators − 1 zeroed, then per group (r12 the half-pointer cursor, r15 the
  // probabilities cursor, r11 the group counter) `group_body`; then `reduce` leaves the set's
  // sums in register 0 ([dd][r] in lane order) and acc = α·acc + Σ (acc at r14, α of each lane
  // in `alpha_lanes`, `tmp` a temporary).
  void walk_value_sets(int rows, int accumulators, int dims, const Xmm& alpha_lanes, const Xmm& tmp,
                       const std::function<void()>& group_body,
                       const std::function<void()>& reduce);

  const ir::PagedAttentionParams& p_;
  bool contiguous_;
  bool f16_;  // f16 elements (converted by vcvtph2ps), else bf16 (widened by parity)
  std::vector<int> row_counts_;
  int k_step_;  // bytes between a half's key runs of consecutive 8-dim groups
  int v_row_;   // bytes between a block's value rows
};

}  // namespace jit::codegen::x86
