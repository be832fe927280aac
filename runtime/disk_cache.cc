#include "runtime/disk_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <random>
#include <system_error>
#include <thread>

#include "runtime/log.h"

namespace jit::runtime {
namespace fs = std::filesystem;

namespace {

// ---- Entry file format ----------------------------------------------------------------------
//
//   offset  size  field
//        0     8  magic "KILNCAC1"
//        8     4  format version (kFormatVersion)
//       12     4  header size (kHeaderSize), so a reader can tell a foreign layout from damage
//       16     8  key text size
//       24     8  config text size
//       32     8  code size
//       40     8  source size
//       48     8  log size
//       56        key text, config text, code, source, log (in that order, unpadded)
//      end-8   8  xxh3-64 of every byte before it
//
// Integers are little-endian whatever the host, so an entry means the same on every machine
// (the key's target fingerprint keeps foreign code from matching anyway).

constexpr std::array<char, 8> kMagic = {'K', 'I', 'L', 'N', 'C', 'A', 'C', '1'};
// Bundles (export/import): see DiskCache::export_bundle for the layout.
constexpr std::array<char, 8> kBundleMagic = {'K', 'I', 'L', 'N', 'B', 'N', 'D', '1'};
constexpr uint32_t kBundleVersion = 1;
constexpr uint32_t kBundleHeaderSize = 8 + 4 + 4 + 8 + 8;
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kSectionCount = 5;
constexpr uint32_t kHeaderSize = 8 + 4 + 4 + 8 * kSectionCount;
constexpr size_t kChecksumSize = 8;
constexpr std::string_view kEntrySuffix = ".kiln";
// Temp files are "<hash>.tmp.<pid>.<random>": never end in ".kiln", so they are never listed.
constexpr std::string_view kTempMarker = ".tmp.";
constexpr std::string_view kLockSuffix = ".lock";
constexpr const char* kLockDirName = "locks";
// Polling interval while another process holds a key lock: short next to a compile (tens of
// ms and up), long enough not to burn a core.
constexpr std::chrono::milliseconds kLockPoll{2};

void put_u32(std::string& dst, uint32_t value) {
  for (int i = 0; i < 4; ++i) dst.push_back(char((value >> (8 * i)) & 0xff));
}

void put_u64(std::string& dst, uint64_t value) {
  for (int i = 0; i < 8; ++i) dst.push_back(char((value >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view src, size_t offset, size_t width) {
  uint64_t value = 0;
  for (size_t i = 0; i < width; ++i) value |= uint64_t(uint8_t(src[offset + i])) << (8 * i);
  return value;
}

std::string errno_text(int error) {
  return std::system_category().message(error);
}

std::string hash_of_text(std::string_view text) {
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  return Hash128{h.low64, h.high64}.hex();
}

}  // namespace

std::optional<Config> parse_config(std::string_view text) {
  Config config;
  if (text == "default") return config;
  if (text.empty()) return std::nullopt;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) return std::nullopt;
    const std::string_view value_text = item.substr(eq + 1);
    int64_t value = 0;
    const auto [end, error] =
        std::from_chars(value_text.data(), value_text.data() + value_text.size(), value);
    if (error != std::errc() || end != value_text.data() + value_text.size() ||
        value_text.empty()) {
      return std::nullopt;
    }
    config.set(std::string(item.substr(0, eq)), value);
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return config;
}

namespace {

std::string serialize(const CacheKey& key, const Artifact& artifact) {
  const std::string config_text = artifact.config.to_string();
  std::string bytes;
  bytes.reserve(kHeaderSize + key.text.size() + config_text.size() + artifact.code.size() +
                artifact.source.size() + artifact.log.size() + kChecksumSize);
  bytes.append(kMagic.data(), kMagic.size());
  put_u32(bytes, kFormatVersion);
  put_u32(bytes, kHeaderSize);
  put_u64(bytes, key.text.size());
  put_u64(bytes, config_text.size());
  put_u64(bytes, artifact.code.size());
  put_u64(bytes, artifact.source.size());
  put_u64(bytes, artifact.log.size());
  bytes += key.text;
  bytes += config_text;
  bytes.append(reinterpret_cast<const char*>(artifact.code.data()), artifact.code.size());
  bytes += artifact.source;
  bytes += artifact.log;
  put_u64(bytes, XXH3_64bits(bytes.data(), bytes.size()));
  return bytes;
}

/// The sections of an entry as laid out in its header (views into the file bytes).
struct EntryView {
  std::string_view key_text;
  std::string_view config_text;
  std::string_view code;
  std::string_view source;
  std::string_view log;
};

/// Checks everything but the key: magic, version, header size, section sizes against the file
/// size, checksum. On failure returns the reason.
std::variant<EntryView, std::string> parse_entry(std::string_view bytes) {
  if (bytes.size() < kHeaderSize + kChecksumSize) {
    return fmt::format("truncated: {} bytes, smaller than header and checksum ({} bytes)",
                       bytes.size(), kHeaderSize + kChecksumSize);
  }
  if (std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    return std::string("bad magic (not a kiln cache entry)");
  }
  const uint64_t version = get_le(bytes, 8, 4);
  if (version != kFormatVersion) {
    return fmt::format("format version {}, expected {}", version, kFormatVersion);
  }
  const uint64_t header_size = get_le(bytes, 12, 4);
  if (header_size != kHeaderSize) {
    return fmt::format("header size {}, expected {}", header_size, kHeaderSize);
  }
  std::array<uint64_t, kSectionCount> sizes{};
  // Each size is bounded by the file size before summing, so the sum cannot overflow.
  uint64_t payload = 0;
  for (size_t i = 0; i < kSectionCount; ++i) {
    sizes[i] = get_le(bytes, 16 + 8 * i, 8);
    if (sizes[i] > bytes.size()) {
      return fmt::format("section sizes exceed the file size ({} bytes): truncated or damaged",
                         bytes.size());
    }
    payload += sizes[i];
  }
  const uint64_t expected = kHeaderSize + payload + kChecksumSize;
  if (expected != bytes.size()) {
    return fmt::format("file is {} bytes but its header describes {} bytes: {}", bytes.size(),
                       expected, bytes.size() < expected ? "truncated" : "trailing bytes");
  }
  const size_t body = bytes.size() - kChecksumSize;
  if (XXH3_64bits(bytes.data(), body) != get_le(bytes, body, 8)) {
    return std::string("checksum mismatch (damaged contents)");
  }
  std::array<std::string_view, kSectionCount> sections;
  size_t offset = kHeaderSize;
  for (size_t i = 0; i < kSectionCount; ++i) {
    sections[i] = bytes.substr(offset, sizes[i]);
    offset += sizes[i];
  }
  return EntryView{sections[0], sections[1], sections[2], sections[3], sections[4]};
}

/// The artifact of a checked entry; nullopt when its config text does not parse.
std::optional<Artifact> artifact_of(const EntryView& view) {
  std::optional<Config> config = parse_config(view.config_text);
  if (!config) return std::nullopt;
  Artifact artifact;
  artifact.code.assign(view.code.begin(), view.code.end());
  artifact.source = std::string(view.source);
  artifact.log = std::string(view.log);
  artifact.config = std::move(*config);
  return artifact;
}

/// An open file descriptor, closed on destruction.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

/// Reads the whole file behind `fd`; nullopt with errno set on an I/O error.
std::optional<std::string> read_all(int fd) {
  std::string bytes;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) bytes.reserve(size_t(st.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    if (n == 0) break;
    bytes.append(buffer, size_t(n));
  }
  return bytes;
}

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(size_t(n));
  }
  return true;
}

/// Removes `path` only if it is still the file `fd` read: another process may have renamed a
/// fresh, valid entry into place since, and that one must survive.
void remove_if_same_file(const fs::path& path, int fd) {
  struct stat opened {};
  struct stat current {};
  if (::fstat(fd, &opened) != 0 || ::stat(path.c_str(), &current) != 0) return;
  if (opened.st_dev == current.st_dev && opened.st_ino == current.st_ino) ::unlink(path.c_str());
}

bool is_entry_name(const std::string& name) {
  return name.size() > kEntrySuffix.size() && name.ends_with(kEntrySuffix) &&
         name.find(kTempMarker) == std::string::npos;
}

struct EntryFile {
  fs::path path;
  std::string hash;
  uint64_t bytes = 0;
  fs::file_time_type mtime;
};

/// Every entry file in `dir`. Files vanishing mid-scan (another process evicting) are skipped.
std::vector<EntryFile> scan_entries(const fs::path& dir) {
  std::vector<EntryFile> entries;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!is_entry_name(name)) continue;
    std::error_code stat_error;
    if (!it->is_regular_file(stat_error)) continue;
    EntryFile entry;
    entry.path = it->path();
    entry.hash = name.substr(0, name.size() - kEntrySuffix.size());
    entry.bytes = it->file_size(stat_error);
    if (stat_error) continue;
    entry.mtime = it->last_write_time(stat_error);
    if (stat_error) continue;
    entries.push_back(std::move(entry));
  }
  return entries;
}

