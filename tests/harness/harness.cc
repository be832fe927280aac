#include "tests/harness/harness.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ir/numeric.h"

namespace jit::test {
namespace {

int64_t product(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// Dense row-major strides of `sizes`.
std::vector<int64_t> dense_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= sizes[d];
  }
  return strides;
}

// Reads/writes one element of `dtype` at `p` as a double.
double decode(DType dtype, const std::byte* p) {
  switch (dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return dtype == DType::kF16 ? numeric::f16_to_f32(bits) : numeric::bf16_to_f32(bits);
    }
    case DType::kFp8E4m3: return numeric::fp8_e4m3_to_f32(uint8_t(*p));
    case DType::kFp8E5m2: return numeric::fp8_e5m2_to_f32(uint8_t(*p));
    case DType::kI8: return double(int8_t(*p));
    case DType::kU8: return double(uint8_t(*p));
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kI64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return double(v);
    }
  }
  return 0;
}

void encode(DType dtype, std::byte* p, double value) {
  switch (dtype) {
    case DType::kF32: {
      const float v = float(value);
      std::memcpy(p, &v, 4);
      return;
    }
    case DType::kF16:
    case DType::kBF16: {
      const uint16_t bits = dtype == DType::kF16 ? numeric::f32_to_f16(float(value))
                                                 : numeric::f32_to_bf16(float(value));
      std::memcpy(p, &bits, 2);
      return;
    }
    case DType::kFp8E4m3: *p = std::byte(numeric::f32_to_fp8_e4m3(float(value))); return;
    case DType::kFp8E5m2: *p = std::byte(numeric::f32_to_fp8_e5m2(float(value))); return;
    case DType::kI8: *p = std::byte(int8_t(value)); return;
    case DType::kU8: *p = std::byte(uint8_t(value)); return;
    case DType::kI32: {
      const auto v = int32_t(value);
      std::memcpy(p, &v, 4);
      return;
    }
    case DType::kI64: {
      const auto v = int64_t(value);
      std::memcpy(p, &v, 8);
      return;
    }
  }
}

// "[2, 1]": the multi-index of logical element `flat`.
std::string multi_index(const Tensor& t, int64_t flat) {
  std::vector<int64_t> index(size_t(t.dim()));
  for (int d = t.dim() - 1; d >= 0; --d) {
    index[size_t(d)] = t.size(d) > 0 ? flat % t.size(d) : 0;
    flat = t.size(d) > 0 ? flat / t.size(d) : 0;
  }
  return fmt::format("[{}]", fmt::join(index, ", "));
}

}  // namespace

// ---- HostTensor -----------------------------------------------------------------------------

HostTensor HostTensor::zeros(DType dtype, std::vector<int64_t> sizes) {
  std::vector<int64_t> strides = dense_strides(sizes);
  return strided(dtype, std::move(sizes), std::move(strides));
}

HostTensor HostTensor::strided(DType dtype, std::vector<int64_t> sizes,
                               std::vector<int64_t> strides, int64_t offset) {
  HostTensor t;
  t.dtype_ = dtype;
  t.sizes_ = std::move(sizes);
  t.strides_ = std::move(strides);
  t.offset_ = offset;
  // One past the furthest element the view can reach.
  int64_t extent = offset;
  if (product(t.sizes_) > 0) {
    extent += 1;
    for (size_t d = 0; d < t.sizes_.size(); ++d) extent += (t.sizes_[d] - 1) * t.strides_[d];
  }
  t.storage_.assign(size_t(extent) * dtype_size(dtype), std::byte{0});
  return t;
}

HostTensor HostTensor::row_strided(DType dtype, std::vector<int64_t> sizes, int64_t row_stride) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size() - 1; d-- > 0;) {
    strides[d] = d + 2 == sizes.size() ? row_stride : strides[d + 1] * sizes[d + 1];
  }
  return strided(dtype, std::move(sizes), std::move(strides));
}

HostTensor HostTensor::from_values(DType dtype, std::vector<int64_t> sizes,
                                   const std::vector<double>& values) {
  HostTensor t = zeros(dtype, std::move(sizes));
  for (int64_t i = 0; i < t.numel() && i < int64_t(values.size()); ++i) t.set(i, values[size_t(i)]);
  return t;
}

Tensor HostTensor::tensor() const {
  auto* base = const_cast<std::byte*>(storage_.data()) + offset_ * int64_t(dtype_size(dtype_));
  return Tensor(storage_.empty() ? nullptr : base, dtype_, int(sizes_.size()), sizes_.data(),
                strides_.data());
}

int64_t HostTensor::numel() const {
  return product(sizes_);
}

int64_t HostTensor::byte_offset(int64_t flat) const {
  return (offset_ + element_offset(tensor(), flat)) * int64_t(dtype_size(dtype_));
}

double HostTensor::get(int64_t flat) const {
  return decode(dtype_, storage_.data() + byte_offset(flat));
}

