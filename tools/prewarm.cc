// kiln prewarm FILE: compiles a manifest in parallel into the disk cache.
#include "runtime/prewarm.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tools/commands.h"

namespace jit::tools {

int cmd_prewarm(const std::string& manifest, int threads, const CompileOptions& compile,
                bool json) {
  if (threads < 0) {
    return report(
        invalid_argument(fmt::format("--threads {} must be >= 0 (0: one per core)", threads)));
  }
  Result<PrewarmReport> done = prewarm(manifest, threads, compile);
  if (!done.is_ok()) return report(done.status());
  const PrewarmReport& r = done.value();
  if (json) {
    fmt::print("{}\n", nlohmann::json{{"manifest", manifest},
                                      {"specs", r.specs},
                                      {"kernels", r.kernels},
                                      {"generated", r.generated},
                                      {"disk_hits", r.disk_hits},
                                      {"wall_ms", r.wall_ms}}
                           .dump(2));
  } else {
    fmt::print(
        "prewarm: {} specs, {} kernels ({} generated, {} from the disk cache) in {:.1f} "
        "ms\n",
        r.specs, r.kernels, r.generated, r.disk_hits, r.wall_ms);
  }
  return 0;
}

}  // namespace jit::tools
