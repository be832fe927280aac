// The specs the CUDA tests compile and emulate, shared by the tests and by the generator that
// instantiates the same rendered kernels for the SIMT emulator at build time.
#pragma once

#include <vector>

#include "ir/op_spec.h"

namespace jit::test::cuda {

/// One default-sized spec per CUDA kernel and variant: what every arch must compile without
/// spills (rms_norm and fused at hidden 4096 with and without weight, the six activations at
/// d 11008 per dtype, rotary for NeoX and GPT-J, ...).
std::vector<OpSpec> compile_specs();

/// The emulator's comparison grid: every op x dtype over widths that hit each vector width's
/// tail class (1, 2, 3, 4, 7, 8, 9, 16, 17, 33, 40, 64, 65, 127), one wider than a block's
/// threads x vec (5125), and the rope head sizes and styles of spec/testing.md.
std::vector<OpSpec> emulator_specs();

/// Specs whose whole tuning space (every Config of cuda_configs) is instantiated for the
/// emulator, so that non-default thread counts and the scalar (vec=1) path are compared too.
std::vector<OpSpec> emulator_tuning_specs();

/// paged_attention_v1/v2 (cuda_paged_attention_specs.cc): the default-config shapes every arch
/// must compile without spills, and the emulator's grid (head sizes, block sizes, GQA groups,
/// fp8 caches, ALiBi, v2 partitions).
std::vector<OpSpec> paged_attention_compile_specs();
std::vector<OpSpec> paged_attention_specs();
/// Paged attention specs whose every tuning config (threads, heads_per_cta) the emulator runs.
std::vector<OpSpec> paged_attention_tuning_specs();

}  // namespace jit::test::cuda
