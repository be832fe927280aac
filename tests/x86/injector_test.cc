// The math injectors of codegen/x86/generator.h on their own, against double-precision libm:
// a test-only generator maps each injector over a buffer, on every ISA path this host runs.
// Errors are measured in fp32 ulps of the exact result (subnormal spacing below FLT_MIN).
#define KILN_TEST_MAP_GENERATOR
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <vector>

#include "codegen/code_arena.h"
#include "tests/x86/x86_test_util.h"

namespace jit::codegen::x86 {
namespace {

enum class Fn { kExp, kTanh, kSigmoid, kSilu, kGeluErf, kGeluTanh };

// dst[v] = fn(src[v]) over whole vectors.
class MapGenerator : public test::VectorMapGenerator {
 public:
  MapGenerator(X86Isa isa, Fn fn, bool bf16_accuracy = false) : VectorMapGenerator(isa), fn_(fn) {
    set_bf16_accuracy(bf16_accuracy);
    generate();
  }

 protected:
  void apply() override {
    const Group x{vmm(0)}, t0{vmm(1)}, t1{vmm(2)}, t2{vmm(3)}, t3{vmm(4)}, t4{vmm(5)};
    switch (fn_) {
      case Fn::kExp: exp_ps(x, t0, t1); break;
      case Fn::kTanh: tanh_ps(x, t0, t1, t2, t3); break;
      case Fn::kSigmoid: sigmoid_ps(x, x, t0, t1, t2, t3); break;
      case Fn::kSilu: silu_ps(x, t0, t1, t2, t3, t4); break;
      case Fn::kGeluErf: gelu_erf_ps(x, t0, t1, t2, t3); break;
      case Fn::kGeluTanh: gelu_tanh_ps(x, t0, t1, t2, t3, t4); break;
    }
  }

