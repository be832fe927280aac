#include "ir/op_spec.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <array>
#include <cassert>
#include <cctype>
#include <vector>

namespace jit {
namespace {

struct OpInfo {
  std::string_view name;
  std::string_view family;
  OpParams defaults;
};

// The op table, generated from the one list.
const std::vector<OpInfo>& op_table() {
  static const std::vector<OpInfo> table = {
#define KILN_OP(name, Kind, Params, family) {#name, #family, ir::Params{}},
#include "ir/op_list.def"
  };
  return table;
}

const OpInfo& info(OpKind op) {
  return op_table()[static_cast<size_t>(op)];
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Serialises the op and its field values for hashing: [op, field0, field1, ...] as int64.
std::vector<int64_t> hash_words(const OpSpec& spec) {
  std::vector<int64_t> words = {static_cast<int64_t>(spec.op)};
  std::visit(
      [&](const auto& p) {
        std::decay_t<decltype(p)>::fields(
            p, [&](const char*, const auto& value) { words.push_back(ir::field_bits(value)); });
      },
      spec.params);
  return words;
}

}  // namespace

std::span<const OpKind> all_op_kinds() {
  static const std::vector<OpKind> kinds = [] {
    std::vector<OpKind> k;
    for (size_t i = 0; i < op_table().size(); ++i) k.push_back(static_cast<OpKind>(i));
    return k;
  }();
  return kinds;
}

std::string_view op_name(OpKind op) {
  return info(op).name;
}
std::string_view op_family(OpKind op) {
  return info(op).family;
}

std::optional<OpKind> parse_op_kind(std::string_view name) {
  for (OpKind op : all_op_kinds()) {
    if (op_name(op) == name) return op;
  }
  return std::nullopt;
}

OpSpec OpSpec::defaults(OpKind op) {
  OpSpec spec;
  spec.op = op;
  spec.params = info(op).defaults;
  return spec;
}

std::string to_string(const OpSpec& spec) {
  std::string text(op_name(spec.op));
  text += '(';
  bool first = true;
  std::visit(
      [&](const auto& p) {
        std::decay_t<decltype(p)>::fields(p, [&](const char* name, const auto& value) {
          if (!first) text += ',';
          first = false;
          text += name;
          text += '=';
          text += ir::format_field(value);
        });
      },
      spec.params);
  text += ')';
  return text;
}

Result<OpSpec> parse_spec(std::string_view text) {
  const std::string_view original = text;
  text = trim(text);
  const size_t open = text.find('(');
  if (open == std::string_view::npos || text.back() != ')') {
    return invalid_argument(fmt::format(
        "spec '{}': expected the form op(field=value,...), e.g. rms_norm(dtype=bf16,hidden=4096)",
        original));
  }
  const std::string_view name = trim(text.substr(0, open));
  const auto op = parse_op_kind(name);
  if (!op) {
    std::string names;
    for (OpKind k : all_op_kinds())
      names += fmt::format("{}{}", names.empty() ? "" : ", ", op_name(k));
    return invalid_argument(
        fmt::format("spec '{}': unknown op '{}' (known ops: {})", original, name, names));
  }
  OpSpec spec = OpSpec::defaults(*op);
  std::string_view body = text.substr(open + 1, text.size() - open - 2);
  std::vector<std::string> seen;
  while (!trim(body).empty()) {
    const size_t comma = body.find(',');
    const std::string_view item = trim(body.substr(0, comma));
    body = comma == std::string_view::npos ? std::string_view() : body.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return invalid_argument(
          fmt::format("spec '{}': '{}' is not of the form field=value", original, item));
    }
    const std::string_view key = trim(item.substr(0, eq));
    const std::string_view value = trim(item.substr(eq + 1));
    for (const std::string& s : seen) {
      if (s == key) {
        return invalid_argument(fmt::format("spec '{}': field '{}' is given twice", original, key));
      }
    }
    seen.emplace_back(key);
    bool found = false;
    std::string error;
    std::string field_names;
    std::visit(
        [&](auto& p) {
          std::decay_t<decltype(p)>::fields(p, [&](const char* field, auto& slot) {
            field_names += fmt::format("{}{}", field_names.empty() ? "" : ", ", field);
            if (key != field) return;
            found = true;
            if (auto allowed = ir::parse_field(value, slot)) {
              error = fmt::format("spec '{}': field '{}' has value '{}'; allowed: {}", original,
                                  key, value, *allowed);
            }
          });
        },
        spec.params);
    if (!found) {
      return invalid_argument(fmt::format("spec '{}': op {} has no field '{}' (fields: {})",
                                          original, name, key, field_names));
    }
    if (!error.empty()) return invalid_argument(error);
  }
  KILN_RETURN_IF_ERROR(validate(spec));
  return spec;
}

Status validate(const OpSpec& spec) {
  if (spec.params.index() != info(spec.op).defaults.index()) {
    return {StatusCode::kInternal,
            fmt::format("spec of {} carries the params of another family", op_name(spec.op))};
  }
  Status status = std::visit([&](const auto& p) { return ir::validate(spec.op, p); }, spec.params);
  if (status.is_ok()) return status;
  return {status.code(), fmt::format("{}: {}", op_name(spec.op), status.message())};
}

uint64_t hash64(const OpSpec& spec) {
  const std::vector<int64_t> words = hash_words(spec);
  return XXH3_64bits(words.data(), words.size() * sizeof(int64_t));
}

Hash128 hash128(const OpSpec& spec) {
  const std::vector<int64_t> words = hash_words(spec);
  const XXH128_hash_t h = XXH3_128bits(words.data(), words.size() * sizeof(int64_t));
  return {h.low64, h.high64};
}

std::string Hash128::hex() const {
  return fmt::format("{:016x}{:016x}", high, low);
}

Estimate estimates(const OpSpec& spec, const ProblemSize& size) {
  return std::visit([&](const auto& p) { return ir::estimate(spec.op, p, size); }, spec.params);
}

}  // namespace jit
