// kiln's small-M GEMM kernels (see small_m.h for the scheme and the math).
//
// Intrinsics in functions compiled for AVX-512 or AVX2 (gnu::target), entered only in the
// variant variant_for() chose (the onednn backend asks it when it loads an executable), so the
// library still runs on a CPU without either. An AVX-512 vector step is 64 bytes of one weight
// row: 16 f32, 32 bf16 or 64 int8 elements; the K tail is one masked 64-byte step (byte mask,
// so one code path). An AVX2 step is 32 bytes (16 for int8, widened to 16 int16); the K tail
// is summed in scalar code.
#include "codegen/onednn/small_m.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>

#include "ir/numeric.h"

// GCC 12's _mm512_reduce_* use _mm512_undefined_*, written `__m512i __Y = __Y;`, which
// -Wuninitialized reports in every instantiation; the value is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace jit::codegen::onednn::small_m {
namespace {

#define KILN_SMALL_M_TARGET \
  gnu::target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,bmi2")

enum Kind { kF32, kBf16, kI8 };

// Weight bytes prefetched ahead of each row's loads (8 lines). The R rows of a block are R
// parallel streams (2R on 2 threads); 0, 512, 1024 and 2048 bytes measured within the noise of
// the shared machine (bench_gemm --small), and 512 was never worse.
constexpr int64_t kPrefetchBytes = 512;
// A call streams below this many weight bytes on the calling thread (an OpenMP region costs
// a few microseconds; 256 KB stream in ~8 us).
constexpr int64_t kParallelBytes = int64_t(1) << 18;

// One 64-byte step of a dot product: acc += a · w in the kind's arithmetic.
template <int K>
[[KILN_SMALL_M_TARGET, gnu::always_inline]] inline __m512 step(__m512 acc, __m512i a, __m512i w) {
  if constexpr (K == kF32) {
    return _mm512_fmadd_ps(_mm512_castsi512_ps(w), _mm512_castsi512_ps(a), acc);
  } else if constexpr (K == kBf16) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)w);
  } else {
    return _mm512_castsi512_ps(_mm512_dpbusd_epi32(_mm512_castps_si512(acc), a, w));
  }
}

// The sums of G rows of `a` (lda bytes apart) with R weight rows (row_bytes apart) starting at
// `w`: out[r * G + g] holds the fp32 bits (f32, bf16) or the int32 sum (int8).
template <int K, int G, int R>
[[KILN_SMALL_M_TARGET]] void block(const std::byte* a, int64_t lda, const std::byte* w,
                                   int64_t row_bytes, uint32_t* out) {
  __m512 acc[R][G];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  }
  int64_t off = 0;
  for (; off + 64 <= row_bytes; off += 64) {
    __m512i av[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) av[g] = _mm512_loadu_si512(a + g * lda + off);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const std::byte* wr = w + r * row_bytes + off;
      _mm_prefetch(reinterpret_cast<const char*>(wr + kPrefetchBytes), _MM_HINT_T0);
      const __m512i wv = _mm512_loadu_si512(wr);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[r][g] = step<K>(acc[r][g], av[g], wv);
    }
  }
  if (off < row_bytes) {
    // The tail: both operands masked to the remaining bytes, so the padding adds 0·0.
    const __mmask64 mask = _bzhi_u64(~uint64_t(0), unsigned(row_bytes - off));
    __m512i av[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) av[g] = _mm512_maskz_loadu_epi8(mask, a + g * lda + off);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i wv = _mm512_maskz_loadu_epi8(mask, w + r * row_bytes + off);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[r][g] = step<K>(acc[r][g], av[g], wv);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      if constexpr (K == kI8) {
        out[r * G + g] = uint32_t(_mm512_reduce_add_epi32(_mm512_castps_si512(acc[r][g])));
      } else {
        out[r * G + g] = std::bit_cast<uint32_t>(_mm512_reduce_add_ps(acc[r][g]));
      }
    }
  }
}

// ---- the AVX2 variant ----------------------------------------------------------------------

#define KILN_SMALL_M_AVX2_TARGET gnu::target("avx2,fma")

[[KILN_SMALL_M_AVX2_TARGET, gnu::always_inline]] inline float sum_lanes(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
[[KILN_SMALL_M_AVX2_TARGET, gnu::always_inline]] inline int32_t sum_lanes(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));  // + the other half
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));  // + the neighbour
  return _mm_cvtsi128_si32(s);
}