/// Creates `dir` and its missing parents with mode 0700. Existing components are untouched.
Status create_private_dirs(const fs::path& dir) {
  fs::path prefix;
  for (const fs::path& part : dir) {
    prefix /= part;
    if (::mkdir(prefix.c_str(), 0700) == 0) {
      // The umask may have stripped bits; the owner needs rwx, nobody else anything.
      ::chmod(prefix.c_str(), 0700);
    } else if (errno != EEXIST) {
      return {StatusCode::kCacheError,
              fmt::format("cannot create cache directory {}: {}; set KILN_CACHE_DIR to a "
                          "writable location",
                          prefix.string(), errno_text(errno))};
    }
  }
  return Status::ok();
}

/// Refuses a directory another user could have planted code in.
Status check_private_dir(const fs::path& dir, std::string_view what) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return {StatusCode::kCacheError,
            fmt::format("cannot use {} {}: {}", what, dir.string(), errno_text(errno))};
  }
  if (!S_ISDIR(st.st_mode)) {
    return {StatusCode::kCacheError,
            fmt::format("{} {} exists but is not a directory; remove it or set KILN_CACHE_DIR "
                        "to another path",
                        what, dir.string())};
  }
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    return {StatusCode::kCacheError,
            fmt::format("{} {} is owned by uid {}, not by the current user (uid {}); kiln "
                        "refuses to load code another user could have written. Use a directory "
                        "you own (set KILN_CACHE_DIR) or fix the owner: chown {} {}",
                        what, dir.string(), st.st_uid, me, me, dir.string())};
  }
  if ((st.st_mode & 022) != 0) {
    return {StatusCode::kCacheError,
            fmt::format("{} {} is writable by group or others (mode {:04o}); another user could "
                        "plant code in it. Fix with: chmod 700 {}",
                        what, dir.string(), st.st_mode & 07777, dir.string())};
  }
  return Status::ok();
}

