// Reference rms_norm, fused_add_rms_norm, rotary_embedding and gated activations, written from
// spec/norm_act_cpu_ops.md §1, §2 and §5. Scalar, naive and deliberately explicit about every
// rounding step: this is the oracle the generated kernels are compared with.
//
// Precision decisions (the spec fixes the rounding sequence; where it leaves room, the ref
// takes the more accurate side so that backends are measured against the math, not against
// another approximation):
//   rms_norm        ss = Σ x² accumulated in double; inv = 1/sqrt(ss/H + eps) in double, then
//                   rounded once to fp32; y = rnd_T(rnd_T(x·inv) · w), both products in fp32
//                   (the GPU rounding sequence, equal to PyTorch's forward_native).
//   fused_add       the GPU variant: z = rnd_T(x + r) is stored to residual and normalised.
//   rotary          the classic kernel's T arithmetic: x' = rnd(rnd(x·c) − rnd(y·s)),
//                   y' = rnd(rnd(y·c) + rnd(x·s)), c and s read as fp32 and rounded to T; for
//                   f32 every rnd is the identity, i.e. plain fp32.
//   activations     act(f) evaluated in double from f = float(x), rounded correctly to T, then
//                   out = rnd_T(float(rnd_T(act)) · float(y)) (GPU/PyTorch eager sequence).
//                   fatrelu rounds once; swigluoai is evaluated in double and rounded once.
// This file is compiled with -ffp-contract=off (see CMakeLists.txt): a fused multiply-add
// would skip the rounding of a product that the sequences above require.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <vector>

#include "codegen/ref/ref_elements.h"
#include "codegen/ref/ref_families.h"
#include "ir/check_args.h"
#include "ir/numeric.h"
#include "ir/params_norm_act.h"

namespace jit::codegen::ref {
namespace {

// Rows of a [..., width] tensor: numel / width (0 for zero tokens).
int64_t row_count(const Tensor& t) {
  return t.numel() / t.size(-1);
}

// ---- rms_norm, fused_add_rms_norm ------------------------------------------------------------

// Normalises one row `x` (already widened to fp32) into `dst` (element stride 1):
//   inv = 1/sqrt(Σx²/H + eps)   in double, rounded once to fp32
//   y_i = rnd_T(rnd_T(x_i·inv) · w_i)   (y_i = rnd_T(x_i·inv) without weight)
// The products are fp32 products of fp32 operands, as on the GPU.
void normalize_row(DType dtype, const std::vector<float>& x, const std::byte* weight, float eps,
                   std::byte* dst) {
  const int64_t hidden = int64_t(x.size());
  double ss = 0;
  for (float v : x) ss += double(v) * double(v);
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / double(hidden) + double(eps)));
  for (int64_t i = 0; i < hidden; ++i) {
    float y = rnd(dtype, x[size_t(i)] * inv);
    if (weight != nullptr) y = y * load(dtype, weight, i);
    store(dtype, dst, i, y);
  }
}

// rms_norm(out, input, weight, eps): input rows at row_stride(input), out dense.
void rms_norm(const ir::NormParams& p, const KernelArgs& args) {
  const Tensor& out = args.tensor(0);
  const Tensor& input = args.tensor(1);
  const std::byte* weight = p.weight ? bytes(args.tensor(2)) : nullptr;
  // vLLM's kernels take epsilon as a float.
  const float eps = static_cast<float>(args.scalar(0));
  const int64_t rows = row_count(input);
  const int64_t src_stride = ir::row_stride(input);
  const size_t esize = dtype_size(p.dtype);
  std::vector<float> x(size_t(p.hidden));
  for (int64_t r = 0; r < rows; ++r) {
    const std::byte* src = bytes(input) + r * src_stride * int64_t(esize);
    for (int64_t i = 0; i < p.hidden; ++i) x[size_t(i)] = load(p.dtype, src, i);
    normalize_row(p.dtype, x, weight, eps, bytes(out) + r * p.hidden * int64_t(esize));
  }
}

// fused_add_rms_norm(input, residual, weight, eps), GPU rounding variant:
//   z_i = rnd_T(x_i + r_i) -> residual;  input <- rms_norm(z)
// Both tensors are row-strided (KILN: a strided residual is accepted).
void fused_add_rms_norm(const ir::NormParams& p, const KernelArgs& args) {
  const Tensor& input = args.tensor(0);
  const Tensor& residual = args.tensor(1);
  const std::byte* weight = p.weight ? bytes(args.tensor(2)) : nullptr;
  const float eps = static_cast<float>(args.scalar(0));
  const int64_t rows = row_count(input);
  const int64_t esize = int64_t(dtype_size(p.dtype));
  const int64_t input_stride = ir::row_stride(input) * esize;
  const int64_t residual_stride = ir::row_stride(residual) * esize;
  std::vector<float> z(size_t(p.hidden));
  for (int64_t r = 0; r < rows; ++r) {
    std::byte* x_row = bytes(input) + r * input_stride;
    std::byte* r_row = bytes(residual) + r * residual_stride;
    for (int64_t i = 0; i < p.hidden; ++i) {
      z[size_t(i)] = rnd(p.dtype, load(p.dtype, x_row, i) + load(p.dtype, r_row, i));
    }
    for (int64_t i = 0; i < p.hidden; ++i) store(p.dtype, r_row, i, z[size_t(i)]);
    normalize_row(p.dtype, z, weight, eps, x_row);
  }
}

