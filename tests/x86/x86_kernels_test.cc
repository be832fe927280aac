// The x86 generators against the ref backend: every op x dtype x ISA path, hidden sizes
// 1..65 (every tail of both vector widths, fp32 and 16-bit) and large ones, every input kind.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdio>
#include <thread>

#include "codegen/x86/x86_backend.h"
#include "runtime/runtime.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

using test::check_against_ref;
using test::InputKind;

const OpKind kOps[] = {OpKind::kRmsNorm,      OpKind::kFusedAddRmsNorm, OpKind::kSiluAndMul,
                       OpKind::kMulAndSilu,   OpKind::kGeluAndMul,      OpKind::kGeluTanhAndMul,
                       OpKind::kFatreluAndMul, OpKind::kSwigluoaiAndMul};
const DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

OpSpec spec_of(OpKind op, DType dtype, int64_t width, bool weight = true) {
  if (op == OpKind::kRmsNorm || op == OpKind::kFusedAddRmsNorm) {
    return OpSpec::make(op, ir::NormParams{dtype, width, weight});
  }
  return OpSpec::make(op, ir::ActivationParams{dtype, width});
}

// The ISA paths this machine can run: AVX2 always (when x86 is usable), AVX-512 and the
// AVX512_BF16 conversions when present. A path the host lacks is reported, not silently
// dropped.
std::vector<X86Isa> isa_paths() {
  std::vector<X86Isa> paths;
  const X86Isa host = detect_host_x86_isa();
  for (X86Isa isa : {X86Isa::kAvx2, X86Isa::kAvx512, X86Isa::kAvx512Bf16}) {
    if (host >= isa) {
      paths.push_back(isa);
    } else {
      std::printf("note: host has no %s: that x86 path is not run here\n",
                  std::string(x86_isa_name(isa)).c_str());
    }
  }
  return paths;
}

Runtime& test_runtime() {
  static Runtime runtime([] {
    RuntimeOptions options;  // no disk cache: these tests are about generated code
    return options;
  }());
  return runtime;
}

Kernel compile_x86(const OpSpec& spec, X86Isa isa, Config config = {}) {
  CompileOptions options;
  options.backend = BackendKind::kX86;
  options.isa = isa;
  options.config = config;
  auto kernel = test_runtime().compile(spec, options);
  EXPECT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  return kernel.value();
}

// Runs every input kind over `tokens` rows and reports the first failure of each.
void check_spec(const OpSpec& spec, X86Isa isa, int64_t tokens, Config config = {}) {
  const Kernel kernel = compile_x86(spec, isa, config);
  for (InputKind kind : test::input_kinds_for(spec.op)) {
    auto c = test::make_case(spec, tokens, kind, /*seed=*/uint64_t(tokens) * 131 + 7);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    const auto report = check_against_ref(kernel, c.value());
    EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa)
                           << " tokens=" << tokens << " inputs=" << test::input_kind_name(kind)
                           << "\n"
                           << report.message;
    if (!report.ok) return;  // one report per spec is enough to debug
  }
}

class X86OpTest : public ::testing::TestWithParam<std::tuple<OpKind, X86Isa>> {};

TEST_P(X86OpTest, MatchesRefForEveryTailAndDtype) {
  const auto [op, isa] = GetParam();
  for (DType dtype : kDtypes) {
    for (int64_t width = 1; width <= 65; ++width) check_spec(spec_of(op, dtype, width), isa, 3);
    for (int64_t width : {127, 1000, 4096, 5125}) check_spec(spec_of(op, dtype, width), isa, 2);
  }
}

TEST_P(X86OpTest, MultiThreadedRowsMatchRef) {
  const auto [op, isa] = GetParam();
  // min_parallel_kib=0 forces the parallel region even for this small call.
  const Config parallel = Config().set("threads", 2).set("min_parallel_kib", 0);
  for (DType dtype : kDtypes) check_spec(spec_of(op, dtype, 769), isa, 67, parallel);
}

TEST_P(X86OpTest, ZeroTokensIsANoOp) {
  const auto [op, isa] = GetParam();
  const OpSpec spec = spec_of(op, DType::kBF16, 64);
  const Kernel kernel = compile_x86(spec, isa);
  auto c = test::make_case(spec, 0, InputKind::kNormal, 1);
  ASSERT_TRUE(c.is_ok());
  EXPECT_TRUE(kernel.run(c->args()).is_ok());
}

