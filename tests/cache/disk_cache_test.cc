// The disk cache: round trips, every kind of damaged entry, eviction, directory safety, and
// key locks under thread and process races.
#include "runtime/disk_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/log.h"

namespace jit::runtime {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Layout facts the damage tests patch (see the format table in runtime/disk_cache.cc).
constexpr size_t kVersionOffset = 8;
constexpr size_t kHeaderSize = 56;
constexpr size_t kChecksumSize = 8;

/// A fresh private directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kiln-cache-test-XXXXXX").string();
    const char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) std::abort();
    path_ = made;
  }
  ~TempDir() {
    std::error_code error;
    fs::remove_all(path_, error);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

/// Captures every log message while alive.
class LogCapture {
 public:
  LogCapture() {
    previous_ = set_log_sink([this](LogLevel level, std::string_view message) {
      std::lock_guard lock(mutex_);
      messages_.push_back({level, std::string(message)});
    });
  }
  ~LogCapture() { set_log_sink(std::move(previous_)); }

  std::vector<std::string> at(LogLevel level) const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> texts;
    for (const auto& [l, text] : messages_) {
      if (l == level) texts.push_back(text);
    }
    return texts;
  }
  std::vector<std::string> warnings() const { return at(LogLevel::kWarning); }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<LogLevel, std::string>> messages_;
  LogSink previous_;
};

CacheKey key_named(const std::string& name) {
  return CacheKey{"test-key|" + name};
}

Artifact make_artifact(uint8_t seed, size_t code_bytes = 64) {
  Artifact artifact;
  for (size_t i = 0; i < code_bytes; ++i) artifact.code.push_back(uint8_t(seed + i * 7));
  artifact.source = "void kernel() { /* seed " + std::to_string(seed) + " */ }";
  artifact.log = "registers: 32, spills: 0";
  artifact.config.set("threads", 4).set("unroll", seed);
  return artifact;
}

void expect_same(const Artifact& a, const Artifact& b) {
  EXPECT_EQ(a.code, b.code);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.log, b.log);
  EXPECT_EQ(a.config, b.config);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

/// Recomputes the trailing checksum so a test can reach the checks behind it.
void reseal(std::string& bytes) {
  const size_t body = bytes.size() - kChecksumSize;
  const uint64_t sum = XXH3_64bits(bytes.data(), body);
  for (size_t i = 0; i < kChecksumSize; ++i) bytes[body + i] = char((sum >> (8 * i)) & 0xff);
}

std::unique_ptr<DiskCache> open_cache(const fs::path& dir, uint64_t max_bytes = 1u << 30,
                                      std::chrono::milliseconds lock_timeout = 30s) {
  auto cache = DiskCache::open({dir, max_bytes, lock_timeout});
  EXPECT_TRUE(cache.is_ok()) << cache.status().to_string();
  return cache.is_ok() ? std::move(cache).value() : nullptr;
}

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path() / "cache";
    cache_ = open_cache(dir_);
    ASSERT_NE(cache_, nullptr);
  }
  fs::path entry_path(const CacheKey& key) const { return dir_ / (key.hash_hex() + ".kiln"); }

  /// Stores an entry, damages its file with `mutate`, and checks the load is a miss that
  /// removed the file and logged `reason`.
  void expect_damage_is_miss(const std::function<void(std::string&)>& mutate,
                             std::string_view reason) {
    const CacheKey key = key_named("damaged");
    ASSERT_TRUE(cache_->store(key, make_artifact(1)).is_ok());
    std::string bytes = read_file(entry_path(key));
    mutate(bytes);
    write_file(entry_path(key), bytes);

    LogCapture capture;
    EXPECT_FALSE(cache_->load(key).has_value());
    EXPECT_FALSE(fs::exists(entry_path(key))) << "a damaged entry must be removed";
    const auto warnings = capture.warnings();
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("cache: removed corrupt entry " + key.hash_hex() + ": "),
              std::string::npos)
        << warnings[0];
    EXPECT_NE(warnings[0].find(reason), std::string::npos) << warnings[0];
    // The next store repairs it.
    ASSERT_TRUE(cache_->store(key, make_artifact(1)).is_ok());
    EXPECT_TRUE(cache_->load(key).has_value());
  }

  TempDir tmp_;
  fs::path dir_;
  std::unique_ptr<DiskCache> cache_;
};

