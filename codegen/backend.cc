#include "codegen/backend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace jit {

int64_t Config::get(std::string_view name, int64_t fallback) const {
  for (const auto& [key, value] : knobs) {
    if (key == name) return value;
  }
  return fallback;
}

Config& Config::set(std::string name, int64_t value) {
  for (auto& [key, v] : knobs) {
    if (key == name) {
      v = value;
      return *this;
    }
  }
  knobs.emplace_back(std::move(name), value);
  return *this;
}

std::string Config::to_string() const {
  if (knobs.empty()) return "default";
  std::string text;
  for (const auto& [key, value] : knobs) {
    text += fmt::format("{}{}={}", text.empty() ? "" : ",", key, value);
  }
  return text;
}

Status check_knob_names(std::string_view backend, const OpSpec& spec, const Config& config,
                        std::span<const std::string_view> allowed) {
  for (const auto& [name, value] : config.knobs) {
    if (std::find(allowed.begin(), allowed.end(), name) != allowed.end()) continue;
    return invalid_argument(
        allowed.empty()
            ? fmt::format("{} config: unknown knob '{}' for {}; allowed: none (the {} backend "
                          "has no knobs for it)",
                          backend, name, op_name(spec.op), backend)
            : fmt::format("{} config: unknown knob '{}' for {}; allowed: {}", backend, name,
                          op_name(spec.op), fmt::join(allowed, ", ")));
  }
  return Status::ok();
}

}  // namespace jit
