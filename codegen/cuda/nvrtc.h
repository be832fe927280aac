// NVRTC, opened with dlopen: no link-time CUDA dependency. Compiles one translation unit to
// cubin (for one sm) and PTX, and returns the ptxas report with them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ir/status.h"

namespace jit::codegen::cuda {

/// One in-memory header the translation unit may #include by name.
struct SourceHeader {
  std::string name;  ///< include name, e.g. "kiln/norm.cuh"
  std::string text;
};

/// What one NVRTC compile produced.
struct NvrtcOutput {
  std::vector<uint8_t> cubin;  ///< empty when compiled for a virtual arch (compute_XX)
  std::string ptx;
  std::string lowered_name;  ///< the mangled name of the requested kernel expression
  std::string log;           ///< the program log: warnings and the ptxas -v report
  double compile_ms = 0;
};

/// The ptxas resource report of one kernel, parsed from the program log.
struct PtxasReport {
  int registers = -1;  ///< -1 when the log has no report
  int spill_stores = 0;
  int spill_loads = 0;
  int stack_bytes = 0;
  int shared_bytes = 0;    ///< static shared memory ("smem")
  int constant_bytes = 0;  ///< cmem[0] (the kernel parameters)
  /// "registers 24, spills 0/0 bytes, stack 0 bytes, smem 132 bytes, cmem[0] 392 bytes".
  std::string to_string() const;
};

/// Extracts the ptxas report of the kernel from an NVRTC log (-Xptxas=-v).
PtxasReport parse_ptxas_report(const std::string& log);

/// The NVRTC library, loaded once per process (thread-safe).
class Nvrtc {
 public:
  /// The process-wide instance, or the reason it cannot be loaded (library not found, missing
  /// symbols). Searched: $KILN_NVRTC (a full path), the loader path (libnvrtc.so.13 and .12),
  /// then $CUDA_HOME/lib64 and /usr/local/cuda/lib64.
  static Result<const Nvrtc*> get();

  /// "nvrtc-13.0": part of every CUDA disk-cache key.
  const std::string& version() const { return version_; }

  /// Compiles `source` (named `name` in diagnostics) with `headers` available to #include and
  /// `options` (e.g. "--gpu-architecture=sm_90"), and looks up `name_expression` (e.g.
  /// "kiln::rms_norm_kernel<KilnCfg>"). With arch sm_XX both cubin and PTX are returned. A
  /// failure is a kCompileError whose detail is the log.
  Result<NvrtcOutput> compile(const std::string& source, const std::string& name,
                              const std::vector<SourceHeader>& headers,
                              const std::vector<std::string>& options,
                              const std::string& name_expression) const;

  struct Api;  // the resolved function pointers

 private:
  Nvrtc() = default;
  void* handle_ = nullptr;
  std::string version_;
  Api* api_ = nullptr;
};

}  // namespace jit::codegen::cuda
