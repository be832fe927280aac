// OpKind: every op kiln knows, generated from ir/op_list.def.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace jit {

/// One enumerator per op in ir/op_list.def, in list order.
enum class OpKind : uint8_t {
#define KILN_OP(name, Kind, Params, family) k##Kind,
#include "ir/op_list.def"
};

/// Every op kind, in list order.
std::span<const OpKind> all_op_kinds();
/// vLLM's name of the op ("rms_norm").
std::string_view op_name(OpKind op);
/// The family it belongs to ("norm", "cache", ...).
std::string_view op_family(OpKind op);

/// paged_attention_v1 or paged_attention_v2.
inline bool is_paged_attention_op(OpKind op) {
  return op == OpKind::kPagedAttentionV1 || op == OpKind::kPagedAttentionV2;
}
/// Inverse of op_name.
std::optional<OpKind> parse_op_kind(std::string_view name);

}  // namespace jit
