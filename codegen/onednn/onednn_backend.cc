// The onednn backend (see onednn_backend.h and docs/gemm.md for the design and measurements).
//
// Per call of onednn_mm / onednn_scaled_mm:
//   1. the handler is validated (size, every header field) exactly as the ref does, so a
//      garbage or foreign handler is kInvalidArgument naming 'handler' before anything runs;
//   2. the packed weight is found by the handler's address and fingerprint (or packed now);
//   3. the rows are cut into chunks of at most chunk_rows (the config; see kChunkRowChoices);
//      each chunk runs the primitive created for m_bucket(rows) rows. A chunk whose rows are
//      not a bucket (or whose a rows are not dense) is copied into a zero-padded scratch of
//      bucket rows and its result copied back: a primitive's M is fixed at creation, because
//      oneDNN 2.6 turns a run-time M (DNNL_RUNTIME_DIM_VAL) into gemm:jit, 2.4-11x slower than
//      brgemm at M = 16 (docs/gemm.md);
//   4. int8: oneDNN computes the exact int32 sums s32 = Σ_k a·b with no attributes, and kiln's
//      epilogue applies scales, zero points and bias (run-time scales of any mask also turn
//      oneDNN 2.6 into gemm:jit, 4-12x slower at M = 1):
//        static   c = rnd(s_a·s_b[n]·(s32 − zp·colsum[n]) + bias[n]),  colsum[n] = Σ_k b[k, n]
//                 (Σ_k (a − zp)·b = Σ_k a·b − zp·Σ_k b, exact in int64)
//        dynamic  c = rnd(s_a[m]·(s_b[n]·s32) − s_a[m]·zp[m]·azp_adj[n] + bias[n])
//      in fp32, as vLLM's epilogue does.
#include "codegen/onednn/onednn_backend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "codegen/onednn/small_m.h"
#include "codegen/ref/ref.h"
#include "ir/numeric.h"
#include "ir/params_cpu.h"

// `lhs = value of expr`, or return its error (Result<T> expr).
#define ONEDNN_CONCAT_INNER(a, b) a##b
#define ONEDNN_CONCAT(a, b) ONEDNN_CONCAT_INNER(a, b)
#define ASSIGN_OR_RETURN(lhs, expr)                                                                \
  auto ONEDNN_CONCAT(result_, __LINE__) = (expr);                                                  \
  if (!ONEDNN_CONCAT(result_, __LINE__).is_ok()) return ONEDNN_CONCAT(result_, __LINE__).status(); \
  lhs = std::move(ONEDNN_CONCAT(result_, __LINE__)).value()

