// CodeArena: executable memory shared by every JIT kernel of the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "ir/status.h"

namespace jit {

/// Holds JIT code for the life of the process. Memory is W^X: each chunk is one memfd mapped
/// twice, a writable view that code is copied through and an executable view that is run, so
/// no page is ever writable and executable at once and many small kernels share pages (no
/// mprotect per kernel). Kernels are never unmapped (a Kernel may be held anywhere).
class CodeArena {
 public:
  /// The process-wide arena.
  static CodeArena& global();

  /// Copies `code` (position independent) into executable memory, 64-byte aligned; returns
  /// its executable address. Thread-safe.
  Result<const void*> add(std::span<const uint8_t> code);

  /// Bytes of code held.
  size_t bytes_used() const;

 private:
  struct Chunk {
    uint8_t* writable = nullptr;
    const uint8_t* executable = nullptr;
    size_t size = 0;
    size_t used = 0;
  };
  Status grow(size_t min_bytes);

  mutable std::mutex mutex_;
  std::vector<Chunk> chunks_;
  size_t bytes_used_ = 0;
};

}  // namespace jit
