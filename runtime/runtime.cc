#include "runtime/runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

#include "codegen/ref/ref.h"
#include "runtime/disk_cache.h"
#include "runtime/log.h"
#include "runtime/perf_map.h"
#include "runtime/tuning_db.h"
#ifdef KILN_HAVE_X86
#include "codegen/x86/x86_backend.h"
#endif
#ifdef KILN_HAVE_ARM
#include "codegen/arm/arm_backend.h"
#endif
#ifdef KILN_HAVE_ONEDNN
#include "codegen/onednn/onednn_backend.h"
#endif
#ifdef KILN_HAVE_CUDA
#include "codegen/cuda/cuda_backend.h"
#endif

namespace jit {
namespace {

using Clock = std::chrono::steady_clock;

double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Identity of an in-memory entry: the spec plus every option that changes the kernel.
struct MemoryKey {
  OpSpec spec;
  int backend = -1;  // -1: dispatch chooses
  X86Isa isa = X86Isa::kNone;
  std::string config;  // "" when the default is used
  bool use_disk_cache = true;
  int64_t bucket = 0;  // a tuned token bucket, 0 when no tuning entry can apply
  std::string target;  // CompileOptions::target's name, "" when unset
  bool operator==(const MemoryKey&) const = default;
};

struct MemoryKeyHash {
  size_t operator()(const MemoryKey& k) const {
    size_t h = size_t(hash64(k.spec));
    h ^= size_t(k.backend + 7) * 0x9E3779B97F4A7C15ull + size_t(k.isa) * 0xC2B2AE3D27D4EB4Full;
    h ^= std::hash<std::string>()(k.config) + (k.use_disk_cache ? 1 : 0);
    h ^= size_t(k.bucket) * 0x165667B19E3779F9ull;
    h ^= std::hash<std::string>()(k.target) * 3;
    return h;
  }
};

// One in-memory entry; the first caller compiles, the others wait on `ready`.
struct Slot {
  std::mutex mutex;
  std::condition_variable ready;
  bool done = false;
  std::optional<Result<Kernel>> result;
};

// The tuning database and, per spec, the buckets it has entries for: the hot path (every
// jit::ops call passes a tokens hint) asks "is this bucket tuned?" by spec hash, without
// formatting the spec text.
struct TuningState {
  runtime::TuningDb db;
  std::unordered_map<OpSpec, std::vector<int64_t>, OpSpecHash> buckets;

  bool tuned(const OpSpec& spec, int64_t bucket) const {
    const auto it = buckets.find(spec);
    return it != buckets.end() &&
           std::find(it->second.begin(), it->second.end(), bucket) != it->second.end();
  }
};

std::shared_ptr<const TuningState> make_tuning_state(runtime::TuningDb db) {
  auto state = std::make_shared<TuningState>();
  for (const auto& [key, entry] : db.entries()) {
    Result<OpSpec> spec = parse_spec(entry.spec);
    if (!spec.is_ok()) {
      log_warning("tuning database: entry '{}' skipped: {}", key, spec.status().message());
      continue;
    }
    std::vector<int64_t>& list = state->buckets[spec.value()];
    if (std::find(list.begin(), list.end(), entry.token_bucket) == list.end()) {
      list.insert(std::upper_bound(list.begin(), list.end(), entry.token_bucket),
                  entry.token_bucket);
    }
  }
  state->db = std::move(db);
  return state;
}

}  // namespace

std::string_view kiln_version() {
  return KILN_VERSION_STRING;
}

struct Runtime::State {
  std::vector<std::unique_ptr<Backend>> backends;  // index by BackendKind
  std::unique_ptr<runtime::DiskCache> disk_cache;
  Status cache_status;
  std::shared_mutex map_mutex;
  std::unordered_map<MemoryKey, std::shared_ptr<Slot>, MemoryKeyHash> map;
  std::atomic<uint64_t> memory_hits{0}, disk_hits{0}, generated{0}, errors{0};
  mutable std::mutex tuning_mutex;
  std::shared_ptr<const TuningState> tuning;  // null: no database
  std::mutex record_mutex;
  bool record_loaded = false;  // the record file's existing lines are in `recorded`
  std::unordered_set<std::string> recorded;

