#include "codegen/cuda/nvrtc.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <regex>

namespace jit::codegen::cuda {
namespace {

// The NVRTC C API, declared here with plain types so that no toolkit header is needed.
using nvrtcProgram = struct _nvrtcProgram*;
using nvrtcResult = int;
constexpr nvrtcResult kNvrtcSuccess = 0;

}  // namespace

struct Nvrtc::Api {
  nvrtcResult (*version)(int*, int*);
  const char* (*error_string)(nvrtcResult);
  nvrtcResult (*create_program)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                const char* const*);
  nvrtcResult (*destroy_program)(nvrtcProgram*);
  nvrtcResult (*add_name_expression)(nvrtcProgram, const char*);
  nvrtcResult (*compile_program)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*get_lowered_name)(nvrtcProgram, const char*, const char**);
  nvrtcResult (*get_log_size)(nvrtcProgram, size_t*);
  nvrtcResult (*get_log)(nvrtcProgram, char*);
  nvrtcResult (*get_ptx_size)(nvrtcProgram, size_t*);
  nvrtcResult (*get_ptx)(nvrtcProgram, char*);
  nvrtcResult (*get_cubin_size)(nvrtcProgram, size_t*);
  nvrtcResult (*get_cubin)(nvrtcProgram, char*);
};

namespace {

// Candidate library paths, most specific first. libnvrtc loads libnvrtc-builtins from its own
// directory only when opened by a path that names that directory (or via the loader path).
std::vector<std::string> nvrtc_candidates() {
  std::vector<std::string> paths;
  if (const char* explicit_path = std::getenv("KILN_NVRTC"); explicit_path && *explicit_path) {
    paths.emplace_back(explicit_path);
    return paths;
  }
  paths.emplace_back("libnvrtc.so.13");
  paths.emplace_back("libnvrtc.so.12");
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* home = std::getenv(var); home && *home) {
      paths.push_back(fmt::format("{}/lib64/libnvrtc.so", home));
    }
  }
  paths.emplace_back("/usr/local/cuda/lib64/libnvrtc.so");
  return paths;
}

template <class F>
bool resolve(void* handle, const char* name, F*& fn, std::string& missing) {
  fn = reinterpret_cast<F*>(dlsym(handle, name));
  if (fn == nullptr) missing += fmt::format(" {}", name);
  return fn != nullptr;
}

Result<const Nvrtc*> load_nvrtc(Nvrtc* nvrtc, void** handle_out, Nvrtc::Api* api,
                                std::string* version) {
  std::string tried;
  void* handle = nullptr;
  for (const std::string& path : nvrtc_candidates()) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    tried += fmt::format("\n  {}: {}", path, dlerror());
  }
  if (handle == nullptr) {
    return Status(StatusCode::kUnavailable,
                  "NVRTC unavailable: libnvrtc not found (set KILN_NVRTC to its full path)",
                  "tried:" + tried);
  }
  std::string missing;
  resolve(handle, "nvrtcVersion", api->version, missing);
  resolve(handle, "nvrtcGetErrorString", api->error_string, missing);
  resolve(handle, "nvrtcCreateProgram", api->create_program, missing);
  resolve(handle, "nvrtcDestroyProgram", api->destroy_program, missing);
  resolve(handle, "nvrtcAddNameExpression", api->add_name_expression, missing);
  resolve(handle, "nvrtcCompileProgram", api->compile_program, missing);
  resolve(handle, "nvrtcGetLoweredName", api->get_lowered_name, missing);
  resolve(handle, "nvrtcGetProgramLogSize", api->get_log_size, missing);
  resolve(handle, "nvrtcGetProgramLog", api->get_log, missing);
  resolve(handle, "nvrtcGetPTXSize", api->get_ptx_size, missing);
  resolve(handle, "nvrtcGetPTX", api->get_ptx, missing);
  resolve(handle, "nvrtcGetCUBINSize", api->get_cubin_size, missing);
  resolve(handle, "nvrtcGetCUBIN", api->get_cubin, missing);
  if (!missing.empty()) {
    dlclose(handle);
    return Status(StatusCode::kUnavailable,
                  fmt::format("NVRTC unavailable: the library lacks{}", missing));
  }
  int major = 0, minor = 0;
  api->version(&major, &minor);
  *version = fmt::format("nvrtc-{}.{}", major, minor);
  *handle_out = handle;
  return static_cast<const Nvrtc*>(nvrtc);
}

}  // namespace

