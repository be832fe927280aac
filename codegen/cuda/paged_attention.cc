#include "codegen/cuda/paged_attention.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "ir/params_cache.h"
#include "paged_attention_args.cuh"

namespace jit::codegen::cuda {
namespace {

// The CTA's static shared memory must stay below the 48 KiB every arch gives without opt-in;
// 4 KiB are left for block_sum's scratch and the compiler's own.
constexpr int64_t kSharedBudget = 44 * 1024;
// Query heads per CTA at most; also the default's budget of P·V accumulators per thread.
constexpr int64_t kMaxHeadsPerCta = 8;
// The default serves at most this many query heads per CTA (see the header).
constexpr int64_t kDefaultMaxHeads = 4;
constexpr int64_t kMaxGridYZ = 65535;         // grid.y (sequences) and grid.z (partitions)
constexpr int64_t kReduceShared = 48 * 1024;  // dynamic smem without the opt-in attribute

// Static shared bytes of one CTA: q_s [H][D] + p_s [H][N] + red_s [H][N/32] floats, base_s [N]
// 64-bit offsets.
int64_t shared_bytes(int64_t heads, int64_t head_size, int64_t threads) {
  return heads * (head_size + threads + threads / 32) * 4 + threads * 8;
}

int32_t load_i32(const Tensor& t, int64_t i) {
  return t.data_as<const int32_t>()[i];
}

// The ref's checked mode, before anything is written: L <= max_seq_len, ceil(L / BS) entries
// in the table, and those entries inside the cache.
Status check_sequences(std::string_view op, const ir::PagedAttentionParams& p,
                       const Tensor& seq_lens, const Tensor& tables, int64_t blocks,
                       int64_t max_seq_len) {
  const int64_t width = tables.size(1);
  for (int64_t s = 0; s < seq_lens.size(0); ++s) {
    const int64_t len = load_i32(seq_lens, s);
    if (len > max_seq_len) {
      return invalid_argument(
          fmt::format("{}: argument 'seq_lens' has seq_lens[{}] = {} > max_seq_len = {}", op, s,
                      len, max_seq_len));
    }
    const int64_t used = len > 0 ? (len + p.block_size - 1) / p.block_size : 0;
    if (used > width) {
      return invalid_argument(fmt::format(
          "{}: argument 'seq_lens' has seq_lens[{}] = {}, which needs {} blocks of {} tokens, "
          "but block_tables has {} per sequence",
          op, s, len, used, p.block_size, width));
    }
    for (int64_t i = 0; i < used; ++i) {
      const int64_t block = load_i32(tables, s * width + i);
      if (block < 0 || block >= blocks) {
        return invalid_argument(fmt::format(
            "{}: argument 'block_tables' has block_tables[{}, {}] = {}, outside the cache's "
            "blocks [0, {})",
            op, s, i, block, blocks));
      }
    }
  }
  return Status::ok();
}

}  // namespace

Support paged_attention_support(const OpSpec&) {
  // Every valid spec: any head size (a multiple of x), any block size, dense or block-sparse.
  return Support::yes();
}

std::vector<int64_t> paged_attention_heads_choices(const ir::PagedAttentionParams& p,
                                                   int64_t threads) {
  const int64_t group = p.head_count_q / std::max<int64_t>(p.head_count_kv, 1);
  std::vector<int64_t> choices;
  for (int64_t h = 1; h <= std::min(group, kMaxHeadsPerCta); ++h) {
    if (group % h == 0 && shared_bytes(h, p.head_size, threads) <= kSharedBudget) {
      choices.push_back(h);
    }
  }
  if (choices.empty()) choices.push_back(1);
  return choices;
}

int64_t paged_attention_default_threads(const ir::PagedAttentionParams& p) {
  return p.partition_size > 0 ? 256 : 512;
}

int64_t paged_attention_heads_per_cta(const ir::PagedAttentionParams& p, int64_t threads) {
  // P·V keeps heads x dims-per-thread accumulators per thread (one dim each when the threads
  // form slices, threads >= 2·D): at most 8 (16 at head 256 made ptxas spill in the fp8 kernel
  // on sm_90 / sm_100). At most 4 heads: half a GQA-8 group per CTA doubles the grid, which
  // the H200 sweep favoured at 256 and 512 threads.
  const int64_t dims = threads >= 2 * p.head_size ? 1 : (p.head_size + threads - 1) / threads;
  const std::vector<int64_t> choices = paged_attention_heads_choices(p, threads);
  for (auto h = choices.rbegin(); h != choices.rend(); ++h) {
    if (*h * dims <= kMaxHeadsPerCta && *h <= kDefaultMaxHeads) return *h;
  }
  return choices.front();
}

Result<int64_t> paged_attention_heads_of(const OpSpec& spec, const Config& config,
                                         int64_t threads) {
  const auto& p = spec.get<ir::PagedAttentionParams>();
  const std::vector<int64_t> choices = paged_attention_heads_choices(p, threads);
  const int64_t heads = config.get(kHeadsPerCta, paged_attention_heads_per_cta(p, threads));
  if (std::find(choices.begin(), choices.end(), heads) == choices.end()) {
    return invalid_argument(fmt::format(
        "cuda config: heads_per_cta={} is not allowed for {} (group of {} query heads per kv "
        "head, head_size {}, threads={}); allowed: {}",
        heads, op_name(spec.op), p.head_count_q / std::max<int64_t>(p.head_count_kv, 1),
        p.head_size, threads, fmt::join(choices, ", ")));
  }
  return heads;
}

Status resolve_paged_attention_config(const OpSpec& spec, const Config& config, Config& resolved) {
  const auto& p = spec.get<ir::PagedAttentionParams>();
  Result<int64_t> heads = paged_attention_heads_of(
      spec, config, resolved.get(kThreads, paged_attention_default_threads(p)));
  if (!heads.is_ok()) return heads.status();
  resolved.set(std::string(kHeadsPerCta), heads.value());
  return Status::ok();
}

void render_paged_attention(const OpSpec& spec, const Config& config, RenderedKernel& r) {
  const auto& p = spec.get<ir::PagedAttentionParams>();
  const int64_t threads = config.get(kThreads, paged_attention_default_threads(p));
  const std::string_view t = cuda_type(p.dtype);
  r.header = "paged_attention.cuh";
  r.kernel_template = "kiln::paged_attention_kernel";
  r.args_type = "kiln::PagedAttentionArgs";
  std::string& m = r.config_members;
  m += fmt::format("  using T = {};\n", t);
  switch (p.kv) {
    case ir::KvCacheDtype::kAuto: m += fmt::format("  using Kv = kiln::KvAuto<{}>;\n", t); break;
    case ir::KvCacheDtype::kFp8E5m2:
      m += fmt::format("  using Kv = kiln::KvFp8<{}, kiln::fp8e5m2>;\n", t);
      break;
    default: m += fmt::format("  using Kv = kiln::KvFp8<{}, kiln::fp8e4m3>;\n", t); break;
  }
  m += fmt::format("  using Bias = kiln::{};\n", p.alibi ? "Alibi" : "NoAlibi");
  m += fmt::format("  using Sparse = kiln::{};\n", p.blocksparse ? "BlockSparse" : "Dense");
  m += fmt::format("  static constexpr int kHeadSize = {};\n", p.head_size);
  m += fmt::format("  static constexpr int kBlockSize = {};\n", p.block_size);
  m += fmt::format("  static constexpr int kHeadsQ = {};\n", p.head_count_q);
  m += fmt::format("  static constexpr int kHeadsKv = {};\n", p.head_count_kv);
  m += fmt::format("  static constexpr int kHeadsPerCta = {};\n",
                   config.get(kHeadsPerCta, paged_attention_heads_per_cta(p, threads)));
  m += fmt::format("  static constexpr int kPartitionSize = {};\n", p.partition_size);
}

Result<LaunchPlan> plan_paged_attention(const OpSpec& spec, const Config& config,
                                        const KernelArgs& args, bool host_data) {
  const auto& p = spec.get<ir::PagedAttentionParams>();
  const std::string_view op = op_name(spec.op);
  const bool v2 = spec.op == OpKind::kPagedAttentionV2;
  const int first = v2 ? 4 : 1;  // index of query
  const int64_t threads = config.get(kThreads, paged_attention_default_threads(p));
  const Tensor& query = args.tensor(first);
  const Tensor& key_cache = args.tensor(first + 1);
  const Tensor& value_cache = args.tensor(first + 2);
  const Tensor& tables = args.tensor(first + 3);
  const Tensor& seq_lens = args.tensor(first + 4);
  const auto max_seq_len = int64_t(args.scalar(1));
  const int64_t seqs = query.size(0);
  if (host_data) {
    KILN_RETURN_IF_ERROR(check_sequences(op, p, seq_lens, tables, key_cache.size(0), max_seq_len));
  }
  // Keys are read as 16-byte vectors (one x group per token).
  for (const Tensor* cache : {&key_cache, &value_cache}) {
    if (reinterpret_cast<uintptr_t>(cache->data()) % 16 != 0) {
      return invalid_argument(
          fmt::format("{}: the cuda backend needs 16-byte aligned caches; {} starts at {}", op,
                      cache == &key_cache ? "key_cache" : "value_cache", cache->data()));
    }
  }
  const int64_t x = ir::paged_key_x(p.dtype, p.kv);
  if (key_cache.stride(0) % x != 0 || key_cache.stride(1) % x != 0) {
    return invalid_argument(fmt::format(
        "{}: the cuda backend needs key_cache block and head strides that are multiples of x = "
        "{} (16-byte key groups); got [{}, {}]",
        op, x, key_cache.stride(0), key_cache.stride(1)));
  }
  const int64_t parts = v2 ? (max_seq_len + p.partition_size - 1) / p.partition_size : 1;
  if (seqs > kMaxGridYZ || parts > kMaxGridYZ) {
    return invalid_argument(fmt::format(
        "{}: {} sequences x {} partitions exceed the cuda backend's grid limit of {} each", op,
        seqs, parts, kMaxGridYZ));
  }
  if (parts * 4 > kReduceShared) {  // the reduce keeps one weight per partition in smem
    return invalid_argument(fmt::format(
        "{}: max_seq_len = {} makes {} partitions of {} tokens; the cuda reduce holds at most {} "
        "(use a larger partition_size)",
        op, max_seq_len, parts, p.partition_size, kReduceShared / 4));
  }
  kiln::PagedAttentionArgs a{};
  a.out = args.tensor(0).data();
  if (v2) {
    a.exp_sums = args.tensor(1).data_as<float>();
    a.max_logits = args.tensor(2).data_as<float>();
    a.tmp_out = args.tensor(3).data();
  }
  a.query = query.data();
  a.key_cache = key_cache.data();
  a.value_cache = value_cache.data();
  a.block_tables = tables.data_as<const int>();
  a.seq_lens = seq_lens.data_as<const int>();
  a.alibi_slopes = p.alibi ? args.tensor(first + 5).data_as<const float>() : nullptr;
  if (p.kv != ir::KvCacheDtype::kAuto) {
    a.k_scale = args.tensor(first + 6).data_as<const float>();
    a.v_scale = args.tensor(first + 7).data_as<const float>();
  }
  a.query_stride = query.stride(0);
  a.block_stride = key_cache.stride(0);
  a.head_stride = key_cache.stride(1);
  a.table_width = tables.size(1);
  a.partitions = parts;
  if (p.blocksparse) {  // ranges checked by check_args (vert >= 2, sparse block % BS == 0)
    a.tp_rank = int64_t(args.scalar(2));
    a.sparse_local = int64_t(args.scalar(3));
    a.sparse_vert = int64_t(args.scalar(4));
    a.sparse_block = int64_t(args.scalar(5));
    a.sparse_step = int64_t(args.scalar(6));
  }
  a.scale = float(args.scalar(0));  // a double in the schema, used as float
  a.phase = 0;

  LaunchPlan plan;
  plan.empty = seqs == 0;
  // The same heads per CTA as the kernel was rendered with (the executables pass the resolved
  // config; a partial one gets the same default as render).
  Result<int64_t> heads_per_cta = paged_attention_heads_of(spec, config, threads);
  if (!heads_per_cta.is_ok()) return heads_per_cta.status();
  plan.grid[0] = unsigned(p.head_count_q / heads_per_cta.value());
  plan.grid[1] = unsigned(std::max<int64_t>(seqs, 1));
  plan.grid[2] = unsigned(std::max<int64_t>(parts, 1));
  plan.block[0] = unsigned(threads);
  plan.set_params(a);
  if (v2) {
    auto reduce = std::make_shared<LaunchPlan>();
    a.phase = 1;
    reduce->grid[0] = unsigned(p.head_count_q);
    reduce->grid[1] = plan.grid[1];
    reduce->block[0] = unsigned(threads);
    reduce->shared_bytes = unsigned(std::max<int64_t>(parts, 1) * 4);
    reduce->set_params(a);
    plan.then = std::move(reduce);
  }
  return plan;
}

}  // namespace jit::codegen::cuda
