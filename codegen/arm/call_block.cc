#include "codegen/arm/call_block.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "ir/check_args.h"
#include "ir/params_norm_act.h"

namespace jit::codegen::arm {
namespace {

// Writes words into a block in layout order.
class BlockWriter {
 public:
  explicit BlockWriter(CallBlock& block, int pointer_count, int word_count) : block_(block) {
    block_.pointer_count = pointer_count;
    block_.word_count = word_count;
  }
  void ptr(int i, const void* p) { block_.words[i] = reinterpret_cast<uintptr_t>(p); }
  void i64(int i, int64_t v) { block_.words[i] = uint64_t(v); }
  void f32(int i, double v) { block_.words[i] = std::bit_cast<uint32_t>(float(v)); }

 private:
  CallBlock& block_;
};

CallPlan plan_norm(const OpSpec& spec, const KernelArgs& args) {
  using namespace norm_words;
  const auto& p = spec.get<ir::NormParams>();
  const int64_t esize = int64_t(dtype_size(p.dtype));
  const Tensor& a = args.tensor(0);  // out (rms_norm) or input (fused, in place)
  const Tensor& b = args.tensor(1);  // input (rms_norm) or residual (fused)
  CallPlan plan;
  BlockWriter w(plan.block, kPointers, kCount);
  if (spec.op == OpKind::kFusedAddRmsNorm) {
    w.ptr(kDst, a.data());
    w.ptr(kSrc, a.data());
    w.i64(kDstStride, ir::row_stride(a) * esize);
    w.i64(kSrcStride, ir::row_stride(a) * esize);
    w.ptr(kResidual, b.data());
    w.i64(kResidualStride, ir::row_stride(b) * esize);
  } else {
    w.ptr(kDst, a.data());
    w.i64(kDstStride, p.hidden * esize);  // out is dense
    w.ptr(kSrc, b.data());
    w.i64(kSrcStride, ir::row_stride(b) * esize);
  }
  w.ptr(kWeight, p.weight ? args.tensor(2).data() : nullptr);
  w.f32(kEpsilon, args.scalar(0));  // vLLM's kernels take epsilon as a float
  plan.rows = b.numel() / p.hidden;
  return plan;
}

CallPlan plan_activation(const OpSpec& spec, const KernelArgs& args) {
  using namespace act_words;
  const auto& p = spec.get<ir::ActivationParams>();
  CallPlan plan;
  BlockWriter w(plan.block, kPointers, kCount);
  w.ptr(kDst, args.tensor(0).data());
  w.ptr(kSrc, args.tensor(1).data());
  if (spec.op == OpKind::kFatreluAndMul) w.f32(kThreshold, args.scalar(0));
  if (spec.op == OpKind::kSwigluoaiAndMul) {
    w.f32(kAlpha, args.scalar(0));
    w.f32(kLimit, args.scalar(1));
  }
  plan.rows = args.tensor(0).numel() / p.d;
  return plan;
}

Result<CallPlan> plan_rope(const OpSpec& spec, const KernelArgs& args) {
  using namespace rope_words;
  const auto& p = spec.get<ir::RopeParams>();
  const Tensor& positions = args.tensor(0);
  // Checked before any write: the kernel indexes the cache with the positions.
  KILN_RETURN_IF_ERROR(ir::check_rope_positions(positions, args.tensor(3).size(0)));
  const int64_t esize = int64_t(dtype_size(p.dtype));
  const int lead = positions.dim();
  CallPlan plan;
  BlockWriter w(plan.block, kPointers, kCount);
  w.ptr(kPositions, positions.data());
  w.ptr(kQuery, args.tensor(1).data());
  w.ptr(kCache, args.tensor(3).data());
  const ir::RopeStrides q = ir::rope_strides(args.tensor(1), lead, p.head_size);
  w.i64(kQueryTokenStride, q.token * esize);
  w.i64(kQueryHeadStride, q.head * esize);
  if (p.key) {
    const ir::RopeStrides k = ir::rope_strides(args.tensor(2), lead, p.head_size);
    w.ptr(kKey, args.tensor(2).data());
    w.i64(kKeyTokenStride, k.token * esize);
    w.i64(kKeyHeadStride, k.head * esize);
  }
  plan.rows = positions.numel();
  return plan;
}

}  // namespace

std::string kernel_symbol(const OpSpec& spec) {
  return fmt::format("kiln_{}_{}", op_name(spec.op), hash128(spec).hex().substr(0, 16));
}

Result<CallPlan> plan_call(const OpSpec& spec, const KernelArgs& args) {
  const std::string_view family = op_family(spec.op);
  if (family == "norm") return plan_norm(spec, args);
  if (family == "activation") return plan_activation(spec, args);
  if (family == "rope") return plan_rope(spec, args);
  return Status(StatusCode::kInternal,
                fmt::format("arm backend: no call plan for {}", op_name(spec.op)));
}

}  // namespace jit::codegen::arm
