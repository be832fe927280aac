// Reference CPU attention (scheduler metadata, cache write, attention) and oneDNN GEMM ops,
// written from spec/norm_act_cpu_ops.md §3, §4 and §5. Plain loops, double accumulation: the
// oracle the generated kernels are compared with, never tuned for speed.
//
// Precision decisions:
//   attention   logits s_j = scale·<q, k_j> in double from the exact fp32 values of q and k;
//               softcap c·tanh(s/c) with std::tanh in double (robust: no (e^x − e^−x)/(e^x +
//               e^−x) NaN for large |x|); ALiBi slope·(j − p_i) after the softcap; softmax and
//               P·V in double per KV chunk, chunks merged as in §3.5 (m = max m_k, acc = Σ
//               acc_k e^(m_k − m), sum = Σ sum_k e^(m_k − m)); the sink joins the merged
//               denominator once: sum += e^(σ − m) with m = max(m, σ). One rounding to T.
//   mm          c = rnd_T(Σ_k a·b + bias) with the sum in double (exact for the products of
//               two fp32 values; the sum itself rounds only at double precision).
//   scaled mm   Σ_k (a − zp)·b exact in int64 (vLLM: int32; equal whenever int32 does not
//               overflow), then the scales and bias in double, one rounding to out_dtype.
//
// fp8 KV caches (spec §3.6, kv=fp8_e4m3/fp8_e5m2): the cache write stores the code
// fp8(float(x) / scale) (the fp32 quotient, then ir/numeric.h's saturating RNE encoder); the
// attention reads k = fp8·k_scale and v = fp8·v_scale, exact in double.
//
// KILN: a row with no allowed key and no sink (a sliding window that masks it fully) is
// written as zeros; vLLM's kernel computes 0 · (1/0) there.
//
// The ref's scheduler metadata (KILN; the spec leaves the blob opaque). A fixed-size i8 tensor
// of cpu_attn_metadata_bytes() bytes holding the little-endian int64 fields of
// SchedulerHeader below: the spec's params it was built for (isa, dtype, head sizes, causal),
// the request count, the total query tokens, the window it converted (§3.4.1), enable_kv_split,
// the partition units (§3.4.2 q-step tokens, BlockSizeAlignment, the split chunk), the thread
// count (1: the ref is single-threaded) and a checksum of seq_lens and query_start_loc. The
// partition is a pure function of these and the lengths, so the attention re-derives it
// instead of reading a work list (a documented simplification of §3.4.5, which sizes items
// from thread budgets and the L2 cache):
//   * each request's query tokens go in q-steps of max_q_tokens_per_iter (§3.4.2);
//   * a q-step's KV range is [p_first − left, p_last + 1 + right] clipped to [0, seq_len) and
//     rounded outward to BlockSizeAlignment (§3.4.5 step 1), then clipped to seq_len again (no
//     read past the sequence, §3.5 QUIRK);
//   * with enable_kv_split, the last q-step of a request holding one query token (a decode) is
//     cut into chunks of min_split = align_up(4·MaxQ, BlockSizeAlignment) tokens — the
//     smallest split vLLM makes — each an independent partial softmax merged as in §3.5.
// The attention checks every header field against its own spec and arguments (a metadata
// blob for another model, ISA or batch is kInvalidArgument naming 'scheduler_metadata').
//
// The ref's GEMM handler (KILN; docs/ops.md makes the handler a tensor). A u8 tensor of
// onednn_handler_bytes(spec) bytes: a 64-byte header of eight int64 fields (magic
// "KILNMM01" or "KILNSM01", dtype, k, n, flags dynamic|azp<<1|per_channel<<2, payload bytes,
// two zero words), then the payload: for onednn_mm the weight as [N, K] row-major in the
// spec's dtype (column n of b contiguous, for the dot products); for onednn_scaled_mm the fp32
// b_scales (1 or N) followed by the int8 weight as [N, K] row-major. The mm ops validate
// every header field against their spec and the tensor's size before reading the payload, so
// a garbage, truncated or foreign handler is kInvalidArgument naming 'handler', not a crash.
//
// This file is compiled with -ffp-contract=off (see CMakeLists.txt).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "codegen/ref/ref.h"
#include "codegen/ref/ref_elements.h"
#include "codegen/ref/ref_families.h"
#include "ir/check_args.h"
#include "ir/numeric.h"
#include "ir/params_cache.h"
#include "ir/params_cpu.h"