std::string param_name(const ::testing::TestParamInfo<X86OpTest::ParamType>& info) {
  return std::string(op_name(std::get<0>(info.param))) + "_" +
         std::string(x86_isa_name(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(AllOps, X86OpTest,
                         ::testing::Combine(::testing::ValuesIn(kOps),
                                            ::testing::ValuesIn(isa_paths())),
                         param_name);

TEST(X86Norm, WeightlessMatchesRef) {
  for (X86Isa isa : isa_paths()) {
    for (DType dtype : kDtypes) {
      for (int64_t h : {1, 17, 4096}) {
        check_spec(spec_of(OpKind::kRmsNorm, dtype, h, /*weight=*/false), isa, 3);
        check_spec(spec_of(OpKind::kFusedAddRmsNorm, dtype, h, /*weight=*/false), isa, 3);
      }
    }
  }
}

TEST(X86Isa, HostReportsAtLeastAvx2) {
  EXPECT_GE(detect_host_x86_isa(), X86Isa::kAvx2) << "kiln's x86 backend needs AVX2+FMA+F16C";
}

// The instructions each path must use: zmm registers and k-masked tails on AVX-512, ymm and
// no EVEX on AVX2.
TEST(X86Instructions, EachIsaUsesItsRegisters) {
  for (X86Isa isa : isa_paths()) {
    const Kernel kernel = compile_x86(spec_of(OpKind::kSiluAndMul, DType::kBF16, 4101), isa);
    auto text = kernel.disassembly();
    ASSERT_TRUE(text.is_ok()) << text.status().to_string();
    const std::string& s = text.value();
    EXPECT_NE(s.find("vfmadd"), std::string::npos) << s;
    if (isa >= X86Isa::kAvx512Bf16) {
      EXPECT_NE(s.find("vcvtneps2bf16"), std::string::npos) << "hardware bf16 rounding";
      EXPECT_NE(s.find("vfpclassps"), std::string::npos) << "with its denormal guard";
    } else {
      EXPECT_EQ(s.find("vcvtneps2bf16"), std::string::npos) << "needs AVX512_BF16";
    }
    if (isa >= X86Isa::kAvx512) {
      EXPECT_NE(s.find("zmm"), std::string::npos);
      EXPECT_NE(s.find("{%k1}"), std::string::npos) << "AVX-512 tails are masked";
    } else {
      EXPECT_NE(s.find("ymm"), std::string::npos);
      EXPECT_EQ(s.find("zmm"), std::string::npos) << "AVX2 code must not use AVX-512";
      EXPECT_EQ(s.find("%k"), std::string::npos);
    }
  }
}

// Process replay: the generated bytes of a fixed spec list are pinned, so any change to the
// generated code is deliberate (update these and bump x86::kCodegenVersion together).
// Emission does not depend on the host, so every ISA is checked on every machine.
TEST(X86Golden, GeneratedCodeHashesArePinned) {
  struct Golden {
    const char* spec;
    X86Isa isa;
    uint64_t hash;
  };
  const Golden goldens[] = {
      {"rms_norm(dtype=bf16,hidden=4096,weight=true)", X86Isa::kAvx512, 0x6d0ef8f22f9a0733ull},
      {"rms_norm(dtype=bf16,hidden=4096,weight=true)", X86Isa::kAvx2, 0x7ddd6a8f4c895384ull},
      {"rms_norm(dtype=bf16,hidden=4096,weight=true)", X86Isa::kAvx512Bf16, 0x7f265076d02e3c6aull},
      {"silu_and_mul(dtype=bf16,d=4101)", X86Isa::kAvx512Bf16, 0x89b3d180db22c88bull},
      {"silu_and_mul(dtype=f16,d=13)", X86Isa::kAvx512, 0xa8112c3c6c1b1077ull},
      {"swigluoai_and_mul(dtype=f32,d=100)", X86Isa::kAvx2, 0xfe5c2faebb189798ull},
  };
  auto backend = codegen::x86::make_backend();
  for (const Golden& g : goldens) {
    const OpSpec spec = parse_spec(g.spec).value();
    Target target = host_target(BackendKind::kX86, g.isa);
    auto artifact = backend->lower(spec, Config{}, target);
    ASSERT_TRUE(artifact.is_ok());
    const uint64_t hash = XXH3_64bits(artifact->code.data(), artifact->code.size());
    EXPECT_EQ(hash, g.hash) << g.spec << " at " << x86_isa_name(g.isa)
                            << std::hex << ": got 0x" << hash;
  }
}

}  // namespace
}  // namespace jit
