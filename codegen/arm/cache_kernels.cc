// The KV-cache writes, copies, gathers and fp8 conversions (spec/cache_ops.md) as LLVM IR:
// reshape_and_cache_flash, reshape_and_cache, concat_and_cache_mla (kv auto/fp8_e4m3/fp8_e5m2),
// swap_blocks, convert_fp8, cp_gather_cache and gather_and_maybe_dequant_cache.
//
// Every op is a sequence of spans per row, each one of
//   copy        bytes moved unchanged (kv=auto: no conversion, NaN payloads kept);
//   quantise    code = fp8(x / scale): x widened exactly to fp32, an IEEE division (a
//               reciprocal multiply is not bit-exact), KernelBuilder::fp8_encode;
//   dequantise  x = rnd_T(decode(code) · scale), the product in fp32.
// Addresses (bytes; s = slot, b = s / BS, o = s % BS, c = cache element size, e = input's):
//   flash NHD   token row [H, D] at b·block_stride + o·H·D·c (one span, or one per head with
//               per-head scales); flash HND: head h at b·block_stride + (h·BS + o)·D·c;
//   paged key   [NB, H, D/x, BS, x], x·c = 16 bytes: chunk q of the token's H·D/x chunks at
//               ((b·H·D/x + q)·BS + o)·16;
//   paged value [NB, H, D, BS]: element i of the token's H·D at ((b·H·D + i)·BS + o)·c;
//   mla         entry [kv_c (R) | k_pe (P)] at b·block_stride + o·entry_stride.
// The runner (call_block.cc) has checked every slot and resolved every gathered row to a byte
// offset before the kernel runs.
#include <fmt/format.h>

#include "codegen/arm/call_block.h"
#include "codegen/arm/generator.h"
#include "codegen/arm/kernels.h"
#include "ir/params_cache.h"

namespace jit::codegen::arm {
namespace {

using llvm::Value;

// 16 lanes per step: 16 fp8 codes are one q register.
constexpr int kSpanLanes = 16;

DType fp8_format(ir::KvCacheDtype kv) {
  return kv == ir::KvCacheDtype::kFp8E5m2 ? DType::kFp8E5m2 : DType::kFp8E4m3;
}

void copy_bytes(KernelBuilder& k, Value* dst, Value* src, Value* bytes) {
  k.for_chunks(bytes, kSpanLanes,
               [&](Value* i, int lanes) { k.store_bytes(dst, i, k.load_bytes(src, i, lanes)); });
}

void quantise(KernelBuilder& k, Value* dst, Value* src, Value* count, DType dtype, DType format,
              Value* scale) {
  auto& b = k.b();
  k.for_chunks(count, kSpanLanes, [&](Value* i, int lanes) {
    Value* q = b.CreateFDiv(k.load(dtype, src, i, lanes), b.CreateVectorSplat(lanes, scale));
    k.store_bytes(dst, i, k.fp8_encode(q, format));
  });
}

void dequantise(KernelBuilder& k, Value* dst, Value* src, Value* count, DType format, DType dtype,
                Value* scale) {
  auto& b = k.b();
  k.for_chunks(count, kSpanLanes, [&](Value* i, int lanes) {
    Value* x = k.fp8_decode(k.load_bytes(src, i, lanes), format);
    k.store(dtype, dst, i, b.CreateFMul(x, b.CreateVectorSplat(lanes, scale)));
  });
}

// Writes `count` input elements of `dtype` at src into the cache at dst: a copy (kv=auto) or
// fp8 codes with `scale` (a float value; read only when quantising).
struct SpanWriter {
  KernelBuilder& k;
  DType dtype;
  bool fp8;
  DType format;

