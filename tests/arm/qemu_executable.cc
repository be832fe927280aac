#include "tests/arm/qemu_executable.h"

#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "codegen/arm/arm_backend.h"
#include "codegen/arm/call_block.h"

extern char** environ;

namespace jit::test {
namespace {

Status io_error(std::string_view what) {
  return Status(StatusCode::kInternal,
                fmt::format("neon driver: {} failed (did the driver crash under qemu?)", what));
}

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}
bool read_all(int fd, void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

// A buffered request: the whole message goes out in one write.
struct Message {
  std::vector<uint8_t> bytes;
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
  }
  void put_bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes.insert(bytes.end(), p, p + n);
  }
};

// A contiguous byte range of host memory the kernel may touch.
struct Region {
  uintptr_t begin;
  uintptr_t end;
};

// The bytes a strided view spans (non-negative strides, as every kiln tensor has).
Region span_of(const Tensor& t) {
  int64_t last = 0;
  for (int d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto begin = reinterpret_cast<uintptr_t>(t.data());
  return {begin, begin + uintptr_t(last + 1) * t.element_size()};
}

class QemuExecutable final : public Executable {
 public:
  QemuExecutable(QemuDriver* driver, uint32_t handle, OpSpec spec)
      : driver_(driver), handle_(handle), spec_(std::move(spec)) {}
  Status run(const KernelArgs& args) const override { return driver_->run(handle_, spec_, args); }

 private:
  QemuDriver* driver_;
  uint32_t handle_;
  OpSpec spec_;
};

}  // namespace

Result<QemuDriver*> QemuDriver::get(const std::string& qemu_cpu) {
  static std::mutex mutex;
  // Owned here, so each driver is told to quit and its qemu process reaped at exit.
  static std::map<std::string, std::unique_ptr<QemuDriver>> drivers;
  static Status failure;
  std::lock_guard lock(mutex);
  if (auto it = drivers.find(qemu_cpu); it != drivers.end()) return it->second.get();
  if (!failure.is_ok()) return failure;
#ifdef KILN_NEON_UNAVAILABLE
  failure = Status(StatusCode::kUnavailable, KILN_NEON_UNAVAILABLE);
  return failure;
#else
  if (!std::filesystem::exists(KILN_NEON_DRIVER)) {
    failure = Status(StatusCode::kUnavailable,
                     fmt::format("neon driver {} was not built", KILN_NEON_DRIVER));
    return failure;
  }
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) {
    failure = Status(StatusCode::kInternal, "pipe() failed");
    return failure;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
  posix_spawn_file_actions_addclose(&actions, to_child[1]);
  posix_spawn_file_actions_addclose(&actions, from_child[0]);
  std::string qemu = KILN_QEMU, sysroot = KILN_AARCH64_SYSROOT, program = KILN_NEON_DRIVER;
  std::string flag = "-L", cpu_flag = "-cpu", cpu = qemu_cpu;
  std::vector<char*> argv = {qemu.data(), flag.data(), sysroot.data()};
  if (!cpu.empty()) argv.insert(argv.end(), {cpu_flag.data(), cpu.data()});
  argv.insert(argv.end(), {program.data(), nullptr});
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, qemu.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(to_child[0]);
  ::close(from_child[1]);
  if (rc != 0) {
    failure = Status(StatusCode::kUnavailable,
                     fmt::format("cannot start {}: {}", qemu, std::strerror(rc)));
    return failure;
  }
  // A driver that dies must not kill the test program with SIGPIPE: writes then fail.
  signal(SIGPIPE, SIG_IGN);
  auto* driver = new QemuDriver(pid, to_child[1], from_child[0]);
  drivers.emplace(qemu_cpu, std::unique_ptr<QemuDriver>(driver));
  return driver;
#endif
}

QemuDriver::QemuDriver(int pid, int to_driver, int from_driver)
    : pid_(pid), to_(to_driver), from_(from_driver) {}

QemuDriver::~QemuDriver() {
  const char quit = 'Q';
  write_all(to_, &quit, 1);
  ::close(to_);
  ::close(from_);
  waitpid(pid_, nullptr, 0);
}

Status QemuDriver::read_error() {
  uint32_t size = 0;
  if (!read_all(from_, &size, 4)) return io_error("reading an error");
  std::string message(size, '\0');
  if (!read_all(from_, message.data(), size)) return io_error("reading an error");
  return Status(StatusCode::kInternal, "neon driver: " + message);
}

Result<uint32_t> QemuDriver::load(const std::vector<uint8_t>& object, const std::string& symbol) {
  std::lock_guard lock(mutex_);
  Message m;
  m.put<uint8_t>('L');
  m.put<uint32_t>(uint32_t(symbol.size()));
  m.put_bytes(symbol.data(), symbol.size());
  m.put<uint64_t>(object.size());
  m.put_bytes(object.data(), object.size());
  if (!write_all(to_, m.bytes.data(), m.bytes.size())) return io_error("sending an object");
  uint32_t status = 0, handle = 0;
  if (!read_all(from_, &status, 4)) return io_error("loading an object");
  if (status != 0) return read_error();
  if (!read_all(from_, &handle, 4)) return io_error("loading an object");
  return handle;
}