// Σ a[i]·w[i] over i in [begin, end) (elements) in scalar code: the AVX2 blocks' K tail. a is
// f32, bf16 or int16 (int8 widened), w f32, bf16 or int8.
template <int K>
auto tail_sum(const std::byte* a, const std::byte* w, int64_t begin, int64_t end) {
  if constexpr (K == kI8) {
    const auto* a16 = reinterpret_cast<const int16_t*>(a);
    const auto* w8 = reinterpret_cast<const int8_t*>(w);
    uint32_t sum = 0;  // modulo 2^32, as the vector sums
    for (int64_t i = begin; i < end; ++i) sum += uint32_t(int32_t(a16[i]) * int32_t(w8[i]));
    return sum;
  } else if constexpr (K == kBf16) {
    const auto* a16 = reinterpret_cast<const uint16_t*>(a);
    const auto* w16 = reinterpret_cast<const uint16_t*>(w);
    float sum = 0;
    for (int64_t i = begin; i < end; ++i) {
      sum += numeric::bf16_to_f32(a16[i]) * numeric::bf16_to_f32(w16[i]);
    }
    return sum;
  } else {
    const auto* af = reinterpret_cast<const float*>(a);
    const auto* wf = reinterpret_cast<const float*>(w);
    float sum = 0;
    for (int64_t i = begin; i < end; ++i) sum += af[i] * wf[i];
    return sum;
  }
}

// block() on AVX2: the sums of G rows of `a` (lda bytes apart; int16 for int8) with R weight
// rows (row_bytes apart) starting at `w`, into out[r * G + g].
template <int K, int G, int R>
[[KILN_SMALL_M_AVX2_TARGET]] void block_avx2(const std::byte* a, int64_t lda, const std::byte* w,
                                             int64_t row_bytes, uint32_t* out) {
  constexpr int64_t kStepBytes = K == kI8 ? 16 : 32;  // weight bytes per step
  constexpr int64_t kABytes = K == kI8 ? 2 : 1;       // bytes of a per weight byte
  constexpr int64_t kElementBytes = K == kF32 ? 4 : K == kBf16 ? 2 : 1;
  const __m256i high = _mm256_set1_epi32(int32_t(0xFFFF0000u));
  __m256 acc[R][G];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  }
  int64_t off = 0;
  for (; off + kStepBytes <= row_bytes; off += kStepBytes) {
    // a's vectors in the step's form: bf16 split into its even (<< 16) and odd (high half)
    // fp32 lanes once for all R weight rows.
    __m256i av[G][2];
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
      const __m256i v =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + g * lda + off * kABytes));
      if constexpr (K == kBf16) {
        av[g][0] = _mm256_slli_epi32(v, 16);
        av[g][1] = _mm256_and_si256(v, high);
      } else {
        av[g][0] = v;
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const std::byte* wr = w + r * row_bytes + off;
      _mm_prefetch(reinterpret_cast<const char*>(wr + kPrefetchBytes), _MM_HINT_T0);
      if constexpr (K == kI8) {
        const __m256i wv =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wr)));
#pragma GCC unroll 2
        for (int g = 0; g < G; ++g) {
          acc[r][g] = _mm256_castsi256_ps(
              _mm256_add_epi32(_mm256_castps_si256(acc[r][g]), _mm256_madd_epi16(av[g][0], wv)));
        }
      } else {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr));
        if constexpr (K == kBf16) {
          const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(wv, 16));
          const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(wv, high));
#pragma GCC unroll 2
          for (int g = 0; g < G; ++g) {
            acc[r][g] = _mm256_fmadd_ps(even, _mm256_castsi256_ps(av[g][0]), acc[r][g]);
            acc[r][g] = _mm256_fmadd_ps(odd, _mm256_castsi256_ps(av[g][1]), acc[r][g]);
          }
        } else {
#pragma GCC unroll 2
          for (int g = 0; g < G; ++g) {
            acc[r][g] =
                _mm256_fmadd_ps(_mm256_castsi256_ps(wv), _mm256_castsi256_ps(av[g][0]), acc[r][g]);
          }
        }
      }
    }
  }
  const int64_t tail_begin = off / kElementBytes, tail_end = row_bytes / kElementBytes;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
      const auto tail = tail_sum<K>(a + g * lda, w + r * row_bytes, tail_begin, tail_end);
      if constexpr (K == kI8) {
        out[r * G + g] = uint32_t(sum_lanes(_mm256_castps_si256(acc[r][g]))) + tail;
      } else {
        out[r * G + g] = std::bit_cast<uint32_t>(sum_lanes(acc[r][g]) + tail);
      }
    }
  }
}

using BlockFn = void (*)(const std::byte*, int64_t, const std::byte*, int64_t, uint32_t*);

