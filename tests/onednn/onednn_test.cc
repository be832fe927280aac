// The onednn backend against the ref backend (spec/norm_act_cpu_ops.md §4, spec/testing.md):
// onednn_mm f32/bf16 exact on small integers and within the tolerance table otherwise,
// onednn_scaled_mm in every quantisation scheme, M from 1 past the largest bucket, handlers
// made by either backend, the per-M primitive cache under vLLM's M sequences, oneDNN's chosen
// implementations (no slow fallback), and bad input through jit::ops and KernelArgs.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <thread>

#include "codegen/onednn/onednn_backend.h"
#include "codegen/onednn/small_m.h"
#include "codegen/ref/ref.h"
#include "ir/params_cpu.h"
#include "runtime/ops.h"
#include "runtime/runtime.h"
#include "tests/harness/harness.h"
#include "tests/harness/op_cases.h"

namespace jit {
namespace {

using test::HostTensor;
using test::InputKind;
using test::Tolerance;

Runtime& test_runtime() {
  static Runtime runtime{RuntimeOptions{}};
  return runtime;
}

const Backend& onednn_backend() {
  for (const Backend* b : test_runtime().backends()) {
    if (b->kind() == BackendKind::kOnednn) return *b;
  }
  ADD_FAILURE() << "the runtime has no onednn backend";
  std::abort();
}

Kernel compile_onednn(const OpSpec& spec) {
  CompileOptions options;
  options.backend = BackendKind::kOnednn;
  auto kernel = test_runtime().compile(spec, options);
  EXPECT_TRUE(kernel.is_ok()) << to_string(spec) << ": " << kernel.status().to_string();
  return kernel.value();
}

OpSpec mm_spec(OpKind op, DType dtype, int64_t k, int64_t n) {
  return OpSpec::make(op, ir::GemmParams{dtype, k, n});
}
OpSpec scaled_spec(OpKind op, DType out, int64_t k, int64_t n, bool dynamic, bool azp,
                   bool per_channel) {
  return OpSpec::make(op, ir::ScaledGemmParams{out, k, n, dynamic, azp, per_channel});
}

// Every input kind of the op over `rows`, compared with ref by the shared harness.
void check_spec(const OpSpec& spec, int64_t rows) {
  const Kernel kernel = compile_onednn(spec);
  for (InputKind kind : test::input_kinds_for(spec.op)) {
    auto c = test::make_case(spec, rows, kind, uint64_t(rows) * 7 + 3);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    const test::CaseReport report = test::check_against_ref(kernel, c.value());
    EXPECT_TRUE(report.ok) << to_string(spec) << " M=" << rows
                           << " inputs=" << test::input_kind_name(kind) << "\n"
                           << report.message;
  }
}

// ---- against ref -------------------------------------------------------------------------------

TEST(OnednnBuckets, CoverEveryMWithLittleWaste) {
  int64_t buckets = 0, last = 0;
  for (int64_t m = 1; m <= codegen::onednn::kMaxBucketRows; ++m) {
    const int64_t b = codegen::onednn::m_bucket(m);
    ASSERT_GE(b, m);
    ASSERT_LT(double(b), 1.25 * double(m) + 1) << m;  // under 20% of the rows are padding
    ASSERT_LE(b, codegen::onednn::kMaxBucketRows);
    if (b != last) ++buckets;
    last = b;
  }
  EXPECT_EQ(codegen::onednn::m_bucket(4096), 4096);
  EXPECT_EQ(buckets, 44);  // 1..8, then four per octave up to 4096
}

TEST(OnednnCreate, HandlerBytesEqualRef) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    check_spec(mm_spec(OpKind::kCreateOnednnMm, dt, 15, 33), 1);
  for (bool per_channel : {false, true}) {
    check_spec(
        scaled_spec(OpKind::kCreateOnednnScaledMm, DType::kBF16, 40, 9, true, true, per_channel),
        1);
  }
}

TEST(OnednnMm, MatchesRefOverShapesAndRows) {
  const std::pair<int64_t, int64_t> shapes[] = {{128, 256}, {15, 33}, {491, 1023}, {64, 17}};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto [k, n] : shapes) {
      for (int64_t m : {1, 2, 3, 7, 9, 16, 17, 31, 64, 129}) {
        check_spec(mm_spec(OpKind::kOnednnMm, dt, k, n), m);
      }
    }
  }
}

TEST(OnednnMm, LargeWeightDecodeRows) {
  for (int64_t m : {1, 4}) check_spec(mm_spec(OpKind::kOnednnMm, DType::kBF16, 4096, 4096), m);
}

TEST(OnednnMm, RowsBeyondTheLargestBucketRunInChunks) {
  // 4096 + 37 rows: one full chunk and a padded one.
  check_spec(mm_spec(OpKind::kOnednnMm, DType::kBF16, 32, 48),
             codegen::onednn::kMaxBucketRows + 37);
}

TEST(OnednnScaledMm, EveryQuantisationSchemeMatchesRef) {
  for (DType out : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool dynamic : {false, true}) {
      for (bool azp : {false, true}) {
        for (bool per_channel : {false, true}) {
          for (int64_t m : {1, 5, 16, 33}) {
            check_spec(scaled_spec(OpKind::kOnednnScaledMm, out, 40, 72, dynamic, azp, per_channel),
                       m);
          }
        }
      }
    }
  }
  // vLLM's odd shapes.
  check_spec(scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, 491, 1023, true, true, true), 17);
  check_spec(scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, 15, 1001, false, true, false), 3);
}

