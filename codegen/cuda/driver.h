// The CUDA driver API, opened with dlopen (libcuda.so.1): device queries, module loading and
// kernel launches. Without a driver or a GPU every entry point returns kUnavailable with
// "CUDA unavailable: <reason>"; nothing in kiln links against CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/status.h"

namespace jit::codegen::cuda {

/// An sm architecture: 90 for sm_90, with `arch_specific` for sm_90a.
struct SmArch {
  int version = 0;  ///< major * 10 + minor
  bool arch_specific = false;
  /// "sm_90", "sm_90a".
  std::string name() const;
  bool operator==(const SmArch&) const = default;
};

/// Parses "sm_90", "sm_90a", "90" or "cuda:sm_90"; the error lists the accepted archs.
Result<SmArch> parse_sm_arch(std::string_view text);

/// The archs kiln compiles for offline (the list): sm_80, 86, 89, 90, 90a, 100, 120.
const std::vector<SmArch>& offline_archs();

/// The driver functions kiln uses (opaque handles as void*).
struct DriverApi;

/// The CUDA driver, initialised once per process (thread-safe).
class Driver {
 public:
  /// The driver with at least one device, or kUnavailable "CUDA unavailable: <reason>"
  /// (libcuda.so.1 not found, cuInit failed with its error name, no device).
  static Result<const Driver*> get();

  int device_count() const { return device_count_; }
  /// Compute capability of `device` as an SmArch (sm_90 for 9.0).
  Result<SmArch> device_arch(int device) const;
  /// Makes `device`'s primary context current on this thread when no context is current.
  Status ensure_context(int device) const;
  /// Opaque CUcontext current on this thread (nullptr when none).
  void* current_context() const;
  /// Loads a cubin or PTX image into the current context and returns the CUfunction `name`.
  Result<void*> load_function(const void* image, const std::string& name) const;
  /// cuLaunchKernel with one by-value parameter struct.
  Status launch(void* function, const unsigned grid[3], const unsigned block[3],
                unsigned shared_bytes, void* stream, const void* params, size_t params_size) const;

  // Memory helpers for native tests and benchmarks. Like the CUDA runtime they work in the
  // current context and make device 0's primary context current when there is none (the driver
  // API itself fails with CUDA_ERROR_INVALID_CONTEXT there).
  Result<void*> alloc(size_t bytes) const;
  Status free(void* ptr) const;
  Status copy_to_device(void* dst, const void* src, size_t bytes) const;
  Status copy_to_host(void* dst, const void* src, size_t bytes) const;
  /// Device-to-device copy (the copy engine's or SMs' bandwidth: the benchmarks' ceiling).
  Status copy_on_device(void* dst, const void* src, size_t bytes) const;
  Status synchronize() const;

  const DriverApi& api() const { return *api_; }

 private:
  Driver() = default;
  Status check(int rc, const char* what) const;
  DriverApi* api_ = nullptr;
  int device_count_ = 0;
};

/// The stream kiln launches on from this thread: set it to the framework's current stream
/// (e.g. torch.cuda.current_stream().cuda_stream) before calling jit::ops with CUDA tensors.
/// nullptr (the default) is the legacy default stream.
void set_current_stream(void* stream);
void* current_stream();

/// Sets the launch stream for a scope and restores the previous one.
class StreamGuard {
 public:
  explicit StreamGuard(void* stream) : previous_(current_stream()) { set_current_stream(stream); }
  ~StreamGuard() { set_current_stream(previous_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  void* previous_;
};

}  // namespace jit::codegen::cuda
