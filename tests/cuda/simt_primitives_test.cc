// The SIMT emulator on its own: built-in index variables, barriers, static and dynamic shared
// memory, warp shuffles and votes, atomics, the block reduction of kiln_common.cuh, and a
// deadlock reported instead of hanging.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

// clang-format off: the emulation header must come before any template.
#include "codegen/cuda/simt/simt.h"
#include "kiln_common.cuh"
// clang-format on

namespace {

namespace simt = jit::codegen::cuda::simt;

struct Out {
  int* data;
  float* values;
};

void index_kernel(Out o) {
  const int block = int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
  const int per_block = int(blockDim.x * blockDim.y * blockDim.z);
  const int t = int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  o.data[block * per_block + t] = block * 1000 + t;
}

jit::Status run(simt::Entry e, unsigned gx, unsigned bx, const Out& o, unsigned smem = 0,
                unsigned gy = 1, unsigned by = 1) {
  const unsigned grid[3] = {gx, gy, 1}, block[3] = {bx, by, 1};
  return simt::launch(e, grid, block, smem, &o);
}

TEST(Simt, BuiltInIndexVariables) {
  std::vector<int> data(2 * 3 * 8, -1);
  Out o{data.data(), nullptr};
  ASSERT_TRUE(run(&simt::entry<Out, &index_kernel>, 2, 4, o, 0, 3, 2).is_ok());
  for (int b = 0; b < 6; ++b) {
    for (int t = 0; t < 8; ++t) EXPECT_EQ(data[size_t(b * 8 + t)], b * 1000 + t);
  }
}

// Reverses each block's slice through dynamic shared memory: needs the barrier to be real.
void reverse_kernel(Out o) {
  float* smem = kiln_dynamic_shared<float>();
  const unsigned n = blockDim.x;
  smem[threadIdx.x] = o.values[blockIdx.x * n + threadIdx.x];
  __syncthreads();
  o.values[blockIdx.x * n + threadIdx.x] = smem[n - 1 - threadIdx.x];
}

TEST(Simt, DynamicSharedMemoryAndBarrier) {
  std::vector<float> v(3 * 96);
  std::iota(v.begin(), v.end(), 0.0f);
  Out o{nullptr, v.data()};
  ASSERT_TRUE(run(&simt::entry<Out, &reverse_kernel>, 3, 96, o, 96 * sizeof(float)).is_ok());
  for (int b = 0; b < 3; ++b) {
    for (int t = 0; t < 96; ++t) EXPECT_EQ(v[size_t(b * 96 + t)], float(b * 96 + 95 - t));
  }
}

void shuffle_kernel(Out o) {
  const int lane = int(threadIdx.x % 32);
  const int base = int(threadIdx.x) * 8;
  o.data[base + 0] = __shfl_xor_sync(0xFFFFFFFFu, lane, 5);
  o.data[base + 1] = __shfl_down_sync(0xFFFFFFFFu, lane, 3);
  o.data[base + 2] = __shfl_up_sync(0xFFFFFFFFu, lane, 2);
  o.data[base + 3] = __shfl_sync(0xFFFFFFFFu, lane * 10, 7);
  o.data[base + 4] = int(__ballot_sync(0xFFFFFFFFu, lane % 3 == 0));
  o.data[base + 5] = __any_sync(0xFFFFFFFFu, lane == 31);
  o.data[base + 6] = __all_sync(0xFFFFFFFFu, lane < 31);
  o.data[base + 7] = __shfl_xor_sync(0xFFFFFFFFu, lane, 1, 8);
}

TEST(Simt, WarpShufflesAndVotes) {
  std::vector<int> d(64 * 8, -1);
  Out o{d.data(), nullptr};
  ASSERT_TRUE(run(&simt::entry<Out, &shuffle_kernel>, 1, 64, o).is_ok());
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l) ballot |= (l % 3 == 0 ? 1u : 0u) << l;
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    const int* r = &d[size_t(t * 8)];
    EXPECT_EQ(r[0], lane ^ 5);
    EXPECT_EQ(r[1], lane + 3 < 32 ? lane + 3 : lane) << "down keeps the own value past the end";
    EXPECT_EQ(r[2], lane >= 2 ? lane - 2 : lane);
    EXPECT_EQ(r[3], 70);
    EXPECT_EQ(unsigned(r[4]), ballot);
    EXPECT_EQ(r[5], 1);
    EXPECT_EQ(r[6], 0);
    EXPECT_EQ(r[7], lane ^ 1);
  }
}