TEST(OnednnScaledMm, RowsBeyondTheLargestBucketRunInChunks) {
  check_spec(scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, 32, 48, true, true, true),
             codegen::onednn::kMaxBucketRows + 5);
}

// Every chunk_rows config of the tuning space gives ref's results for a call of several
// chunks; a config outside the space is refused at load.
TEST(OnednnConfig, EveryChunkSizeMatchesRef) {
  const OpSpec specs[] = {
      mm_spec(OpKind::kOnednnMm, DType::kBF16, 24, 40),
      scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, 24, 40, true, true, true)};
  for (const OpSpec& spec : specs) {
    const std::vector<Config> space =
        onednn_backend().configs(spec, host_target(BackendKind::kOnednn));
    // Every chunk size, plus the other small_m (0: always oneDNN, or the kernel's measured
    // bound where the host's default is 0) where the small-M kernel runs here.
    const DType weight =
        spec.op == OpKind::kOnednnMm ? spec.get<ir::GemmParams>().dtype : DType::kI8;
    const bool small =
        codegen::onednn::small_m::variant_for(weight, host_target(BackendKind::kOnednn).isa) !=
        codegen::onednn::small_m::Variant::kNone;
    ASSERT_EQ(space.size(), std::size(codegen::onednn::kChunkRowChoices) + (small ? 1 : 0));
    if (small) EXPECT_NE(space.front().get("small_m", -1), space.back().get("small_m", -1));
    for (const Config& config : space) {
      CompileOptions options;
      options.backend = BackendKind::kOnednn;
      options.config = config;
      auto kernel = test_runtime().compile(spec, options);
      ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
      auto c = test::make_case(spec, 300, InputKind::kSmallInt, 17);
      ASSERT_TRUE(c.is_ok());
      const test::CaseReport report = test::check_against_ref(kernel.value(), c.value());
      EXPECT_TRUE(report.ok) << config.to_string() << ": " << report.message;
    }
  }
  CompileOptions options;
  options.backend = BackendKind::kOnednn;
  options.config = Config().set("chunk_rows", 100);
  auto bad = test_runtime().compile(specs[0], options);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("chunk_rows=100"), std::string::npos)
      << bad.status().message();
  // A knob the backend does not read is refused, naming the ones it does.
  options.config = Config().set("threads", 2);
  auto unknown = test_runtime().compile(specs[0], options);
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(
      unknown.status().message().find(
          "onednn config: unknown knob 'threads' for onednn_mm; allowed: chunk_rows, small_m"),
      std::string::npos)
      << unknown.status().message();
  // The handler constructors read no knob.
  options.config = Config().set("chunk_rows", 512);
  auto create =
      test_runtime().compile(mm_spec(OpKind::kCreateOnednnMm, DType::kBF16, 24, 40), options);
  ASSERT_FALSE(create.is_ok());
  EXPECT_NE(create.status().message().find("unknown knob 'chunk_rows' for create_onednn_mm; "
                                           "allowed: none"),
            std::string::npos)
      << create.status().message();
}

// ---- kiln's small-M kernel (codegen/onednn/small_m.h) ------------------------------------------

Kernel compile_onednn_with(const OpSpec& spec, const Config& config) {
  CompileOptions options;
  options.backend = BackendKind::kOnednn;
  options.config = config;
  auto kernel = test_runtime().compile(spec, options);
  EXPECT_TRUE(kernel.is_ok()) << to_string(spec) << ": " << kernel.status().to_string();
  return kernel.value();
}

// The small-M kernel variant this host runs for `dtype` (AVX-512 or AVX2; kNone: none).
codegen::onednn::small_m::Variant small_m_variant(DType dtype) {
  return codegen::onednn::small_m::variant_for(dtype, host_target(BackendKind::kOnednn).isa);
}
bool small_m_runs_here(DType dtype) {
  return small_m_variant(dtype) != codegen::onednn::small_m::Variant::kNone;
}

// Every input kind with and without bias, through a kernel whose small_m bound is the largest
// (16), so every M = 1 … 16 runs kiln's kernel; checks the calls went that way.
void check_small_m(const OpSpec& spec, int64_t rows) {
  const Kernel kernel =
      compile_onednn_with(spec, Config().set("chunk_rows", 512).set("small_m", 16));
  const int bias_index = spec.op == OpKind::kOnednnMm ? 2 : 5;
  for (InputKind kind : test::input_kinds_for(spec.op)) {
    for (bool with_bias : {true, false}) {
      auto c = test::make_case(spec, rows, kind, uint64_t(rows) * 13 + 5);
      ASSERT_TRUE(c.is_ok()) << c.status().to_string();
      if (!with_bias) c.value().present[size_t(bias_index)] = false;
      const int64_t before = codegen::onednn::stats(onednn_backend()).small_m_calls;
      const test::CaseReport report = test::check_against_ref(kernel, c.value());
      EXPECT_TRUE(report.ok) << to_string(spec) << " M=" << rows << " bias=" << with_bias
                             << " inputs=" << test::input_kind_name(kind) << "\n"
                             << report.message;
      EXPECT_GT(codegen::onednn::stats(onednn_backend()).small_m_calls, before)
          << "M=" << rows << " did not run the small-M kernel";
    }
  }
}

