#include "runtime/prewarm.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <unordered_set>

namespace jit {
namespace {

// Adds `spec` unless already present; keeps the manifest's order (first occurrence).
void add_unique(std::vector<OpSpec>& specs, std::unordered_set<OpSpec, OpSpecHash>& seen,
                OpSpec spec) {
  if (seen.insert(spec).second) specs.push_back(std::move(spec));
}

Result<std::vector<OpSpec>> parse_json_manifest(std::string_view text, std::string_view name) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_argument(fmt::format("manifest {}: not valid JSON: {}", name, e.what()));
  }
  if (!root.is_array()) {
    return invalid_argument(
        fmt::format("manifest {}: a JSON manifest must be an array of spec "
                    "strings",
                    name));
  }
  std::vector<OpSpec> specs;
  std::unordered_set<OpSpec, OpSpecHash> seen;
  for (size_t i = 0; i < root.size(); ++i) {
    if (!root[i].is_string()) {
      return invalid_argument(
          fmt::format("manifest {}: element [{}] is not a string (expected a spec)", name, i));
    }
    Result<OpSpec> spec = parse_spec(root[i].get<std::string>());
    if (!spec.is_ok()) {
      return invalid_argument(
          fmt::format("manifest {}: element [{}]: {}", name, i, spec.status().message()));
    }
    add_unique(specs, seen, std::move(spec).value());
  }
  return specs;
}

}  // namespace

Result<std::vector<OpSpec>> parse_manifest(std::string_view text, std::string_view name) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '[') return parse_json_manifest(text, name);
  std::vector<OpSpec> specs;
  std::unordered_set<OpSpec, OpSpecHash> seen;
  std::istringstream lines{std::string(text)};
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos) continue;
    const size_t end = line.find_last_not_of(" \t\r");
    Result<OpSpec> spec = parse_spec(std::string_view(line).substr(begin, end - begin + 1));
    if (!spec.is_ok()) {
      return invalid_argument(
          fmt::format("manifest {}:{}: {}", name, number, spec.status().message()));
    }
    add_unique(specs, seen, std::move(spec).value());
  }
  return specs;
}

Result<std::vector<OpSpec>> read_manifest(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return invalid_argument(fmt::format("cannot open manifest {}", path.string()));
  }
  std::stringstream text;
  text << file.rdbuf();
  return parse_manifest(text.str(), path.string());
}

PrewarmReport prewarm(Runtime& runtime, const std::vector<OpSpec>& specs,
                      const PrewarmOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  // One task per kernel a later call can ask for: the spec without a hint, and the spec in
  // each tuned bucket (a different memory-cache key, see CompileOptions::tokens_hint).
  std::vector<std::pair<const OpSpec*, int64_t>> tasks;
  // The tuning database's buckets are the host's (kiln tune times this machine's x86 kernels):
  // a prewarm for another backend or target, or with a fixed config, compiles each spec once.
  const CompileOptions& base = options.compile;
  const bool host_default =
      !base.target && !base.config && (!base.backend || *base.backend == BackendKind::kX86);
  for (const OpSpec& spec : specs) {
    tasks.emplace_back(&spec, 0);
    if (!host_default) continue;
    for (int64_t bucket : runtime.tuned_buckets(spec)) tasks.emplace_back(&spec, bucket);
  }
  PrewarmReport report;
  report.specs = specs.size();
  report.kernels = tasks.size();
  const RuntimeCounters before = runtime.counters();

  std::atomic<size_t> next{0};
  std::mutex mutex;  // guards failures, done and the progress callback
  size_t done = 0;
  const auto work = [&] {
    for (size_t i = next++; i < tasks.size(); i = next++) {
      CompileOptions compile_options = options.compile;
      if (tasks[i].second != 0) compile_options.tokens_hint = tasks[i].second;
      Result<Kernel> kernel = runtime.compile(*tasks[i].first, compile_options);
      std::lock_guard lock(mutex);
      if (!kernel.is_ok()) {
        report.failures.push_back(
            fmt::format("{}: {}", to_string(*tasks[i].first), kernel.status().message()));
      }
      ++done;
      if (options.progress) options.progress(done, tasks.size());
    }
  };
  size_t threads = options.threads > 0 ? size_t(options.threads)
                                       : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min(threads, std::max<size_t>(tasks.size(), 1));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();  // the calling thread is one of the workers
  for (std::thread& thread : pool) thread.join();

  const RuntimeCounters after = runtime.counters();
  report.generated = after.generated - before.generated;
  report.disk_hits = after.disk_hits - before.disk_hits;
  report.memory_hits = after.memory_hits - before.memory_hits;
  std::sort(report.failures.begin(), report.failures.end());
  if (options.seal) runtime.seal();
  report.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return report;
}

Result<PrewarmReport> prewarm(const std::filesystem::path& path, int threads,
                              const CompileOptions& compile) {
  Result<std::vector<OpSpec>> specs = read_manifest(path);
  if (!specs.is_ok()) return specs.status();
  PrewarmOptions options;
  options.threads = threads;
  options.compile = compile;
  if (::isatty(STDERR_FILENO)) {
    options.progress = [](size_t done, size_t total) {
      fmt::print(stderr, "\rprewarm: {}/{} kernels", done, total);
      if (done == total) fmt::print(stderr, "\n");
    };
  }
  PrewarmReport report = prewarm(Runtime::global(), specs.value(), options);
  if (!report.failures.empty()) {
    std::string list;
    for (const std::string& f : report.failures) list += "\n  " + f;
    return Status(StatusCode::kInternal,
                  fmt::format("prewarm of {}: {} of {} kernels failed:{}", path.string(),
                              report.failures.size(), report.kernels, list));
  }
  return report;
}

}  // namespace jit
