#include "codegen/backend.h"

#include <fmt/format.h>

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

}  // namespace jit
