// Compile latency of the CUDA backend, measured in one run (no GPU needed):
//   cold       NVRTC render + compile to cubin + PTX (kiln's self-contained templates)
//   +headers   the same unit with cuda_fp16.h, cuda_bf16.h and cuda_fp8.h included (what a
//              template using the toolkit's types would pay)
//   disk hit   a fresh runtime (empty memory cache) finding the cubin in the disk cache
//   nvcc       `nvcc -cubin` on the same rendered unit and templates (process start included)
// Each is the median of --reps runs; the first NVRTC dlopen is reported on its own.
//
//   build/release/bench/bench_nvrtc [--arch sm_90] [--reps 5]
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codegen/cuda/cuda_backend.h"
#include "runtime/runtime.h"

namespace {

using namespace jit;
namespace cu = codegen::cuda;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// CPU time of the calling thread (NVRTC compiles on it): under a loaded machine this is what
// the compile costs, where wall time also counts waiting for a core.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<OpSpec> kernels() {
  ir::FlashCacheWriteParams flash;
  flash.dtype = DType::kBF16, flash.kv = ir::KvCacheDtype::kFp8E4m3, flash.head_count_kv = 8;
  flash.head_size = 128, flash.block_size = 16;
  ir::RopeParams rope;
  rope.dtype = rope.cache_dtype = DType::kBF16, rope.head_size = rope.rot_dim = 128;
  rope.head_count_q = 32, rope.head_count_kv = 8;
  ir::MergeAttnStatesParams merge;
  merge.dtype = merge.out_dtype = DType::kBF16, merge.head_count = 32, merge.head_size = 128;
  merge.output_lse = true;
  ir::IndexerQuantParams indexer;
  indexer.dtype = DType::kBF16, indexer.head_dim = 128, indexer.quant_block = 128;
  indexer.block_size = 64;
  ir::GatherCacheParams gather;
  gather.dtype = DType::kBF16, gather.kv = ir::KvCacheDtype::kFp8E4m3, gather.head_dim = 576;
  gather.block_size = 64;
  return {OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kBF16, 4096, true}),
          OpSpec::make(OpKind::kFusedAddRmsNorm, ir::NormParams{DType::kBF16, 4096, true}),
          OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kBF16, 14336}),
          OpSpec::make(OpKind::kGeluTanhAndMul, ir::ActivationParams{DType::kF16, 11008}),
          OpSpec::make(OpKind::kRotaryEmbedding, rope),
          OpSpec::make(OpKind::kReshapeAndCacheFlash, flash),
          OpSpec::make(OpKind::kConvertFp8, ir::ConvertFp8Params{DType::kFp8E4m3, DType::kBF16}),
          OpSpec::make(OpKind::kMergeAttnStates, merge),
          OpSpec::make(OpKind::kTopKPerRowDecode, ir::TopKParams{2048}),
          OpSpec::make(OpKind::kConvertVerticalSlashIndexes, ir::VerticalSlashParams{64, 64, true}),
          OpSpec::make(OpKind::kIndexerKQuantAndCache, indexer),
          OpSpec::make(OpKind::kGatherAndMaybeDequantCache, gather)};
}

std::string toolkit_include() {
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* home = std::getenv(var); home && *home) return std::string(home) + "/include";
  }
  return "/usr/local/cuda/include";
}

// NVRTC on the unit with the three toolkit headers in front (-I the toolkit's include dir).
double thread_cpu_ms();

// Returns wall ms; `cpu_ms` gets the calling thread's CPU time.
double compile_with_headers(const cu::RenderedKernel& r, const cu::SmArch& arch, bool* ok,
                            double* cpu_ms) {
  const cu::Nvrtc* nvrtc = cu::Nvrtc::get().value();
  const std::string unit =
      "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cuda_fp8.h>\n" + r.unit();
  std::vector<std::string> options = cu::nvrtc_options(arch);
  options.push_back("-I" + toolkit_include());
  const auto start = Clock::now();
  const double cpu0 = thread_cpu_ms();
  auto out = nvrtc->compile(unit, "with_headers.cu", cu::template_headers(), options,
                            r.name_expression("KilnCfg"));
  *cpu_ms = thread_cpu_ms() - cpu0;
  *ok = out.is_ok();
  if (!out.is_ok()) fmt::print(stderr, "with headers: {}\n", out.status().to_string());
  return ms_since(start);
}

// nvcc -cubin on the same unit, the templates written next to it. -1 when nvcc is missing.
double compile_with_nvcc(const cu::RenderedKernel& r, const cu::SmArch& arch,
                         const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  for (const cu::SourceHeader& h : cu::template_headers()) std::ofstream(dir / h.name) << h.text;
  std::ofstream(dir / "unit.cu") << r.unit();
  const std::string nvcc =
      std::filesystem::exists("/usr/local/cuda/bin/nvcc") ? "/usr/local/cuda/bin/nvcc" : "nvcc";
  const std::string cmd = fmt::format(
      "{} -cubin -arch={} -std=c++17 --fmad=false -I{} -o {} {} > /dev/null 2>&1", nvcc,
      arch.name(), dir.string(), (dir / "unit.cubin").string(), (dir / "unit.cu").string());
  const auto start = Clock::now();
  const int rc = std::system(cmd.c_str());
  const double ms = ms_since(start);
  return rc == 0 ? ms : -1;
}