void HostTensor::set_bits(int64_t flat, uint64_t bits) {
  std::memcpy(storage_.data() + byte_offset(flat), &bits, dtype_size(dtype_));
}

void HostTensor::set(int64_t flat, double value) {
  encode(dtype_, storage_.data() + byte_offset(flat), value);
}

std::vector<double> HostTensor::values() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[size_t(i)] = get(i);
  return out;
}

int64_t element_offset(const Tensor& t, int64_t flat) {
  int64_t offset = 0;
  for (int d = t.dim() - 1; d >= 0; --d) {
    const int64_t size = t.size(d);
    if (size == 0) return 0;
    offset += (flat % size) * t.stride(d);
    flat /= size;
  }
  return offset;
}

double load_element(const Tensor& t, int64_t flat) {
  const auto* base = static_cast<const std::byte*>(t.data());
  return decode(t.dtype(), base + element_offset(t, flat) * int64_t(t.element_size()));
}

// ---- generators -----------------------------------------------------------------------------

void fill_normal(HostTensor& t, uint64_t seed, double mean, double stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(mean, stddev);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, dist(rng));
}

void fill_small_int(HostTensor& t, uint64_t seed, int lo, int hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, dist(rng));
}

void fill_uniform(HostTensor& t, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, dist(rng));
}

void fill_equal(HostTensor& t, double value) {
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, value);
}

std::vector<double> adversarial_values(DType dtype) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Per dtype: smallest subnormal, smallest normal, largest finite (all exact powers/sums).
  double denorm_min = std::ldexp(1.0, -149), normal_min = std::ldexp(1.0, -126);
  // `huge` is a power of two far beyond any activation's normal range, exact in the dtype.
  double max = std::numeric_limits<float>::max(), huge = std::ldexp(1.0, 100);
  if (dtype == DType::kF16) {
    denorm_min = std::ldexp(1.0, -24);
    normal_min = std::ldexp(1.0, -14);
    max = 65504;
    huge = std::ldexp(1.0, 15);
  } else if (dtype == DType::kBF16) {
    denorm_min = std::ldexp(1.0, -133);
    max = numeric::bf16_to_f32(0x7F7F);
  }
  const double largest_subnormal = normal_min - denorm_min;
  return {0.0,
          -0.0,
          inf,
          -inf,
          nan,
          denorm_min,
          -denorm_min,
          largest_subnormal,
          -largest_subnormal,
          normal_min,
          max,
          -max,
          huge,
          -huge,
          1.0,
          -1.0};
}

void fill_adversarial(HostTensor& t, uint64_t seed) {
  const std::vector<double> specials = adversarial_values(t.dtype());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, 2 * specials.size() - 1);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const size_t k = pick(rng);
    t.set(i, k < specials.size() ? specials[k] : normal(rng));
  }
}

// ---- comparison -----------------------------------------------------------------------------

std::string Tolerance::to_string() const {
  switch (kind) {
    case Kind::kExact: return "exact";
    case Kind::kAbsRel: return fmt::format("atol {:g} rtol {:g}", atol, rtol);
    case Kind::kUlp:
      return scaled_by.defined() ? fmt::format("{} ulp + 1 ulp of the intermediate x |y|", ulps)
                                 : fmt::format("{} ulp", ulps);
  }
  return "?";
}

double ulp_of(DType dtype, double value) {
  // Fraction bits and the exponent of the smallest normal, per format.
  int fraction_bits = 0, min_exp = 0;
  switch (dtype) {
    case DType::kF32: fraction_bits = 23, min_exp = -126; break;
    case DType::kF16: fraction_bits = 10, min_exp = -14; break;
    case DType::kBF16: fraction_bits = 7, min_exp = -126; break;
    case DType::kFp8E4m3: fraction_bits = 3, min_exp = -6; break;
    case DType::kFp8E5m2: fraction_bits = 2, min_exp = -14; break;
    default: return 1;  // integers
  }
  const double magnitude = std::fabs(value);
  if (!std::isfinite(magnitude)) return std::numeric_limits<double>::infinity();
  int exp = min_exp;
  if (magnitude >= std::ldexp(1.0, min_exp)) {
    std::frexp(magnitude, &exp);  // magnitude = f * 2^exp, f in [0.5, 1)
    exp -= 1;                     // magnitude in [2^exp, 2^(exp+1))
  }
  return std::ldexp(1.0, exp - fraction_bits);
}