 private:
  Fn fn_;
};

double exact(Fn fn, double x) {
  const double kBeta = std::sqrt(2.0 / M_PI);
  switch (fn) {
    case Fn::kExp: return std::exp(x);
    case Fn::kTanh: return std::tanh(x);
    case Fn::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Fn::kSilu: return x / (1.0 + std::exp(-x));
    case Fn::kGeluErf: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    case Fn::kGeluTanh:  // 0.5 x (1 + tanh u) = x / (1 + e^-2u), without cancellation
      return x / (1.0 + std::exp(-2.0 * kBeta * (x + 0.044715 * x * x * x)));
  }
  return 0;
}

// fp32 spacing at |r| (subnormal spacing below the smallest normal).
double ulp_f32(double r) {
  const double magnitude = std::max(std::fabs(r), double(std::numeric_limits<float>::min()));
  int exp;
  std::frexp(magnitude, &exp);
  return std::ldexp(1.0, exp - 24);
}

// Inputs: a dense sweep of [-lo, hi], the specials, and the boundaries of each branch.
std::vector<float> inputs(double lo, double hi) {
  std::vector<float> v;
  for (int i = 0; i <= 200000; ++i) v.push_back(float(lo + (hi - lo) * i / 200000.0));
  for (float s : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, -1e-40f, 0.625f, -0.625f, 88.72f, -87.33f,
                  -103.9f, 1e-7f, -1e-7f}) {
    v.push_back(s);
  }
  return v;
}

struct Outcome {
  double max_ulp = 0;  // over the core range
  float worst_input = 0;
  double max_rel = 0;  // over every normal result
  float worst_rel_input = 0;
  bool specials_ok = true;
  std::string special_failure;
};

Outcome run(X86Isa isa, Fn fn, std::vector<float> xs, double core_lo, double core_hi,
            bool bf16_accuracy = false) {
  MapGenerator gen(isa, fn, bf16_accuracy);
  auto code = gen.finish();
  EXPECT_TRUE(code.is_ok()) << code.status().to_string();
  auto address = CodeArena::global().add(code.value());
  EXPECT_TRUE(address.is_ok());
  const auto kernel = reinterpret_cast<KernelFn>(const_cast<void*>(address.value()));
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const size_t specials_at = xs.size();
  for (float s : {inf, -inf, nan}) xs.push_back(s);
  const size_t lanes = size_t(gen.vector_lanes());
  xs.resize((xs.size() + lanes - 1) / lanes * lanes, 0.0f);
  std::vector<float> ys(xs.size());
  const test::MapArgs args{xs.data(), ys.data()};
  kernel(&args, 0, int64_t(xs.size() / lanes));
  Outcome out;
  for (size_t i = 0; i < specials_at; ++i) {
    const double r = exact(fn, double(xs[i]));
    const float rounded = float(r);
    if (std::isinf(rounded)) {  // overflow: the fp32 result must be that infinity
      if (ys[i] != rounded) {
        out.specials_ok = false;
        out.special_failure =
            "x=" + std::to_string(xs[i]) + " overflows; got " + std::to_string(ys[i]);
      }
      continue;
    }
    const double err = std::fabs(double(ys[i]) - r);
    if (std::fabs(r) < double(std::numeric_limits<float>::min())) {
      // Subnormal results are gradual, not exact (an intermediate like e^x is subnormal
      // too): their absolute error stays below the smallest normal.
      if (!(err < double(std::numeric_limits<float>::min()))) {
        out.specials_ok = false;
        out.special_failure =
            "x=" + std::to_string(xs[i]) + " subnormal result off by " + std::to_string(err);
      }
      continue;
    }
    const double rel = err / std::fabs(r);
    if (!(rel <= out.max_rel)) {
      out.max_rel = rel;
      out.worst_rel_input = xs[i];
    }
    if (xs[i] < core_lo || xs[i] > core_hi) continue;
    const double ulps = err / ulp_f32(r);
    if (!(ulps <= out.max_ulp)) {
      out.max_ulp = ulps;  // NaN also lands here and fails the bound
      out.worst_input = xs[i];
    }
  }
  // inf, -inf, NaN: the limits of the exact functions, NaN where they have none.
  for (size_t i = specials_at; i < specials_at + 3; ++i) {
    const double r = exact(fn, double(xs[i]));
    const bool ok = std::isnan(r) ? std::isnan(ys[i]) : ys[i] == float(r);
    if (!ok) {
      out.specials_ok = false;
      out.special_failure = "x=" + std::to_string(xs[i]) + " got " + std::to_string(ys[i]) +
                            " expected " + std::to_string(r);
    }
  }
  return out;
}

std::vector<X86Isa> isa_paths() {
  return test::isa_paths({X86Isa::kAvx2, X86Isa::kAvx512});
}

struct Case {
  const char* name;
  Fn fn;
  double lo, hi;            // inputs swept
  double core_lo, core_hi;  // where the ulp bound applies
  double max_ulp;
  double max_rel;  // relative error bound over every normal result
};

// Bounds. exp: the Cephes polynomial (~1 ulp) and an exact scaling. The others compose exp
// with a reciprocal and a few roundings. Far out on the negative side, gelu's and silu's
// results come from an exp whose argument is ~ -85 (an fp32 argument of that size carries
// ~4e-6 absolute error) or is itself subnormal, so there only the relative bound applies;
// it stays below the fp32 contract tolerance (rtol 4e-5).
const Case kCases[] = {
    {"exp", Fn::kExp, -110, 90, -110, 90, 2, 3e-7},
    {"tanh", Fn::kTanh, -12, 12, -12, 12, 3, 4e-7},
    {"sigmoid", Fn::kSigmoid, -110, 110, -80, 110, 4, 1e-6},
    {"silu", Fn::kSilu, -110, 110, -80, 110, 4, 1e-5},
    {"gelu_erf", Fn::kGeluErf, -14, 14, -4, 14, 16, 2e-5},
    {"gelu_tanh", Fn::kGeluTanh, -12, 12, -4, 12, 24, 3e-5},  // 2u ~ -8 at x = -4
};

TEST(Injectors, AccurateOnEveryIsaPath) {
  for (X86Isa isa : isa_paths()) {
    for (const Case& c : kCases) {
      const Outcome o = run(isa, c.fn, inputs(c.lo, c.hi), c.core_lo, c.core_hi);
      std::printf("%-10s %-7s max %.2f ulp (x=%.7g) on [%g, %g]; max relative %.2g (x=%.7g)\n",
                  c.name, std::string(x86_isa_name(isa)).c_str(), o.max_ulp, o.worst_input,
                  c.core_lo, c.core_hi, o.max_rel, o.worst_rel_input);
      EXPECT_LE(o.max_ulp, c.max_ulp) << c.name << " on " << x86_isa_name(isa);
      EXPECT_LE(o.max_rel, c.max_rel) << c.name << " on " << x86_isa_name(isa);
      EXPECT_TRUE(o.specials_ok) << c.name << " on " << x86_isa_name(isa) << ": "
                                 << o.special_failure;
    }
  }
}

// At bf16 accuracy (generators whose output is bf16) the injectors trade fp32 accuracy for
// fewer instructions; their relative error must stay far below a bf16 half ulp (2^-9 = 2e-3)
// so that rounding to bf16 is off by at most one ulp, and the specials must be exact.
TEST(Injectors, Bf16AccuracyStaysFarBelowABf16Ulp) {
  constexpr double kMaxRel = 2.5e-4;  // 1/8 of a bf16 half ulp
  for (X86Isa isa : isa_paths()) {
    for (const Case& c : kCases) {
      const Outcome o = run(isa, c.fn, inputs(c.lo, c.hi), c.core_lo, c.core_hi, true);
      std::printf("bf16 accuracy %-10s %-7s max relative %.2g (x=%.7g)\n", c.name,
                  std::string(x86_isa_name(isa)).c_str(), o.max_rel, o.worst_rel_input);
      EXPECT_LE(o.max_rel, kMaxRel) << c.name << " on " << x86_isa_name(isa);
      EXPECT_TRUE(o.specials_ok) << c.name << " on " << x86_isa_name(isa) << ": "
                                 << o.special_failure;
    }
  }
}

}  // namespace
}  // namespace jit::codegen::x86