// ---- Keys ------------------------------------------------------------------------------------

TEST(CacheKeyTest, TextJoinsPartsAndHashIsStable) {
  const OpSpec spec = OpSpec::defaults(OpKind::kRmsNorm);
  Config config;
  config.set("threads", 2);
  const CacheKey key = make_cache_key(spec, config, "x86:avx512f", "x86-3", "none");
  EXPECT_EQ(key.text, to_string(spec) + "|threads=2|x86:avx512f|x86-3|none");
  const std::string hash = key.hash_hex();
  ASSERT_EQ(hash.size(), 32u);
  EXPECT_EQ(hash.find_first_not_of("0123456789abcdef"), std::string::npos) << hash;
  EXPECT_EQ(hash, make_cache_key(spec, config, "x86:avx512f", "x86-3", "none").hash_hex());
  EXPECT_NE(hash, make_cache_key(spec, Config{}, "x86:avx512f", "x86-3", "none").hash_hex());
  EXPECT_NE(hash, make_cache_key(spec, config, "x86:avx2", "x86-3", "none").hash_hex());
  EXPECT_NE(hash, make_cache_key(spec, config, "x86:avx512f", "x86-4", "none").hash_hex());
}

TEST(CacheKeyTest, DefaultDirFollowsEnvironment) {
  const auto saved = [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    return value ? std::optional<std::string>(value) : std::nullopt;
  };
  const auto restore = [](const char* name, const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  };
  const auto kiln = saved("KILN_CACHE_DIR"), xdg = saved("XDG_CACHE_HOME"), home = saved("HOME");

  ::setenv("KILN_CACHE_DIR", "/a/kiln-dir", 1);
  ::setenv("XDG_CACHE_HOME", "/b/xdg", 1);
  ::setenv("HOME", "/c/home", 1);
  EXPECT_EQ(DiskCache::default_dir(), fs::path("/a/kiln-dir"));
  ::unsetenv("KILN_CACHE_DIR");
  EXPECT_EQ(DiskCache::default_dir(), fs::path("/b/xdg/kiln"));
  ::setenv("XDG_CACHE_HOME", "", 1);  // empty counts as unset
  EXPECT_EQ(DiskCache::default_dir(), fs::path("/c/home/.cache/kiln"));

  restore("KILN_CACHE_DIR", kiln);
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}

// ---- Round trip and misses -------------------------------------------------------------------

TEST_F(DiskCacheTest, StoreThenLoadRoundTrips) {
  const CacheKey key = key_named("round-trip");
  const Artifact artifact = make_artifact(3, 4096);
  ASSERT_TRUE(cache_->store(key, artifact).is_ok());
  const std::optional<Artifact> loaded = cache_->load(key);
  ASSERT_TRUE(loaded.has_value());
  expect_same(*loaded, artifact);
}

TEST_F(DiskCacheTest, RoundTripsEmptySectionsAndDefaultConfig) {
  const CacheKey key = key_named("empty");
  ASSERT_TRUE(cache_->store(key, Artifact{}).is_ok());
  const std::optional<Artifact> loaded = cache_->load(key);
  ASSERT_TRUE(loaded.has_value());
  expect_same(*loaded, Artifact{});
}

TEST_F(DiskCacheTest, StoreOverwritesAnExistingEntry) {
  const CacheKey key = key_named("overwrite");
  ASSERT_TRUE(cache_->store(key, make_artifact(1)).is_ok());
  ASSERT_TRUE(cache_->store(key, make_artifact(2)).is_ok());
  const std::optional<Artifact> loaded = cache_->load(key);
  ASSERT_TRUE(loaded.has_value());
  expect_same(*loaded, make_artifact(2));
  EXPECT_EQ(cache_->stats().entries, 1u);
}

TEST_F(DiskCacheTest, AbsentKeyIsASilentMiss) {
  LogCapture capture;
  const unsigned previous = set_log_categories(kLogCache);
  EXPECT_FALSE(cache_->load(key_named("absent")).has_value());
  set_log_categories(previous);
  EXPECT_TRUE(capture.warnings().empty());
  const auto infos = capture.at(LogLevel::kInfo);
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_NE(infos[0].find("cache: miss"), std::string::npos) << infos[0];
}

