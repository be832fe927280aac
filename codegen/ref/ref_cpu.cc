// Reference implementations of the cpu family (being written; see issue 4).
#include <fmt/format.h>

#include "codegen/ref/ref_families.h"

namespace jit::codegen::ref {

bool implements_cpu(OpKind) { return false; }

Status run_cpu(const OpSpec& spec, const KernelArgs&) {
  return {StatusCode::kUnsupported,
          fmt::format("ref backend does not implement {} yet", op_name(spec.op))};
}

}  // namespace jit::codegen::ref
