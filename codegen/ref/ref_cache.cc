// Reference implementations of the cache family (being written; see issue 4).
#include <fmt/format.h>

#include "codegen/ref/ref_families.h"

namespace jit::codegen::ref {

bool implements_cache(OpKind) { return false; }

Status run_cache(const OpSpec& spec, const KernelArgs&) {
  return {StatusCode::kUnsupported,
          fmt::format("ref backend does not implement {} yet", op_name(spec.op))};
}

}  // namespace jit::codegen::ref