TEST(OnednnSmallM, MmMatchesRefForEveryMUpTo16) {
  // Odd K (tails of every length in the 64-byte step) and odd N (blocks of 8 / 4 plus a rest).
  const std::pair<int64_t, int64_t> shapes[] = {{15, 33}, {491, 1023}, {64, 17}, {1, 7}, {97, 5}};
  int dtypes_run = 0;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    if (!small_m_runs_here(dt)) {
      std::printf(
          "note: this CPU has no AVX2 + FMA: the small-M kernel does not run for %s here "
          "(oneDNN serves every M; OnednnMm covers it)\n",
          std::string(dtype_name(dt)).c_str());
      continue;
    }
    std::printf("note: the small-M kernel's %s variant runs for %s here\n",
                codegen::onednn::small_m::variant_name(small_m_variant(dt)),
                std::string(dtype_name(dt)).c_str());
    ++dtypes_run;
    for (auto [k, n] : shapes) {
      for (int64_t m = 1; m <= 16; ++m) check_small_m(mm_spec(OpKind::kOnednnMm, dt, k, n), m);
    }
  }
  if (dtypes_run == 0) GTEST_SKIP() << "the small-M kernel runs for no dtype on this CPU";
}

TEST(OnednnSmallM, ScaledMmMatchesRefInEveryScheme) {
  if (!small_m_runs_here(DType::kI8)) {
    GTEST_SKIP() << "this CPU has no AVX2 + FMA: the int8 small-M kernel does not run here "
                    "(oneDNN serves every M; OnednnScaledMm covers it)";
  }
  std::printf("note: the small-M kernel's %s variant runs for int8 here\n",
              codegen::onednn::small_m::variant_name(small_m_variant(DType::kI8)));
  for (DType out : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool dynamic : {false, true}) {
      for (bool azp : {false, true}) {
        for (bool per_channel : {false, true}) {
          for (int64_t m : {1, 2, 3, 4, 5, 8, 16}) {
            check_small_m(
                scaled_spec(OpKind::kOnednnScaledMm, out, 131, 37, dynamic, azp, per_channel), m);
          }
        }
      }
    }
  }
  for (int64_t m = 1; m <= 16; ++m) {
    check_small_m(scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, 491, 1023, true, true, true),
                  m);
  }
}

// The int8 sums are exact at the extremes on both paths: kiln's small-M kernel (the u8 shift
// a + 128 and its correction with the column sums) and oneDNN's (without VNNI, the weight's
// hi / lo split that keeps vpmaddubsw's int16 pairs from saturating): a and b mostly 127 with
// some −128, so neighbouring pairs (a + 128)·b + (a' + 128)·b' reach 2·255·127 (|Σ a·b| up to
// 2^26 at K = 4096).
TEST(OnednnSmallM, Int8ExtremesAreExact) {
  std::vector<int64_t> small_m_bounds = {0};  // 0: every M through oneDNN
  if (small_m_runs_here(DType::kI8)) {
    small_m_bounds.push_back(8);
  } else {
    std::printf("note: this CPU has no AVX2 + FMA: only oneDNN's int8 path is checked here\n");
  }
  const int64_t k = 4096, n = 24;
  const OpSpec create =
      scaled_spec(OpKind::kCreateOnednnScaledMm, DType::kF32, k, n, false, false, false);
  OpSpec mm = create;
  mm.op = OpKind::kOnednnScaledMm;
  HostTensor b = HostTensor::strided(DType::kI8, {k, n}, {1, k});
  for (int64_t i = 0; i < b.numel(); ++i) b.set(i, (i % 3 == 0) ? -128.0 : 127.0);
  HostTensor scales = HostTensor::zeros(DType::kF32, {1, 1});
  scales.set(0, 1.0);
  HostTensor handler = HostTensor::zeros(DType::kU8, {codegen::ref::onednn_handler_bytes(create)});
  ASSERT_TRUE(
      codegen::ref::run(create, KernelArgs({handler.tensor(), b.tensor(), scales.tensor()}, {8.0}))
          .is_ok());
  for (int64_t m : {1, 3}) {
    HostTensor a = HostTensor::zeros(DType::kI8, {m, k});
    for (int64_t i = 0; i < a.numel(); ++i) a.set(i, i % 5 == 0 ? -128.0 : 127.0);
    HostTensor a_scales = HostTensor::zeros(DType::kF32, {1, 1});
    a_scales.set(0, 1.0);
    HostTensor want = HostTensor::zeros(DType::kF32, {m, n}), got = want;
    auto args = [&](HostTensor& c) {
      return KernelArgs({c.tensor(), a.tensor(), a_scales.tensor(), Tensor(), Tensor(), Tensor(),
                         handler.tensor()});
    };
    ASSERT_TRUE(codegen::ref::run(mm, args(want)).is_ok());
    for (int64_t bound : small_m_bounds) {
      const Kernel kernel =
          compile_onednn_with(mm, Config().set("chunk_rows", 512).set("small_m", bound));
      ASSERT_TRUE(kernel.run(args(got)).is_ok());
      for (int64_t i = 0; i < want.numel(); ++i) {
        ASSERT_EQ(got.get(i), want.get(i)) << "M=" << m << " small_m=" << bound << " at " << i;
      }
    }
  }
}