// ---- rotary_embedding ------------------------------------------------------------------------

// Where the heads of one rotated operand (query or key) live, in elements.
struct RopeOperand {
  std::byte* data = nullptr;
  int64_t token_stride = 0;  // stride of the last positions dim (B and S merge)
  int64_t head_stride = 0;   // stride(-2) with an explicit head dim, else head_size
  int64_t heads = 0;
};

RopeOperand rope_operand(const Tensor& t, int lead, int64_t heads, int64_t head_size) {
  RopeOperand operand;
  operand.data = bytes(t);
  const ir::RopeStrides strides = ir::rope_strides(t, lead, head_size);
  operand.token_stride = strides.token;
  operand.head_stride = strides.head;
  operand.heads = heads;
  return operand;
}

// Rotates the first rot_dim elements of every head of one token; elements rot_dim..D-1 are not
// touched. Pairs: NeoX (h[j], h[E+j]), GPT-J (h[2j], h[2j+1]), E = rot_dim/2.
//   x' = rnd(rnd(x·c) − rnd(y·s)),  y' = rnd(rnd(y·c) + rnd(x·s))
void rotate_token(const ir::RopeParams& p, const RopeOperand& operand, int64_t token,
                  const std::vector<float>& cos, const std::vector<float>& sin) {
  const int64_t half = p.rot_dim / 2;
  const int64_t esize = int64_t(dtype_size(p.dtype));
  for (int64_t h = 0; h < operand.heads; ++h) {
    std::byte* head =
        operand.data + (token * operand.token_stride + h * operand.head_stride) * esize;
    for (int64_t j = 0; j < half; ++j) {
      const int64_t ix = p.style == ir::RopeStyle::kNeox ? j : 2 * j;
      const int64_t iy = p.style == ir::RopeStyle::kNeox ? half + j : 2 * j + 1;
      const float x = load(p.dtype, head, ix);
      const float y = load(p.dtype, head, iy);
      const float c = cos[size_t(j)];
      const float s = sin[size_t(j)];
      const float x_rot = rnd(p.dtype, rnd(p.dtype, x * c) - rnd(p.dtype, y * s));
      const float y_rot = rnd(p.dtype, rnd(p.dtype, y * c) + rnd(p.dtype, x * s));
      store(p.dtype, head, ix, x_rot);
      store(p.dtype, head, iy, y_rot);
    }
  }
}

// rotary_embedding(positions, query, key?, cos_sin_cache), in place.
Status rotary_embedding(const ir::RopeParams& p, const KernelArgs& args) {
  const Tensor& positions = args.tensor(0);
  const Tensor& cache = args.tensor(3);
  const int lead = positions.dim();
  const int64_t tokens = positions.numel();
  const auto* pos = positions.data_as<const int64_t>();
  // vLLM does not bound-check positions (the caller guarantees them); the oracle does, before
  // any write, rather than read outside the cache.
  KILN_RETURN_IF_ERROR(ir::check_rope_positions(positions, cache.size(0)));
  const RopeOperand query = rope_operand(args.tensor(1), lead, p.head_count_q, p.head_size);
  const RopeOperand key =
      p.key ? rope_operand(args.tensor(2), lead, p.head_count_kv, p.head_size) : RopeOperand{};
  const int64_t half = p.rot_dim / 2;
  std::vector<float> cos(static_cast<size_t>(half)), sin(static_cast<size_t>(half));
  for (int64_t t = 0; t < tokens; ++t) {
    // Cache row p = [cos_0 .. cos_{E-1}, sin_0 .. sin_{E-1}], read as fp32 and rounded to T
    // (the classic kernel computes with T operands; the cache dtype may differ from T).
    const std::byte* row = bytes(cache) + pos[t] * p.rot_dim * int64_t(dtype_size(p.cache_dtype));
    for (int64_t j = 0; j < half; ++j) {
      cos[size_t(j)] = rnd(p.dtype, load(p.cache_dtype, row, j));
      sin[size_t(j)] = rnd(p.dtype, load(p.cache_dtype, row, half + j));
    }
    rotate_token(p, query, t, cos, sin);
    if (p.key) rotate_token(p, key, t, cos, sin);
  }
  return Status::ok();
}

// ---- gated activations -----------------------------------------------------------------------

// The activations in double on f = float(v) (spec §2.4).
double silu(double f) {
  return f / (1.0 + std::exp(-f));
}

