// The one comparison harness every backend test and `kiln check` use: owning host buffers with
// jit::Tensor views, seeded input generators, element-wise comparison with the tolerances of
// spec/testing.md, and the per-op tolerance table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/op_kind.h"
#include "ir/tensor.h"

namespace jit::test {

/// An owning host buffer plus the strided view of it that a kernel sees. Copies deep-copy the
/// storage and keep the same view (sizes, strides, offset); tensor() builds the view afresh,
/// so it always points at this object's storage. Elements are addressed by their
/// logical row-major flat index, whatever the strides. Supported dtypes: f32, f16, bf16 (values
/// rounded to nearest even on set), fp8 e4m3/e5m2 (RNE, saturating), i32, i64, i8, u8 (values
/// truncated toward zero on set).
class HostTensor {
 public:
  HostTensor() = default;

  /// A dense row-major tensor of `sizes`, zero-filled.
  static HostTensor zeros(DType dtype, std::vector<int64_t> sizes);
  /// A view with explicit `strides` (elements) starting `offset` elements into a zero-filled
  /// storage just large enough for it. The bytes not covered by the view are padding.
  static HostTensor strided(DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                            int64_t offset = 0);
  /// Rows of `sizes.back()` elements spaced `row_stride` apart (leading dims merged), e.g.
  /// row_strided(dt, {T, H}, 2 * H) is torch's randn(T, 2H)[..., :H].
  static HostTensor row_strided(DType dtype, std::vector<int64_t> sizes, int64_t row_stride);
  /// A dense tensor holding `values` (row-major; rounded to the dtype).
  static HostTensor from_values(DType dtype, std::vector<int64_t> sizes,
                                const std::vector<double>& values);

  /// The non-owning view for KernelArgs (valid while this HostTensor lives, unresized).
  Tensor tensor() const;
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t numel() const;

  /// Element at logical flat index `flat`, widened exactly to double (fp32 values exactly).
  double get(int64_t flat) const;
  /// Element as float (exact for f32/f16/bf16).
  float get_float(int64_t flat) const { return float(get(flat)); }
  /// Writes `value` rounded to the dtype (f16/bf16: from fp32 with RNE).
  void set(int64_t flat, double value);
  /// Writes the raw bits of element `flat` (its dtype's size, little-endian): an fp8 code, a
  /// NaN payload, what set() would round or saturate.
  void set_bits(int64_t flat, uint64_t bits);
  /// Every logical element in row-major order.
  std::vector<double> values() const;
  /// The whole storage, padding included (to prove that nothing was written).
  const std::vector<std::byte>& storage() const { return storage_; }
  /// Storage byte offset of logical element `flat`.
  int64_t byte_offset(int64_t flat) const;

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;
  std::vector<std::byte> storage_;  // malloc alignment (16 bytes on x86-64 and AArch64)
};

/// Logical flat index -> element offset (in elements) of a strided view.
int64_t element_offset(const Tensor& t, int64_t flat);
/// Element `flat` of any supported view, widened to double.
double load_element(const Tensor& t, int64_t flat);

// ---- generators (deterministic for a given seed, within one standard library) ------------------

/// Normal values N(mean, stddev), rounded to the dtype.
void fill_normal(HostTensor& t, uint64_t seed, double mean = 0.0, double stddev = 1.0);
/// Uniform integers in [lo, hi] (exact in every float dtype for |v| <= 256).
void fill_small_int(HostTensor& t, uint64_t seed, int lo = -4, int hi = 4);
/// Uniform reals in [lo, hi), rounded to the dtype.
void fill_uniform(HostTensor& t, uint64_t seed, double lo, double hi);
/// Every element equal to `value` (rounded to the dtype).
void fill_equal(HostTensor& t, double value);
/// About half the elements drawn from the dtype's special values (±0, ±inf, NaN, smallest and
/// largest subnormals, ±largest finite, huge magnitudes, ±1), the rest N(0, 1).
void fill_adversarial(HostTensor& t, uint64_t seed);
/// The special values fill_adversarial draws from, for `dtype` (f32/f16/bf16).
std::vector<double> adversarial_values(DType dtype);

// ---- comparison -------------------------------------------------------------------------------

/// How close `actual` must be to `expected`. NaN matches NaN (any payload) and an infinity
/// matches the same infinity under every kind.
struct Tolerance {
  enum class Kind : uint8_t {
    kExact,   ///< identical bit patterns (so -0 != +0)
    kAbsRel,  ///< |x - r| <= atol + rtol * |r|
    kUlp,     ///< |x - r| <= ulps * ulp_T(r), T = the tensors' dtype
  };
  Kind kind = Kind::kExact;
  double atol = 0;
  double rtol = 0;
  int ulps = 0;

