// Reference implementations of the attention family (being written; see issue 4).
#include <fmt/format.h>

#include "codegen/ref/ref_families.h"

namespace jit::codegen::ref {

bool implements_attention(OpKind) { return false; }

Status run_attention(const OpSpec& spec, const KernelArgs&) {
  return {StatusCode::kUnsupported,
          fmt::format("ref backend does not implement {} yet", op_name(spec.op))};
}

}  // namespace jit::codegen::ref
