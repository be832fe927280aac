// The CUDA backend without a GPU: NVRTC compiles every kernel for sm_80, sm_90 and sm_100 with
// no spills; the offline arch list compiles; the rendered unit is one config struct plus one
// instantiation; launching without a driver says why; cubins round-trip through the disk cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <mutex>
#include <regex>

#include "codegen/cuda/cuda_backend.h"
#include "codegen/cuda/driver.h"
#include "runtime/disk_cache.h"
#include "runtime/runtime.h"
#include "tests/cuda/cuda_specs.h"
#include "tests/harness/example_specs.h"

namespace jit {
namespace {

namespace cu = codegen::cuda;

// NVRTC is part of the CUDA toolkit, not of kiln: without it there is nothing to compile.
#define REQUIRE_NVRTC()                                                                    \
  do {                                                                                     \
    auto nvrtc = cu::Nvrtc::get();                                                         \
    if (!nvrtc.is_ok()) GTEST_SKIP() << "NVRTC not found: " << nvrtc.status().to_string(); \
  } while (0)

TEST(CudaArch, ParsesAndRejects) {
  auto a = cu::parse_sm_arch("sm_90a");
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->version, 90);
  EXPECT_TRUE(a->arch_specific);
  EXPECT_EQ(a->name(), "sm_90a");
  EXPECT_EQ(cu::parse_sm_arch("cuda:sm_100")->name(), "sm_100");
  for (const char* bad : {"sm_75", "sm_x", "", "gfx90a", "sm_1000"}) {
    auto r = cu::parse_sm_arch(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("allowed: sm_XX"), std::string::npos)
        << r.status().message();
  }
  EXPECT_EQ(cu::cuda_target(*a).name(), "cuda:sm_90a");
  EXPECT_EQ(cu::cuda_target(*a).fingerprint, "cuda-sm_90a");
}

TEST(CudaRender, OneConfigStructAndOneInstantiationNoToolkitHeader) {
  const OpSpec spec = OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kBF16, 4096, true});
  auto r = cu::render(spec, cu::cuda_configs(spec).front());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const std::string unit = r->unit();
  EXPECT_NE(unit.find("static constexpr int kHidden = 4096;"), std::string::npos) << unit;
  EXPECT_NE(unit.find("using T = kiln::bf16;"), std::string::npos) << unit;
  const std::regex inst(R"(template __global__ void kiln::rms_norm_kernel<KilnCfg>)");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(unit.begin(), unit.end(), inst), std::sregex_iterator()),
      1);
  EXPECT_EQ(unit.find("#include <"), std::string::npos) << "no system/toolkit header";
  for (const auto& h : cu::template_headers()) {
    EXPECT_EQ(h.text.find("#include <"), std::string::npos)
        << h.name << " includes a system header";
  }
}

TEST(CudaRender, RejectsBadConfigsByName) {
  const OpSpec spec = OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kF16, 24});
  auto r = cu::render(spec, Config().set("threads", 48));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("threads=48"), std::string::npos);
  r = cu::render(spec, Config().set("vec", 16));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("vec=16"), std::string::npos) << r.status().message();
  r = cu::render(spec, Config().set("unroll", 2));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("unknown knob 'unroll'"), std::string::npos);
}

TEST(CudaPtxas, ParsesTheReport) {
  const std::string log =
      "ptxas info    : Compiling entry function '_Z3fooI7KilnCfgEvN4kiln8NormArgsE' for "
      "'sm_90'\nptxas info    : Function properties for _Z3foo\n    8 bytes stack frame, 4 "
      "bytes spill stores, 4 bytes spill loads\nptxas info    : Used 40 registers, used 1 "
      "barriers, 132 bytes smem, 400 bytes cmem[0]\n";
  const cu::PtxasReport r = cu::parse_ptxas_report(log);
  EXPECT_EQ(r.registers, 40);
  EXPECT_EQ(r.spill_stores, 4);
  EXPECT_EQ(r.spill_loads, 4);
  EXPECT_EQ(r.stack_bytes, 8);
  EXPECT_EQ(r.shared_bytes, 132);
  EXPECT_EQ(r.constant_bytes, 400);
  EXPECT_EQ(cu::parse_ptxas_report("").registers, -1);
}

