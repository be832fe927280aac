// kiln: the command-line program. `kiln --help` lists the commands.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "codegen/ref/ref.h"
#ifdef KILN_HAVE_ARM
#include "codegen/arm/arm_backend.h"
#endif
#ifdef KILN_HAVE_CUDA
#include "codegen/cuda/cuda_backend.h"
#endif
#include "runtime/disk_cache.h"
#include "runtime/runtime.h"
#include "tools/commands.h"

namespace jit::tools {

// Exit codes scripts can rely on.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;   // a check failed, an entry was corrupt, ...
constexpr int kExitBadInput = 2;  // malformed spec or arguments
constexpr int kExitUnsupported = 3;

int exit_code_for(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument: return kExitBadInput;
    case StatusCode::kUnsupported: return kExitUnsupported;
    default: return kExitFailure;
  }
}

int report(const Status& status) {
  fmt::print(stderr, "kiln: {}\n", status.to_string());
  return exit_code_for(status);
}

namespace {

Result<BackendKind> parse_backend(const std::string& name) {
  for (BackendKind k : {BackendKind::kRef, BackendKind::kX86, BackendKind::kCuda, BackendKind::kArm,
                        BackendKind::kOnednn}) {
    if (backend_name(k) == name) return k;
  }
  return invalid_argument(
      fmt::format("--backend '{}' is not a backend (allowed: ref, x86, cuda, arm, onednn)", name));
}

}  // namespace

Result<CompileOptions> compile_options(const std::string& backend, const std::string& isa) {
  CompileOptions options;
  if (!backend.empty()) {
    auto kind = parse_backend(backend);
    if (!kind.is_ok()) return kind.status();
    options.backend = kind.value();
  }
  if (!isa.empty()) {
    X86Isa level;
    if (!parse_x86_isa(isa, &level) || level == X86Isa::kNone) {
      return invalid_argument(
          fmt::format("--isa '{}' is not an ISA level (allowed: {})", isa, x86_isa_level_names()));
    }
    options.isa = level;
  }
  return options;
}

