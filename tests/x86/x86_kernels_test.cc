// The x86 generators against the ref backend: every op x dtype x ISA path, hidden sizes
// 1..65 (every tail of both vector widths, fp32 and 16-bit) and large ones, every input kind.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>

#include "codegen/x86/x86_backend.h"
#include "ir/numeric.h"
#include "runtime/runtime.h"
#include "tests/harness/example_specs.h"
#include "tests/harness/op_cases.h"
#include "tests/x86/x86_test_util.h"

namespace jit {
namespace {

using test::check_against_ref;
using test::InputKind;

const OpKind kOps[] = {OpKind::kRmsNorm,       OpKind::kFusedAddRmsNorm, OpKind::kSiluAndMul,
                       OpKind::kMulAndSilu,    OpKind::kGeluAndMul,      OpKind::kGeluTanhAndMul,
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
  return test::isa_paths();
}

using test::compile_x86;

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

// A knob nothing reads, or a negative value, is refused with what is allowed (not ignored).
TEST(X86Config, UnknownKnobOrNegativeValueIsRefused) {
  if (detect_host_x86_isa() < X86Isa::kAvx2) {
    GTEST_SKIP() << "the x86 backend needs AVX2; this host has "
                 << x86_isa_name(detect_host_x86_isa());
  }
  const OpSpec spec = OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kBF16, 64, true});
  CompileOptions options;
  options.backend = BackendKind::kX86;
  options.config = Config().set("unroll", 2);
  auto unknown = Runtime::global().compile(spec, options);
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("unknown knob 'unroll' for rms_norm; allowed: "
                                            "threads, min_parallel_kib"),
            std::string::npos)
      << unknown.status().message();
  options.config = Config().set("threads", -1);
  auto negative = Runtime::global().compile(spec, options);
  ASSERT_FALSE(negative.is_ok());
  EXPECT_NE(negative.status().message().find("threads=-1 is not allowed"), std::string::npos)
      << negative.status().message();
  options.config = Config().set("threads", int64_t(1) << 32);  // would wrap to 0 as an int
  EXPECT_FALSE(Runtime::global().compile(spec, options).is_ok());
  options.config = Config().set("threads", 1).set("min_parallel_kib", 0);
  EXPECT_TRUE(Runtime::global().compile(spec, options).is_ok());
  // The attention ops have their own knobs; a row op's is unknown there.
  ir::PagedAttentionParams pp;
  pp.dtype = DType::kBF16, pp.head_size = 128, pp.block_size = 16;
  pp.head_count_q = 8, pp.head_count_kv = 1;
  const OpSpec paged = OpSpec::make(OpKind::kPagedAttentionV1, pp);
  options.config = Config().set("min_parallel_kib", 64);
  auto attention = Runtime::global().compile(paged, options);
  ASSERT_FALSE(attention.is_ok());
  EXPECT_NE(attention.status().message().find(
                "unknown knob 'min_parallel_kib' for paged_attention_v1; allowed: threads, "
                "direct, chunk"),
            std::string::npos)
      << attention.status().message();
  options.config = Config().set("threads", 1);
  EXPECT_TRUE(Runtime::global().compile(paged, options).is_ok());
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

// Every bf16 value as the activated operand (the AVX512_BF16 pairs path evaluates silu in one
// form for both signs, clamps its exponent at 20 and rounds the activation with ties away;
// the other paths differ): x in the exp's underflow range, beyond the clamp, past exp's
// overflow, denormals, +-inf and NaN, times the case's normal values and times 1, -1.5 and
// 3e-38 (denormal products).
TEST(X86Activation, EveryBf16InputMatchesRef) {
  const int64_t d = 65536;
  for (OpKind op :
       {OpKind::kSiluAndMul, OpKind::kMulAndSilu, OpKind::kGeluAndMul, OpKind::kGeluTanhAndMul}) {
    const OpSpec spec = spec_of(op, DType::kBF16, d);
    const int64_t activated = op == OpKind::kMulAndSilu ? d : 0, other = d - activated;
    for (X86Isa isa : isa_paths()) {
      const Kernel kernel = compile_x86(spec, isa);
      for (double multiplier : {0.0, 1.0, -1.5, 3e-38}) {  // 0: keep the normal values
        auto c = test::make_case(spec, 1, InputKind::kNormal, 5);
        ASSERT_TRUE(c.is_ok());
        test::HostTensor& input = c->tensors[1];
        for (int64_t i = 0; i < d; ++i) {
          input.set(activated + i, std::bit_cast<float>(uint32_t(i) << 16));
          if (multiplier != 0.0) input.set(other + i, multiplier);
        }
        const auto report = check_against_ref(kernel, c.value());
        EXPECT_TRUE(report.ok) << to_string(spec) << " isa=" << x86_isa_name(isa)
                               << " multiplier=" << multiplier << "\n"
                               << report.message;
      }
    }
  }
}

