// jit::Tensor: description, contiguity and the DLPack round trip.
#include "ir/tensor.h"

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace jit {
namespace {

void expect_same_view(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.data(), b.data());
  EXPECT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.device(), b.device());
  ASSERT_EQ(a.dim(), b.dim());
  for (int d = 0; d < a.dim(); ++d) {
    EXPECT_EQ(a.size(d), b.size(d)) << "dim " << d;
    EXPECT_EQ(a.stride(d), b.stride(d)) << "dim " << d;
  }
}

TEST(TensorTest, DescribeNamesDtypeShapeStridesAndDevice) {
  std::vector<float> buf(64);
  EXPECT_EQ(Tensor().describe(), "None");
  EXPECT_EQ(Tensor(buf.data(), DType::kBF16, {7, 4096}).describe(), "bf16[7, 4096] cpu");
  EXPECT_EQ(Tensor(buf.data(), DType::kF32, {4, 3}, {8, 1}).describe(),
            "f32[4, 3] strides [8, 1] cpu");
  EXPECT_EQ(Tensor(buf.data(), DType::kI64, {2}, Device::cuda(1)).describe(), "i64[2] cuda:1");
  EXPECT_EQ(to_string(Device::cpu()), "cpu");
  EXPECT_EQ(to_string(Device::cuda(3)), "cuda:3");
}

TEST(TensorTest, SizesStridesAndNegativeDims) {
  std::vector<float> buf(64);
  const Tensor t(buf.data(), DType::kF32, {2, 3, 4});
  EXPECT_TRUE(t.defined());
  EXPECT_FALSE(Tensor().defined());
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(1), 4);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.stride(-3), 12);
  EXPECT_EQ(t.element_size(), 4u);
  EXPECT_EQ(t.data_as<float>(), buf.data());
}

TEST(TensorTest, IsContiguous) {
  std::vector<float> buf(256);
  void* p = buf.data();
  EXPECT_TRUE(Tensor(p, DType::kF32, {4, 3}).is_contiguous());
  EXPECT_TRUE(Tensor(p, DType::kF32, {4, 3}, {3, 1}).is_contiguous());
  EXPECT_FALSE(Tensor(p, DType::kF32, {4, 3}, {8, 1}).is_contiguous());  // padded rows
  EXPECT_FALSE(Tensor(p, DType::kF32, {3, 4}, {1, 3}).is_contiguous());  // transposed
  EXPECT_FALSE(Tensor(p, DType::kF32, {4, 3}, {3, 2}).is_contiguous());  // strided columns
  // A size-1 dimension's stride does not matter.
  EXPECT_TRUE(Tensor(p, DType::kF32, {1, 3}, {99, 1}).is_contiguous());
  EXPECT_TRUE(Tensor(p, DType::kF32, {4, 1, 3}, {3, 7, 1}).is_contiguous());
  EXPECT_TRUE(Tensor(p, DType::kF32, {}, {}).is_contiguous());  // a scalar
  EXPECT_EQ(Tensor(p, DType::kF32, {}, {}).numel(), 1);
}

TEST(TensorTest, DlpackRoundTripKeepsTheView) {
  std::vector<uint8_t> buf(4096);
  const std::vector<Tensor> views = {
      Tensor(buf.data(), DType::kF32, {2, 3, 4}),
      Tensor(buf.data(), DType::kF16, {4, 3}, {8, 1}),
      Tensor(buf.data() + 64, DType::kBF16, {5, 2, 7}, {32, 1, 2}),
      Tensor(buf.data(), DType::kI8, {9}),
      Tensor(buf.data(), DType::kU8, {3, 3}),
      Tensor(buf.data(), DType::kI32, {1, 6}, {100, 1}),
      Tensor(buf.data(), DType::kI64, {2, 2, 2, 2, 2, 2}),
      Tensor(buf.data(), DType::kF32, {}, {}),
      // A device pointer is carried, never dereferenced.
      Tensor(reinterpret_cast<void*>(uintptr_t(0x10000)), DType::kBF16, {8, 128}, Device::cuda(2)),
  };
  for (const Tensor& t : views) {
    SCOPED_TRACE(t.describe());
    DLManagedTensor* managed = t.to_dlpack();
    ASSERT_NE(managed, nullptr);
    EXPECT_EQ(managed->dl_tensor.ndim, t.dim());
    EXPECT_EQ(managed->dl_tensor.byte_offset, 0u);
    const Result<Tensor> back = Tensor::from_dlpack(managed);
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    expect_same_view(t, back.value());
    managed->deleter(managed);
  }
}

