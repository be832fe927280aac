// `kiln compile SPEC --target cuda:sm_XX [--dump]` without a GPU: the rendered source, the ptxas
// report and the PTX for the requested arch; a bad target is refused with the allowed values.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "codegen/cuda/nvrtc.h"

namespace {

struct CliRun {
  int code = -1;
  std::string output;
};

// Runs the kiln binary with `args` (stdout and stderr), its cache in a fresh directory.
CliRun run_kiln(const std::string& args) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("kiln-cuda-cli-" + std::to_string(::getpid()));
  const std::string command =
      "KILN_CACHE_DIR=" + dir.string() + " " + std::string(KILN_CLI) + " " + args + " 2>&1";
  CliRun r;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer;
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    r.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::filesystem::remove_all(dir);
  return r;
}

TEST(CudaCli, CompileForSm90DumpsSourcePtxasAndPtx) {
  auto nvrtc = jit::codegen::cuda::Nvrtc::get();
  if (!nvrtc.is_ok()) GTEST_SKIP() << "NVRTC not found: " << nvrtc.status().to_string();
  const CliRun r =
      run_kiln("compile 'rms_norm(dtype=bf16,hidden=4096)' --target cuda:sm_90 --dump");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("backend   cuda (cuda:sm_90)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("struct KilnCfg"), std::string::npos);
  EXPECT_NE(r.output.find("template __global__ void kiln::rms_norm_kernel<KilnCfg>"),
            std::string::npos);
  EXPECT_NE(r.output.find("---- ptxas (sm_90) ----"), std::string::npos);
  EXPECT_NE(r.output.find("spills 0/0 bytes"), std::string::npos);
  EXPECT_NE(r.output.find(".target sm_90"), std::string::npos);
}

TEST(CudaCli, JsonDumpCarriesThePtx) {
  auto nvrtc = jit::codegen::cuda::Nvrtc::get();
  if (!nvrtc.is_ok()) GTEST_SKIP() << "NVRTC not found: " << nvrtc.status().to_string();
  const CliRun r =
      run_kiln("compile 'silu_and_mul(dtype=f16,d=4096)' --target cuda:sm_100 --dump --json");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\"target\": \"cuda:sm_100\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"ptx\""), std::string::npos);
  EXPECT_NE(r.output.find("\"ptxas\""), std::string::npos);
}

TEST(CudaCli, BadTargetIsRefusedWithTheAllowedValues) {
  const CliRun r = run_kiln("compile 'rms_norm(dtype=bf16,hidden=64)' --target cuda:sm_70");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("allowed: sm_XX"), std::string::npos) << r.output;
  const CliRun other = run_kiln("compile 'rms_norm(dtype=bf16,hidden=64)' --target rocm:gfx90a");
  EXPECT_NE(other.code, 0);
  EXPECT_NE(other.output.find("--target 'rocm:gfx90a'"), std::string::npos) << other.output;
}

// --config compiles the given knobs: the rendered config struct and the report line show them;
// a malformed config and a knob value the backend refuses fail with the reason.
TEST(CudaCli, ConfigCompilesTheGivenKnobs) {
  auto nvrtc = jit::codegen::cuda::Nvrtc::get();
  if (!nvrtc.is_ok()) GTEST_SKIP() << "NVRTC not found: " << nvrtc.status().to_string();
  const std::string spec =
      "'paged_attention_v1(dtype=bf16,kv=auto,head_size=128,block_size=16,heads_q=32,"
      "heads_kv=4)' --target cuda:sm_90";
  const CliRun r = run_kiln("compile " + spec + " --config threads=256,heads_per_cta=2 --dump");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("config    threads=256,heads_per_cta=2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kHeadsPerCta = 2;"), std::string::npos);
  EXPECT_NE(r.output.find("kThreads = 256;"), std::string::npos);
  const CliRun bad = run_kiln("compile " + spec + " --config heads_per_cta=3");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("heads_per_cta=3 is not allowed"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("allowed: 1, 2, 4, 8"), std::string::npos) << bad.output;
  const CliRun malformed = run_kiln("compile " + spec + " --config threads");
  EXPECT_NE(malformed.code, 0);
  EXPECT_NE(malformed.output.find("--config 'threads' is not a config"), std::string::npos)
      << malformed.output;
}

}  // namespace
