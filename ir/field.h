// Field machinery shared by every params struct: enum names, formatting and parsing of one
// field value. A params struct lists its fields once, in `fields(self, visitor)`; text, parsing,
// hashing and equality are all derived from that list.
#pragma once

#include <array>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "ir/dtype.h"

namespace jit::ir {

/// How a KV cache stores elements. Spec text names them as EnumNames below (kv=auto,
/// fp8_e4m3, fp8_e5m2, fp8_ds_mla); jit::ops take vLLM's `kv_cache_dtype` strings and map them
/// (detail::parse_kv_cache_dtype): "auto"/"float16"/"bfloat16" -> kAuto; "fp8"/"fp8_e4m3" ->
/// kFp8E4m3; "fp8_e5m2" -> kFp8E5m2; "fp8_ds_mla" -> kFp8DsMla for the MLA cache writes (DeepSeek
/// MLA layout, e4m3 with per-tile scales) and kFp8E4m3 for the ops that read such a cache's
/// codes.
enum class KvCacheDtype : uint8_t { kAuto, kFp8E4m3, kFp8E5m2, kFp8DsMla };

/// Paged KV-cache layout of the flash cache: [blocks, block_size, heads, head_size] (NHD) or
/// [blocks, heads, block_size, head_size] (HND).
enum class CacheLayout : uint8_t { kNhd, kHnd };

/// Rotary embedding pairing: NeoX pairs (h[j], h[j+E]); GPT-J pairs (h[2j], h[2j+1]).
enum class RopeStyle : uint8_t { kNeox, kGptj };

/// Scale format of the DeepSeek indexer quantiser: plain fp32 scales or powers of two (ue8m0).
enum class ScaleFormat : uint8_t { kPlain, kUe8m0 };

/// Names of an enum's values in spec text, indexed by the enum's underlying value.
template <class E>
struct EnumNames;
template <>
struct EnumNames<KvCacheDtype> {
  static constexpr std::array<std::string_view, 4> kNames = {"auto", "fp8_e4m3", "fp8_e5m2",
                                                             "fp8_ds_mla"};
};
template <>
struct EnumNames<CacheLayout> {
  static constexpr std::array<std::string_view, 2> kNames = {"nhd", "hnd"};
};
template <>
struct EnumNames<RopeStyle> {
  static constexpr std::array<std::string_view, 2> kNames = {"neox", "gptj"};
};
template <>
struct EnumNames<ScaleFormat> {
  static constexpr std::array<std::string_view, 2> kNames = {"plain", "ue8m0"};
};

template <class E>
std::string_view enum_name(E value) {
  return EnumNames<E>::kNames[static_cast<size_t>(value)];
}

/// Comma-separated list of an enum's value names, for error messages.
template <class E>
std::string enum_choices() {
  std::string text;
  for (std::string_view name : EnumNames<E>::kNames) {
    if (!text.empty()) text += ", ";
    text += name;
  }
  return text;
}

/// Text of one field value as it appears in canonical spec text.
inline std::string format_field(int64_t v) {
  return std::to_string(v);
}
inline std::string format_field(bool v) {
  return v ? "true" : "false";
}
inline std::string format_field(DType v) {
  return std::string(dtype_name(v));
}
template <class E, class = std::enable_if_t<std::is_enum_v<E>>>
std::string format_field(E v) {
  return std::string(enum_name(v));
}

/// Parses one field value; returns a description of the allowed values on failure.
inline std::optional<std::string> parse_field(std::string_view text, int64_t& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (ec != std::errc() || end != text.data() + text.size()) return "an integer";
  return std::nullopt;
}
inline std::optional<std::string> parse_field(std::string_view text, bool& out) {
  if (text == "true" || text == "1") {
    out = true;
  } else if (text == "false" || text == "0") {
    out = false;
  } else {
    return "true or false";
  }
  return std::nullopt;
}
inline std::optional<std::string> parse_field(std::string_view text, DType& out) {
  auto d = parse_dtype(text);
  if (!d) return "one of f32, f16, bf16, fp8_e4m3, fp8_e5m2, i8, u8, i32, i64";
  out = *d;
  return std::nullopt;
}
template <class E, class = std::enable_if_t<std::is_enum_v<E>>>
std::optional<std::string> parse_field(std::string_view text, E& out) {
  const auto& names = EnumNames<E>::kNames;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == text) {
      out = static_cast<E>(i);
      return std::nullopt;
    }
  }
  return "one of " + enum_choices<E>();
}

/// The value of a field as an integer, for hashing.
inline int64_t field_bits(int64_t v) {
  return v;
}
inline int64_t field_bits(bool v) {
  return v ? 1 : 0;
}
template <class E, class = std::enable_if_t<std::is_enum_v<E>>>
int64_t field_bits(E v) {
  return static_cast<int64_t>(v);
}

}  // namespace jit::ir