Result<const Nvrtc*> Nvrtc::get() {
  // Loaded once; a failure is remembered too (the library does not appear mid-process).
  static Nvrtc instance;
  static Api api;
  static Result<const Nvrtc*> loaded = [] {
    instance.api_ = &api;
    return load_nvrtc(&instance, &instance.handle_, &api, &instance.version_);
  }();
  return loaded;
}

Result<NvrtcOutput> Nvrtc::compile(const std::string& source, const std::string& name,
                                   const std::vector<SourceHeader>& headers,
                                   const std::vector<std::string>& options,
                                   const std::string& name_expression) const {
  const auto start = std::chrono::steady_clock::now();
  std::vector<const char*> header_texts, header_names, option_ptrs;
  for (const SourceHeader& h : headers) {
    header_texts.push_back(h.text.c_str());
    header_names.push_back(h.name.c_str());
  }
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());

  nvrtcProgram program = nullptr;
  nvrtcResult rc = api_->create_program(&program, source.c_str(), name.c_str(), int(headers.size()),
                                        header_texts.data(), header_names.data());
  if (rc != kNvrtcSuccess) {
    return Status(StatusCode::kCompileError,
                  fmt::format("nvrtcCreateProgram failed: {}", api_->error_string(rc)));
  }
  struct Guard {
    const Api* api;
    nvrtcProgram* program;
    ~Guard() { api->destroy_program(program); }
  } guard{api_, &program};

  api_->add_name_expression(program, name_expression.c_str());
  rc = api_->compile_program(program, int(option_ptrs.size()), option_ptrs.data());
  NvrtcOutput out;
  size_t log_size = 0;
  api_->get_log_size(program, &log_size);
  out.log.resize(log_size);
  if (log_size > 0) api_->get_log(program, out.log.data());
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  if (rc != kNvrtcSuccess) {
    return Status(StatusCode::kCompileError,
                  fmt::format("NVRTC failed to compile {}: {}", name, api_->error_string(rc)),
                  out.log);
  }
  const char* lowered = nullptr;
  if (api_->get_lowered_name(program, name_expression.c_str(), &lowered) != kNvrtcSuccess ||
      lowered == nullptr) {
    return Status(StatusCode::kCompileError,
                  fmt::format("NVRTC: no kernel named {} in {}", name_expression, name), out.log);
  }
  out.lowered_name = lowered;
  size_t ptx_size = 0;
  if (api_->get_ptx_size(program, &ptx_size) == kNvrtcSuccess && ptx_size > 0) {
    out.ptx.resize(ptx_size);
    api_->get_ptx(program, out.ptx.data());
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  }
  size_t cubin_size = 0;
  if (api_->get_cubin_size(program, &cubin_size) == kNvrtcSuccess && cubin_size > 0) {
    out.cubin.resize(cubin_size);
    api_->get_cubin(program, reinterpret_cast<char*>(out.cubin.data()));
  }
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string PtxasReport::to_string() const {
  if (registers < 0) return "no ptxas report";
  return fmt::format(
      "registers {}, spills {}/{} bytes (stores/loads), stack {} bytes, smem {} bytes, "
      "cmem[0] {} bytes",
      registers, spill_stores, spill_loads, stack_bytes, shared_bytes, constant_bytes);
}

PtxasReport parse_ptxas_report(const std::string& log) {
  // ptxas -v writes, per entry function:
  //   N bytes stack frame, N bytes spill stores, N bytes spill loads
  //   Used N registers, [used N barriers,] [N bytes smem,] N bytes cmem[0]
  PtxasReport report;
  std::smatch m;
  static const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  static const std::regex cmem(R"((\d+) bytes cmem\[0\])");
  if (std::regex_search(log, m, used)) report.registers = std::stoi(m[1]);
  if (std::regex_search(log, m, frame)) {
    report.stack_bytes = std::stoi(m[1]);
    report.spill_stores = std::stoi(m[2]);
    report.spill_loads = std::stoi(m[3]);
  }
  if (std::regex_search(log, m, smem)) report.shared_bytes = std::stoi(m[1]);
  if (std::regex_search(log, m, cmem)) report.constant_bytes = std::stoi(m[1]);
  return report;
}

}  // namespace jit::codegen::cuda
