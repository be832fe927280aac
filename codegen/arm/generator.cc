#include "codegen/arm/generator.h"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

namespace jit::codegen::arm {

using llvm::Value;

KernelBuilder::KernelBuilder(const std::string& name)
    : context_(std::make_unique<llvm::LLVMContext>()),
      module_(std::make_unique<llvm::Module>("kiln", *context_)),
      builder_(std::make_unique<llvm::IRBuilder<>>(*context_)) {
  auto& ctx = *context_;
  auto* ptr = llvm::PointerType::get(ctx, 0);
  auto* i64t = llvm::Type::getInt64Ty(ctx);
  auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, i64t, i64t}, false);
  function_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, *module_);
  // The kernels never unwind; the call block is read-only and does not alias the tensors.
  function_->addFnAttr(llvm::Attribute::NoUnwind);
  function_->addParamAttr(0, llvm::Attribute::NoAlias);
  function_->addParamAttr(0, llvm::Attribute::ReadOnly);
  words_ = function_->getArg(0);
  row_begin_ = function_->getArg(1);
  row_end_ = function_->getArg(2);
  builder_->SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", function_));
}

// ---- arguments ------------------------------------------------------------------------------

Value* KernelBuilder::word_ptr(int i) {
  return b().CreateAlignedLoad(b().getPtrTy(), byte_ptr(words_, i64(8 * i)), llvm::Align(8));
}
Value* KernelBuilder::word_i64(int i) {
  return b().CreateAlignedLoad(b().getInt64Ty(), byte_ptr(words_, i64(8 * i)), llvm::Align(8));
}
Value* KernelBuilder::word_f32(int i) {
  // Little-endian on both hosts: the float in the low half is at the word's address.
  return b().CreateAlignedLoad(b().getFloatTy(), byte_ptr(words_, i64(8 * i)), llvm::Align(8));
}

// ---- types and constants --------------------------------------------------------------------

llvm::Type* KernelBuilder::f32_type(int lanes) {
  return llvm::FixedVectorType::get(b().getFloatTy(), lanes);
}
llvm::Type* KernelBuilder::i32_type(int lanes) {
  return llvm::FixedVectorType::get(b().getInt32Ty(), lanes);
}
Value* KernelBuilder::f32(float v, int lanes) {
  return llvm::ConstantFP::get(f32_type(lanes), v);
}
Value* KernelBuilder::i32(int32_t v, int lanes) {
  return llvm::ConstantInt::get(i32_type(lanes), uint64_t(uint32_t(v)));
}
Value* KernelBuilder::i64(int64_t v) {
  return b().getInt64(uint64_t(v));
}
Value* KernelBuilder::byte_ptr(Value* base, Value* offset) {
  return b().CreateGEP(b().getInt8Ty(), base, offset);
}

// ---- element access -------------------------------------------------------------------------

namespace {
int lanes_of(Value* v) {
  return int(llvm::cast<llvm::FixedVectorType>(v->getType())->getNumElements());
}
}  // namespace

Value* KernelBuilder::load(DType dtype, Value* base, Value* index, int lanes) {
  const int64_t esize = int64_t(dtype_size(dtype));
  Value* address = byte_ptr(base, b().CreateMul(index, i64(esize)));
  const llvm::Align align(esize);
  switch (dtype) {
    case DType::kF32: return b().CreateAlignedLoad(f32_type(lanes), address, align);
    case DType::kF16: {
      auto* type = llvm::FixedVectorType::get(b().getHalfTy(), lanes);
      return b().CreateFPExt(b().CreateAlignedLoad(type, address, align), f32_type(lanes));
    }
    default: {  // bf16: the upper half of an fp32
      auto* type = llvm::FixedVectorType::get(b().getInt16Ty(), lanes);
      Value* bits = b().CreateZExt(b().CreateAlignedLoad(type, address, align), i32_type(lanes));
      return b().CreateBitCast(b().CreateShl(bits, i32(16, lanes)), f32_type(lanes));
    }
  }
}

