// jit::ops for the GEMM ops: vLLM's handler model on top of the op IR. A handler is a kiln
// object (its address is the int64 vLLM passes around) that owns the u8 handler tensor the
// create op fills and remembers the spec of the matching mm op, so onednn_mm and
// onednn_scaled_mm compile (or find) their kernel like every other op and run it on
// KernelArgs {…, handler tensor}. Live handlers are registered, so a stale or made-up int64 is
// an error naming 'handler', not a crash.
#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "codegen/ref/ref.h"
#include "ir/check_args.h"
#include "ir/params_cpu.h"
#include "runtime/ops.h"
#include "runtime/runtime.h"
#ifdef KILN_HAVE_ONEDNN
#include "codegen/onednn/onednn_backend.h"
#endif

namespace jit::ops {
namespace {

void throw_if_error(const Status& status) {
  if (!status.is_ok()) throw Error(status);
}

void run(const OpSpec& spec, const KernelArgs& args, int64_t tokens) {
  CompileOptions options;
  options.tokens_hint = tokens;
  Result<Kernel> kernel = compile(spec, options);
  throw_if_error(kernel.status());
  throw_if_error(kernel->run(args));
}

// One handler: the handler tensor's bytes and the spec of the mm op that reads it.
struct Handler {
  OpSpec mm_spec;
  std::vector<std::byte> storage;
  Tensor tensor() { return Tensor(storage.data(), DType::kU8, {int64_t(storage.size())}); }
};

// The live handlers, by the int64 given out.
struct Registry {
  std::mutex mutex;
  std::unordered_map<int64_t, std::shared_ptr<Handler>> handlers;
};
Registry& registry() {
  static Registry r;
  return r;
}

int64_t add_handler(std::shared_ptr<Handler> handler) {
  const auto id = reinterpret_cast<int64_t>(handler.get());
  std::lock_guard lock(registry().mutex);
  registry().handlers[id] = std::move(handler);
  return id;
}

std::shared_ptr<Handler> find_handler(std::string_view op, int64_t id, OpKind mm_op) {
  std::shared_ptr<Handler> handler;
  {
    std::lock_guard lock(registry().mutex);
    auto it = registry().handlers.find(id);
    if (it != registry().handlers.end()) handler = it->second;
  }
  if (handler == nullptr) {
    throw Error(invalid_argument(fmt::format(
        "{}: argument 'handler' ({:#x}) is not a live handler (made by create_{} and not "
        "released)",
        op, uint64_t(id), op_name(mm_op))));
  }
  if (handler->mm_spec.op != mm_op) {
    throw Error(
        invalid_argument(fmt::format("{}: argument 'handler' was made by create_{}, not "
                                     "create_{}",
                                     op, op_name(handler->mm_spec.op), op_name(mm_op))));
  }
  return handler;
}

// b must be a defined rank-2 tensor before its sizes can form a spec.
void expect_matrix(std::string_view op, std::string_view arg, const Tensor& t) {
  throw_if_error(ir::expect_defined(op, arg, t));
  if (t.dim() != 2) {
    throw Error(invalid_argument(
        fmt::format("{}: argument '{}' ({}) must be 2-D [K, N]", op, arg, t.describe())));
  }
}

// Runs the create op of `create_spec` into a fresh handler and registers it.
int64_t make_handler(const OpSpec& create_spec, const OpSpec& mm_spec, KernelArgs args) {
  auto handler = std::make_shared<Handler>();
  handler->mm_spec = mm_spec;
  handler->storage.resize(size_t(codegen::ref::onednn_handler_bytes(create_spec)));
  args.tensors[0] = handler->tensor();
  run(create_spec, args, 0);
  return add_handler(std::move(handler));
}

}  // namespace

int64_t create_onednn_mm(Tensor b, int64_t primitive_cache_size) {
  constexpr std::string_view name = "create_onednn_mm";
  expect_matrix(name, "b", b);
  ir::GemmParams p;
  p.dtype = b.dtype();
  p.k = b.size(0);
  p.n = b.size(1);
  const OpSpec create = OpSpec::make(OpKind::kCreateOnednnMm, p);
  throw_if_error(validate(create));
  return make_handler(create, OpSpec::make(OpKind::kOnednnMm, p),
                      KernelArgs({Tensor(), b}, {double(primitive_cache_size)}));
}

void onednn_mm(Tensor c, Tensor a, Tensor bias, int64_t handler) {
  std::shared_ptr<Handler> h = find_handler("onednn_mm", handler, OpKind::kOnednnMm);
  run(h->mm_spec, KernelArgs({c, a, bias, h->tensor()}), c.defined() ? c.size(0) : 0);
}

int64_t create_onednn_scaled_mm(Tensor b, Tensor b_scales, DType output_type,
                                bool dynamic_act_quant, bool use_azp,
                                int64_t primitive_cache_size) {
  constexpr std::string_view name = "create_onednn_scaled_mm";
  expect_matrix(name, "b", b);
  throw_if_error(ir::expect_defined(name, "b_scales", b_scales));
  ir::ScaledGemmParams p;
  p.out_dtype = output_type;
  p.k = b.size(0);
  p.n = b.size(1);
  p.dynamic = dynamic_act_quant;
  p.azp = use_azp;
  // One scale is per tensor; anything else must be one per output channel (checked).
  p.per_channel = b_scales.numel() != 1;
  const OpSpec create = OpSpec::make(OpKind::kCreateOnednnScaledMm, p);
  throw_if_error(validate(create));
  return make_handler(create, OpSpec::make(OpKind::kOnednnScaledMm, p),
                      KernelArgs({Tensor(), b, b_scales}, {double(primitive_cache_size)}));
}

void onednn_scaled_mm(Tensor c, Tensor a, Tensor a_scales, Tensor azp, Tensor azp_adj, Tensor bias,
                      int64_t handler) {
  std::shared_ptr<Handler> h = find_handler("onednn_scaled_mm", handler, OpKind::kOnednnScaledMm);
  run(h->mm_spec, KernelArgs({c, a, a_scales, azp, azp_adj, bias, h->tensor()}),
      c.defined() ? c.size(0) : 0);
}

void release_onednn_handler(int64_t handler) {
  std::shared_ptr<Handler> h;
  {
    std::lock_guard lock(registry().mutex);
    auto it = registry().handlers.find(handler);
    if (it == registry().handlers.end()) {
      throw Error(invalid_argument(
          fmt::format("release_onednn_handler: argument 'handler' ({:#x}) is not a live handler",
                      uint64_t(handler))));
    }
    h = std::move(it->second);
    registry().handlers.erase(it);
  }
#ifdef KILN_HAVE_ONEDNN
  for (const Backend* backend : Runtime::global().backends()) {
    codegen::onednn::release_handler(*backend, h->storage.data());
  }
#endif
}

}  // namespace jit::ops