// The default bound sends M <= bound to kiln's kernel and larger M to oneDNN; small_m = 0
// sends everything to oneDNN; a bound above 16 is refused.
TEST(OnednnSmallM, DefaultBoundPicksThePath) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const OpSpec spec = mm_spec(OpKind::kOnednnMm, dt, 64, 40);
    const int64_t bound = codegen::onednn::small_m::default_max_rows(dt, small_m_variant(dt));
    const Kernel kernel = compile_onednn(spec);
    for (int64_t m : {int64_t(1), bound, bound + 1}) {
      if (m < 1) continue;
      auto c = test::make_case(spec, m, InputKind::kSmallInt, 3);
      ASSERT_TRUE(c.is_ok());
      const auto before = codegen::onednn::stats(onednn_backend());
      EXPECT_TRUE(test::check_against_ref(kernel, c.value()).ok);
      const auto after = codegen::onednn::stats(onednn_backend());
      if (m <= bound) {
        EXPECT_EQ(after.small_m_calls, before.small_m_calls + 1) << dtype_name(dt) << " M=" << m;
      } else {
        EXPECT_EQ(after.onednn_calls, before.onednn_calls + 1) << dtype_name(dt) << " M=" << m;
      }
    }
    const Kernel off = compile_onednn_with(spec, Config().set("chunk_rows", 512).set("small_m", 0));
    auto c = test::make_case(spec, 1, InputKind::kSmallInt, 3);
    ASSERT_TRUE(c.is_ok());
    const auto before = codegen::onednn::stats(onednn_backend());
    EXPECT_TRUE(test::check_against_ref(off, c.value()).ok);
    EXPECT_EQ(codegen::onednn::stats(onednn_backend()).onednn_calls, before.onednn_calls + 1);
  }
  CompileOptions options;
  options.backend = BackendKind::kOnednn;
  options.config = Config().set("chunk_rows", 512).set("small_m", 17);
  auto bad = test_runtime().compile(mm_spec(OpKind::kOnednnMm, DType::kF32, 64, 40), options);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("small_m=17"), std::string::npos) << bad.status().message();
}

// ---- handlers ----------------------------------------------------------------------------------

// b [K, N] column-major of small integers, its ref handler, and `rows` rows of a.
struct MmCase {
  OpSpec create, mm;
  HostTensor b, handler, a, c, bias;
};
MmCase small_int_mm(DType dt, int64_t k, int64_t n, int64_t rows, uint64_t seed) {
  MmCase x;
  x.create = mm_spec(OpKind::kCreateOnednnMm, dt, k, n);
  x.mm = mm_spec(OpKind::kOnednnMm, dt, k, n);
  x.b = HostTensor::strided(dt, {k, n}, {1, k});
  test::fill_small_int(x.b, seed);
  x.handler = HostTensor::zeros(DType::kU8, {codegen::ref::onednn_handler_bytes(x.create)});
  x.a = HostTensor::zeros(dt, {rows, k});
  test::fill_small_int(x.a, seed + 1);
  x.c = HostTensor::zeros(dt, {rows, n});
  x.bias = HostTensor::zeros(dt, {n});
  test::fill_small_int(x.bias, seed + 2);
  return x;
}

HostTensor ref_result(MmCase& x) {
  HostTensor handler = HostTensor::zeros(DType::kU8, x.handler.sizes());
  EXPECT_TRUE(
      codegen::ref::run(x.create, KernelArgs({handler.tensor(), x.b.tensor()}, {8.0})).is_ok());
  HostTensor c = x.c;
  EXPECT_TRUE(codegen::ref::run(
                  x.mm, KernelArgs({c.tensor(), x.a.tensor(), x.bias.tensor(), handler.tensor()}))
                  .is_ok());
  return c;
}

TEST(OnednnHandler, InterchangeableWithRefHandlers) {
  MmCase x = small_int_mm(DType::kBF16, 64, 80, 5, 11);
  const HostTensor expected = ref_result(x);
  // onednn create -> ref mm.
  ASSERT_TRUE(
      compile_onednn(x.create).run(KernelArgs({x.handler.tensor(), x.b.tensor()}, {8.0})).is_ok());
  HostTensor c_ref = x.c;
  ASSERT_TRUE(codegen::ref::run(x.mm, KernelArgs({c_ref.tensor(), x.a.tensor(), x.bias.tensor(),
                                                  x.handler.tensor()}))
                  .is_ok());
  EXPECT_TRUE(test::compare(c_ref, expected, Tolerance::exact()).ok());
  // ref create -> onednn mm (packed on first use; small_m = 0: the oneDNN path, which packs,
  // whatever the small-M kernel's bound on this host).
  HostTensor handler = HostTensor::zeros(DType::kU8, x.handler.sizes());
  ASSERT_TRUE(
      codegen::ref::run(x.create, KernelArgs({handler.tensor(), x.b.tensor()}, {8.0})).is_ok());
  const int64_t lazy_before = codegen::onednn::stats(onednn_backend()).lazy_packs;
  HostTensor c = x.c;
  ASSERT_TRUE(compile_onednn_with(x.mm, Config().set("chunk_rows", 512).set("small_m", 0))
                  .run(KernelArgs({c.tensor(), x.a.tensor(), x.bias.tensor(), handler.tensor()}))
                  .is_ok());
  EXPECT_EQ(codegen::onednn::stats(onednn_backend()).lazy_packs, lazy_before + 1);
  const auto r = test::compare(c, expected, Tolerance::exact());
  EXPECT_TRUE(r.ok()) << r.message;
}

TEST(OnednnHandler, ANewHandlerAtTheSameAddressIsRepacked) {
  // Two weights written in turn into one handler buffer: the second must not reuse the packed
  // copy of the first (the fingerprint differs).
  MmCase x = small_int_mm(DType::kF32, 48, 40, 3, 21);
  MmCase y = small_int_mm(DType::kF32, 48, 40, 3, 99);
  const Kernel create = compile_onednn(x.create), mm = compile_onednn(x.mm);
  for (MmCase* w : {&x, &y}) {
    // create via ref into x's buffer (the onednn backend does not see the rewrite).
    ASSERT_TRUE(codegen::ref::run(x.create, KernelArgs({x.handler.tensor(), w->b.tensor()}, {8.0}))
                    .is_ok());
    HostTensor c = x.c;
    ASSERT_TRUE(mm.run(KernelArgs({c.tensor(), x.a.tensor(), x.bias.tensor(), x.handler.tensor()}))
                    .is_ok());
    MmCase probe = *w;
    probe.a = x.a;
    probe.bias = x.bias;
    const auto r = test::compare(c, ref_result(probe), Tolerance::exact());
    EXPECT_TRUE(r.ok()) << r.message;
  }
  (void)create;
}