namespace jit::codegen::onednn {
namespace {

using dnnl_dt = dnnl::memory::data_type;
using dnnl_tag = dnnl::memory::format_tag;

// ---- the handler header (the ref's format, codegen/ref/ref_cpu.cc) ---------------------------

using ref::HandlerHeader;
using ref::kMmMagic;
using ref::kScaledMmMagic;
constexpr int64_t kHeaderBytes = ref::kHandlerHeaderBytes;

bool is_plain_mm(OpKind op) {
  return op == OpKind::kCreateOnednnMm || op == OpKind::kOnednnMm;
}
bool is_gemm(OpKind op) {
  return is_plain_mm(op) || op == OpKind::kCreateOnednnScaledMm || op == OpKind::kOnednnScaledMm;
}

// Header plus 64 words spread evenly over the payload (first and last included). A handler is
// immutable once created, so this tells apart two handlers that reuse one address (a freed
// handler's memory holding a new one) without reading the whole weight on every call.
uint64_t fingerprint(const Tensor& handler) {
  constexpr int kSamples = 64;
  const auto* base = static_cast<const std::byte*>(handler.data());
  const int64_t size = handler.numel();
  uint64_t words[kSamples + 8] = {};
  std::memcpy(words, base, kHeaderBytes);
  const int64_t span = size - kHeaderBytes - 8;
  if (span >= 0) {
    for (int i = 0; i < kSamples; ++i) {
      const int64_t offset = kHeaderBytes + span * i / (kSamples - 1);
      std::memcpy(&words[8 + i], base + offset, 8);
    }
  }
  return XXH3_64bits(words, sizeof(words)) ^ uint64_t(size);
}

// ---- oneDNN helpers ----------------------------------------------------------------------------

dnnl_dt to_dnnl(DType dtype) {
  switch (dtype) {
    case DType::kF32: return dnnl_dt::f32;
    case DType::kF16: return dnnl_dt::f16;
    case DType::kBF16: return dnnl_dt::bf16;
    case DType::kI8: return dnnl_dt::s8;
    case DType::kI32: return dnnl_dt::s32;
    default: return dnnl_dt::undef;
  }
}

Status dnnl_failure(std::string_view what, const dnnl::error& e) {
  return {StatusCode::kInternal, fmt::format("onednn: {}: {}", what, e.what())};
}

// A 64-byte aligned buffer that only grows (per-thread scratch; see Scratch).
class Buffer {
 public:
  std::byte* get(size_t bytes) {
    if (bytes > size_) {
      const size_t rounded = (bytes + 63) / 64 * 64;
      data_.reset(static_cast<std::byte*>(std::aligned_alloc(64, rounded)));
      size_ = data_ ? rounded : 0;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
};

// Per-thread scratch: padded a rows, c rows or int32 sums, and oneDNN's scratchpad. Calls on
// different threads never share it; a buffer keeps its largest size for the thread's life.
struct Scratch {
  Buffer src, dst, pad;
};
Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// ---- packed weights and primitives -----------------------------------------------------------

// What a packed weight and its primitives depend on: the weight type, K, N. Handlers with the
// same class share primitives (vLLM's class cache), since every primitive is created with the
// class's packed weight descriptor.
//
// Two CPU classes change what oneDNN is given (both decided by oneDNN's effective ISA, which
// is fixed per process once cap_onednn_isa has run):
//  - bf16 below AVX-512 (AVX2 hosts, KILN_ISA=avx2), and f16 everywhere: oneDNN 2.6 has no
//    such matmul there, so the class computes in f32 (`compute`): the weight is packed as f32
//    once, a and the bias are widened per call, and the f32 result is rounded to the type
//    (RNE) once, the same single rounding of an f32 accumulation that oneDNN's bf16 kernels do.
//  - int8 without VNNI (AVX2, AVX-512 before Cascade Lake): oneDNN's int8 kernels multiply
//    with vpmaddubsw, whose pairs (a + 128)·b0 + (a' + 128)·b1 saturate at int16 (2·255·127 =
//    64770 > 32767), so full-range weights give wrong sums. The class splits every weight
//    into b = 64·hi + lo with lo in [−32, 31] and hi in [−2, 2] (each pair then stays below
//    2·255·32 = 16320) as 2N columns [hi | lo], and combine_split_sums forms 64·Σa·hi + Σa·lo:
//    the exact int32 sums, at twice the multiply work.
struct ClassKey {
  bool scaled = false;
  DType dtype = DType::kBF16;  // weight (and a, c) type; kI8 for scaled mm
  int64_t k = 0;
  int64_t n = 0;
  DType compute = DType::kBF16;  // the type oneDNN computes in (f32: f16, bf16 below AVX-512)
  bool split = false;            // int8 weights as [hi | lo] columns (no VNNI)
  int64_t columns() const { return split ? 2 * n : n; }
  auto tie() const { return std::tie(scaled, dtype, k, n, compute, split); }
  bool operator<(const ClassKey& o) const { return tie() < o.tie(); }
};

// The bit of the int8 split: b = kSplitScale·hi + lo.
constexpr int kSplitShift = 6;
constexpr int32_t kSplitScale = 1 << kSplitShift;

// oneDNN's ISA after KILN_ISA's cap (call only after cap_onednn_isa: reading it fixes it).
bool onednn_has_bf16_matmul() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core || isa == dnnl::cpu_isa::avx512_core_vnni ||
         isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}
bool onednn_int8_is_exact() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_vnni || isa == dnnl::cpu_isa::avx512_core_bf16 ||
         isa == dnnl::cpu_isa::avx512_core_amx;
}

ClassKey class_of(const OpSpec& spec) {
  if (is_plain_mm(spec.op)) {
    const auto& p = spec.get<ir::GemmParams>();
    const bool widen =
        p.dtype == DType::kF16 || (p.dtype == DType::kBF16 && !onednn_has_bf16_matmul());
    return {false, p.dtype, p.k, p.n, widen ? DType::kF32 : p.dtype, false};
  }
  const auto& p = spec.get<ir::ScaledGemmParams>();
  return {true, DType::kI8, p.k, p.n, DType::kI8, !onednn_int8_is_exact()};
}

// The rows the weight layout is chosen for (vLLM's probe M): the layout oneDNN prefers for
// prefill-sized M; every other M reuses it.
constexpr int64_t kProbeRows = 128;
// Default per-class primitive capacity when a handler was not made here (vLLM's default).
constexpr int64_t kDefaultPrimitiveCacheSize = 128;
// Packed copies kept at most (least recently used ones beyond it are dropped and re-packed on
// their next use). Far above any model this machine holds; it bounds what handler tensors that
// were freed without release_handler() can pin.
constexpr int64_t kMaxPackedBytes = int64_t(64) << 30;

struct Packed {
  ClassKey cls;
  uint64_t fingerprint = 0;
  dnnl::memory weights;           // in the class's packed layout
  std::vector<float> b_scales;    // scaled mm: N (a per-tensor scale repeated)
  std::vector<int64_t> col_sums;  // scaled mm: Σ_k b[k, n]
  int64_t bytes = 0;
};

// Element i of a `dtype` (f32, bf16 or f16) array as fp32.
float load_float(DType dtype, const void* base, int64_t i) {
  switch (dtype) {
    case DType::kBF16: return numeric::bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16: return numeric::f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

// The weight the reorder packs when it is not the handler's payload ([N, K] row-major) itself:
// for a split class the [2N, K] rows [hi | lo] (see ClassKey), for a class computing bf16 or
// f16 in f32 the payload widened to f32; empty when the payload is packed as it is.
std::vector<std::byte> staged_weight(const ClassKey& cls, const std::byte* payload) {
  const size_t count = size_t(cls.n * cls.k);
  std::vector<std::byte> staged;
  if (cls.split) {
    staged.resize(2 * count);
    const auto* b = reinterpret_cast<const int8_t*>(payload);
    auto* hi = reinterpret_cast<int8_t*>(staged.data());
    int8_t* lo = hi + count;
    for (size_t i = 0; i < count; ++i) {
      // lo = b mod 64 centred on [−32, 31]; hi = (b − lo) / 64 is exact, in [−2, 2].
      const int32_t low = ((int32_t(b[i]) + kSplitScale / 2) & (kSplitScale - 1)) - kSplitScale / 2;
      lo[i] = int8_t(low);
      hi[i] = int8_t((int32_t(b[i]) - low) / kSplitScale);
    }
  } else if (cls.compute != cls.dtype) {
    staged.resize(4 * count);
    auto* wide = reinterpret_cast<float*>(staged.data());
    for (size_t i = 0; i < count; ++i) wide[i] = load_float(cls.dtype, payload, int64_t(i));
  }
  return staged;
}

// A split class's sums: row r of `acc` holds the 2N sums [Σa·hi | Σa·lo]; afterwards its first
// N entries hold Σa·b = 64·Σa·hi + Σa·lo, rows packed N apart (in place: row r's results land
// at or before its own inputs, which are read first).
void combine_split_sums(int32_t* acc, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* hi = acc + r * 2 * n;
    const int32_t* lo = hi + n;
    int32_t* sum = acc + r * n;
    for (int64_t j = 0; j < n; ++j) sum[j] = hi[j] * kSplitScale + lo[j];
  }
}

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc scratchpad;
  std::string impl;
};

struct ClassState {
  dnnl::memory::desc weights;  // the packed layout
  std::string probe_impl;
  int64_t capacity = kDefaultPrimitiveCacheSize;
  std::list<int64_t> lru;  // primitive keys (threads << 32 | rows·2 + bias), most recent first
  std::unordered_map<int64_t,
                     std::pair<std::shared_ptr<const Primitive>, std::list<int64_t>::iterator>>
      primitives;
};

// Everything the backend and its executables share. Internally synchronised.
class State {
 public:
  State() : engine_(dnnl::engine::kind::cpu, 0) {}

  const dnnl::engine& engine() const { return engine_; }