namespace {

// ---- kiln list
int cmd_list(bool json) {
  auto x86 = host_target(BackendKind::kX86);
  nlohmann::json out = {{"host_isa", x86_isa_name(detect_host_x86_isa())},
                        {"ops", nlohmann::json::array()}};
  if (!json) {
    fmt::print("host: x86 {} (KILN_ISA caps it)\n\n", x86_isa_name(detect_host_x86_isa()));
    fmt::print("{:<40} {:<14} {}\n", "op", "family", "backends on this machine");
  }
  for (OpKind op : all_op_kinds()) {
    // Whether each backend generates the op at all on this machine.
    std::vector<std::string> backends;
    for (const Backend* b : Runtime::global().backends()) {
      if (b->generates(op, host_target(b->kind()))) {
        backends.emplace_back(backend_name(b->kind()));
      }
    }
    std::string joined;
    for (const auto& b : backends) joined += (joined.empty() ? "" : ", ") + b;
    if (json) {
      out["ops"].push_back(
          {{"op", op_name(op)}, {"family", op_family(op)}, {"backends", backends}});
    } else {
      fmt::print("{:<40} {:<14} {}\n", op_name(op), op_family(op),
                 joined.empty() ? "(planned)" : joined);
    }
  }
  if (json) fmt::print("{}\n", out.dump(2));
  return kExitOk;
}

// `--target arm:neon` or `--target cuda:sm_90`: code for a machine other than the host.
Status apply_target(const std::string& target, CompileOptions& options) {
  if (target.empty()) return Status::ok();
#ifdef KILN_HAVE_CUDA
  if (target.starts_with("cuda:")) {
    auto arch = codegen::cuda::parse_sm_arch(target);
    if (!arch.is_ok()) return arch.status();
    options.target = codegen::cuda::cuda_target(arch.value());
    return Status::ok();
  }
#endif
  if (target == "arm:neon") {  // AArch64 code from any host: the arm backend
    options.backend = BackendKind::kArm;
    return Status::ok();
  }
  return invalid_argument(
      fmt::format("--target '{}' is not a target this kiln generates for (allowed: arm:neon, "
                  "cuda:sm_XX[a], e.g. cuda:sm_90; the host's x86 target is chosen with --isa)",
                  target));
}

// The CUDA dump: rendered translation unit, ptxas report and PTX (compiled again with the
// kernel's config, since the runtime keeps only the loaded kernel).
int dump_cuda(const OpSpec& spec, const KernelInfo& info, bool json, nlohmann::json* out) {
#ifdef KILN_HAVE_CUDA
  auto arch = codegen::cuda::parse_sm_arch(info.target.arch);
  if (!arch.is_ok()) return report(arch.status());
  codegen::cuda::RenderedKernel rendered;
  auto binary = codegen::cuda::compile_kernel(spec, info.config, arch.value(), &rendered);
  if (!binary.is_ok()) return report(binary.status());
  const std::string ptxas = binary->report().to_string();
  if (json) {
    (*out)["source_text"] = rendered.unit();
    (*out)["ptxas"] = ptxas;
    (*out)["ptxas_log"] = binary->ptxas_log;
    (*out)["ptx"] = binary->ptx;
    (*out)["cubin_bytes"] = binary->cubin.size();
    return kExitOk;
  }
  fmt::print("\n---- rendered source ({} bytes; templates: codegen/cuda/template_headers) ----\n{}",
             rendered.unit().size(), rendered.unit());
  fmt::print("\n---- ptxas ({}) ----\n{}\n{}\n", arch->name(), ptxas, binary->ptxas_log);
  fmt::print("\n---- PTX ({} bytes; cubin {} bytes) ----\n{}", binary->ptx.size(),
             binary->cubin.size(), binary->ptx);
  return kExitOk;
#else
  return report(Status(StatusCode::kUnsupported, "this kiln was built without the cuda backend"));
#endif
}

// The disassembly `--dump` shows. arm kernels are AArch64 objects, which this host may not
// run: their listing comes from the object (llvm-objdump), not from loaded code.
Result<std::string> disassembly_of(const Kernel& kernel) {
#ifdef KILN_HAVE_ARM
  if (kernel.info().backend == BackendKind::kArm) {
    const Config& config = kernel.info().config;
    auto object = codegen::arm::compile_object(
        kernel.spec(), int(config.get(codegen::arm::kOptKnob, 3)),
        config.get(codegen::arm::kBf16Knob, 1) != 0, codegen::arm::arm_cpu(kernel.info().target));
    if (!object.is_ok()) return object.status();
    return codegen::arm::disassemble(object->object);
  }
#endif
  return kernel.disassembly();
}

// ---- kiln compile
int cmd_compile(const std::string& text, bool dump, bool json, const std::string& backend,
                const std::string& isa, const std::string& target, const std::string& config) {
  auto spec = parse_spec(text);
  if (!spec.is_ok()) return report(spec.status());
  auto options = compile_options(backend, isa);
  if (!options.is_ok()) return report(options.status());
  if (Status s = apply_target(target, options.value()); !s.is_ok()) return report(s);
  if (!config.empty()) {
    // The backend checks the knobs: their names (each backend refuses the ones it does not
    // read) and their values.
    std::optional<Config> parsed = runtime::parse_config(config);
    if (!parsed) {
      return report(invalid_argument(fmt::format(
          "--config '{}' is not a config (allowed: name=integer pairs separated by commas, "
          "e.g. threads=256,heads_per_cta=2)",
          config)));
    }
    options->config = *parsed;
  }
  auto kernel = Runtime::global().compile(spec.value(), options.value());
  if (!kernel.is_ok()) return report(kernel.status());
  const KernelInfo& info = kernel->info();
  const Estimate est = estimates(spec.value(), {.tokens = 1});
  if (json) {
    nlohmann::json out = {{"spec", info.spec_text},
                          {"backend", backend_name(info.backend)},
                          {"target", info.target.name()},
                          {"config", info.config.to_string()},
                          {"source", kernel_source_name(info.source)},
                          {"cache_key", info.cache_key},
                          {"code_bytes", info.code_size},
                          {"generate_us", info.generate_us},
                          {"total_us", info.total_us},
                          {"bytes_per_token", est.bytes},
                          {"flops_per_token", est.flops},
                          {"skipped", info.skipped}};
    if (dump && info.backend == BackendKind::kCuda) {
      const int code = dump_cuda(spec.value(), info, true, &out);
      if (code != kExitOk) return code;
    } else if (dump) {
      auto text_asm = disassembly_of(kernel.value());
      out["disassembly"] = text_asm.is_ok() ? text_asm.value() : text_asm.status().message();
    }
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  fmt::print("spec      {}\n", info.spec_text);
  fmt::print("backend   {} ({})\n", backend_name(info.backend), info.target.name());
  for (const auto& s : info.skipped) fmt::print("skipped   {}\n", s);
  fmt::print("config    {}\n", info.config.to_string());
  fmt::print("cache     {}{}\n", kernel_source_name(info.source),
             info.cache_key.empty() ? "" : fmt::format(" (entry {})", info.cache_key));
  fmt::print("code      {} bytes\n", info.code_size);
  fmt::print("time      generate {:.1f} us, total {:.1f} us\n", info.generate_us, info.total_us);
  fmt::print("per token {:.0f} bytes moved, {:.0f} flops\n", est.bytes, est.flops);
  if (dump && info.backend == BackendKind::kCuda)
    return dump_cuda(spec.value(), info, false, nullptr);
  if (dump) {
    auto text_asm = disassembly_of(kernel.value());
    if (!text_asm.is_ok()) return report(text_asm.status());
    fmt::print("\n{}", text_asm.value());
  }
  return kExitOk;
}

// ---- kiln cache
runtime::DiskCache* cache_or_report(int* code) {
  runtime::DiskCache* cache = Runtime::global().disk_cache();
  if (cache == nullptr) {
    const Status& why = Runtime::global().cache_status();
    *code = report(why.is_ok() ? Status(StatusCode::kCacheError,
                                        "the disk cache is disabled (KILN_DISK_CACHE=0)")
                               : why);
  }
  return cache;
}

// The target a bundle is made for or checked against by default: this machine's x86 target
// under KILN_ISA (the target of the kernels this machine compiles and can run).
std::string host_fingerprint() {
  return host_target(BackendKind::kX86, Runtime::global().options().isa_cap).fingerprint;
}

int cmd_cache(const std::string& action, const std::string& path, const std::string& target,
              bool json) {
  int code = kExitOk;
  if ((action == "export" || action == "import") && path.empty()) {
    return report(invalid_argument(fmt::format("kiln cache {} needs a FILE argument", action)));
  }
  runtime::DiskCache* cache = cache_or_report(&code);
  if (cache == nullptr) return code;
  if (action == "export") {
    const std::string t = target.empty() ? host_fingerprint() : target;
    auto exported = cache->export_bundle(path, t);
    if (!exported.is_ok()) return report(exported.status());
    fmt::print("exported {} entries for target {} to {} ({} bytes)\n", exported->entries, t, path,
               exported->bytes);
  } else if (action == "import") {
    auto imported = cache->import_bundle(path, host_fingerprint());
    if (!imported.is_ok()) return report(imported.status());
    fmt::print("imported {} entries for target {} into {}\n", imported->entries, imported->target,
               cache->dir().string());
  } else if (action == "ls") {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : cache->list()) {
      if (json) {
        out.push_back({{"hash", e.hash}, {"key", e.key_text}, {"bytes", e.bytes}});
      } else {
        fmt::print("{}  {:>8}  {}\n", e.hash, e.bytes,
                   e.key_text.empty() ? "(unreadable)" : e.key_text);
      }
    }
    if (json) fmt::print("{}\n", out.dump(2));
  } else if (action == "stats") {
    const auto s = cache->stats();
    if (json) {
      fmt::print("{}\n", nlohmann::json{{"dir", cache->dir().string()},
                                        {"entries", s.entries},
                                        {"bytes", s.bytes},
                                        {"max_bytes", s.max_bytes}}
                             .dump(2));
    } else {
      fmt::print("dir      {}\nentries  {}\nbytes    {} of {} ({:.1f}%)\n", cache->dir().string(),
                 s.entries, s.bytes, s.max_bytes, 100.0 * double(s.bytes) / double(s.max_bytes));
    }
  } else if (action == "verify") {
    const auto r = cache->verify();
    for (const auto& p : r.problems) fmt::print("bad      {}\n", p);
    fmt::print("checked  {} entries, removed {}\n", r.checked, r.removed);
    return r.removed == 0 ? kExitOk : kExitFailure;
  } else if (action == "clear") {
    auto removed = cache->clear();
    if (!removed.is_ok()) return report(removed.status());
    fmt::print("removed  {} entries from {}\n", removed.value(), cache->dir().string());
  }
  return kExitOk;
}

}  // namespace
}  // namespace jit::tools