std::string random_suffix() {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  return fmt::format("{:016x}", engine());
}

fs::path entry_path(const fs::path& dir, const std::string& hash) {
  return dir / (hash + std::string(kEntrySuffix));
}

}  // namespace

std::string CacheKey::hash_hex() const {
  return hash_of_text(text);
}

CacheKey make_cache_key(const OpSpec& spec, const Config& config, std::string_view target,
                        std::string_view codegen_version, std::string_view toolchain_version) {
  return CacheKey{fmt::format("{}|{}|{}|{}|{}", to_string(spec), config.to_string(), target,
                              codegen_version, toolchain_version)};
}

std::string_view cache_key_target(std::string_view key_text) {
  // "spec|config|target|codegen|toolchain": counted from the right, so that a '|' inside the
  // spec text could never shift the field.
  size_t end = key_text.size();
  for (int field = 0; field < 2; ++field) {
    end = key_text.rfind('|', end - 1);
    if (end == std::string_view::npos || end == 0) return {};
  }
  const size_t begin = key_text.rfind('|', end - 1);
  if (begin == std::string_view::npos) return {};
  return key_text.substr(begin + 1, end - begin - 1);
}

CacheKeyLock& CacheKeyLock::operator=(CacheKeyLock&& other) noexcept {
  if (this != &other) {
    CacheKeyLock released(std::move(*this));
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

CacheKeyLock::~CacheKeyLock() {
  if (fd_ < 0) return;
  // Unlock explicitly: a forked child may share the open file description, and closing our
  // descriptor alone would then leave the key locked.
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

fs::path DiskCache::default_dir() {
  // Empty variables count as unset (as the XDG spec says for XDG_CACHE_HOME).
  const auto env = [](const char* name) -> const char* {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? value : nullptr;
  };
  if (const char* dir = env("KILN_CACHE_DIR")) return dir;
  if (const char* xdg = env("XDG_CACHE_HOME")) return fs::path(xdg) / "kiln";
  if (const char* home = env("HOME")) return fs::path(home) / ".cache" / "kiln";
  // No HOME (daemons, some containers): the password database still knows the home directory.
  if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_dir != nullptr) {
    return fs::path(pw->pw_dir) / ".cache" / "kiln";
  }
  return fs::path(".cache") / "kiln";
}

Result<std::unique_ptr<DiskCache>> DiskCache::open(DiskCacheOptions options) {
  if (options.dir.empty()) options.dir = default_dir();
  KILN_RETURN_IF_ERROR(create_private_dirs(options.dir));
  KILN_RETURN_IF_ERROR(check_private_dir(options.dir, "cache directory"));
  const fs::path lock_dir = options.dir / kLockDirName;
  if (::mkdir(lock_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status{StatusCode::kCacheError, fmt::format("cannot create cache lock directory {}: {}",
                                                       lock_dir.string(), errno_text(errno))};
  }
  KILN_RETURN_IF_ERROR(check_private_dir(lock_dir, "cache lock directory"));
  return std::unique_ptr<DiskCache>(new DiskCache(std::move(options)));
}

std::optional<Artifact> DiskCache::load(const CacheKey& key) {
  const std::string hash = key.hash_hex();
  const fs::path path = entry_path(options_.dir, hash);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) {
      log_verbose(kLogCache, "cache: miss {}", hash);
    } else {
      log_warning("cache: cannot read entry {}: {}; treating as a miss", path.string(),
                  errno_text(errno));
    }
    return std::nullopt;
  }
  const std::optional<std::string> bytes = read_all(fd.get());
  if (!bytes) {
    log_warning("cache: cannot read entry {}: {}; treating as a miss", path.string(),
                errno_text(errno));
    return std::nullopt;
  }
  const auto reject = [&](std::string_view reason) -> std::optional<Artifact> {
    remove_if_same_file(path, fd.get());
    log_warning("cache: removed corrupt entry {}: {}", hash, reason);
    return std::nullopt;
  };
  const auto parsed = parse_entry(*bytes);
  if (const auto* reason = std::get_if<std::string>(&parsed)) return reject(*reason);
  const EntryView& view = std::get<EntryView>(parsed);
  if (view.key_text != key.text) {
    return reject(
        "stored key text differs from the requested key (hash collision or a "
        "misplaced file)");
  }
  std::optional<Artifact> artifact = artifact_of(view);
  if (!artifact) return reject(fmt::format("unparseable config '{}'", view.config_text));
  // A hit makes the entry most recently used for eviction. Best effort: a failure only
  // makes the entry look older than it is.
  ::futimens(fd.get(), nullptr);
  log_verbose(kLogCache, "cache: hit {} ({} bytes)", hash, bytes->size());
  return std::move(*artifact);
}

Status DiskCache::store(const CacheKey& key, const Artifact& artifact) {
  const std::string hash = key.hash_hex();
  // Knob names with ',' or '=' would make an entry that can never be loaded back.
  if (parse_config(artifact.config.to_string()) != artifact.config) {
    return invalid_argument(
        fmt::format("cannot cache config '{}': knob names must be non-empty "
                    "and free of ',' and '=', each set once",
                    artifact.config.to_string()));
  }
  const std::string bytes = serialize(key, artifact);
  // A unique name in the same directory: rename() is atomic only within one filesystem, and
  // concurrent writers (threads or processes) must not share a temp file.
  fs::path temp_path;
  int raw_fd = -1;
  for (int attempt = 0; attempt < 8 && raw_fd < 0; ++attempt) {
    temp_path =
        options_.dir / fmt::format("{}{}{}.{}", hash, kTempMarker, ::getpid(), random_suffix());
    raw_fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (raw_fd < 0 && errno != EEXIST) break;
  }
  if (raw_fd < 0) {
    return {StatusCode::kCacheError, fmt::format("cannot create cache temp file {}: {}",
                                                 temp_path.string(), errno_text(errno))};
  }
  Fd fd(raw_fd);
  // No fsync: after a crash a half-written entry fails its checksum and is a miss, which
  // costs one recompile; syncing every store would cost far more.
  if (!write_all(fd.get(), bytes)) {
    const int error = errno;
    ::unlink(temp_path.c_str());
    return {StatusCode::kCacheError,
            fmt::format("cannot write cache entry {}: {}", temp_path.string(), errno_text(error))};
  }
  ::close(fd.release());
  const fs::path path = entry_path(options_.dir, hash);
  if (::rename(temp_path.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp_path.c_str());
    return {StatusCode::kCacheError, fmt::format("cannot rename {} to {}: {}", temp_path.string(),
                                                 path.string(), errno_text(error))};
  }
  log_verbose(kLogCache, "cache: stored {} ({} bytes)", hash, bytes.size());
  evict_to_cap(hash);
  return Status::ok();
}

void DiskCache::evict_to_cap(const std::string& keep_hash) {
  std::vector<EntryFile> entries = scan_entries(options_.dir);
  uint64_t total = 0;
  for (const EntryFile& entry : entries) total += entry.bytes;
  if (total <= options_.max_bytes) return;
  std::sort(entries.begin(), entries.end(),
            [](const EntryFile& a, const EntryFile& b) { return a.mtime < b.mtime; });
  for (const EntryFile& entry : entries) {
    if (total <= options_.max_bytes) break;
    if (entry.hash == keep_hash) continue;
    std::error_code error;
    fs::remove(entry.path, error);
    // A file already gone was evicted by a concurrent store: its bytes are freed all the same.
    if (!error) {
      log_verbose(kLogCache, "cache: evicted {} ({} bytes, over the {} byte cap)", entry.hash,
                  entry.bytes, options_.max_bytes);
    }
    total -= entry.bytes;
  }
  if (total > options_.max_bytes) {
    log_warning(
        "cache: entry {} alone exceeds the cache size cap ({} > {} bytes); kept it, "
        "raise the cap to cache more than one such kernel",
        keep_hash, total, options_.max_bytes);
  }
}

Result<CacheKeyLock> DiskCache::lock(const CacheKey& key) {
  const fs::path path = options_.dir / kLockDirName / (key.hash_hex() + std::string(kLockSuffix));
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    return Status{StatusCode::kCacheError, fmt::format("cannot open cache lock file {}: {}",
                                                       path.string(), errno_text(errno))};
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.lock_timeout;
  while (true) {
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return CacheKeyLock(fd.release());
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      return Status{StatusCode::kCacheError,
                    fmt::format("cannot lock {}: {}", path.string(), errno_text(errno))};
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status{StatusCode::kTimeout,
                    fmt::format("timed out after {} ms waiting for the cache lock {}: another "
                                "thread or process is compiling this kernel; raise the lock "
                                "timeout if compiles are this slow",
                                options_.lock_timeout.count(), path.string())};
    }
    std::this_thread::sleep_for(kLockPoll);
  }
}