  // The class's packed weight layout, chosen once from a primitive for kProbeRows rows with
  // format_tag::any weights. An error when oneDNN has no matmul for the types, or only its
  // reference implementation.
  Result<dnnl::memory::desc> class_weights(const ClassKey& cls) {
    std::lock_guard lock(mutex_);
    auto it = classes_.find(cls);
    if (it != classes_.end()) return it->second.weights;
    try {
      const dnnl_dt w = to_dnnl(cls.compute);
      const dnnl_dt dst = cls.scaled ? dnnl_dt::s32 : w;
      const dnnl::memory::desc src_md({kProbeRows, cls.k}, w, dnnl_tag::ab);
      const dnnl::memory::desc w_md({cls.k, cls.columns()}, w, dnnl_tag::any);
      const dnnl::memory::desc dst_md({kProbeRows, cls.columns()}, dst, dnnl_tag::ab);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, w_md, dst_md), attr,
                                            engine_);
      const std::string impl = pd.impl_info_str();
      if (impl.rfind("ref", 0) == 0) {
        return Status(StatusCode::kUnsupported,
                      fmt::format("oneDNN offers only its reference kernel ({}) for {} matmul",
                                  impl, dtype_name(cls.dtype)));
      }
      ClassState& state = classes_[cls];
      state.weights = pd.weights_desc();
      state.probe_impl = impl;
      return state.weights;
    } catch (const dnnl::error& e) {
      return Status(StatusCode::kUnsupported,
                    fmt::format("oneDNN {} has no {} matmul on this CPU ({})",
                                fmt::format("{}.{}.{}", dnnl_version()->major,
                                            dnnl_version()->minor, dnnl_version()->patch),
                                dtype_name(cls.dtype), e.what()));
    }
  }

  // The primitive for `rows` rows (a bucket) of class `cls`, with or without a bias operand.
  Result<std::shared_ptr<const Primitive>> primitive(const ClassKey& cls, int64_t rows, bool bias) {
    ASSIGN_OR_RETURN(const dnnl::memory::desc weights, class_weights(cls));
    // A oneDNN primitive keeps the OpenMP thread count it was created with (measured: made at
    // 1 thread, it ran at the 1-thread speed after omp_set_num_threads(2)), so the count is
    // part of the key: a caller that changes it (torch.set_num_threads) gets new primitives.
    const int64_t key = (int64_t(omp_get_max_threads()) << 32) | (rows * 2 + int64_t(bias));
    {
      std::lock_guard lock(mutex_);
      ClassState& state = classes_[cls];
      auto it = state.primitives.find(key);
      if (it != state.primitives.end()) {
        state.lru.splice(state.lru.begin(), state.lru, it->second.second);
        stats_.primitive_hits++;
        return it->second.first;
      }
    }
    // Created outside the lock (oneDNN generates its kernels here: milliseconds).
    auto made = std::make_shared<Primitive>();
    try {
      const dnnl_dt w = to_dnnl(cls.compute);
      const dnnl_dt dst = cls.scaled ? dnnl_dt::s32 : w;
      const dnnl::memory::desc src_md({rows, cls.k}, w, dnnl_tag::ab);
      const dnnl::memory::desc dst_md({rows, cls.columns()}, dst, dnnl_tag::ab);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::matmul::desc desc =
          bias ? dnnl::matmul::desc(src_md, weights,
                                    dnnl::memory::desc({1, cls.n}, w, dnnl_tag::ab), dst_md)
               : dnnl::matmul::desc(src_md, weights, dst_md);
      const dnnl::matmul::primitive_desc pd(desc, attr, engine_);
      made->matmul = dnnl::matmul(pd);
      made->scratchpad = pd.scratchpad_desc();
      made->impl = pd.impl_info_str();
    } catch (const dnnl::error& e) {
      return dnnl_failure(fmt::format("matmul for {} rows, K = {}, N = {}", rows, cls.k, cls.n), e);
    }
    std::lock_guard lock(mutex_);
    ClassState& state = classes_[cls];
    stats_.primitives_created++;
    auto [it, inserted] = state.primitives.try_emplace(key);
    if (inserted) {
      state.lru.push_front(key);
      it->second = {made, state.lru.begin()};
    }
    while (int64_t(state.primitives.size()) > state.capacity) {
      state.primitives.erase(state.lru.back());
      state.lru.pop_back();
    }
    return it->second.first;
  }

  void set_capacity(const ClassKey& cls, int64_t capacity) {
    std::lock_guard lock(mutex_);
    classes_[cls].capacity = std::max<int64_t>(capacity, 1);
  }

  // Reorders the handler's [N, K] weight into the class layout and registers the copy under
  // the handler's address. `spec` is any of the four ops (they share params).
  Result<std::shared_ptr<const Packed>> pack(const OpSpec& spec, const Tensor& handler, bool lazy) {
    const ClassKey cls = class_of(spec);
    ASSIGN_OR_RETURN(const dnnl::memory::desc weights, class_weights(cls));
    auto packed = std::make_shared<Packed>();
    packed->cls = cls;
    auto* payload = static_cast<std::byte*>(handler.data()) + kHeaderBytes;
    if (cls.scaled) {
      const auto& p = spec.get<ir::ScaledGemmParams>();
      const int64_t count = p.per_channel ? p.n : 1;
      // One scale per output column (a per-tensor scale repeated), for a branch-free epilogue.
      std::vector<float> scales(static_cast<size_t>(count));
      std::memcpy(scales.data(), payload, size_t(4 * count));
      packed->b_scales.resize(size_t(p.n));
      for (int64_t n = 0; n < p.n; ++n)
        packed->b_scales[size_t(n)] = scales[p.per_channel ? size_t(n) : 0];
      payload += 4 * count;
      // Column sums of b for the static zero point: Σ_k b[k, n] over the [N, K] payload.
      packed->col_sums.assign(size_t(p.n), 0);
      const auto* b = reinterpret_cast<const int8_t*>(payload);
      for (int64_t n = 0; n < p.n; ++n) {
        int64_t sum = 0;
        for (int64_t k = 0; k < p.k; ++k) sum += b[n * p.k + k];
        packed->col_sums[size_t(n)] = sum;
      }
    }
    // What the reorder reads: the payload itself, or its split / widened copy.
    std::vector<std::byte> staged = staged_weight(cls, payload);
    void* plain_data = staged.empty() ? static_cast<void*>(payload) : staged.data();
    try {
      // The payload is b transposed ([N, K] row-major), i.e. b [K, N] with strides (1, K).
      const dnnl::memory::desc plain({cls.k, cls.columns()}, to_dnnl(cls.compute),
                                     dnnl::memory::dims{1, cls.k});
      dnnl::memory src(plain, engine_, plain_data);
      packed->weights = dnnl::memory(weights, engine_);
      dnnl::stream stream(engine_);
      dnnl::reorder(src, packed->weights).execute(stream, src, packed->weights);
      stream.wait();
    } catch (const dnnl::error& e) {
      return dnnl_failure("weight reorder", e);
    }
    packed->bytes = int64_t(weights.get_size());
    packed->fingerprint = fingerprint(handler);
    std::lock_guard lock(mutex_);
    stats_.packs++;
    if (lazy) stats_.lazy_packs++;
    erase_locked(handler.data());
    lru_.push_front(handler.data());
    packed_[handler.data()] = {packed, lru_.begin()};
    packed_bytes_ += packed->bytes;
    while (packed_bytes_ > kMaxPackedBytes && lru_.size() > 1) erase_locked(lru_.back());
    return std::shared_ptr<const Packed>(packed);
  }

