// The CUDA device API on the CPU: include this before a template from templates/ to compile
// the template as host C++ and run it with the SIMT emulator (simt_runtime.h). Defines the
// CUDA keywords, the built-in index variables, barriers, warp shuffles and votes, atomics and
// the few intrinsics the templates use. Emulated atomics need no hardware atomicity: the
// threads of a launch are fibers of one OS thread and switch only at synchronisation points.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "codegen/cuda/simt/simt_runtime.h"

#define KILN_SIMT 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
// Static shared memory: one instance per OS thread, shared by the fibers (threads) of the
// block it runs; blocks run one after another, so that is exactly one block's view.
#define __shared__ static thread_local

#define threadIdx (::jit::codegen::cuda::simt::thread_idx())
#define blockIdx (::jit::codegen::cuda::simt::block_idx())
#define blockDim (::jit::codegen::cuda::simt::block_dim())
#define gridDim (::jit::codegen::cuda::simt::grid_dim())

namespace kiln_simt_detail {
namespace s = ::jit::codegen::cuda::simt;

template <class T>
inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <class T>
inline T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
// The source lane of a shuffle inside its `width`-lane segment; -1: keep the own value.
inline int segment_lane(int lane, int src, int width) {
  const int base = lane & ~(width - 1);
  return (src < base || src >= base + width) ? -1 : src;
}
template <class T>
inline T shuffle(T v, int src) {
  const uint64_t own = to_bits(v);
  const uint64_t got = s::warp_exchange(own, src);
  return from_bits<T>(src < 0 ? own : got);
}
}  // namespace kiln_simt_detail

inline void __syncthreads() {
  ::jit::codegen::cuda::simt::sync_threads();
}
inline void __syncwarp(unsigned = 0xFFFFFFFFu) {
  ::jit::codegen::cuda::simt::warp_ballot(true);
}
template <class T>
inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
  const int lane = int(::jit::codegen::cuda::simt::lane_id());
  return kiln_simt_detail::shuffle(
      v, kiln_simt_detail::segment_lane(lane, (lane & ~(width - 1)) + (src % width), width));
}
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  const int lane = int(::jit::codegen::cuda::simt::lane_id());
  return kiln_simt_detail::shuffle(v, kiln_simt_detail::segment_lane(lane, lane ^ mask, width));
}
template <class T>
inline T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  const int lane = int(::jit::codegen::cuda::simt::lane_id());
  return kiln_simt_detail::shuffle(v,
                                   kiln_simt_detail::segment_lane(lane, lane + int(delta), width));
}
template <class T>
inline T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
  const int lane = int(::jit::codegen::cuda::simt::lane_id());
  return kiln_simt_detail::shuffle(v,
                                   kiln_simt_detail::segment_lane(lane, lane - int(delta), width));
}
inline unsigned __ballot_sync(unsigned, int predicate) {
  return ::jit::codegen::cuda::simt::warp_ballot(predicate != 0);
}
inline int __any_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) != 0;
}
inline int __all_sync(unsigned, int predicate) {
  return ::jit::codegen::cuda::simt::warp_ballot(predicate == 0) == 0;
}

inline int __popc(unsigned v) {
  return __builtin_popcount(v);
}
inline int __popcll(unsigned long long v) {
  return __builtin_popcountll(v);
}
inline int __ffs(int v) {
  return __builtin_ffs(v);
}
inline int __clz(int v) {
  return v == 0 ? 32 : __builtin_clz(unsigned(v));
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) {
  return int(__float_as_uint(f));
}
inline float __int_as_float(int i) {
  return __uint_as_float(unsigned(i));
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline float __expf(float x) {
  return std::exp(x);
}
inline float __fdividef(float a, float b) {
  return a / b;
}
template <class T>
inline T __ldg(const T* p) {
  return *p;
}

// Atomics: plain read-modify-write (no fiber switch can interleave).
template <class T>
inline T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <class T>
inline T atomicMax(T* p, T v) {
  const T old = *p;
  if (old < v) *p = v;
  return old;
}
template <class T>
inline T atomicMin(T* p, T v) {
  const T old = *p;
  if (v < old) *p = v;
  return old;
}
template <class T>
inline T atomicExch(T* p, T v) {
  const T old = *p;
  *p = v;
  return old;
}
template <class T>
inline T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}
template <class T>
inline T atomicOr(T* p, T v) {
  const T old = *p;
  *p = old | v;
  return old;
}

// CUDA's fmaxf (IEEE 754-2019 maximumNumber): a NaN operand, quiet or signalling, gives the
// other operand. glibc's fmaxf returns NaN for a signalling one (754-2008 maxNum), and the
// templates' amax reductions (indexer, fp8_ds_mla) must ignore every NaN as the device does.
// The templates live in namespace kiln, so their unqualified calls find this before ::fmaxf.
namespace kiln {
inline float fmaxf(float a, float b) {
  if (std::isnan(b)) return std::isnan(a) ? a + b : a;
  if (std::isnan(a)) return b;
  return std::fmax(a, b);
}
}  // namespace kiln

/// The block's dynamic shared memory as T* (the templates' spelling of extern __shared__).
template <class T>
inline T* kiln_dynamic_shared() {
  return static_cast<T*>(::jit::codegen::cuda::simt::dynamic_shared());
}

namespace jit::codegen::cuda::simt {
/// The emulator entry of kernel `K` taking parameter struct `Args` by value.
template <class Args, void (*K)(Args)>
void entry(const void* params) {
  Args args;
  std::memcpy(&args, params, sizeof(Args));
  K(args);
}
}  // namespace jit::codegen::cuda::simt