TEST_F(DiskCacheTest, StoreRejectsAConfigThatCannotBeReadBack) {
  Artifact artifact = make_artifact(1);
  artifact.config.set("a=b", 1);
  const Status status = cache_->store(key_named("bad-config"), artifact);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache_->stats().entries, 0u);
}

// ---- Damaged entries are misses, removed and logged --------------------------------------------

TEST_F(DiskCacheTest, CorruptPayloadByteIsAMiss) {
  expect_damage_is_miss([](std::string& bytes) { bytes[kHeaderSize + 40] ^= 0x5a; }, "checksum");
}

TEST_F(DiskCacheTest, CorruptChecksumIsAMiss) {
  expect_damage_is_miss([](std::string& bytes) { bytes.back() ^= 1; }, "checksum");
}

TEST_F(DiskCacheTest, TruncatedFileIsAMiss) {
  expect_damage_is_miss([](std::string& bytes) { bytes.resize(bytes.size() - 10); }, "truncated");
}

TEST_F(DiskCacheTest, FileShorterThanHeaderIsAMiss) {
  expect_damage_is_miss([](std::string& bytes) { bytes.resize(20); }, "truncated");
}

TEST_F(DiskCacheTest, EmptyFileIsAMiss) {
  expect_damage_is_miss([](std::string& bytes) { bytes.clear(); }, "truncated");
}

TEST_F(DiskCacheTest, TrailingBytesAreAMiss) {
  expect_damage_is_miss([](std::string& bytes) { bytes += "extra"; }, "trailing");
}

TEST_F(DiskCacheTest, OtherFormatVersionIsAMiss) {
  expect_damage_is_miss(
      [](std::string& bytes) {
        bytes[kVersionOffset] = 2;
        reseal(bytes);  // a well-formed entry of another version, not damage
      },
      "format version 2, expected 1");
}

TEST_F(DiskCacheTest, BadMagicIsAMiss) {
  expect_damage_is_miss([](std::string& bytes) { bytes[0] = 'X'; }, "bad magic");
}

TEST_F(DiskCacheTest, SectionSizesBeyondTheFileAreAMiss) {
  expect_damage_is_miss(
      [](std::string& bytes) {
        bytes[16 + 8 * 2 + 7] = char(0x7f);  // code size ~2^63
        reseal(bytes);
      },
      "section sizes exceed");
}

TEST_F(DiskCacheTest, UnparseableConfigIsAMiss) {
  expect_damage_is_miss(
      [](std::string& bytes) {
        // The config text follows the key; turn "threads=4" into "threads#4".
        const size_t at = bytes.find("threads=");
        ASSERT_NE(at, std::string::npos);
        bytes[at + 7] = '#';
        reseal(bytes);
      },
      "unparseable config");
}

TEST_F(DiskCacheTest, KeyTextMismatchIsAMiss) {
  const CacheKey first = key_named("first");
  const CacheKey second = key_named("second");
  ASSERT_TRUE(cache_->store(first, make_artifact(1)).is_ok());
  ASSERT_TRUE(cache_->store(second, make_artifact(2)).is_ok());
  // What a hash collision looks like: a valid entry for another key under this key's name.
  fs::copy_file(entry_path(first), entry_path(second), fs::copy_options::overwrite_existing);

  LogCapture capture;
  EXPECT_FALSE(cache_->load(second).has_value());
  EXPECT_FALSE(fs::exists(entry_path(second)));
  const auto warnings = capture.warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("removed corrupt entry " + second.hash_hex()), std::string::npos);
  EXPECT_NE(warnings[0].find("key text differs"), std::string::npos) << warnings[0];
  // The genuine entry is untouched.
  const std::optional<Artifact> loaded = cache_->load(first);
  ASSERT_TRUE(loaded.has_value());
  expect_same(*loaded, make_artifact(1));
}

// ---- Eviction --------------------------------------------------------------------------------

/// Sets an entry's last-use time to `age` before now (negative: in the future).
void set_age(const fs::path& path, std::chrono::seconds age) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - age);
}