  // The packed copy of `handler` (already validated against `spec`), packing it if this
  // backend has none that matches its fingerprint.
  Result<std::shared_ptr<const Packed>> find_or_pack(const OpSpec& spec, const Tensor& handler) {
    const uint64_t fp = fingerprint(handler);
    {
      std::lock_guard lock(mutex_);
      auto it = packed_.find(handler.data());
      if (it != packed_.end() && it->second.first->fingerprint == fp) {
        lru_.splice(lru_.begin(), lru_, it->second.second);
        return it->second.first;
      }
    }
    return pack(spec, handler, true);
  }

  void release(const void* handler_data) {
    std::lock_guard lock(mutex_);
    erase_locked(handler_data);
  }

  // Counts a GEMM call by the path that served it (relaxed: statistics only).
  void count_call(bool small_m) {
    (small_m ? small_m_calls_ : onednn_calls_).fetch_add(1, std::memory_order_relaxed);
  }

  Stats stats() const {
    std::lock_guard lock(mutex_);
    Stats s = stats_;
    s.small_m_calls = small_m_calls_.load();
    s.onednn_calls = onednn_calls_.load();
    s.packed_entries = int64_t(packed_.size());
    s.packed_bytes = packed_bytes_;
    return s;
  }

 private:
  void erase_locked(const void* key) {
    auto it = packed_.find(key);
    if (it == packed_.end()) return;
    packed_bytes_ -= it->second.first->bytes;
    lru_.erase(it->second.second);
    packed_.erase(it);
  }

  dnnl::engine engine_;
  mutable std::mutex mutex_;
  std::map<ClassKey, ClassState> classes_;
  std::list<const void*> lru_;
  std::unordered_map<const void*,
                     std::pair<std::shared_ptr<const Packed>, std::list<const void*>::iterator>>
      packed_;
  int64_t packed_bytes_ = 0;
  Stats stats_;
  // Calls by path (count_call; read by stats()).
  std::atomic<int64_t> small_m_calls_{0};
  std::atomic<int64_t> onednn_calls_{0};
};

// Runs `prim` on dense row-major src/dst pointers and the packed weight.
Status execute(const State& state, const Primitive& prim, const ClassKey& cls, int64_t rows,
               const void* src, const Packed& packed, const void* bias, void* dst) {
  try {
    const dnnl::engine& engine = state.engine();
    const dnnl_dt w = to_dnnl(cls.compute);
    const dnnl_dt dst_dt = cls.scaled ? dnnl_dt::s32 : w;
    dnnl::memory src_mem({{rows, cls.k}, w, dnnl_tag::ab}, engine, const_cast<void*>(src));
    dnnl::memory dst_mem({{rows, cls.columns()}, dst_dt, dnnl_tag::ab}, engine, dst);
    dnnl::memory pad_mem(
        prim.scratchpad, engine,
        thread_scratch().pad.get(std::max<size_t>(prim.scratchpad.get_size(), 64)));
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src_mem},
                                                  {DNNL_ARG_WEIGHTS, packed.weights},
                                                  {DNNL_ARG_DST, dst_mem},
                                                  {DNNL_ARG_SCRATCHPAD, pad_mem}};
    if (bias != nullptr) {
      args.emplace(DNNL_ARG_BIAS,
                   dnnl::memory({{1, cls.n}, w, dnnl_tag::ab}, engine, const_cast<void*>(bias)));
    }
    dnnl::stream stream(engine);
    prim.matmul.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    return dnnl_failure("matmul execute", e);
  }
  return Status::ok();
}

// Copies `rows` rows of `row_bytes` from `src` (rows `src_stride_bytes` apart) into dense
// `dst` and zero-fills rows [rows, bucket) so the padded rows compute harmless zeros.
void gather_rows(std::byte* dst, const std::byte* src, int64_t rows, int64_t bucket,
                 int64_t row_bytes, int64_t src_stride_bytes) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * row_bytes, src + r * src_stride_bytes, size_t(row_bytes));
  }
  std::memset(dst + rows * row_bytes, 0, size_t((bucket - rows) * row_bytes));
}

// The int8 epilogue over rows [0, rows) of `acc` (see the file comment). Each step is a loop
// over one contiguous row with no branch inside, so the compiler vectorises it; the AVX-512
// build below runs 16 lanes where the CPU has them (the generic one 4).
struct Epilogue {
  const ir::ScaledGemmParams* p;
  const float* b_scales;    // N entries (a per-tensor scale repeated)
  const int64_t* col_sums;  // N entries
  const int32_t* acc;       // rows x N
  const float* a_scales;    // indexed by row0 + r (dynamic) or 0
  const int32_t* azp;       // same indexing, or nullptr
  const float* azp_adj;     // N entries or nullptr
  const float* bias;        // N fp32 entries or nullptr
  std::byte* c;             // rows x N of out_dtype
  int64_t row0 = 0;
  int64_t rows = 0;
};

// fp32 -> bf16 bits with round-to-nearest-even; NaN stays a quiet NaN (numeric::f32_to_bf16
// without the branch).
[[gnu::always_inline]] inline uint16_t bf16_bits(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return uint16_t((u & 0x7FFFFFFFu) > 0x7F800000u ? (u >> 16) | 0x40u : rounded);
}

