// kiln: a JIT kernel compiler for LLM inference. The one header users include.
//
//   #include <kiln/kiln.h>
//   auto spec = jit::parse_spec("rms_norm(dtype=bf16,hidden=4096)");
//   auto kernel = jit::compile(*spec);           // Result<Kernel>
//   jit::ops::rms_norm(out, input, weight, 1e-6);  // vLLM signature, compiled on first use
#pragma once

#include "codegen/target.h"
#include "ir/check_args.h"
#include "ir/dtype.h"
#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/status.h"
#include "ir/tensor.h"
#include "runtime/log.h"
#include "runtime/ops.h"
#include "runtime/runtime.h"