namespace jit::codegen::ref {
namespace {

using ir::CpuAttnIsa;

// ---- element access ------------------------------------------------------------------------

int64_t align_up(int64_t v, int64_t a) {
  return (v + a - 1) / a * a;
}

// fp8 code of the fp32 value x / scale (spec §3.6: stored = fp8(x / scale)).
uint8_t encode_fp8(ir::KvCacheDtype kv, float x, float scale) {
  const float q = x / scale;
  return kv == ir::KvCacheDtype::kFp8E5m2 ? numeric::f32_to_fp8_e5m2(q)
                                          : numeric::f32_to_fp8_e4m3(q);
}

// Cache element `index` of a CPU-attention cache as a double: the element of `dtype` for
// kv=auto, else the fp8 code's value times `scale` (exact in double).
double load_kv(ir::KvCacheDtype kv, DType dtype, const std::byte* base, int64_t index,
               float scale) {
  if (kv == ir::KvCacheDtype::kAuto) return load(dtype, base, index);
  const auto code = load_as<uint8_t>(base, index);
  const float v = kv == ir::KvCacheDtype::kFp8E5m2 ? numeric::fp8_e5m2_to_f32(code)
                                                   : numeric::fp8_e4m3_to_f32(code);
  return double(v) * double(scale);
}

// MaxQHeadNumPerIteration of §3.2: query-head rows one micro-kernel pass serves.
int64_t max_q_rows(CpuAttnIsa isa) {
  switch (isa) {
    case CpuAttnIsa::kVec: return 8;
    case CpuAttnIsa::kAmx: return 32;
    default: return 16;  // vec16, neon
  }
}

// ---- CPU attention: the ref's scheduler metadata ---------------------------------------------

constexpr int64_t kMetadataMagic = 0x3153414e4c494b;  // "KILNAS1" little-endian

/// The fields of the ref's metadata blob, in order (see the file comment).
struct SchedulerHeader {
  int64_t magic = kMetadataMagic;
  int64_t isa = 0;
  int64_t dtype = 0;
  int64_t head_size = 0;
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t causal = 0;
  int64_t num_req = 0;
  int64_t q_tokens = 0;      // query_start_loc[num_req]
  int64_t window_left = -1;  // §3.4.1, -1 = unbounded
  int64_t window_right = -1;
  int64_t kv_split = 0;
  int64_t q_step = 0;        // max_q_tokens_per_iter
  int64_t kv_align = 0;      // BlockSizeAlignment
  int64_t split_tokens = 0;  // min_split
  int64_t thread_num = 1;
  uint64_t checksum = 0;  // FNV-1a over seq_lens and query_start_loc
  bool operator==(const SchedulerHeader&) const = default;
};

// The partition units of §3.4.2 / §3.4.5 for the spec's ISA and head counts.
void set_partition_units(SchedulerHeader& h, CpuAttnIsa isa, int64_t heads_q, int64_t heads_kv) {
  const int64_t max_q = max_q_rows(isa);
  const int64_t q_per_kv = heads_q / heads_kv;
  // GQA groups when a group fits a pass evenly, else MHA fallback (q_per_kv treated as 1).
  h.q_step = max_q % q_per_kv == 0 ? max_q / q_per_kv : max_q;
  h.kv_align = ir::cpu_attn_block_alignment(isa);
  h.split_tokens = align_up(4 * max_q, h.kv_align);
}

uint64_t lengths_checksum(const int32_t* seq_lens, const int32_t* qsl, int64_t num_req) {
  uint64_t hash = 0xcbf29ce484222325ull;
  const auto mix = [&hash](int32_t v) {
    for (int b = 0; b < 4; ++b) {
      hash ^= uint64_t((uint32_t(v) >> (8 * b)) & 0xffu);
      hash *= 0x100000001b3ull;
    }
  };
  for (int64_t r = 0; r < num_req; ++r) mix(seq_lens[r]);
  for (int64_t r = 0; r <= num_req; ++r) mix(qsl[r]);
  return hash;
}

// get_scheduler_metadata(metadata, seq_lens, query_start_loc; num_req, window_size,
// enable_kv_split).
Status scheduler_metadata(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ir::CpuAttnSchedulerParams>();
  const std::string_view op = op_name(spec.op);
  const Tensor& metadata = args.tensor(0);
  const auto* seq_lens = args.tensor(1).data_as<const int32_t>();
  const auto* qsl = args.tensor(2).data_as<const int32_t>();
  const auto num_req = int64_t(args.scalar(0));
  const auto window = int64_t(args.scalar(1));
  if (metadata.numel() != cpu_attn_metadata_bytes()) {
    return invalid_argument(
        fmt::format("{}: argument 'metadata' ({}) must have {} bytes (the ref's metadata blob)", op,
                    metadata.describe(), cpu_attn_metadata_bytes()));
  }
  KILN_RETURN_IF_ERROR(ir::check_cpu_attn_lengths(op, qsl, seq_lens, num_req, p.causal, -1));
  SchedulerHeader h;
  h.isa = int64_t(p.isa);
  h.dtype = int64_t(p.dtype);
  h.head_size = p.head_size;
  h.heads_q = p.head_count_q;
  h.heads_kv = p.head_count_kv;
  h.causal = p.causal;
  h.num_req = num_req;
  h.q_tokens = qsl[num_req];
  // §3.4.1: left = w − 1 (or −1); right = 0 when causal, else w − 1 (or −1).
  h.window_left = window == -1 ? -1 : window - 1;
  h.window_right = p.causal ? 0 : h.window_left;
  h.kv_split = args.scalar(2) != 0.0;
  set_partition_units(h, p.isa, p.head_count_q, p.head_count_kv);
  h.checksum = lengths_checksum(seq_lens, qsl, num_req);
  std::memcpy(metadata.data(), &h, sizeof(h));
  return Status::ok();
}

// cpu_attn_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping): token t goes to
// block slot / bs, offset slot % bs; a negative slot skips the token. Raw element copies.
Status reshape_and_cache(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ir::CpuAttnCacheWriteParams>();
  const Tensor& key = args.tensor(0);
  const Tensor& value = args.tensor(1);
  const Tensor& key_cache = args.tensor(2);
  const Tensor& value_cache = args.tensor(3);
  const auto* slots = args.tensor(4).data_as<const int64_t>();
  const int64_t tokens = key.size(0);
  const int64_t capacity = key_cache.size(0) * p.block_size;
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] >= capacity) {
      return invalid_argument(fmt::format(
          "{}: argument 'slot_mapping' has slot_mapping[{}] = {}, outside the cache's {} slots "
          "({} blocks of {})",
          op_name(spec.op), t, slots[t], capacity, key_cache.size(0), p.block_size));
    }
  }
  const int64_t esize = int64_t(dtype_size(p.dtype));
  const int64_t csize = int64_t(ir::cache_element_size(p.dtype, p.kv));
  const bool fp8 = p.kv != ir::KvCacheDtype::kAuto;
  const float k_scale = fp8 ? float(args.scalar(0)) : 1.0f;  // vLLM's scales are fp32
  const float v_scale = fp8 ? float(args.scalar(1)) : 1.0f;
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    const int64_t block = slots[t] / p.block_size;
    const int64_t offset = slots[t] % p.block_size;
    for (int64_t h = 0; h < p.head_count_kv; ++h) {
      const int64_t slab = block * key_cache.stride(0) + h * key_cache.stride(1);
      const std::byte* k_src = bytes(key) + (t * key.stride(0) + h * key.stride(1)) * esize;
      const std::byte* v_src = bytes(value) + (t * value.stride(0) + h * value.stride(1)) * esize;
      for (int64_t d = 0; d < p.head_size; ++d) {
        const int64_t fk = cpu_attn_key_index(p.isa, offset, d, p.block_size, p.head_size);
        const int64_t fv = cpu_attn_value_index(p.isa, offset, d, p.block_size, p.head_size);
        if (fp8) {
          const uint8_t kc = encode_fp8(p.kv, load(p.dtype, k_src, d), k_scale);
          const uint8_t vc = encode_fp8(p.kv, load(p.dtype, v_src, d), v_scale);
          std::memcpy(bytes(key_cache) + (slab + fk) * csize, &kc, 1);
          std::memcpy(bytes(value_cache) + (slab + fv) * csize, &vc, 1);
        } else {
          std::memcpy(bytes(key_cache) + (slab + fk) * esize, k_src + d * esize, size_t(esize));
          std::memcpy(bytes(value_cache) + (slab + fv) * esize, v_src + d * esize, size_t(esize));
        }
      }
    }
  }
  return Status::ok();
}

