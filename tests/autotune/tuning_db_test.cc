// The tuning database: round trip, merge, corrupt files, and compile consulting it.
#include "runtime/tuning_db.h"

#include <gtest/gtest.h>

#include "runtime/log.h"
#include "runtime/runtime.h"
#include "tests/autotune/temp_dir.h"

namespace jit::runtime {
namespace {

const OpSpec kSilu = OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kBF16, 96});

TuningEntry entry(std::string config, double time_us, int64_t bucket = 16,
                  std::string target = "x86-avx2") {
  TuningEntry e;
  e.spec = to_string(kSilu);
  e.token_bucket = bucket;
  e.target = std::move(target);
  e.backend = "x86";
  e.config = std::move(config);
  e.time_us = time_us;
  e.default_time_us = 10;
  e.speedup = 10 / time_us;
  e.kiln_version = "0.1.0";
  e.date = "2025-05-01T12:00:00Z";
  return e;
}

// Captures warnings for the lifetime of the object.
class LogCapture {
 public:
  LogCapture()
      : previous_(
            set_log_sink([this](LogLevel, std::string_view m) { messages_.emplace_back(m); })) {}
  ~LogCapture() { set_log_sink(previous_); }
  std::string all() const {
    std::string text;
    for (const auto& m : messages_) text += m + "\n";
    return text;
  }

 private:
  std::vector<std::string> messages_;
  LogSink previous_;
};

TEST(TokenBucket, PowersOfTwo) {
  EXPECT_EQ(token_bucket(0), 1);
  EXPECT_EQ(token_bucket(1), 1);
  EXPECT_EQ(token_bucket(2), 2);
  EXPECT_EQ(token_bucket(3), 4);
  EXPECT_EQ(token_bucket(512), 512);
  EXPECT_EQ(token_bucket(513), 1024);
}

TEST(TuningDb, RoundTripsThroughAFile) {
  test::TempDir dir;
  TuningDb db;
  db.put(entry("threads=1,min_parallel_kib=64", 2.5));
  db.put(entry("threads=2,min_parallel_kib=256", 7.0, 512));
  const auto path = dir.path() / "sub" / "tuning.json";
  ASSERT_TRUE(db.save(path).is_ok());
  auto back = TuningDb::read(path);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->size(), 2u);
  const TuningEntry* e = back->find(to_string(kSilu), 512, "x86-avx2");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->config, "threads=2,min_parallel_kib=256");
  EXPECT_DOUBLE_EQ(e->time_us, 7.0);
  EXPECT_EQ(e->date, "2025-05-01T12:00:00Z");
  EXPECT_EQ(back->to_json(), db.to_json());
  EXPECT_EQ(back->find(to_string(kSilu), 256, "x86-avx2"), nullptr);
}

TEST(TuningDb, MissingFileIsEmpty) {
  test::TempDir dir;
  auto db = TuningDb::read(dir.path() / "none.json");
  ASSERT_TRUE(db.is_ok());
  EXPECT_TRUE(db->empty());
}

TEST(TuningDb, MergeOfTwoMachinesKeepsTheFaster) {
  TuningDb a, b;
  a.put(entry("threads=1,min_parallel_kib=64", 3.0));
  a.put(entry("threads=1,min_parallel_kib=64", 3.0, 1));
  b.put(entry("threads=2,min_parallel_kib=64", 2.0));                   // faster: wins
  b.put(entry("threads=2,min_parallel_kib=64", 4.0, 1));                // slower: loses
  b.put(entry("threads=2,min_parallel_kib=64", 1.0, 1, "x86-avx512"));  // new key
  EXPECT_EQ(a.merge(b), 2u);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a.find(to_string(kSilu), 16, "x86-avx2")->config, "threads=2,min_parallel_kib=64");
  EXPECT_EQ(a.find(to_string(kSilu), 1, "x86-avx2")->config, "threads=1,min_parallel_kib=64");
  EXPECT_NE(a.find(to_string(kSilu), 1, "x86-avx512"), nullptr);
  // put replaces even with a slower time: a fresh measurement on this machine.
  a.put(entry("default", 9.0));
  EXPECT_EQ(a.find(to_string(kSilu), 16, "x86-avx2")->config, "default");
}

