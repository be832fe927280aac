// Cache bundles: export/import round trip, tampered files and foreign targets rejected.
#include <gtest/gtest.h>

#include "runtime/disk_cache.h"
#include "runtime/runtime.h"
#include "tests/autotune/temp_dir.h"

namespace jit::runtime {
namespace {

namespace fs = std::filesystem;

const std::vector<OpSpec> kSpecs = {
    OpSpec::make(OpKind::kSiluAndMul, ir::ActivationParams{DType::kBF16, 96}),
    OpSpec::make(OpKind::kGeluAndMul, ir::ActivationParams{DType::kF32, 64}),
    OpSpec::make(OpKind::kRmsNorm, ir::NormParams{DType::kBF16, 256, true}),
};

RuntimeOptions with_cache(const fs::path& dir) {
  RuntimeOptions options;
  options.cache_dir = dir;
  return options;
}

std::string host() {
  return host_target(BackendKind::kX86).fingerprint;
}

TEST(Bundle, KeyTargetField) {
  EXPECT_EQ(cache_key_target("silu_and_mul(dtype=bf16,d=8)|default|x86-avx2|x86-3|xbyak"),
            "x86-avx2");
  EXPECT_EQ(cache_key_target("no fields"), "");
}

TEST(Bundle, ExportImportRoundTripGivesDiskHits) {
  test::TempDir dir;
  {
    Runtime a(with_cache(dir.path() / "a"));
    for (const OpSpec& spec : kSpecs) ASSERT_TRUE(a.compile(spec).is_ok());
  }
  auto source = DiskCache::open({.dir = dir.path() / "a"});
  ASSERT_TRUE(source.is_ok());
  const fs::path bundle = dir.path() / "kernels.kbundle";
  auto exported = source.value()->export_bundle(bundle, host());
  ASSERT_TRUE(exported.is_ok()) << exported.status().to_string();
  EXPECT_EQ(exported->entries, kSpecs.size());
  EXPECT_EQ(exported->bytes, fs::file_size(bundle));

  auto dest = DiskCache::open({.dir = dir.path() / "b"});
  ASSERT_TRUE(dest.is_ok());
  auto imported = dest.value()->import_bundle(bundle, host());
  ASSERT_TRUE(imported.is_ok()) << imported.status().to_string();
  EXPECT_EQ(imported->entries, kSpecs.size());
  EXPECT_EQ(imported->target, host());
  EXPECT_EQ(dest.value()->verify().removed, 0u);

  Runtime b(with_cache(dir.path() / "b"));
  for (const OpSpec& spec : kSpecs) {
    auto kernel = b.compile(spec);
    ASSERT_TRUE(kernel.is_ok());
    EXPECT_EQ(kernel->info().source, KernelSource::kDiskCache) << to_string(spec);
  }
  EXPECT_EQ(b.counters().generated, 0u);
}

TEST(Bundle, TamperedBundleIsRejectedAndNothingIsImported) {
  test::TempDir dir;
  {
    Runtime a(with_cache(dir.path() / "a"));
    for (const OpSpec& spec : kSpecs) ASSERT_TRUE(a.compile(spec).is_ok());
  }
  auto source = DiskCache::open({.dir = dir.path() / "a"});
  const fs::path bundle = dir.path() / "kernels.kbundle";
  ASSERT_TRUE(source.value()->export_bundle(bundle, host()).is_ok());
  std::string bytes = test::read_text(bundle);
  auto dest = DiskCache::open({.dir = dir.path() / "b"});
  // A flipped bit in the code, in the header, and a truncated file.
  for (size_t at : {bytes.size() / 2, size_t(20), bytes.size() - 3}) {
    std::string damaged = bytes;
    damaged[at] = char(damaged[at] ^ 0x10);
    test::write_text(dir.path() / "bad.kbundle", damaged);
    auto imported = dest.value()->import_bundle(dir.path() / "bad.kbundle", host());
    ASSERT_FALSE(imported.is_ok()) << "byte " << at;
    EXPECT_EQ(imported.status().code(), StatusCode::kCacheError);
    EXPECT_NE(imported.status().message().find("checksum"), std::string::npos)
        << imported.status().message();
  }
  test::write_text(dir.path() / "short.kbundle", bytes.substr(0, bytes.size() - 100));
  auto truncated = dest.value()->import_bundle(dir.path() / "short.kbundle", host());
  ASSERT_FALSE(truncated.is_ok());
  test::write_text(dir.path() / "other.kbundle", "KILNCAC1 not a bundle at all, but long enough");
  auto foreign = dest.value()->import_bundle(dir.path() / "other.kbundle", host());
  ASSERT_FALSE(foreign.is_ok());
  EXPECT_NE(foreign.status().message().find("not a kiln cache bundle"), std::string::npos);
  EXPECT_EQ(dest.value()->stats().entries, 0u) << "nothing from a rejected bundle is stored";
}

TEST(Bundle, BundleForAnotherTargetIsRefused) {
  test::TempDir dir;
  auto source = DiskCache::open({.dir = dir.path() / "a"});
  ASSERT_TRUE(source.is_ok());
  Artifact artifact;
  artifact.code = {0xc3};  // ret
  const CacheKey key = make_cache_key(kSpecs[0], Config{}, "x86-elsewhere", "x86-1", "xbyak");
  ASSERT_TRUE(source.value()->store(key, artifact).is_ok());
  const fs::path bundle = dir.path() / "elsewhere.kbundle";
  auto none = source.value()->export_bundle(bundle, host());
  ASSERT_FALSE(none.is_ok()) << "no entry of this machine's target";
  EXPECT_NE(none.status().message().find(host()), std::string::npos);
  ASSERT_TRUE(source.value()->export_bundle(bundle, "x86-elsewhere").is_ok());

  auto dest = DiskCache::open({.dir = dir.path() / "b"});
  auto imported = dest.value()->import_bundle(bundle, host());
  ASSERT_FALSE(imported.is_ok());
  EXPECT_EQ(imported.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(imported.status().message().find("x86-elsewhere"), std::string::npos);
  EXPECT_NE(imported.status().message().find(host()), std::string::npos);
  EXPECT_EQ(dest.value()->stats().entries, 0u);
  // On a machine of that target it imports.
  auto there = dest.value()->import_bundle(bundle, "x86-elsewhere");
  ASSERT_TRUE(there.is_ok()) << there.status().to_string();
  EXPECT_EQ(there->entries, 1u);
}

}  // namespace
}  // namespace jit::runtime