// ---- CPU attention: the attention ------------------------------------------------------------

// Softmax state of one (query, head) over one KV chunk: running max m (−inf when no key was
// allowed), Σ e^(s − m) and Σ e^(s − m)·v.
struct SoftmaxState {
  double m = -std::numeric_limits<double>::infinity();
  double sum = 0;
  std::vector<double> acc;
};

// The attention call, unpacked.
struct AttentionCall {
  const ir::CpuAttentionParams* p = nullptr;
  const Tensor* query = nullptr;
  const Tensor* key_cache = nullptr;
  const Tensor* value_cache = nullptr;
  const int32_t* block_row = nullptr;  // this request's block_table row
  const float* slopes = nullptr;
  float scale = 0;
  float softcap = 0;
  float k_scale = 1;  // fp8 caches: k = fp8·k_scale, v = fp8·v_scale
  float v_scale = 1;
  int64_t left = -1;
  int64_t right = -1;
};

// The masked, soft-capped, ALiBi-biased logit of query token `token` (position p_i), head h,
// against key j < seq_len; −inf when j is not allowed.
double logit(const AttentionCall& c, int64_t token, int64_t pos, int64_t h, int64_t j) {
  const auto& p = *c.p;
  if (c.left != -1 && j < pos - c.left) return -std::numeric_limits<double>::infinity();
  if (c.right != -1 && j > pos + c.right) return -std::numeric_limits<double>::infinity();
  const int64_t g = h / (p.head_count_q / p.head_count_kv);
  const int64_t block = c.block_row[j / p.block_size];
  const int64_t slab = block * c.key_cache->stride(0) + g * c.key_cache->stride(1);
  const std::byte* q = bytes(*c.query) + (token * c.query->stride(0) + h * c.query->stride(1)) *
                                             int64_t(dtype_size(p.dtype));
  double dot = 0;
  for (int64_t d = 0; d < p.head_size; ++d) {
    const int64_t f = cpu_attn_key_index(p.isa, j % p.block_size, d, p.block_size, p.head_size);
    dot += load(p.dtype, q, d) * load_kv(p.kv, p.dtype, bytes(*c.key_cache), slab + f, c.k_scale);
  }
  double s = double(c.scale) * dot;
  if (p.softcap) s = double(c.softcap) * std::tanh(s / double(c.softcap));
  if (p.alibi) s += double(c.slopes[h]) * double(j - pos);
  return s;
}