Status QemuDriver::run(uint32_t handle, const OpSpec& spec, const KernelArgs& args) {
  Result<codegen::arm::CallPlan> plan = codegen::arm::plan_call(spec, args);
  if (!plan.is_ok()) return plan.status();
  const codegen::arm::CallBlock& block = plan->block;
  // The memory the kernel may touch: every tensor's span and the runner's side arrays,
  // merged where they overlap (in-place ops, views of one buffer).
  std::vector<Region> spans;
  for (int i = 0; i < args.tensor_count; ++i) {
    const Tensor& t = args.tensor(i);
    if (t.data() != nullptr && t.numel() > 0) spans.push_back(span_of(t));
  }
  for (const auto& side : plan->side) {
    const auto begin = reinterpret_cast<uintptr_t>(side.data());
    spans.push_back({begin, begin + side.size()});
  }
  std::sort(spans.begin(), spans.end(),
            [](const Region& a, const Region& b) { return a.begin < b.begin; });
  std::vector<Region> regions;
  for (const Region& s : spans) {
    if (!regions.empty() && s.begin < regions.back().end) {
      regions.back().end = std::max(regions.back().end, s.end);
    } else {
      regions.push_back(s);
    }
  }
  std::lock_guard lock(mutex_);
  Message m;
  m.put<uint8_t>('R');
  m.put<uint32_t>(handle);
  m.put<int64_t>(plan->rows);
  m.put<uint32_t>(uint32_t(block.word_count));
  m.put<uint32_t>(uint32_t(block.pointer_count));
  m.put_bytes(block.words.data(), size_t(block.word_count) * 8);
  m.put<uint32_t>(uint32_t(regions.size()));
  for (const Region& r : regions) {
    m.put<uint64_t>(r.end - r.begin);
    m.put_bytes(reinterpret_cast<const void*>(r.begin), r.end - r.begin);
  }
  for (int p = 0; p < block.pointer_count; ++p) {
    const uintptr_t address = block.words[size_t(p)];
    int32_t index = -1;
    uint64_t offset = 0;
    if (address != 0) {
      for (size_t r = 0; r < regions.size(); ++r) {
        // A pointer at a region's end belongs to an empty tensor next to it.
        if (address >= regions[r].begin && address <= regions[r].end) {
          index = int32_t(r);
          offset = address - regions[r].begin;
          break;
        }
      }
      if (index < 0) {
        return Status(StatusCode::kInternal,
                      fmt::format("neon driver: call word {} points outside every tensor", p));
      }
    }
    m.put<int32_t>(index);
    m.put<uint64_t>(offset);
  }
  if (!write_all(to_, m.bytes.data(), m.bytes.size())) return io_error("sending a call");
  uint32_t status = 0;
  if (!read_all(from_, &status, 4)) return io_error("running a call");
  if (status != 0) return read_error();
  for (const Region& r : regions) {
    if (!read_all(from_, reinterpret_cast<void*>(r.begin), r.end - r.begin)) {
      return io_error("receiving the results");
    }
  }
  return Status::ok();
}

Result<Kernel> compile_for_qemu(const OpSpec& spec, const Config& config,
                                const std::string& fingerprint, bool emulate_n1) {
  // One object per spec and config: the driver's ORC session keeps every symbol it linked.
  static std::mutex mutex;
  static std::map<std::string, Kernel> loaded;
  const std::string key =
      to_string(spec) + "/" + config.to_string() + "/" + fingerprint + (emulate_n1 ? "/n1" : "");
  std::lock_guard lock(mutex);
  if (auto it = loaded.find(key); it != loaded.end()) return it->second;
  Result<QemuDriver*> driver = QemuDriver::get(emulate_n1 ? "neoverse-n1" : "");
  if (!driver.is_ok()) return driver.status();
  const auto backend = codegen::arm::make_backend();
  Target target = host_target(BackendKind::kArm);
  target.fingerprint = fingerprint;
  const Support support = backend->supports(spec, target);
  if (!support.ok) return Status(StatusCode::kUnsupported, support.reason);
  const Config chosen = config.knobs.empty() ? backend->configs(spec, target).front() : config;
  Result<Artifact> artifact = backend->lower(spec, chosen, target);
  if (!artifact.is_ok()) return artifact.status();
  Result<uint32_t> handle = driver.value()->load(artifact->code, codegen::arm::kernel_symbol(spec));
  if (!handle.is_ok()) return handle.status();
  KernelInfo info;
  info.spec_text = to_string(spec);
  info.backend = BackendKind::kArm;
  info.target = target;
  info.config = chosen;
  info.code_size = artifact->code.size();
  Kernel kernel(spec, std::make_shared<QemuExecutable>(driver.value(), handle.value(), spec),
                std::move(info));
  loaded.emplace(key, kernel);
  return kernel;
}

}  // namespace jit::test
