// The first program to run: compile one kernel from spec text and call an op with vLLM's
// signature.
//
//   build/release/examples/quickstart
#include <kiln/kiln.h>

#include <cstdio>
#include <vector>

int main() {
  // 1. A kernel from its spec text: parsed, validated, compiled (or found in the cache).
  auto spec = jit::parse_spec("silu_and_mul(dtype=f32,d=8)");
  if (!spec.is_ok()) {
    std::fprintf(stderr, "%s\n", spec.status().to_string().c_str());
    return 1;
  }
  auto kernel = jit::compile(spec.value());
  if (!kernel.is_ok()) {
    std::fprintf(stderr, "%s\n", kernel.status().to_string().c_str());
    return 1;
  }
  std::printf("compiled %s on %s (%zu bytes of code)\n", kernel->info().spec_text.c_str(),
              kernel->info().target.name().c_str(), kernel->code_size());

  // 2. The same through jit::ops with vLLM's argument order: out = silu(x) * y.
  std::vector<float> input(16), out(8);
  for (int i = 0; i < 16; ++i) input[i] = float(i) / 8.0f;
  jit::ops::silu_and_mul(jit::Tensor(out.data(), jit::DType::kF32, {1, 8}),
                         jit::Tensor(input.data(), jit::DType::kF32, {1, 16}));
  for (int i = 0; i < 8; ++i) std::printf("%.5f ", out[i]);
  std::printf("\n");
  return 0;
}
