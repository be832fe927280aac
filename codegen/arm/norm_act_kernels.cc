// rms_norm, fused_add_rms_norm, rotary_embedding and the six gated activations as LLVM IR.
// The rounding sequences are the ref's (codegen/ref/ref_norm_act.cc): every product and sum
// is one fp32 operation (no contraction: IRBuilder sets no fast-math flags), rounded to T
// where the contract rounds.
#include <fmt/format.h>

#include "codegen/arm/call_block.h"
#include "codegen/arm/generator.h"
#include "codegen/arm/kernels.h"
#include "ir/params_norm_act.h"

namespace jit::codegen::arm {

using llvm::Value;

// Per row, T = dtype:
//   fused only: z_i = rnd_T(x_i + r_i), written back to the residual row (pass 1)
//   ss  = Σ z_i²  (16 lanes = four q-register accumulators, then a tree reduce)
//   inv = 1 / sqrt(ss / H + eps)
//   y_i = rnd_T(rnd_T(z_i · inv) · w_i)   (pass 2 re-reads z: the row is L1/L2 resident)
Status generate_norm(KernelBuilder& k, const OpSpec& spec) {
  using namespace norm_words;
  const auto& p = spec.get<ir::NormParams>();
  const bool fused = spec.op == OpKind::kFusedAddRmsNorm;
  auto& b = k.b();
  Value* dst = k.word_ptr(kDst);
  Value* src = k.word_ptr(kSrc);
  Value* residual = fused ? k.word_ptr(kResidual) : nullptr;
  Value* weight = p.weight ? k.word_ptr(kWeight) : nullptr;
  Value* dst_stride = k.word_i64(kDstStride);
  Value* src_stride = k.word_i64(kSrcStride);
  Value* residual_stride = fused ? k.word_i64(kResidualStride) : nullptr;
  Value* eps = k.word_f32(kEpsilon);
  llvm::AllocaInst* acc = b.CreateAlloca(k.f32_type(kLanes));
  llvm::AllocaInst* acc1 = b.CreateAlloca(b.getFloatTy());
  k.for_range(k.row_begin(), k.row_end(), 1, [&](Value* row) {
    Value* src_row = k.byte_ptr(src, b.CreateMul(row, src_stride));
    Value* dst_row = k.byte_ptr(dst, b.CreateMul(row, dst_stride));
    Value* res_row = fused ? k.byte_ptr(residual, b.CreateMul(row, residual_stride)) : nullptr;
    // The normalised values come from the rounded sum (fused) or the input.
    Value* z_row = fused ? res_row : src_row;
    b.CreateStore(k.f32(0, kLanes), acc);
    b.CreateStore(llvm::ConstantFP::get(b.getFloatTy(), 0.0), acc1);
    k.for_chunks(p.hidden, kLanes, [&](Value* i, int lanes) {
      Value* z = k.load(p.dtype, src_row, i, lanes);
      if (fused) {
        z = k.round_to(p.dtype, b.CreateFAdd(z, k.load(p.dtype, res_row, i, lanes)));
        k.store(p.dtype, res_row, i, z);
      }
      Value* sq = b.CreateFMul(z, z);
      if (lanes == kLanes) {
        b.CreateStore(b.CreateFAdd(b.CreateLoad(acc->getAllocatedType(), acc), sq), acc);
      } else {
        Value* s = b.CreateExtractElement(sq, uint64_t(0));
        b.CreateStore(b.CreateFAdd(b.CreateLoad(b.getFloatTy(), acc1), s), acc1);
      }
    });
    Value* ss = b.CreateFAdd(k.reduce_add(b.CreateLoad(acc->getAllocatedType(), acc)),
                             b.CreateLoad(b.getFloatTy(), acc1));
    Value* mean = b.CreateFDiv(ss, llvm::ConstantFP::get(b.getFloatTy(), double(p.hidden)));
    Value* root = b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, b.CreateFAdd(mean, eps));
    Value* inv = b.CreateFDiv(llvm::ConstantFP::get(b.getFloatTy(), 1.0), root);
    k.for_chunks(p.hidden, kLanes, [&](Value* i, int lanes) {
      Value* z = k.load(p.dtype, z_row, i, lanes);
      Value* y = k.round_to(p.dtype, b.CreateFMul(z, b.CreateVectorSplat(lanes, inv)));
      if (weight != nullptr) y = b.CreateFMul(y, k.load(p.dtype, weight, i, lanes));
      k.store(p.dtype, dst_row, i, y);
    });
  });
  return Status::ok();
}

