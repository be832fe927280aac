// Logging with a replaceable sink. Categories switch on with KILN_VERBOSE (comma list:
// cache,dispatch,compile,all); warnings and errors are always emitted.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <string_view>

namespace jit {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

/// Verbose categories (bit flags).
enum LogCategory : unsigned {
  kLogCache = 1u << 0,     ///< disk-cache hits, misses, evictions, corruption
  kLogDispatch = 1u << 1,  ///< backend choice and skip reasons
  kLogCompile = 1u << 2,   ///< code generation timings
};

/// Receives every emitted message. The default sink writes "kiln: <message>" to stderr.
using LogSink = std::function<void(LogLevel level, std::string_view message)>;

/// Replaces the sink (nullptr restores the default); returns the previous one. Thread-safe.
LogSink set_log_sink(LogSink sink);

/// Enables categories (overrides KILN_VERBOSE); returns the previous mask.
unsigned set_log_categories(unsigned mask);
/// The enabled categories (first call reads KILN_VERBOSE).
unsigned log_categories();

/// Emits `message` at `level` to the sink.
void log_message(LogLevel level, std::string_view message);

/// Emits a debug message when `category` is enabled.
template <class... Args>
void log_verbose(LogCategory category, fmt::format_string<Args...> format, Args&&... args) {
  if (log_categories() & category) {
    log_message(LogLevel::kInfo, fmt::format(format, std::forward<Args>(args)...));
  }
}

template <class... Args>
void log_warning(fmt::format_string<Args...> format, Args&&... args) {
  log_message(LogLevel::kWarning, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace jit
