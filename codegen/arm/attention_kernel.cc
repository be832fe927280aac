// cpu_attention_with_kv_cache for isa=neon (spec/norm_act_cpu_ops.md §3): the cache slabs of a
// (block, kv head) hold K transposed [D, BS] and V natural [BS, D], so the logits of 16
// consecutive keys are one vector FMA chain over d, and P·V is one over the d lanes.
//
// One kernel row = one query token; the runner has resolved each token's position p, its
// allowed key range [lo, hi) (seq_len and the sliding window) and its request's block-table
// row. Per query head h (kv head g = h / group), block by block over [lo, hi):
//   s_j = scale · <q, k_j>                        (fp32)
//   softcap: s_j = c · tanh(s_j / c);  alibi: s_j += slope_h · (j − p);  j ∉ [lo, hi): −inf
//   online softmax: m' = max(m, max_j s_j), α = e^(m − m'), sum = α·sum + Σ e^(s_j − m'),
//                   acc = α·acc + Σ e^(s_j − m')·v_j   (only keys in [lo, hi) are read)
//   sinks: σ joins the denominator once at the end; out = rnd_T(acc / sum), 0 when sum = 0.
// bf16 with the `bf16` knob (default): q·k by BFMLALB/BFMLALT (bf16 products are exact in
// fp32, so the logits equal the fp32 path's) and P·V by BFDOT on key pairs with the
// probabilities rounded to bf16 (the NEON-BFMMLA numerics of the spec); otherwise everything
// is converted to fp32 and uses FMLA.
#include <llvm/IR/IntrinsicsAArch64.h>

#include <limits>

#include "codegen/arm/call_block.h"
#include "codegen/arm/generator.h"
#include "codegen/arm/kernels.h"
#include "ir/params_cpu.h"