  std::shared_ptr<const TuningState> tuning_state() const {
    std::lock_guard lock(tuning_mutex);
    return tuning;
  }

  const Backend* backend(BackendKind kind) const {
    for (const auto& b : backends) {
      if (b->kind() == kind) return b.get();
    }
    return nullptr;
  }
};

Runtime::Runtime(RuntimeOptions options)
    : options_(std::move(options)), state_(std::make_unique<State>()) {
  // Explicit, ordered candidate list; no self-registration.
#ifdef KILN_HAVE_X86
  state_->backends.push_back(codegen::x86::make_backend());
#endif
#ifdef KILN_HAVE_ARM
  // Only for explicit arm targets (CompileOptions::backend): not in candidates() on x86.
  state_->backends.push_back(codegen::arm::make_backend());
#endif
#ifdef KILN_HAVE_ONEDNN
  state_->backends.push_back(codegen::onednn::make_backend());
#endif
  state_->backends.push_back(codegen::ref::make_backend());
#ifdef KILN_HAVE_CUDA
  // Chosen only explicitly (CompileOptions::backend or a cuda target; jit::ops when the
  // tensors are on a cuda device), never as a CPU candidate.
  state_->backends.push_back(codegen::cuda::make_backend());
#endif
  if (!options_.cache_dir.empty()) {
    runtime::DiskCacheOptions cache_options;
    cache_options.dir = options_.cache_dir;
    cache_options.max_bytes = options_.cache_max_bytes;
    auto cache = runtime::DiskCache::open(cache_options);
    if (cache.is_ok()) {
      state_->disk_cache = std::move(cache).value();
    } else {
      // Not silent: the reason is logged once and reported by `kiln cache stats`.
      state_->cache_status = cache.status();
      log_warning("disk cache disabled: {}", cache.status().message());
    }
  }
  if (!options_.tuning_db.empty()) {
    runtime::TuningDb db = runtime::TuningDb::load_or_warn(options_.tuning_db);
    if (!db.empty()) set_tuning_db(std::move(db));
  }
}

void Runtime::set_tuning_db(runtime::TuningDb db) {
  std::shared_ptr<const TuningState> state =
      db.empty() ? nullptr : make_tuning_state(std::move(db));
  std::lock_guard lock(state_->tuning_mutex);
  state_->tuning = std::move(state);
}

runtime::TuningDb Runtime::tuning_db() const {
  const auto state = state_->tuning_state();
  return state ? state->db : runtime::TuningDb();
}

std::vector<int64_t> Runtime::tuned_buckets(const OpSpec& spec) const {
  const auto state = state_->tuning_state();
  if (!state) return {};
  const auto it = state->buckets.find(spec);
  return it == state->buckets.end() ? std::vector<int64_t>{} : it->second;
}

void Runtime::record(const std::string& spec_text) {
  std::lock_guard lock(state_->record_mutex);
  if (!state_->record_loaded) {
    // Specs recorded by earlier runs (or other processes) are not appended again.
    std::ifstream existing(options_.record_path);
    for (std::string line; std::getline(existing, line);) state_->recorded.insert(line);
    state_->record_loaded = true;
  }
  if (!state_->recorded.insert(spec_text).second) return;
  // One write per line with O_APPEND semantics: lines of concurrent processes do not mix.
  std::ofstream file(options_.record_path, std::ios::app);
  file << spec_text + "\n" << std::flush;
  if (!file) {
    log_warning("KILN_RECORD: cannot append to {}", options_.record_path.string());
  }
}

Runtime::~Runtime() = default;

Runtime& Runtime::global() {
  static Runtime runtime(RuntimeOptions::from_environment());
  return runtime;
}

runtime::DiskCache* Runtime::disk_cache() const {
  return state_->disk_cache.get();
}
const Status& Runtime::cache_status() const {
  return state_->cache_status;
}

std::vector<const Backend*> Runtime::backends() const {
  std::vector<const Backend*> list;
  for (const auto& b : state_->backends) list.push_back(b.get());
  return list;
}

RuntimeCounters Runtime::counters() const {
  return {state_->memory_hits.load(), state_->disk_hits.load(), state_->generated.load(),
          state_->errors.load()};
}

namespace {

// The ordered backends that may serve an op on the CPU.
std::vector<BackendKind> candidates(OpKind op) {
  // The GEMM ops: oneDNN's matmul primitives (the x86 backend has no GEMM).
  if (op_family(op) == "gemm") return {BackendKind::kOnednn, BackendKind::kRef};
  return {BackendKind::kX86, BackendKind::kRef};
}

std::string toolchain_version(BackendKind kind) {
#ifdef KILN_HAVE_CUDA
  if (kind == BackendKind::kCuda) return codegen::cuda::toolchain_version();
#endif
  // The x86 generator's output depends on Xbyak's encoder only.
  if (kind == BackendKind::kX86) return "xbyak-6.68";
#ifdef KILN_HAVE_ARM
  // The arm objects depend on LLVM's optimiser and AArch64 code generator.
  if (kind == BackendKind::kArm) return std::string(codegen::arm::llvm_version());
#endif
  return "none";
}

// The target `kind` generates for: the requested one, else the machine's (for cuda: device
// 0's arch, or the compile-only default without a GPU).
Target target_for(BackendKind kind, X86Isa isa_cap, const CompileOptions& options) {
  if (options.target && options.target->backend == kind) return *options.target;
#ifdef KILN_HAVE_CUDA
  if (kind == BackendKind::kCuda) return codegen::cuda::default_cuda_target();
#endif
  return host_target(kind, isa_cap);
}

void dump_kernel(const std::filesystem::path& dir, const Kernel& kernel, const Artifact& a) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string stem =
      fmt::format("{}-{}", op_name(kernel.spec().op), hash128(kernel.spec()).hex().substr(0, 16));
  std::ofstream(dir / (stem + ".spec")) << kernel.info().spec_text << "\n"
                                        << "backend " << backend_name(kernel.info().backend)
                                        << "\nconfig " << kernel.info().config.to_string() << "\n";
  if (!a.code.empty()) {
    std::ofstream(dir / (stem + ".bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(a.code.data()), std::streamsize(a.code.size()));
  }
  if (!a.source.empty()) std::ofstream(dir / (stem + ".src")) << a.source;
  if (auto text = kernel.disassembly(); text.is_ok()) {
    std::ofstream(dir / (stem + ".s")) << text.value();
  }
}

}  // namespace

Result<Kernel> Runtime::compile(const OpSpec& spec, const CompileOptions& options) {
  const auto start = Clock::now();
  KILN_RETURN_IF_ERROR(options_.environment_error);
  const X86Isa isa_cap = options.isa.value_or(options_.isa_cap);
  // A tokens hint matters only when the database has an entry for its bucket; otherwise
  // every hint shares one kernel (the default config).
  std::shared_ptr<const TuningState> tuning;
  int64_t bucket = 0;
  if (options.tokens_hint && !options.config) {
    tuning = state_->tuning_state();
    const int64_t b = runtime::token_bucket(*options.tokens_hint);
    if (tuning && tuning->tuned(spec, b)) bucket = b;
  }
  MemoryKey key{spec,
                options.backend ? int(*options.backend) : -1,
                isa_cap,
                options.config ? options.config->to_string() : "",
                options.use_disk_cache,
                bucket,
                options.target ? options.target->name() : ""};

  std::shared_ptr<Slot> slot;
  {
    std::shared_lock lock(state_->map_mutex);
    auto it = state_->map.find(key);
    if (it != state_->map.end()) slot = it->second;
  }
  if (slot) {
    std::unique_lock lock(slot->mutex);
    slot->ready.wait(lock, [&] { return slot->done; });
    if (slot->result->is_ok()) state_->memory_hits++;
    return *slot->result;
  }
  {
    std::unique_lock lock(state_->map_mutex);
    auto [it, inserted] = state_->map.try_emplace(key, nullptr);
    if (!inserted) {
      slot = it->second;
      lock.unlock();
      std::unique_lock slot_lock(slot->mutex);
      slot->ready.wait(slot_lock, [&] { return slot->done; });
      if (slot->result->is_ok()) state_->memory_hits++;
      return *slot->result;
    }
    it->second = slot = std::make_shared<Slot>();
  }
  // This caller compiles; everyone else waits on the slot.
  Result<Kernel> result = [&]() -> Result<Kernel> {
    KILN_RETURN_IF_ERROR(validate(spec));
    if (options_.strict && sealed_) {
      return Status(StatusCode::kUnavailable,
                    fmt::format("strict mode (KILN_STRICT=1): {} was not prewarmed; compiling "
                                "after prewarm is an error",
                                to_string(spec)));
    }
    KernelInfo info;
    info.spec_text = to_string(spec);
    // Dispatch: the first candidate that supports the spec; each skip is recorded.
    const Backend* chosen = nullptr;
    Target target;
    const std::vector<BackendKind> order =
        options.backend  ? std::vector<BackendKind>{*options.backend}
        : options.target ? std::vector<BackendKind>{options.target->backend}
                         : candidates(spec.op);
    std::optional<std::string> fallback_reason;
    for (BackendKind kind : order) {
      const Backend* backend = state_->backend(kind);
      Target t = target_for(kind, isa_cap, options);
      if (backend == nullptr) {
        info.skipped.push_back(fmt::format("{}: not built into this kiln", backend_name(kind)));
        continue;
      }
      const Support support = backend->supports(spec, t);
      if (!support.ok) {
        info.skipped.push_back(fmt::format("{}: {}", backend_name(kind), support.reason));
        log_verbose(kLogDispatch, "dispatch: {} skips {}: {}", info.spec_text, backend_name(kind),
                    support.reason);
        // A fallback worth a warning: a backend that generates this op on this machine (for
        // some specs, at the host's full ISA) could not serve this spec or target. Ops a backend
        // does not implement at all are routine and only logged under KILN_VERBOSE=dispatch.
        if (!fallback_reason && backend->generates(spec.op, host_target(kind))) {
          fallback_reason = info.skipped.back();
        }
        continue;
      }
      chosen = backend;
      target = t;
      break;
    }
    if (chosen == nullptr) {
      std::string reasons;
      for (const auto& s : info.skipped) reasons += "\n  " + s;
      return Status(StatusCode::kUnsupported,
                    fmt::format("no backend serves {}:{}", info.spec_text, reasons));
    }
    if (fallback_reason) {
      log_warning("{} runs on the {} backend ({})", info.spec_text, backend_name(chosen->kind()),
                  *fallback_reason);
    }
    log_verbose(kLogDispatch, "dispatch: {} -> {}", info.spec_text, target.name());
    info.backend = chosen->kind();
    info.target = target;
    const std::vector<Config> space =
        options.config ? std::vector<Config>{} : chosen->configs(spec, target);
    info.config = options.config ? *options.config : space.front();
    if (bucket != 0) {
      // The entry is for this spec and bucket; it applies only to the target it was measured
      // on, and only while the backend still offers its config.
      const runtime::TuningEntry* entry =
          tuning->db.find(info.spec_text, bucket, target.fingerprint);
      if (entry != nullptr && entry->backend == backend_name(chosen->kind())) {
        const std::optional<Config> tuned = runtime::parse_config(entry->config);
        if (tuned && std::find(space.begin(), space.end(), *tuned) != space.end()) {
          info.config = *tuned;
          info.token_bucket = bucket;
          log_verbose(kLogDispatch, "dispatch: {} tokens<={} uses tuned config {}", info.spec_text,
                      bucket, entry->config);
        } else {
          log_warning(
              "tuning database: config '{}' for {} is not in the {} backend's space "
              "any more; using the default (re-run kiln tune)",
              entry->config, info.spec_text, backend_name(chosen->kind()));
        }
      }
    }

    // Disk cache: lock the key so concurrent processes generate it once.
    runtime::DiskCache* cache =
        options.use_disk_cache && chosen->cacheable() ? state_->disk_cache.get() : nullptr;
    std::optional<Artifact> artifact;
    runtime::CacheKeyLock key_lock;
    runtime::CacheKey cache_key;
    if (cache != nullptr) {
      cache_key =
          runtime::make_cache_key(spec, info.config, target.fingerprint, chosen->codegen_version(),
                                  toolchain_version(chosen->kind()));
      info.cache_key = cache_key.hash_hex();
      auto locked = cache->lock(cache_key);
      if (!locked.is_ok()) return locked.status();
      key_lock = std::move(locked).value();
      artifact = cache->load(cache_key);
      if (artifact) {
        info.source = KernelSource::kDiskCache;
        log_verbose(kLogCache, "cache: hit {} for {}", info.cache_key, info.spec_text);
      }
    }
    // Lowers afresh into `artifact` and stores it (replacing any entry under the key).
    auto lower_fresh = [&]() -> Status {
      const auto gen_start = Clock::now();
      Result<Artifact> lowered = chosen->lower(spec, info.config, target);
      if (!lowered.is_ok()) return lowered.status();
      info.generate_us = micros_since(gen_start);
      info.source = KernelSource::kGenerated;
      log_verbose(kLogCompile, "compile: generated {} ({} bytes) in {:.1f} us", info.spec_text,
                  lowered->code.size(), info.generate_us);
      if (cache != nullptr) {
        Status stored = cache->store(cache_key, lowered.value());
        if (!stored.is_ok())
          log_warning("cache: cannot store {}: {}", info.spec_text, stored.message());
      }
      artifact = std::move(lowered).value();
      return Status::ok();
    };
    if (!artifact) KILN_RETURN_IF_ERROR(lower_fresh());
    auto executable = chosen->load(spec, *artifact, target);
    if (!executable.is_ok() && info.source == KernelSource::kDiskCache) {
      // An entry this kiln does not load (e.g. a config its backend now refuses) is replaced,
      // not kept as a lasting error: lowering again refuses a bad config with its own message.
      log_warning("cache: entry {} for {} does not load ({}); recompiling", info.cache_key,
                  info.spec_text, executable.status().message());
      KILN_RETURN_IF_ERROR(lower_fresh());
      executable = chosen->load(spec, *artifact, target);
    }
    if (!executable.is_ok()) return executable.status();
    // The config the kernel runs with, as the backend stored it (cuda: every knob resolved).
    info.config = artifact->config;
    info.code_size = executable.value()->code_size();
    info.total_us = micros_since(start);
    Kernel kernel(spec, std::move(executable).value(), std::move(info));
    if (options_.perf_map && kernel.code() != nullptr) {
      runtime::perf_map_add(kernel.code(), kernel.code_size(), kernel.info().spec_text);
    }
    if (!options_.dump_dir.empty()) dump_kernel(options_.dump_dir, kernel, *artifact);
    return kernel;
  }();

  if (result.is_ok()) {
    (result->info().source == KernelSource::kDiskCache ? state_->disk_hits : state_->generated)++;
    if (!options_.record_path.empty()) record(result->info().spec_text);
  } else {
    state_->errors++;
  }
  {
    std::lock_guard lock(slot->mutex);
    slot->result = result;
    slot->done = true;
  }
  slot->ready.notify_all();
  if (!result.is_ok()) {
    // Errors are not cached: a later call (e.g. after fixing the environment) retries.
    std::unique_lock lock(state_->map_mutex);
    state_->map.erase(key);
  }
  return result;
}

Result<Kernel> compile(const OpSpec& spec, const CompileOptions& options) {
  return Runtime::global().compile(spec, options);
}

}  // namespace jit