// The level follows the features cumulatively: the CPUs kiln meets, and one lacking a
// feature in the middle (it stops below it).
TEST(X86Isa, LevelIsTheHighestWhoseFeaturesAreAllPresent) {
  X86Features haswell{.avx2 = true};
  X86Features skylake_x = haswell;
  skylake_x.avx512 = true;
  X86Features ice_lake = skylake_x;  // VBMI without AVX512_BF16
  ice_lake.avx512_vbmi = true;
  X86Features cooper_lake = skylake_x;
  cooper_lake.avx512_bf16 = true;
  X86Features zen4 = cooper_lake;  // VBMI without FP16
  zen4.avx512_vbmi = true;
  X86Features spr_vm = zen4;  // Sapphire Rapids with AMX hidden by the hypervisor
  spr_vm.avx512_fp16 = true;
  X86Features spr = spr_vm;
  spr.amx = true;
  X86Features amx_without_fp16 = zen4;
  amx_without_fp16.amx = true;
  EXPECT_EQ(x86_isa_of(X86Features{}), X86Isa::kNone);
  EXPECT_EQ(x86_isa_of(haswell), X86Isa::kAvx2);
  EXPECT_EQ(x86_isa_of(skylake_x), X86Isa::kAvx512);
  EXPECT_EQ(x86_isa_of(ice_lake), X86Isa::kAvx512);
  EXPECT_EQ(x86_isa_of(cooper_lake), X86Isa::kAvx512Bf16);
  EXPECT_EQ(x86_isa_of(zen4), X86Isa::kAvx512Vbmi);
  EXPECT_EQ(x86_isa_of(spr_vm), X86Isa::kAvx512Fp16);
  EXPECT_EQ(x86_isa_of(spr), X86Isa::kAmx);
  EXPECT_EQ(x86_isa_of(amx_without_fp16), X86Isa::kAvx512Vbmi);
  // Every level's name parses back to it, and the message list names them all in order.
  for (X86Isa isa : test::kX86Levels) {
    X86Isa parsed = X86Isa::kNone;
    EXPECT_TRUE(parse_x86_isa(x86_isa_name(isa), &parsed)) << x86_isa_name(isa);
    EXPECT_EQ(parsed, isa);
  }
  EXPECT_EQ(x86_isa_level_names(), "avx2, avx512, avx512_bf16, avx512_vbmi, avx512_fp16, amx");
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
      {"rms_norm(dtype=bf16,hidden=4096,weight=true)", X86Isa::kAvx512, 0x664ddda311edfc8cull},
      {"rms_norm(dtype=bf16,hidden=4096,weight=true)", X86Isa::kAvx2, 0x7a21f0c45f2b91f6ull},
      {"rms_norm(dtype=bf16,hidden=4096,weight=true)", X86Isa::kAvx512Bf16, 0xea9af889bd8f191bull},
      {"silu_and_mul(dtype=bf16,d=4101)", X86Isa::kAvx512Bf16, 0xc40e22278bc1b225ull},
      {"silu_and_mul(dtype=f16,d=13)", X86Isa::kAvx512, 0x1a0591fb4384df6bull},
      {"swigluoai_and_mul(dtype=f32,d=100)", X86Isa::kAvx2, 0xa35edfe25f35b0abull},
  };
  auto backend = codegen::x86::make_backend();
  for (const Golden& g : goldens) {
    const OpSpec spec = parse_spec(g.spec).value();
    // Not host_target: that caps the level at the host's, and an AVX2 host would hash its own
    // AVX2 code under the AVX-512 goldens.
    Target target;
    target.backend = BackendKind::kX86;
    target.isa = g.isa;
    auto artifact = backend->lower(spec, Config{}, target);
    ASSERT_TRUE(artifact.is_ok());
    const uint64_t hash = XXH3_64bits(artifact->code.data(), artifact->code.size());
    EXPECT_EQ(hash, g.hash) << g.spec << " at " << x86_isa_name(g.isa) << std::hex << ": got 0x"
                            << hash;
  }
}