// The softmax state of (token, h) over keys [kv_lo, kv_hi).
SoftmaxState partial(const AttentionCall& c, int64_t token, int64_t pos, int64_t h, int64_t kv_lo,
                     int64_t kv_hi) {
  const auto& p = *c.p;
  SoftmaxState st;
  st.acc.assign(size_t(p.head_size), 0.0);
  std::vector<double> s(size_t(std::max<int64_t>(kv_hi - kv_lo, 0)));
  for (int64_t j = kv_lo; j < kv_hi; ++j) {
    s[size_t(j - kv_lo)] = logit(c, token, pos, h, j);
    st.m = std::max(st.m, s[size_t(j - kv_lo)]);
  }
  if (st.m == -std::numeric_limits<double>::infinity()) return st;  // nothing allowed
  const int64_t g = h / (p.head_count_q / p.head_count_kv);
  for (int64_t j = kv_lo; j < kv_hi; ++j) {
    const double w = std::exp(s[size_t(j - kv_lo)] - st.m);
    if (w == 0) continue;  // masked (or negligible): its value is not read
    st.sum += w;
    const int64_t block = c.block_row[j / p.block_size];
    const int64_t slab = block * c.value_cache->stride(0) + g * c.value_cache->stride(1);
    for (int64_t d = 0; d < p.head_size; ++d) {
      const int64_t f = cpu_attn_value_index(p.isa, j % p.block_size, d, p.block_size, p.head_size);
      st.acc[size_t(d)] += w * load_kv(p.kv, p.dtype, bytes(*c.value_cache), slab + f, c.v_scale);
    }
  }
  return st;
}

// The attention call of cpu_attention_with_kv_cache's `args` (block_row left unset).
AttentionCall attention_call(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ir::CpuAttentionParams>();
  AttentionCall c;
  c.p = &p;
  c.query = &args.tensor(0);
  c.key_cache = &args.tensor(1);
  c.value_cache = &args.tensor(2);
  c.slopes = p.alibi ? args.tensor(6).data_as<const float>() : nullptr;
  // vLLM's scale and softcap are fp32 parameters.
  c.scale = float(args.scalar(0));
  c.softcap = float(args.scalar(3));
  c.left = int64_t(args.scalar(1));
  c.right = p.causal ? 0 : int64_t(args.scalar(2));  // causal forces the right edge to 0
  if (p.kv != ir::KvCacheDtype::kAuto) {
    c.k_scale = float(args.scalar(4));
    c.v_scale = float(args.scalar(5));
  }
  return c;
}

