// In-process linking of AArch64 kernel objects with LLVM ORC (LLJIT). Depends on LLVM and the
// standard library only, so the qemu-aarch64 test driver (tests/arm/driver) links the same
// file as the backend does on AArch64 hosts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace jit::codegen::arm {

/// One LLJIT session; objects added to it stay mapped for its lifetime. Thread-safe.
class OrcLoader {
 public:
  /// The process-wide session (created on first use), or nullptr with `error` set.
  static OrcLoader* global(std::string* error);

  /// Links `object` (an ELF relocatable object for this host) into the session and returns
  /// the address of `symbol`, or nullptr with `error` set (e.g. an object for another
  /// architecture).
  void* load(const uint8_t* object, size_t size, const std::string& symbol, std::string* error);

  ~OrcLoader();

 private:
  struct State;
  explicit OrcLoader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace jit::codegen::arm
