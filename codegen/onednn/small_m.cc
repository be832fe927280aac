// kiln's small-M GEMM kernels (see small_m.h for the scheme and the math).
//
// Intrinsics in functions compiled for AVX-512 (gnu::target), entered only after cpu_supports()
// (the onednn backend checks it when it loads an executable), so the library still runs on a
// CPU without AVX-512. Every vector step is 64 bytes of one weight row: 16 f32, 32 bf16 or
// 64 int8 elements; the K tail is one masked 64-byte step (byte mask, so one code path).
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

using BlockFn = void (*)(const std::byte*, int64_t, const std::byte*, int64_t, uint32_t*);

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
  const int64_t* col_sums = nullptr;  // int8
  void* c = nullptr;                  // f32/bf16: [rows, N] of the weight type; int8: int32

  void put(int64_t m, int64_t n, uint32_t bits) const {
    const int64_t i = m * n_count + n;
    if (kind == kI8) {
      // Σ (a + 128)·w − 128·colsum, modulo 2^32 (see small_m.h).
      static_cast<int32_t*>(c)[i] = int32_t(bits - uint32_t(uint64_t(col_sums[n]) * 128u));
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
void run(int64_t rows, int64_t k, int64_t n_count, const std::byte* a, int64_t lda_bytes,
         const std::byte* w, const Sink& sink) {
  constexpr int64_t esize = K == kF32 ? 4 : K == kBf16 ? 2 : 1;
  const int64_t row_bytes = k * esize;
  // Up to 2 rows of a: 8 weight rows per block (8 or 16 accumulators); more: 4 weight rows
  // and groups of up to 4 rows of a (16 accumulators + 4 a vectors + 1 weight vector).
  const int64_t r_block = rows <= 2 ? 8 : 4;
  const int64_t g_block = rows <= 2 ? rows : 4;
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
        block_for<K>(g, int(r_block))(ag, lda_bytes, w + n0 * row_bytes, row_bytes, out);
        for (int64_t r = 0; r < nr; ++r) {
          for (int j = 0; j < g; ++j) sink.put(g0 + j, n0 + r, out[r * g + j]);
        }
      } else {
        for (int64_t r = 0; r < nr; ++r) {
          block_for<K>(g, 1)(ag, lda_bytes, w + (n0 + r) * row_bytes, row_bytes, out);
          for (int j = 0; j < g; ++j) sink.put(g0 + j, n0 + r, out[j]);
        }
      }
    }
  }
}

}  // namespace

int64_t default_max_rows(DType dtype) {
  switch (dtype) {
    case DType::kF32: return kMaxRowsF32;
    case DType::kBF16: return kMaxRowsBf16;
    case DType::kI8: return kMaxRowsI8;
    default: return 0;
  }
}

bool cpu_supports(DType dtype) {
  const bool base = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                    __builtin_cpu_supports("bmi2");
  switch (dtype) {
    case DType::kF32: return base;
    case DType::kBF16: return base && __builtin_cpu_supports("avx512bf16");
    case DType::kI8: return base && __builtin_cpu_supports("avx512vnni");
    default: return false;
  }
}

void mm(DType dtype, int64_t rows, int64_t k, int64_t n_count, const void* a, int64_t lda,
        const void* w, const void* bias, void* c) {
  Sink sink;
  sink.kind = dtype == DType::kF32 ? kF32 : kBf16;
  sink.n_count = n_count;
  sink.bias = bias;
  sink.c = c;
  const auto* a_bytes = static_cast<const std::byte*>(a);
  const auto* w_bytes = static_cast<const std::byte*>(w);
  if (dtype == DType::kF32) {
    run<kF32>(rows, k, n_count, a_bytes, lda * 4, w_bytes, sink);
  } else {
    run<kBf16>(rows, k, n_count, a_bytes, lda * 2, w_bytes, sink);
  }
}

void mm_s8(int64_t rows, int64_t k, int64_t n_count, const int8_t* a, int64_t lda, const int8_t* w,
           const int64_t* col_sums, uint8_t* shifted, int32_t* acc) {
  // a + 128 as u8 (a ^ 0x80), dense [rows, k].
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t i = 0; i < k; ++i) shifted[m * k + i] = uint8_t(a[m * lda + i]) ^ 0x80u;
  }
  Sink sink;
  sink.kind = kI8;
  sink.n_count = n_count;
  sink.col_sums = col_sums;
  sink.c = acc;
  run<kI8>(rows, k, n_count, reinterpret_cast<const std::byte*>(shifted), k,
           reinterpret_cast<const std::byte*>(w), sink);
}

}  // namespace jit::codegen::onednn::small_m
