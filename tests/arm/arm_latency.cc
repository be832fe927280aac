// kiln_arm_latency: compile latency of the arm backend per kernel, for docs/arm.md.
//   x86 host -> AArch64 object: IR build, O2/O3 pipeline and object emission, in-process,
//     median of `--reps` compiles (after one warm-up that initialises LLVM);
//   under qemu-aarch64: the same IR (written to a temp dir) parsed, optimised at O3 and emitted
//     by the AArch64 libLLVM inside kiln_neon_driver (`--compile-latency`), median of 3.
// Usage: kiln_arm_latency [--reps N]
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <type_traits>
#include <variant>
#include <vector>

#include "codegen/arm/arm_backend.h"
#include "ir/op_spec.h"

namespace {

const char* kSpecs[] = {
    "rms_norm(dtype=bf16,hidden=4096)",
    "fused_add_rms_norm(dtype=bf16,hidden=4096)",
    "rotary_embedding(dtype=bf16,head_size=128,rot_dim=128,heads_q=32,heads_kv=8)",
    "silu_and_mul(dtype=bf16,d=14336)",
    "gelu_and_mul(dtype=bf16,d=14336)",
    "gelu_tanh_and_mul(dtype=f16,d=14336)",
    "swigluoai_and_mul(dtype=bf16,d=2880)",
    "reshape_and_cache_flash(dtype=bf16,kv=fp8_e4m3,heads_kv=8,head_size=128,block_size=16)",
    "reshape_and_cache(dtype=bf16,kv=auto,heads_kv=8,head_size=128,block_size=16)",
    "gather_and_maybe_dequant_cache(dtype=bf16,kv=fp8_e4m3,head_dim=576,block_size=64)",
    "convert_fp8(dst=fp8_e4m3,src=bf16)",
    "cpu_attention_with_kv_cache(isa=neon,dtype=bf16,head_size=128,block_size=32,heads_q=32,"
    "heads_kv=8)",
    "cpu_attention_with_kv_cache(isa=neon,dtype=f32,head_size=128,block_size=32,heads_q=32,"
    "heads_kv=8)",
};

// The spec's first dtype field (the data type shown next to the op).
jit::DType first_dtype(const jit::OpSpec& spec) {
  jit::DType found = jit::DType::kF32;
  bool seen = false;
  std::visit(
      [&](const auto& params) {
        using P = std::decay_t<decltype(params)>;
        P copy = params;
        P::fields(copy, [&](std::string_view, auto& field) {
          if constexpr (std::is_same_v<std::decay_t<decltype(field)>, jit::DType>) {
            if (!seen) found = field;
            seen = true;
          }
        });
      },
      spec.params);
  return found;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  if (argc == 3 && std::strcmp(argv[1], "--reps") == 0) reps = std::max(1, std::atoi(argv[2]));
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("kiln-arm-ll-{}", getpid());
  std::filesystem::create_directories(dir);
  fmt::print("x86 host -> AArch64 ({}), median of {} compiles, microseconds\n",
             jit::codegen::arm::kNeoverseV1.name, reps);
  fmt::print("{:<36} {:>4} {:>8} {:>9} {:>8} {:>9} {:>8}\n", "kernel", "opt", "build", "optimise",
             "emit", "total", "bytes");
  std::string files;
  int index = 0;
  for (const char* text : kSpecs) {
    auto spec = jit::parse_spec(text);
    if (!spec.is_ok()) {
      fmt::print(stderr, "{}: {}\n", text, spec.status().to_string());
      return 1;
    }
    for (int opt : {2, 3}) {
      (void)jit::codegen::arm::compile_object(spec.value(), opt);  // warm-up
      std::vector<double> build, optimize, emit, total;
      size_t bytes = 0;
      for (int r = 0; r < reps; ++r) {
        auto object = jit::codegen::arm::compile_object(spec.value(), opt);
        if (!object.is_ok()) {
          fmt::print(stderr, "{}: {}\n", text, object.status().to_string());
          return 1;
        }
        build.push_back(object->build_us);
        optimize.push_back(object->optimize_us);
        emit.push_back(object->emit_us);
        total.push_back(object->build_us + object->optimize_us + object->emit_us);
        bytes = object->object.size();
        if (opt == 3 && r == 0) {
          const auto path = dir / fmt::format("{:02}-{}-{}.ll", index++, jit::op_name(spec->op),
                                              jit::dtype_name(first_dtype(spec.value())));
          std::ofstream(path) << object->ir;
          files += " '" + path.string() + "'";
        }
      }
      const std::string name =
          fmt::format("{}-{}", jit::op_name(spec->op), jit::dtype_name(first_dtype(spec.value())));
      fmt::print("{:<36} {:>4} {:>8.0f} {:>9.0f} {:>8.0f} {:>9.0f} {:>8}\n", name, opt,
                 median(build), median(optimize), median(emit), median(total), bytes);
    }
  }
#ifdef KILN_NEON_DRIVER
  fmt::print("\nunder qemu-aarch64 (AArch64 libLLVM in kiln_neon_driver), O3, median of 3\n");
  std::fflush(stdout);
  const std::string command = fmt::format("{} -L {} {} --compile-latency{}", KILN_QEMU,
                                          KILN_AARCH64_SYSROOT, KILN_NEON_DRIVER, files);
  const int rc = std::system(command.c_str());
  std::filesystem::remove_all(dir);
  return rc == 0 ? 0 : 1;
#else
  fmt::print("\n(no neon driver built: the qemu measurement needs the cross toolchain)\n");
  std::filesystem::remove_all(dir);
  return 0;
#endif
}
