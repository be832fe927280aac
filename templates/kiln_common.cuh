// kiln's CUDA building blocks: integer types, the 16-bit and fp8 element types with their
// conversions, vector loads/stores and block reductions. Self-contained on purpose: no CUDA
// toolkit header is included, so NVRTC compiles a kernel with nothing but libnvrtc and a
// kernel runs with nothing but the driver (docs/decisions.md has the compile-time numbers).
//
// The same source compiles three ways:
//   NVRTC (device)        __CUDA_ARCH__ defined: conversions use the PTX cvt instructions;
//   host + SIMT emulator  KILN_SIMT defined (codegen/cuda/simt/simt.h first): the software
//                         conversions below, bit-identical to cvt.rn (round to nearest even).
#pragma once

#if defined(KILN_SIMT)
#define KILN_FN inline
#else
#define KILN_FN __device__ __forceinline__
#endif

namespace kiln {

typedef signed char i8;
typedef unsigned char u8;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// Element types: plain bit containers, so that no toolkit header is needed.
struct f16 {
  u16 bits;
};
struct bf16 {
  u16 bits;
};
struct fp8e4m3 {
  u8 bits;
};
struct fp8e5m2 {
  u8 bits;
};

KILN_FN u32 f32_bits(float f) {
  return __float_as_uint(f);
}
KILN_FN float bits_f32(u32 u) {
  return __uint_as_float(u);
}

// ---- fp16 ------------------------------------------------------------------------------------

/// fp16 bits -> fp32, exact (subnormals, inf, NaN included).
KILN_FN float f16_to_f32(u16 h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  // Shift the exponent/mantissa into fp32 position and rebias by 127 - 15 = 112; inf/NaN get
  // the rest of the exponent range; subnormals (exp 0) are renormalised by one float subtract:
  // (2^-14 + m·2^-24) - 2^-14 = m·2^-24, exact.
  const u32 shifted_exp = 0x7C00u << 13;
  u32 o = (u32(h) & 0x7FFFu) << 13;
  const u32 exp = shifted_exp & o;
  o += (127u - 15u) << 23;
  if (exp == shifted_exp) {
    o += (128u - 16u) << 23;
  } else if (exp == 0) {
    o += 1u << 23;
    o = f32_bits(bits_f32(o) - bits_f32(113u << 23));
  }
  return bits_f32(o | ((u32(h) & 0x8000u) << 16));
#endif
}

/// fp32 -> fp16 bits, round to nearest even, overflow to inf, gradual underflow.
KILN_FN u16 f32_to_f16(float f) {
#if defined(__CUDA_ARCH__)
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  u32 x = f32_bits(f);
  const u32 sign = (x >> 16) & 0x8000u;
  x &= 0x7FFFFFFFu;
  u32 o;
  if (x >= ((127u + 16u) << 23)) {  // >= 65536, inf or NaN
    o = x > 0x7F800000u ? 0x7E00u : 0x7C00u;
  } else if (x < (113u << 23)) {  // below 2^-14: fp16 subnormal or zero
    // Adding 0.5 aligns the value so the FPU's own round-to-nearest-even drops the bits
    // below 2^-24; the low mantissa bits are then the subnormal code.
    const u32 magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    o = f32_bits(bits_f32(x) + bits_f32(magic)) - magic;
  } else {
    // Normal: rebias and round the 13 dropped bits to nearest even (a carry may reach inf).
    const u32 mant_odd = (x >> 13) & 1u;
    x += ((15u - 127u) << 23) + 0xFFFu + mant_odd;
    o = x >> 13;
  }
  return u16(o | sign);
#endif
}

// ---- bf16 ------------------------------------------------------------------------------------

KILN_FN float bf16_to_f32(u16 b) {
  return bits_f32(u32(b) << 16);
}

/// fp32 -> bf16 bits, round to nearest even; NaN stays a quiet NaN with its sign.
KILN_FN u16 f32_to_bf16(float f) {
#if defined(__CUDA_ARCH__)
  u16 b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  return b;
#else
  const u32 x = f32_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return u16((x >> 16) | 0x40u);
  // + 0x7FFF + (lowest kept bit) rounds half to even on the truncated 16 bits.
  return u16((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
#endif
}

// ---- fp8 (OCP e4m3fn and e5m2) ---------------------------------------------------------------
// Software on every path but e4m3 -> fp32 from sm_89 (cvt.rn.f16x2.e4m3x2: paged attention
// decodes every cached key and value element for up to eight query heads' FMAs, where the
// software decode was most of the work). The emulator runs the software path.

/// e4m3fn byte -> fp32, exact. 0x7F/0xFF are NaN; there is no infinity.
KILN_FN float fp8_e4m3_to_f32(u8 code) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  // sm_89+: the hardware conversion of a code pair to an f16 pair (the low half is this code),
  // exact (fp16 holds every e4m3 value, NaN included); two instructions instead of ~12.
  u32 pair;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(pair) : "h"(u16(code)));
  return f16_to_f32(u16(pair & 0xFFFFu));
#else
  const u32 sign = u32(code & 0x80u) << 24;
  const u32 exp = (code >> 3) & 0xFu;
  const u32 mant = code & 0x7u;
  if (exp == 0xFu && mant == 0x7u) return bits_f32(sign | 0x7FC00000u);
  if (exp == 0) return bits_f32(sign | f32_bits(float(mant) * (1.0f / 512.0f)));  // m·2^-9
  return bits_f32(sign | ((exp + 127u - 7u) << 23) | (mant << 20));
#endif
}

/// e5m2 byte -> fp32, exact (e5m2 is the top byte of an fp16).
KILN_FN float fp8_e5m2_to_f32(u8 code) {
  return f16_to_f32(u16(u16(code) << 8));
}

/// fp32 -> e4m3fn: round to nearest even, saturate to +-448 (inf too), NaN -> 0x7F|sign.
KILN_FN u8 f32_to_fp8_e4m3(float f) {
  u32 x = f32_bits(f);
  const u32 sign = (x >> 24) & 0x80u;
  x &= 0x7FFFFFFFu;
  if (x > 0x7F800000u) return u8(sign | 0x7Fu);
  if (x >= 0x43E00000u) return u8(sign | 0x7Eu);  // >= 448 (incl. inf): saturate
  if (x >= 0x3C800000u) {                         // >= 2^-6: normal
    const u32 mant_odd = (x >> 20) & 1u;
    x += 0x7FFFFu + mant_odd;  // 20 dropped bits: half - 1, plus the kept bit (ties to even)
    x -= (127u - 7u) << 23;
    return u8(sign | (x >> 20));
  }
  // Subnormal: q = rne(v·2^9) in 0..8 (8 is the smallest normal's code); adding 1.5·2^23
  // makes the FPU round to an integer in the low mantissa bits.
  const float scaled = bits_f32(x) * 512.0f;
  return u8(sign | (f32_bits(scaled + 12582912.0f) - 0x4B400000u));
}

/// fp32 -> e5m2: round to nearest even, saturate to +-57344 (inf too), NaN -> 0x7E|sign.
KILN_FN u8 f32_to_fp8_e5m2(float f) {
  u32 x = f32_bits(f);
  const u32 sign = (x >> 24) & 0x80u;
  x &= 0x7FFFFFFFu;
  if (x > 0x7F800000u) return u8(sign | 0x7Eu);
  if (x >= 0x47600000u) return u8(sign | 0x7Bu);  // >= 57344 (incl. inf): saturate
  if (x >= 0x38800000u) {                         // >= 2^-14: normal
    const u32 mant_odd = (x >> 21) & 1u;
    x += 0xFFFFFu + mant_odd;  // 21 dropped bits
    x -= (127u - 15u) << 23;
    return u8(sign | (x >> 21));
  }
  const float scaled = bits_f32(x) * 65536.0f;  // q = rne(v·2^16) in 0..4
  return u8(sign | (f32_bits(scaled + 12582912.0f) - 0x4B400000u));
}

// ---- uniform load/store as float ---------------------------------------------------------------

KILN_FN float to_float(float v) {
  return v;
}
KILN_FN float to_float(f16 v) {
  return f16_to_f32(v.bits);
}
KILN_FN float to_float(bf16 v) {
  return bf16_to_f32(v.bits);
}
KILN_FN float to_float(fp8e4m3 v) {
  return fp8_e4m3_to_f32(v.bits);
}
KILN_FN float to_float(fp8e5m2 v) {
  return fp8_e5m2_to_f32(v.bits);
}

template <class T>
struct Convert;
template <>
struct Convert<float> {
  static KILN_FN float from(float v) { return v; }
};
template <>
struct Convert<f16> {
  static KILN_FN f16 from(float v) { return f16{f32_to_f16(v)}; }
};
template <>
struct Convert<bf16> {
  static KILN_FN bf16 from(float v) { return bf16{f32_to_bf16(v)}; }
};
template <>
struct Convert<fp8e4m3> {
  static KILN_FN fp8e4m3 from(float v) { return fp8e4m3{f32_to_fp8_e4m3(v)}; }
};
template <>
struct Convert<fp8e5m2> {
  static KILN_FN fp8e5m2 from(float v) { return fp8e5m2{f32_to_fp8_e5m2(v)}; }
};

/// fp32 -> T, round to nearest even.
template <class T>
KILN_FN T from_float(float v) {
  return Convert<T>::from(v);
}

/// Rounds an fp32 value to T's grid and back (identity for float): the "rnd_T" of the specs.
template <class T>
KILN_FN float rnd(float v) {
  return to_float(from_float<T>(v));
}

/// N consecutive elements, aligned to their total size so one load/store instruction moves
/// them (16 bytes: ld.global.v4.b32).
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

/// Loads N elements at `p` as one vector access (p must be aligned to sizeof(T)·N).
template <class T, int N>
KILN_FN Pack<T, N> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, N>*>(p);
}
template <class T, int N>
KILN_FN void store_pack(T* p, const Pack<T, N>& v) {
  *reinterpret_cast<Pack<T, N>*>(p) = v;
}