namespace {
// bf16 bits of an fp32 vector, rounded to nearest even:
//   r = (x + 0x7FFF + ((x >> 16) & 1)) >> 16
// i.e. add just under half an ulp of bf16, plus one when the kept part is odd (ties to even);
// a carry correctly moves into the exponent (up to infinity). NaN keeps its sign and top
// payload bits and is made quiet (bit 6 of the bf16 code) so it cannot round to infinity.
Value* bf16_bits(KernelBuilder& k, Value* v) {
  auto& b = k.b();
  const int lanes = lanes_of(v);
  Value* x = b.CreateBitCast(v, k.i32_type(lanes));
  Value* lsb = b.CreateAnd(b.CreateLShr(x, k.i32(16, lanes)), k.i32(1, lanes));
  Value* rounded =
      b.CreateLShr(b.CreateAdd(b.CreateAdd(x, k.i32(0x7FFF, lanes)), lsb), k.i32(16, lanes));
  Value* quiet = b.CreateOr(b.CreateLShr(x, k.i32(16, lanes)), k.i32(0x40, lanes));
  Value* is_nan = b.CreateFCmpUNO(v, v);
  return b.CreateTrunc(b.CreateSelect(is_nan, quiet, rounded),
                       llvm::FixedVectorType::get(b.getInt16Ty(), lanes));
}
}  // namespace

void KernelBuilder::store(DType dtype, Value* base, Value* index, Value* v) {
  const int64_t esize = int64_t(dtype_size(dtype));
  Value* address = byte_ptr(base, b().CreateMul(index, i64(esize)));
  const llvm::Align align(esize);
  const int lanes = lanes_of(v);
  switch (dtype) {
    case DType::kF32: b().CreateAlignedStore(v, address, align); return;
    case DType::kF16:
      b().CreateAlignedStore(
          b().CreateFPTrunc(v, llvm::FixedVectorType::get(b().getHalfTy(), lanes)), address, align);
      return;
    default: b().CreateAlignedStore(bf16_bits(*this, v), address, align); return;
  }
}

Value* KernelBuilder::round_to(DType dtype, Value* v) {
  const int lanes = lanes_of(v);
  switch (dtype) {
    case DType::kF32: return v;
    case DType::kF16:
      return b().CreateFPExt(
          b().CreateFPTrunc(v, llvm::FixedVectorType::get(b().getHalfTy(), lanes)),
          f32_type(lanes));
    default: {
      Value* bits = b().CreateZExt(bf16_bits(*this, v), i32_type(lanes));
      return b().CreateBitCast(b().CreateShl(bits, i32(16, lanes)), f32_type(lanes));
    }
  }
}

Value* KernelBuilder::load_bytes(Value* base, Value* offset, int lanes) {
  auto* type = llvm::FixedVectorType::get(b().getInt8Ty(), lanes);
  return b().CreateAlignedLoad(type, byte_ptr(base, offset), llvm::Align(1));
}

void KernelBuilder::store_bytes(Value* base, Value* offset, Value* v) {
  b().CreateAlignedStore(v, byte_ptr(base, offset), llvm::Align(1));
}

// ---- control flow ---------------------------------------------------------------------------

void KernelBuilder::for_range(Value* begin, Value* end, int64_t step,
                              const std::function<void(Value*)>& body) {
  auto& ctx = context();
  llvm::BasicBlock* before = b().GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx, "loop", function_);
  auto* loop_body = llvm::BasicBlock::Create(ctx, "body", function_);
  auto* exit = llvm::BasicBlock::Create(ctx, "exit", function_);
  b().CreateBr(header);
  b().SetInsertPoint(header);
  llvm::PHINode* i = b().CreatePHI(b().getInt64Ty(), 2, "i");
  i->addIncoming(begin, before);
  b().CreateCondBr(b().CreateICmpSLT(i, end), loop_body, exit);
  b().SetInsertPoint(loop_body);
  body(i);
  Value* next = b().CreateAdd(i, i64(step));
  i->addIncoming(next, b().GetInsertBlock());
  b().CreateBr(header);
  b().SetInsertPoint(exit);
}