namespace jit::codegen::arm {
namespace {

using llvm::Value;

constexpr int kChunk = 16;  // fp32 lanes per logit / output chunk

}  // namespace

Status generate_attention(KernelBuilder& k, const OpSpec& spec, bool bf16_dot) {
  using namespace attention_words;
  const auto& p = spec.get<ir::CpuAttentionParams>();
  const DType dt = p.dtype;
  const int64_t D = p.head_size, BS = p.block_size;
  const int64_t group = p.head_count_q / p.head_count_kv;
  const bool use_bf16 = bf16_dot && dt == DType::kBF16;
  auto& b = k.b();
  auto* f32t = b.getFloatTy();
  const float neg_inf = -std::numeric_limits<float>::infinity();

  Value* query = k.word_ptr(kQuery);
  Value* key_cache = k.word_ptr(kKeyCache);
  Value* value_cache = k.word_ptr(kValueCache);
  Value* output = k.word_ptr(kOutput);
  Value* table = k.word_ptr(kBlockTable);
  Value* slopes = k.word_ptr(kSlopes);
  Value* sinks = k.word_ptr(kSinks);
  Value* tokens = k.word_ptr(kTokens);
  Value* q_token_stride = k.word_i64(kQueryTokenStride);
  Value* q_head_stride = k.word_i64(kQueryHeadStride);
  Value* k_block_stride = k.word_i64(kKeyBlockStride);
  Value* k_head_stride = k.word_i64(kKeyHeadStride);
  Value* v_block_stride = k.word_i64(kValueBlockStride);
  Value* v_head_stride = k.word_i64(kValueHeadStride);
  Value* scale = k.word_f32(kScale);
  Value* softcap = k.word_f32(kSoftcap);

  // Per-head state and the current block's logits / probabilities.
  llvm::AllocaInst* acc = b.CreateAlloca(f32t, k.i64(D));
  llvm::AllocaInst* logits = b.CreateAlloca(f32t, k.i64(BS));
  llvm::AllocaInst* m_slot = b.CreateAlloca(f32t);
  llvm::AllocaInst* sum_slot = b.CreateAlloca(f32t);
  llvm::AllocaInst* block_max = b.CreateAlloca(f32t);
  llvm::AllocaInst* acc_v = b.CreateAlloca(k.f32_type(kChunk));
  // Logit accumulators: 16 fp32 lanes, or (bf16) the even/odd halves of two groups of 8 keys.
  llvm::AllocaInst* dot_slot = b.CreateAlloca(k.f32_type(kChunk));
  llvm::AllocaInst* half_slots[4];
  for (auto*& slot : half_slots) slot = b.CreateAlloca(llvm::FixedVectorType::get(f32t, 4));
  auto f32_at = [&](Value* base, Value* i) { return k.byte_ptr(base, b.CreateMul(i, k.i64(4))); };
  auto i64_at = [&](Value* base, Value* i) {
    return b.CreateAlignedLoad(b.getInt64Ty(), k.byte_ptr(base, b.CreateMul(i, k.i64(8))),
                               llvm::Align(8));
  };
  auto splat = [&](int lanes, Value* s) { return b.CreateVectorSplat(lanes, s); };
  auto fma = [&](Value* x, Value* y, Value* z) {
    return b.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()}, {x, y, z});
  };
  // Robust tanh: sign(x) · (1 − e)/(1 + e), e = e^(−2|x|) (no ∞/∞ for large |x|).
  auto tanh = [&](Value* x) {
    const int lanes = int(llvm::cast<llvm::FixedVectorType>(x->getType())->getNumElements());
    Value* e =
        k.exp(b.CreateFMul(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x), k.f32(-2.0f, lanes)));
    Value* t = b.CreateFDiv(b.CreateFSub(k.f32(1, lanes), e), b.CreateFAdd(k.f32(1, lanes), e));
    return b.CreateIntrinsic(llvm::Intrinsic::copysign, {t->getType()}, {t, x});
  };
  auto* bf16x8 = llvm::FixedVectorType::get(b.getBFloatTy(), 8);
  auto* f32x4 = llvm::FixedVectorType::get(f32t, 4);

  k.for_range(k.row_begin(), k.row_end(), 1, [&](Value* t) {
    // The runner's per-token record: position, lo, hi, block-table row (byte offset).
    Value* info = b.CreateMul(t, k.i64(4));
    Value* pos = i64_at(tokens, info);
    Value* lo = i64_at(tokens, b.CreateAdd(info, k.i64(1)));
    Value* hi = i64_at(tokens, b.CreateAdd(info, k.i64(2)));
    Value* table_row = k.byte_ptr(table, i64_at(tokens, b.CreateAdd(info, k.i64(3))));
    Value* q_token = k.byte_ptr(query, b.CreateMul(t, q_token_stride));
    Value* out_token =
        k.byte_ptr(output, b.CreateMul(t, k.i64(p.head_count_q * D * int64_t(dtype_size(dt)))));
    k.for_range(k.i64(0), k.i64(p.head_count_q), 1, [&](Value* h) {
      Value* g = b.CreateSDiv(h, k.i64(group));
      Value* q = k.byte_ptr(q_token, b.CreateMul(h, q_head_stride));
      Value* slope =
          p.alibi ? b.CreateAlignedLoad(f32t, f32_at(slopes, h), llvm::Align(4)) : nullptr;
      b.CreateStore(llvm::ConstantFP::get(f32t, neg_inf), m_slot);
      b.CreateStore(llvm::ConstantFP::get(f32t, 0.0), sum_slot);
      k.for_range(k.i64(0), k.i64(D), kChunk, [&](Value* d) {
        b.CreateAlignedStore(k.f32(0, kChunk), f32_at(acc, d), llvm::Align(4));
      });
      // Blocks lo/BS .. (hi−1)/BS (none when lo >= hi).
      Value* first_block = b.CreateSDiv(lo, k.i64(BS));
      Value* end_block = b.CreateSDiv(b.CreateAdd(hi, k.i64(BS - 1)), k.i64(BS));
      k.for_range(first_block, end_block, 1, [&](Value* bi) {
        Value* block =
            b.CreateSExt(b.CreateAlignedLoad(b.getInt32Ty(), f32_at(table_row, bi), llvm::Align(4)),
                         b.getInt64Ty());
        Value* k_slab = k.byte_ptr(key_cache, b.CreateAdd(b.CreateMul(block, k_block_stride),
                                                          b.CreateMul(g, k_head_stride)));
        Value* v_slab = k.byte_ptr(value_cache, b.CreateAdd(b.CreateMul(block, v_block_stride),
                                                            b.CreateMul(g, v_head_stride)));
        Value* j0 = b.CreateMul(bi, k.i64(BS));
        // Keys of this block inside [lo, hi), as offsets in the block: [a, z).
        Value* a = b.CreateSub(b.CreateSelect(b.CreateICmpSGT(lo, j0), lo, j0), j0);
        Value* j_end = b.CreateAdd(j0, k.i64(BS));
        Value* z = b.CreateSub(b.CreateSelect(b.CreateICmpSLT(hi, j_end), hi, j_end), j0);
        // Logits, 16 keys at a time (chunk offset c), masked outside [a, z); the block's max.
        b.CreateStore(llvm::ConstantFP::get(f32t, neg_inf), block_max);
        k.for_range(k.i64(0), k.i64(BS), kChunk, [&](Value* c) {
          Value* dot = nullptr;
          if (use_bf16) {
            // Two groups of 8 keys; BFMLALB takes the even keys, BFMLALT the odd ones.
            for (auto* slot : half_slots) b.CreateStore(k.f32(0, 4), slot);
            k.for_range(k.i64(0), k.i64(D), 1, [&](Value* d) {
              Value* qd = b.CreateAlignedLoad(
                  b.getBFloatTy(), k.byte_ptr(q, b.CreateMul(d, k.i64(2))), llvm::Align(2));
              Value* qv = splat(8, qd);
              Value* key_row = b.CreateAdd(b.CreateMul(d, k.i64(BS)), c);
              for (int s = 0; s < 2; ++s) {
                Value* at = b.CreateMul(b.CreateAdd(key_row, k.i64(8 * s)), k.i64(2));
                Value* kv = b.CreateAlignedLoad(bf16x8, k.byte_ptr(k_slab, at), llvm::Align(2));
                auto* even = half_slots[2 * s];
                auto* odd = half_slots[2 * s + 1];
                b.CreateStore(b.CreateIntrinsic(llvm::Intrinsic::aarch64_neon_bfmlalb, {},
                                                {b.CreateLoad(f32x4, even), qv, kv}),
                              even);
                b.CreateStore(b.CreateIntrinsic(llvm::Intrinsic::aarch64_neon_bfmlalt, {},
                                                {b.CreateLoad(f32x4, odd), qv, kv}),
                              odd);
              }
            });
            Value* lo8 = k.interleave(b.CreateLoad(f32x4, half_slots[0]),
                                      b.CreateLoad(f32x4, half_slots[1]));
            Value* hi8 = k.interleave(b.CreateLoad(f32x4, half_slots[2]),
                                      b.CreateLoad(f32x4, half_slots[3]));
            std::vector<int> concat(16);
            for (int i = 0; i < 16; ++i) concat[size_t(i)] = i;
            dot = b.CreateShuffleVector(lo8, hi8, concat);
          } else {
            b.CreateStore(k.f32(0, kChunk), dot_slot);
            k.for_range(k.i64(0), k.i64(D), 1, [&](Value* d) {
              Value* qd = b.CreateExtractElement(k.load(dt, q, d, 1), uint64_t(0));
              Value* kv = k.load(dt, k_slab, b.CreateAdd(b.CreateMul(d, k.i64(BS)), c), kChunk);
              b.CreateStore(fma(splat(kChunk, qd), kv, b.CreateLoad(k.f32_type(kChunk), dot_slot)),
                            dot_slot);
            });
            dot = b.CreateLoad(k.f32_type(kChunk), dot_slot);
          }
          Value* s = b.CreateFMul(dot, splat(kChunk, scale));
          if (p.softcap) {
            s = b.CreateFMul(splat(kChunk, softcap), tanh(b.CreateFDiv(s, splat(kChunk, softcap))));
          }
          // Lane l is key j0 + c + l.
          std::vector<llvm::Constant*> iota;
          for (int l = 0; l < kChunk; ++l) iota.push_back(b.getInt64(uint64_t(l)));
          Value* lane = b.CreateAdd(splat(kChunk, c), llvm::ConstantVector::get(iota));
          if (p.alibi) {
            Value* rel = b.CreateSIToFP(b.CreateAdd(splat(kChunk, b.CreateSub(j0, pos)), lane),
                                        k.f32_type(kChunk));
            s = b.CreateFAdd(s, b.CreateFMul(splat(kChunk, slope), rel));
          }
          Value* inside = b.CreateAnd(b.CreateICmpSGE(lane, splat(kChunk, a)),
                                      b.CreateICmpSLT(lane, splat(kChunk, z)));
          s = b.CreateSelect(inside, s, k.f32(neg_inf, kChunk));
          b.CreateAlignedStore(s, f32_at(logits, c), llvm::Align(4));
          Value* cmax = b.CreateFPMaxReduce(s);
          Value* old = b.CreateLoad(f32t, block_max);
          b.CreateStore(b.CreateSelect(b.CreateFCmpOGT(cmax, old), cmax, old), block_max);
        });
        Value* bmax = b.CreateLoad(f32t, block_max);
        k.if_then(b.CreateFCmpOGT(bmax, llvm::ConstantFP::get(f32t, neg_inf)), [&] {
          Value* m = b.CreateLoad(f32t, m_slot);
          Value* m_new = b.CreateSelect(b.CreateFCmpOGT(bmax, m), bmax, m);
          Value* alpha = b.CreateExtractElement(k.exp(splat(1, b.CreateFSub(m, m_new))),
                                                uint64_t(0));  // e^(−∞) = 0 first
          b.CreateStore(m_new, m_slot);
          // Probabilities in place of the logits (masked keys give e^(−∞) = 0).
          b.CreateStore(llvm::ConstantFP::get(f32t, 0.0), block_max);  // now the block's sum
          k.for_range(k.i64(0), k.i64(BS), kChunk, [&](Value* c) {
            Value* s = b.CreateAlignedLoad(k.f32_type(kChunk), f32_at(logits, c), llvm::Align(4));
            Value* e = k.exp(b.CreateFSub(s, splat(kChunk, m_new)));
            b.CreateAlignedStore(e, f32_at(logits, c), llvm::Align(4));
            b.CreateStore(b.CreateFAdd(b.CreateLoad(f32t, block_max), k.reduce_add(e)), block_max);
          });
          Value* block_sum = b.CreateLoad(f32t, block_max);
          b.CreateStore(b.CreateFAdd(b.CreateFMul(b.CreateLoad(f32t, sum_slot), alpha), block_sum),
                        sum_slot);
          // acc = α·acc + Σ_j p_j·v_j over the keys [a, z) only.
          k.for_range(k.i64(0), k.i64(D), kChunk, [&](Value* d) {
            Value* acc_ptr = f32_at(acc, d);
            Value* sum_v =
                b.CreateFMul(b.CreateAlignedLoad(k.f32_type(kChunk), acc_ptr, llvm::Align(4)),
                             splat(kChunk, alpha));
            b.CreateStore(sum_v, acc_v);
            auto p_at = [&](Value* j) {
              return b.CreateAlignedLoad(f32t, f32_at(logits, j), llvm::Align(4));
            };
            Value* single_from = a;
            if (use_bf16) {
              // Key pairs (j, j+1): BFDOT of zipped rows with the pair (p_j, p_{j+1}) in bf16.
              Value* pairs_end =
                  b.CreateAdd(a, b.CreateMul(b.CreateSDiv(b.CreateSub(z, a), k.i64(2)), k.i64(2)));
              k.for_range(a, pairs_end, 2, [&](Value* j) {
                Value* pv = b.CreateInsertElement(splat(2, p_at(j)), p_at(b.CreateAdd(j, k.i64(1))),
                                                  uint64_t(1));
                Value* pb = b.CreateBitCast(
                    b.CreateTrunc(
                        b.CreateLShr(b.CreateBitCast(k.round_to(DType::kBF16, pv), k.i32_type(2)),
                                     k.i32(16, 2)),
                        llvm::FixedVectorType::get(b.getInt16Ty(), 2)),
                    llvm::FixedVectorType::get(b.getBFloatTy(), 2));
                Value* pp = b.CreateShuffleVector(pb, {0, 1, 0, 1, 0, 1, 0, 1});
                Value* row0 = k.byte_ptr(v_slab, b.CreateMul(j, k.i64(2 * D)));
                Value* row1 = k.byte_ptr(row0, k.i64(2 * D));
                Value* v = b.CreateLoad(k.f32_type(kChunk), acc_v);
                Value* parts[4];
                for (int q4 = 0; q4 < 2; ++q4) {  // two groups of 8 d lanes
                  Value* off = b.CreateMul(b.CreateAdd(d, k.i64(8 * q4)), k.i64(2));
                  Value* r0 = b.CreateAlignedLoad(bf16x8, k.byte_ptr(row0, off), llvm::Align(2));
                  Value* r1 = b.CreateAlignedLoad(bf16x8, k.byte_ptr(row1, off), llvm::Align(2));
                  for (int half = 0; half < 2; ++half) {
                    std::vector<int> zip;
                    for (int i = 0; i < 4; ++i) {
                      zip.push_back(4 * half + i);
                      zip.push_back(8 + 4 * half + i);
                    }
                    Value* zipped = b.CreateShuffleVector(r0, r1, zip);
                    std::vector<int> sel = {4 * (2 * q4 + half), 4 * (2 * q4 + half) + 1,
                                            4 * (2 * q4 + half) + 2, 4 * (2 * q4 + half) + 3};
                    Value* a4 = b.CreateShuffleVector(v, sel);
                    parts[2 * q4 + half] = b.CreateIntrinsic(llvm::Intrinsic::aarch64_neon_bfdot,
                                                             {f32x4, bf16x8}, {a4, zipped, pp});
                  }
                }
                Value* lo8 = b.CreateShuffleVector(parts[0], parts[1], {0, 1, 2, 3, 4, 5, 6, 7});
                Value* hi8 = b.CreateShuffleVector(parts[2], parts[3], {0, 1, 2, 3, 4, 5, 6, 7});
                std::vector<int> concat(16);
                for (int i = 0; i < 16; ++i) concat[size_t(i)] = i;
                b.CreateStore(b.CreateShuffleVector(lo8, hi8, concat), acc_v);
              });
              single_from = pairs_end;
            }
            k.for_range(single_from, z, 1, [&](Value* j) {
              Value* row = k.byte_ptr(v_slab, b.CreateMul(j, k.i64(D * int64_t(dtype_size(dt)))));
              Value* v = k.load(dt, row, d, kChunk);
              b.CreateStore(fma(splat(kChunk, p_at(j)), v, b.CreateLoad(k.f32_type(kChunk), acc_v)),
                            acc_v);
            });
            b.CreateAlignedStore(b.CreateLoad(k.f32_type(kChunk), acc_v), acc_ptr, llvm::Align(4));
          });
        });
      });
      // Sinks join the denominator once; out = acc / sum (0 when nothing was allowed).
      Value* m = b.CreateLoad(f32t, m_slot);
      Value* sum = b.CreateLoad(f32t, sum_slot);
      Value* rescale = llvm::ConstantFP::get(f32t, 1.0);
      if (p.sinks) {
        Value* sink = b.CreateAlignedLoad(f32t, f32_at(sinks, h), llvm::Align(4));
        Value* m_final = b.CreateSelect(b.CreateFCmpOGT(sink, m), sink, m);
        rescale = b.CreateExtractElement(k.exp(splat(1, b.CreateFSub(m, m_final))), uint64_t(0));
        Value* e_sink =
            b.CreateExtractElement(k.exp(splat(1, b.CreateFSub(sink, m_final))), uint64_t(0));
        sum = b.CreateFAdd(b.CreateFMul(sum, rescale), e_sink);
      }
      Value* positive = b.CreateFCmpOGT(sum, llvm::ConstantFP::get(f32t, 0.0));
      Value* factor =
          b.CreateSelect(positive, b.CreateFDiv(rescale, sum), llvm::ConstantFP::get(f32t, 0.0));
      Value* out = k.byte_ptr(out_token, b.CreateMul(h, k.i64(D * int64_t(dtype_size(dt)))));
      k.for_range(k.i64(0), k.i64(D), kChunk, [&](Value* d) {
        Value* v = b.CreateAlignedLoad(k.f32_type(kChunk), f32_at(acc, d), llvm::Align(4));
        k.store(dt, out, d, b.CreateFMul(v, splat(kChunk, factor)));
      });
    });
  });
  return Status::ok();
}

}  // namespace jit::codegen::arm
