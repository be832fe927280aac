// kiln tune: searches each spec's configs at each token count, with a progress bar, a summary
// table and the winners written to the tuning database.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "autotune/tuner.h"
#include "runtime/prewarm.h"
#include "runtime/tuning_db.h"
#include "tools/commands.h"

namespace jit::tools {
namespace {

constexpr int kBarWidth = 20;

// The spec `kiln tune --ops NAME` tunes for each op: a Llama-3-8B-sized layer in bf16
// (hidden 4096, 32 query / 8 key-value heads of 128, intermediate 14336).
std::optional<OpSpec> representative_spec(OpKind op) {
  constexpr int64_t kHidden = 4096, kHeadSize = 128, kIntermediate = 14336;
  const DType dt = DType::kBF16;
  if (op == OpKind::kRmsNorm || op == OpKind::kFusedAddRmsNorm) {
    return OpSpec::make(op, ir::NormParams{dt, kHidden, true});
  }
  if (op == OpKind::kRotaryEmbedding) {
    return OpSpec::make(
        op, ir::RopeParams{dt, dt, kHeadSize, kHeadSize, ir::RopeStyle::kNeox, 32, 8, true});
  }
  if (op_family(op) == "activation") {
    return OpSpec::make(op, ir::ActivationParams{dt, kIntermediate});
  }
  return std::nullopt;
}

std::string representative_ops() {
  std::string names;
  for (OpKind op : all_op_kinds()) {
    if (representative_spec(op)) names += (names.empty() ? "" : ", ") + std::string(op_name(op));
  }
  return names;
}

Result<std::vector<OpSpec>> specs_to_tune(const std::vector<std::string>& ops,
                                          const std::string& manifest) {
  if (!manifest.empty()) return read_manifest(manifest);
  const std::vector<std::string> names =
      ops.empty() ? std::vector<std::string>{"rms_norm", "fused_add_rms_norm", "rotary_embedding",
                                             "silu_and_mul"}
                  : ops;
  std::vector<OpSpec> specs;
  for (const std::string& name : names) {
    const std::optional<OpKind> op = parse_op_kind(name);
    std::optional<OpSpec> spec = op ? representative_spec(*op) : std::nullopt;
    if (!spec) {
      return invalid_argument(fmt::format(
          "--ops '{}' has no representative spec to tune (allowed: {}); pass exact specs with "
          "--manifest FILE",
          name, representative_ops()));
    }
    specs.push_back(*spec);
  }
  return specs;
}

void draw_bar(const std::string& spec, int64_t tokens, const autotune::SearchProgress& p) {
  const int filled = p.total ? int(kBarWidth * p.tried / p.total) : 0;
  fmt::print(stderr, "\r{:<58.58} t={:<5} [{:#<{}}{:.<{}}] {}/{} best {:8.2f} us x{:.2f}", spec,
             tokens, "", filled, "", kBarWidth - filled, p.tried, p.total, p.best_us,
             p.best_us > 0 ? p.default_us / p.best_us : 1.0);
}

}  // namespace

int cmd_tune(const TuneArgs& args) {
  Result<std::vector<OpSpec>> specs = specs_to_tune(args.ops, args.manifest);
  if (!specs.is_ok()) return report(specs.status());
  if (args.tokens.empty()) return report(invalid_argument("--tokens needs at least one count"));
  for (int64_t t : args.tokens) {
    if (t < 1) {
      return report(invalid_argument(fmt::format("--tokens {} must be >= 1", t)));
    }
  }
  if (args.budget_seconds < 0) {
    return report(invalid_argument(
        fmt::format("--budget {} must be >= 0 seconds (0: no limit)", args.budget_seconds)));
  }
  Runtime& runtime = Runtime::global();
  const std::filesystem::path db_path =
      args.db.empty() ? runtime.options().tuning_db : std::filesystem::path(args.db);
  // A damaged file is not silently replaced: the user decides (it may hold other machines'
  // results worth repairing).
  Result<runtime::TuningDb> db = runtime::TuningDb::read(db_path);
  if (!db.is_ok()) {
    return report(Status(db.status().code(),
                         fmt::format("tuning database {}: {}; fix or remove it, or pass --db",
                                     db_path.string(), db.status().message())));
  }

  const size_t jobs = specs->size() * args.tokens.size();
  const auto start = std::chrono::steady_clock::now();
  const bool tty = ::isatty(STDERR_FILENO);
  std::vector<autotune::TuneResult> results;
  std::vector<std::string> failures;
  size_t job = 0;
  for (const OpSpec& spec : specs.value()) {
    const std::string text = to_string(spec);
    for (int64_t tokens : args.tokens) {
      autotune::TuneOptions options;
      if (args.budget_seconds > 0) {
        // The remaining budget is shared equally by the remaining (spec, tokens) pairs.
        const double spent =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        options.search.budget_seconds =
            std::max(0.001, (args.budget_seconds - spent) / double(jobs - job));
      }
      autotune::SearchProgress last;
      options.search.progress = [&](const autotune::SearchProgress& p) {
        last = p;
        if (tty) draw_bar(text, tokens, p);
      };
      ++job;
      Result<autotune::TuneResult> tuned = autotune::tune_spec(runtime, spec, tokens, options);
      if (!tty && tuned.is_ok()) draw_bar(text, tokens, last);
      fmt::print(stderr, "\n");
      if (!tuned.is_ok()) {
        failures.push_back(fmt::format("{} tokens={}: {}", text, tokens, tuned.status().message()));
        fmt::print(stderr, "  skipped: {}\n", tuned.status().message());
        continue;
      }
      db->put(tuned->entry);
      results.push_back(std::move(tuned).value());
    }
  }
  if (!results.empty()) {
    if (Status saved = db->save(db_path); !saved.is_ok()) return report(saved);
  }

  if (args.json) {
    nlohmann::json out = {
        {"db", db_path.string()}, {"entries", nlohmann::json::array()}, {"failures", failures}};
    for (const auto& r : results) {
      out["entries"].push_back({{"spec", r.entry.spec},
                                {"token_bucket", r.entry.token_bucket},
                                {"target", r.entry.target},
                                {"config", r.entry.config},
                                {"time_us", r.entry.time_us},
                                {"default_time_us", r.entry.default_time_us},
                                {"speedup", r.entry.speedup},
                                {"tried", r.search.tried},
                                {"pruned", r.search.pruned}});
    }
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print("\n{:<58} {:>6} {:>11} {:>11} {:>8} {:>9}  {}\n", "spec", "bucket", "default us",
               "tuned us", "speedup", "tried", "config");
    for (const auto& r : results) {
      fmt::print("{:<58} {:>6} {:>11.2f} {:>11.2f} {:>7.2f}x {:>4}/{:<4}  {}\n", r.entry.spec,
                 r.entry.token_bucket, r.entry.default_time_us, r.entry.time_us, r.entry.speedup,
                 r.search.tried, r.search.pruned, r.entry.config);
    }
    fmt::print(
        "\n(tried/pruned: candidates measured / of those stopped early as clearly "
        "worse)\nwrote {} entries to {}\n",
        results.size(), db_path.string());
  }
  return failures.empty() ? 0 : 1;
}

}  // namespace jit::tools