// vLLM's test_onednn.py M sequences on one handler with a primitive cache of 2 (eviction and
// re-creation), through jit::ops.
TEST(OnednnOps, VllmMSequencesOnOneHandler) {
  for (const std::vector<int64_t>& seq :
       {std::vector<int64_t>{16, 1, 32, 128, 64}, std::vector<int64_t>{1, 17, 1, 31, 17}}) {
    MmCase x = small_int_mm(DType::kBF16, 128, 256, 1, 5);
    const int64_t handler = ops::create_onednn_mm(x.b.tensor(), 2);
    for (int64_t m : seq) {
      MmCase y = small_int_mm(DType::kBF16, 128, 256, m, 5);
      for (bool with_bias : {true, false}) {
        if (!with_bias) y.bias = HostTensor();
        HostTensor c = y.c;
        ops::onednn_mm(c.tensor(), y.a.tensor(), with_bias ? y.bias.tensor() : Tensor(), handler);
        HostTensor expected = y.c;
        HostTensor ref_handler = HostTensor::zeros(DType::kU8, x.handler.sizes());
        ASSERT_TRUE(
            codegen::ref::run(y.create, KernelArgs({ref_handler.tensor(), y.b.tensor()}, {2.0}))
                .is_ok());
        ASSERT_TRUE(codegen::ref::run(y.mm, KernelArgs({expected.tensor(), y.a.tensor(),
                                                        with_bias ? y.bias.tensor() : Tensor(),
                                                        ref_handler.tensor()}))
                        .is_ok());
        const auto r = test::compare(c, expected, Tolerance::exact());
        EXPECT_TRUE(r.ok()) << "M=" << m << " bias=" << with_bias << ": " << r.message;
      }
    }
    ops::release_onednn_handler(handler);
  }
}

TEST(OnednnOps, ScaledMmThroughOps) {
  const int64_t k = 64, n = 48, m = 6;
  HostTensor b = HostTensor::strided(DType::kI8, {k, n}, {1, k});
  test::fill_small_int(b, 3, -100, 100);
  HostTensor b_scales = HostTensor::zeros(DType::kF32, {1, n});
  test::fill_uniform(b_scales, 4, 0.01, 0.05);
  const int64_t handler =
      ops::create_onednn_scaled_mm(b.tensor(), b_scales.tensor(), DType::kBF16, true, true, 32);
  HostTensor a = HostTensor::zeros(DType::kI8, {m, k});
  test::fill_small_int(a, 5, -128, 127);
  HostTensor a_scales = HostTensor::zeros(DType::kF32, {m, 1});
  test::fill_uniform(a_scales, 6, 0.01, 0.1);
  HostTensor azp = HostTensor::zeros(DType::kI32, {m, 1});
  test::fill_small_int(azp, 7, -20, 20);
  HostTensor azp_adj = HostTensor::zeros(DType::kF32, {1, n});
  for (int64_t j = 0; j < n; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += b.get(i * n + j);
    azp_adj.set(j, b_scales.get(j) * sum);
  }
  HostTensor c = HostTensor::zeros(DType::kBF16, {m, n});
  ops::onednn_scaled_mm(c.tensor(), a.tensor(), a_scales.tensor(), azp.tensor(), azp_adj.tensor(),
                        Tensor(), handler);
  // ref on the same arguments.
  const OpSpec create =
      scaled_spec(OpKind::kCreateOnednnScaledMm, DType::kBF16, k, n, true, true, true);
  HostTensor ref_handler =
      HostTensor::zeros(DType::kU8, {codegen::ref::onednn_handler_bytes(create)});
  ASSERT_TRUE(codegen::ref::run(
                  create, KernelArgs({ref_handler.tensor(), b.tensor(), b_scales.tensor()}, {32.0}))
                  .is_ok());
  HostTensor expected = HostTensor::zeros(DType::kBF16, {m, n});
  ASSERT_TRUE(
      codegen::ref::run(scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, k, n, true, true, true),
                        KernelArgs({expected.tensor(), a.tensor(), a_scales.tensor(), azp.tensor(),
                                    azp_adj.tensor(), Tensor(), ref_handler.tensor()}))
          .is_ok());
  const auto r = test::compare(c, expected, Tolerance::abs_rel(1e-3, 1.0 / 128));
  EXPECT_TRUE(r.ok()) << r.message;
  ops::release_onednn_handler(handler);
}

