#include "ir/dtype.h"

namespace jit {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kFp8E4m3: return "fp8_e4m3";
    case DType::kFp8E5m2: return "fp8_e5m2";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view text) {
  for (DType d : kAllDTypes) {
    if (text == dtype_name(d)) return d;
  }
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float32", DType::kF32},
      {"float", DType::kF32},
      {"float16", DType::kF16},
      {"half", DType::kF16},
      {"bfloat16", DType::kBF16},
      {"float8_e4m3fn", DType::kFp8E4m3},
      {"float8_e5m2", DType::kFp8E5m2},
      {"int8", DType::kI8},
      {"uint8", DType::kU8},
      {"int32", DType::kI32},
      {"int64", DType::kI64},
  };
  for (const Alias& a : kAliases) {
    if (text == a.name) return a.dtype;
  }
  return std::nullopt;
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kFp8E4m3: return 1;
    case DType::kFp8E5m2: return 1;
    case DType::kI8: return 1;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

}  // namespace jit