void KernelBuilder::for_chunks(int64_t count, int lanes,
                               const std::function<void(Value*, int)>& body) {
  const int64_t main = count / lanes * lanes;
  if (main > 0) for_range(i64(0), i64(main), lanes, [&](Value* i) { body(i, lanes); });
  if (main < count) for_range(i64(main), i64(count), 1, [&](Value* i) { body(i, 1); });
}

void KernelBuilder::for_chunks(Value* count, int lanes,
                               const std::function<void(Value*, int)>& body) {
  Value* main = b().CreateMul(b().CreateSDiv(count, i64(lanes)), i64(lanes));
  for_range(i64(0), main, lanes, [&](Value* i) { body(i, lanes); });
  for_range(main, count, 1, [&](Value* i) { body(i, 1); });
}

void KernelBuilder::if_then(Value* cond, const std::function<void()>& then) {
  auto* then_block = llvm::BasicBlock::Create(context(), "then", function_);
  auto* done = llvm::BasicBlock::Create(context(), "endif", function_);
  b().CreateCondBr(cond, then_block, done);
  b().SetInsertPoint(then_block);
  then();
  b().CreateBr(done);
  b().SetInsertPoint(done);
}

std::string KernelBuilder::finish() {
  b().CreateRetVoid();
  std::string message;
  llvm::raw_string_ostream os(message);
  if (llvm::verifyFunction(*function_, &os)) return os.str();
  return {};
}

// ---- math -----------------------------------------------------------------------------------

Value* KernelBuilder::select_lt(Value* a, Value* c, Value* if_lt, Value* if_not) {
  return b().CreateSelect(b().CreateFCmpOLT(a, c), if_lt, if_not);
}
Value* KernelBuilder::min_keep_nan(Value* x, Value* hi) {
  // x > hi is false for NaN, so NaN passes through (llvm.minnum would drop it).
  return b().CreateSelect(b().CreateFCmpOGT(x, hi), hi, x);
}
Value* KernelBuilder::max_keep_nan(Value* x, Value* lo) {
  return b().CreateSelect(b().CreateFCmpOLT(x, lo), lo, x);
}

Value* KernelBuilder::exp(Value* x) {
  // e^x = 2^n · e^r with n = round(x·log2 e), r = x − n·ln2 (ln2 split in a part exact in
  // fp32 and a correction, so r is exact to fp32 precision); |r| <= ln2/2.
  // e^r = 1 + r + r²·P(r), P the Cephes expf minimax polynomial (error ~1 ulp of fp32).
  // 2^n is applied as two factors 2^(n/2) and 2^(n - n/2), each a normal fp32 built from its
  // exponent bits, so results in the subnormal range round gradually (one rounding, at the
  // last multiply) and x > 88.73 overflows to +inf. x is clamped to [-110, 89] first (beyond,
  // the result is 0 or +inf anyway); the clamps and the saturating conversion keep NaN: n is 0
  // for a NaN x and the NaN flows through r.
  const int lanes = lanes_of(x);
  auto& B = b();
  Value* xc = max_keep_nan(min_keep_nan(x, f32(89.0f, lanes)), f32(-110.0f, lanes));
  Value* nf = B.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven,
                                     B.CreateFMul(xc, f32(std::numbers::log2e_v<float>, lanes)));
  Value* r = B.CreateFSub(xc, B.CreateFMul(nf, f32(0.693359375f, lanes)));
  r = B.CreateFSub(r, B.CreateFMul(nf, f32(-2.12194440e-4f, lanes)));
  Value* p = f32(1.9875691500e-4f, lanes);
  for (float c :
       {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f}) {
    p = B.CreateFAdd(B.CreateFMul(p, r), f32(c, lanes));
  }
  Value* er = B.CreateFAdd(B.CreateFAdd(B.CreateFMul(B.CreateFMul(r, r), p), r), f32(1, lanes));
  Value* n =
      B.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {i32_type(lanes), f32_type(lanes)}, {nf});
  Value* n1 = B.CreateAShr(n, i32(1, lanes));
  Value* n2 = B.CreateSub(n, n1);
  auto pow2 = [&](Value* e) {
    return B.CreateBitCast(B.CreateShl(B.CreateAdd(e, i32(127, lanes)), i32(23, lanes)),
                           f32_type(lanes));
  };
  return B.CreateFMul(B.CreateFMul(er, pow2(n1)), pow2(n2));
}

