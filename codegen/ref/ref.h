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

/// The ref backend as a jit::Backend (not cacheable: it has no generated code).
std::unique_ptr<Backend> make_backend();

}  // namespace jit::codegen::ref