// `count` fp32 values into `dst` as `dtype`: bf16 (bf16_bits) or f16 rounded to nearest even,
// f32 copied. The int8 epilogue's rows and the widened matmul's output rows.
[[gnu::always_inline]] inline void store_floats(DType dtype, const float* src, int64_t count,
                                                void* dst) {
  switch (dtype) {
    case DType::kBF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) out[i] = bf16_bits(src[i]);
      return;
    }
    case DType::kF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) out[i] = numeric::f32_to_f16(src[i]);
      return;
    }
    default: std::memcpy(dst, src, size_t(4 * count));
  }
}

[[gnu::always_inline]] inline void epilogue_rows(const Epilogue& e, int64_t r_begin, int64_t r_end,
                                                 float* t) {
  const ir::ScaledGemmParams& p = *e.p;
  const int64_t n_count = p.n;
  for (int64_t r = r_begin; r < r_end; ++r) {
    const int64_t m = p.dynamic ? e.row0 + r : 0;
    const float s_a = e.a_scales[m];
    const int32_t zp = e.azp != nullptr ? e.azp[m] : 0;
    const int32_t* acc = e.acc + r * n_count;
    if (p.dynamic) {
      for (int64_t n = 0; n < n_count; ++n) t[n] = s_a * (e.b_scales[n] * float(acc[n]));
      if (e.azp_adj != nullptr && zp != 0) {
        const float s_zp = s_a * float(zp);
        for (int64_t n = 0; n < n_count; ++n) t[n] -= s_zp * e.azp_adj[n];
      }
    } else if (zp == 0) {
      for (int64_t n = 0; n < n_count; ++n) t[n] = (s_a * e.b_scales[n]) * float(acc[n]);
    } else {
      // Σ (a − zp)·b = Σ a·b − zp·colsum, exact in int64.
      for (int64_t n = 0; n < n_count; ++n) {
        t[n] = (s_a * e.b_scales[n]) * float(int64_t(acc[n]) - int64_t(zp) * e.col_sums[n]);
      }
    }
    if (e.bias != nullptr) {
      for (int64_t n = 0; n < n_count; ++n) t[n] += e.bias[n];
    }
    store_floats(p.out_dtype, t, n_count, e.c + r * n_count * dtype_size(p.out_dtype));
  }
}

[[gnu::target("avx512f,avx512bw,avx512dq,avx512vl")]] void epilogue_rows_avx512(const Epilogue& e,
                                                                                int64_t r_begin,
                                                                                int64_t r_end,
                                                                                float* t) {
  epilogue_rows(e, r_begin, r_end, t);
}
void epilogue_rows_generic(const Epilogue& e, int64_t r_begin, int64_t r_end, float* t) {
  epilogue_rows(e, r_begin, r_end, t);
}

// Runs the epilogue, across the OpenMP threads when there is enough of it.
void run_epilogue(const Epilogue& e) {
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const auto rows_fn = avx512 ? epilogue_rows_avx512 : epilogue_rows_generic;
  const int64_t n_count = e.p->n;
#pragma omp parallel if (e.rows * n_count >= (int64_t(1) << 16))
  {
    thread_local std::vector<float> t;
    t.resize(size_t(n_count));
    const int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t begin = e.rows * id / threads, end = e.rows * (id + 1) / threads;
    rows_fn(e, begin, end, t.data());
  }
}

// Runs chunk(row0, rows, bucket, primitive) over an m_total-row call in chunks of at most
// chunk_rows rows, each with the primitive made for its bucket (with a bias operand or not);
// the first error ends the call.
template <class Chunk>
Status for_each_chunk(State& state, const ClassKey& cls, int64_t m_total, int64_t chunk_rows,
                      bool bias, const Chunk& chunk) {
  for (int64_t row0 = 0; row0 < m_total; row0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, m_total - row0);
    const int64_t bucket = m_bucket(rows);
    ASSIGN_OR_RETURN(const std::shared_ptr<const Primitive> prim,
                     state.primitive(cls, bucket, bias));
    KILN_RETURN_IF_ERROR(chunk(row0, rows, bucket, *prim));
  }
  return Status::ok();
}

// Calls with at most `rows` rows run kiln's small-M kernel in `variant` (small_m.h).
struct SmallM {
  int64_t rows = 0;
  small_m::Variant variant = small_m::Variant::kNone;
};

// onednn_mm for a bf16 or f16 class that computes in f32 (see ClassKey): per chunk, the a rows
// widened into a zero-padded f32 scratch, the f32 primitive, the f32 rows rounded into c once.
Status run_mm_widened(State& state, const Packed& packed, int64_t chunk_rows,
                      const KernelArgs& args) {
  const ClassKey& cls = packed.cls;
  const Tensor& c = args.tensor(0);
  const Tensor& a = args.tensor(1);
  const Tensor& bias = args.tensor(2);
  const int64_t m_total = c.size(0);
  std::vector<float> bias_f;
  if (bias.defined()) {
    bias_f.resize(size_t(cls.n));
    for (int64_t j = 0; j < cls.n; ++j) bias_f[size_t(j)] = load_float(cls.dtype, bias.data(), j);
  }
  Scratch& scratch = thread_scratch();
  return for_each_chunk(
      state, cls, m_total, chunk_rows, bias.defined(),
      [&](int64_t row0, int64_t rows, int64_t bucket, const Primitive& prim) {
        auto* src = reinterpret_cast<float*>(scratch.src.get(size_t(bucket * cls.k * 4)));
        for (int64_t r = 0; r < rows; ++r) {
          const uint16_t* a_row = a.data_as<const uint16_t>() + (row0 + r) * a.stride(0);
          float* dst_row = src + r * cls.k;
          for (int64_t i = 0; i < cls.k; ++i) dst_row[i] = load_float(cls.dtype, a_row, i);
        }
        std::fill(src + rows * cls.k, src + bucket * cls.k, 0.0f);
        auto* dst = reinterpret_cast<float*>(scratch.dst.get(size_t(bucket * cls.n * 4)));
        KILN_RETURN_IF_ERROR(execute(state, prim, cls, bucket, src, packed,
                                     bias_f.empty() ? nullptr : bias_f.data(), dst));
        store_floats(cls.dtype, dst, rows * cls.n, c.data_as<uint16_t>() + row0 * cls.n);
        return Status::ok();
      });
}

