#include "ir/params_cache.h"

namespace jit::ir {

Status validate(OpKind, const SwapBlocksParams&) { return Status::ok(); }
Estimate estimate(OpKind, const SwapBlocksParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const PagedCacheWriteParams&) { return Status::ok(); }
Estimate estimate(OpKind, const PagedCacheWriteParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const FlashCacheWriteParams&) { return Status::ok(); }
Estimate estimate(OpKind, const FlashCacheWriteParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const MlaCacheWriteParams&) { return Status::ok(); }
Estimate estimate(OpKind, const MlaCacheWriteParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const MlaRopeCacheWriteParams&) { return Status::ok(); }
Estimate estimate(OpKind, const MlaRopeCacheWriteParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const ConvertFp8Params&) { return Status::ok(); }
Estimate estimate(OpKind, const ConvertFp8Params&, const ProblemSize&) { return {}; }
Status validate(OpKind, const GatherCacheParams&) { return Status::ok(); }
Estimate estimate(OpKind, const GatherCacheParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const CpGatherCacheParams&) { return Status::ok(); }
Estimate estimate(OpKind, const CpGatherCacheParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const UpconvertGatherParams&) { return Status::ok(); }
Estimate estimate(OpKind, const UpconvertGatherParams&, const ProblemSize&) { return {}; }
Status validate(OpKind, const IndexerQuantParams&) { return Status::ok(); }
Estimate estimate(OpKind, const IndexerQuantParams&, const ProblemSize&) { return {}; }

}  // namespace jit::ir
