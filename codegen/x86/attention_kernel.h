// CPU attention on x86: cpu_attention_with_kv_cache (spec/norm_act_cpu_ops.md §3.5), its cache
// write cpu_attn_reshape_and_cache (§3.3) and paged_attention_v1/v2 (spec/attention_ops.md §2,
// §3): the generated tile kernel's call arguments, the generators, and the executables that
// schedule them (docs/attention.md).
//
// Division of labour. The generated kernel does the arithmetic of one "pass": up to
// kMaxAttnRows query rows (row = one (query token, query head) pair of one KV head's group)
// against a KV range [kv_begin, kv_end) of one request, with an online softmax whose state
// (running max m, running sum l, fp32 accumulator acc) lives in memory between calls, so a
// range can be cut into tiles (L2 reuse across passes) and splits (flash-decoding) freely.
// The C++ runner (attention_runner.cc) validates the arguments, partitions the work, packs Q,
// runs the passes on OpenMP threads, merges splits and writes the output.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "codegen/backend.h"
#include "codegen/target.h"
#include "ir/op_spec.h"
#include "ir/params_attention.h"
#include "ir/status.h"

namespace jit::codegen::x86 {

/// Most query rows one kernel call serves: the AMX path (one 16-row A tile); the AVX-512 vec
/// path serves kMaxAttnRowsVec (its register tile); AVX2's register tile has kMaxAttnRowsAvx2
/// rows, and a call serves twice that for a 16-bit cache (two halves per key group).
inline constexpr int kMaxAttnRows = 16;
inline constexpr int kMaxAttnRowsVec = 8;
inline constexpr int kMaxAttnRowsAvx2 = 4;

/// The arguments of one kernel call (read by the generated code at fixed offsets).
/// Row r of the pass has: its query vector at q + r·D (bf16 unscaled on the vdpbf16ps path,
/// fp32 unscaled otherwise), its accumulator at acc + r·D (fp32), its softmax state m[r], l[r],
/// its allowed key interval [lo[r], hi[r]] (window, causality and the call's kv_end folded in),
/// its position pos[r] and ALiBi slope slope[r].
struct CpuAttnTileArgs {
  const void* q;
  float* acc;
  const int32_t* block_row;  ///< this request's block_table row
  const uint8_t* k_base;     ///< key_cache + kv_head · stride(1), bytes
  const uint8_t* v_base;     ///< value_cache + kv_head · stride(1), bytes
  int64_t block_stride;      ///< key_cache stride(0) in bytes (both caches)
  int64_t kv_begin;          ///< first key, a multiple of the kernel's token group
  int64_t kv_end;            ///< one past the last key (> kv_begin)
  int64_t first_block;       ///< kv_begin / block_size (block_row column)
  int64_t first_offset;      ///< kv_begin % block_size
  int64_t rows;              ///< 1..max rows
  float* scratch;            ///< attention_scratch_floats(D) floats, 64-byte aligned
  float scale;
  float softcap;  ///< read only when the spec has softcap
  float m[kMaxAttnRows];
  float l[kMaxAttnRows];
  float slope[kMaxAttnRows];
  int32_t lo[kMaxAttnRows];
  int32_t hi[kMaxAttnRows];
  int32_t pos[kMaxAttnRows];
  float alpha[kMaxAttnRows];  ///< kernel-internal: this group's rescale factor per row
  const uint8_t* next_k;      ///< kernel-internal: the next key group's K (prefetch)
  const uint8_t* next_v;      ///< kernel-internal: the next key group's V (prefetch)
  const uint8_t* next2_k;     ///< kernel-internal: K of the group after the next (vec paths)
  const uint8_t* next2_v;     ///< kernel-internal: V of the group after the next (vec paths)
  int64_t dim_steps_left;     ///< kernel-internal: the P·V loop over the dims of large heads
};

/// Floats of CpuAttnTileArgs::scratch for head size `head_size`: logits [rows][32] fp32,
/// probabilities [rows][32] (fp32, or bf16 in the first half of each row's 128 bytes), and
/// the AMX path's zero-padded V tiles of a partial key group (16 · head_size floats).
inline constexpr int64_t attention_scratch_floats(int64_t head_size) {
  return 2 * kMaxAttnRows * 32 + 16 * head_size;
}

/// The config knob that picks the vector arithmetic where both serve (isa=vec, bf16 queries,
/// AVX512_BF16): 1 vdpbf16ps on bf16 pairs (fp8 codes decoded to bf16 words), 0 the fp32 path
/// (widen or decode to fp32, FMA). Default: attention_default_dpbf16.
/// Which one is faster depends on the CPU: where a zmm vdpbf16ps holds both vector ports for
/// two cycles (Intel Sapphire Rapids and later) the fp32 path decodes 1.6-1.8x faster;
/// `kiln tune` tries both.
inline constexpr std::string_view kDpbf16Knob = "dpbf16";
/// Which arithmetic a spec gets at an ISA under `config`: bf16 queries and probabilities
/// (vdpbf16ps for bf16 queries at AVX512_BF16 where the dpbf16 knob, set or defaulted, is 1;
/// or the AMX tiles for the amx layout), or fp32 FMA after widening or decoding. Assumes
/// attention_config_status() is ok.
bool attention_uses_dpbf16(const OpSpec& spec, const Config& config, X86Isa isa);
/// The dpbf16 knob's value when a config does not set it at `isa`: 0 for fp8 caches; for bf16
/// ones 1, except at the avx512_fp16 and amx levels (Intel cores whose vdpbf16ps issues at a
/// quarter of the FMA's rate), where the fp32 path is the faster.
int64_t attention_default_dpbf16(const OpSpec& spec, X86Isa isa);
/// The value of a 0 / 1 knob in `config`: -1 when it is not set, else 0 or 1; any other value is
/// an error "config knob <knob>=<value>: allowed values are 1 (<when_1>) and 0 (<when_0>)".
Result<int64_t> switch_knob(const Config& config, std::string_view knob, std::string_view when_1,
                            std::string_view when_0);
/// Whether `config`'s dpbf16 and predecode knobs are valid for `spec` at `isa` (each 0 or 1;
/// dpbf16=1 only where vdpbf16ps serves the spec, predecode=1 only where
/// attention_predecode_applies), with an error naming the knob and its allowed values.
Status attention_config_status(const OpSpec& spec, const Config& config, X86Isa isa);
/// The config knob that picks how an fp8 cache is decoded on the fp32 path (not vdpbf16ps,
/// not the amx layout): 1 the runner decodes each KV tile's blocks once into bf16 words
/// (paged_copy.h's fp8_to_words) and the kernel, generated for dtype=bf16 and kv=auto, reads
/// them as a bf16 cache; 0 the kernel decodes the codes as it reads them, in every pass over
/// the tile. Every e4m3 / e5m2 value is a bf16 value, so the words are exact and the scales
/// stay where they were (k_scale in the logit scale, v_scale in 1/l). Default:
/// attention_default_predecode.
inline constexpr std::string_view kPredecodeKnob = "predecode";
/// Whether the predecode knob applies to `spec` under `config` at `isa`: an fp8 cache on the
/// fp32 path (elsewhere only 0, or no value, is allowed).
bool attention_predecode_applies(const OpSpec& spec, const Config& config, X86Isa isa);
/// Whether `spec` under `config` at `isa` decodes its fp8 cache by tiles (kPredecodeKnob, set
/// or defaulted, is 1 where it applies). Assumes attention_config_status() is ok.
bool attention_predecodes_fp8(const OpSpec& spec, const Config& config, X86Isa isa);
/// The predecode knob's value when `config` does not set it: 1 where a decode task's rows (the
/// GQA group) take more than one pass and a task may hold more than one (the runner's
/// q_passes, kQPassesKnob, >= 2), so that every tile is read by two passes or more
/// (bench_attention, AVX2, GQA 8: 1.2-1.45x; prefill 1.5x); 0 where a task has one pass, whose
/// decode's extra write and read of the words lost 13-21% with the KV in DRAM (GQA 1).
int64_t attention_default_predecode(const OpSpec& spec, const Config& config, X86Isa isa);
/// The runner's knob of passes (of attention_max_rows rows) per task sharing each KV tile, and
/// its default (attention_runner.cc reads it; the predecode default depends on it).
inline constexpr std::string_view kQPassesKnob = "q_passes";
inline constexpr int64_t kDefaultQPasses = 4;
/// Keys per kernel step (the token group): 32 or 16; divides the block size.
int attention_token_group(const OpSpec& spec, X86Isa isa);
/// Rows one call serves for `spec` at `isa`.
int attention_max_rows(const OpSpec& spec, X86Isa isa);
/// Asks Linux for the AMX tile-data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA));
/// once per process, later calls return the first answer. Needed before any tile instruction.
Status request_amx_permission();

/// Emits the tile kernel of cpu_attention_with_kv_cache (CpuAttentionParams; isa vec, vec16 or
/// neon layout) at `isa` (AVX2 or higher).
Result<std::vector<uint8_t>> generate_cpu_attention(const OpSpec& spec, const Config& config,
                                                    X86Isa isa);

/// Emits cpu_attn_reshape_and_cache (CpuAttnCacheWriteParams; vec, vec16, neon layouts).
Result<std::vector<uint8_t>> generate_cpu_attn_cache_write(const OpSpec& spec, X86Isa isa);

/// Whether the x86 backend serves `spec` (one of the CPU-attention ops), and why not.
Support cpu_attention_support(const OpSpec& spec, const Target& target);
/// The tuning space of the CPU-attention ops (first entry: the heuristic default).
std::vector<Config> cpu_attention_configs(const OpSpec& spec, const Target& target);
/// Generates the code of a CPU-attention op.
Result<std::vector<uint8_t>> generate_cpu_attention_op(const OpSpec& spec, const Config& config,
                                                       X86Isa isa);
/// The executable of a CPU-attention op whose code is at `code` (`size` bytes).
std::shared_ptr<const Executable> make_cpu_attention_executable(const OpSpec& spec,
                                                                const Config& config, X86Isa isa,
                                                                const void* code, size_t size);
/// The executable of cpu_attn_reshape_and_cache (attention_cache.cc).
std::shared_ptr<const Executable> make_cpu_attn_cache_write_executable(const OpSpec& spec,
                                                                       const Config& config,
                                                                       const void* code,
                                                                       size_t size);
/// The config knob of paged attention's keys per chunk (one kernel call): 16, 32, 64, 128, 256
/// or 512 (a v2 partition it does not divide ends in a partial chunk); unset: for the direct
/// kernel 512, for the gather 128, each for v2 at most the partition rounded up to a power of
/// two. Generation refuses other values, naming the knob.
inline constexpr std::string_view kPagedChunkKnob = "chunk";
/// The config knob that picks paged attention's kernel where both serve (paged_direct_serves):
/// 1 the direct kernel, which reads the legacy layout (in place, or through a per-chunk stage);
/// 0 the gather of each chunk into the tile kernel's vec layout. Default: paged_direct_default.
inline constexpr std::string_view kPagedDirectKnob = "direct";

/// Paged attention's direct kernel (paged_direct.cc) walks a chunk in groups of two halves of
/// kPagedDirectHalf keys (each half inside one block), against up to kPagedDirectRows query rows
/// per call.
inline constexpr int kPagedDirectHalf = 16;
inline constexpr int kPagedDirectRows = 8;
/// The rows of a direct-kernel call rounded up to 1, 2, 4 or 8: its accumulator rows (AVX-512's
/// 16 accumulators are 16 / R' dims x R' rows, AVX2's 8 are 8 / R' x R').
inline constexpr int64_t paged_direct_row_pad(int64_t rows) {
  return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : 8;
}

/// The arguments of one call of paged attention's direct kernel: one chunk of `tokens` keys of
/// one sequence and KV head against up to kPagedDirectRows query rows of its group.
struct PagedDirectArgs {
  const float* q;  ///< rows x D fp32, unscaled
  float* acc;      ///< D x R' fp32 ([dim][row], R' = rows rounded up to 1, 2, 4 or 8)
  /// Per half group of 16 keys (the chunk's keys 16h .. 16h + 15, two per group of 32): its
  /// key run (key_cache element of dim 0 of its first key) and value rows (value_cache
  /// element of dim 0 of its first key), in the cache or in the stage (a sequence's partial
  /// last group's values, point_halves'); halves past the chunk's groups point at zeros.
  const uint16_t* const* k_half;
  const uint16_t* const* v_half;
  float* probs;          ///< groups x rows x 32 fp32 (64-byte aligned): logits, then probabilities
  int64_t tokens;        ///< keys in the chunk (1 .. chunk)
  int64_t rows;          ///< 1 .. 8, one of the generated row counts
  int32_t alibi_offset;  ///< j − (L − 1) of the chunk's first key (ALiBi)
  float scale;
  float m[kPagedDirectRows];      ///< running max logit per row (−FLT_MAX before the first chunk)
  float l[kPagedDirectRows];      ///< running exp sum per row
  float slope[kPagedDirectRows];  ///< ALiBi slope per row
  float alpha[kPagedDirectRows];  ///< kernel-internal: this chunk's rescale factor per row
};
/// Whether the direct kernel serves `p` at `isa`: bf16 and f16 queries, dense (no block-sparse
/// mode), any level (AVX2: paged_direct_avx2.cc); a cache of the query's type (kv auto) is read
/// in place where block and head sizes are multiples of 16 and else copied chunk by chunk into a
/// stage of the 16-bit layout (the head padded to a multiple of 16), an fp8 cache decoded into
/// such a stage.
bool paged_direct_serves(const ir::PagedAttentionParams& p, X86Isa isa);
/// Whether the direct kernel is the default (knob `direct` unset): where it serves, except blocks
/// of fewer than 8 keys, whose stage copies or decodes a value row of fewer than 8 keys at a
/// time (block 1: 16-bit 0.95 GB/s against the gather's 1.25-1.29, fp8 0.34 against 0.57;
/// block 8: 16-bit 5.7-6.6 against 4.7-5.8, fp8 3.3-3.4 against 2.5-2.6).
bool paged_direct_default(const ir::PagedAttentionParams& p, X86Isa isa);
/// Emits the direct kernel with a variant for each row count of `row_counts` (1..8) for the
/// 16-bit legacy layout of `p` (its block_size: the tokens between a half's key runs of
/// consecutive dim groups, the cache's or the stage's; its kv is not read).
/// `contiguous`: every group of 32 keys lies in one block (block size a multiple of 32 and
/// chunks starting at multiples of 32, or the stage), so a value row of the group is one
/// 64-byte load (AVX-512; at AVX2 it only spares the second half's value prefetch).
Result<std::vector<uint8_t>> generate_paged_direct(const ir::PagedAttentionParams& p,
                                                   bool contiguous,
                                                   const std::vector<int>& row_counts, X86Isa isa);
/// The AVX2 form of generate_paged_direct, which calls it below AVX-512.
Result<std::vector<uint8_t>> generate_paged_direct_avx2(const ir::PagedAttentionParams& p,
                                                        bool contiguous,
                                                        const std::vector<int>& row_counts,
                                                        X86Isa isa);
/// paged_attention_v1/v2 (attention_paged.cc): the direct kernel, or the tile kernel over
/// chunks gathered from the legacy cache into the vec layout (every spec the IR allows).
Result<std::vector<uint8_t>> generate_paged_attention(const OpSpec& spec, const Config& config,
                                                      X86Isa isa);
std::shared_ptr<const Executable> make_paged_attention_executable(const OpSpec& spec,
                                                                  const Config& config, X86Isa isa,
                                                                  const void* code, size_t size);
/// True for the ops the functions above serve (the CPU-attention ops and paged attention).
bool is_cpu_attention_op(OpKind op);
/// The config knobs `op` (one of is_cpu_attention_op's) reads, as documented in
/// attention_runner.cc: threads for every op, and the op's own.
std::vector<std::string_view> cpu_attention_knob_names(OpKind op);

}  // namespace jit::codegen::x86
