// Op cases of the attention family (being written; see issue 4).
#include <fmt/format.h>

#include "tests/harness/op_case_families.h"

namespace jit::test {

Result<OpCase> make_attention_case(const OpSpec& spec, int64_t, InputKind, uint64_t) {
  return Status(StatusCode::kUnsupported,
                fmt::format("no op case for {} yet", op_name(spec.op)));
}

std::vector<InputKind> attention_input_kinds(OpKind) { return {InputKind::kNormal}; }

}  // namespace jit::test