// block_avx2<K, g, r> for g = 1..2 rows of a and r in {8, 4, 1} weight rows (8 only for g = 1).
template <int K>
BlockFn block_avx2_for(int g, int r) {
  static constexpr BlockFn table[3][2] = {
      {block_avx2<K, 1, 8>, nullptr},
      {block_avx2<K, 1, 4>, block_avx2<K, 2, 4>},
      {block_avx2<K, 1, 1>, block_avx2<K, 2, 1>},
  };
  return table[r == 8 ? 0 : r == 4 ? 1 : 2][g - 1];
}

// block<K, g, r> for g = 1..4 rows of a and r in {8, 4, 1} weight rows.
template <int K>
BlockFn block_for(int g, int r) {
  static constexpr BlockFn table[3][4] = {
      {block<K, 1, 8>, block<K, 2, 8>, nullptr, nullptr},
      {block<K, 1, 4>, block<K, 2, 4>, block<K, 3, 4>, block<K, 4, 4>},
      {block<K, 1, 1>, block<K, 2, 1>, block<K, 3, 1>, block<K, 4, 1>},
  };
  return table[r == 8 ? 0 : r == 4 ? 1 : 2][g - 1];
}

// What to do with the sums of one output (row m, column n).
struct Sink {
  int kind = kF32;
  int64_t n_count = 0;
  const void* bias = nullptr;         // f32/bf16: N of the weight type, or nullptr
  const int64_t* col_sums = nullptr;  // int8 with a shifted to u8 (AVX-512), else nullptr
  void* c = nullptr;                  // f32/bf16: [rows, N] of the weight type; int8: int32

  void put(int64_t m, int64_t n, uint32_t bits) const {
    const int64_t i = m * n_count + n;
    if (kind == kI8) {
      // Σ (a + 128)·w − 128·colsum, modulo 2^32 (see small_m.h); AVX2's sums are Σ a·w.
      const uint32_t shift = col_sums != nullptr ? uint32_t(uint64_t(col_sums[n]) * 128u) : 0;
      static_cast<int32_t*>(c)[i] = int32_t(bits - shift);
      return;
    }
    float v = std::bit_cast<float>(bits);
    if (kind == kF32) {
      if (bias != nullptr) v += static_cast<const float*>(bias)[n];
      static_cast<float*>(c)[i] = v;
    } else {
      if (bias != nullptr) v += numeric::bf16_to_f32(static_cast<const uint16_t*>(bias)[n]);
      static_cast<uint16_t*>(c)[i] = numeric::f32_to_bf16(v);
    }
  }
};

template <int K>
void run(Variant variant, int64_t rows, int64_t k, int64_t n_count, const std::byte* a,
         int64_t lda_bytes, const std::byte* w, const Sink& sink) {
  constexpr int64_t esize = K == kF32 ? 4 : K == kBf16 ? 2 : 1;
  const int64_t row_bytes = k * esize;
  const bool avx512 = variant == Variant::kAvx512;
  // AVX-512: up to 2 rows of a: 8 weight rows per block (8 or 16 accumulators); more: 4 weight
  // rows and groups of up to 4 rows of a (16 accumulators + 4 a vectors + 1 weight vector).
  // AVX2 (16 registers): 8 weight rows for one row of a, else 4 and groups of 2 (8
  // accumulators + 4 bf16 halves of a + the weight and its two halves).
  const int64_t r_block = avx512 ? (rows <= 2 ? 8 : 4) : (rows == 1 ? 8 : 4);
  const int64_t g_block = avx512 ? (rows <= 2 ? rows : 4) : std::min<int64_t>(rows, 2);
  const auto block_fn = [&](int g, int r) {
    return avx512 ? block_for<K>(g, r) : block_avx2_for<K>(g, r);
  };
  const int64_t blocks = (n_count + r_block - 1) / r_block;
  const bool parallel = n_count * row_bytes >= kParallelBytes && blocks > 1;
  // Dynamic chunks of ~1/8 of a thread's share: on a quiet machine as good as a static split
  // (each chunk is a contiguous run of weight rows), and a thread that loses its core for a
  // time slice no longer holds the whole call up (the others take its remaining chunks).
  const int threads = parallel ? omp_get_max_threads() : 1;
  const int64_t chunk = std::max<int64_t>(1, blocks / (int64_t(threads) * 8));
#pragma omp parallel for schedule(dynamic, chunk) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n0 = b * r_block;
    const int64_t nr = std::min(r_block, n_count - n0);
    uint32_t out[8 * 4];
    for (int64_t g0 = 0; g0 < rows; g0 += g_block) {
      const int g = int(std::min(g_block, rows - g0));
      const std::byte* ag = a + g0 * lda_bytes;
      if (nr == r_block) {
        block_fn(g, int(r_block))(ag, lda_bytes, w + n0 * row_bytes, row_bytes, out);
        for (int64_t r = 0; r < nr; ++r) {
          for (int j = 0; j < g; ++j) sink.put(g0 + j, n0 + r, out[r * g + j]);
        }
      } else {
        for (int64_t r = 0; r < nr; ++r) {
          block_fn(g, 1)(ag, lda_bytes, w + (n0 + r) * row_bytes, row_bytes, out);
          for (int j = 0; j < g; ++j) sink.put(g0 + j, n0 + r, out[j]);
        }
      }
    }
  }
}

}  // namespace