// onednn_mm(c, a, bias?, handler).
Status run_mm(State& state, const OpSpec& spec, int64_t chunk_rows, const SmallM& small,
              const KernelArgs& args) {
  const auto& p = spec.get<ir::GemmParams>();
  const Tensor& c = args.tensor(0);
  const Tensor& a = args.tensor(1);
  const Tensor& bias = args.tensor(2);
  const Tensor& handler = args.tensor(3);
  KILN_RETURN_IF_ERROR(ref::check_onednn_handler(spec, handler));
  const int64_t m_total = c.size(0);
  if (m_total == 0) return Status::ok();
  if (m_total <= small.rows) {
    // kiln's small-M kernel streams the handler's own [N, K] payload: no packed copy needed.
    small_m::mm(small.variant, p.dtype, m_total, p.k, p.n, a.data(), a.stride(0),
                static_cast<const std::byte*>(handler.data()) + kHeaderBytes,
                bias.defined() ? bias.data() : nullptr, c.data());
    state.count_call(/*small_m=*/true);
    return Status::ok();
  }
  state.count_call(/*small_m=*/false);
  ASSIGN_OR_RETURN(const std::shared_ptr<const Packed> packed, state.find_or_pack(spec, handler));
  const ClassKey cls = packed->cls;
  if (cls.compute != cls.dtype) return run_mm_widened(state, *packed, chunk_rows, args);
  const int64_t esize = int64_t(dtype_size(p.dtype));
  Scratch& scratch = thread_scratch();
  return for_each_chunk(
      state, cls, m_total, chunk_rows, bias.defined(),
      [&](int64_t row0, int64_t rows, int64_t bucket, const Primitive& prim) {
        const std::byte* a_rows =
            static_cast<const std::byte*>(a.data()) + row0 * a.stride(0) * esize;
        std::byte* c_rows = static_cast<std::byte*>(c.data()) + row0 * p.n * esize;
        const bool dense_a = rows == 1 || a.stride(0) == p.k;
        const void* src = a_rows;
        if (rows != bucket || !dense_a) {
          std::byte* padded = scratch.src.get(size_t(bucket * p.k * esize));
          gather_rows(padded, a_rows, rows, bucket, p.k * esize, a.stride(0) * esize);
          src = padded;
        }
        void* dst = rows == bucket ? static_cast<void*>(c_rows)
                                   : scratch.dst.get(size_t(bucket * p.n * esize));
        KILN_RETURN_IF_ERROR(execute(state, prim, cls, bucket, src, *packed,
                                     bias.defined() ? bias.data() : nullptr, dst));
        if (dst != c_rows) std::memcpy(c_rows, dst, size_t(rows * p.n * esize));
        return Status::ok();
      });
}

// onednn_scaled_mm(c, a, a_scales, azp?, azp_adj?, bias?, handler).
Status run_scaled_mm(State& state, const OpSpec& spec, int64_t chunk_rows, const SmallM& small,
                     const KernelArgs& args) {
  const auto& p = spec.get<ir::ScaledGemmParams>();
  const Tensor& c = args.tensor(0);
  const Tensor& a = args.tensor(1);
  const auto* a_scales = args.tensor(2).data_as<const float>();
  const auto* azp = p.azp ? args.tensor(3).data_as<const int32_t>() : nullptr;
  const auto* azp_adj = p.azp && p.dynamic ? args.tensor(4).data_as<const float>() : nullptr;
  const Tensor& bias = args.tensor(5);
  const Tensor& handler = args.tensor(6);
  KILN_RETURN_IF_ERROR(ref::check_onednn_handler(spec, handler));
  const int64_t m_total = c.size(0);
  if (m_total == 0) return Status::ok();
  ASSIGN_OR_RETURN(const std::shared_ptr<const Packed> packed, state.find_or_pack(spec, handler));
  const ClassKey cls = packed->cls;
  const int64_t out_size = int64_t(dtype_size(p.out_dtype));
  Scratch& scratch = thread_scratch();
  // The bias in fp32 once per call (it is of the output type).
  std::vector<float> bias_f;
  if (bias.defined()) {
    bias_f.resize(size_t(p.n));
    for (int64_t n = 0; n < p.n; ++n) bias_f[size_t(n)] = load_float(p.out_dtype, bias.data(), n);
  }
  Epilogue e;
  e.p = &p;
  e.b_scales = packed->b_scales.data();
  e.col_sums = packed->col_sums.data();
  e.a_scales = a_scales;
  e.azp = azp;
  e.azp_adj = azp_adj;
  e.bias = bias_f.empty() ? nullptr : bias_f.data();
  if (m_total <= small.rows) {
    // kiln's small-M kernel: exact s32 sums from the handler's [N, K] payload, then the same
    // epilogue as the oneDNN path.
    auto* acc = reinterpret_cast<int32_t*>(scratch.dst.get(size_t(m_total * p.n * 4)));
    void* a_scratch = scratch.src.get(size_t(2 * m_total * p.k));
    small_m::mm_s8(small.variant, m_total, p.k, p.n, a.data_as<const int8_t>(), a.stride(0),
                   reinterpret_cast<const int8_t*>(static_cast<const std::byte*>(handler.data()) +
                                                   kHeaderBytes + 4 * (p.per_channel ? p.n : 1)),
                   packed->col_sums.data(), a_scratch, acc);
    e.acc = acc;
    e.c = static_cast<std::byte*>(c.data());
    e.row0 = 0;
    e.rows = m_total;
    run_epilogue(e);
    state.count_call(/*small_m=*/true);
    return Status::ok();
  }
  state.count_call(/*small_m=*/false);
  return for_each_chunk(
      state, cls, m_total, chunk_rows, false,
      [&](int64_t row0, int64_t rows, int64_t bucket, const Primitive& prim) {
        const std::byte* a_rows = static_cast<const std::byte*>(a.data()) + row0 * p.k;
        const void* src = a_rows;
        if (rows != bucket) {
          std::byte* padded = scratch.src.get(size_t(bucket * p.k));
          gather_rows(padded, a_rows, rows, bucket, p.k, p.k);
          src = padded;
        }
        auto* acc = reinterpret_cast<int32_t*>(scratch.dst.get(size_t(bucket * cls.columns() * 4)));
        KILN_RETURN_IF_ERROR(execute(state, prim, cls, bucket, src, *packed, nullptr, acc));
        if (cls.split) combine_split_sums(acc, rows, p.n);
        e.acc = acc;
        e.c = static_cast<std::byte*>(c.data()) + row0 * p.n * out_size;
        e.row0 = row0;
        e.rows = rows;
        run_epilogue(e);
        return Status::ok();
      });
}

