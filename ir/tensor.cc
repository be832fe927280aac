#include "ir/tensor.h"

#include <dlpack/dlpack.h>
#include <fmt/format.h>

#include <algorithm>
#include <memory>

namespace jit {

std::string to_string(const Device& device) {
  return device.kind == Device::Kind::kCpu ? std::string("cpu")
                                           : fmt::format("cuda:{}", device.index);
}

Tensor::Tensor(void* data, DType dtype, std::initializer_list<int64_t> sizes, Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(int(sizes.size())) {
  std::copy(sizes.begin(), sizes.end(), sizes_.begin());
  int64_t stride = 1;
  for (int d = rank_ - 1; d >= 0; --d) {
    strides_[d] = stride;
    stride *= sizes_[d];
  }
}

Tensor::Tensor(void* data, DType dtype, std::initializer_list<int64_t> sizes,
               std::initializer_list<int64_t> strides, Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(int(sizes.size())) {
  std::copy(sizes.begin(), sizes.end(), sizes_.begin());
  std::copy(strides.begin(), strides.begin() + std::min(strides.size(), sizes.size()),
            strides_.begin());
}

Tensor::Tensor(void* data, DType dtype, int rank, const int64_t* sizes, const int64_t* strides,
               Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(rank) {
  std::copy(sizes, sizes + rank, sizes_.begin());
  std::copy(strides, strides + rank, strides_.begin());
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank_; ++d) n *= sizes_[d];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int d = rank_ - 1; d >= 0; --d) {
    if (sizes_[d] != 1 && strides_[d] != expected) return false;
    expected *= sizes_[d];
  }
  return true;
}

std::string Tensor::describe() const {
  if (!defined()) return "None";
  std::string text = fmt::format("{}[", dtype_name(dtype_));
  for (int d = 0; d < rank_; ++d) text += fmt::format("{}{}", d ? ", " : "", sizes_[d]);
  text += "]";
  if (!is_contiguous()) {
    text += " strides [";
    for (int d = 0; d < rank_; ++d) text += fmt::format("{}{}", d ? ", " : "", strides_[d]);
    text += "]";
  }
  return text + " " + to_string(device_);
}

namespace {

std::optional<DType> dtype_from_dlpack(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 32) return DType::kF32;
      if (t.bits == 16) return DType::kF16;
      return std::nullopt;
    case kDLBfloat: return t.bits == 16 ? std::optional(DType::kBF16) : std::nullopt;
    case kDLInt:
      if (t.bits == 8) return DType::kI8;
      if (t.bits == 32) return DType::kI32;
      if (t.bits == 64) return DType::kI64;
      return std::nullopt;
    case kDLUInt: return t.bits == 8 ? std::optional(DType::kU8) : std::nullopt;
    default: return std::nullopt;
  }
}

// DLPack 0.6 has no fp8 type codes; fp8 tensors travel as uint8 (as vLLM's caches do), so
// an fp8 view exports as uint8 and imports as u8.
DLDataType dtype_to_dlpack(DType d) {
  switch (d) {
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kI8: return {kDLInt, 8, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    case DType::kFp8E4m3:
    case DType::kFp8E5m2:
    case DType::kU8: return {kDLUInt, 8, 1};
  }
  return {kDLUInt, 8, 1};
}

}  // namespace

Result<Tensor> Tensor::from_dlpack(const DLManagedTensor* managed) {
  if (managed == nullptr) return invalid_argument("dlpack: tensor is null");
  const DLTensor& t = managed->dl_tensor;
  Device device;
  if (t.device.device_type == kDLCPU) {
    device = Device::cpu();
  } else if (t.device.device_type == kDLCUDA) {
    device = Device::cuda(t.device.device_id);
  } else {
    return invalid_argument(
        fmt::format("dlpack: device type {} is not supported (allowed: kDLCPU, kDLCUDA)",
                    int(t.device.device_type)));
  }
  auto dtype = dtype_from_dlpack(t.dtype);
  if (!dtype) {
    return invalid_argument(fmt::format(
        "dlpack: dtype (code {}, bits {}, lanes {}) is not supported (allowed: float32, "
        "float16, bfloat16, int8, uint8, int32, int64)",
        int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes)));
  }
  if (t.ndim < 0 || t.ndim > kMaxRank) {
    return invalid_argument(
        fmt::format("dlpack: ndim {} is outside the supported range 0..{}", t.ndim, kMaxRank));
  }
  const size_t elem = dtype_size(*dtype);
  if (t.byte_offset % elem != 0) {
    return invalid_argument(fmt::format(
        "dlpack: byte_offset {} is not a multiple of the element size {}", t.byte_offset, elem));
  }
  std::array<int64_t, kMaxRank> strides{};
  if (t.strides != nullptr) {
    std::copy(t.strides, t.strides + t.ndim, strides.begin());
  } else {  // NULL strides mean compact row-major
    int64_t s = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      strides[d] = s;
      s *= t.shape[d];
    }
  }
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  return Tensor(data, *dtype, t.ndim, t.shape, strides.data(), device);
}

namespace {
// Owns the shape/stride arrays of an exported DLManagedTensor.
struct DlpackExport {
  DLManagedTensor managed{};
  std::array<int64_t, Tensor::kMaxRank> shape{};
  std::array<int64_t, Tensor::kMaxRank> strides{};
};
}  // namespace

DLManagedTensor* Tensor::to_dlpack() const {
  auto holder = std::make_unique<DlpackExport>();
  std::copy(sizes_.begin(), sizes_.end(), holder->shape.begin());
  std::copy(strides_.begin(), strides_.end(), holder->strides.begin());
  DLTensor& t = holder->managed.dl_tensor;
  t.data = data_;
  t.device =
      device_.kind == Device::Kind::kCpu ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, device_.index};
  t.ndim = rank_;
  t.dtype = dtype_to_dlpack(dtype_);
  t.shape = holder->shape.data();
  t.strides = holder->strides.data();
  t.byte_offset = 0;
  holder->managed.manager_ctx = holder.get();
  holder->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<DlpackExport*>(self->manager_ctx);
  };
  return &holder.release()->managed;
}

}  // namespace jit
