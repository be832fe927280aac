// The ref backend: naive scalar C++ written from ../shared/spec alone, the oracle every other
// backend is compared with. Never tuned for speed.
#pragma once

#include <memory>
#include <vector>

#include "codegen/backend.h"
#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/params_cpu.h"
#include "ir/status.h"

namespace jit::codegen::ref {

/// Whether the ref backend implements `op` yet.
bool implements(OpKind op);

/// Checks `args` against `spec` (jit::check_args) and runs the reference implementation,
/// writing the outputs in place like the real op. Nothing is written when the check fails.
Status run(const OpSpec& spec, const KernelArgs& args);

/// Bytes of the scheduler-metadata tensor cpu_attn_get_scheduler_metadata writes (i8).
int64_t cpu_attn_metadata_bytes();
/// Flat index of key (token offset t, dim d) inside a (block, head) slab of cpu_attention's
/// cache layout `isa` (spec §3.3; bs = block size): vec / vec16 / neon keep K transposed
/// [D, bs]; amx keeps groups of 16 tokens, [D/2][16 tokens][2 dims] inside (VNNI pairs along D).
int64_t cpu_attn_key_index(ir::CpuAttnIsa isa, int64_t t, int64_t d, int64_t bs, int64_t head_size);
/// As cpu_attn_key_index for values: vec / vec16 / neon [bs, D] natural; amx groups of 16
/// dims, [bs/2][16 dims][2 tokens] inside (VNNI pairs along tokens).
int64_t cpu_attn_value_index(ir::CpuAttnIsa isa, int64_t t, int64_t d, int64_t bs,
                             int64_t head_size);

/// The softmax state of one query row of cpu_attention_with_kv_cache over keys [kv_lo, kv_hi):
/// m = the largest allowed logit (−inf when no key is allowed), sum = Σ e^(s − m) and
/// acc[d] = Σ e^(s − m)·v[d] over the allowed keys, in double; a key whose weight is 0 is never
/// read. Values are as stored (fp8 codes decoded, v_scale *not* applied); logits are the spec's
/// (k_scale, softcap, ALiBi, the masks). The sink is not included.
struct CpuAttnRowState {
  double m = 0;
  double sum = 0;
  std::vector<double> acc;
};
/// The state of query token `query` (0-based inside request `request`), query head `head`.
/// `args` must have passed cpu_attention_with_kv_cache's checks.
CpuAttnRowState cpu_attention_row_state(const OpSpec& spec, const KernelArgs& args, int64_t request,
                                        int64_t query, int64_t head, int64_t kv_lo, int64_t kv_hi);

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