  void operator()(Value* dst, Value* src, int64_t count, const std::function<Value*()>& scale) {
    if (fp8) {
      quantise(k, dst, src, k.i64(count), dtype, format, scale());
    } else {
      copy_bytes(k, dst, src, k.i64(count * int64_t(dtype_size(dtype))));
    }
  }
};

// The float at element `i` of a pointer word's array.
Value* load_f32_at(KernelBuilder& k, Value* base, Value* i) {
  auto& b = k.b();
  return b.CreateAlignedLoad(b.getFloatTy(), k.byte_ptr(base, b.CreateMul(i, k.i64(4))),
                             llvm::Align(4));
}
Value* load_i64_at(KernelBuilder& k, Value* base, Value* i) {
  auto& b = k.b();
  return b.CreateAlignedLoad(b.getInt64Ty(), k.byte_ptr(base, b.CreateMul(i, k.i64(8))),
                             llvm::Align(8));
}

// Per token with slot s >= 0: body(b, o).
void for_each_slot(KernelBuilder& k, int64_t block_size,
                   const std::function<void(Value*, Value*, Value*)>& body) {
  using namespace cache_write_words;
  auto& b = k.b();
  Value* slots = k.word_ptr(kSlots);
  k.for_range(k.row_begin(), k.row_end(), 1, [&](Value* t) {
    Value* slot = load_i64_at(k, slots, t);
    k.if_then(b.CreateICmpSGE(slot, k.i64(0)), [&] {
      body(t, b.CreateSDiv(slot, k.i64(block_size)), b.CreateSRem(slot, k.i64(block_size)));
    });
  });
}

Status generate_flash_write(KernelBuilder& k, const ir::FlashCacheWriteParams& p) {
  using namespace cache_write_words;
  auto& b = k.b();
  const bool fp8 = p.kv != ir::KvCacheDtype::kAuto;
  const int64_t c = int64_t(ir::cache_element_size(p.dtype, p.kv));
  const int64_t e = int64_t(dtype_size(p.dtype));
  const int64_t H = p.head_count_kv, D = p.head_size, BS = p.block_size;
  SpanWriter span{k, p.dtype, fp8, fp8_format(p.kv)};
  struct Operand {
    Value* src;
    Value* cache;
    Value* scale;
    Value* row_stride;
  };
  const Operand operands[2] = {
      {k.word_ptr(kKey), k.word_ptr(kKeyCache), k.word_ptr(kKScale), k.word_i64(kKeyRowStride)},
      {k.word_ptr(kValue), k.word_ptr(kValueCache), k.word_ptr(kVScale),
       k.word_i64(kValueRowStride)}};
  Value* block_stride = k.word_i64(kBlockStride);
  for_each_slot(k, BS, [&](Value* t, Value* blk, Value* o) {
    for (const Operand& op : operands) {
      Value* src_row = k.byte_ptr(op.src, b.CreateMul(t, op.row_stride));
      Value* block = k.byte_ptr(op.cache, b.CreateMul(blk, block_stride));
      if (p.layout == ir::CacheLayout::kNhd && !p.per_head_scale) {
        Value* dst = k.byte_ptr(block, b.CreateMul(o, k.i64(H * D * c)));
        span(dst, src_row, H * D, [&] { return load_f32_at(k, op.scale, k.i64(0)); });
        continue;
      }
      k.for_range(k.i64(0), k.i64(H), 1, [&](Value* h) {
        Value* entry = p.layout == ir::CacheLayout::kNhd
                           ? b.CreateAdd(b.CreateMul(o, k.i64(H)), h)
                           : b.CreateAdd(b.CreateMul(h, k.i64(BS)), o);
        Value* dst = k.byte_ptr(block, b.CreateMul(entry, k.i64(D * c)));
        Value* src = k.byte_ptr(src_row, b.CreateMul(h, k.i64(D * e)));
        span(dst, src, D,
             [&] { return load_f32_at(k, op.scale, p.per_head_scale ? h : k.i64(0)); });
      });
    }
  });
  return Status::ok();
}

Status generate_paged_write(KernelBuilder& k, const ir::PagedCacheWriteParams& p) {
  using namespace cache_write_words;
  auto& b = k.b();
  const bool fp8 = p.kv != ir::KvCacheDtype::kAuto;
  const DType format = fp8_format(p.kv);
  const int64_t c = int64_t(ir::cache_element_size(p.dtype, p.kv));
  const int64_t e = int64_t(dtype_size(p.dtype));
  const int64_t H = p.head_count_kv, D = p.head_size, BS = p.block_size;
  const int64_t x = ir::paged_key_x(p.dtype, p.kv);  // x·c = 16 bytes
  const int64_t chunks = H * D / x;
  SpanWriter span{k, p.dtype, fp8, format};
  Value* key = k.word_ptr(kKey);
  Value* value = k.word_ptr(kValue);
  Value* key_cache = k.word_ptr(kKeyCache);
  Value* value_cache = k.word_ptr(kValueCache);
  Value* key_stride = k.word_i64(kKeyRowStride);
  Value* value_stride = k.word_i64(kValueRowStride);
  Value* k_scale = fp8 ? load_f32_at(k, k.word_ptr(kKScale), k.i64(0)) : nullptr;
  Value* v_scale = fp8 ? load_f32_at(k, k.word_ptr(kVScale), k.i64(0)) : nullptr;
  for_each_slot(k, BS, [&](Value* t, Value* blk, Value* o) {
    Value* key_row = k.byte_ptr(key, b.CreateMul(t, key_stride));
    Value* value_row = k.byte_ptr(value, b.CreateMul(t, value_stride));
    // Key: H·D/x chunks of x elements, each 16 bytes in the cache.
    Value* first_chunk = b.CreateMul(blk, k.i64(chunks));
    k.for_range(k.i64(0), k.i64(chunks), 1, [&](Value* q) {
      Value* line = b.CreateAdd(b.CreateMul(b.CreateAdd(first_chunk, q), k.i64(BS)), o);
      Value* dst = k.byte_ptr(key_cache, b.CreateMul(line, k.i64(16)));
      span(dst, k.byte_ptr(key_row, b.CreateMul(q, k.i64(x * e))), x, [&] { return k_scale; });
    });
    // Value: element i of the token's H·D goes to its own BS-strided line.
    Value* first_line = b.CreateMul(blk, k.i64(H * D));
    k.for_range(k.i64(0), k.i64(H * D), 1, [&](Value* i) {
      Value* line = b.CreateAdd(b.CreateMul(b.CreateAdd(first_line, i), k.i64(BS)), o);
      Value* dst = k.byte_ptr(value_cache, b.CreateMul(line, k.i64(c)));
      Value* src = k.byte_ptr(value_row, b.CreateMul(i, k.i64(e)));
      if (fp8) {
        Value* v = b.CreateFDiv(k.load(p.dtype, src, k.i64(0), 1), b.CreateVectorSplat(1, v_scale));
        k.store_bytes(dst, k.i64(0), k.fp8_encode(v, format));
      } else {
        llvm::Type* word = b.getIntNTy(unsigned(8 * e));
        b.CreateAlignedStore(b.CreateAlignedLoad(word, src, llvm::Align(e)), dst, llvm::Align(e));
      }
    });
  });
  return Status::ok();
}

Status generate_mla_write(KernelBuilder& k, const ir::MlaCacheWriteParams& p) {
  using namespace cache_write_words;
  auto& b = k.b();
  const bool fp8 = p.kv != ir::KvCacheDtype::kAuto;
  const int64_t c = int64_t(ir::cache_element_size(p.dtype, p.kv));
  SpanWriter span{k, p.dtype, fp8, fp8_format(p.kv)};
  Value* kv_c = k.word_ptr(kKey);
  Value* k_pe = k.word_ptr(kValue);
  Value* cache = k.word_ptr(kKeyCache);
  Value* kv_c_stride = k.word_i64(kKeyRowStride);
  Value* k_pe_stride = k.word_i64(kValueRowStride);
  Value* block_stride = k.word_i64(kBlockStride);
  Value* entry_stride = k.word_i64(kEntryStride);
  Value* scale = fp8 ? load_f32_at(k, k.word_ptr(kKScale), k.i64(0)) : nullptr;
  for_each_slot(k, p.block_size, [&](Value* t, Value* blk, Value* o) {
    Value* entry = k.byte_ptr(
        cache, b.CreateAdd(b.CreateMul(blk, block_stride), b.CreateMul(o, entry_stride)));
    span(entry, k.byte_ptr(kv_c, b.CreateMul(t, kv_c_stride)), p.kv_lora_rank,
         [&] { return scale; });
    span(k.byte_ptr(entry, k.i64(p.kv_lora_rank * c)),
         k.byte_ptr(k_pe, b.CreateMul(t, k_pe_stride)), p.pe_dim, [&] { return scale; });
  });
  return Status::ok();
}

// Rows with a resolved source offset (>= 0) get `span(dst_row, src_entry)`.
void for_each_gathered_row(KernelBuilder& k, const std::function<void(Value*, Value*)>& span) {
  using namespace gather_words;
  auto& b = k.b();
  Value* src = k.word_ptr(kSrc);
  Value* dst = k.word_ptr(kDst);
  Value* offsets = k.word_ptr(kOffsets);
  Value* dst_stride = k.word_i64(kDstRowStride);
  k.for_range(k.row_begin(), k.row_end(), 1, [&](Value* row) {
    Value* offset = load_i64_at(k, offsets, row);
    k.if_then(b.CreateICmpSGE(offset, k.i64(0)), [&] {
      span(k.byte_ptr(dst, b.CreateMul(row, dst_stride)), k.byte_ptr(src, offset));
    });
  });
}

}  // namespace

Status generate_cache(KernelBuilder& k, const OpSpec& spec) {
  auto& b = k.b();
  switch (spec.op) {
    case OpKind::kReshapeAndCacheFlash:
      return generate_flash_write(k, spec.get<ir::FlashCacheWriteParams>());
    case OpKind::kReshapeAndCache:
      return generate_paged_write(k, spec.get<ir::PagedCacheWriteParams>());
    case OpKind::kConcatAndCacheMla:
      return generate_mla_write(k, spec.get<ir::MlaCacheWriteParams>());
    case OpKind::kSwapBlocks: {
      using namespace swap_words;
      const int64_t bytes = spec.get<ir::SwapBlocksParams>().block_bytes;
      Value* src = k.word_ptr(kSrc);
      Value* dst = k.word_ptr(kDst);
      Value* pairs = k.word_ptr(kPairs);
      k.for_range(k.row_begin(), k.row_end(), 1, [&](Value* r) {
        Value* at = b.CreateMul(r, k.i64(2));
        Value* from = k.byte_ptr(src, load_i64_at(k, pairs, at));
        Value* to = k.byte_ptr(dst, load_i64_at(k, pairs, b.CreateAdd(at, k.i64(1))));
        copy_bytes(k, to, from, k.i64(bytes));
      });
      return Status::ok();
    }
    case OpKind::kConvertFp8: {
      using namespace convert_words;
      const auto& p = spec.get<ir::ConvertFp8Params>();
      Value* dst = k.word_ptr(kDst);
      Value* src = k.word_ptr(kSrc);
      Value* elements = k.word_i64(kElements);
      Value* scale = k.word_f32(kScale);
      k.for_range(k.row_begin(), k.row_end(), 1, [&](Value* r) {
        Value* first = b.CreateMul(r, k.i64(kConvertRowElements));
        Value* rest = b.CreateSub(elements, first);
        Value* count = b.CreateSelect(b.CreateICmpSLT(rest, k.i64(kConvertRowElements)), rest,
                                      k.i64(kConvertRowElements));
        Value* row_src = k.byte_ptr(src, b.CreateMul(first, k.i64(int64_t(dtype_size(p.src)))));
        Value* row_dst = k.byte_ptr(dst, b.CreateMul(first, k.i64(int64_t(dtype_size(p.dst)))));
        if (p.dst == DType::kFp8E4m3) {
          quantise(k, row_dst, row_src, count, p.src, DType::kFp8E4m3, scale);
        } else {
          dequantise(k, row_dst, row_src, count, DType::kFp8E4m3, p.dst, scale);
        }
      });
      return Status::ok();
    }
    case OpKind::kCpGatherCache: {
      const auto& p = spec.get<ir::CpGatherCacheParams>();
      const int64_t bytes = p.entry_size * int64_t(dtype_size(p.dtype));
      for_each_gathered_row(k,
                            [&](Value* dst, Value* src) { copy_bytes(k, dst, src, k.i64(bytes)); });
      return Status::ok();
    }
    case OpKind::kGatherAndMaybeDequantCache: {
      using namespace gather_words;
      const auto& p = spec.get<ir::GatherCacheParams>();
      const bool fp8 = p.kv != ir::KvCacheDtype::kAuto;
      Value* scale = fp8 ? load_f32_at(k, k.word_ptr(kScale), k.i64(0)) : nullptr;
      for_each_gathered_row(k, [&](Value* dst, Value* src) {
        if (fp8) {
          dequantise(k, dst, src, k.i64(p.head_dim), fp8_format(p.kv), p.dtype, scale);
        } else {
          copy_bytes(k, dst, src, k.i64(p.head_dim * int64_t(dtype_size(p.dtype))));
        }
      });
      return Status::ok();
    }
    default:
      return Status(StatusCode::kUnsupported,
                    fmt::format("arm backend does not generate {}", op_name(spec.op)));
  }
}

}  // namespace jit::codegen::arm
