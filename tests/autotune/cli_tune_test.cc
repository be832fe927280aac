// kiln tune, kiln prewarm (replaying what KILN_RECORD wrote during kiln demo) and kiln cache
// export/import, through the real program.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>

#include "tests/autotune/temp_dir.h"

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string output;
};

CliRun run(const std::string& env_and_args) {
  const std::string command = env_and_args + " 2>&1";
  CliRun r;
  std::FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    r.output.append(buffer.data(), n);
  }
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class CliTune : public ::testing::Test {
 protected:
  std::string kiln(const fs::path& cache, const std::string& args, const std::string& env = "") {
    return env + " KILN_CACHE_DIR='" + cache.string() + "' " KILN_CLI " " + args;
  }
  jit::test::TempDir dir_;
};

TEST_F(CliTune, RecordDuringDemoThenPrewarmReplaysIt) {
  const fs::path manifest = dir_.path() / "m.txt";
  const CliRun demo =
      run(kiln(dir_.path() / "c1", "demo", "KILN_RECORD='" + manifest.string() + "'"));
  ASSERT_EQ(demo.exit_code, 0) << demo.output;
  const std::string recorded = jit::test::read_text(manifest);
  EXPECT_NE(recorded.find("rms_norm(dtype=bf16,hidden=4096,weight=true)\n"), std::string::npos)
      << recorded;
  EXPECT_NE(recorded.find("silu_and_mul(dtype=bf16,d=11008)\n"), std::string::npos) << recorded;

  // Same cache: everything comes from disk. A fresh cache: everything is generated.
  const CliRun warm = run(kiln(dir_.path() / "c1", "prewarm --threads 2 " + manifest.string()));
  ASSERT_EQ(warm.exit_code, 0) << warm.output;
  EXPECT_NE(warm.output.find("3 specs, 3 kernels (0 generated, 3 from the disk cache)"),
            std::string::npos)
      << warm.output;
  const CliRun cold = run(kiln(dir_.path() / "c2", "prewarm --json " + manifest.string()));
  ASSERT_EQ(cold.exit_code, 0) << cold.output;
  EXPECT_NE(cold.output.find("\"generated\": 3"), std::string::npos) << cold.output;

  jit::test::write_text(dir_.path() / "bad.txt", "silu_and_mul(dtype=bf16,d=64)\nnot_an_op()\n");
  const CliRun bad = run(kiln(dir_.path() / "c2", "prewarm " + (dir_.path() / "bad.txt").string()));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("bad.txt:2"), std::string::npos) << bad.output;

  // --target: the same manifest as another machine's kernels (arm: AArch64 through LLVM, on
  // any host), a cache entry apart from the host's; an unknown target names the allowed ones.
  const CliRun arm =
      run(kiln(dir_.path() / "c1", "prewarm --target arm:neon " + manifest.string()));
  ASSERT_EQ(arm.exit_code, 0) << arm.output;
  EXPECT_NE(arm.output.find("3 specs, 3 kernels (3 generated, 0 from the disk cache)"),
            std::string::npos)
      << arm.output;
  const CliRun nowhere =
      run(kiln(dir_.path() / "c1", "prewarm --target riscv " + manifest.string()));
  EXPECT_EQ(nowhere.exit_code, 2) << nowhere.output;
  EXPECT_NE(nowhere.output.find("--target 'riscv'"), std::string::npos) << nowhere.output;
  EXPECT_NE(nowhere.output.find("arm:neon"), std::string::npos) << nowhere.output;
}

TEST_F(CliTune, TuneWritesTheDatabaseAndASummary) {
  const fs::path db = dir_.path() / "tuning.json";
  const CliRun tune = run(kiln(dir_.path() / "c", "tune --ops silu_and_mul --tokens 1,3 --budget 4",
                               "KILN_TUNE_DB='" + db.string() + "'"));
  ASSERT_EQ(tune.exit_code, 0) << tune.output;
  EXPECT_NE(tune.output.find("speedup"), std::string::npos) << tune.output;
  EXPECT_NE(tune.output.find("wrote 2 entries"), std::string::npos) << tune.output;
  const std::string text = jit::test::read_text(db);
  EXPECT_NE(text.find("\"spec\": \"silu_and_mul(dtype=bf16,d=14336)\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"token_bucket\": 4"), std::string::npos) << text;

  const CliRun unknown = run(kiln(dir_.path() / "c", "tune --ops nosuch --db " + db.string()));
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("allowed: rms_norm"), std::string::npos) << unknown.output;
  const CliRun zero = run(kiln(dir_.path() / "c", "tune --tokens 0 --db " + db.string()));
  EXPECT_EQ(zero.exit_code, 2) << zero.output;
}

TEST_F(CliTune, CacheExportImportAndATamperedBundle) {
  const fs::path bundle = dir_.path() / "fleet.kbundle";
  ASSERT_EQ(run(kiln(dir_.path() / "a", "compile 'silu_and_mul(dtype=bf16,d=64)'")).exit_code, 0);
  ASSERT_EQ(run(kiln(dir_.path() / "a", "compile 'rms_norm(dtype=f32,hidden=64)'")).exit_code, 0);
  const CliRun exported = run(kiln(dir_.path() / "a", "cache export " + bundle.string()));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_NE(exported.output.find("exported 2 entries"), std::string::npos) << exported.output;

  const CliRun imported = run(kiln(dir_.path() / "b", "cache import " + bundle.string()));
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
  EXPECT_NE(imported.output.find("imported 2 entries"), std::string::npos) << imported.output;
  const CliRun hit = run(kiln(dir_.path() / "b", "compile --json 'silu_and_mul(dtype=bf16,d=64)'"));
  EXPECT_NE(hit.output.find("\"source\": \"disk cache hit\""), std::string::npos) << hit.output;

  std::string bytes = jit::test::read_text(bundle);
  bytes[bytes.size() / 2] = char(bytes[bytes.size() / 2] ^ 1);
  jit::test::write_text(bundle, bytes);
  const CliRun tampered = run(kiln(dir_.path() / "c", "cache import " + bundle.string()));
  EXPECT_EQ(tampered.exit_code, 1) << tampered.output;
  EXPECT_NE(tampered.output.find("checksum"), std::string::npos) << tampered.output;

  const CliRun no_file = run(kiln(dir_.path() / "c", "cache export"));
  EXPECT_EQ(no_file.exit_code, 2) << no_file.output;
}

}  // namespace
