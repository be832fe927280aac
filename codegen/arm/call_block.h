// The call block of the arm kernels: how a KernelArgs becomes the words a generated kernel
// reads. Host-independent (no LLVM): the same plan drives the in-process ORC executable on
// AArch64 and the tests' qemu-aarch64 executable on x86 hosts.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "codegen/backend.h"
#include "ir/kernel_args.h"
#include "ir/op_spec.h"
#include "ir/status.h"

namespace jit::codegen::arm {

/// The kernel ABI: void kernel(const uint64_t* words, int64_t row_begin, int64_t row_end).
using ArmKernelFn = void (*)(const uint64_t*, int64_t, int64_t);

/// One call's arguments as 64-bit words. Words [0, pointer_count) are addresses (so a remote
/// runner can relocate them); the rest are i64 values or a float in the low 32 bits.
struct CallBlock {
  static constexpr int kMaxWords = 24;
  std::array<uint64_t, kMaxWords> words{};
  int pointer_count = 0;
  int word_count = 0;
};

/// A call ready to run: the block, the rows to split, and any side arrays the runner computed
/// (pointed to by pointer words; owned here so the plan stays valid while it runs).
struct CallPlan {
  CallBlock block;
  int64_t rows = 0;
  /// false when rows must run in order on one thread (swap_blocks: a later pair may read what
  /// an earlier one wrote).
  bool parallel = true;
  std::vector<std::vector<uint8_t>> side;
};

// Word layouts, one namespace per op family. Strides are in bytes.
namespace norm_words {
enum : int {
  kDst,
  kSrc,
  kResidual,
  kWeight,
  kPointers,
  kDstStride = kPointers,
  kSrcStride,
  kResidualStride,
  kEpsilon,
  kCount
};
}
namespace act_words {
enum : int { kDst, kSrc, kPointers, kThreshold = kPointers, kAlpha, kLimit, kCount };
}
namespace rope_words {
enum : int {
  kPositions,
  kQuery,
  kKey,
  kCache,
  kPointers,
  kQueryTokenStride = kPointers,
  kQueryHeadStride,
  kKeyTokenStride,
  kKeyHeadStride,
  kCount
};
}

namespace cache_write_words {  // reshape_and_cache(_flash), concat_and_cache_mla
enum : int {
  kKey,
  kValue,
  kKeyCache,
  kValueCache,
  kSlots,
  kKScale,
  kVScale,
  kPointers,
  kKeyRowStride = kPointers,
  kValueRowStride,
  kBlockStride,
  kEntryStride,
  kCount
};
}
namespace gather_words {  // cp_gather_cache, gather_and_maybe_dequant_cache
enum : int { kSrc, kDst, kOffsets, kScale, kPointers, kDstRowStride = kPointers, kCount };
}
namespace swap_words {  // swap_blocks: pairs[2r], pairs[2r+1] = src, dst byte offsets
enum : int { kSrc, kDst, kPairs, kPointers, kCount = kPointers };
}
namespace convert_words {  // convert_fp8: rows are chunks of kConvertRowElements
enum : int { kDst, kSrc, kPointers, kElements = kPointers, kScale, kCount };
}
inline constexpr int64_t kConvertRowElements = 4096;
namespace attention_words {  // cpu_attention_with_kv_cache (isa=neon); rows = query tokens
// kTokens: per token {position, lo, hi, block-table row byte offset} (int64), from the runner;
// kSinks: fp32 copy of s_aux.
enum : int {
  kQuery,
  kKeyCache,
  kValueCache,
  kOutput,
  kBlockTable,
  kSlopes,
  kSinks,
  kTokens,
  kPointers,
  kQueryTokenStride = kPointers,
  kQueryHeadStride,
  kKeyBlockStride,
  kKeyHeadStride,
  kValueBlockStride,
  kValueHeadStride,
  kScale,
  kSoftcap,
  kCount
};
}  // namespace attention_words

/// Builds the call of `spec` (an op the arm backend generates) on `args` (already checked
/// against the spec). Data-dependent checks (positions inside the cos/sin cache, slots inside
/// the cache) happen here, before anything is written.
Result<CallPlan> plan_call(const OpSpec& spec, const KernelArgs& args);

/// The kernel's symbol name for `spec` (unique per spec, so many kernels can share a JIT
/// session or a shared object).
std::string kernel_symbol(const OpSpec& spec);

}  // namespace jit::codegen::arm
