// The ref backend: argument checks, dispatch to the per-family reference implementations, and
// the jit::Backend wrapper the runtime and the tests use.
#include <fmt/format.h>

#include <utility>

#include "codegen/ref/ref.h"
#include "codegen/ref/ref_families.h"
#include "ir/check_args.h"

namespace jit::codegen::ref {
namespace {

Status not_implemented(OpKind op) {
  return {StatusCode::kUnsupported,
          fmt::format("ref backend does not implement {} yet", op_name(op))};
}

// The ref reads and writes through the data pointers on the host: every tensor argument that
// is present must be a CPU tensor. (check_args checks the call's shape, not where it runs.)
Status expect_host_tensors(const OpSpec& spec, const KernelArgs& args) {
  for (int i = 0; i < args.tensor_count; ++i) {
    const Tensor& t = args.tensor(i);
    if (t.defined() && t.device().kind != Device::Kind::kCpu) {
      return invalid_argument(
          fmt::format("{}: tensor argument {} ({}) is not on the cpu; the ref "
                      "backend needs cpu tensors",
                      op_name(spec.op), i, t.describe()));
    }
  }
  return Status::ok();
}

// The ref executable: no code, it calls ref::run (which checks the arguments again and
// reports data-dependent errors, such as a rotary position outside the cache).
class RefExecutable final : public Executable {
 public:
  explicit RefExecutable(OpSpec spec) : spec_(std::move(spec)) {}

  Status run(const KernelArgs& args) const override { return ref::run(spec_, args); }

 private:
  OpSpec spec_;
};

class RefBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kRef; }

  Support supports(const OpSpec& spec, const Target&) const override {
    if (!implements(spec.op)) return Support::no(not_implemented(spec.op).message());
    const Status valid = validate(spec);
    if (!valid.is_ok()) return Support::no(valid.message());
    return Support::yes();
  }

  bool generates(OpKind op, const Target&) const override { return implements(op); }

  // The ref has nothing to tune: one default config.
  std::vector<Config> configs(const OpSpec&, const Target&) const override { return {Config{}}; }

  Result<Artifact> lower(const OpSpec& spec, const Config& config,
                         const Target& target) const override {
    const Support support = supports(spec, target);
    if (!support.ok) return Status(StatusCode::kUnsupported, support.reason);
    KILN_RETURN_IF_ERROR(check_knob_names("ref", spec, config, {}));
    Artifact artifact;
    artifact.config = config;
    return artifact;
  }

  Result<std::shared_ptr<const Executable>> load(const OpSpec& spec, const Artifact&,
                                                 const Target& target) const override {
    const Support support = supports(spec, target);
    if (!support.ok) return Status(StatusCode::kUnsupported, support.reason);
    return std::shared_ptr<const Executable>(std::make_shared<RefExecutable>(spec));
  }

  std::string_view codegen_version() const override { return "ref-1"; }
  bool cacheable() const override { return false; }
};

}  // namespace

bool implements(OpKind op) {
  const std::string_view family = op_family(op);
  if (family == "norm" || family == "rope" || family == "activation") return true;
  if (family == "cache") return implements_cache(op);
  if (family == "attention" || family == "sparse_index" || family == "topk") {
    return implements_attention(op);
  }
  if (family == "cpu_attention" || family == "gemm") return implements_cpu(op);
  return false;
}

Status run(const OpSpec& spec, const KernelArgs& args) {
  KILN_RETURN_IF_ERROR(check_args(spec, args));
  if (!implements(spec.op)) return not_implemented(spec.op);
  // check_args trusts the spec; the oracle also refuses one that is not valid (an odd rot_dim,
  // hidden 0), since it would index with it.
  KILN_RETURN_IF_ERROR(validate(spec));
  KILN_RETURN_IF_ERROR(expect_host_tensors(spec, args));
  const std::string_view family = op_family(spec.op);
  if (family == "cache") return run_cache(spec, args);
  if (family == "attention" || family == "sparse_index" || family == "topk") {
    return run_attention(spec, args);
  }
  if (family == "cpu_attention" || family == "gemm") return run_cpu(spec, args);
  return run_norm_act(spec, args);
}

std::unique_ptr<Backend> make_backend() {
  return std::make_unique<RefBackend>();
}

}  // namespace jit::codegen::ref
