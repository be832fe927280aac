// The CUDA backend: templates/ rendered per spec, compiled by NVRTC to cubin + PTX for one sm,
// loaded and launched through the driver API on the caller's stream (driver.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codegen/backend.h"
#include "codegen/cuda/driver.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/cuda/render.h"

namespace jit::codegen::cuda {

/// Version of what the host adds to the templates: bump when the renderer's output for a
/// resolved config, nvrtc_options() or the CudaBinary format change (launch plans are rebuilt
/// at load from the stored config and need none). The disk-cache key uses codegen_version(),
/// which adds a digest of the embedded templates, so a template change is a miss without a bump.
inline constexpr std::string_view kCodegenVersion = "cuda-2";

/// "cuda-2-<16 hex digits>": kCodegenVersion and the xxh3-64 of every embedded template (name
/// and text). Old cubins of edited templates are never loaded from the disk cache.
std::string_view codegen_version();

/// What the CUDA backend stores in Artifact::code: cubin and PTX of one kernel for one arch,
/// with the kernel's symbol and the ptxas report.
struct CudaBinary {
  std::string arch;  ///< "sm_90"
  std::string kernel_name;
  std::vector<uint8_t> cubin;
  std::string ptx;
  std::string ptxas_log;  ///< the NVRTC program log (ptxas -v)

  std::vector<uint8_t> serialize() const;
  /// Parses serialize()'s bytes; a malformed buffer is a kCacheError (never loaded).
  static Result<CudaBinary> parse(const std::vector<uint8_t>& bytes);
  PtxasReport report() const { return parse_ptxas_report(ptxas_log); }
};

/// The cuda target of `arch`: fingerprint "cuda-sm_90".
Target cuda_target(const SmArch& arch);

/// The target jit::compile uses when none is given: the arch of CUDA device 0 when a driver
/// and a GPU exist; otherwise $KILN_CUDA_ARCH, else sm_90 (compile-only use).
Target default_cuda_target();

/// The NVRTC version ("nvrtc-13.0") or "nvrtc-unavailable".
std::string toolchain_version();

/// The NVRTC options kiln compiles every kernel with for `arch` (documented in docs/cuda.md).
std::vector<std::string> nvrtc_options(const SmArch& arch);

/// Renders and compiles `spec` with `config` for `arch`, without any cache.
Result<CudaBinary> compile_kernel(const OpSpec& spec, const Config& config, const SmArch& arch,
                                  RenderedKernel* rendered = nullptr);

/// The backend (stateless apart from the per-context module cache of its executables).
std::unique_ptr<Backend> make_backend();

}  // namespace jit::codegen::cuda