// The guard behind the disk cache: a cached kernel is found by spec + kCodegenVersion, so any
// change to the generated code must bump the version, or a machine with an old cache entry
// keeps running the old code. The code of every valid example spec the x86 backend serves, at
// the three portable ISA levels, is hashed into one value pinned together with the version it
// was generated under: a different hash with the same version fails with "bump
// kCodegenVersion"; after the bump, re-pin with scripts/update_goldens.py.
struct PinnedCode {
  std::string_view version;
  uint64_t hash;
};
constexpr PinnedCode kAllExampleCode{"x86-145", 0x20177cb7eff9dbe4ull};

TEST(X86Golden, AnyCodeChangeBumpsTheCodegenVersion) {
  auto backend = codegen::x86::make_backend();
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  int64_t kernels = 0;
  for (const auto& [op, texts] : test::valid_examples()) {
    for (const std::string& text : texts) {
      const OpSpec spec = parse_spec(text).value();
      for (X86Isa isa : test::kX86Levels) {
        Target target;
        target.backend = BackendKind::kX86;
        target.isa = isa;
        if (!backend->supports(spec, target).ok) continue;
        auto artifact = backend->lower(spec, Config{}, target);
        ASSERT_TRUE(artifact.is_ok()) << text << ": " << artifact.status().to_string();
        XXH3_64bits_update(state, artifact->code.data(), artifact->code.size());
        ++kernels;
      }
    }
  }
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  ASSERT_GT(kernels, 100) << "the example specs should exercise most x86 generators";
  if (hash != kAllExampleCode.hash) {
    EXPECT_NE(codegen::x86::kCodegenVersion, kAllExampleCode.version)
        << "the generated code changed but kCodegenVersion is still " << kAllExampleCode.version
        << ": bump it (codegen/x86/x86_backend.h), then re-pin";
    ADD_FAILURE() << "ALL x86 example specs (version " << codegen::x86::kCodegenVersion
                  << "): got 0x" << std::hex << hash << " over " << std::dec << kernels
                  << " kernels; re-pin with scripts/update_goldens.py";
  }
}

}  // namespace
}  // namespace jit

