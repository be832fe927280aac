// Peak loops for bench_gemm: each thread runs `iterations` rounds of independent
// multiply-accumulate instructions with no memory operands, so the loop is bound only by the
// issue rate of that instruction:
//   vector kinds: 12 zmm accumulators (more than latency 4 x 2 FMA ports needs), one
//                 instruction each per round (fp32 FMA on a CPU without AVX-512: 12 ymm);
//   AMX kinds:    4 accumulator tiles (tmm0-3) fed by two A tiles (tmm4-5) and two B tiles
//                 (tmm6-7), all 16 rows x 64 bytes, one tile op each per round.
// Operands are zero (no denormal or NaN slow paths). Work per round:
//   vfmadd231ps  12 x 16 x 2           =    384 flop (ymm: 192)
//   vdpbf16ps    12 x 16 x 2 x 2       =    768 flop
//   vpdpbusd     12 x 16 x 4 x 2       =  1,536 op
//   tdpbf16ps     4 x 16 x 16 x 32 x 2 = 65,536 flop
//   tdpbusd       4 x 16 x 16 x 64 x 2 = 131,072 op
#include "bench/gemm_peaks.h"

#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xbyak/xbyak.h>
#include <xbyak/xbyak_util.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

namespace jit::bench {
namespace {

constexpr int kVectorAccumulators = 12;
constexpr int kTileOpsPerRound = 4;

// The fp32 FMA peak in ymm registers: on a CPU without AVX-512 (8 lanes per instruction).
bool ymm_fma(PeakKind kind) {
  using Cpu = Xbyak::util::Cpu;
  static const Cpu cpu;
  return kind == PeakKind::kFmaF32 && !cpu.has(Cpu::tAVX512F);
}

double ops_per_round(PeakKind kind) {
  switch (kind) {
    case PeakKind::kFmaF32: return kVectorAccumulators * (ymm_fma(kind) ? 8 : 16) * 2;
    case PeakKind::kDpBf16: return kVectorAccumulators * 16 * 2 * 2;
    case PeakKind::kVnniI8: return kVectorAccumulators * 16 * 4 * 2;
    case PeakKind::kAmxBf16: return kTileOpsPerRound * 16.0 * 16 * 32 * 2;
    case PeakKind::kAmxI8: return kTileOpsPerRound * 16.0 * 16 * 64 * 2;
  }
  return 0;
}

bool is_amx(PeakKind kind) {
  return kind == PeakKind::kAmxBf16 || kind == PeakKind::kAmxI8;
}

// void loop(int64_t rounds /* rdi */, const void* tile_config /* rsi */)
class PeakLoop : public Xbyak::CodeGenerator {
 public:
  explicit PeakLoop(PeakKind kind) : Xbyak::CodeGenerator(4096) {
    using namespace Xbyak;
    if (is_amx(kind)) {
      ldtilecfg(ptr[rsi]);
      for (int i = 0; i < 8; ++i) tilezero(Tmm(i));
    } else if (ymm_fma(kind)) {
      for (int i = 0; i < kVectorAccumulators + 2; ++i) vxorps(Ymm(i), Ymm(i), Ymm(i));
    } else {
      for (int i = 0; i < kVectorAccumulators; ++i) vpxord(Zmm(i), Zmm(i), Zmm(i));
      vpxord(zmm30, zmm30, zmm30);
      vpxord(zmm31, zmm31, zmm31);
    }
    Label l_loop;
    L(l_loop);
    switch (kind) {
      case PeakKind::kFmaF32:
        for (int i = 0; i < kVectorAccumulators; ++i) {
          if (ymm_fma(kind)) {
            vfmadd231ps(Ymm(i), Ymm(kVectorAccumulators), Ymm(kVectorAccumulators + 1));
          } else {
            vfmadd231ps(Zmm(i), zmm30, zmm31);
          }
        }
        break;
      case PeakKind::kDpBf16:
        for (int i = 0; i < kVectorAccumulators; ++i) vdpbf16ps(Zmm(i), zmm30, zmm31);
        break;
      case PeakKind::kVnniI8:
        for (int i = 0; i < kVectorAccumulators; ++i) vpdpbusd(Zmm(i), zmm30, zmm31);
        break;
      case PeakKind::kAmxBf16:
        tdpbf16ps(tmm0, tmm4, tmm6);
        tdpbf16ps(tmm1, tmm4, tmm7);
        tdpbf16ps(tmm2, tmm5, tmm6);
        tdpbf16ps(tmm3, tmm5, tmm7);
        break;
      case PeakKind::kAmxI8:
        tdpbusd(tmm0, tmm4, tmm6);
        tdpbusd(tmm1, tmm4, tmm7);
        tdpbusd(tmm2, tmm5, tmm6);
        tdpbusd(tmm3, tmm5, tmm7);
        break;
    }
    dec(rdi);
    jnz(l_loop, T_NEAR);
    if (is_amx(kind)) {
      tilerelease();
    } else {
      vzeroupper();
    }
    ret();
    ready();
  }
};

// The 64-byte tile configuration: palette 1, eight tiles of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int i = 0; i < 8; ++i) {
      colsb[i] = 64;
      rows[i] = 16;
    }
  }
};
static_assert(sizeof(TileConfig) == 64);

// Linux makes a process ask before it may use the AMX tile data state.
bool request_amx_permission() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

std::string_view peak_name(PeakKind kind) {
  switch (kind) {
    case PeakKind::kFmaF32:
      return ymm_fma(kind) ? "fp32 FMA (vfmadd231ps ymm)" : "fp32 FMA (vfmadd231ps zmm)";
    case PeakKind::kDpBf16: return "bf16 dot (vdpbf16ps zmm)";
    case PeakKind::kVnniI8: return "int8 VNNI (vpdpbusd zmm)";
    case PeakKind::kAmxBf16: return "AMX bf16 (tdpbf16ps)";
    case PeakKind::kAmxI8: return "AMX int8 (tdpbusd)";
  }
  return "?";
}

bool peak_available(PeakKind kind) {
  using Cpu = Xbyak::util::Cpu;
  static const Cpu cpu;
  switch (kind) {
    case PeakKind::kFmaF32: return cpu.has(Cpu::tAVX512F) || cpu.has(Cpu::tFMA);
    case PeakKind::kDpBf16: return cpu.has(Cpu::tAVX512_BF16);
    case PeakKind::kVnniI8: return cpu.has(Cpu::tAVX512_VNNI);
    case PeakKind::kAmxBf16:
    case PeakKind::kAmxI8: {
      static const bool permitted = cpu.has(Cpu::tAMX_TILE) && cpu.has(Cpu::tAMX_BF16) &&
                                    cpu.has(Cpu::tAMX_INT8) && request_amx_permission();
      return permitted;
    }
  }
  return false;
}

double measure_peak_gflops(PeakKind kind, int threads, int repeats) {
  if (!peak_available(kind)) return 0;
  const PeakLoop loop(kind);
  const auto fn = loop.getCode<void (*)(int64_t, const void*)>();
  const TileConfig config;
  // About 20 ms per repeat at the expected rates (AMX ops take ~16 cycles each).
  const int64_t rounds = is_amx(kind) ? 1'000'000 : 20'000'000;
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    fn(rounds, &config);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, ops_per_round(kind) * double(rounds) * threads / seconds / 1e9);
  }
  return best;
}

}  // namespace jit::bench