// The create ops: the ref's bytes (so handlers are interchangeable), then the packed copy.
Status run_create(State& state, const OpSpec& spec, const KernelArgs& args) {
  KILN_RETURN_IF_ERROR(ref::run(spec, args));
  state.set_capacity(class_of(spec), int64_t(args.scalar(0)));
  return state.pack(spec, args.tensor(0), false).status();
}

// The weight type the small-M kernel streams for `spec` (any of the four GEMM ops).
DType small_m_dtype(const OpSpec& spec) {
  return is_plain_mm(spec.op) ? spec.get<ir::GemmParams>().dtype : DType::kI8;
}

// The small-M bound for `spec` at ISA level `isa` (KILN_ISA): the default of the kernel
// variant the CPU and the level allow (small_m::variant_for: AVX-512 with BF16 / VNNI, or
// AVX2 + FMA), else 0 (always oneDNN).
int64_t default_small_m_rows(const OpSpec& spec, X86Isa isa) {
  const DType dtype = small_m_dtype(spec);
  return small_m::default_max_rows(dtype, small_m::variant_for(dtype, isa));
}

// The small-M bound measured for `spec`'s weight type at `isa` (small_m::measured_max_rows):
// what the tuning space offers beside the default; 0 where the kernel does not run.
int64_t measured_small_m_rows(const OpSpec& spec, X86Isa isa) {
  const DType dtype = small_m_dtype(spec);
  return small_m::measured_max_rows(dtype, small_m::variant_for(dtype, isa));
}

// oneDNN's ISA cap for kiln's level: avx2 → avx2, avx512 → avx512_core_vnni (kiln's level has
// no separate VNNI step), avx512_bf16, avx512_vbmi and avx512_fp16 → avx512_core_bf16 (this
// oneDNN has no FP16 level, and those levels add nothing it uses for GEMM), amx → all.
dnnl::cpu_isa onednn_isa_for(X86Isa isa) {
  switch (isa) {
    case X86Isa::kAvx2: return dnnl::cpu_isa::avx2;
    case X86Isa::kAvx512: return dnnl::cpu_isa::avx512_core_vnni;
    case X86Isa::kAvx512Bf16:
    case X86Isa::kAvx512Vbmi:
    case X86Isa::kAvx512Fp16: return dnnl::cpu_isa::avx512_core_bf16;
    default: return dnnl::cpu_isa::all;
  }
}

// Caps oneDNN at `isa` (the target's level, i.e. KILN_ISA). dnnl::set_max_cpu_isa is
// process-wide and only takes effect before oneDNN's first kernel generation, so the first
// call fixes the cap for the process; a later call asking for a lower level than the one
// fixed is an error (never a silent run above the cap). kNone (no x86 level) leaves oneDNN
// uncapped.
Status cap_onednn_isa(X86Isa isa) {
  static std::mutex mutex;
  static bool fixed = false;
  static X86Isa fixed_isa = X86Isa::kAmx;
  if (isa == X86Isa::kNone) isa = X86Isa::kAmx;
  std::lock_guard lock(mutex);
  if (!fixed) {
    fixed = true;
    fixed_isa = isa;
    if (isa != X86Isa::kAmx) {
      try {
        dnnl::set_max_cpu_isa(onednn_isa_for(isa));
      } catch (const dnnl::error& e) {
        // oneDNN already generated code (someone used it before kiln): its ISA is fixed.
        fixed_isa = X86Isa::kAmx;
        return Status(StatusCode::kUnsupported,
                      fmt::format("onednn: cannot cap oneDNN at KILN_ISA={} (oneDNN was used "
                                  "before kiln and its ISA is fixed per process: {})",
                                  x86_isa_name(isa), e.what()));
      }
    }
    return Status::ok();
  }
  if (isa < fixed_isa) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("onednn: oneDNN's ISA is process-wide and already fixed at {}; "
                              "cannot serve a target capped at {}",
                              x86_isa_name(fixed_isa), x86_isa_name(isa)));
  }
  return Status::ok();
}

class OnednnExecutable final : public Executable {
 public:
  OnednnExecutable(OpSpec spec, int64_t chunk_rows, SmallM small_m, std::shared_ptr<State> state)
      : spec_(std::move(spec)),
        chunk_rows_(chunk_rows),
        small_m_(small_m),
        state_(std::move(state)) {}

  Status run(const KernelArgs& args) const override {
    for (int i = 0; i < args.tensor_count; ++i) {
      const Tensor& t = args.tensor(i);
      if (t.defined() && t.device().kind != Device::Kind::kCpu) {
        return invalid_argument(fmt::format("{}: tensor argument {} ({}) is not on the cpu",
                                            op_name(spec_.op), i, t.describe()));
      }
    }
    switch (spec_.op) {
      case OpKind::kCreateOnednnMm:
      case OpKind::kCreateOnednnScaledMm: return run_create(*state_, spec_, args);
      case OpKind::kOnednnMm: return run_mm(*state_, spec_, chunk_rows_, small_m_, args);
      case OpKind::kOnednnScaledMm:
        return run_scaled_mm(*state_, spec_, chunk_rows_, small_m_, args);
      default:
        return {StatusCode::kInternal,
                fmt::format("onednn: {} is not a GEMM op", op_name(spec_.op))};
    }
  }

 private:
  OpSpec spec_;
  int64_t chunk_rows_;
  SmallM small_m_;  // calls with at most small_m_.rows rows run kiln's small-M kernel
  std::shared_ptr<State> state_;
};

class OnednnBackend final : public Backend {
 public:
  OnednnBackend() : state_(std::make_shared<State>()) {}

  BackendKind kind() const override { return BackendKind::kOnednn; }

