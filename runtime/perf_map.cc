#include "runtime/perf_map.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>

#include "runtime/log.h"

namespace jit::runtime {

void perf_map_add(const void* code, size_t size, std::string_view name) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  const std::string path = fmt::format("/tmp/perf-{}.map", getpid());
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    static bool warned = false;
    if (!warned) log_warning("perf map: cannot open {}", path);
    warned = true;
    return;
  }
  fmt::print(file, "{:x} {:x} kiln:{}\n", reinterpret_cast<uintptr_t>(code), size, name);
  std::fclose(file);
}

}  // namespace jit::runtime
