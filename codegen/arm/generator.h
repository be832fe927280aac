// KernelBuilder: the LLVM IR building blocks every arm generator uses. Private to codegen/arm
// (it exposes LLVM types; only the generator files include it).
//
// Every kernel is one function with the signature of the x86 kernels,
//   void kiln_<hash>(const uint64_t* words, int64_t row_begin, int64_t row_end)
// reading its arguments from the call block (codegen/arm/call_block.h) and processing rows
// [row_begin, row_end). Vectors are fixed-width LLVM vectors of fp32 (<16 x float> in the
// main loops: four NEON q registers, i.e. four independent accumulators); element loads and
// stores convert from and to the op's dtype (f16 through fcvtl/fcvtn, bf16 by integer
// shifts with round-to-nearest-even), and every tail is the same expression at one lane.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <functional>
#include <memory>
#include <string>

#include "ir/dtype.h"

namespace jit::codegen::arm {

/// fp32 lanes of the main loops: 4 NEON q registers of 4 floats.
inline constexpr int kLanes = 16;

class KernelBuilder {
 public:
  /// Starts a module holding the kernel function `name`; the builder is positioned in its
  /// entry block.
  explicit KernelBuilder(const std::string& name);

  llvm::LLVMContext& context() { return *context_; }
  llvm::IRBuilder<>& b() { return *builder_; }
  llvm::Function* function() { return function_; }
  /// Hands the finished module (and its context) over; the builder is unusable afterwards.
  std::unique_ptr<llvm::Module> take_module() { return std::move(module_); }
  std::unique_ptr<llvm::LLVMContext> take_context() { return std::move(context_); }

  // ---- arguments --------------------------------------------------------------------------
  llvm::Value* row_begin() { return row_begin_; }
  llvm::Value* row_end() { return row_end_; }
  /// Word `i` of the call block as a pointer, an i64, or the float in its low 32 bits.
  llvm::Value* word_ptr(int i);
  llvm::Value* word_i64(int i);
  llvm::Value* word_f32(int i);

  // ---- types and constants ----------------------------------------------------------------
  llvm::Type* f32_type(int lanes);
  llvm::Type* i32_type(int lanes);
  llvm::Value* f32(float v, int lanes);
  llvm::Value* i32(int32_t v, int lanes);
  llvm::Value* i64(int64_t v);
  /// `base` + `offset` bytes (i64 offset).
  llvm::Value* byte_ptr(llvm::Value* base, llvm::Value* offset);

  // ---- element access -----------------------------------------------------------------------
  /// `lanes` elements of `dtype` at element `index` of `base`, widened to <lanes x float>.
  llvm::Value* load(DType dtype, llvm::Value* base, llvm::Value* index, int lanes);
  /// Rounds the fp32 vector `v` to `dtype` (RNE) and stores it at element `index` of `base`.
  void store(DType dtype, llvm::Value* base, llvm::Value* index, llvm::Value* v);
  /// rnd_T(v) kept as fp32: the value of `dtype` nearest to `v` (identity for f32).
  llvm::Value* round_to(DType dtype, llvm::Value* v);
  /// <lanes x i8> loads/stores (fp8 codes, raw bytes).
  llvm::Value* load_bytes(llvm::Value* base, llvm::Value* offset, int lanes);
  void store_bytes(llvm::Value* base, llvm::Value* offset, llvm::Value* v);

  // ---- control flow -----------------------------------------------------------------------
  /// for (i = begin; i < end; i += step) body(i), with i64 bounds.
  void for_range(llvm::Value* begin, llvm::Value* end, int64_t step,
                 const std::function<void(llvm::Value*)>& body);
  /// Covers elements [0, count) (count known at generation time): a loop of `lanes`-wide
  /// chunks, then a one-lane loop for the count % lanes tail. body(index, lanes).
  void for_chunks(int64_t count, int lanes, const std::function<void(llvm::Value*, int)>& body);
  /// The same with a run-time count (i64).
  void for_chunks(llvm::Value* count, int lanes,
                  const std::function<void(llvm::Value*, int)>& body);
  /// if (cond) then()
  void if_then(llvm::Value* cond, const std::function<void()>& then);
  /// Emits `ret void` and verifies the function; the message names the broken instruction.
  std::string finish();

  // ---- math (fp32 vectors; NaN propagates; comments in generator.cc give the algorithms) ---
  llvm::Value* exp(llvm::Value* x);
  /// 1 / (1 + e^-t), accurate on both tails (e = exp(-|t|); t >= 0: 1/(1+e), else e/(1+e)).
  llvm::Value* sigmoid(llvm::Value* t);
  /// erfc(z), fractional error < 1.2e-7 (Numerical Recipes erfcc).
  llvm::Value* erfc(llvm::Value* z);
  llvm::Value* select_lt(llvm::Value* a, llvm::Value* b, llvm::Value* if_lt, llvm::Value* if_not);
  /// min(x, hi) / max(x, lo) that keep a NaN x (a NaN bound never occurs).
  llvm::Value* min_keep_nan(llvm::Value* x, llvm::Value* hi);
  llvm::Value* max_keep_nan(llvm::Value* x, llvm::Value* lo);
  /// fp8 codes (<n x i8>, e4m3fn or e5m2) of an fp32 vector: round to nearest even, finite
  /// overflow and infinities saturate to the largest finite code, NaN gives 0x7F / 0x7E with
  /// the sign (ir/numeric.h's f32_to_fp8_*, bit for bit).
  llvm::Value* fp8_encode(llvm::Value* v, DType format);
  /// fp32 values of fp8 codes (<n x i8>), exact.
  llvm::Value* fp8_decode(llvm::Value* codes, DType format);
  /// Horizontal sum of an fp32 vector (reassociated: a tree of faddp).
  llvm::Value* reduce_add(llvm::Value* v);
  /// Even / odd lanes of a 2n-lane vector, and the inverse interleave.
  llvm::Value* even_lanes(llvm::Value* v);
  llvm::Value* odd_lanes(llvm::Value* v);
  llvm::Value* interleave(llvm::Value* even, llvm::Value* odd);

 private:
  std::unique_ptr<llvm::LLVMContext> context_;
  std::unique_ptr<llvm::Module> module_;
  std::unique_ptr<llvm::IRBuilder<>> builder_;
  llvm::Function* function_ = nullptr;
  llvm::Value* words_ = nullptr;
  llvm::Value* row_begin_ = nullptr;
  llvm::Value* row_end_ = nullptr;
};

}  // namespace jit::codegen::arm
