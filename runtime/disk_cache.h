// The on-disk kernel cache: one file per entry, checked on every read.
//
// Entry file `<dir>/<hash>.kiln`: a fixed header (magic "KILNCAC1", format version, sizes),
// the full key text, the payload (config, code, source, log) and an xxh3-64 checksum of
// everything before it. Writes go to a temporary file in the same directory and are renamed
// into place (atomic). An advisory lock per key (flock on `<dir>/locks/<hash>.lock`) lets
// several processes compile a key once. A size cap evicts least-recently-used entries (entry
// mtime is refreshed on every hit). The directory is created 0700 and refused when owned by
// another user or writable by group/others. Any entry that fails a check (magic, version,
// key, sizes, checksum) is a miss: it is removed and the reason logged, never loaded.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/backend.h"
#include "ir/op_spec.h"
#include "ir/status.h"

namespace jit::runtime {

/// Identity of a cache entry. `text` spells out everything that determines the code:
/// canonical spec, config, target fingerprint, codegen version, toolchain version. The file
/// name is the xxh3-128 of `text`; the text itself is stored in the entry and compared on read,
/// so a hash collision is a miss, not a wrong kernel.
struct CacheKey {
  std::string text;
  /// 32 hex digits naming the entry file.
  std::string hash_hex() const;
};

/// Builds the key text from its parts ("spec|config|target|codegen|toolchain").
CacheKey make_cache_key(const OpSpec& spec, const Config& config, std::string_view target,
                        std::string_view codegen_version, std::string_view toolchain_version);

/// Parses Config::to_string() text back ("default" or "name=value,..."); nullopt when
/// malformed (a knob without '=', a value that is not an integer).
std::optional<Config> parse_config(std::string_view text);

struct DiskCacheOptions {
  std::filesystem::path dir;                      ///< created (0700) when missing
  uint64_t max_bytes = uint64_t(1) << 30;         ///< size cap over all entries
  std::chrono::milliseconds lock_timeout{30000};  ///< waiting for another compiler of a key
};

/// One entry as listed by `kiln cache ls`.
struct CacheEntryInfo {
  std::string hash;
  std::string key_text;  ///< empty when the header cannot be read
  uint64_t bytes = 0;
  std::filesystem::file_time_type last_used;
};

struct CacheStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t max_bytes = 0;
};

/// Result of `verify`: every entry checked; bad ones removed.
struct CacheVerifyReport {
  uint64_t checked = 0;
  uint64_t removed = 0;
  std::vector<std::string> problems;  ///< "<hash>: <reason>"
};

/// The target fingerprint field of a key text built by make_cache_key ("" when malformed).
std::string_view cache_key_target(std::string_view key_text);

/// What `export_bundle` wrote.
struct BundleExportReport {
  uint64_t entries = 0;
  uint64_t bytes = 0;  ///< size of the bundle file
};

/// What `import_bundle` stored.
struct BundleImportReport {
  std::string target;
  uint64_t entries = 0;
};

/// Holds the per-key advisory lock; released on destruction.
class CacheKeyLock {
 public:
  CacheKeyLock() = default;
  explicit CacheKeyLock(int fd) : fd_(fd) {}
  CacheKeyLock(CacheKeyLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  CacheKeyLock& operator=(CacheKeyLock&& other) noexcept;
  ~CacheKeyLock();

 private:
  int fd_ = -1;
};

/// A cache directory. Thread-safe; several processes may share one directory.
class DiskCache {
 public:
  /// Opens (creating if needed) the directory; fails with kCacheError when it is owned by
  /// another user, is writable by group or others, or cannot be created.
  static Result<std::unique_ptr<DiskCache>> open(DiskCacheOptions options);

  /// The default directory: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
  static std::filesystem::path default_dir();

  /// The entry for `key`, or nullopt on a miss. A corrupt, truncated or mismatched entry is
  /// removed, logged (category cache) and reported as a miss. Refreshes the entry's mtime.
  std::optional<Artifact> load(const CacheKey& key);

  /// Writes the entry atomically (temp file + rename), then evicts LRU entries over the cap.
  Status store(const CacheKey& key, const Artifact& artifact);

  /// Takes the advisory lock of `key`, waiting up to the lock timeout (kTimeout after).
  Result<CacheKeyLock> lock(const CacheKey& key);

  /// Every entry, most recently used first (temp files of unfinished stores are not listed).
  std::vector<CacheEntryInfo> list() const;
  /// Entry count and total bytes of the entries (temp files not counted), and the cap.
  CacheStats stats() const;
  /// Reads and checks every entry, removing the bad ones.
  CacheVerifyReport verify();
  /// Removes every entry (and lock file); returns how many entries were removed.
  Result<uint64_t> clear();

  /// Packs every valid entry whose key names `target` (a Target::fingerprint) into one bundle
  /// file at `path`, written atomically. Bundle layout: magic "KILNBND1", format version,
  /// header size, entry count, target text, then per entry its size and the entry file's
  /// bytes as stored, then an xxh3-64 of every byte before it. Corrupt entries are skipped
  /// (and removed, as `load` would). Zero matching entries is an error naming the target.
  Result<BundleExportReport> export_bundle(const std::filesystem::path& path,
                                           std::string_view target);
  /// Verifies a bundle (magic, version, sizes, checksum: kCacheError when damaged or
  /// tampered with) and its target (kUnsupported when it is not `expected_target`), then
  /// stores each entry through `store`, so every entry is checked again on load. Nothing is
  /// stored unless the whole bundle checks out.
  Result<BundleImportReport> import_bundle(const std::filesystem::path& path,
                                           std::string_view expected_target);

  const std::filesystem::path& dir() const { return options_.dir; }

 private:
  explicit DiskCache(DiskCacheOptions options) : options_(std::move(options)) {}
  /// Removes least-recently-used entries until the total is within the cap; never removes
  /// `keep_hash` (the entry just written), even when it alone exceeds the cap.
  void evict_to_cap(const std::string& keep_hash);

  DiskCacheOptions options_;
};

}  // namespace jit::runtime
