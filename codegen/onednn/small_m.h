// kiln's own small-M GEMM kernels for the onednn backend (decode shapes, M <= a few rows).
//
// At M = 1 a GEMM is a weight stream: every weight byte is read once and used for M
// multiply-adds. These kernels stream the weight exactly as the handler holds it ([N, K]
// row-major, the ref's format: row n of the payload is column n of b), so they need no copy of
// their own. Each output block of R columns reads R contiguous weight rows in lockstep, k in
// vector steps, and keeps R x G accumulators (G rows of a) in registers:
//   f32   vfmadd231ps   acc[r][g] += w[n+r, k:k+16] * a[g, k:k+16]
//   bf16  vdpbf16ps     acc[r][g] += w[n+r, k:k+32] . a[g, k:k+32]  (pairs, fp32 sums)
//   int8  vpdpbusd      acc[r][g] += (a[g] ^ 0x80) . w[n+r]         (u8 x s8, 4-byte groups)
// and reduces each accumulator horizontally at the end of the row. vpdpbusd multiplies u8 by s8,
// so a (s8) is shifted by +128 (a ^ 0x80) and the sum corrected with the weight column sums:
//   Σ_k (a + 128)·b = Σ_k a·b + 128·colsum[n]   →   s32 = dot − 128·colsum[n]
// computed modulo 2^32 (vpdpbusd wraps), so the result is exact whenever Σ a·b fits in int32.
// K tails use masked loads (both operands, so the padding multiplies zeros). The N blocks are
// split statically over the OpenMP threads. Rows beyond 4 run in groups of 4 inside one N block,
// so the block's weight rows come from memory once and from L1/L2 for the other groups.
//
// The AVX2 variant (AVX2 + FMA CPUs such as AMD Zen 2/3, or KILN_ISA=avx2) does the same on
// 32-byte steps with these products, and the K tail (less than a step) in scalar code:
//   f32   vfmadd231ps   acc[r][g] += w[n+r, k:k+8] * a[g, k:k+8]
//   bf16  2 x vfmadd231ps on the pairs split into fp32 halves: a dword's low bf16 is its
//         even element (dword << 16), the high one its odd element (dword & 0xFFFF0000)
//   int8  vpmaddwd      acc[r][g] += a16[g, k:k+16] . sx16(w[n+r, k:k+16])
// where a is widened to int16 once per call and w by vpmovsxbw per step: s16 x s16 pairs sum
// into int32 exactly (|2·128·128| < 2^31), so no u8 shift is needed; vpmaddubsw, the u8 x s8
// instruction of AVX2, saturates its int16 pair sums and is not used (docs/gemm.md).
// Rows of a run in groups of up to 2 with 4 weight rows (8 with one row of a), so that the
// accumulators fit the 16 ymm registers.
#pragma once

#include <cstdint>

#include "codegen/target.h"
#include "ir/dtype.h"

namespace jit::codegen::onednn::small_m {

/// Which implementation of the kernels runs: none, the AVX2 one, or the AVX-512 one.
enum class Variant { kNone, kAvx2, kAvx512 };

/// Largest M the kernels serve by default, per weight type. Measured crossover with oneDNN
/// (bench_gemm --small, 4096 x 4096, 1 thread): kiln 1.2-1.4x faster at M = 1 … 4, even or
/// slower at M = 8, where a's rows no longer fit in L1 (f32: 16 KB a row at K = 4096) and each
/// 64-byte weight step loads 8 vectors of a from L2; above that the vector dot products also
/// become compute-bound and oneDNN's AMX brgemm wins (docs/gemm.md).
inline constexpr int64_t kMaxRowsF32 = 4;
inline constexpr int64_t kMaxRowsBf16 = 4;
inline constexpr int64_t kMaxRowsI8 = 4;
/// The largest bound the config knob small_m accepts (the kernels take any row count; above
/// this oneDNN's AMX or brgemm kernels are always faster).
inline constexpr int64_t kMaxRows = 16;

/// The AVX2 variant's bounds, measured against oneDNN 2.6's AVX2 paths (bench_gemm --small,
/// 4096 x 4096, AMD EPYC Zen 3, 1 / 2 threads, kiln against oneDNN in µs per call): f32 up to
/// M = 8 (M = 8: 7014 / 3473 against 9215 / 4604; M = 16 even: 13369 / 6631 against 14009 /
/// 6979); bf16 and int8 at every M the knob allows (bf16 M = 16: 8518 / 4716 against 14097 /
/// 7857, oneDNN computing in f32; int8 M = 16: 2843 against 53766 on 2 threads, oneDNN's int8
/// gemm:jit repacking its plain weights on every call, 25-50 ms at M = 1). docs/gemm.md.
inline constexpr int64_t kMaxRowsAvx2F32 = 8;
inline constexpr int64_t kMaxRowsAvx2Bf16 = 16;
inline constexpr int64_t kMaxRowsAvx2I8 = 16;

/// The bound measured for weight type `dtype` (kF32, kBF16, kI8; 0 for others) in `variant`
/// (0 for kNone): the constants above.
int64_t measured_max_rows(DType dtype, Variant variant);

/// The default bound on this host: measured_max_rows, or 0 (every M through oneDNN) for the
/// AVX-512 variant where host_core_traits().prefers_onednn_gemv (Zen 5, whose oneDNN brgemm
/// streams the weight faster).
int64_t default_max_rows(DType dtype, Variant variant);

/// The variant this CPU runs for `dtype` at ISA level `isa` (the target's level: KILN_ISA caps
/// it): kAvx512 where both allow AVX-512 F/BW/VL/DQ (plus AVX512_BF16 for bf16, AVX512_VNNI for
/// int8), else kAvx2 where both allow AVX2 + FMA, else kNone.
Variant variant_for(DType dtype, X86Isa isa);

/// The variant's name for messages ("avx512", "avx2", "none").
const char* variant_name(Variant variant);

/// c[m, n] = rnd(Σ_k a[m, k]·w[n, k] + bias[n]) for m < rows, n < n_count; a rows `lda`
/// elements apart, w the [N, K] payload, bias (N entries of the same type) or nullptr, c dense
/// [rows, N]. dtype kF32 or kBF16 (fp32 sums, one rounding at the end). `variant` must be one
/// variant_for(dtype, ...) returned (not kNone).
void mm(Variant variant, DType dtype, int64_t rows, int64_t k, int64_t n_count, const void* a,
        int64_t lda, const void* w, const void* bias, void* c);

/// acc[m, n] = Σ_k a[m, k]·w[n, k] in int32 (exact when it fits), a s8 rows `lda` apart, w the
/// s8 [N, K] payload, col_sums[n] = Σ_k w[n, k]; `scratch` holds 2·rows·k bytes (a shifted to
/// u8, or widened to int16).
void mm_s8(Variant variant, int64_t rows, int64_t k, int64_t n_count, const int8_t* a, int64_t lda,
           const int8_t* w, const int64_t* col_sums, void* scratch, int32_t* acc);

}  // namespace jit::codegen::onednn::small_m
