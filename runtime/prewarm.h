// Prewarm: compile a manifest of specs in parallel at startup, then seal the runtime so that
// strict mode (KILN_STRICT=1) turns any later compile into an error.
//
// A manifest is either text, one canonical spec per line ('#' starts a comment, blank lines
// are skipped), or a JSON array of spec strings. KILN_RECORD=path makes a process append every
// spec it compiles to `path` in the text form: that file is the manifest to replay.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "ir/op_spec.h"
#include "ir/status.h"
#include "runtime/runtime.h"

namespace jit {

/// Reads a manifest (text or JSON array, see above). Duplicates are dropped (first kept).
/// Errors name the file and line (or array index) and what is wrong with the spec.
Result<std::vector<OpSpec>> read_manifest(const std::filesystem::path& path);
/// As read_manifest, from the manifest's contents; `name` is used in error messages.
Result<std::vector<OpSpec>> parse_manifest(std::string_view text, std::string_view name);

struct PrewarmOptions {
  int threads = 0;   ///< compile threads; 0: std::thread::hardware_concurrency()
  bool seal = true;  ///< seal the runtime when done (strict mode then rejects other compiles)
  /// The options every kernel is compiled with (backend, target, config), e.g. a CUDA target
  /// to prewarm GPU kernels. Tuned buckets (the host's tuning database) are compiled only for
  /// the host's x86 kernels: no target, no config, no backend other than x86.
  CompileOptions compile;
  /// Called after each kernel (from the compiling threads, one call at a time).
  std::function<void(size_t done, size_t total)> progress;
};

struct PrewarmReport {
  size_t specs = 0;        ///< distinct specs in the manifest
  size_t kernels = 0;      ///< compiles done: one per spec plus one per tuned token bucket
  uint64_t generated = 0;  ///< of those, generated now
  uint64_t disk_hits = 0;  ///< loaded from the disk cache
  uint64_t memory_hits = 0;
  std::vector<std::string> failures;  ///< "<spec>: <reason>"
  double wall_ms = 0;
};

/// Compiles every spec of `specs` on `runtime` with `options.threads` threads; a spec with
/// tuning-database entries is also compiled for each tuned token bucket, so that jit::ops
/// calls (which pass a tokens hint) find their kernel in memory. Failures are collected, not
/// fatal; the runtime is sealed afterwards when options.seal.
PrewarmReport prewarm(Runtime& runtime, const std::vector<OpSpec>& specs,
                      const PrewarmOptions& options = {});

/// Prewarms the global runtime from the manifest at `path` with `threads` threads (0: all
/// cores) and `compile` options (default: the host's best backend), drawing a progress line on
/// stderr when it is a terminal. An error when the manifest cannot be read or any spec fails
/// to compile (the message lists them).
Result<PrewarmReport> prewarm(const std::filesystem::path& path, int threads = 0,
                              const CompileOptions& compile = {});

}  // namespace jit