std::vector<CacheEntryInfo> DiskCache::list() const {
  std::vector<CacheEntryInfo> infos;
  for (EntryFile& entry : scan_entries(options_.dir)) {
    CacheEntryInfo info;
    info.hash = std::move(entry.hash);
    info.bytes = entry.bytes;
    info.last_used = entry.mtime;
    // Only the header and key are read: listing must stay cheap on a large cache. The key is
    // shown when the header is sane; `verify` does the full check.
    Fd fd(::open(entry.path.c_str(), O_RDONLY | O_CLOEXEC));
    std::string header(kHeaderSize, '\0');
    if (fd.get() >= 0 && ::pread(fd.get(), header.data(), kHeaderSize, 0) == kHeaderSize &&
        std::memcmp(header.data(), kMagic.data(), kMagic.size()) == 0 &&
        get_le(header, 8, 4) == kFormatVersion && get_le(header, 12, 4) == kHeaderSize) {
      const uint64_t key_size = get_le(header, 16, 8);
      if (key_size <= entry.bytes) {
        std::string key_text(key_size, '\0');
        if (::pread(fd.get(), key_text.data(), key_size, kHeaderSize) == ssize_t(key_size)) {
          info.key_text = std::move(key_text);
        }
      }
    }
    infos.push_back(std::move(info));
  }
  // Most recently used first, as `kiln cache ls` shows them.
  std::sort(infos.begin(), infos.end(), [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
    return a.last_used != b.last_used ? a.last_used > b.last_used : a.hash < b.hash;
  });
  return infos;
}

