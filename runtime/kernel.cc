#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ir/check_args.h"
#include "runtime/runtime.h"

namespace jit {

std::string_view kernel_source_name(KernelSource source) {
  switch (source) {
    case KernelSource::kGenerated: return "generated";
    case KernelSource::kDiskCache: return "disk cache hit";
    case KernelSource::kMemoryCache: return "memory cache hit";
  }
  return "?";
}

Kernel::Kernel(OpSpec spec, std::shared_ptr<const Executable> executable, KernelInfo info)
    : spec_(std::move(spec)),
      executable_(std::move(executable)),
      info_(std::make_shared<const KernelInfo>(std::move(info))) {}

Status Kernel::run(const KernelArgs& args) const {
  if (!executable_) return {StatusCode::kInvalidArgument, "kernel is empty (not compiled)"};
  KILN_RETURN_IF_ERROR(check_args(spec_, args));
  return executable_->run(args);
}

Result<std::string> Kernel::disassembly() const {
  if (code() == nullptr) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("{} runs on the {} backend: there is no machine code to show",
                              info().spec_text, backend_name(info().backend)));
  }
  // objdump reads a raw binary file; --adjust-vma shows the real addresses.
  const auto path =
      std::filesystem::temp_directory_path() /
      fmt::format("kiln-disasm-{}-{:x}.bin", getpid(), reinterpret_cast<uintptr_t>(code()));
  {
    std::ofstream file(path, std::ios::binary);
    file.write(static_cast<const char*>(code()), std::streamsize(code_size()));
  }
  const std::string command = fmt::format(
      "objdump -D -b binary -mi386:x86-64 --no-show-raw-insn --adjust-vma=0x{:x} '{}' 2>&1",
      reinterpret_cast<uintptr_t>(code()), path.string());
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    std::filesystem::remove(path);
    return Status(StatusCode::kUnavailable, "cannot run objdump");
  }
  std::string text;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) text.append(buffer.data(), n);
  const int rc = pclose(pipe);
  std::filesystem::remove(path);
  if (rc != 0) {
    return Status(StatusCode::kUnavailable,
                  fmt::format("objdump failed (install binutils): {}", text));
  }
  // Keep only the instruction listing.
  const size_t start = text.find("<.data>:");
  return start == std::string::npos ? text : text.substr(start + 9);
}

}  // namespace jit
