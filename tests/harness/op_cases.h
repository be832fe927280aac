// Op cases: for a spec, the inputs every backend is tried on, and the check of a backend's
// kernel against the ref backend on those inputs. Used by the backend tests, `kiln check` and
// `kiln demo`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/status.h"
#include "runtime/runtime.h"
#include "tests/harness/harness.h"

namespace jit::test {

/// The kinds of input data of spec/testing.md.
enum class InputKind : uint8_t {
  kNormal,       ///< seeded normal values
  kSmallInt,     ///< small integers (exact arithmetic)
  kEqual,        ///< all elements equal
  kAdversarial,  ///< ±0, ±inf, NaN, denormals, huge magnitudes mixed with normals
};
std::string_view input_kind_name(InputKind kind);
/// The input kinds that make sense for `op` (norms skip kAdversarial: a finite value whose
/// square overflows fp32 makes the fp32 sum of squares of the contract infinite, so the
/// result is contract-defined but not a useful comparison with a double-accumulating ref).
std::vector<InputKind> input_kinds_for(OpKind op);

/// One call's arguments, owned: tensors in KernelArgs order (absent optional tensors are
/// marked in `present`), scalars, and which tensors the op writes.
struct OpCase {
  std::vector<HostTensor> tensors;
  std::vector<bool> present;
  std::vector<double> scalars;
  std::vector<int> outputs;        ///< indices into `tensors`
  std::vector<std::string> names;  ///< argument names, for messages
  /// Per output (parallel to `outputs`): how close the backend must be to ref. Empty: every
  /// output uses tolerance_for(op, output dtype).
  std::vector<Tolerance> tolerances;

  /// Views of the owned buffers (valid while this OpCase lives).
  KernelArgs args() const;
};

/// Builds a call of `spec` over `tokens` rows (the op's main run-time size: tokens, sequences,
/// rows or block pairs, as its family defines) with `kind` inputs from `seed`; fails for ops
/// that have no case yet (the message says which).
Result<OpCase> make_case(const OpSpec& spec, int64_t tokens, InputKind kind, uint64_t seed);

/// Token counts every CPU check sweeps: 1 token, a few, and a multi-thread-sized batch.
std::vector<int64_t> token_sweep();

/// Result of one comparison against ref.
struct CaseReport {
  bool ok = true;
  std::string message;  ///< per output: compare()'s message
};

/// Compares every output of `actual` with `expected` (ref's run of the same case): with the
/// case's own tolerance per output where it has one, else tolerance_for(op, the spec's output
/// dtype) widened by the gated activations' intermediate rounding (an activation rounded to T,
/// then multiplied).
CaseReport compare_outputs(const OpSpec& spec, const OpCase& actual, const OpCase& expected);

/// Runs `kernel` on one copy of `c` and the ref backend on another, then compare_outputs().
CaseReport check_against_ref(const Kernel& kernel, const OpCase& c);

}  // namespace jit::test
