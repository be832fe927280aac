// The tuning database: which config won for a spec, a shape bucket and a target.
//
// Written by the autotuner (`kiln tune`, autotune/), read by `compile` (runtime.cc). It lives
// with the runtime rather than in autotune/ because every process that compiles reads it
// (KILN_TUNE_DB) while only the tuner links the timing machinery.
//
// File format (JSON, one object):
//   {"format": "kiln-tuning-db", "version": 1,
//    "entries": [{"spec": "<canonical spec>", "token_bucket": 1, "target": "x86-avx512",
//                 "backend": "x86", "config": "threads=1,min_parallel_kib=64",
//                 "time_us": 1.9, "default_time_us": 3.1, "speedup": 1.63,
//                 "kiln_version": "0.1.0", "date": "2025-05-01T12:00:00Z"}, ...]}
// An entry's key is spec + token bucket + target fingerprint; entries are saved sorted by key
// so that files from several machines diff and merge cleanly.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "ir/status.h"

namespace jit::runtime {

/// The shape bucket of a token count: the smallest power of two >= tokens (1 for tokens <= 1).
/// A tuned config is chosen per bucket: 1 (decode), 2, 4, ... 512, ...
int64_t token_bucket(int64_t tokens);

/// One tuned result.
struct TuningEntry {
  std::string spec;            ///< canonical spec text (to_string(OpSpec))
  int64_t token_bucket = 1;    ///< power of two (see token_bucket)
  std::string target;          ///< Target::fingerprint the times were measured on
  std::string backend;         ///< backend_name() of the backend the config belongs to
  std::string config;          ///< Config::to_string() of the winner
  double time_us = 0;          ///< median time of the winner (microseconds, > 0)
  double default_time_us = 0;  ///< median time of the backend's default config
  double speedup = 1;          ///< default_time_us / time_us
  std::string kiln_version;    ///< kiln that measured it
  std::string date;            ///< UTC, ISO 8601 ("2025-05-01T12:00:00Z")

  /// "spec|bucket|target": the database key.
  std::string key() const;
};

/// The key of (spec, bucket, target), as TuningEntry::key() spells it.
std::string tuning_key(std::string_view spec, int64_t bucket, std::string_view target);

/// The current UTC time as ISO 8601, for TuningEntry::date.
std::string utc_now_iso8601();

/// A set of TuningEntry keyed by TuningEntry::key(). A value type; not synchronised.
class TuningDb {
 public:
  /// Parses the JSON text of a database file; errors name the entry and field that is wrong.
  static Result<TuningDb> parse(std::string_view json_text);
  /// Reads `path`: a missing file is an empty database; unreadable or malformed is an error.
  static Result<TuningDb> read(const std::filesystem::path& path);
  /// As `read`, but a corrupt or unreadable file is reported (log_warning with the path and
  /// the reason) and ignored: the result is then empty and compiles use default configs.
  static TuningDb load_or_warn(const std::filesystem::path& path);

  /// The JSON text of the database (entries sorted by key).
  std::string to_json() const;
  /// Writes the JSON atomically (temp file in the same directory, then rename); creates the
  /// parent directory when missing.
  Status save(const std::filesystem::path& path) const;

  /// Adds `entry`, replacing any entry of the same key (a fresh measurement on this machine).
  void put(TuningEntry entry);
  /// Adds `entry`; on a key conflict keeps the faster (smaller time_us) of the two. Returns
  /// whether `entry` was kept.
  bool merge(const TuningEntry& entry);
  /// Merges every entry of `other` (see merge(entry)); returns how many were kept.
  size_t merge(const TuningDb& other);

  /// The entry of (spec, bucket, target), or nullptr.
  const TuningEntry* find(std::string_view spec, int64_t bucket, std::string_view target) const;
  const std::map<std::string, TuningEntry, std::less<>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

 private:
  std::map<std::string, TuningEntry, std::less<>> entries_;
};

}  // namespace jit::runtime
