// The kiln command line: a second process loads a kernel from the disk cache without
// re-emitting it; malformed specs give exit code 2 and a message naming the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string output;
};

CliRun run(const std::string& args, const fs::path& cache_dir) {
  const std::string command =
      "KILN_CACHE_DIR='" + cache_dir.string() + "' " KILN_CLI " " + args + " 2>&1";
  CliRun r;
  std::FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    r.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "kiln-cli-test-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    dir_ /= "cache";
  }
  void TearDown() override { fs::remove_all(dir_.parent_path()); }
  fs::path dir_;
};

TEST_F(Cli, SecondProcessLoadsFromDiskWithoutEmitting) {
  const std::string spec = "'rms_norm(dtype=bf16,hidden=4096)'";
  const CliRun first = run("compile --json " + spec, dir_);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("\"source\": \"generated\""), std::string::npos) << first.output;
  const CliRun second = run("compile --json " + spec, dir_);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("\"source\": \"disk cache hit\""), std::string::npos)
      << second.output;
  EXPECT_NE(second.output.find("\"generate_us\": 0.0"), std::string::npos) << second.output;
  const CliRun ls = run("cache ls", dir_);
  EXPECT_NE(ls.output.find("rms_norm(dtype=bf16,hidden=4096,weight=true)"), std::string::npos)
      << ls.output;
}

TEST_F(Cli, MalformedSpecExitsWithBadInput) {
  const CliRun r = run("compile 'rms_norm(dtype=bf17,hidden=4096)'", dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("dtype"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bf16"), std::string::npos) << "lists allowed values: " << r.output;
}

TEST_F(Cli, DumpShowsDisassembly) {
  const CliRun r = run("compile --dump 'silu_and_mul(dtype=f32,d=100)'", dir_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("vfmadd"), std::string::npos) << r.output;
}

TEST_F(Cli, CheckPassesForX86Kernels) {
  const CliRun r = run("check 'gelu_and_mul(dtype=bf16,d=33)'", dir_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("passed"), std::string::npos) << r.output;
}

TEST_F(Cli, CheckOnTheRefBackendSaysRefIsComparedWithItself) {
  const CliRun r =
      run("check --backend ref 'gather_and_maybe_dequant_cache(dtype=bf16,"
          "kv=fp8_e4m3,head_dim=64,block_size=16)'",
          dir_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("compared with itself"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("0 failed"), std::string::npos) << r.output;
}

TEST_F(Cli, CheckOfAnInvalidSpecNamesTheField) {
  const CliRun r =
      run("check 'paged_attention_v1(dtype=bf16,kv=auto,head_size=128,block_size=16,"
          "heads_q=6,heads_kv=4)'",
          dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("heads"), std::string::npos) << r.output;
}

TEST_F(Cli, ListShowsTheBackendsOfEveryOp) {
  const CliRun r = run("list", dir_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Every op has the ref backend; the x86 kernels show up for the ops they serve.
  EXPECT_EQ(r.output.find("(planned)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("paged_attention_v1"), std::string::npos);
  const size_t rms = r.output.find("\nrms_norm ");
  ASSERT_NE(rms, std::string::npos) << r.output;
  const std::string line = r.output.substr(rms + 1, r.output.find('\n', rms + 1) - rms - 1);
  EXPECT_NE(line.find("x86"), std::string::npos) << line;
  EXPECT_NE(line.find("ref"), std::string::npos) << line;
}

TEST_F(Cli, CacheVerifyAndClear) {
  ASSERT_EQ(run("compile 'silu_and_mul(dtype=bf16,d=64)'", dir_).exit_code, 0);
  const CliRun verify = run("cache verify", dir_);
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  EXPECT_NE(verify.output.find("checked  1 entries"), std::string::npos) << verify.output;
  const CliRun clear = run("cache clear", dir_);
  EXPECT_EQ(clear.exit_code, 0) << clear.output;
  const CliRun stats = run("cache stats --json", dir_);
  EXPECT_NE(stats.output.find("\"entries\": 0"), std::string::npos) << stats.output;
}

}  // namespace