TEST_F(DiskCacheTest, EvictsLeastRecentlyUsedWithinTheCap) {
  const CacheKey a = key_named("a"), b = key_named("b"), c = key_named("c"), d = key_named("d"),
                 e = key_named("e");
  ASSERT_TRUE(cache_->store(a, make_artifact(1, 1000)).is_ok());
  const uint64_t entry_bytes = fs::file_size(entry_path(a));
  // Room for three entries and a half.
  const uint64_t cap = 3 * entry_bytes + entry_bytes / 2;
  auto capped = open_cache(dir_, cap);
  ASSERT_NE(capped, nullptr);
  ASSERT_TRUE(capped->store(b, make_artifact(2, 1000)).is_ok());
  ASSERT_TRUE(capped->store(c, make_artifact(3, 1000)).is_ok());
  EXPECT_EQ(capped->stats().entries, 3u);
  set_age(entry_path(a), 30s);
  set_age(entry_path(b), 20s);
  set_age(entry_path(c), 10s);

  // A hit makes `a` the most recently used, so `b` is now the oldest.
  ASSERT_TRUE(capped->load(a).has_value());
  ASSERT_TRUE(capped->store(d, make_artifact(4, 1000)).is_ok());
  EXPECT_TRUE(fs::exists(entry_path(a)));
  EXPECT_FALSE(fs::exists(entry_path(b)));
  EXPECT_TRUE(fs::exists(entry_path(c)));
  EXPECT_TRUE(fs::exists(entry_path(d)));
  CacheStats stats = capped->stats();
  EXPECT_EQ(stats.entries, 3u);
  EXPECT_LE(stats.bytes, cap);
  EXPECT_EQ(stats.max_bytes, cap);

  ASSERT_TRUE(capped->store(e, make_artifact(5, 1000)).is_ok());
  EXPECT_FALSE(fs::exists(entry_path(c)));
  EXPECT_TRUE(fs::exists(entry_path(a)));
  EXPECT_TRUE(fs::exists(entry_path(d)));
  EXPECT_TRUE(fs::exists(entry_path(e)));
  EXPECT_LE(capped->stats().bytes, cap);
}

TEST_F(DiskCacheTest, NewestEntrySurvivesEvenWithTheOldestTimestamp) {
  const CacheKey old_key = key_named("old"), new_key = key_named("new");
  ASSERT_TRUE(cache_->store(old_key, make_artifact(1, 1000)).is_ok());
  const uint64_t entry_bytes = fs::file_size(entry_path(old_key));
  auto capped = open_cache(dir_, entry_bytes + entry_bytes / 2);
  ASSERT_NE(capped, nullptr);
  // The other entry looks newer than anything written now (clock skew, a shared dir).
  set_age(entry_path(old_key), -3600s);
  ASSERT_TRUE(capped->store(new_key, make_artifact(2, 1000)).is_ok());
  EXPECT_TRUE(fs::exists(entry_path(new_key)));
  EXPECT_FALSE(fs::exists(entry_path(old_key)));
}

TEST_F(DiskCacheTest, EntryLargerThanTheCapIsKeptAndLogged) {
  auto tiny = open_cache(dir_, 100);
  ASSERT_NE(tiny, nullptr);
  const CacheKey first = key_named("first"), second = key_named("second");
  LogCapture capture;
  ASSERT_TRUE(tiny->store(first, make_artifact(1, 1000)).is_ok());
  EXPECT_TRUE(tiny->load(first).has_value());
  ASSERT_FALSE(capture.warnings().empty());
  EXPECT_NE(capture.warnings()[0].find("alone exceeds"), std::string::npos);
  ASSERT_TRUE(tiny->store(second, make_artifact(2, 1000)).is_ok());
  EXPECT_FALSE(fs::exists(entry_path(first)));
  EXPECT_TRUE(tiny->load(second).has_value());
}

// ---- Directory safety --------------------------------------------------------------------------

TEST(DiskCacheDirTest, CreatesTheDirectoryAndParentsPrivate) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "x" / "y" / "cache";
  auto cache = open_cache(dir);
  ASSERT_NE(cache, nullptr);
  for (const fs::path& p : {tmp.path() / "x", tmp.path() / "x" / "y", dir, dir / "locks"}) {
    struct stat st {};
    ASSERT_EQ(::stat(p.c_str(), &st), 0) << p;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << p;
    EXPECT_EQ(st.st_mode & 0777, 0700u) << p;
  }
  EXPECT_EQ(cache->dir(), dir);
}

