// Per-family op cases behind make_case() and input_kinds_for() (tests/harness/op_cases.h).
// Each family's cases live in op_cases_<family>.cc and set their own output tolerances
// (OpCase::tolerances) from ../shared/spec/testing.md.
#pragma once

#include <vector>

#include "tests/harness/op_cases.h"

namespace jit::test {

Result<OpCase> make_cache_case(const OpSpec& spec, int64_t size, InputKind kind, uint64_t seed);
std::vector<InputKind> cache_input_kinds(OpKind op);

Result<OpCase> make_attention_case(const OpSpec& spec, int64_t size, InputKind kind, uint64_t seed);
std::vector<InputKind> attention_input_kinds(OpKind op);

Result<OpCase> make_cpu_case(const OpSpec& spec, int64_t size, InputKind kind, uint64_t seed);
std::vector<InputKind> cpu_input_kinds(OpKind op);

/// The f32 output tolerance of an attention with ALiBi whose logits reach `bias` =
/// max|slope| · the largest key distance (op_cases_attention.cc explains it): atol
/// 1e-5 + 8·2^-24·bias, rtol 1e-5.
Tolerance alibi_f32_tolerance(double bias);

}  // namespace jit::test