// Validates the metadata blob against this call (before anything is written).
Status check_metadata(std::string_view op, const ir::CpuAttentionParams& p, const Tensor& metadata,
                      const int32_t* seq_lens, const int32_t* qsl, int64_t num_req, int64_t left,
                      int64_t right, SchedulerHeader& h) {
  if (metadata.numel() != cpu_attn_metadata_bytes()) {
    return invalid_argument(fmt::format(
        "{}: argument 'scheduler_metadata' ({}) is not the ref's metadata blob ({} bytes)", op,
        metadata.describe(), cpu_attn_metadata_bytes()));
  }
  std::memcpy(&h, metadata.data(), sizeof(h));
  SchedulerHeader want;
  want.isa = int64_t(p.isa);
  want.dtype = int64_t(p.dtype);
  want.head_size = p.head_size;
  want.heads_q = p.head_count_q;
  want.heads_kv = p.head_count_kv;
  want.causal = p.causal;
  want.num_req = num_req;
  want.q_tokens = qsl[num_req];
  want.window_left = left;
  want.window_right = right;
  want.kv_split = h.kv_split != 0 ? 1 : 0;  // either partition is valid, as 0 or 1
  set_partition_units(want, p.isa, p.head_count_q, p.head_count_kv);
  want.checksum = lengths_checksum(seq_lens, qsl, num_req);
  if (h == want) return Status::ok();
  const char* what =
      h.magic != want.magic ? "is not scheduler metadata (bad magic)"
      : h.num_req != want.num_req || h.q_tokens != want.q_tokens || h.checksum != want.checksum
          ? "was built for other seq_lens / query_start_loc"
      : h.window_left != want.window_left || h.window_right != want.window_right
          ? "was built for another sliding window"
          : "was built for another isa, dtype, head configuration or causal flag";
  return invalid_argument(fmt::format(
      "{}: argument 'scheduler_metadata' {} (build it with cpu_attn_get_scheduler_metadata for "
      "this call)",
      op, what));
}

// cpu_attention_with_kv_cache(query, key_cache, value_cache, output, query_start_loc,
// seq_lens, alibi_slopes, block_table, scheduler_metadata, s_aux; scale, window_left,
// window_right, softcap).
Status attention(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ir::CpuAttentionParams>();
  const std::string_view op = op_name(spec.op);
  const Tensor& query = args.tensor(0);
  const Tensor& output = args.tensor(3);
  const Tensor& table = args.tensor(7);
  const Tensor& sinks = args.tensor(9);
  const auto* qsl = args.tensor(4).data_as<const int32_t>();
  const auto* seq_lens = args.tensor(5).data_as<const int32_t>();
  const int64_t num_req = args.tensor(4).size(0) - 1;
  AttentionCall c = attention_call(spec, args);

  // Data-dependent checks, all before the first write.
  KILN_RETURN_IF_ERROR(ir::check_cpu_attn_sequences(op, args.tensor(4), args.tensor(5), table,
                                                    p.causal, p.block_size, query.size(0),
                                                    c.key_cache->size(0)));
  SchedulerHeader h;
  KILN_RETURN_IF_ERROR(
      check_metadata(op, p, args.tensor(8), seq_lens, qsl, num_req, c.left, c.right, h));

  const int64_t esize = int64_t(dtype_size(p.dtype));
  for (int64_t r = 0; r < num_req; ++r) {
    c.block_row = table.data_as<const int32_t>() + r * table.stride(0);
    const int64_t seq_len = seq_lens[r];
    const int64_t q_len = qsl[r + 1] - qsl[r];
    const int64_t base = p.causal ? seq_len - q_len : 0;  // §3.4.3: p_i = base + i
    for (int64_t step = 0; step < q_len; step += h.q_step) {
      const int64_t step_end = std::min(q_len, step + h.q_step);
      // The q-step's KV range, rounded outward to BlockSizeAlignment, never past seq_len.
      int64_t kv_lo = c.left == -1 ? 0 : std::max<int64_t>(0, base + step - c.left);
      int64_t kv_hi = c.right == -1 ? seq_len : std::min(seq_len, base + step_end + c.right);
      kv_lo = kv_lo / h.kv_align * h.kv_align;
      kv_hi = std::min(seq_len, align_up(kv_hi, h.kv_align));
      kv_hi = std::max(kv_hi, kv_lo);
      const bool split = h.kv_split != 0 && step_end == q_len && step_end - step <= 1;
      const int64_t chunk = split ? h.split_tokens : std::max<int64_t>(kv_hi - kv_lo, 1);
      for (int64_t i = step; i < step_end; ++i) {
        const int64_t token = qsl[r] + i;
        for (int64_t head = 0; head < p.head_count_q; ++head) {
          std::vector<SoftmaxState> parts;
          for (int64_t lo = kv_lo; lo < kv_hi; lo += chunk) {
            parts.push_back(partial(c, token, base + i, head, lo, std::min(kv_hi, lo + chunk)));
          }
          // Merge (§3.5): m = max m_k, then rescale every part to it; the sink joins once.
          double m = -std::numeric_limits<double>::infinity();
          for (const SoftmaxState& s : parts) m = std::max(m, s.m);
          const double sink = p.sinks ? load(sinks.dtype(), bytes(sinks), head) : 0.0;
          if (p.sinks) m = std::max(m, sink);
          double sum = p.sinks ? std::exp(sink - m) : 0.0;
          std::vector<double> acc(size_t(p.head_size), 0.0);
          for (const SoftmaxState& s : parts) {
            if (s.m == -std::numeric_limits<double>::infinity()) continue;
            const double w = std::exp(s.m - m);
            sum += w * s.sum;
            for (int64_t d = 0; d < p.head_size; ++d) acc[size_t(d)] += w * s.acc[size_t(d)];
          }
          std::byte* dst = bytes(output) + (token * p.head_count_q + head) * p.head_size * esize;
          for (int64_t d = 0; d < p.head_size; ++d) {
            store_rounded(p.dtype, dst, d, sum > 0 ? acc[size_t(d)] / sum : 0.0);
          }
        }
      }
    }
  }
  return Status::ok();
}