// out_i = act(x_i) ⊗ y_i with act rounded to T first: rnd_T(rnd_T(act(x_i)) · y_i);
// fatrelu rounds once ((x > θ ? x : 0) · y); swigluoai reads interleaved (gate, up) pairs:
//   g = min(gate, limit), u = clamp(up, −limit, limit), out = rnd_T((u + 1) · g · σ(α·g)).
Status generate_activation(KernelBuilder& k, const OpSpec& spec) {
  using namespace act_words;
  const auto& p = spec.get<ir::ActivationParams>();
  const DType dt = p.dtype;
  const int64_t esize = int64_t(dtype_size(dt));
  auto& b = k.b();
  Value* dst = k.word_ptr(kDst);
  Value* src = k.word_ptr(kSrc);
  Value* threshold = spec.op == OpKind::kFatreluAndMul ? k.word_f32(kThreshold) : nullptr;
  const bool oai = spec.op == OpKind::kSwigluoaiAndMul;
  Value* alpha = oai ? k.word_f32(kAlpha) : nullptr;
  Value* limit = oai ? k.word_f32(kLimit) : nullptr;
  k.for_range(k.row_begin(), k.row_end(), 1, [&](Value* row) {
    Value* src_row = k.byte_ptr(src, b.CreateMul(row, k.i64(2 * p.d * esize)));
    Value* dst_row = k.byte_ptr(dst, b.CreateMul(row, k.i64(p.d * esize)));
    k.for_chunks(p.d, kLanes, [&](Value* i, int lanes) {
      auto splat = [&](Value* s) { return b.CreateVectorSplat(lanes, s); };
      Value* out = nullptr;
      if (oai) {
        Value* pairs = k.load(dt, src_row, b.CreateMul(i, k.i64(2)), 2 * lanes);
        Value* lim = splat(limit);
        Value* g = k.min_keep_nan(k.even_lanes(pairs), lim);
        Value* u = k.max_keep_nan(k.min_keep_nan(k.odd_lanes(pairs), lim), b.CreateFNeg(lim));
        Value* gs = b.CreateFMul(g, k.sigmoid(b.CreateFMul(splat(alpha), g)));
        out = b.CreateFMul(b.CreateFAdd(u, k.f32(1, lanes)), gs);
      } else {
        Value* x = k.load(dt, src_row, i, lanes);
        Value* y = k.load(dt, src_row, b.CreateAdd(i, k.i64(p.d)), lanes);
        switch (spec.op) {
          case OpKind::kSiluAndMul:
            out = b.CreateFMul(k.round_to(dt, b.CreateFMul(x, k.sigmoid(x))), y);
            break;
          case OpKind::kMulAndSilu:
            out = b.CreateFMul(x, k.round_to(dt, b.CreateFMul(y, k.sigmoid(y))));
            break;
          case OpKind::kGeluAndMul: {
            // 0.5·x·erfc(−x/√2): the same function as 0.5·x·(1 + erf(x/√2)) without the
            // cancellation of 1 + erf for negative x.
            Value* z = b.CreateFMul(x, k.f32(-0.70710678118654752f, lanes));
            Value* act = b.CreateFMul(b.CreateFMul(x, k.f32(0.5f, lanes)), k.erfc(z));
            out = b.CreateFMul(k.round_to(dt, act), y);
            break;
          }
          case OpKind::kGeluTanhAndMul: {
            // 0.5·x·(1 + tanh(u)) = x·σ(2u), u = β(x + κx³), β = √(2/π), κ = 0.044715.
            Value* x3 = b.CreateFMul(b.CreateFMul(x, x), x);
            Value* inner = b.CreateFAdd(x, b.CreateFMul(x3, k.f32(0.044715f, lanes)));
            Value* two_u = b.CreateFMul(inner, k.f32(2 * 0.7978845608028654f, lanes));
            out = b.CreateFMul(k.round_to(dt, b.CreateFMul(x, k.sigmoid(two_u))), y);
            break;
          }
          default: {  // fatrelu: strict >, so NaN x gives 0
            Value* keep = b.CreateFCmpOGT(x, splat(threshold));
            out = b.CreateFMul(b.CreateSelect(keep, x, k.f32(0, lanes)), y);
            break;
          }
        }
      }
      k.store(dt, dst_row, i, out);
    });
  });
  return Status::ok();
}