// Every kernel x {sm_80, sm_90, sm_100}: cubin + PTX, the ptxas report present, no spills.
// Compiles run two at a time (the CI machine has two cores).
TEST(CudaCompile, EveryKernelCompilesForSm80Sm90Sm100WithoutSpills) {
  REQUIRE_NVRTC();
  const std::vector<OpSpec> specs = test::cuda::compile_specs();
  std::vector<std::pair<OpSpec, cu::SmArch>> jobs;
  for (const OpSpec& spec : specs) {
    for (int sm : {80, 90, 100}) jobs.emplace_back(spec, cu::SmArch{sm, false});
  }
  std::mutex mutex;
  std::vector<std::string> failures;
  auto work = [&](size_t first) {
    for (size_t i = first; i < jobs.size(); i += 2) {
      const auto& [spec, arch] = jobs[i];
      auto bin = cu::compile_kernel(spec, cu::cuda_configs(spec).front(), arch);
      std::string problem;
      if (!bin.is_ok()) {
        problem = bin.status().to_string();
      } else {
        const cu::PtxasReport r = bin->report();
        if (bin->cubin.empty())
          problem = "no cubin";
        else if (bin->ptx.find(".target " + arch.name()) == std::string::npos)
          problem = "PTX target";
        else if (r.registers <= 0)
          problem = "no ptxas report: " + bin->ptxas_log;
        else if (r.spill_stores != 0 || r.spill_loads != 0)
          problem = "spills: " + r.to_string();
      }
      if (!problem.empty()) {
        std::lock_guard lock(mutex);
        failures.push_back(to_string(spec) + " " + arch.name() + ": " + problem);
      }
    }
  };
  auto other = std::async(std::launch::async, work, 1);
  work(0);
  other.get();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  // Every op the backend has a template for is in the list.
  auto backend = cu::make_backend();
  for (OpKind op : all_op_kinds()) {
    if (!backend->generates(op, cu::cuda_target({90, false}))) continue;
    const bool listed =
        std::any_of(specs.begin(), specs.end(), [&](const OpSpec& s) { return s.op == op; });
    EXPECT_TRUE(listed) << op_name(op) << " has a template but is not compiled here";
  }
}

TEST(CudaCompile, OfflineArchListKeepsPtx) {
  REQUIRE_NVRTC();
  const OpSpec spec = OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kBF16, 4096});
  for (const cu::SmArch& arch : cu::offline_archs()) {
    auto bin = cu::compile_kernel(spec, cu::cuda_configs(spec).front(), arch);
    ASSERT_TRUE(bin.is_ok()) << arch.name() << ": " << bin.status().to_string();
    EXPECT_FALSE(bin->cubin.empty()) << arch.name();
    EXPECT_NE(bin->ptx.find(".target " + arch.name()), std::string::npos) << arch.name();
    EXPECT_EQ(bin->report().spill_stores, 0) << arch.name();
  }
}

TEST(CudaCompile, CompileErrorCarriesLogAndSource) {
  REQUIRE_NVRTC();
  auto nvrtc = cu::Nvrtc::get();
  auto out = nvrtc.value()->compile("__global__ void k() { undefined_name(); }", "bad.cu", {},
                                    {"--gpu-architecture=sm_90"}, "k");
  ASSERT_FALSE(out.is_ok());
  EXPECT_EQ(out.status().code(), StatusCode::kCompileError);
  EXPECT_NE(out.status().detail().find("undefined_name"), std::string::npos)
      << out.status().detail();
}

Runtime& runtime_without_cache() {
  static Runtime runtime{RuntimeOptions{}};
  return runtime;
}