  /// Error propagation for r = rnd_T(rnd_T(a) * y): the intermediate rnd_T(a) may differ by
  /// one ulp of T, and that difference is scaled by |y| before the final rounding. When set
  /// (kUlp only), element i is also allowed |y_i| * ulp_T(r_i / y_i), and where y_i is
  /// infinite a NaN may stand for an infinity and vice versa (0 * inf vs tiny * inf). `y` is a
  /// view with the output's logical shape.
  Tensor scaled_by;

  static Tolerance exact() { return {}; }
  static Tolerance abs_rel(double atol, double rtol) { return {Kind::kAbsRel, atol, rtol, 0, {}}; }
  static Tolerance ulp(int n) { return {Kind::kUlp, 0, 0, n, {}}; }
  /// ulp(n) plus the propagation allowance of an intermediate rounding scaled by `y`.
  static Tolerance ulp_scaled_by(int n, const Tensor& y) { return {Kind::kUlp, 0, 0, n, y}; }
  /// "exact", "atol 1e-05 rtol 4e-05", "2 ulp".
  std::string to_string() const;
};

/// Spacing of `dtype`'s values at |value|: 2^(e - mantissa_bits) for |value| in [2^e, 2^(e+1)),
/// the subnormal spacing below the smallest normal (so ulp(0) is the smallest subnormal).
/// Integer dtypes: 1.
double ulp_of(DType dtype, double value);

/// The outcome of compare(): counts, the worst element and a printable message.
struct CompareResult {
  int64_t count = 0;         ///< logical elements compared
  int64_t mismatches = 0;    ///< elements outside the tolerance
  int64_t worst_index = -1;  ///< flat index of the element furthest outside (or closest to) it
  double worst_actual = 0;
  double worst_expected = 0;
  /// |x - r| / allowed at the worst element (inf for a NaN/inf mismatch); <= 1 when it passes.
  double worst_ratio = 0;
  bool comparable = true;  ///< false when dtypes or shapes differ (nothing was compared)
  std::string message;     ///< one line: counts, tolerance, worst element with its multi-index
  bool ok() const { return comparable && mismatches == 0; }
};

/// Compares the logical elements of two views of the same dtype and shape (strides may differ;
/// padding is never read). A dtype or shape mismatch is reported as a failure with a message.
CompareResult compare(const Tensor& actual, const Tensor& expected, Tolerance tol);
CompareResult compare(const HostTensor& actual, const HostTensor& expected, Tolerance tol);

/// The tolerance of spec/testing.md for `op`'s output of `dtype` against the ref backend:
///   f32 rope, fatrelu (no transcendental)          atol 1e-6 rtol 4e-6
///   f32 rms_norm, fused_add_rms_norm              atol 1e-5 rtol 1e-5
///   f32 silu/mul_silu/gelu/gelu_tanh/swigluoai      atol 1e-5 rtol 4e-5
///   f16/bf16 activations and rope                  1 ulp
///   f16/bf16 rms_norm, fused_add_rms_norm          2 ulp
/// Norms are looser because inv = 1/sqrt(mean + eps) is rounded to fp32 and that error (plus
/// the fp32 sum-of-squares order of a vector kernel) then goes through two roundings,
/// rnd_T(rnd_T(x*inv)*w): a half-ulp difference in inv can flip the first rounding and the
/// flip is scaled by w before the second. Ops with no entry yet get exact(): a missing entry
/// fails loudly instead of passing silently.
Tolerance tolerance_for(OpKind op, DType dtype);

}  // namespace jit::test
