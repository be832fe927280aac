#include <fmt/format.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <cstring>
#include <vector>

#include "codegen/cuda/launch.h"
#include "codegen/cuda/render.h"
#include "codegen/cuda/simt/simt_runtime.h"

namespace jit::codegen::cuda::simt {
namespace {

constexpr int kWarpSize = 32;
// Per-fiber stack. The templates keep a few vector registers' worth of locals; host builds
// without optimisation need more, hence the margin. Pages are committed only when touched.
constexpr size_t kStackBytes = 256 * 1024;

struct Block;

struct Fiber {
  ucontext_t context;
  Dim3 index;
  unsigned lane = 0;
  unsigned warp = 0;
  bool done = false;
  Block* block = nullptr;
};

// A barrier over a changing set of live threads: released when every live thread arrived;
// a thread that exits counts as arrived for the barriers it will never reach.
struct Barrier {
  int arrived = 0;
  uint64_t generation = 0;
};

struct Warp {
  int live = 0;
  Barrier barrier;
  uint64_t slots[kWarpSize] = {};
};

struct Block {
  Dim3 index, dim, grid;
  Entry entry = nullptr;
  const void* params = nullptr;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  int live = 0;
  Barrier barrier;
  ucontext_t scheduler;
  bool busy = false;  // something happened this round (deadlock detection)
  std::vector<unsigned char> shared;
};

thread_local Fiber* t_fiber = nullptr;

// Stacks for up to 1024 fibers, reused across launches on this OS thread.
struct StackPool {
  void* base = nullptr;
  size_t count = 0;
  ~StackPool() {
    if (base != nullptr) munmap(base, count * kStackBytes);
  }
  char* get(size_t fibers) {
    if (fibers > count) {
      if (base != nullptr) munmap(base, count * kStackBytes);
      base = mmap(nullptr, fibers * kStackBytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (base == MAP_FAILED) {
        base = nullptr;
        count = 0;
        return nullptr;
      }
      count = fibers;
    }
    return static_cast<char*>(base);
  }
};
thread_local StackPool t_stacks;

void yield() {
  Fiber* f = t_fiber;
  swapcontext(&f->context, &f->block->scheduler);
}

// Arrives at `b` with `live` participants; returns once the barrier is released.
void arrive_and_wait(Barrier& b, const int& live) {
  Block* block = t_fiber->block;
  block->busy = true;
  const uint64_t generation = b.generation;
  if (++b.arrived == live) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  while (b.generation == generation) yield();
  block->busy = true;
}

// A thread exited: the barriers it would have reached must not wait for it.
void release_if_complete(Barrier& b, int live) {
  if (b.arrived > 0 && b.arrived == live) {
    b.arrived = 0;
    ++b.generation;
  }
}

void trampoline() {
  Fiber* f = t_fiber;
  Block* b = f->block;
  b->busy = true;
  b->entry(b->params);
  f->done = true;
  --b->live;
  Warp& w = b->warps[f->warp];
  --w.live;
  release_if_complete(b->barrier, b->live);
  release_if_complete(w.barrier, w.live);
  // Returning switches to uc_link: the scheduler.
}

Status run_block(Block& b, char* stacks) {
  const unsigned threads = b.dim.x * b.dim.y * b.dim.z;
  b.fibers.assign(threads, Fiber{});
  b.warps.assign((threads + kWarpSize - 1) / kWarpSize, Warp{});
  b.live = int(threads);
  b.barrier = Barrier{};
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = b.fibers[t];
    f.block = &b;
    f.index = {t % b.dim.x, (t / b.dim.x) % b.dim.y, t / (b.dim.x * b.dim.y)};
    f.lane = t % kWarpSize;
    f.warp = t / kWarpSize;
    b.warps[f.warp].live++;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = stacks + size_t(t) * kStackBytes;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &b.scheduler;
    makecontext(&f.context, trampoline, 0);
  }
  while (b.live > 0) {
    b.busy = false;
    for (Fiber& f : b.fibers) {
      if (f.done) continue;
      t_fiber = &f;
      swapcontext(&b.scheduler, &f.context);
    }
    t_fiber = nullptr;
    if (!b.busy && b.live > 0) {
      return {StatusCode::kInternal,
              fmt::format("SIMT emulator: deadlock in block ({}, {}, {}): {} live threads wait on "
                          "barriers the others never reach",
                          b.index.x, b.index.y, b.index.z, b.live)};
    }
  }
  return Status::ok();
}

Fiber& self() {
  return *t_fiber;
}

}  // namespace

Status launch(Entry entry, const unsigned grid[3], const unsigned block[3], unsigned shared_bytes,
              const void* params) {
  const size_t threads = size_t(block[0]) * block[1] * block[2];
  if (threads == 0 || threads > 1024) {
    return invalid_argument(
        fmt::format("SIMT emulator: block of {} threads; allowed: 1..1024", threads));
  }
  if (t_fiber != nullptr) {
    return {StatusCode::kInternal, "SIMT emulator: launch from inside an emulated kernel"};
  }
  char* stacks = t_stacks.get(threads);
  if (stacks == nullptr) return {StatusCode::kInternal, "SIMT emulator: cannot map fiber stacks"};
  Block b;
  b.entry = entry;
  b.params = params;
  b.dim = {block[0], block[1], block[2]};
  b.grid = {grid[0], grid[1], grid[2]};
  // Dynamic shared memory starts as garbage on a GPU; a fixed pattern (NaN for floats) makes
  // a read before write visible in the comparison instead of passing by luck.
  b.shared.assign(shared_bytes, 0xFF);
  for (unsigned z = 0; z < grid[2]; ++z) {
    for (unsigned y = 0; y < grid[1]; ++y) {
      for (unsigned x = 0; x < grid[0]; ++x) {
        b.index = {x, y, z};
        KILN_RETURN_IF_ERROR(run_block(b, stacks));
      }
    }
  }
  return Status::ok();
}

const Dim3& thread_idx() {
  return self().index;
}
const Dim3& block_idx() {
  return self().block->index;
}
const Dim3& block_dim() {
  return self().block->dim;
}
const Dim3& grid_dim() {
  return self().block->grid;
}
unsigned lane_id() {
  return self().lane;
}
void* dynamic_shared() {
  return self().block->shared.data();
}

void sync_threads() {
  Block* b = self().block;
  arrive_and_wait(b->barrier, b->live);
}

uint64_t warp_exchange(uint64_t value, int src) {
  Fiber& f = self();
  Warp& w = f.block->warps[f.warp];
  w.slots[f.lane] = value;
  arrive_and_wait(w.barrier, w.live);
  const bool valid = src >= 0 && src < kWarpSize &&
                     f.warp * kWarpSize + unsigned(src) < f.block->fibers.size() &&
                     !f.block->fibers[f.warp * kWarpSize + unsigned(src)].done;
  const uint64_t result = valid ? w.slots[src] : value;
  // Second barrier: nobody overwrites a slot before every lane has read it.
  arrive_and_wait(w.barrier, w.live);
  return result;
}

unsigned warp_ballot(bool predicate) {
  Fiber& f = self();
  Warp& w = f.block->warps[f.warp];
  w.slots[f.lane] = predicate ? 1 : 0;
  arrive_and_wait(w.barrier, w.live);
  unsigned mask = 0;
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    const size_t t = f.warp * kWarpSize + lane;
    if (t < f.block->fibers.size() && !f.block->fibers[t].done && w.slots[lane] != 0) {
      mask |= 1u << lane;
    }
  }
  arrive_and_wait(w.barrier, w.live);
  return mask;
}

