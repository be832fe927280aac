// The renderer: one spec + config -> one CUDA translation unit, made of a `constexpr` config
// struct and one explicit instantiation of a template from templates/. Everything
// op-specific about the CUDA backend's code (which template, which constants, the tuning
// space) lives here; launch.h fills the parameters at run time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "codegen/backend.h"
#include "codegen/cuda/nvrtc.h"
#include "ir/op_spec.h"

namespace jit::codegen::cuda {

/// The templates (templates/*.cuh), embedded in the library at build time, by include name.
const std::vector<SourceHeader>& template_headers();

/// Config knobs of every CUDA kernel.
inline constexpr std::string_view kThreads = "threads";  ///< threads per block, 32..1024, %32
inline constexpr std::string_view kVec = "vec";          ///< elements per vector access

/// A rendered kernel: the pieces, so that the host emulator can put several in one file.
struct RenderedKernel {
  std::string header;           ///< the template's include name ("norm.cuh")
  std::string kernel_template;  ///< "kiln::rms_norm_kernel"
  std::string args_type;        ///< "kiln::NormArgs"
  std::string config_members;   ///< the config struct's body (one member per line)
  std::string description;      ///< "rms_norm(...) config threads=..,vec=.."

  /// "struct <name> { ... };"
  std::string config_struct(std::string_view name) const;
  /// "kiln::rms_norm_kernel<name>": the expression NVRTC lowers to the kernel's symbol.
  std::string name_expression(std::string_view config_name) const;
  /// The whole translation unit: comment, #include, config struct `KilnCfg`, instantiation.
  std::string unit() const;
};

/// Whether the CUDA backend has a template for `op` (and the reason when not).
Support cuda_supports(const OpSpec& spec);

/// The tuning space of `spec`; the first entry is the heuristic default.
std::vector<Config> cuda_configs(const OpSpec& spec);

/// `config` as `spec` is rendered with: every knob checked (the error names the knob and the
/// allowed values) and every absent one set to its default. The launch plan must see this
/// config, not the caller's partial one (a default vec or heads_per_cta decides the plan).
Result<Config> resolve_config(const OpSpec& spec, const Config& config);

/// Renders `spec` with `config` (knobs checked: the error names the knob and allowed values).
Result<RenderedKernel> render(const OpSpec& spec, const Config& config);

/// The CUDA type name of an element type ("kiln::bf16", "float").
std::string_view cuda_type(DType dtype);

}  // namespace jit::codegen::cuda
