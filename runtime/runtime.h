// jit::compile and the runtime behind it: dispatch over backends, the in-memory and disk
// caches, strict mode, dumps and perf maps.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "codegen/backend.h"
#include "codegen/target.h"
#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/status.h"

namespace jit {

namespace runtime {
class DiskCache;
class TuningDb;
}  // namespace runtime

/// The kiln version ("0.1.0"), as recorded in tuning databases.
std::string_view kiln_version();

/// Per-call choices for `compile`. Unset fields use the runtime's defaults (environment).
struct CompileOptions {
  std::optional<BackendKind> backend;  ///< only this backend (error if it cannot serve the spec)
  std::optional<X86Isa> isa;           ///< cap the x86 ISA (overrides KILN_ISA)
  /// Generate for this target instead of the machine's (e.g. cuda:sm_90 offline, without a
  /// GPU); dispatch then considers only its backend. Unset: cuda kernels target device 0's
  /// arch (or KILN_CUDA_ARCH, else sm_90, when there is no GPU).
  std::optional<Target> target;
  std::optional<Config> config;  ///< this config instead of the default
  bool use_disk_cache = true;    ///< false: neither read nor write the disk cache
  /// Rows (tokens) the caller is about to run; jit::ops set it from the tensors' shapes. When
  /// the tuning database has an entry for this spec, this target and the power-of-two bucket
  /// of the hint (runtime::token_bucket), its config is used instead of the default. Ignored
  /// when `config` is set. The in-memory cache keys on the bucket only for tuned buckets, so
  /// an untuned spec is compiled once whatever the hint.
  std::optional<int64_t> tokens_hint;
};

/// Where a kernel came from.
enum class KernelSource : uint8_t { kGenerated, kDiskCache, kMemoryCache };
std::string_view kernel_source_name(KernelSource source);

/// What `compile` did, for `kiln compile`, logs and benchmarks.
struct KernelInfo {
  std::string spec_text;  ///< canonical spec
  BackendKind backend = BackendKind::kRef;
  Target target;
  Config config;
  KernelSource source = KernelSource::kGenerated;
  size_t code_size = 0;              ///< bytes of machine code (0 for ref)
  double generate_us = 0;            ///< code generation (0 on a disk hit)
  double total_us = 0;               ///< the whole compile call, lookups included
  std::string cache_key;             ///< disk-cache entry hash ("" when not cached)
  std::vector<std::string> skipped;  ///< "backend: reason" for each backend passed over
  int64_t token_bucket = 0;          ///< the tuned bucket used (0: no tuning entry applied)
};

/// A compiled kernel. Cheap to copy (shared); immutable; callable from several threads.
class Kernel {
 public:
  Kernel() = default;
  Kernel(OpSpec spec, std::shared_ptr<const Executable> executable, KernelInfo info);

  /// Checks `args` against the spec (jit::check_args) and runs; nothing is written when
  /// the check fails.
  Status run(const KernelArgs& args) const;
  /// Runs without the argument check (for callers that already checked).
  Status run_unchecked(const KernelArgs& args) const { return executable_->run(args); }

  const OpSpec& spec() const { return spec_; }
  const KernelInfo& info() const { return *info_; }
  const void* code() const { return executable_ ? executable_->code_address() : nullptr; }
  size_t code_size() const { return executable_ ? executable_->code_size() : 0; }
  /// Disassembly of the machine code through objdump (an error when objdump is missing or
  /// the kernel has no machine code).
  Result<std::string> disassembly() const;

 private:
  OpSpec spec_;
  std::shared_ptr<const Executable> executable_;
  std::shared_ptr<const KernelInfo> info_;
};

/// Runtime settings. `from_environment` reads KILN_CACHE_DIR, KILN_CACHE_MAX_BYTES,
/// KILN_DISK_CACHE (0 disables), KILN_DUMP_DIR, KILN_ISA, KILN_STRICT, KILN_PERF_MAP,
/// KILN_TUNE_DB (default <cache dir>/tuning.json) and KILN_RECORD.
struct RuntimeOptions {
  std::filesystem::path cache_dir;  ///< empty: no disk cache
  uint64_t cache_max_bytes = uint64_t(1) << 30;
  std::filesystem::path dump_dir;  ///< empty: no dumps
  X86Isa isa_cap = X86Isa::kAmx;
  bool strict = false;    ///< compiles after `seal()` are errors
  bool perf_map = false;  ///< append JIT symbols to /tmp/perf-<pid>.map
  /// Tuning database read at construction (empty: none). A missing file is an empty
  /// database; a corrupt one is logged and ignored.
  std::filesystem::path tuning_db;
  /// When set, the canonical text of every spec this runtime compiles (not memory hits) is
  /// appended to this file, one per line, each spec once (lines already in the file count):
  /// the file is a prewarm manifest to replay with jit::prewarm / `kiln prewarm`.
  std::filesystem::path record_path;
  Status environment_error;  ///< a malformed variable; every compile reports it

  static RuntimeOptions from_environment();
};

/// Counters of one runtime (for `kiln cache stats` and tests).
struct RuntimeCounters {
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t generated = 0;
  uint64_t errors = 0;
};

/// Owns the caches and the backends. `Runtime::global()` serves `jit::compile`; tests and
/// tools may create their own with explicit options.
class Runtime {
 public:
  explicit Runtime(RuntimeOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The process-wide runtime, configured from the environment on first use.
  static Runtime& global();

  /// Compiles (or finds) the kernel of `spec`. Thread-safe: concurrent callers of one key
  /// wait for a single compile; processes sharing a cache directory compile a key once.
  Result<Kernel> compile(const OpSpec& spec, const CompileOptions& options = {});

  /// After this, in strict mode, any compile that is not an in-memory hit is an error.
  void seal() { sealed_ = true; }
  bool sealed() const { return sealed_; }

  /// Replaces the tuning database `compile` consults (thread-safe; kernels already in memory
  /// keep their configs). Entries whose spec does not parse are logged and skipped.
  void set_tuning_db(runtime::TuningDb db);
  /// A copy of the tuning database in use.
  runtime::TuningDb tuning_db() const;
  /// The token buckets the tuning database holds entries for `spec` (any target), ascending.
  std::vector<int64_t> tuned_buckets(const OpSpec& spec) const;

  /// The disk cache, or nullptr when disabled or unusable (the reason is in cache_status()).
  runtime::DiskCache* disk_cache() const;
  const Status& cache_status() const;
  RuntimeCounters counters() const;
  /// The backends, in dispatch order.
  std::vector<const Backend*> backends() const;
  const RuntimeOptions& options() const { return options_; }

 private:
  struct State;
  /// Appends `spec_text` to options_.record_path unless already there (KILN_RECORD).
  void record(const std::string& spec_text);

  RuntimeOptions options_;
  std::atomic<bool> sealed_{false};
  std::unique_ptr<State> state_;
};

/// Compiles `spec` with the global runtime (see Runtime::compile).
Result<Kernel> compile(const OpSpec& spec, const CompileOptions& options = {});

}  // namespace jit