namespace {

class SimtExecutable final : public Executable {
 public:
  // The plan reads the resolved config, as the GPU executable's (CudaBackend::load).
  SimtExecutable(OpSpec spec, const Config& config, Entry entry)
      : spec_(std::move(spec)), config_(resolve_config(spec_, config)), entry_(entry) {}

  Status run(const KernelArgs& args) const override {
    if (!config_.is_ok()) return config_.status();
    Result<std::vector<LaunchPlan>> plans =
        plan_launch(spec_, config_.value(), args, /*host_data=*/true);
    if (!plans.is_ok()) return plans.status();
    for (const LaunchPlan& plan : plans.value()) {
      if (plan.empty) continue;
      for (const LaunchPlan* step = &plan; step != nullptr; step = step->then.get()) {
        KILN_RETURN_IF_ERROR(
            launch(entry_, step->grid, step->block, step->shared_bytes, step->params));
      }
    }
    return Status::ok();
  }

 private:
  OpSpec spec_;
  Result<Config> config_;  // resolved, or why it cannot be
  Entry entry_;
};

}  // namespace

std::shared_ptr<const Executable> make_executable(const OpSpec& spec, const Config& config,
                                                  Entry entry) {
  return std::make_shared<SimtExecutable>(spec, config, entry);
}

}  // namespace jit::codegen::cuda::simt
