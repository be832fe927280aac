// The onednn backend: vLLM's GEMM ops (create_onednn_mm, onednn_mm, create_onednn_scaled_mm,
// onednn_scaled_mm) on oneDNN matmul primitives.
//
// The handler contract is the ref's (codegen/ref/ref_cpu.cc, docs/ops.md): a u8 tensor of
// ref::onednn_handler_bytes(spec) bytes holding a 64-byte header and the weight as [N, K]
// row-major. This backend's create ops write exactly those bytes (so ref and onednn handlers
// are interchangeable, and `kiln check` compares them bit for bit) and in addition reorder the
// weight once into the blocked layout oneDNN picks (format_tag::any). The packed copy lives in
// the backend, keyed by the handler tensor's address and checked against a fingerprint of the
// handler (header + 64 words sampled across the payload) on every call; a handler this backend
// has not packed (made by the ref, or evicted) is packed on first use. See docs/gemm.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "codegen/backend.h"

namespace jit::codegen::onednn {

/// The onednn backend as a jit::Backend (not cacheable: oneDNN generates its kernels itself
/// when a primitive is created; there are no bytes to keep on disk).
std::unique_ptr<Backend> make_backend();

/// Rows a primitive is created for when a call has `m` rows (1 <= m <= kMaxBucketRows):
/// m itself up to 8, then m rounded up to a quarter of its power of two (2^e · {1, 1.25, 1.5,
/// 1.75, 2}), so a bucket wastes less than 20% of its rows and M = 1 … 4096 needs 44 buckets.
int64_t m_bucket(int64_t m);
/// The largest bucket; calls with more rows always run in chunks.
inline constexpr int64_t kMaxBucketRows = 4096;
/// The tuning knob `chunk_rows`: a call runs in chunks of at most this many rows, each one
/// primitive execution. Smaller chunks keep a chunk's rows of a and c in cache while the
/// weight streams past; each chunk streams the weight once more. See docs/gemm.md.
inline constexpr std::string_view kChunkRowsKnob = "chunk_rows";
inline constexpr int64_t kChunkRowChoices[] = {128, 256, 512, 1024, 2048, 4096};
inline constexpr int64_t kDefaultChunkRows = 512;
/// The tuning knob `small_m`: calls of at most this many rows run kiln's small-M kernel
/// (small_m.h) instead of oneDNN (0: always oneDNN).
inline constexpr std::string_view kSmallMKnob = "small_m";

/// Counters of one onednn backend instance (for tests and benchmarks).
struct Stats {
  int64_t packs = 0;               ///< weights reordered (by a create op or on first use)
  int64_t lazy_packs = 0;          ///< of which at an mm call (handler not packed here)
  int64_t primitives_created = 0;  ///< matmul primitives created (cache misses)
  int64_t primitive_hits = 0;      ///< matmul primitives found in the cache
  int64_t packed_entries = 0;      ///< handlers with a packed copy now
  int64_t packed_bytes = 0;        ///< bytes of those packed copies
  int64_t small_m_calls = 0;       ///< mm calls run by kiln's small-M kernel (small_m.h)
  int64_t onednn_calls = 0;        ///< mm calls run by oneDNN primitives
};

/// The counters of `backend`, which must be an onednn backend (else all zero).
Stats stats(const Backend& backend);

/// Drops the packed copy kept for the handler tensor at `handler_data` (if any). The handler
/// still works afterwards: the next call packs it again. jit::ops' release calls this.
void release_handler(const Backend& backend, const void* handler_data);

/// The implementation name oneDNN reports (impl_info_str, e.g. "brg:avx512_core_amx_bf16")
/// for the primitive `spec` (onednn_mm or onednn_scaled_mm) uses at `m` rows, or an error.
Result<std::string> implementation_name(const Backend& backend, const OpSpec& spec, int64_t m);

}  // namespace jit::codegen::onednn
