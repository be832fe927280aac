// jit::Tensor: a non-owning view of an n-d array (pointer, dtype, sizes, strides, device).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "ir/dtype.h"
#include "ir/status.h"

struct DLManagedTensor;  // from <dlpack/dlpack.h>

namespace jit {

/// Where a tensor's memory lives.
struct Device {
  enum class Kind : uint8_t { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;
  static Device cpu() { return {}; }
  static Device cuda(int index) { return {Kind::kCuda, index}; }
  bool operator==(const Device&) const = default;
};

/// "cpu" or "cuda:N".
std::string to_string(const Device& device);

/// A non-owning view: data pointer, element type, sizes and strides (in elements), device.
/// Rank is at most Tensor::kMaxRank. A default-constructed Tensor is "absent" (for optional
/// arguments such as a missing key or weight).
class Tensor {
 public:
  static constexpr int kMaxRank = 6;

  Tensor() = default;
  /// A dense row-major view of `sizes` at `data`.
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> sizes,
         Device device = Device::cpu());
  /// A strided view; `sizes` and `strides` must have the same length (<= kMaxRank).
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> sizes,
         std::initializer_list<int64_t> strides, Device device = Device::cpu());
  /// Same, from arrays of `rank` entries.
  Tensor(void* data, DType dtype, int rank, const int64_t* sizes, const int64_t* strides,
         Device device = Device::cpu());

  bool defined() const { return data_ != nullptr || rank_ > 0; }
  void* data() const { return data_; }
  template <class T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int dim() const { return rank_; }
  /// Size of dimension `d`; negative `d` counts from the end, like torch.
  int64_t size(int d) const { return sizes_[normalize(d)]; }
  int64_t stride(int d) const { return strides_[normalize(d)]; }
  const int64_t* sizes() const { return sizes_.data(); }
  const int64_t* strides() const { return strides_.data(); }
  int64_t numel() const;
  size_t element_size() const { return dtype_size(dtype_); }
  /// Dense row-major strides (a size-1 dimension's stride is ignored).
  bool is_contiguous() const;
  /// "bf16[7, 4096] strides [8192, 1] cpu"
  std::string describe() const;

  /// Wraps a DLPack tensor without copying. The caller keeps `managed` alive while the view is
  /// used. Rejects unsupported dtypes/devices and byte offsets that break element alignment.
  static Result<Tensor> from_dlpack(const DLManagedTensor* managed);
  /// Exports this view as a DLManagedTensor whose deleter frees only the shape arrays (the
  /// data is not owned). The caller must call `deleter` when done.
  DLManagedTensor* to_dlpack() const;

 private:
  int normalize(int d) const { return d < 0 ? d + rank_ : d; }

  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_{};
  int rank_ = 0;
  std::array<int64_t, kMaxRank> sizes_{};
  std::array<int64_t, kMaxRank> strides_{};
};

}  // namespace jit