namespace jit {
namespace {

// rotary_embedding: both pairings, full and partial rot_dim (incl. an odd number of pairs and
// more pairs than a vector), key present or absent, cache in T or in f32, every ISA path.
TEST(X86Rope, MatchesRefAcrossShapesAndStyles) {
  struct Shape {
    int64_t head_size, rot_dim;
  };
  const Shape shapes[] = {{8, 8}, {64, 64}, {80, 32}, {128, 128}, {96, 34}, {256, 64}, {40, 2}};
  for (X86Isa isa : isa_paths()) {
    for (DType dtype : kDtypes) {
      for (DType cache_dtype : {dtype, DType::kF32}) {
        for (ir::RopeStyle style : {ir::RopeStyle::kNeox, ir::RopeStyle::kGptj}) {
          for (const Shape& shape : shapes) {
            for (bool key : {true, false}) {
              ir::RopeParams p{dtype, cache_dtype, shape.head_size, shape.rot_dim,
                               style, 4,           key ? 2 : 0,     key};
              check_spec(OpSpec::make(OpKind::kRotaryEmbedding, p), isa, 3);
            }
          }
        }
      }
    }
  }
}

// bf16 norms read rows as bf16 pairs and round on the fp32 bits (rms_norm on every ISA,
// fused_add_rms_norm on AVX2); rows with inf/NaN (or eps = 0 with a zero row) take the
// per-vector path in pass 2, and steps whose products are fp32 denormals (or meet a NaN
// weight) round on the bits. Every such row must match ref.
TEST(X86Norm, Bf16PairsPathEdgeRowsMatchRef) {
  const int64_t hidden = 4096 + 48, tokens = 5;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (OpKind op : {OpKind::kRmsNorm, OpKind::kFusedAddRmsNorm}) {
    const bool fused = op == OpKind::kFusedAddRmsNorm;
    const OpSpec spec = OpSpec::make(op, ir::NormParams{DType::kBF16, hidden, true});
    for (X86Isa isa : isa_paths()) {
      const Kernel kernel = compile_x86(spec, isa);
      for (int weights = 0; weights < 2; ++weights) {
        auto c = test::make_case(spec, tokens, InputKind::kNormal, 21);
        ASSERT_TRUE(c.is_ok());
        test::HostTensor& x = c->tensors[fused ? 0 : 1];
        test::HostTensor& w = c->tensors[2];
        x.set(1 * hidden + 100, nan);           // row 1: NaN -> whole row NaN
        x.set(2 * hidden + 7, inf);             // row 2: inf -> inv = 0, inf * 0 = NaN
        for (int64_t i = 0; i < hidden; ++i) {  // row 3: zero row (z = x + r = 0 when fused)
          x.set(3 * hidden + i, 0.0);
          if (fused) c->tensors[1].set(3 * hidden + i, 0.0);
        }
        for (int64_t i = 64; i < 96; ++i) w.set(i, 1e-38 * double(i - 63));  // denormal products
        if (weights == 1) w.set(70, nan);  // a NaN weight in a step that also has denormals
        for (double eps : {1e-6, 0.0}) {   // eps = 0: the zero row gives inv = inf
          c->scalars[0] = eps;
          const auto report = check_against_ref(kernel, c.value());
          EXPECT_TRUE(report.ok) << op_name(op) << " " << x86_isa_name(isa)
                                 << " weights=" << weights << " eps=" << eps << "\n"
                                 << report.message;
        }
      }
    }
  }
}

// bf16 fused_add_rms_norm takes the pairs path at every level (AVX-512 too, since x86-125):
// its pass 1 rounds z = x + r on the bits, so it adds no widening load (vpmovzxwd) and no
// hardware bf16 conversion to the ones rms_norm's pass 2 has (its per-vector fallback for rows
// with inf/NaN). The per-vector pass 1 would add one of each per vector.
TEST(X86Norm, FusedBf16PassOneTakesThePairsPathAtEveryLevel) {
  const auto count = [](const std::string& text, std::string_view what) {
    int64_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  for (X86Isa isa : test::kX86Levels) {
    std::array<std::string, 2> text;
    for (int fused = 0; fused < 2; ++fused) {
      const OpSpec spec = OpSpec::make(fused ? OpKind::kFusedAddRmsNorm : OpKind::kRmsNorm,
                                       ir::NormParams{DType::kBF16, 4096, true});
      auto dis = compile_x86(spec, isa).disassembly();
      ASSERT_TRUE(dis.is_ok()) << dis.status().to_string();
      text[size_t(fused)] = dis.value();
    }
    for (std::string_view what : {"vpmovzxwd", "vcvtneps2bf16"}) {
      EXPECT_EQ(count(text[1], what), count(text[0], what)) << x86_isa_name(isa) << " " << what;
    }
  }
}

// fused_add_rms_norm's residual z = rnd_bf16(x + r) is exact (the pairs path rounds the fp32
// sum on its bits with integer adds): every bf16 pattern as x, against r = 0 (NaN payloads
// quietened), r = x (doubling: overflow to inf, denormals), r = a scrambled pattern (ties,
// cancellation, inf + -inf) and r = the smallest bf16 denormal (denormal sums exact in fp32
// and rounded to bf16; absorbed by normal x).
// NaN must stay NaN; every other result bit for bit.
TEST(X86Norm, FusedResidualIsExactForEveryBf16Input) {
  const int64_t hidden = 65536 + 40, tokens = 4;  // 40: the per-vector tail too
  const OpSpec spec =
      OpSpec::make(OpKind::kFusedAddRmsNorm, ir::NormParams{DType::kBF16, hidden, true});
  for (X86Isa isa : isa_paths()) {
    const Kernel kernel = compile_x86(spec, isa);
    auto c = test::make_case(spec, tokens, InputKind::kNormal, 3);
    ASSERT_TRUE(c.is_ok());
    test::HostTensor& x = c->tensors[0];
    test::HostTensor& r = c->tensors[1];
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = 0; i < hidden; ++i) {
        const uint16_t xb = uint16_t(i);  // the tail repeats the first 40 patterns
        const uint16_t rb = t == 0   ? uint16_t(0)
                            : t == 1 ? xb
                            : t == 2 ? uint16_t(uint32_t(i) * 40503u + 12345u)
                                     : uint16_t(1);
        x.set_bits(t * hidden + i, xb);
        r.set_bits(t * hidden + i, rb);
      }
    }
    std::vector<float> sums(size_t(tokens * hidden));
    for (int64_t i = 0; i < tokens * hidden; ++i) {
      sums[size_t(i)] = x.get_float(i) + r.get_float(i);
    }
    ASSERT_TRUE(kernel.run(c->args()).is_ok());
    int64_t wrong = 0;
    for (int64_t i = 0; i < tokens * hidden; ++i) {
      const float want = numeric::round_to_bf16(sums[size_t(i)]);
      const float got = r.get_float(i);
      const bool same = std::isnan(want)
                            ? std::isnan(got)
                            : std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want);
      if (!same && wrong++ < 5) {
        ADD_FAILURE() << x86_isa_name(isa) << " row " << i / hidden << " element " << i % hidden
                      << ": x + r = " << sums[size_t(i)] << ", residual " << got << ", want "
                      << want;
      }
    }
    EXPECT_EQ(wrong, 0) << x86_isa_name(isa);
  }
}

