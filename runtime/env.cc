// RuntimeOptions::from_environment: the KILN_* variables.
#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "runtime/disk_cache.h"
#include "runtime/runtime.h"

namespace jit {
namespace {

std::string_view env(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string_view(value) : std::string_view();
}

bool env_flag(const char* name) {
  const std::string_view v = env(name);
  return !v.empty() && v != "0" && v != "false";
}

}  // namespace

RuntimeOptions RuntimeOptions::from_environment() {
  RuntimeOptions options;
  const std::string_view disk = env("KILN_DISK_CACHE");
  if (disk != "0" && disk != "false") options.cache_dir = runtime::DiskCache::default_dir();
  if (const std::string_view max = env("KILN_CACHE_MAX_BYTES"); !max.empty()) {
    uint64_t bytes = 0;
    auto [end, ec] = std::from_chars(max.data(), max.data() + max.size(), bytes);
    if (ec != std::errc() || end != max.data() + max.size() || bytes == 0) {
      options.environment_error = invalid_argument(
          fmt::format("KILN_CACHE_MAX_BYTES='{}' is not a positive integer (bytes)", max));
    } else {
      options.cache_max_bytes = bytes;
    }
  }
  options.dump_dir = std::string(env("KILN_DUMP_DIR"));
  if (const std::string_view isa = env("KILN_ISA"); !isa.empty()) {
    if (!parse_x86_isa(isa, &options.isa_cap) || options.isa_cap == X86Isa::kNone) {
      options.environment_error = invalid_argument(fmt::format(
          "KILN_ISA='{}' is not an ISA level (allowed: {})", isa, x86_isa_level_names()));
      options.isa_cap = X86Isa::kAmx;
    }
  }
  options.strict = env_flag("KILN_STRICT");
  options.perf_map = env_flag("KILN_PERF_MAP");
  // The tuning database sits beside the kernels it was measured for unless placed elsewhere;
  // it is read even with the disk cache off (tuning is about configs, not cached code).
  if (const std::string_view db = env("KILN_TUNE_DB"); !db.empty()) {
    options.tuning_db = std::string(db);
  } else {
    options.tuning_db = runtime::DiskCache::default_dir() / "tuning.json";
  }
  options.record_path = std::string(env("KILN_RECORD"));
  return options;
}

}  // namespace jit