TEST(TensorTest, Fp8TravelsAsUint8) {
  // DLPack 0.6 has no fp8 codes: an fp8 view exports as uint8 and comes back as u8.
  std::vector<uint8_t> buf(64);
  const Tensor t(buf.data(), DType::kFp8E4m3, {4, 16});
  DLManagedTensor* managed = t.to_dlpack();
  EXPECT_EQ(managed->dl_tensor.dtype.code, kDLUInt);
  EXPECT_EQ(managed->dl_tensor.dtype.bits, 8);
  const Result<Tensor> back = Tensor::from_dlpack(managed);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->dtype(), DType::kU8);
  EXPECT_EQ(back->data(), t.data());
  managed->deleter(managed);
}

// A hand-built DLPack tensor for the import checks.
struct HandMade {
  std::array<int64_t, 8> shape{2, 3};
  std::array<int64_t, 8> strides{3, 1};
  DLManagedTensor managed{};
  std::vector<float> buf = std::vector<float>(16);

  HandMade() {
    DLTensor& t = managed.dl_tensor;
    t.data = buf.data();
    t.device = {kDLCPU, 0};
    t.ndim = 2;
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape.data();
    t.strides = strides.data();
    t.byte_offset = 0;
  }
};

Status import_status(const HandMade& h) {
  return Tensor::from_dlpack(&h.managed).status();
}

void expect_rejected(const HandMade& h, const std::string& fragment) {
  const Status s = import_status(h);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
}

TEST(TensorTest, DlpackImportHonoursNullStridesAndByteOffset) {
  HandMade h;
  h.managed.dl_tensor.strides = nullptr;  // compact row-major
  h.managed.dl_tensor.byte_offset = 8;
  const Result<Tensor> t = Tensor::from_dlpack(&h.managed);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->data(), static_cast<void*>(h.buf.data() + 2));
  EXPECT_EQ(t->stride(0), 3);
  EXPECT_EQ(t->stride(1), 1);
  EXPECT_TRUE(t->is_contiguous());

  HandMade cuda;
  cuda.managed.dl_tensor.device = {kDLCUDA, 3};
  const Result<Tensor> c = Tensor::from_dlpack(&cuda.managed);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->device(), Device::cuda(3));
}

TEST(TensorTest, DlpackImportRejectsBadInput) {
  EXPECT_NE(Tensor::from_dlpack(nullptr).status().message().find("null"), std::string::npos);
  {
    HandMade h;
    h.managed.dl_tensor.dtype = {kDLFloat, 64, 1};  // float64
    expect_rejected(h, "dtype (code 2, bits 64, lanes 1) is not supported");
  }
  {
    HandMade h;
    h.managed.dl_tensor.dtype = {kDLFloat, 32, 4};  // vector lanes
    expect_rejected(h, "lanes 4");
  }
  {
    HandMade h;
    h.managed.dl_tensor.dtype = {kDLComplex, 64, 1};
    expect_rejected(h, "dtype");
  }
  {
    HandMade h;
    h.managed.dl_tensor.device = {kDLVulkan, 0};
    expect_rejected(h, "device type 7 is not supported");
  }
  {
    HandMade h;
    h.managed.dl_tensor.device = {kDLCUDAHost, 0};
    expect_rejected(h, "device type");
  }
  {
    HandMade h;
    h.managed.dl_tensor.byte_offset = 2;  // half a float
    expect_rejected(h, "byte_offset 2");
  }
  {
    HandMade h;
    h.managed.dl_tensor.ndim = 7;
    expect_rejected(h, "ndim 7");
  }
}

}  // namespace
}  // namespace jit
