// The kiln subcommands implemented outside tools/kiln.cc.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace jit::tools
