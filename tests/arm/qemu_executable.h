// Runs arm-backend kernels on an x86 host: a long-lived kiln_neon_driver process under
// qemu-aarch64 links each AArch64 object with ORC and runs calls on copies of the argument
// memory, which come back and are written over the caller's tensors. Wrapped as an
// Executable, such a kernel goes through the same harness (check_against_ref) as every other
// backend.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "codegen/backend.h"
#include "ir/status.h"
#include "runtime/runtime.h"

namespace jit::test {

/// The driver process (started on first use, shared by the test program).
class QemuDriver {
 public:
  /// The shared driver emulating `qemu_cpu` (qemu's -cpu; empty: qemu's default "max", which
  /// has every extension the Neoverse V1 profile uses), or an error saying why it cannot run
  /// (no qemu, no driver binary).
  static Result<QemuDriver*> get(const std::string& qemu_cpu = "");
  ~QemuDriver();

  /// Links `object` in the driver; returns its handle.
  Result<uint32_t> load(const std::vector<uint8_t>& object, const std::string& symbol);
  /// Runs kernel `handle` on `args` of `spec` (the call plan of the arm backend).
  Status run(uint32_t handle, const OpSpec& spec, const KernelArgs& args);

 private:
  QemuDriver(int pid, int to_driver, int from_driver);
  Status read_error();

  std::mutex mutex_;
  int pid_;
  int to_;
  int from_;
};

/// Compiles `spec` with the arm backend (no disk cache, config `config`) for the CPU class
/// `fingerprint` ("aarch64-neoverse-v1" or "aarch64-neoverse-n1") and returns a Kernel that
/// runs under qemu-aarch64: on qemu's default CPU, or with `emulate_n1` on its neoverse-n1
/// model (no bf16: a bf16 instruction there is an illegal instruction).
Result<Kernel> compile_for_qemu(const OpSpec& spec, const Config& config = {},
                                const std::string& fingerprint = "aarch64-neoverse-v1",
                                bool emulate_n1 = false);

}  // namespace jit::test