int main(int argc, char** argv) {
  using namespace jit::tools;
  CLI::App app{"kiln: a JIT kernel compiler for LLM inference"};
  app.require_subcommand(1);
  bool json = false;

  auto* list =
      app.add_subcommand("list", "ops, their families, and the backends that serve them here");
  list->add_flag("--json", json, "machine-readable output");

  std::string spec_text, backend, isa, target;
  bool dump = false;
  auto* compile = app.add_subcommand("compile", "compile SPEC: backend, cache hit/miss, timings");
  compile->add_option("spec", spec_text, "spec text, e.g. 'rms_norm(dtype=bf16,hidden=4096)'")
      ->required();
  compile->add_flag("--dump", dump,
                    "print the disassembly (objdump); cuda: rendered source, ptxas report, PTX");
  compile->add_flag("--json", json, "machine-readable output");
  compile->add_option("--backend", backend, "force a backend: ref, x86");
  compile->add_option("--isa", isa, "cap the x86 ISA: " + jit::x86_isa_level_names());
  compile->add_option("--target", target,
                      "generate for this target instead of the host's: arm:neon (AArch64 code "
                      "from any host), cuda:sm_80 .. cuda:sm_120, cuda:sm_90a (no GPU needed); "
                      "--dump shows the assembly / source, ptxas report and PTX");
  std::string config;
  compile->add_option("--config", config,
                      "knobs instead of the default config, e.g. threads=256,heads_per_cta=2 "
                      "(the backend checks them: every backend refuses names it does not read)");

  std::string check_spec;
  int64_t check_tokens = 0;
  auto* check = app.add_subcommand("check", "run SPEC against ref on random and edge inputs");
  check->add_option("spec", check_spec, "spec text")->required();
  check->add_option("--tokens", check_tokens, "rows to test (default: a sweep of sizes)");
  check->add_option("--backend", backend, "backend to check: x86 (default: dispatch's choice)");
  check->add_option("--isa", isa, "cap the x86 ISA: avx2, avx512, avx512_bf16");

  std::string cache_action, cache_path, cache_target;
  auto* cache = app.add_subcommand("cache", "inspect, clear, export or import the disk cache");
  cache->add_option("action", cache_action, "ls | stats | verify | clear | export | import")
      ->required()
      ->check(CLI::IsMember({"ls", "stats", "verify", "clear", "export", "import"}));
  cache->add_option("file", cache_path, "bundle file (export: written, import: read)");
  cache->add_option("--target", cache_target,
                    "export: the target fingerprint to pack (default: this machine's, e.g. "
                    "x86-avx512; kiln cache ls shows the keys)");
  cache->add_flag("--json", json, "machine-readable output (ls, stats)");

  TuneArgs tune_args;
  std::string tune_tokens = "1,512";
  auto* tune = app.add_subcommand("tune",
                                  "time each config of each spec and store the fastest "
                                  "in the tuning database");
  tune->add_option("--ops", tune_args.ops,
                   "op names, comma-separated (default: rms_norm,fused_add_rms_norm,"
                   "rotary_embedding,silu_and_mul)")
      ->delimiter(',');
  tune->add_option("--manifest", tune_args.manifest, "tune the specs of a prewarm manifest")
      ->excludes("--ops");
  tune->add_option("--budget", tune_args.budget_seconds, "total seconds (0: no limit)");
  tune->add_option("--tokens", tune_tokens, "token counts, comma-separated (default 1,512)");
  tune->add_option("--db", tune_args.db,
                   "database file (default: $KILN_TUNE_DB, else "
                   "<cache dir>/tuning.json)");
  tune->add_flag("--json", json, "machine-readable output");

  std::string manifest;
  int prewarm_threads = 0;
  auto* prewarm = app.add_subcommand(
      "prewarm",
      "compile a manifest (one spec per line, or a JSON array) into the disk cache; "
      "record one with KILN_RECORD=FILE");
  prewarm->add_option("manifest", manifest, "manifest file")->required();
  prewarm->add_option("--threads", prewarm_threads, "compile threads (0: one per core)");
  std::string prewarm_target;
  prewarm->add_option("--target", prewarm_target,
                      "compile for this target instead of the host's x86 (arm:neon, "
                      "cuda:sm_XX[a], e.g. cuda:sm_90: a GPU server's kernels, no GPU needed)");
  prewarm->add_flag("--json", json, "machine-readable output");

  auto* demo =
      app.add_subcommand("demo", "a Llama-style decode step on the CPU, checked against ref");

  CLI11_PARSE(app, argc, argv);
  if (*list) return cmd_list(json);
  if (*compile) return cmd_compile(spec_text, dump, json, backend, isa, target, config);
  if (*check) {
    auto options = compile_options(backend, isa);
    if (!options.is_ok()) return report(options.status());
    return cmd_check(check_spec, check_tokens, options.value());
  }
  if (*cache) return cmd_cache(cache_action, cache_path, cache_target, json);
  if (*tune) {
    for (std::string_view rest = tune_tokens; !rest.empty();) {
      const size_t comma = rest.find(',');
      const std::string item(rest.substr(0, comma));
      int64_t value = 0;
      const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
      if (error != std::errc() || end != item.data() + item.size()) {
        return report(jit::invalid_argument(fmt::format(
            "--tokens '{}': '{}' is not an integer (expected e.g. 1,512)", tune_tokens, item)));
      }
      tune_args.tokens.push_back(value);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    tune_args.json = json;
    return cmd_tune(tune_args);
  }
  if (*prewarm) {
    jit::CompileOptions options;
    if (jit::Status s = apply_target(prewarm_target, options); !s.is_ok()) return report(s);
    return cmd_prewarm(manifest, prewarm_threads, options, json);
  }
  if (*demo) return cmd_demo();
  return 0;
}