TEST(CudaLaunch, WithoutDriverCompileWorksAndLaunchSaysWhy) {
  REQUIRE_NVRTC();
  if (cu::Driver::get().is_ok()) GTEST_SKIP() << "a CUDA driver and GPU exist: nothing to check";
  const OpSpec spec = OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kF16, 256, true});
  CompileOptions options;
  options.target = cu::cuda_target({90, false});
  auto kernel = runtime_without_cache().compile(spec, options);
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  EXPECT_EQ(kernel->info().backend, BackendKind::kCuda);
  EXPECT_EQ(kernel->info().target.name(), "cuda:sm_90");
  // Device pointers are never dereferenced on the host: the launch fails first.
  alignas(16) static uint16_t dummy[4 * 256];
  const Device gpu = Device::cuda(0);
  Tensor out(dummy, DType::kF16, {4, 256}, gpu), in(dummy, DType::kF16, {4, 256}, gpu),
      w(dummy, DType::kF16, {256}, gpu);
  const Status s = kernel->run(KernelArgs({out, in, w}, {1e-6}));
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message().rfind("CUDA unavailable: ", 0), 0u) << s.message();
  std::printf("launch without a driver: %s\n", s.message().c_str());
}

TEST(CudaLaunch, ExplicitBackendWithoutTargetUsesDefaultArch) {
  REQUIRE_NVRTC();
  CompileOptions options;
  options.backend = BackendKind::kCuda;
  const OpSpec spec = OpSpec::make(OpKind::kGeluAndMul, ir::ActivationParams{DType::kF32, 100});
  auto kernel = runtime_without_cache().compile(spec, options);
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  EXPECT_EQ(kernel->info().target.name(), cu::default_cuda_target().name());
}

TEST(CudaLaunch, UnsupportedOpIsRejectedWithReason) {
  CompileOptions options;
  options.target = cu::cuda_target({90, false});
  // The first op with an example spec that the cuda backend has no template for.
  auto backend = cu::make_backend();
  std::string text;
  for (OpKind op : all_op_kinds()) {
    const auto it = test::valid_examples().find(std::string(op_name(op)));
    if (it != test::valid_examples().end() &&
        !backend->generates(op, cu::cuda_target({90, false}))) {
      text = it->second.front();
      break;
    }
  }
  ASSERT_FALSE(text.empty()) << "every op has a cuda template";
  auto spec = parse_spec(text);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto kernel = runtime_without_cache().compile(spec.value(), options);
  ASSERT_FALSE(kernel.is_ok());
  EXPECT_NE(kernel.status().message().find("cuda"), std::string::npos) << kernel.status().message();
}

// A caller's partial config is lowered as the renderer resolves it, and the artifact keeps
// every knob: the launch plan reads vec (here the default 8) and threads from it, so a plan
// built from the partial config (vec 1) would check the wrong alignment.
TEST(CudaCompile, ArtifactKeepsTheResolvedConfig) {
  REQUIRE_NVRTC();
  const OpSpec spec = OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kBF16, 4096, true});
  const auto backend = cu::make_backend();
  auto artifact = backend->lower(spec, Config().set("threads", 128), cu::cuda_target({90, false}));
  ASSERT_TRUE(artifact.is_ok()) << artifact.status().to_string();
  EXPECT_EQ(artifact->config.get("threads", 0), 128);
  EXPECT_EQ(artifact->config.get("vec", 0), 8) << artifact->config.to_string();
  EXPECT_NE(artifact->source.find("kVec = 8;"), std::string::npos);
}

// A bad knob is refused before NVRTC runs (so this needs no toolkit).
TEST(CudaCompile, BadKnobIsRefusedBeforeNvrtc) {
  const OpSpec spec = OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kBF16, 4096, true});
  auto bad = cu::make_backend()->lower(spec, Config().set("vec", 3), cu::cuda_target({90, false}));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("vec=3"), std::string::npos) << bad.status().message();
}

