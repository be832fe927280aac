// Run-time argument checks of the cpu family (being written; see issue 4).
#include <fmt/format.h>

#include "ir/check_args.h"

namespace jit::ir {

Status check_cpu_args(const OpSpec& spec, const KernelArgs&) {
  return {StatusCode::kUnsupported,
          fmt::format("{}: run-time argument checks are not implemented yet", op_name(spec.op))};
}

}  // namespace jit::ir
