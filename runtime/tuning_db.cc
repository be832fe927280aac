#include "runtime/tuning_db.h"

#include <fmt/format.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <system_error>
#include <type_traits>

#include "runtime/log.h"

namespace jit::runtime {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kFormat = "kiln-tuning-db";
constexpr int kVersion = 1;

// Reads field `name` of entry `index` with the JSON type `Want`; the error names both.
template <class T>
Status read_field(const json& entry, size_t index, const char* name, T* value) {
  const auto it = entry.find(name);
  if (it == entry.end()) {
    return invalid_argument(fmt::format("entries[{}]: missing field '{}'", index, name));
  }
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) {
      return invalid_argument(fmt::format("entries[{}].{}: expected a string", index, name));
    }
  } else if constexpr (std::is_same_v<T, int64_t>) {
    if (!it->is_number_integer()) {
      return invalid_argument(fmt::format("entries[{}].{}: expected an integer", index, name));
    }
  } else {
    if (!it->is_number()) {
      return invalid_argument(fmt::format("entries[{}].{}: expected a number", index, name));
    }
  }
  *value = it->get<T>();
  return Status::ok();
}

Result<TuningEntry> parse_entry(const json& item, size_t index) {
  if (!item.is_object()) {
    return invalid_argument(fmt::format("entries[{}]: expected an object", index));
  }
  TuningEntry e;
  KILN_RETURN_IF_ERROR(read_field(item, index, "spec", &e.spec));
  KILN_RETURN_IF_ERROR(read_field(item, index, "token_bucket", &e.token_bucket));
  KILN_RETURN_IF_ERROR(read_field(item, index, "target", &e.target));
  KILN_RETURN_IF_ERROR(read_field(item, index, "backend", &e.backend));
  KILN_RETURN_IF_ERROR(read_field(item, index, "config", &e.config));
  KILN_RETURN_IF_ERROR(read_field(item, index, "time_us", &e.time_us));
  KILN_RETURN_IF_ERROR(read_field(item, index, "default_time_us", &e.default_time_us));
  KILN_RETURN_IF_ERROR(read_field(item, index, "speedup", &e.speedup));
  KILN_RETURN_IF_ERROR(read_field(item, index, "kiln_version", &e.kiln_version));
  KILN_RETURN_IF_ERROR(read_field(item, index, "date", &e.date));
  if (e.token_bucket < 1 || !std::has_single_bit(uint64_t(e.token_bucket))) {
    return invalid_argument(fmt::format("entries[{}].token_bucket: {} is not a power of two >= 1",
                                        index, e.token_bucket));
  }
  if (!(e.time_us > 0) || !(e.default_time_us > 0)) {
    return invalid_argument(
        fmt::format("entries[{}]: time_us ({}) and default_time_us ({}) must be positive", index,
                    e.time_us, e.default_time_us));
  }
  if (e.spec.empty() || e.target.empty() || e.config.empty()) {
    return invalid_argument(
        fmt::format("entries[{}]: spec, target and config must be non-empty", index));
  }
  return e;
}

}  // namespace

int64_t token_bucket(int64_t tokens) {
  if (tokens <= 1) return 1;
  return int64_t(std::bit_ceil(uint64_t(tokens)));
}

std::string tuning_key(std::string_view spec, int64_t bucket, std::string_view target) {
  return fmt::format("{}|{}|{}", spec, bucket, target);
}

std::string TuningEntry::key() const {
  return tuning_key(spec, token_bucket, target);
}

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

Result<TuningDb> TuningDb::parse(std::string_view json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    return invalid_argument(fmt::format("not valid JSON: {}", e.what()));
  }
  if (!root.is_object()) return invalid_argument("expected a JSON object at the top level");
  if (root.value("format", std::string()) != kFormat) {
    return invalid_argument(fmt::format("field 'format' must be \"{}\"", kFormat));
  }
  const auto version = root.find("version");
  if (version == root.end() || !version->is_number_integer() || version->get<int>() != kVersion) {
    return invalid_argument(
        fmt::format("field 'version' must be {} (this kiln's format)", kVersion));
  }
  const auto entries = root.find("entries");
  if (entries == root.end() || !entries->is_array()) {
    return invalid_argument("field 'entries' must be an array");
  }
  TuningDb db;
  for (size_t i = 0; i < entries->size(); ++i) {
    Result<TuningEntry> entry = parse_entry((*entries)[i], i);
    if (!entry.is_ok()) return entry.status();
    // Duplicates within one file are resolved as a merge would.
    db.merge(entry.value());
  }
  return db;
}

Result<TuningDb> TuningDb::read(const fs::path& path) {
  std::error_code error;
  if (!fs::exists(path, error)) return TuningDb();
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("cannot open: {}", std::system_category().message(errno)));
  }
  std::stringstream text;
  text << file.rdbuf();
  return parse(text.str());
}

TuningDb TuningDb::load_or_warn(const fs::path& path) {
  Result<TuningDb> db = read(path);
  if (db.is_ok()) return std::move(db).value();
  log_warning("tuning database {} ignored (default configs are used): {}", path.string(),
              db.status().message());
  return TuningDb();
}

std::string TuningDb::to_json() const {
  json entries = json::array();
  for (const auto& [key, e] : entries_) {
    entries.push_back({{"spec", e.spec},
                       {"token_bucket", e.token_bucket},
                       {"target", e.target},
                       {"backend", e.backend},
                       {"config", e.config},
                       {"time_us", e.time_us},
                       {"default_time_us", e.default_time_us},
                       {"speedup", e.speedup},
                       {"kiln_version", e.kiln_version},
                       {"date", e.date}});
  }
  json root = {{"format", kFormat}, {"version", kVersion}, {"entries", std::move(entries)}};
  return root.dump(2) + "\n";
}

Status TuningDb::save(const fs::path& path) const {
  std::error_code error;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), error);
  // A unique temp name beside the target: concurrent savers never share one, and rename()
  // replaces the file atomically (readers see the old or the new database, never half).
  const fs::path temp =
      path.string() + fmt::format(".tmp.{}.{:x}", ::getpid(), std::random_device{}());
  {
    std::ofstream file(temp, std::ios::binary | std::ios::trunc);
    file << to_json();
    if (!file.flush()) {
      fs::remove(temp, error);
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("cannot write tuning database {}", temp.string()));
    }
  }
  fs::rename(temp, path, error);
  if (error) {
    fs::remove(temp, error);
    return Status(
        StatusCode::kInvalidArgument,
        fmt::format("cannot rename {} to {}: {}", temp.string(), path.string(), error.message()));
  }
  return Status::ok();
}

void TuningDb::put(TuningEntry entry) {
  std::string key = entry.key();
  entries_.insert_or_assign(std::move(key), std::move(entry));
}

bool TuningDb::merge(const TuningEntry& entry) {
  auto [it, inserted] = entries_.try_emplace(entry.key(), entry);
  if (inserted) return true;
  if (entry.time_us < it->second.time_us) {
    it->second = entry;
    return true;
  }
  return false;
}

size_t TuningDb::merge(const TuningDb& other) {
  size_t kept = 0;
  for (const auto& [key, entry] : other.entries_) kept += merge(entry) ? 1 : 0;
  return kept;
}

const TuningEntry* TuningDb::find(std::string_view spec, int64_t bucket,
                                  std::string_view target) const {
  const auto it = entries_.find(tuning_key(spec, bucket, target));
  return it == entries_.end() ? nullptr : &it->second;
}

}  // namespace jit::runtime
