// Device copies of host data for the native GPU test and the GPU benchmark: a buffer uploaded
// from host bytes, and an OpCase's tensors as cuda views (written back on request).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "codegen/cuda/driver.h"
#include "tests/harness/op_cases.h"

namespace jit::test::cuda {

/// `bytes` of device memory holding a copy of `host` (when given); freed with the object. No
/// host data and no bytes: no buffer (`data` null). A failed allocation or copy is kept in
/// `status` (`data` is null after a failed allocation).
class DeviceBuffer {
 public:
  DeviceBuffer(const codegen::cuda::Driver* driver, const void* host, size_t bytes)
      : driver_(driver) {
    if (host == nullptr && bytes == 0) return;
    Result<void*> p = driver->alloc(bytes);
    if (!p.is_ok()) {
      status_ = p.status();
      return;
    }
    data_ = p.value();
    if (host != nullptr) status_ = driver->copy_to_device(data_, host, bytes);
  }
  /// A device copy of a host vector's elements.
  template <class T, class Allocator>
  DeviceBuffer(const codegen::cuda::Driver* driver, const std::vector<T, Allocator>& host)
      : DeviceBuffer(driver, host.data(), host.size() * sizeof(T)) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : driver_(other.driver_),
        data_(std::exchange(other.data_, nullptr)),
        status_(other.status_) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer() {
    if (data_ != nullptr) (void)driver_->free(data_);
  }

  void* data() const { return data_; }
  const Status& status() const { return status_; }

 private:
  const codegen::cuda::Driver* driver_;
  void* data_ = nullptr;
  Status status_;
};

/// An OpCase's present tensors copied to the device, `args` viewing them with Device::cuda(0)
/// (the same strides and offsets as the host tensors; absent tensors stay absent). swap_blocks'
/// mapping stays on the host: vLLM passes it as a CPU tensor. The first failure is `status`.
struct DeviceCase {
  const codegen::cuda::Driver* driver;
  std::vector<DeviceBuffer> buffers;  ///< parallel to the case's tensors (empty ones unused)
  KernelArgs args;
  Status status;

  DeviceCase(const codegen::cuda::Driver* d, const OpSpec& spec, const OpCase& c) : driver(d) {
    buffers.reserve(c.tensors.size());
    for (size_t i = 0; i < c.tensors.size(); ++i) {
      const HostTensor& h = c.tensors[i];
      if ((spec.op == OpKind::kSwapBlocks && i == 2) || !c.present[i]) {
        buffers.emplace_back(d, nullptr, 0);
        args.add(c.present[i] ? h.tensor() : Tensor());
        continue;
      }
      const std::vector<std::byte>& bytes = h.storage();
      const DeviceBuffer& buffer = buffers.emplace_back(d, bytes.data(), bytes.size());
      if (!buffer.status().is_ok()) {
        status = buffer.status();
        return;
      }
      const Tensor host = h.tensor();
      const auto offset = static_cast<const std::byte*>(host.data()) - bytes.data();
      args.add(Tensor(static_cast<std::byte*>(buffer.data()) + offset, host.dtype(), host.dim(),
                      host.sizes(), host.strides(), Device::cuda(0)));
    }
    for (double s : c.scalars) args.add_scalar(s);
  }

  /// Copies the case's outputs back into its host tensors.
  Status copy_back(OpCase& c) const {
    for (int i : c.outputs) {
      auto& storage = const_cast<std::vector<std::byte>&>(c.tensors[size_t(i)].storage());
      KILN_RETURN_IF_ERROR(
          driver->copy_to_host(storage.data(), buffers[size_t(i)].data(), storage.size()));
    }
    return Status::ok();
  }
};

}  // namespace jit::test::cuda