// A oneDNN primitive keeps the OpenMP thread count it was created with, so a change of the
// count (vLLM: torch.set_num_threads) must create new primitives instead of reusing the old.
TEST(OnednnOps, PrimitivesFollowTheThreadCount) {
  const int saved = omp_get_max_threads();
  const OpSpec spec = mm_spec(OpKind::kOnednnMm, DType::kF32, 72, 44);  // a class of its own
  const Kernel kernel =
      compile_onednn_with(spec, Config().set("chunk_rows", 512).set("small_m", 0));
  auto c = test::make_case(spec, 24, InputKind::kSmallInt, 5);
  ASSERT_TRUE(c.is_ok());
  auto created = [] { return codegen::onednn::stats(onednn_backend()).primitives_created; };
  omp_set_num_threads(1);
  EXPECT_TRUE(test::check_against_ref(kernel, c.value()).ok);
  const int64_t after_one = created();
  EXPECT_TRUE(test::check_against_ref(kernel, c.value()).ok);
  EXPECT_EQ(created(), after_one) << "same thread count: the cached primitive";
  omp_set_num_threads(2);
  EXPECT_TRUE(test::check_against_ref(kernel, c.value()).ok);
  EXPECT_EQ(created(), after_one + 1) << "new thread count: a new primitive";
  omp_set_num_threads(1);
  EXPECT_TRUE(test::check_against_ref(kernel, c.value()).ok);
  EXPECT_EQ(created(), after_one + 1) << "back to 1 thread: the first primitive again";
  omp_set_num_threads(saved);
}

TEST(OnednnOps, ConcurrentCallsOnOneHandler) {
  MmCase x = small_int_mm(DType::kBF16, 256, 512, 1, 8);
  const int64_t handler = ops::create_onednn_mm(x.b.tensor(), 32);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      MmCase y = small_int_mm(DType::kBF16, 256, 512, 1 + 9 * t, 8);
      const HostTensor expected = ref_result(y);
      for (int rep = 0; rep < 5; ++rep) {
        HostTensor c = y.c;
        ops::onednn_mm(c.tensor(), y.a.tensor(), y.bias.tensor(), handler);
        if (!test::compare(c, expected, Tolerance::exact()).ok()) return;
      }
      ok[size_t(t)] = 1;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[size_t(t)], 1) << "thread " << t;
  ops::release_onednn_handler(handler);
}

// ---- dispatch and the implementations oneDNN picks -------------------------------------------

// Every GEMM op and weight type dispatches to onednn, f16 too (computed in f32: oneDNN 2.6 has
// no f16 matmul; before, it fell back to ref).
TEST(OnednnDispatch, GemmOpsGoToOnednnInEveryType) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto kernel = test_runtime().compile(mm_spec(OpKind::kOnednnMm, dt, 64, 64));
    ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
    EXPECT_EQ(kernel->info().backend, BackendKind::kOnednn) << dtype_name(dt);
  }
  // The int8 ops serve every output type: the epilogue is kiln's.
  auto scaled = test_runtime().compile(
      scaled_spec(OpKind::kOnednnScaledMm, DType::kF16, 64, 64, true, false, false));
  ASSERT_TRUE(scaled.is_ok());
  EXPECT_EQ(scaled->info().backend, BackendKind::kOnednn);
}

// The pitfalls of docs/gemm.md: every primitive must be oneDNN's brgemm (AVX-512 or AMX), never
// gemm:jit (what run-time M or run-time scales give) or its reference kernels. Below AVX-512
// oneDNN 2.6 has no brgemm matmul at all: there its jit GEMM is the fast path, and only the
// reference kernels are a pitfall.
TEST(OnednnDispatch, PrimitivesStayOnBrgemm) {
  const bool brgemm_here = host_target(BackendKind::kOnednn).isa >= X86Isa::kAvx512;
  const std::string want = brgemm_here ? "brg:" : "gemm:jit";
  if (!brgemm_here) {
    std::printf(
        "note: this CPU has no AVX-512: oneDNN 2.6 has no brgemm matmul here, so every "
        "primitive must be its jit GEMM (gemm:jit)\n");
  }
  for (int64_t m : {1, 16, 128, 1024}) {
    for (const OpSpec& spec :
         {mm_spec(OpKind::kOnednnMm, DType::kF32, 4096, 4096),
          mm_spec(OpKind::kOnednnMm, DType::kBF16, 4096, 4096),
          scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, 4096, 4096, true, true, true)}) {
      auto impl = codegen::onednn::implementation_name(onednn_backend(), spec, m);
      ASSERT_TRUE(impl.is_ok()) << impl.status().to_string();
      EXPECT_EQ(impl->rfind(want, 0), 0u) << to_string(spec) << " M=" << m << ": " << *impl;
      std::printf("%s M=%lld: %s\n", to_string(spec).c_str(), (long long)m, impl->c_str());
    }
  }
}