// ---- oneDNN GEMM: the ref's handler ----------------------------------------------------------

}  // namespace

// The header a handler for `spec` (a create or an mm op) carries.
HandlerHeader handler_header_for(const OpSpec& spec) {
  HandlerHeader h;
  if (spec.op == OpKind::kCreateOnednnMm || spec.op == OpKind::kOnednnMm) {
    const auto& p = spec.get<ir::GemmParams>();
    h.magic = kMmMagic;
    h.dtype = int64_t(p.dtype);
    h.k = p.k;
    h.n = p.n;
    h.payload = p.k * p.n * int64_t(dtype_size(p.dtype));
  } else {
    const auto& p = spec.get<ir::ScaledGemmParams>();
    h.magic = kScaledMmMagic;
    h.dtype = int64_t(p.out_dtype);
    h.k = p.k;
    h.n = p.n;
    h.flags = int64_t(p.dynamic) | int64_t(p.azp) << 1 | int64_t(p.per_channel) << 2;
    h.payload = 4 * (p.per_channel ? p.n : 1) + p.k * p.n;
  }
  return h;
}

namespace {

Status expect_handler_size(const OpSpec& spec, const Tensor& handler) {
  if (handler.numel() == onednn_handler_bytes(spec)) return Status::ok();
  return invalid_argument(fmt::format(
      "{}: argument 'handler' ({}) must have {} bytes for this spec (a {}-byte header and the "
      "weight)",
      op_name(spec.op), handler.describe(), onednn_handler_bytes(spec), kHandlerHeaderBytes));
}

}  // namespace

Status check_onednn_handler(const OpSpec& spec, const Tensor& handler) {
  KILN_RETURN_IF_ERROR(expect_handler_size(spec, handler));
  HandlerHeader h;
  std::memcpy(&h, handler.data(), sizeof(h));
  const HandlerHeader want = handler_header_for(spec);
  if (h == want) return Status::ok();
  const std::string_view creator =
      spec.op == OpKind::kOnednnMm ? "create_onednn_mm" : "create_onednn_scaled_mm";
  std::string what;
  if (h.magic != want.magic) {
    what = fmt::format("was not made by {} (bad magic)", creator);
  } else if (h.k != want.k || h.n != want.n) {
    what = fmt::format("holds a [K, N] = [{}, {}] weight; the spec has [{}, {}]", h.k, h.n, want.k,
                       want.n);
  } else {
    what = "was made for another dtype or quantisation scheme";
  }
  return invalid_argument(fmt::format("{}: argument 'handler' {}", op_name(spec.op), what));
}

