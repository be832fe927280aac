// The ref backend: naive scalar C++ written from ../shared/spec alone, the oracle every other
// backend is compared with. Never tuned for speed.
#pragma once

#include <memory>

#include "codegen/backend.h"
#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/status.h"

namespace jit::codegen::ref {

/// Whether the ref backend implements `op` yet.
bool implements(OpKind op);

/// Checks `args` against `spec` (jit::check_args) and runs the reference implementation,
/// writing the outputs in place like the real op. Nothing is written when the check fails.
Status run(const OpSpec& spec, const KernelArgs& args);

/// Bytes of the scheduler-metadata tensor cpu_attn_get_scheduler_metadata writes (i8).
int64_t cpu_attn_metadata_bytes();
/// Bytes of the u8 handler tensor create_onednn_mm / create_onednn_scaled_mm write for `spec`
/// (the create or the mm op's spec: they share params).
int64_t onednn_handler_bytes(const OpSpec& spec);

/// The 64-byte header at the start of every GEMM handler tensor (the format every backend that
/// serves the GEMM ops reads and writes; the payload follows it).
inline constexpr int64_t kMmMagic = 0x31304d4d4e4c494b;        // "KILNMM01" little-endian
inline constexpr int64_t kScaledMmMagic = 0x31304d534e4c494b;  // "KILNSM01"
inline constexpr int64_t kHandlerHeaderBytes = 64;
struct HandlerHeader {
  int64_t magic = 0;
  int64_t dtype = 0;  // dtype (mm) or out_dtype (scaled mm)
  int64_t k = 0;
  int64_t n = 0;
  int64_t flags = 0;  // dynamic | azp << 1 | per_channel << 2
  int64_t payload = 0;
  int64_t reserved[2] = {0, 0};
  bool operator==(const HandlerHeader&) const = default;
};
static_assert(sizeof(HandlerHeader) == kHandlerHeaderBytes);
/// The header a handler for `spec` (a create or an mm op) carries.
HandlerHeader handler_header_for(const OpSpec& spec);

/// Validates the handler an mm op (onednn_mm / onednn_scaled_mm) received, for every backend
/// that reads one: its size (onednn_handler_bytes), then every header field against
/// handler_header_for(spec), each failure naming what differs (magic, [K, N], scheme).
Status check_onednn_handler(const OpSpec& spec, const Tensor& handler);

/// The ref backend as a jit::Backend (not cacheable: it has no generated code).
std::unique_ptr<Backend> make_backend();

}  // namespace jit::codegen::ref
