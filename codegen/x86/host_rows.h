// Host-side row conversions of the x86 runners: a query row widened to fp32 before the kernels
// run, an fp32 result rounded to the query type after them. The x86 backend runs only where
// AVX2, FMA and F16C are (cpu_features.cc), so these use them unconditionally; each matches the
// scalar conversions of ir/numeric.h bit for bit, but for the payload of a NaN widened from
// f16, which F16C keeps (it stays a NaN of the same sign; tests/x86/host_rows_test.cc).
#pragma once

#include <cstdint>

#include "ir/dtype.h"

namespace jit::codegen::x86 {

/// `p` rounded up to a 64-byte boundary (buffers of whole-line vector loads and stores
/// allocate 64 bytes more).
template <class T>
T* align64(T* p) {
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
}

/// Element `index` of a `dtype` array at `base`.
inline const void* element_at(const void* base, DType dtype, int64_t index) {
  return static_cast<const uint8_t*>(base) + index * int64_t(dtype_size(dtype));
}
inline void* element_at(void* base, DType dtype, int64_t index) {
  return static_cast<uint8_t*>(base) + index * int64_t(dtype_size(dtype));
}

/// dst[e] = src[e] as fp32 for e < n; src holds `dtype` elements (f32, f16 or bf16). Exact.
void widen_row(float* dst, DType dtype, const void* src, int64_t n);

/// dst[e] = rnd_dtype(src[e] · scale) for e < n (round to nearest even; f32: the product).
/// The product is one fp32 multiply, as `src[e] * scale` in C++, so callers' results do not
/// depend on whether this or a scalar loop wrote them; at scale 1 there is none (src[e] as it
/// is, denormals kept under DAZ).
void round_row(void* dst, DType dtype, const float* src, int64_t n, float scale = 1.0f);

}  // namespace jit::codegen::x86