namespace {

// create_onednn_mm(handler, b; primitive_cache_size): b [K, N] (any strides) -> [N, K].
Status create_mm(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ir::GemmParams>();
  const Tensor& handler = args.tensor(0);
  const Tensor& b = args.tensor(1);
  KILN_RETURN_IF_ERROR(expect_handler_size(spec, handler));
  const HandlerHeader h = handler_header_for(spec);
  std::memcpy(handler.data(), &h, sizeof(h));
  const int64_t esize = int64_t(dtype_size(p.dtype));
  std::byte* packed = bytes(handler) + kHandlerHeaderBytes;
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t k = 0; k < p.k; ++k) {
      std::memcpy(packed + (n * p.k + k) * esize,
                  bytes(b) + (k * b.stride(0) + n * b.stride(1)) * esize, size_t(esize));
    }
  }
  return Status::ok();
}

// onednn_mm(c, a, bias?, handler): c = rnd(Σ_k a[m,k]·b[k,n] + bias[n]).
Status mm(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ir::GemmParams>();
  const Tensor& c = args.tensor(0);
  const Tensor& a = args.tensor(1);
  const Tensor& bias = args.tensor(2);
  KILN_RETURN_IF_ERROR(check_onednn_handler(spec, args.tensor(3)));
  const std::byte* packed = bytes(args.tensor(3)) + kHandlerHeaderBytes;
  const int64_t esize = int64_t(dtype_size(p.dtype));
  for (int64_t m = 0; m < c.size(0); ++m) {
    const std::byte* a_row = bytes(a) + m * a.stride(0) * esize;
    for (int64_t n = 0; n < p.n; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < p.k; ++k) {
        sum += load(p.dtype, a_row, k) * load(p.dtype, packed, n * p.k + k);
      }
      if (bias.defined()) sum += load(p.dtype, bytes(bias), n);
      store_rounded(p.dtype, bytes(c), m * p.n + n, sum);
    }
  }
  return Status::ok();
}

// create_onednn_scaled_mm(handler, b, b_scales; primitive_cache_size): b int8 [K, N]
// column-major -> scales, then [N, K] int8.
Status create_scaled_mm(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ir::ScaledGemmParams>();
  const Tensor& handler = args.tensor(0);
  const Tensor& b = args.tensor(1);
  KILN_RETURN_IF_ERROR(expect_handler_size(spec, handler));
  const HandlerHeader h = handler_header_for(spec);
  std::memcpy(handler.data(), &h, sizeof(h));
  const int64_t scale_count = p.per_channel ? p.n : 1;
  std::byte* payload = bytes(handler) + kHandlerHeaderBytes;
  std::memcpy(payload, args.tensor(2).data(), size_t(4 * scale_count));
  std::byte* packed = payload + 4 * scale_count;
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t k = 0; k < p.k; ++k) {
      packed[n * p.k + k] = bytes(b)[k * b.stride(0) + n * b.stride(1)];
    }
  }
  return Status::ok();
}

// onednn_scaled_mm(c, a, a_scales, azp?, azp_adj?, bias?, handler):
//   static   c = rnd(s_a · s_b[n] · Σ_k (a − zp)·b + bias[n])
//   dynamic  c = rnd(s_a[m] · (s_b[n] · Σ_k a·b) − s_a[m] · zp[m] · azp_adj[n] + bias[n])
Status scaled_mm(const OpSpec& spec, const KernelArgs& args) {
  const auto& p = spec.get<ir::ScaledGemmParams>();
  const Tensor& c = args.tensor(0);
  const auto* a = args.tensor(1).data_as<const int8_t>();
  const auto* a_scales = args.tensor(2).data_as<const float>();
  const auto* azp = p.azp ? args.tensor(3).data_as<const int32_t>() : nullptr;
  const auto* azp_adj = p.azp && p.dynamic ? args.tensor(4).data_as<const float>() : nullptr;
  const Tensor& bias = args.tensor(5);
  KILN_RETURN_IF_ERROR(check_onednn_handler(spec, args.tensor(6)));
  const std::byte* payload = bytes(args.tensor(6)) + kHandlerHeaderBytes;
  const int64_t scale_count = p.per_channel ? p.n : 1;
  const auto* packed = reinterpret_cast<const int8_t*>(payload + 4 * scale_count);
  for (int64_t m = 0; m < c.size(0); ++m) {
    const double s_a = a_scales[p.dynamic ? m : 0];
    const int64_t zp = azp != nullptr ? azp[p.dynamic ? m : 0] : 0;
    for (int64_t n = 0; n < p.n; ++n) {
      const double s_b = load_as<float>(payload, p.per_channel ? n : 0);
      double v = 0;
      if (p.dynamic) {
        int64_t dot = 0;  // exact
        for (int64_t k = 0; k < p.k; ++k) dot += int64_t(a[m * p.k + k]) * packed[n * p.k + k];
        v = s_a * (s_b * double(dot));
        if (azp_adj != nullptr) v -= s_a * double(zp) * double(azp_adj[n]);
      } else {
        int64_t dot = 0;  // exact: (a − zp) fits 33 bits, the sum int64
        for (int64_t k = 0; k < p.k; ++k) {
          dot += (int64_t(a[m * p.k + k]) - zp) * packed[n * p.k + k];
        }
        v = s_a * s_b * double(dot);
      }
      if (bias.defined()) v += load(p.out_dtype, bytes(bias), n);
      store_rounded(p.out_dtype, bytes(c), m * p.n + n, v);
    }
  }
  return Status::ok();
}

}  // namespace