/// Opens `dir` and expects a kCacheError whose message names the path and contains `hint`.
void expect_refused(const fs::path& dir, std::string_view hint) {
  auto cache = DiskCache::open({dir});
  ASSERT_FALSE(cache.is_ok());
  EXPECT_EQ(cache.status().code(), StatusCode::kCacheError);
  const std::string message = cache.status().message();
  EXPECT_NE(message.find(dir.string()), std::string::npos) << message;
  EXPECT_NE(message.find(hint), std::string::npos) << message;
}

TEST(DiskCacheDirTest, RefusesWorldWritableDirectory) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "cache";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  expect_refused(dir, "chmod 700");
}

TEST(DiskCacheDirTest, RefusesGroupWritableDirectory) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "cache";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0770), 0);
  expect_refused(dir, "writable by group or others");
}

TEST(DiskCacheDirTest, RefusesDirectoryOwnedByAnotherUser) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "not root: cannot chown to test foreign ownership";
  }
  TempDir tmp;
  const fs::path dir = tmp.path() / "cache";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  constexpr uid_t kNobody = 65534;
  ASSERT_EQ(::chown(dir.c_str(), kNobody, kNobody), 0) << std::strerror(errno);
  expect_refused(dir, "owned by uid 65534");
}

TEST(DiskCacheDirTest, RefusesAFileInPlaceOfTheDirectory) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "cache";
  write_file(dir, "not a directory");
  expect_refused(dir, "not a directory");
}

// ---- Locks -----------------------------------------------------------------------------------

TEST_F(DiskCacheTest, LockTimesOutWhileHeldElsewhere) {
  constexpr auto kTimeout = 200ms;
  auto cache = open_cache(dir_, 1u << 30, kTimeout);
  ASSERT_NE(cache, nullptr);
  const CacheKey key = key_named("locked");
  auto held = cache->lock(key);
  ASSERT_TRUE(held.is_ok()) << held.status().to_string();

  Status waited;
  std::chrono::steady_clock::duration elapsed{};
  std::thread other([&] {
    const auto start = std::chrono::steady_clock::now();
    auto attempt = cache->lock(key);
    elapsed = std::chrono::steady_clock::now() - start;
    waited = attempt.status();
  });
  other.join();
  EXPECT_EQ(waited.code(), StatusCode::kTimeout) << waited.to_string();
  EXPECT_NE(waited.message().find("timed out"), std::string::npos) << waited.message();
  EXPECT_GE(elapsed, kTimeout);
  EXPECT_LT(elapsed, kTimeout + 1500ms);

  // Released on destruction: the next taker gets it at once.
  { CacheKeyLock released = std::move(held).value(); }
  auto again = cache->lock(key);
  EXPECT_TRUE(again.is_ok()) << again.status().to_string();
}

TEST_F(DiskCacheTest, LockWaitsForTheHolderToRelease) {
  const CacheKey key = key_named("handover");
  auto held = cache_->lock(key);
  ASSERT_TRUE(held.is_ok());
  std::thread holder([lock = std::move(held).value()]() mutable {
    std::this_thread::sleep_for(50ms);
    CacheKeyLock released = std::move(lock);
  });
  auto waited = cache_->lock(key);
  holder.join();
  EXPECT_TRUE(waited.is_ok()) << waited.status().to_string();
}

TEST_F(DiskCacheTest, LocksOfDifferentKeysAreIndependent) {
  auto a = cache_->lock(key_named("a"));
  auto cache = open_cache(dir_, 1u << 30, 10ms);
  auto b = cache->lock(key_named("b"));
  EXPECT_TRUE(a.is_ok());
  EXPECT_TRUE(b.is_ok()) << b.status().to_string();
}

TEST_F(DiskCacheTest, MoveAssignReleasesThePreviousLock) {
  auto cache = open_cache(dir_, 1u << 30, 10ms);
  CacheKeyLock lock = std::move(cache->lock(key_named("a"))).value();
  lock = std::move(cache->lock(key_named("b"))).value();
  EXPECT_TRUE(cache->lock(key_named("a")).is_ok());
  EXPECT_FALSE(cache->lock(key_named("b")).is_ok());
}

