#include "ir/check_args.h"

#include <fmt/format.h>

namespace jit {
namespace ir {

Status expect_count(std::string_view op, const KernelArgs& args, int tensors, int scalars) {
  if (args.tensor_count == tensors && args.scalar_count == scalars) return Status::ok();
  return invalid_argument(fmt::format("{}: expected {} tensors and {} scalars, got {} and {}", op,
                                      tensors, scalars, args.tensor_count, args.scalar_count));
}

Status expect_tensor(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                     std::initializer_list<int> ranks) {
  KILN_RETURN_IF_ERROR(expect_defined(op, arg, t));
  KILN_RETURN_IF_ERROR(expect_dtype(op, arg, t, dtype));
  return expect_rank(op, arg, t, ranks);
}

Status expect_tensor(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                     int rank) {
  return expect_tensor(op, arg, t, dtype, {rank});
}

Status expect_defined(std::string_view op, std::string_view arg, const Tensor& t) {
  if (t.defined() && (t.data() != nullptr || t.numel() == 0)) return Status::ok();
  return invalid_argument(fmt::format("{}: argument '{}' is {} (a tensor is required)", op, arg,
                                      t.defined() ? "a null pointer" : "missing"));
}

Status expect_dtype(std::string_view op, std::string_view arg, const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return Status::ok();
  return invalid_argument(fmt::format("{}: argument '{}' has dtype {}; expected {}", op, arg,
                                      dtype_name(t.dtype()), dtype_name(dtype)));
}

Status expect_rank(std::string_view op, std::string_view arg, const Tensor& t,
                   std::initializer_list<int> ranks) {
  for (int r : ranks) {
    if (t.dim() == r) return Status::ok();
  }
  std::string allowed;
  for (int r : ranks) allowed += fmt::format("{}{}", allowed.empty() ? "" : " or ", r);
  return invalid_argument(fmt::format("{}: argument '{}' has rank {} ({}); expected rank {}", op,
                                      arg, t.dim(), t.describe(), allowed));
}

Status expect_size(std::string_view op, std::string_view arg, const Tensor& t, int dim,
                   int64_t size) {
  if (t.dim() > 0 && t.size(dim) == size) return Status::ok();
  return invalid_argument(fmt::format("{}: argument '{}' has size {} in dim {} ({}); expected {}",
                                      op, arg, t.dim() > 0 ? t.size(dim) : 0, dim, t.describe(),
                                      size));
}

Status expect_contiguous(std::string_view op, std::string_view arg, const Tensor& t) {
  if (t.is_contiguous()) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' must be contiguous, got {}", op, arg, t.describe()));
}

Status expect_unit_last_stride(std::string_view op, std::string_view arg, const Tensor& t) {
  if (t.dim() > 0 && (t.stride(-1) == 1 || t.size(-1) == 1)) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' must have stride 1 in its last "
                  "dimension, got {}",
                  op, arg, t.describe()));
}

Status expect_cpu(std::string_view op, std::string_view arg, const Tensor& t) {
  if (t.device().kind == Device::Kind::kCpu) return Status::ok();
  return invalid_argument(
      fmt::format("{}: argument '{}' is on {}; this backend needs cpu "
                  "tensors",
                  op, arg, to_string(t.device())));
}

Status expect_rows_collapsible(std::string_view op, std::string_view arg, const Tensor& t) {
  for (int d = 0; d + 2 < t.dim(); ++d) {
    if (t.size(d) != 1 && t.stride(d) != t.stride(d + 1) * t.size(d + 1)) {
      return invalid_argument(
          fmt::format("{}: argument '{}' ({}) must have leading dimensions that merge into one row "
                      "dimension (stride[{}] == stride[{}] * size[{}])",
                      op, arg, t.describe(), d, d + 1, d + 1));
    }
  }
  return Status::ok();
}

int64_t row_stride(const Tensor& t) {
  // The innermost non-trivial leading dimension gives the row stride; a single row has none.
  for (int d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) != 1) return t.stride(d);
  }
  return t.dim() > 0 ? t.size(-1) : 0;
}

}  // namespace ir

Status check_args(const OpSpec& spec, const KernelArgs& args) {
  const std::string_view family = op_family(spec.op);
  if (family == "norm" || family == "rope" || family == "activation") {
    return ir::check_norm_act_args(spec, args);
  }
  if (family == "cache") return ir::check_cache_args(spec, args);
  if (family == "attention" || family == "sparse_index" || family == "topk") {
    return ir::check_attention_args(spec, args);
  }
  return ir::check_cpu_args(spec, args);
}

}  // namespace jit
