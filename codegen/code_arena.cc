#include "codegen/code_arena.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace jit {
namespace {
constexpr size_t kChunkBytes = size_t(1) << 20;
constexpr size_t kAlign = 64;
}  // namespace

CodeArena& CodeArena::global() {
  static CodeArena arena;
  return arena;
}

Status CodeArena::grow(size_t min_bytes) {
  const size_t size = std::max(kChunkBytes, (min_bytes + 4095) & ~size_t(4095));
  const int fd = memfd_create("kiln-jit", MFD_CLOEXEC);
  if (fd < 0) {
    return {StatusCode::kUnavailable,
            fmt::format("code arena: memfd_create failed: {}", std::strerror(errno))};
  }
  if (ftruncate(fd, off_t(size)) != 0) {
    const int err = errno;
    close(fd);
    return {StatusCode::kUnavailable,
            fmt::format("code arena: ftruncate({}) failed: {}", size, std::strerror(err))};
  }
  void* writable = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void* executable = writable == MAP_FAILED
                         ? MAP_FAILED
                         : mmap(nullptr, size, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);  // the mappings keep the memory alive
  if (writable == MAP_FAILED || executable == MAP_FAILED) {
    if (writable != MAP_FAILED) munmap(writable, size);
    return {StatusCode::kUnavailable,
            fmt::format("code arena: cannot map executable memory ({}); is PROT_EXEC on "
                        "memfd forbidden (vm.memfd_noexec)?",
                        std::strerror(err))};
  }
  chunks_.push_back(
      {static_cast<uint8_t*>(writable), static_cast<const uint8_t*>(executable), size, 0});
  return Status::ok();
}

Result<const void*> CodeArena::add(std::span<const uint8_t> code) {
  std::lock_guard lock(mutex_);
  if (chunks_.empty() || chunks_.back().size - chunks_.back().used < code.size()) {
    KILN_RETURN_IF_ERROR(grow(code.size()));
  }
  Chunk& chunk = chunks_.back();
  const size_t offset = chunk.used;
  std::memcpy(chunk.writable + offset, code.data(), code.size());
  // x86 keeps instruction caches coherent with stores; other ISAs flush here.
  __builtin___clear_cache(reinterpret_cast<char*>(chunk.writable + offset),
                          reinterpret_cast<char*>(chunk.writable + offset + code.size()));
  chunk.used = (offset + code.size() + kAlign - 1) & ~(kAlign - 1);
  bytes_used_ += code.size();
  return static_cast<const void*>(chunk.executable + offset);
}

size_t CodeArena::bytes_used() const {
  std::lock_guard lock(mutex_);
  return bytes_used_;
}

}  // namespace jit