// KILN_ISA caps the GEMM path: oneDNN through dnnl::set_max_cpu_isa (process-wide, fixed
// before oneDNN's first kernel), kiln's small-M kernel through the target's level. Each level
// runs in a fresh process (a "threadsafe" death test re-executes this binary for the one
// test), since the cap cannot change once oneDNN has generated code.
int check_isa_cap(X86Isa cap) {
  RuntimeOptions options;
  options.isa_cap = cap;
  Runtime runtime{options};
  const Backend* onednn = nullptr;
  for (const Backend* b : runtime.backends()) {
    if (b->kind() == BackendKind::kOnednn) onednn = b;
  }
  if (onednn == nullptr) return 2;
  int failures = 0;
  for (const OpSpec& spec :
       {mm_spec(OpKind::kOnednnMm, DType::kF32, 96, 40),
        mm_spec(OpKind::kOnednnMm, DType::kBF16, 96, 40),
        scaled_spec(OpKind::kOnednnScaledMm, DType::kBF16, 96, 40, true, true, true)}) {
    CompileOptions copts;
    copts.backend = BackendKind::kOnednn;
    auto kernel = runtime.compile(spec, copts);
    if (!kernel.is_ok()) {
      // Every level serves every GEMM op (bf16 below AVX-512 computes in f32).
      std::fprintf(stderr, "%s at %s: not served: %s\n", to_string(spec).c_str(),
                   std::string(x86_isa_name(cap)).c_str(), kernel.status().to_string().c_str());
      ++failures;
      continue;
    }
    const DType w = spec.op == OpKind::kOnednnMm ? spec.get<ir::GemmParams>().dtype : DType::kI8;
    const int64_t small = kernel->info().config.get("small_m", -1);
    // The level the runtime targets: the cap, or the host's level where that is lower; there
    // the AVX-512 variant where the level has its instructions for w, else the AVX2 one.
    const X86Isa level = std::min(cap, detect_host_x86_isa());
    const auto variant = codegen::onednn::small_m::variant_for(w, level);
    const auto want_variant = level >= (w == DType::kBF16 ? X86Isa::kAvx512Bf16 : X86Isa::kAvx512)
                                  ? codegen::onednn::small_m::Variant::kAvx512
                                  : codegen::onednn::small_m::Variant::kAvx2;
    if (variant != want_variant) {
      std::fprintf(stderr, "%s at %s: small-M variant %s\n", to_string(spec).c_str(),
                   std::string(x86_isa_name(cap)).c_str(),
                   codegen::onednn::small_m::variant_name(variant));
      ++failures;
    }
    const int64_t want_small = codegen::onednn::small_m::default_max_rows(w, variant);
    if (small != want_small) {
      std::fprintf(stderr, "%s at %s: small_m %lld, want %lld\n", to_string(spec).c_str(),
                   std::string(x86_isa_name(cap)).c_str(), (long long)small, (long long)want_small);
      ++failures;
    }
    for (int64_t m : {1, 16}) {
      auto impl = codegen::onednn::implementation_name(*onednn, spec, m);
      const std::string name = impl.is_ok() ? impl.value() : impl.status().to_string();
      std::fprintf(stderr, "%s at %s M=%lld: %s\n", to_string(spec).c_str(),
                   std::string(x86_isa_name(cap)).c_str(), (long long)m, name.c_str());
      const bool above = name.find("amx") != std::string::npos ||
                         (cap == X86Isa::kAvx2 && name.find("avx512") != std::string::npos);
      if (!impl.is_ok() || above) ++failures;
      auto c = test::make_case(spec, m, InputKind::kSmallInt, 9);
      if (!c.is_ok() || !test::check_against_ref(kernel.value(), c.value()).ok) {
        std::fprintf(stderr, "  differs from ref\n");
        ++failures;
      }
    }
  }
  return failures == 0 ? 0 : 1;
}

TEST(OnednnIsa, KilnIsaCapsOnednnAndTheSmallMKernel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (X86Isa cap : {X86Isa::kAvx2, X86Isa::kAvx512}) {
    EXPECT_EXIT(std::exit(check_isa_cap(cap)), testing::ExitedWithCode(0), "")
        << "KILN_ISA=" << x86_isa_name(cap);
  }
}

// ---- bad input -------------------------------------------------------------------------------