/// One racer: the compile-once protocol the runtime follows ("lock; load; on a miss compile
/// and store; unlock"); `compile` stands for the code generator.
Status lock_load_or_compile(DiskCache& cache, const CacheKey& key,
                            const std::function<void()>& compile) {
  auto lock = cache.lock(key);
  if (!lock.is_ok()) return lock.status();
  if (cache.load(key)) return Status::ok();
  compile();
  std::this_thread::sleep_for(50ms);  // a slow compile widens the race window
  return cache.store(key, make_artifact(9, 512));
}

TEST_F(DiskCacheTest, TwoProcessesRacingCompileOnce) {
  const CacheKey key = key_named("process-race");
  const fs::path counter = tmp_.path() / "compiles.txt";
  // Both children block on the pipe until the parent closes it, so they start together.
  int barrier[2];
  ASSERT_EQ(::pipe(barrier), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < 2; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(barrier[1]);
      char byte;
      while (::read(barrier[0], &byte, 1) < 0 && errno == EINTR) {
      }
      const Status status = lock_load_or_compile(*cache_, key, [&] {
        const int fd = ::open(counter.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
        const std::string line = "compiled by " + std::to_string(::getpid()) + "\n";
        if (fd < 0 || ::write(fd, line.data(), line.size()) != ssize_t(line.size())) {
          ::_exit(3);
        }
        ::close(fd);
      });
      const int code = !status.is_ok() ? 2 : cache_->load(key) ? 0 : 4;
      ::_exit(code);
    }
    children.push_back(pid);
  }
  ::close(barrier[0]);
  ::close(barrier[1]);
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << pid;
  }
  const std::string lines = read_file(counter);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 1) << lines;
  EXPECT_TRUE(cache_->load(key).has_value());
}

TEST_F(DiskCacheTest, ManyThreadsRacingCompileOnce) {
  constexpr int kThreads = 8;
  const CacheKey key = key_named("thread-race");
  std::atomic<int> compiles{0};
  std::atomic<int> loaded_after{0};
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      EXPECT_TRUE(lock_load_or_compile(*cache_, key, [&] { compiles.fetch_add(1); }).is_ok());
      if (cache_->load(key)) loaded_after.fetch_add(1);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(compiles.load(), 1);
  EXPECT_EQ(loaded_after.load(), kThreads);
}

TEST_F(DiskCacheTest, ConcurrentStoresAndLoadsNeverSeeDamage) {
  // Writers replace the entry while readers load it: rename() keeps every read whole.
  const CacheKey key = key_named("churn");
  ASSERT_TRUE(cache_->store(key, make_artifact(1, 8192)).is_ok());
  LogCapture capture;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 50; ++i) {
        EXPECT_TRUE(cache_->store(key, make_artifact(uint8_t(w + 1), 8192)).is_ok());
      }
    });
  }
  int hits = 0;
  std::thread reader([&] {
    while (!stop.load()) {
      if (cache_->load(key)) ++hits;
    }
  });
  for (std::thread& thread : threads) thread.join();
  stop = true;
  reader.join();
  EXPECT_TRUE(capture.warnings().empty());
  EXPECT_GT(hits, 0);
  EXPECT_EQ(cache_->stats().entries, 1u);
}

// ---- Maintenance: list, stats, verify, clear ---------------------------------------------------

TEST_F(DiskCacheTest, ListAndStatsIgnoreTempFiles) {
  const CacheKey a = key_named("a"), b = key_named("b");
  ASSERT_TRUE(cache_->store(a, make_artifact(1, 100)).is_ok());
  ASSERT_TRUE(cache_->store(b, make_artifact(2, 300)).is_ok());
  write_file(dir_ / (a.hash_hex() + ".tmp.123.abcdef"), "half a store");
  set_age(entry_path(a), 60s);

  const CacheStats stats = cache_->stats();
  EXPECT_EQ(stats.entries, 2u);
  EXPECT_EQ(stats.bytes, fs::file_size(entry_path(a)) + fs::file_size(entry_path(b)));
  EXPECT_EQ(stats.max_bytes, uint64_t(1) << 30);

  const std::vector<CacheEntryInfo> infos = cache_->list();
  ASSERT_EQ(infos.size(), 2u);
  // Most recently used first.
  EXPECT_EQ(infos[0].hash, b.hash_hex());
  EXPECT_EQ(infos[0].key_text, b.text);
  EXPECT_EQ(infos[0].bytes, fs::file_size(entry_path(b)));
  EXPECT_EQ(infos[1].hash, a.hash_hex());
  EXPECT_EQ(infos[1].key_text, a.text);
  EXPECT_LT(infos[1].last_used, infos[0].last_used);
}