TEST(TuningDb, MalformedFilesNameTheProblem) {
  EXPECT_NE(TuningDb::parse("{not json").status().message().find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(TuningDb::parse(R"({"format":"other","version":1,"entries":[]})")
                .status()
                .message()
                .find("format"),
            std::string::npos);
  TuningDb db;
  db.put(entry("default", 1.0));
  std::string text = db.to_json();
  text.replace(text.find("\"token_bucket\": 16"), 18, "\"token_bucket\": 12");
  auto bad = TuningDb::parse(text);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("entries[0].token_bucket"), std::string::npos)
      << bad.status().message();
}

TEST(TuningDb, CorruptFileIsReportedAndIgnored) {
  test::TempDir dir;
  const auto path = dir.path() / "tuning.json";
  test::write_text(path, "{\"format\": \"kiln-tuning-db\", \"version\": 1, \"entries\": [");
  LogCapture log;
  const TuningDb db = TuningDb::load_or_warn(path);
  EXPECT_TRUE(db.empty());
  EXPECT_NE(log.all().find(path.string()), std::string::npos) << log.all();
  EXPECT_NE(log.all().find("not valid JSON"), std::string::npos) << log.all();

  // A runtime pointed at it still compiles, with the default config.
  RuntimeOptions options;
  options.tuning_db = path;
  Runtime runtime(options);
  CompileOptions hint;
  hint.tokens_hint = 16;
  auto kernel = runtime.compile(kSilu, hint);
  ASSERT_TRUE(kernel.is_ok());
  EXPECT_EQ(kernel->info().config, Config{});
}

TEST(CompileWithTuningDb, UsesTheEntryOfTheMatchingBucketOnly) {
  test::TempDir dir;
  const std::string host = host_target(BackendKind::kX86).fingerprint;
  TuningDb db;
  db.put(entry("threads=1,min_parallel_kib=64", 2.0, 16, host));
  const auto path = dir.path() / "tuning.json";
  ASSERT_TRUE(db.save(path).is_ok());
  RuntimeOptions options;
  options.tuning_db = path;
  Runtime runtime(options);

  CompileOptions in_bucket;
  in_bucket.tokens_hint = 9;  // bucket 16
  auto tuned = runtime.compile(kSilu, in_bucket);
  ASSERT_TRUE(tuned.is_ok()) << tuned.status().to_string();
  EXPECT_EQ(tuned->info().config.to_string(), "threads=1,min_parallel_kib=64");
  EXPECT_EQ(tuned->info().token_bucket, 16);

  CompileOptions other_bucket;
  other_bucket.tokens_hint = 1;
  auto untuned = runtime.compile(kSilu, other_bucket);
  ASSERT_TRUE(untuned.is_ok());
  EXPECT_EQ(untuned->info().config, Config{}) << "no entry for bucket 1: the default";
  EXPECT_EQ(untuned->info().token_bucket, 0);

  auto no_hint = runtime.compile(kSilu);
  ASSERT_TRUE(no_hint.is_ok());
  EXPECT_EQ(no_hint->info().config, Config{});
  EXPECT_EQ(no_hint->code(), untuned->code()) << "untuned hints share the default kernel";

  // Another spec in the tuned bucket has no entry: the default.
  const OpSpec gelu = OpSpec::make(OpKind::kGeluAndMul, ir::ActivationParams{DType::kBF16, 96});
  auto other_spec = runtime.compile(gelu, in_bucket);
  ASSERT_TRUE(other_spec.is_ok());
  EXPECT_EQ(other_spec->info().config, Config{});
  EXPECT_EQ(runtime.tuned_buckets(kSilu), std::vector<int64_t>{16});
}

TEST(CompileWithTuningDb, EntryOfAnotherTargetOrAStaleConfigIsNotUsed) {
  const std::string host = host_target(BackendKind::kX86).fingerprint;
  TuningDb db;
  db.put(entry("threads=1,min_parallel_kib=64", 2.0, 16, "x86-not-this-machine"));
  db.put(entry("threads=3,unroll=9", 2.0, 32, host));  // not in the x86 space
  Runtime runtime(RuntimeOptions{});
  runtime.set_tuning_db(db);
  LogCapture log;
  CompileOptions hint;
  hint.tokens_hint = 16;
  auto foreign = runtime.compile(kSilu, hint);
  ASSERT_TRUE(foreign.is_ok());
  EXPECT_EQ(foreign->info().config, Config{});
  hint.tokens_hint = 32;
  auto stale = runtime.compile(kSilu, hint);
  ASSERT_TRUE(stale.is_ok());
  EXPECT_EQ(stale->info().config, Config{});
  EXPECT_NE(log.all().find("threads=3,unroll=9"), std::string::npos) << log.all();
}

}  // namespace
}  // namespace jit::runtime