void atomic_kernel(Out o) {
  atomicAdd(&o.data[0], int(threadIdx.x) + 1);
  atomicMax(&o.data[1], int(blockIdx.x * 1000 + threadIdx.x));
  __shared__ int block_count;
  if (threadIdx.x == 0) block_count = 0;
  __syncthreads();
  atomicAdd(&block_count, 1);
  __syncthreads();
  if (threadIdx.x == 0) o.data[2 + blockIdx.x] = block_count;
}

TEST(Simt, AtomicsAndStaticSharedMemory) {
  std::vector<int> d(2 + 5, 0);
  Out o{d.data(), nullptr};
  ASSERT_TRUE(run(&simt::entry<Out, &atomic_kernel>, 5, 128, o).is_ok());
  EXPECT_EQ(d[0], 5 * 128 * 129 / 2);
  EXPECT_EQ(d[1], 4 * 1000 + 127);
  for (int b = 0; b < 5; ++b) EXPECT_EQ(d[size_t(2 + b)], 128);
}

void block_sum_kernel(Out o) {
  const float s = kiln::block_sum<256>(o.values[blockIdx.x * 256 + threadIdx.x]);
  // Every thread gets the total; thread 255 publishes it.
  if (threadIdx.x == 255) o.values[1024 + blockIdx.x] = s;
}

TEST(Simt, BlockSumOfTheTemplates) {
  std::vector<float> v(1024 + 4, 0.0f);
  for (int i = 0; i < 1024; ++i) v[size_t(i)] = float(i % 17);
  Out o{nullptr, v.data()};
  ASSERT_TRUE(run(&simt::entry<Out, &block_sum_kernel>, 4, 256, o).is_ok());
  for (int b = 0; b < 4; ++b) {
    float expect = 0;
    for (int i = 0; i < 256; ++i) expect += float((b * 256 + i) % 17);
    EXPECT_EQ(v[size_t(1024 + b)], expect);
  }
}

// Threads that exit early do not block a barrier the others reach (as on sm_70+).
void early_exit_kernel(Out o) {
  if (threadIdx.x >= 40) return;
  __syncthreads();
  o.data[threadIdx.x] = 1;
}

TEST(Simt, ExitedThreadsDoNotBlockBarriers) {
  std::vector<int> d(64, 0);
  Out o{d.data(), nullptr};
  ASSERT_TRUE(run(&simt::entry<Out, &early_exit_kernel>, 1, 64, o).is_ok());
  EXPECT_EQ(std::accumulate(d.begin(), d.end(), 0), 40);
}

// Half a warp in a shuffle, the other half at a block barrier: a hang on a GPU.
void deadlock_kernel(Out o) {
  if (threadIdx.x % 32 < 16) {
    o.data[threadIdx.x] = __shfl_xor_sync(0xFFFFFFFFu, int(threadIdx.x), 1);
  } else {
    __syncthreads();
  }
}

TEST(Simt, DeadlockIsReportedNotHung) {
  std::vector<int> d(32, 0);
  Out o{d.data(), nullptr};
  const jit::Status s = run(&simt::entry<Out, &deadlock_kernel>, 1, 32, o);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("deadlock"), std::string::npos) << s.message();
}

TEST(Simt, RejectsOversizedBlocks) {
  Out o{nullptr, nullptr};
  const jit::Status s = run(&simt::entry<Out, &index_kernel>, 1, 2048, o);
  EXPECT_EQ(s.code(), jit::StatusCode::kInvalidArgument);
}

// fmaxf as the device computes it: any NaN operand, signalling included, gives the other one
// (the templates' amax reductions rely on it; glibc's fmaxf returns NaN for a signalling one).
TEST(Simt, FmaxfIgnoresEveryNan) {
  const float snan = __uint_as_float(0x7F800001u), qnan = __uint_as_float(0xFFC00000u);
  for (float nan : {snan, qnan}) {
    EXPECT_EQ(kiln::fmaxf(nan, 2.5f), 2.5f);
    EXPECT_EQ(kiln::fmaxf(-2.5f, nan), -2.5f);
    EXPECT_TRUE(std::isnan(kiln::fmaxf(nan, nan)));
  }
  EXPECT_EQ(kiln::fmaxf(1.0f, 3.0f), 3.0f);
  EXPECT_EQ(kiln::fmaxf(-1.0f, -3.0f), -1.0f);
}
}  // namespace