// Runs `call`, expects a jit::Error whose message contains every one of `needles`.
template <class Call>
void expect_error(Call call, std::initializer_list<std::string_view> needles) {
  try {
    call();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (std::string_view needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(OnednnBadInput, MmShapesDtypesAndHandlers) {
  MmCase x = small_int_mm(DType::kBF16, 32, 24, 4, 1);
  const int64_t handler = ops::create_onednn_mm(x.b.tensor(), 4);
  HostTensor c = x.c;
  const std::vector<std::byte> before = c.storage();
  // a with the wrong K.
  HostTensor a_bad_k = HostTensor::zeros(DType::kBF16, {4, 31});
  expect_error([&] { ops::onednn_mm(c.tensor(), a_bad_k.tensor(), Tensor(), handler); },
               {"'a'", "31", "32"});
  // c with the wrong M.
  HostTensor c_bad = HostTensor::zeros(DType::kBF16, {5, 24});
  expect_error([&] { ops::onednn_mm(c_bad.tensor(), x.a.tensor(), Tensor(), handler); }, {"'a'"});
  // a of the wrong dtype.
  HostTensor a_f32 = HostTensor::zeros(DType::kF32, {4, 32});
  expect_error([&] { ops::onednn_mm(c.tensor(), a_f32.tensor(), Tensor(), handler); },
               {"'a'", "f32", "bf16"});
  // bias of the wrong length.
  HostTensor bias_bad = HostTensor::zeros(DType::kBF16, {23});
  expect_error([&] { ops::onednn_mm(c.tensor(), x.a.tensor(), bias_bad.tensor(), handler); },
               {"'bias'"});
  // b of an int type; b not 2-D.
  HostTensor b_i8 = HostTensor::zeros(DType::kI8, {32, 24});
  expect_error([&] { ops::create_onednn_mm(b_i8.tensor(), 4); }, {"dtype=i8"});
  HostTensor b_1d = HostTensor::zeros(DType::kBF16, {32});
  expect_error([&] { ops::create_onednn_mm(b_1d.tensor(), 4); }, {"'b'", "2-D"});
  expect_error([&] { ops::create_onednn_mm(x.b.tensor(), 0); }, {"primitive_cache_size"});
  // Handlers: unknown, of the other op, released.
  expect_error([&] { ops::onednn_mm(c.tensor(), x.a.tensor(), Tensor(), 12345); },
               {"'handler'", "not a live handler"});
  EXPECT_EQ(c.storage(), before) << "a rejected call wrote to c";
  ops::release_onednn_handler(handler);
  expect_error([&] { ops::onednn_mm(c.tensor(), x.a.tensor(), Tensor(), handler); }, {"'handler'"});
  expect_error([&] { ops::release_onednn_handler(handler); }, {"'handler'"});
}

TEST(OnednnBadInput, ScaledMmScalesAndZeroPoints) {
  const int64_t k = 16, n = 8, m = 3;
  HostTensor b = HostTensor::strided(DType::kI8, {k, n}, {1, k});
  HostTensor scales_n = HostTensor::zeros(DType::kF32, {n});
  HostTensor scales_bad = HostTensor::zeros(DType::kF32, {n + 1});
  expect_error(
      [&] {
        ops::create_onednn_scaled_mm(b.tensor(), scales_bad.tensor(), DType::kBF16, true, false);
      },
      {"'b_scales'", "9", "8"});
  HostTensor scales_f16 = HostTensor::zeros(DType::kF16, {1});
  expect_error(
      [&] {
        ops::create_onednn_scaled_mm(b.tensor(), scales_f16.tensor(), DType::kBF16, true, false);
      },
      {"'b_scales'", "f16"});
  HostTensor b_row_major = HostTensor::zeros(DType::kI8, {k, n});
  expect_error(
      [&] {
        ops::create_onednn_scaled_mm(b_row_major.tensor(), scales_n.tensor(), DType::kBF16, true,
                                     false);
      },
      {"'b'", "column-major"});
  const int64_t handler =
      ops::create_onednn_scaled_mm(b.tensor(), scales_n.tensor(), DType::kBF16, true, false, 4);
  HostTensor a = HostTensor::zeros(DType::kI8, {m, k});
  HostTensor c = HostTensor::zeros(DType::kBF16, {m, n});
  HostTensor a_scales = HostTensor::zeros(DType::kF32, {m, 1});
  HostTensor a_scales_bad = HostTensor::zeros(DType::kF32, {m + 1});
  HostTensor azp = HostTensor::zeros(DType::kI32, {m});
  expect_error(
      [&] {
        ops::onednn_scaled_mm(c.tensor(), a.tensor(), a_scales_bad.tensor(), Tensor(), Tensor(),
                              Tensor(), handler);
      },
      {"'a_scales'", "[M] or [M, 1]"});
  expect_error(
      [&] {
        ops::onednn_scaled_mm(c.tensor(), a.tensor(), a_scales.tensor(), azp.tensor(), Tensor(),
                              Tensor(), handler);
      },
      {"'azp'"});
  HostTensor a_bf16 = HostTensor::zeros(DType::kBF16, {m, k});
  expect_error(
      [&] {
        ops::onednn_scaled_mm(c.tensor(), a_bf16.tensor(), a_scales.tensor(), Tensor(), Tensor(),
                              Tensor(), handler);
      },
      {"'a'", "i8"});
  HostTensor c_f32 = HostTensor::zeros(DType::kF32, {m, n});
  expect_error(
      [&] {
        ops::onednn_scaled_mm(c_f32.tensor(), a.tensor(), a_scales.tensor(), Tensor(), Tensor(),
                              Tensor(), handler);
      },
      {"'c'", "bf16"});
  // An mm handler given to the scaled op.
  HostTensor bf = HostTensor::strided(DType::kBF16, {k, n}, {1, k});
  const int64_t mm_handler = ops::create_onednn_mm(bf.tensor(), 4);
  expect_error(
      [&] {
        ops::onednn_scaled_mm(c.tensor(), a.tensor(), a_scales.tensor(), Tensor(), Tensor(),
                              Tensor(), mm_handler);
      },
      {"'handler'", "create_onednn_mm"});
  ops::release_onednn_handler(mm_handler);
  ops::release_onednn_handler(handler);
}

// Handler tensors through KernelArgs: wrong size, garbage, another spec's; nothing written.
TEST(OnednnBadInput, GarbageHandlerTensors) {
  MmCase x = small_int_mm(DType::kBF16, 32, 24, 2, 1);
  const Kernel mm = compile_onednn(x.mm);
  HostTensor c = x.c;
  const std::vector<std::byte> before = c.storage();
  HostTensor short_handler = HostTensor::zeros(DType::kU8, {100});
  Status s = mm.run(KernelArgs({c.tensor(), x.a.tensor(), Tensor(), short_handler.tensor()}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'handler'"), std::string::npos) << s.message();
  HostTensor garbage = HostTensor::zeros(DType::kU8, x.handler.sizes());
  test::fill_small_int(garbage, 4, 0, 255);
  s = mm.run(KernelArgs({c.tensor(), x.a.tensor(), Tensor(), garbage.tensor()}));
  EXPECT_NE(s.message().find("bad magic"), std::string::npos) << s.message();
  // A handler made for f32 with the same byte count as bf16 [32, 48]: K, N, dtype differ.
  const OpSpec other = mm_spec(OpKind::kCreateOnednnMm, DType::kF32, 32, 12);
  HostTensor foreign = HostTensor::zeros(DType::kU8, {codegen::ref::onednn_handler_bytes(other)});
  HostTensor b_other = HostTensor::strided(DType::kF32, {32, 12}, {1, 32});
  ASSERT_TRUE(
      compile_onednn(other).run(KernelArgs({foreign.tensor(), b_other.tensor()}, {4.0})).is_ok());
  s = mm.run(KernelArgs({c.tensor(), x.a.tensor(), Tensor(), foreign.tensor()}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[32, 12]"), std::string::npos) << s.message();
  EXPECT_EQ(c.storage(), before) << "a rejected call wrote to c";
}

}  // namespace
}  // namespace jit