CacheStats DiskCache::stats() const {
  CacheStats stats;
  stats.max_bytes = options_.max_bytes;
  for (const EntryFile& entry : scan_entries(options_.dir)) {
    ++stats.entries;
    stats.bytes += entry.bytes;
  }
  return stats;
}

CacheVerifyReport DiskCache::verify() {
  CacheVerifyReport report;
  for (const EntryFile& entry : scan_entries(options_.dir)) {
    Fd fd(::open(entry.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) continue;  // evicted meanwhile
    ++report.checked;
    std::string reason;
    if (const std::optional<std::string> bytes = read_all(fd.get()); !bytes) {
      reason = fmt::format("cannot read: {}", errno_text(errno));
    } else {
      const auto parsed = parse_entry(*bytes);
      if (const auto* parse_error = std::get_if<std::string>(&parsed)) {
        reason = *parse_error;
      } else if (const EntryView& view = std::get<EntryView>(parsed);
                 hash_of_text(view.key_text) != entry.hash) {
        reason = "stored key text does not hash to the file name (misplaced file)";
      } else if (!parse_config(view.config_text)) {
        reason = fmt::format("unparseable config '{}'", view.config_text);
      }
    }
    if (reason.empty()) continue;
    remove_if_same_file(entry.path, fd.get());
    log_warning("cache: removed corrupt entry {}: {}", entry.hash, reason);
    ++report.removed;
    report.problems.push_back(fmt::format("{}: {}", entry.hash, reason));
  }
  return report;
}

Result<uint64_t> DiskCache::clear() {
  uint64_t removed = 0;
  const auto remove_matching = [&](const fs::path& dir, auto&& matches) -> Status {
    std::error_code error;
    for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
      const std::string name = it->path().filename().string();
      const int kind = matches(name);
      if (kind == 0) continue;
      std::error_code remove_error;
      const bool gone = fs::remove(it->path(), remove_error);
      if (remove_error) {
        return {StatusCode::kCacheError,
                fmt::format("cannot remove {}: {}", it->path().string(), remove_error.message())};
      }
      // Count only entries, and only those this call removed (not a concurrent evictor).
      if (gone && kind == 1) ++removed;
    }
    if (error && error != std::errc::no_such_file_or_directory) {
      return {StatusCode::kCacheError,
              fmt::format("cannot list {}: {}", dir.string(), error.message())};
    }
    return Status::ok();
  };
  // 1: an entry; 2: a leftover temp file of an interrupted store.
  KILN_RETURN_IF_ERROR(remove_matching(options_.dir, [](const std::string& name) {
    if (is_entry_name(name)) return 1;
    return name.find(kTempMarker) != std::string::npos ? 2 : 0;
  }));
  KILN_RETURN_IF_ERROR(remove_matching(options_.dir / kLockDirName, [](const std::string& name) {
    return name.ends_with(kLockSuffix) ? 2 : 0;
  }));
  log_verbose(kLogCache, "cache: cleared {} entries from {}", removed, options_.dir.string());
  return removed;
}

}  // namespace jit::runtime

