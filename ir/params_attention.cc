#include "ir/params_attention.h"

namespace jit::ir {

Status validate(OpKind, const PagedAttentionParams&) { return Status::ok(); }
Estimate estimate(OpKind, const PagedAttentionParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const MergeAttnStatesParams&) { return Status::ok(); }
Estimate estimate(OpKind, const MergeAttnStatesParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const VerticalSlashParams&) { return Status::ok(); }
Estimate estimate(OpKind, const VerticalSlashParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const TopKParams&) { return Status::ok(); }
Estimate estimate(OpKind, const TopKParams&, const ProblemSize&) { return {}; }

}  // namespace jit::ir