  Support supports(const OpSpec& spec, const Target& target) const override {
    if (!is_gemm(spec.op)) {
      return Support::no(fmt::format("onednn serves only the GEMM ops, not {}", op_name(spec.op)));
    }
    const Status valid = validate(spec);
    if (!valid.is_ok()) return Support::no(valid.message());
    if (const Status capped = cap_onednn_isa(target.isa); !capped.is_ok()) {
      return Support::no(capped.message());
    }
    const auto weights = state_->class_weights(class_of(spec));
    if (!weights.is_ok()) {
      return Support::no(fmt::format("{} (allowed dtypes: f32, bf16, f16; int8 for scaled mm)",
                                     weights.status().message()));
    }
    return Support::yes();
  }

  bool generates(OpKind op, const Target&) const override { return is_gemm(op); }

  // oneDNN chooses its own blocking; kiln chooses how many rows one primitive call takes
  // (chunk_rows, see kChunkRowChoices). The first entry is the default.
  // A second knob, small_m: calls with at most that many rows run kiln's small-M kernel
  // (small_m.h) instead of oneDNN; the default is the kernel's bound for the weight type on
  // this ISA and host (small_m::default_max_rows: 0 on Zen 5), and the other of that bound and
  // 0 (always oneDNN) is offered so the tuner compares the two.
  // The knobs `op` reads: the two above for the matmuls, none for the handler constructors.
  static std::span<const std::string_view> knob_names(OpKind op) {
    static constexpr std::string_view kMatmulKnobs[] = {kChunkRowsKnob, kSmallMKnob};
    if (op == OpKind::kOnednnMm || op == OpKind::kOnednnScaledMm) return kMatmulKnobs;
    return {};
  }

  std::vector<Config> configs(const OpSpec& spec, const Target& target) const override {
    if (spec.op != OpKind::kOnednnMm && spec.op != OpKind::kOnednnScaledMm) return {Config{}};
    const int64_t small = default_small_m_rows(spec, target.isa);
    const auto config_of = [](int64_t chunk_rows, int64_t small_m) {
      return Config()
          .set(std::string(kChunkRowsKnob), chunk_rows)
          .set(std::string(kSmallMKnob), small_m);
    };
    std::vector<Config> space{config_of(kDefaultChunkRows, small)};
    for (int64_t rows : kChunkRowChoices) {
      if (rows != kDefaultChunkRows) space.push_back(config_of(rows, small));
    }
    const int64_t measured = measured_small_m_rows(spec, target.isa);
    if (small > 0) {
      space.push_back(config_of(kDefaultChunkRows, 0));
    } else if (measured > 0) {
      space.push_back(config_of(kDefaultChunkRows, measured));
    }
    return space;
  }

  Result<Artifact> lower(const OpSpec& spec, const Config& config,
                         const Target& target) const override {
    const Support support = supports(spec, target);
    if (!support.ok) return Status(StatusCode::kUnsupported, support.reason);
    KILN_RETURN_IF_ERROR(check_knob_names("onednn", spec, config, knob_names(spec.op)));
    Artifact artifact;
    artifact.config = config;
    return artifact;
  }

  Result<std::shared_ptr<const Executable>> load(const OpSpec& spec, const Artifact& artifact,
                                                 const Target& target) const override {
    const Support support = supports(spec, target);
    if (!support.ok) return Status(StatusCode::kUnsupported, support.reason);
    const int64_t chunk_rows = artifact.config.get(kChunkRowsKnob, kDefaultChunkRows);
    if (std::find(std::begin(kChunkRowChoices), std::end(kChunkRowChoices), chunk_rows) ==
        std::end(kChunkRowChoices)) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("onednn config: {}={} is not allowed; allowed: {}", kChunkRowsKnob,
                                chunk_rows, fmt::join(kChunkRowChoices, ", ")));
    }
    const int64_t small_default = default_small_m_rows(spec, target.isa);
    const int64_t small_m_rows = artifact.config.get(kSmallMKnob, small_default);
    const bool kernel_runs = measured_small_m_rows(spec, target.isa) > 0;
    if (small_m_rows < 0 || small_m_rows > small_m::kMaxRows ||
        (small_m_rows > 0 && !kernel_runs)) {
      return Status(
          StatusCode::kInvalidArgument,
          fmt::format("onednn config: {}={} is not allowed here; allowed: 0 … {} on a CPU and "
                      "KILN_ISA level that run the small-M kernel for this dtype, else 0",
                      kSmallMKnob, small_m_rows, small_m::kMaxRows));
    }
    return std::shared_ptr<const Executable>(std::make_shared<OnednnExecutable>(
        spec, chunk_rows,
        SmallM{small_m_rows, small_m::variant_for(small_m_dtype(spec), target.isa)}, state_));
  }

  std::string_view codegen_version() const override { return "onednn-1"; }
  bool cacheable() const override { return false; }

  State& state() const { return *state_; }

 private:
  std::shared_ptr<State> state_;
};

const OnednnBackend* as_onednn(const Backend& backend) {
  return dynamic_cast<const OnednnBackend*>(&backend);
}

}  // namespace

int64_t m_bucket(int64_t m) {
  if (m <= 8) return std::max<int64_t>(m, 1);
  // 2^e <= m < 2^(e+1); round up to a multiple of 2^(e-2).
  int e = 0;
  while ((int64_t(1) << (e + 1)) <= m) ++e;
  const int64_t step = int64_t(1) << (e - 2);
  return (m + step - 1) / step * step;
}

std::unique_ptr<Backend> make_backend() {
  return std::make_unique<OnednnBackend>();
}

Stats stats(const Backend& backend) {
  const OnednnBackend* b = as_onednn(backend);
  return b != nullptr ? b->state().stats() : Stats{};
}

void release_handler(const Backend& backend, const void* handler_data) {
  if (const OnednnBackend* b = as_onednn(backend)) b->state().release(handler_data);
}

Result<std::string> implementation_name(const Backend& backend, const OpSpec& spec, int64_t m) {
  const OnednnBackend* b = as_onednn(backend);
  if (b == nullptr) return Status(StatusCode::kInvalidArgument, "not an onednn backend");
  if (!is_gemm(spec.op)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{} is not a GEMM op", op_name(spec.op)));
  }
  ASSIGN_OR_RETURN(
      const std::shared_ptr<const Primitive> prim,
      b->state().primitive(class_of(spec), m_bucket(std::min(m, kMaxBucketRows)), false));
  return prim->impl;
}

}  // namespace jit::codegen::onednn