std::string load_average() {
  std::ifstream file("/proc/loadavg");
  std::string one;
  file >> one;
  return one.empty() ? "?" : one;
}

}  // namespace

int main(int argc, char** argv) {
  cu::SmArch arch{90, false};
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--arch") {
      auto a = cu::parse_sm_arch(argv[i + 1]);
      if (!a.is_ok()) {
        fmt::print(stderr, "{}\n", a.status().to_string());
        return 2;
      }
      arch = a.value();
    } else if (flag == "--reps") {
      reps = std::max(1, std::atoi(argv[i + 1]));
    } else {
      fmt::print(stderr, "usage: bench_nvrtc [--arch sm_90] [--reps 5]\n");
      return 2;
    }
  }
  auto start = Clock::now();
  auto nvrtc = cu::Nvrtc::get();
  const double dlopen_ms = ms_since(start);
  if (!nvrtc.is_ok()) {
    fmt::print("NVRTC unavailable: {}\n", nvrtc.status().to_string());
    return 1;
  }
  // The first compile also warms NVRTC's builtins library; reported, then excluded.
  start = Clock::now();
  (void)cu::compile_kernel(kernels().front(), cu::cuda_configs(kernels().front()).front(), arch);
  const double first_ms = ms_since(start);
  fmt::print("{} for {}; dlopen {:.1f} ms, first compile in the process {:.1f} ms\n",
             nvrtc.value()->version(), arch.name(), dlopen_ms, first_ms);
  fmt::print("median of {} runs, ms:\n", reps);
  fmt::print("{:<48} {:>7} {:>7} {:>8} {:>8} {:>9} {:>7} {:>5} {}\n", "kernel", "cold", "cpu",
             "+hdr", "+hdr cpu", "disk hit", "nvcc", "regs", "spills");

  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("kiln-bench-nvrtc-{}", getpid());
  RuntimeOptions ro;
  ro.cache_dir = dir / "cache";
  CompileOptions co;
  co.target = cu::cuda_target(arch);
  std::vector<double> all_cold, all_cpu, all_hit;
  for (const OpSpec& spec : kernels()) {
    const Config config = cu::cuda_configs(spec).front();
    std::vector<double> cold, cold_cpu, headers, headers_cpu, hit, nvcc;
    cu::RenderedKernel rendered;
    cu::PtxasReport report;
    bool headers_ok = true;
    for (int r = 0; r < reps; ++r) {
      start = Clock::now();
      const double cpu0 = thread_cpu_ms();
      auto bin = cu::compile_kernel(spec, config, arch, &rendered);
      cold_cpu.push_back(thread_cpu_ms() - cpu0);
      cold.push_back(ms_since(start));
      if (!bin.is_ok()) {
        fmt::print("{}: {}\n", to_string(spec), bin.status().to_string());
        return 1;
      }
      report = bin->report();
      double hcpu = 0;
      headers.push_back(compile_with_headers(rendered, arch, &headers_ok, &hcpu));
      headers_cpu.push_back(hcpu);
    }
    Runtime(ro).compile(spec, co).value();  // populate the disk cache
    for (int r = 0; r < reps; ++r) {
      Runtime fresh(ro);
      start = Clock::now();
      auto k = fresh.compile(spec, co);
      hit.push_back(ms_since(start));
      if (!k.is_ok() || k->info().source != KernelSource::kDiskCache) {
        fmt::print("{}: not a disk hit\n", to_string(spec));
        return 1;
      }
    }
    for (int r = 0; r < std::min(reps, 3); ++r) {
      nvcc.push_back(compile_with_nvcc(rendered, arch, dir / "nvcc"));
    }
    const double nvcc_ms = median(nvcc);
    all_cold.push_back(median(cold));
    all_cpu.push_back(median(cold_cpu));
    all_hit.push_back(median(hit));
    const std::string name = to_string(spec);
    fmt::print("{:<48} {:>7.1f} {:>7.1f} {:>8} {:>8.1f} {:>9.3f} {:>7} {:>5} {}\n",
               name.substr(0, 48), median(cold), median(cold_cpu),
               headers_ok ? fmt::format("{:.1f}", median(headers)) : "error", median(headers_cpu),
               median(hit), nvcc_ms < 0 ? "n/a" : fmt::format("{:.0f}", nvcc_ms), report.registers,
               report.spill_stores + report.spill_loads);
  }
  const double worst_cold = *std::max_element(all_cold.begin(), all_cold.end());
  const double worst_cpu = *std::max_element(all_cpu.begin(), all_cpu.end());
  const double worst_hit = *std::max_element(all_hit.begin(), all_hit.end());
  fmt::print(
      "worst cold {:.1f} ms wall, {:.1f} ms cpu (target < 150: {}); worst disk hit {:.3f} ms "
      "(target < 1: {}); load average at the end: {}\n",
      worst_cold, worst_cpu, worst_cpu < 150 ? "met" : "MISSED", worst_hit,
      worst_hit < 1 ? "met" : "MISSED", load_average());
  std::filesystem::remove_all(dir);
  return 0;
}