int64_t cpu_attn_key_index(CpuAttnIsa isa, int64_t t, int64_t d, int64_t bs, int64_t head_size) {
  if (isa != CpuAttnIsa::kAmx) return d * bs + t;
  return (t / 16) * 16 * head_size + (d / 2) * 32 + (t % 16) * 2 + (d % 2);
}

int64_t cpu_attn_value_index(CpuAttnIsa isa, int64_t t, int64_t d, int64_t bs, int64_t head_size) {
  if (isa != CpuAttnIsa::kAmx) return t * head_size + d;
  return (d / 16) * 16 * bs + (t / 2) * 32 + (d % 16) * 2 + (t % 2);
}

CpuAttnRowState cpu_attention_row_state(const OpSpec& spec, const KernelArgs& args, int64_t request,
                                        int64_t query, int64_t head, int64_t kv_lo, int64_t kv_hi) {
  const auto& p = spec.get<ir::CpuAttentionParams>();
  AttentionCall c = attention_call(spec, args);
  c.v_scale = 1.0f;  // the caller's accumulators leave v_scale to the normalisation
  c.block_row = args.tensor(7).data_as<const int32_t>() + request * args.tensor(7).stride(0);
  const auto* qsl = args.tensor(4).data_as<const int32_t>();
  const int64_t seq_len = args.tensor(5).data_as<const int32_t>()[request];
  const int64_t q_len = qsl[request + 1] - qsl[request];
  const int64_t base = p.causal ? seq_len - q_len : 0;  // §3.4.3: p_i = base + i
  SoftmaxState st =
      partial(c, qsl[request] + query, base + query, head, kv_lo, std::min(kv_hi, seq_len));
  return {st.m, st.sum, std::move(st.acc)};
}

/// Bytes of the ref's cpu_attn_get_scheduler_metadata blob (its header; see the file comment).
int64_t cpu_attn_metadata_bytes() {
  return int64_t(sizeof(SchedulerHeader));
}

/// Bytes of the ref's handler for a create_onednn_* / onednn_* spec: header + payload.
int64_t onednn_handler_bytes(const OpSpec& spec) {
  return kHandlerHeaderBytes + handler_header_for(spec).payload;
}

bool implements_cpu(OpKind op) {
  switch (op) {
    case OpKind::kCpuAttnGetSchedulerMetadata:
    case OpKind::kCpuAttnReshapeAndCache:
    case OpKind::kCpuAttentionWithKvCache:
    case OpKind::kCreateOnednnMm:
    case OpKind::kOnednnMm:
    case OpKind::kCreateOnednnScaledMm:
    case OpKind::kOnednnScaledMm: return true;
    default: return false;
  }
}

Status run_cpu(const OpSpec& spec, const KernelArgs& args) {
  switch (spec.op) {
    case OpKind::kCpuAttnGetSchedulerMetadata: return scheduler_metadata(spec, args);
    case OpKind::kCpuAttnReshapeAndCache: return reshape_and_cache(spec, args);
    case OpKind::kCpuAttentionWithKvCache: return attention(spec, args);
    case OpKind::kCreateOnednnMm: return create_mm(spec, args);
    case OpKind::kOnednnMm: return mm(spec, args);
    case OpKind::kCreateOnednnScaledMm: return create_scaled_mm(spec, args);
    case OpKind::kOnednnScaledMm: return scaled_mm(spec, args);
    default:
      return {StatusCode::kInternal,
              fmt::format("ref: {} is not in the cpu_attention/gemm family", op_name(spec.op))};
  }
}

}  // namespace jit::codegen::ref
