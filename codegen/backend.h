// The interface every code generator implements, and what it produces.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codegen/target.h"
#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/status.h"

namespace jit {

/// A point in a backend's tuning space: named integer knobs ("threads=2,unroll=4").
struct Config {
  std::vector<std::pair<std::string, int64_t>> knobs;

  /// The value of `name`, or `fallback` when the config does not set it.
  int64_t get(std::string_view name, int64_t fallback) const;
  Config& set(std::string name, int64_t value);
  /// "name=value,..." in insertion order; "default" when empty.
  std::string to_string() const;
  bool operator==(const Config&) const = default;
};

/// Ok when every knob `config` sets is one of `allowed`, the knobs `spec`'s op reads on
/// `backend` (e.g. "x86"); else an invalid_argument naming the knob, the op and the allowed
/// names (or saying there are none). A knob that nothing reads would otherwise be accepted and
/// silently ignored. Values are checked where each backend reads them.
Status check_knob_names(std::string_view backend, const OpSpec& spec, const Config& config,
                        std::span<const std::string_view> allowed);

/// Whether a backend serves a spec on a target, and why not.
struct Support {
  bool ok = true;
  std::string reason;  ///< why not, naming the parameter and the values this backend serves
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
};

/// What lowering produces: bytes that can be cached on disk and loaded in another process.
struct Artifact {
  std::vector<uint8_t> code;  ///< position-independent machine code (x86), cubin, object...
  std::string source;         ///< generated source (CUDA, LLVM IR) when there is one
  std::string log;            ///< compiler report (ptxas registers/spills, ...)
  Config config;              ///< the config it was generated with
};

/// A loaded kernel, ready to run. Immutable and safe to call from several threads.
class Executable {
 public:
  virtual ~Executable() = default;
  /// Runs the kernel on `args` (already checked against the spec by the caller). Returns an
  /// error only for data-dependent problems found before anything is written (e.g. a slot
  /// outside the cache in checked mode).
  virtual Status run(const KernelArgs& args) const = 0;
  /// Entry address of the machine code, when there is machine code (for disassembly and perf
  /// maps); nullptr otherwise.
  virtual const void* code_address() const { return nullptr; }
  virtual size_t code_size() const { return 0; }
};

/// One code generator. Implementations are stateless (or internally synchronised).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  /// Whether this backend serves `spec` on `target`; the reason names the parameter.
  virtual Support supports(const OpSpec& spec, const Target& target) const = 0;
  /// Whether this backend generates `op` at all on `target` (for some specs): what `kiln list`
  /// shows and what makes a fallback worth a warning. By default: the op's default spec is
  /// supported (backends that check sizes in supports() override this).
  virtual bool generates(OpKind op, const Target& target) const {
    return supports(OpSpec::defaults(op), target).ok;
  }
  /// The tuning space for `spec` (the first entry is the heuristic default).
  virtual std::vector<Config> configs(const OpSpec& spec, const Target& target) const = 0;
  /// Generates code for `spec` with `config`.
  virtual Result<Artifact> lower(const OpSpec& spec, const Config& config,
                                 const Target& target) const = 0;
  /// Turns an artifact (fresh or read from the disk cache) into a runnable kernel.
  virtual Result<std::shared_ptr<const Executable>> load(const OpSpec& spec,
                                                         const Artifact& artifact,
                                                         const Target& target) const = 0;
  /// Version of this generator's output; bump on any change to the generated code so stale
  /// disk-cache entries stop matching.
  virtual std::string_view codegen_version() const = 0;
  /// Whether artifacts are worth caching on disk (false for the ref backend: no code).
  virtual bool cacheable() const { return true; }
};

}  // namespace jit