template <class T>
KILN_FN T kmin(T a, T b) {
  return a < b ? a : b;
}
template <class T>
KILN_FN T kmax(T a, T b) {
  return a < b ? b : a;
}

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

/// Sum over the 32 lanes of a warp (butterfly: every lane gets the total).
KILN_FN float warp_sum(float v) {
#pragma unroll
  for (int mask = kWarpSize / 2; mask > 0; mask /= 2) v += __shfl_xor_sync(kFullMask, v, mask);
  return v;
}

/// Sum over a block of kThreads threads (a multiple of 32); every thread gets the total.
/// Uses 32 floats of static shared memory and two barriers.
template <int kThreads>
KILN_FN float block_sum(float v) {
  static_assert(kThreads % kWarpSize == 0 && kThreads <= 1024, "threads: a multiple of 32");
  constexpr int kWarps = kThreads / kWarpSize;
  __shared__ float partial[kWarps];
  __shared__ float total;
  v = warp_sum(v);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < kWarps ? partial[lane] : 0.0f;
    w = warp_sum(w);
    if (lane == 0) total = w;
  }
  __syncthreads();
  return total;
}

}  // namespace kiln

#if !defined(KILN_SIMT)
/// The block's dynamic shared memory as T* (the launch's shared_bytes), 16-byte aligned.
template <class T>
__device__ __forceinline__ T* kiln_dynamic_shared() {
  extern __shared__ __align__(16) unsigned char kiln_smem[];
  return reinterpret_cast<T*>(kiln_smem);
}
#endif