int64_t default_max_rows(DType dtype, Variant variant) {
  if (variant == Variant::kAvx512 && host_core_traits().prefers_onednn_gemv) return 0;
  return measured_max_rows(dtype, variant);
}

int64_t measured_max_rows(DType dtype, Variant variant) {
  const bool avx512 = variant == Variant::kAvx512;
  if (variant == Variant::kNone) return 0;
  switch (dtype) {
    case DType::kF32: return avx512 ? kMaxRowsF32 : kMaxRowsAvx2F32;
    case DType::kBF16: return avx512 ? kMaxRowsBf16 : kMaxRowsAvx2Bf16;
    case DType::kI8: return avx512 ? kMaxRowsI8 : kMaxRowsAvx2I8;
    default: return 0;
  }
}

Variant variant_for(DType dtype, X86Isa isa) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kI8) return Variant::kNone;
  static const bool base = __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") &&
                           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("bmi2");
  static const bool bf16 = base && __builtin_cpu_supports("avx512bf16");
  static const bool vnni = base && __builtin_cpu_supports("avx512vnni");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool cpu512 = dtype == DType::kF32 ? base : dtype == DType::kBF16 ? bf16 : vnni;
  const X86Isa need = dtype == DType::kBF16 ? X86Isa::kAvx512Bf16 : X86Isa::kAvx512;
  if (cpu512 && isa >= need) return Variant::kAvx512;
  if (avx2 && isa >= X86Isa::kAvx2) return Variant::kAvx2;
  return Variant::kNone;
}

const char* variant_name(Variant variant) {
  switch (variant) {
    case Variant::kAvx512: return "avx512";
    case Variant::kAvx2: return "avx2";
    default: return "none";
  }
}

void mm(Variant variant, DType dtype, int64_t rows, int64_t k, int64_t n_count, const void* a,
        int64_t lda, const void* w, const void* bias, void* c) {
  Sink sink;
  sink.kind = dtype == DType::kF32 ? kF32 : kBf16;
  sink.n_count = n_count;
  sink.bias = bias;
  sink.c = c;
  const auto* a_bytes = static_cast<const std::byte*>(a);
  const auto* w_bytes = static_cast<const std::byte*>(w);
  if (dtype == DType::kF32) {
    run<kF32>(variant, rows, k, n_count, a_bytes, lda * 4, w_bytes, sink);
  } else {
    run<kBf16>(variant, rows, k, n_count, a_bytes, lda * 2, w_bytes, sink);
  }
}

void mm_s8(Variant variant, int64_t rows, int64_t k, int64_t n_count, const int8_t* a, int64_t lda,
           const int8_t* w, const int64_t* col_sums, void* scratch, int32_t* acc) {
  Sink sink;
  sink.kind = kI8;
  sink.n_count = n_count;
  sink.c = acc;
  int64_t a_row_bytes = k;
  if (variant == Variant::kAvx512) {
    // a + 128 as u8 (a ^ 0x80), dense [rows, k], for vpdpbusd (u8 x s8).
    auto* shifted = static_cast<uint8_t*>(scratch);
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t i = 0; i < k; ++i) shifted[m * k + i] = uint8_t(a[m * lda + i]) ^ 0x80u;
    }
    sink.col_sums = col_sums;
  } else {
    // a widened to int16, dense [rows, k], for vpmaddwd (s16 x s16).
    auto* wide = static_cast<int16_t*>(scratch);
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t i = 0; i < k; ++i) wide[m * k + i] = a[m * lda + i];
    }
    a_row_bytes = 2 * k;
  }
  run<kI8>(variant, rows, k, n_count, static_cast<const std::byte*>(scratch), a_row_bytes,
           reinterpret_cast<const std::byte*>(w), sink);
}

}  // namespace jit::codegen::onednn::small_m
