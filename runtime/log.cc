#include "runtime/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace jit {
namespace {

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

LogSink& sink_slot() {
  static LogSink sink;
  return sink;
}

unsigned parse_verbose(const char* text) {
  if (text == nullptr) return 0;
  unsigned mask = 0;
  std::string_view rest(text);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (item == "all" || item == "1") mask |= kLogCache | kLogDispatch | kLogCompile;
    if (item == "cache") mask |= kLogCache;
    if (item == "dispatch") mask |= kLogDispatch;
    if (item == "compile") mask |= kLogCompile;
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return mask;
}

std::atomic<unsigned>& category_mask() {
  static std::atomic<unsigned> mask{parse_verbose(std::getenv("KILN_VERBOSE"))};
  return mask;
}

const char* level_prefix(LogLevel level) {
  switch (level) {
    case LogLevel::kWarning: return "warning: ";
    case LogLevel::kError: return "error: ";
    default: return "";
  }
}

}  // namespace

LogSink set_log_sink(LogSink sink) {
  std::lock_guard lock(sink_mutex());
  LogSink previous = std::move(sink_slot());
  sink_slot() = std::move(sink);
  return previous;
}

unsigned set_log_categories(unsigned mask) {
  return category_mask().exchange(mask);
}

unsigned log_categories() {
  return category_mask().load(std::memory_order_relaxed);
}

void log_message(LogLevel level, std::string_view message) {
  std::lock_guard lock(sink_mutex());
  if (sink_slot()) {
    sink_slot()(level, message);
    return;
  }
  std::fprintf(stderr, "kiln: %s%.*s\n", level_prefix(level), int(message.size()), message.data());
}

}  // namespace jit
