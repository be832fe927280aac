#include "ir/params_cpu.h"

namespace jit::ir {

Status validate(OpKind, const CpuAttnSchedulerParams&) { return Status::ok(); }
Estimate estimate(OpKind, const CpuAttnSchedulerParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const CpuAttnCacheWriteParams&) { return Status::ok(); }
Estimate estimate(OpKind, const CpuAttnCacheWriteParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const CpuAttentionParams&) { return Status::ok(); }
Estimate estimate(OpKind, const CpuAttentionParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const GemmParams&) { return Status::ok(); }
Estimate estimate(OpKind, const GemmParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const ScaledGemmParams&) { return Status::ok(); }
Estimate estimate(OpKind, const ScaledGemmParams&, const ProblemSize&) { return {}; }

}  // namespace jit::ir
