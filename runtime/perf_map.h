// perf map: lets `perf report` name JIT code (see perf's jit-interface documentation).
#pragma once

#include <cstddef>
#include <string_view>

namespace jit::runtime {

/// Appends "<address> <size> <name>" to /tmp/perf-<pid>.map. Thread-safe; errors are ignored
/// (profiling aid only) but logged once.
void perf_map_add(const void* code, size_t size, std::string_view name);

}  // namespace jit::runtime