CompareResult compare(const Tensor& actual, const Tensor& expected, Tolerance tol) {
  CompareResult result;
  bool same_shape = actual.dim() == expected.dim() && actual.dtype() == expected.dtype();
  for (int d = 0; same_shape && d < actual.dim(); ++d) {
    same_shape = actual.size(d) == expected.size(d);
  }
  if (!same_shape) {
    result.comparable = false;
    result.message = fmt::format("shape or dtype mismatch: actual {}, expected {}",
                                 actual.describe(), expected.describe());
    return result;
  }
  const DType dtype = actual.dtype();
  const size_t esize = actual.element_size();
  const auto* a_base = static_cast<const std::byte*>(actual.data());
  const auto* e_base = static_cast<const std::byte*>(expected.data());
  result.count = actual.numel();
  bool worst_mismatched = false;
  for (int64_t i = 0; i < result.count; ++i) {
    const std::byte* a_ptr = a_base + element_offset(actual, i) * int64_t(esize);
    const std::byte* e_ptr = e_base + element_offset(expected, i) * int64_t(esize);
    const double x = decode(dtype, a_ptr);
    const double r = decode(dtype, e_ptr);
    const double inf = std::numeric_limits<double>::infinity();
    bool match;
    double ratio;  // |x - r| / allowed; inf for a non-finite mismatch
    // The multiplier of an intermediate rounding (Tolerance::scaled_by), when given.
    const double y = tol.scaled_by.defined() ? load_element(tol.scaled_by, i) : 0.0;
    const bool y_infinite = tol.scaled_by.defined() && std::isinf(y);
    if (y_infinite && !std::isfinite(x) && !std::isfinite(r)) {
      match = true;  // {0, tiny} * inf: NaN and +-inf are both within the propagated error
      ratio = 0;
    } else if (std::isnan(x) || std::isnan(r)) {
      match = std::isnan(x) && std::isnan(r);
      ratio = match ? 0 : inf;
    } else if (tol.kind == Tolerance::Kind::kExact) {
      match = std::memcmp(a_ptr, e_ptr, esize) == 0;
      // Exact has no allowance: rank mismatches by |x - r| (inf for an inf against a finite).
      ratio = match ? 0 : std::fabs(x - r);
      if (!match && ratio == 0) ratio = std::numeric_limits<double>::min();  // -0 vs +0
    } else if (std::isinf(x) || std::isinf(r)) {
      match = x == r;
      ratio = match ? 0 : inf;
    } else {
      const double diff = std::fabs(x - r);
      double allowed = tol.kind == Tolerance::Kind::kAbsRel ? tol.atol + tol.rtol * std::fabs(r)
                                                            : tol.ulps * ulp_of(dtype, r);
      if (tol.scaled_by.defined() && std::isfinite(y) && y != 0) {
        allowed += std::fabs(y) * ulp_of(dtype, r / y);
      }
      match = diff <= allowed;
      ratio = allowed > 0 ? diff / allowed : (diff == 0 ? 0 : inf);
    }
    if (!match) ++result.mismatches;
    // The worst element: any mismatch beats any match, then the larger ratio.
    const bool worse = result.worst_index < 0 || (!match && !worst_mismatched) ||
                       (!match == worst_mismatched && ratio > result.worst_ratio);
    if (worse) {
      result.worst_index = i;
      result.worst_actual = x;
      result.worst_expected = r;
      result.worst_ratio = ratio;
      worst_mismatched = !match;
    }
  }
  if (result.worst_index < 0) {
    result.message = fmt::format("no elements to compare ({})", actual.describe());
    return result;
  }
  const std::string where =
      fmt::format("index {} {}: actual {:.9g}, expected {:.9g}, |diff| {:.3g}", result.worst_index,
                  multi_index(actual, result.worst_index), result.worst_actual,
                  result.worst_expected, std::fabs(result.worst_actual - result.worst_expected));
  if (result.mismatches == 0) {
    result.message = fmt::format("all {} elements within {}; closest to the limit at {}",
                                 result.count, tol.to_string(), where);
  } else {
    result.message = fmt::format(
        "{} of {} {} elements outside {}; worst at {} ({:.3g}x the allowance)", result.mismatches,
        result.count, dtype_name(dtype), tol.to_string(), where, result.worst_ratio);
  }
  return result;
}

CompareResult compare(const HostTensor& actual, const HostTensor& expected, Tolerance tol) {
  return compare(actual.tensor(), expected.tensor(), tol);
}

Tolerance tolerance_for(OpKind op, DType dtype) {
  const bool f32 = dtype == DType::kF32;
  switch (op) {
    case OpKind::kRmsNorm:
    case OpKind::kFusedAddRmsNorm: return f32 ? Tolerance::abs_rel(1e-5, 1e-5) : Tolerance::ulp(2);
    case OpKind::kRotaryEmbedding:
    case OpKind::kFatreluAndMul: return f32 ? Tolerance::abs_rel(1e-6, 4e-6) : Tolerance::ulp(1);
    case OpKind::kSiluAndMul:
    case OpKind::kMulAndSilu:
    case OpKind::kGeluAndMul:
    case OpKind::kGeluTanhAndMul:
    case OpKind::kSwigluoaiAndMul: return f32 ? Tolerance::abs_rel(1e-5, 4e-5) : Tolerance::ulp(1);
    default: return Tolerance::exact();
  }
}

}  // namespace jit::test