// Per token t, for each head of query (and key): pairs (x, y) = (h[j], h[E+j]) (NeoX) or
// (h[2j], h[2j+1]) (GPT-J), E = rot_dim/2, c/s = cache[pos][j], cache[pos][E+j] rounded to T:
//   x' = rnd(rnd(x·c) − rnd(y·s)),  y' = rnd(rnd(y·c) + rnd(x·s))
Status generate_rope(KernelBuilder& k, const OpSpec& spec) {
  using namespace rope_words;
  const auto& p = spec.get<ir::RopeParams>();
  const DType dt = p.dtype;
  const int64_t half = p.rot_dim / 2;
  const bool neox = p.style == ir::RopeStyle::kNeox;
  auto& b = k.b();
  Value* positions = k.word_ptr(kPositions);
  Value* cache = k.word_ptr(kCache);
  struct Operand {
    Value* base;
    Value* token_stride;
    Value* head_stride;
    int64_t heads;
  };
  std::vector<Operand> operands{{k.word_ptr(kQuery), k.word_i64(kQueryTokenStride),
                                 k.word_i64(kQueryHeadStride), p.head_count_q}};
  if (p.key) {
    operands.push_back({k.word_ptr(kKey), k.word_i64(kKeyTokenStride), k.word_i64(kKeyHeadStride),
                        p.head_count_kv});
  }
  const int64_t cache_row_bytes = p.rot_dim * int64_t(dtype_size(p.cache_dtype));
  k.for_range(k.row_begin(), k.row_end(), 1, [&](Value* t) {
    Value* pos = b.CreateAlignedLoad(
        b.getInt64Ty(), k.byte_ptr(positions, b.CreateMul(t, k.i64(8))), llvm::Align(8));
    Value* cache_row = k.byte_ptr(cache, b.CreateMul(pos, k.i64(cache_row_bytes)));
    for (const Operand& op : operands) {
      Value* token = k.byte_ptr(op.base, b.CreateMul(t, op.token_stride));
      k.for_range(k.i64(0), k.i64(op.heads), 1, [&](Value* h) {
        Value* head = k.byte_ptr(token, b.CreateMul(h, op.head_stride));
        k.for_chunks(half, kLanes, [&](Value* j, int lanes) {
          Value* c = k.round_to(dt, k.load(p.cache_dtype, cache_row, j, lanes));
          Value* s =
              k.round_to(dt, k.load(p.cache_dtype, cache_row, b.CreateAdd(j, k.i64(half)), lanes));
          Value *x, *y, *pairs_at = nullptr;
          if (neox) {
            x = k.load(dt, head, j, lanes);
            y = k.load(dt, head, b.CreateAdd(j, k.i64(half)), lanes);
          } else {
            pairs_at = b.CreateMul(j, k.i64(2));
            Value* pairs = k.load(dt, head, pairs_at, 2 * lanes);
            x = k.even_lanes(pairs);
            y = k.odd_lanes(pairs);
          }
          auto r = [&](Value* v) { return k.round_to(dt, v); };
          Value* x2 = r(b.CreateFSub(r(b.CreateFMul(x, c)), r(b.CreateFMul(y, s))));
          Value* y2 = r(b.CreateFAdd(r(b.CreateFMul(y, c)), r(b.CreateFMul(x, s))));
          if (neox) {
            k.store(dt, head, j, x2);
            k.store(dt, head, b.CreateAdd(j, k.i64(half)), y2);
          } else {
            k.store(dt, head, pairs_at, k.interleave(x2, y2));
          }
        });
      });
    }
  });
  return Status::ok();
}

}  // namespace jit::codegen::arm
