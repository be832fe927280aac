// Element types kiln kernels read and write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace jit {

/// Element type of a tensor. fp8 types are OCP e4m3fn (max 448, no inf) and e5m2.
enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kFp8E4m3,
  kFp8E5m2,
  kI8,
  kU8,
  kI32,
  kI64,
};

inline constexpr DType kAllDTypes[] = {DType::kF32,     DType::kF16,     DType::kBF16,
                                       DType::kFp8E4m3, DType::kFp8E5m2, DType::kI8,
                                       DType::kU8,      DType::kI32,     DType::kI64};

/// Canonical short name used in spec text: f32, f16, bf16, fp8_e4m3, fp8_e5m2, i8, u8, i32, i64.
std::string_view dtype_name(DType dtype);
/// Inverse of dtype_name; also accepts torch spellings (float32, float16, bfloat16,
/// float8_e4m3fn, float8_e5m2, int8, uint8, int32, int64).
std::optional<DType> parse_dtype(std::string_view text);
/// Size of one element in bytes.
size_t dtype_size(DType dtype);
/// True for f32, f16 and bf16: the "floating types" vLLM dispatches activations on.
inline bool is_float_activation(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
}

}  // namespace jit