// Heads padded in memory ([T, NH, D + 64] sliced to D, as vLLM's test does) and a key whose
// head stride differs from the query's.
TEST(X86Rope, StridedHeadsMatchRef) {
  const int64_t tokens = 5, heads_q = 3, heads_kv = 1, d = 64;
  ir::RopeParams p{DType::kBF16, DType::kBF16, d, d, ir::RopeStyle::kNeox, heads_q, heads_kv, true};
  const OpSpec spec = OpSpec::make(OpKind::kRotaryEmbedding, p);
  for (X86Isa isa : isa_paths()) {
    const Kernel kernel = compile_x86(spec, isa);
    auto c = test::make_case(spec, tokens, InputKind::kNormal, 11);
    ASSERT_TRUE(c.is_ok());
    test::HostTensor q = test::HostTensor::strided(DType::kBF16, {tokens, heads_q, d},
                                                   {heads_q * (d + 64), d + 64, 1});
    test::HostTensor k = test::HostTensor::strided(DType::kBF16, {tokens, heads_kv, d},
                                                   {heads_kv * (d + 8), d + 8, 1});
    test::fill_normal(q, 3);
    test::fill_normal(k, 4);
    c->tensors[1] = q;
    c->tensors[2] = k;
    const auto report = check_against_ref(kernel, c.value());
    EXPECT_TRUE(report.ok) << x86_isa_name(isa) << "\n" << report.message;
  }
}

TEST(X86Rope, PositionOutsideTheCacheIsAnErrorAndWritesNothing) {
  ir::RopeParams p{DType::kF32, DType::kF32, 16, 16, ir::RopeStyle::kGptj, 2, 0, false};
  const OpSpec spec = OpSpec::make(OpKind::kRotaryEmbedding, p);
  const Kernel kernel = compile_x86(spec, isa_paths().back());
  auto c = test::make_case(spec, 4, InputKind::kNormal, 5);
  ASSERT_TRUE(c.is_ok());
  c->tensors[0].set(2, 64);  // the case's cache has 64 rows
  const auto before = c->tensors[1].storage();
  const Status status = kernel.run(c->args());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("positions"), std::string::npos) << status.message();
  EXPECT_EQ(c->tensors[1].storage(), before);
}

}  // namespace
}  // namespace jit