namespace jit::runtime {

Result<BundleExportReport> DiskCache::export_bundle(const fs::path& path, std::string_view target) {
  std::vector<std::string> entries;
  for (const EntryFile& entry : scan_entries(options_.dir)) {
    Fd fd(::open(entry.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) continue;  // evicted meanwhile
    std::optional<std::string> bytes = read_all(fd.get());
    if (!bytes) continue;
    const auto parsed = parse_entry(*bytes);
    std::string reason;
    if (const auto* parse_error = std::get_if<std::string>(&parsed)) {
      reason = *parse_error;
    } else if (const EntryView& view = std::get<EntryView>(parsed);
               hash_of_text(view.key_text) != entry.hash) {
      reason = "stored key text does not hash to the file name (misplaced file)";
    } else if (cache_key_target(view.key_text) != target) {
      continue;  // another target's entry
    }
    if (!reason.empty()) {
      // A damaged entry is never shipped; it is removed as `load` would remove it.
      remove_if_same_file(entry.path, fd.get());
      log_warning("cache: removed corrupt entry {}: {}", entry.hash, reason);
      continue;
    }
    entries.push_back(std::move(*bytes));
  }
  if (entries.empty()) {
    return Status{StatusCode::kCacheError,
                  fmt::format("no cache entries for target '{}' in {} (compile or prewarm with "
                              "that target first; kiln cache ls lists the keys)",
                              target, options_.dir.string())};
  }
  // Sorted so that the same cache contents always make the same bundle bytes.
  std::sort(entries.begin(), entries.end());
  std::string bundle(kBundleMagic.data(), kBundleMagic.size());
  put_u32(bundle, kBundleVersion);
  put_u32(bundle, kBundleHeaderSize);
  put_u64(bundle, entries.size());
  put_u64(bundle, target.size());
  bundle += target;
  for (const std::string& entry : entries) {
    put_u64(bundle, entry.size());
    bundle += entry;
  }
  put_u64(bundle, XXH3_64bits(bundle.data(), bundle.size()));

  const fs::path temp =
      path.string() + fmt::format("{}{}.{}", kTempMarker, ::getpid(), random_suffix());
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (fd.get() < 0 || !write_all(fd.get(), bundle)) {
    const int error = errno;
    ::unlink(temp.c_str());
    return Status{StatusCode::kCacheError,
                  fmt::format("cannot write bundle {}: {}", temp.string(), errno_text(error))};
  }
  ::close(fd.release());
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    return Status{StatusCode::kCacheError, fmt::format("cannot rename {} to {}: {}", temp.string(),
                                                       path.string(), errno_text(error))};
  }
  return BundleExportReport{entries.size(), bundle.size()};
}

Result<BundleImportReport> DiskCache::import_bundle(const fs::path& path,
                                                    std::string_view expected_target) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return Status{StatusCode::kInvalidArgument,
                  fmt::format("cannot open bundle {}: {}", path.string(), errno_text(errno))};
  }
  const std::optional<std::string> read = read_all(fd.get());
  if (!read) {
    return Status{StatusCode::kCacheError,
                  fmt::format("cannot read bundle {}: {}", path.string(), errno_text(errno))};
  }
  const std::string_view bytes = *read;
  const auto damaged = [&](std::string_view reason) {
    return Status{StatusCode::kCacheError,
                  fmt::format("bundle {} rejected, nothing imported: {}", path.string(), reason)};
  };
  if (bytes.size() < kBundleHeaderSize + kChecksumSize ||
      std::memcmp(bytes.data(), kBundleMagic.data(), kBundleMagic.size()) != 0) {
    return damaged("not a kiln cache bundle (bad magic or too short)");
  }
  if (get_le(bytes, 8, 4) != kBundleVersion || get_le(bytes, 12, 4) != kBundleHeaderSize) {
    return damaged(fmt::format("bundle format version {}, this kiln reads version {}",
                               get_le(bytes, 8, 4), kBundleVersion));
  }
  // The checksum first: nothing else in a tampered file is trusted, sizes included.
  const size_t body = bytes.size() - kChecksumSize;
  if (XXH3_64bits(bytes.data(), body) != get_le(bytes, body, 8)) {
    return damaged("checksum mismatch (the file was damaged or modified)");
  }
  const uint64_t count = get_le(bytes, 16, 8);
  const uint64_t target_size = get_le(bytes, 24, 8);
  if (target_size > body - kBundleHeaderSize) return damaged("target size exceeds the file");
  const std::string target(bytes.substr(kBundleHeaderSize, target_size));
  if (target != expected_target) {
    return Status{StatusCode::kUnsupported,
                  fmt::format("bundle {} holds kernels for target '{}', but this machine's target "
                              "is '{}'; its code cannot run here. Export a bundle on a machine "
                              "of this target (kiln cache export OUT --target {})",
                              path.string(), target, expected_target, expected_target)};
  }
  // Every entry is parsed and checked before any is stored: a bundle is all or nothing.
  std::vector<std::pair<CacheKey, Artifact>> parsed_entries;
  size_t offset = kBundleHeaderSize + target_size;
  for (uint64_t i = 0; i < count; ++i) {
    if (body - offset < 8) return damaged(fmt::format("entry {} of {} is truncated", i, count));
    const uint64_t size = get_le(bytes, offset, 8);
    offset += 8;
    if (size > body - offset) return damaged(fmt::format("entry {} exceeds the file", i));
    const auto parsed = parse_entry(bytes.substr(offset, size));
    offset += size;
    if (const auto* reason = std::get_if<std::string>(&parsed)) {
      return damaged(fmt::format("entry {}: {}", i, *reason));
    }
    const EntryView& view = std::get<EntryView>(parsed);
    if (cache_key_target(view.key_text) != target) {
      return damaged(fmt::format("entry {} is for target '{}', not the bundle's '{}'", i,
                                 cache_key_target(view.key_text), target));
    }
    std::optional<Artifact> artifact = artifact_of(view);
    if (!artifact) return damaged(fmt::format("entry {}: unparseable config", i));
    parsed_entries.emplace_back(CacheKey{std::string(view.key_text)}, std::move(*artifact));
  }
  if (offset != body) return damaged("trailing bytes after the last entry");
  for (const auto& [key, artifact] : parsed_entries) {
    KILN_RETURN_IF_ERROR(store(key, artifact));
  }
  return BundleImportReport{target, count};
}

}  // namespace jit::runtime