Value* KernelBuilder::sigmoid(Value* t) {
  // e = e^-|t| never overflows; 1/(1+e) loses nothing for t >= 0 and e/(1+e) keeps relative
  // accuracy far into the negative tail (down to the subnormals), where 1/(1+e^-t) would
  // overflow e^-t to infinity and return 0 too early.
  const int lanes = lanes_of(t);
  auto& B = b();
  Value* e = exp(B.CreateFNeg(B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, t)));
  Value* denom = B.CreateFAdd(f32(1, lanes), e);
  Value* num = B.CreateSelect(B.CreateFCmpOLT(t, f32(0, lanes)), e, f32(1, lanes));
  return B.CreateFDiv(num, denom);
}

Value* KernelBuilder::erfc(Value* z) {
  // Numerical Recipes erfcc: with t = 1/(1 + |z|/2),
  //   erfc(|z|) = t · exp(−z² − 1.26551223 + t·(1.00002368 + t·(0.37409196 + ...)))
  // (fractional error < 1.2e-7 everywhere), and erfc(z) = 2 − erfc(|z|) for z < 0. It keeps
  // relative accuracy in the tail where erfc is tiny, which 1 − erf would cancel away.
  const int lanes = lanes_of(z);
  auto& B = b();
  Value* a = B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, z);
  Value* t =
      B.CreateFDiv(f32(1, lanes), B.CreateFAdd(f32(1, lanes), B.CreateFMul(a, f32(0.5f, lanes))));
  static constexpr float kCoef[] = {-1.26551223f, 1.00002368f, 0.37409196f,  0.09678418f,
                                    -0.18628806f, 0.27886807f, -1.13520398f, 1.48851587f,
                                    -0.82215223f, 0.17087277f};
  Value* poly = f32(kCoef[9], lanes);
  for (int i = 8; i >= 0; --i) poly = B.CreateFAdd(B.CreateFMul(poly, t), f32(kCoef[i], lanes));
  Value* arg = B.CreateFSub(poly, B.CreateFMul(a, a));
  Value* tail = B.CreateFMul(t, exp(arg));
  return B.CreateSelect(B.CreateFCmpOLT(z, f32(0, lanes)), B.CreateFSub(f32(2, lanes), tail), tail);
}

Value* KernelBuilder::fp8_encode(Value* v, DType format) {
  // m mantissa bits and exponent bias of the format; a = |v| as fp32 bits.
  //   normal (|v| >= 2^(1-bias)): round the mantissa to m bits by adding just under half of
  //     the dropped part plus its lowest kept bit (round to nearest even; a carry moves into
  //     the exponent), rebias the exponent: code = (r - (127 - bias)·2^23) >> (23 - m);
  //   subnormal: let the FPU round: bits(|v| + C) - bits(C), C = 2^23·q with q the format's
  //     subnormal quantum 2^(1-bias-m), is the RNE number of quanta (8 = the smallest normal
  //     code, which is right: the carry lands in the exponent field);
  //   then min(code, largest finite) saturates overflow and inf, and NaN gets its own code.
  const bool e4m3 = format == DType::kFp8E4m3;
  const int m = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const int32_t max_code = e4m3 ? 0x7E : 0x7B;
  const int32_t nan_code = e4m3 ? 0x7F : 0x7E;
  const int lanes = lanes_of(v);
  auto& B = b();
  const int s = 23 - m;
  Value* bits = B.CreateBitCast(v, i32_type(lanes));
  Value* a = B.CreateAnd(bits, i32(0x7FFFFFFF, lanes));
  Value* r = B.CreateAdd(B.CreateAdd(a, i32((1 << (s - 1)) - 1, lanes)),
                         B.CreateAnd(B.CreateLShr(a, i32(s, lanes)), i32(1, lanes)));
  Value* normal = B.CreateLShr(B.CreateSub(r, i32((127 - bias) << 23, lanes)), i32(s, lanes));
  const float c = std::ldexp(1.0f, 23 + 1 - bias - m);
  Value* magnitude = B.CreateBitCast(a, f32_type(lanes));
  Value* sub = B.CreateSub(B.CreateBitCast(B.CreateFAdd(magnitude, f32(c, lanes)), i32_type(lanes)),
                           B.CreateBitCast(f32(c, lanes), i32_type(lanes)));
  const int32_t min_normal_bits = (127 + 1 - bias) << 23;
  Value* code = B.CreateSelect(B.CreateICmpULT(a, i32(min_normal_bits, lanes)), sub, normal);
  code = B.CreateSelect(B.CreateICmpUGT(code, i32(max_code, lanes)), i32(max_code, lanes), code);
  code = B.CreateSelect(B.CreateICmpUGT(a, i32(0x7F800000, lanes)), i32(nan_code, lanes), code);
  Value* sign = B.CreateLShr(B.CreateAnd(bits, i32(int32_t(0x80000000u), lanes)), i32(24, lanes));
  return B.CreateTrunc(B.CreateOr(code, sign), llvm::FixedVectorType::get(B.getInt8Ty(), lanes));
}

