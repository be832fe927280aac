// The kiln subcommands implemented outside tools/kiln.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/status.h"
#include "runtime/runtime.h"

namespace jit::tools {

/// Prints "kiln: <status>" to stderr and returns the exit code for it
/// (0 ok, 1 failure, 2 bad input, 3 unsupported).
int report(const Status& status);

/// Parses --backend/--isa values into CompileOptions (errors name the flag).
Result<CompileOptions> compile_options(const std::string& backend, const std::string& isa);

/// `kiln check SPEC`: runs the chosen backend against ref on random and edge inputs over a
/// sweep of token counts (or `tokens` when > 0); exit 0 when every case passes.
int cmd_check(const std::string& spec_text, int64_t tokens, const CompileOptions& options);

/// `kiln demo`: a Llama-style decode step (rms_norm -> rotary -> silu_and_mul) on the CPU.
int cmd_demo();

/// Arguments of `kiln tune`.
struct TuneArgs {
  std::vector<std::string> ops;  ///< op names (a representative spec each); empty: a default set
  std::string manifest;          ///< specs to tune (a prewarm manifest); overrides `ops`
  double budget_seconds = 0;     ///< 0: no limit
  std::vector<int64_t> tokens;   ///< token counts (each tuned in its power-of-two bucket)
  std::string db;                ///< database path; empty: KILN_TUNE_DB or <cache>/tuning.json
  bool json = false;
};

/// `kiln tune`: tunes each spec at each token count with a progress bar, prints a summary
/// table and writes the winners to the tuning database; exit 1 when a spec could not be tuned.
int cmd_tune(const TuneArgs& args);

/// `kiln prewarm FILE`: compiles the manifest with `threads` threads (0: one per core) and
/// `compile` options (the target) into the disk cache; exit 1 when a spec fails.
int cmd_prewarm(const std::string& manifest, int threads, const CompileOptions& compile, bool json);

}  // namespace jit::tools