// The disk-cache key's codegen version carries a digest of the embedded templates, so an edited
// template never loads an old cubin.
TEST(CudaCache, CodegenVersionDigestsTheTemplates) {
  const std::string_view v = cu::codegen_version();
  EXPECT_TRUE(std::regex_match(std::string(v), std::regex("cuda-[0-9]+-[0-9a-f]{16}"))) << v;
  EXPECT_EQ(v.substr(0, cu::kCodegenVersion.size()), cu::kCodegenVersion);
  EXPECT_EQ(cu::make_backend()->codegen_version(), v);
}

TEST(CudaCache, CubinRoundTripsThroughTheDiskCache) {
  REQUIRE_NVRTC();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kiln-cuda-cache-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  RuntimeOptions ro;
  ro.cache_dir = dir;
  const OpSpec spec =
      OpSpec::make(OpKind::kFusedAddRmsNorm, ir::NormParams{DType::kBF16, 2048, true});
  CompileOptions options;
  options.target = cu::cuda_target({100, false});
  std::string key;
  {
    Runtime first(ro);
    auto k = first.compile(spec, options);
    ASSERT_TRUE(k.is_ok()) << k.status().to_string();
    EXPECT_EQ(k->info().source, KernelSource::kGenerated);
    key = k->info().cache_key;
    EXPECT_FALSE(key.empty());
  }
  Runtime second(ro);
  auto k = second.compile(spec, options);
  ASSERT_TRUE(k.is_ok()) << k.status().to_string();
  EXPECT_EQ(k->info().source, KernelSource::kDiskCache);
  EXPECT_EQ(k->info().cache_key, key);
  EXPECT_EQ(k->info().generate_us, 0);
  // The stored bytes are the kernel NVRTC makes: same cubin, PTX and symbol.
  const Config config = cu::cuda_configs(spec).front();
  auto fresh = cu::compile_kernel(spec, config, {100, false});
  ASSERT_TRUE(fresh.is_ok());
  const auto cache_key = runtime::make_cache_key(spec, config, "cuda-sm_100", cu::codegen_version(),
                                                 cu::toolchain_version());
  auto stored = second.disk_cache()->load(cache_key);
  ASSERT_TRUE(stored.has_value());
  auto binary = cu::CudaBinary::parse(stored->code);
  ASSERT_TRUE(binary.is_ok()) << binary.status().to_string();
  // NVRTC is not bit-reproducible across compiles: internal-linkage symbols carry a per-compile
  // hash (_INTERNAL_<hash>_<file>_<n>), so the comparison strips those names.
  const std::regex internal(R"(_INTERNAL_[0-9a-zA-Z_]+?kiln)");
  EXPECT_EQ(std::regex_replace(binary->ptx, internal, "INTERNAL"),
            std::regex_replace(fresh->ptx, internal, "INTERNAL"));
  ASSERT_GE(binary->cubin.size(), 4u);
  EXPECT_EQ(std::string(binary->cubin.begin(), binary->cubin.begin() + 4),
            "\x7f"
            "ELF");
  EXPECT_EQ(binary->cubin.size(), fresh->cubin.size());
  EXPECT_EQ(binary->kernel_name, fresh->kernel_name);
  EXPECT_EQ(binary->arch, "sm_100");
  // A different arch is a different entry.
  options.target = cu::cuda_target({80, false});
  auto k80 = second.compile(spec, options);
  ASSERT_TRUE(k80.is_ok());
  EXPECT_NE(k80->info().cache_key, key);
  std::filesystem::remove_all(dir);
}

TEST(CudaCache, MalformedBinaryIsACacheErrorNotALoad) {
  cu::CudaBinary b;
  b.arch = "sm_90";
  b.kernel_name = "k";
  b.cubin = {1, 2, 3};
  b.ptx = ".version 9.0";
  std::vector<uint8_t> bytes = b.serialize();
  auto ok = cu::CudaBinary::parse(bytes);
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(ok->cubin, b.cubin);
  bytes.pop_back();
  EXPECT_EQ(cu::CudaBinary::parse(bytes).status().code(), StatusCode::kCacheError);
  bytes[0] = 'X';
  EXPECT_EQ(cu::CudaBinary::parse(bytes).status().code(), StatusCode::kCacheError);
}

}  // namespace
}  // namespace jit