Value* KernelBuilder::fp8_decode(Value* codes, DType format) {
  // The magnitude bits shifted into an fp32's exponent/mantissa position are the value scaled
  // by 2^(bias - 127) (exactly, subnormal codes included: they become fp32 subnormals), so one
  // multiply by 2^(127 - bias) decodes every finite code; e4m3 0x7F and e5m2 0x7D..0x7F are
  // NaN, e5m2 0x7C infinity.
  const bool e4m3 = format == DType::kFp8E4m3;
  const int m = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const int lanes = lanes_of(codes);
  auto& B = b();
  Value* c = B.CreateZExt(codes, i32_type(lanes));
  Value* mag = B.CreateAnd(c, i32(0x7F, lanes));
  Value* value =
      B.CreateFMul(B.CreateBitCast(B.CreateShl(mag, i32(23 - m, lanes)), f32_type(lanes)),
                   f32(std::ldexp(1.0f, 127 - bias), lanes));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (e4m3) {
    value = B.CreateSelect(B.CreateICmpEQ(mag, i32(0x7F, lanes)), f32(nan, lanes), value);
  } else {
    value = B.CreateSelect(B.CreateICmpEQ(mag, i32(0x7C, lanes)),
                           f32(std::numeric_limits<float>::infinity(), lanes), value);
    value = B.CreateSelect(B.CreateICmpUGT(mag, i32(0x7C, lanes)), f32(nan, lanes), value);
  }
  Value* sign = B.CreateShl(B.CreateAnd(c, i32(0x80, lanes)), i32(24, lanes));
  return B.CreateBitCast(B.CreateOr(B.CreateBitCast(value, i32_type(lanes)), sign),
                         f32_type(lanes));
}

Value* KernelBuilder::reduce_add(Value* v) {
  llvm::FastMathFlags flags;
  flags.setAllowReassoc();
  llvm::IRBuilder<>::FastMathFlagGuard guard(b());
  b().setFastMathFlags(flags);
  return b().CreateFAddReduce(llvm::ConstantFP::get(b().getFloatTy(), -0.0), v);
}

Value* KernelBuilder::even_lanes(Value* v) {
  std::vector<int> mask;
  for (int i = 0; i < lanes_of(v) / 2; ++i) mask.push_back(2 * i);
  return b().CreateShuffleVector(v, mask);
}
Value* KernelBuilder::odd_lanes(Value* v) {
  std::vector<int> mask;
  for (int i = 0; i < lanes_of(v) / 2; ++i) mask.push_back(2 * i + 1);
  return b().CreateShuffleVector(v, mask);
}
Value* KernelBuilder::interleave(Value* even, Value* odd) {
  std::vector<int> mask;
  const int n = lanes_of(even);
  for (int i = 0; i < n; ++i) {
    mask.push_back(i);
    mask.push_back(n + i);
  }
  return b().CreateShuffleVector(even, odd, mask);
}

}  // namespace jit::codegen::arm