// 0.5 f (1 + erf(f/√2)) written as 0.5 f erfc(-f/√2): the same function, but 1 + erf
// cancels in double for f below about -8, where erfc keeps full relative accuracy.
double gelu_erf(double f) {
  return 0.5 * f * std::erfc(-f * std::numbers::sqrt2 / 2);
}

// 0.5 f (1 + tanh(u)), u = β (f + κ f³), β = √(2/π), κ = 0.044715 (PyTorch
// approximate='tanh'), written as f / (1 + e^(-2u)) (0.5 (1 + tanh u) is the logistic of 2u):
// 1 + tanh(u) cancels in double for f below about -6.
double gelu_tanh(double f) {
  const double beta = std::sqrt(2.0 / std::numbers::pi);
  const double kappa = 0.044715;
  return f / (1.0 + std::exp(-2.0 * beta * (f + kappa * f * f * f)));
}

// swigluoai on one (gate, up) pair; NaN in either propagates (KILN; std::fmin would drop it):
//   g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1)·g·sigmoid(alpha·g)
double swigluoai(double gate, double up, double alpha, double limit) {
  const double g = std::isnan(gate) ? gate : std::min(gate, limit);
  const double u = std::isnan(up) ? up : std::clamp(up, -limit, limit);
  return (u + 1.0) * g / (1.0 + std::exp(-alpha * g));
}

// out = act(x) ⊗ y with act rounded to T first: rnd_T(float(rnd_T(act)) · float(y)).
float gated(DType dtype, double act, float y) {
  return rnd(dtype, rnd_from_double(dtype, act) * y);
}

// Every *_and_mul: input rows [.., 2d], out rows [.., d], both contiguous.
void activation(OpKind op, const ir::ActivationParams& p, const KernelArgs& args) {
  const Tensor& out = args.tensor(0);
  const Tensor& input = args.tensor(1);
  const int64_t rows = row_count(input);
  const int64_t d = p.d;
  // The scalars are float parameters of the vLLM kernels.
  const float threshold = op == OpKind::kFatreluAndMul ? float(args.scalar(0)) : 0.0f;
  const float alpha = op == OpKind::kSwigluoaiAndMul ? float(args.scalar(0)) : 0.0f;
  const float limit = op == OpKind::kSwigluoaiAndMul ? float(args.scalar(1)) : 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const std::byte* src = bytes(input) + r * 2 * d * int64_t(dtype_size(p.dtype));
    std::byte* dst = bytes(out) + r * d * int64_t(dtype_size(p.dtype));
    for (int64_t i = 0; i < d; ++i) {
      float result = 0;
      if (op == OpKind::kSwigluoaiAndMul) {
        // Interleaved: gate = element 2i, up = element 2i+1; one rounding.
        const float gate = load(p.dtype, src, 2 * i);
        const float up = load(p.dtype, src, 2 * i + 1);
        result = rnd_from_double(p.dtype, swigluoai(gate, up, alpha, limit));
      } else {
        // Split: x = first half, y = second half.
        const float x = load(p.dtype, src, i);
        const float y = load(p.dtype, src, d + i);
        switch (op) {
          case OpKind::kSiluAndMul: result = gated(p.dtype, silu(x), y); break;
          case OpKind::kMulAndSilu: result = gated(p.dtype, silu(y), x); break;
          case OpKind::kGeluAndMul: result = gated(p.dtype, gelu_erf(x), y); break;
          case OpKind::kGeluTanhAndMul: result = gated(p.dtype, gelu_tanh(x), y); break;
          default:  // fatrelu: strict >, one rounding of the fp32 product.
            result = rnd(p.dtype, (x > threshold ? x : 0.0f) * y);
            break;
        }
      }
      store(p.dtype, dst, i, result);
    }
  }
}

}  // namespace

Status run_norm_act(const OpSpec& spec, const KernelArgs& args) {
  switch (spec.op) {
    case OpKind::kRmsNorm: rms_norm(spec.get<ir::NormParams>(), args); return Status::ok();
    case OpKind::kFusedAddRmsNorm:
      fused_add_rms_norm(spec.get<ir::NormParams>(), args);
      return Status::ok();
    case OpKind::kRotaryEmbedding: return rotary_embedding(spec.get<ir::RopeParams>(), args);
    case OpKind::kSiluAndMul:
    case OpKind::kMulAndSilu:
    case OpKind::kGeluAndMul:
    case OpKind::kGeluTanhAndMul:
    case OpKind::kFatreluAndMul:
    case OpKind::kSwigluoaiAndMul:
      activation(spec.op, spec.get<ir::ActivationParams>(), args);
      return Status::ok();
    default:
      return {StatusCode::kInternal,
              fmt::format("ref: {} is not in the norm/rope/activation family", op_name(spec.op))};
  }
}

}  // namespace jit::codegen::ref