TEST_F(DiskCacheTest, ListShowsUnreadableHeaderWithEmptyKey) {
  write_file(dir_ / "0123456789abcdef0123456789abcdef.kiln", "garbage");
  const std::vector<CacheEntryInfo> infos = cache_->list();
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_EQ(infos[0].hash, "0123456789abcdef0123456789abcdef");
  EXPECT_TRUE(infos[0].key_text.empty());
}

TEST_F(DiskCacheTest, VerifyRemovesAndReportsBadEntries) {
  const CacheKey good = key_named("good"), bad = key_named("bad"), moved = key_named("moved");
  ASSERT_TRUE(cache_->store(good, make_artifact(1)).is_ok());
  ASSERT_TRUE(cache_->store(bad, make_artifact(2)).is_ok());
  ASSERT_TRUE(cache_->store(moved, make_artifact(3)).is_ok());
  std::string bytes = read_file(entry_path(bad));
  bytes[kHeaderSize + 30] ^= 0xff;
  write_file(entry_path(bad), bytes);
  // A valid entry under the wrong name.
  const fs::path misplaced = dir_ / "00000000000000000000000000000000.kiln";
  fs::rename(entry_path(moved), misplaced);

  LogCapture capture;
  const CacheVerifyReport report = cache_->verify();
  EXPECT_EQ(report.checked, 3u);
  EXPECT_EQ(report.removed, 2u);
  ASSERT_EQ(report.problems.size(), 2u);
  std::string all = report.problems[0] + "\n" + report.problems[1];
  EXPECT_NE(all.find(bad.hash_hex() + ": checksum"), std::string::npos) << all;
  EXPECT_NE(all.find("00000000000000000000000000000000: stored key text does not hash"),
            std::string::npos)
      << all;
  EXPECT_EQ(capture.warnings().size(), 2u);
  EXPECT_FALSE(fs::exists(entry_path(bad)));
  EXPECT_FALSE(fs::exists(misplaced));
  EXPECT_TRUE(cache_->load(good).has_value());

  const CacheVerifyReport clean = cache_->verify();
  EXPECT_EQ(clean.checked, 1u);
  EXPECT_EQ(clean.removed, 0u);
  EXPECT_TRUE(clean.problems.empty());
}

TEST_F(DiskCacheTest, ClearRemovesEntriesTempFilesAndLocks) {
  for (int i = 0; i < 3; ++i) {
    const CacheKey key = key_named("k" + std::to_string(i));
    ASSERT_TRUE(cache_->store(key, make_artifact(uint8_t(i))).is_ok());
    ASSERT_TRUE(cache_->lock(key).is_ok());  // leaves a lock file behind
  }
  write_file(dir_ / "feedface.tmp.42.0123", "interrupted store");
  ASSERT_FALSE(fs::is_empty(dir_ / "locks"));

  auto removed = cache_->clear();
  ASSERT_TRUE(removed.is_ok()) << removed.status().to_string();
  EXPECT_EQ(*removed, 3u);
  EXPECT_EQ(cache_->stats().entries, 0u);
  EXPECT_TRUE(fs::is_empty(dir_ / "locks"));
  // Only the (empty) locks directory is left.
  std::vector<std::string> left;
  for (const auto& item : fs::directory_iterator(dir_)) {
    left.push_back(item.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"locks"});
  EXPECT_FALSE(cache_->load(key_named("k0")).has_value());
  // Still usable afterwards.
  ASSERT_TRUE(cache_->store(key_named("k0"), make_artifact(1)).is_ok());
  EXPECT_TRUE(cache_->load(key_named("k0")).has_value());
}

}  // namespace
}  // namespace jit::runtime
