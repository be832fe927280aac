// OpSpec: one kernel specialisation as a plain value (printable, parseable, hashable).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "ir/estimate.h"
#include "ir/op_kind.h"
#include "ir/params_attention.h"
#include "ir/params_cache.h"
#include "ir/params_cpu.h"
#include "ir/params_norm_act.h"
#include "ir/status.h"

namespace jit {

/// The typed params of every family, one alternative per params struct.
using OpParams =
    std::variant<ir::NormParams, ir::RopeParams, ir::ActivationParams, ir::SwapBlocksParams,
                 ir::PagedCacheWriteParams, ir::FlashCacheWriteParams, ir::MlaCacheWriteParams,
                 ir::MlaRopeCacheWriteParams, ir::ConvertFp8Params, ir::GatherCacheParams,
                 ir::CpGatherCacheParams, ir::UpconvertGatherParams, ir::IndexerQuantParams,
                 ir::IndexerGatherParams, ir::RopeFlashCacheWriteParams, ir::PagedAttentionParams,
                 ir::MergeAttnStatesParams, ir::VerticalSlashParams, ir::TopKParams,
                 ir::CpuAttnSchedulerParams, ir::CpuAttnCacheWriteParams, ir::CpuAttentionParams,
                 ir::GemmParams, ir::ScaledGemmParams>;

/// A kernel specialisation: the op and its compile-time parameters. The params alternative
/// always matches the op's family (see ir/op_list.def); `make` enforces it.
struct OpSpec {
  OpKind op = OpKind::kRmsNorm;
  OpParams params = ir::NormParams{};

  /// A spec of `op` with default (usually invalid: sizes 0) params of its family.
  static OpSpec defaults(OpKind op);
  /// A spec of `op` with `params`; asserts (debug) that Params is the op's family type.
  template <class Params>
  static OpSpec make(OpKind op, const Params& params) {
    OpSpec spec = defaults(op);
    spec.params = params;
    return spec;
  }
  template <class Params>
  const Params& get() const {
    return std::get<Params>(params);
  }
  template <class Params>
  Params& get() {
    return std::get<Params>(params);
  }
  bool operator==(const OpSpec&) const = default;
};

/// Canonical text: "rms_norm(dtype=bf16,hidden=4096,weight=true)": every field, in the
/// declared order, no spaces. parse_spec(to_string(s)) == s for every valid s.
std::string to_string(const OpSpec& spec);

/// Parses spec text. Fields may appear in any order and be omitted (they take their
/// defaults); spaces around tokens are ignored. The result is validated. Errors name the
/// offending field and the allowed values.
Result<OpSpec> parse_spec(std::string_view text);

/// Checks the spec's parameters against the op's semantic contract (target-independent);
/// the message names the field and what is allowed.
Status validate(const OpSpec& spec);

/// 64-bit hash of the spec (xxh3 over the op and field values). Stable across processes,
/// runs and machines for a given kiln IR version.
uint64_t hash64(const OpSpec& spec);

/// 128-bit hash (xxh3-128) of the same bytes, for cache keys.
struct Hash128 {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const Hash128&) const = default;
  /// 32 lowercase hex digits.
  std::string hex() const;
};
Hash128 hash128(const OpSpec& spec);

/// Minimum bytes moved and FLOPs for the spec at the run-time `size`.
Estimate estimates(const OpSpec& spec, const ProblemSize& size);

/// Hash functor for unordered containers.
struct OpSpecHash {
  size_t operator()(const OpSpec& spec) const { return size_t(hash64(spec)); }
};

}  // namespace jit
