// kiln_neon_driver: the AArch64 side of the neon tests. It runs under qemu-aarch64 and serves
// requests on stdin/stdout from the x86 test program (tests/arm/qemu_executable.cc):
//   load: an AArch64 object from the arm backend, linked in-process with ORC (the backend's
//         own OrcLoader, the path kiln takes on AArch64 hosts), answered with a handle;
//   run:  a call block plus the memory regions its pointer words point into; the kernel runs
//         on copies of the regions and every region is sent back.
// The protocol (all little-endian, one request after another):
//   'L' u32 symbol_len, symbol, u64 object_size, object        -> u32 0, u32 handle | error
//   'R' u32 handle, i64 rows, u32 words, u32 pointers, u64 word[words],
//       u32 regions, {u64 size, bytes}[regions], {i32 region, u64 offset}[pointers]
//                                                             -> u32 0, bytes of each region
//   'Q'                                                       -> exits
//   error: u32 1, u32 len, message
// `--selftest` links and runs a tiny hand-made object instead (no x86 side needed).
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IRReader/IRReader.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "codegen/arm/orc_loader.h"

namespace {

using KernelFn = void (*)(const uint64_t*, int64_t, int64_t);

bool read_all(void* dst, size_t n) {
  return n == 0 || std::fread(dst, 1, n, stdin) == n;
}
template <class T>
T read_value() {
  T v{};
  if (!read_all(&v, sizeof v)) std::exit(3);  // the x86 side went away
  return v;
}
void write_all(const void* src, size_t n) {
  if (n != 0 && std::fwrite(src, 1, n, stdout) != n) std::exit(4);
}
template <class T>
void write_value(T v) {
  write_all(&v, sizeof v);
}
void reply_error(const std::string& message) {
  write_value<uint32_t>(1);
  write_value<uint32_t>(uint32_t(message.size()));
  write_all(message.data(), message.size());
  std::fflush(stdout);
}

int serve() {
  std::vector<KernelFn> kernels;
  for (;;) {
    const int op = std::fgetc(stdin);
    if (op == EOF || op == 'Q') return 0;
    if (op == 'L') {
      std::string symbol(read_value<uint32_t>(), '\0');
      if (!read_all(symbol.data(), symbol.size())) return 3;
      std::vector<uint8_t> object(read_value<uint64_t>());
      if (!read_all(object.data(), object.size())) return 3;
      std::string error;
      auto* loader = jit::codegen::arm::OrcLoader::global(&error);
      void* address = loader ? loader->load(object.data(), object.size(), symbol, &error) : nullptr;
      if (address == nullptr) {
        reply_error(error);
        continue;
      }
      kernels.push_back(reinterpret_cast<KernelFn>(address));
      write_value<uint32_t>(0);
      write_value<uint32_t>(uint32_t(kernels.size() - 1));
      std::fflush(stdout);
    } else if (op == 'R') {
      const uint32_t handle = read_value<uint32_t>();
      const int64_t rows = read_value<int64_t>();
      std::vector<uint64_t> words(read_value<uint32_t>());
      const uint32_t pointers = read_value<uint32_t>();
      if (!read_all(words.data(), words.size() * 8)) return 3;
      std::vector<std::vector<uint8_t>> regions(read_value<uint32_t>());
      for (auto& region : regions) {
        // 64 bytes of slack at the end: no kernel reads past a tensor, but a region may be
        // empty and still need a valid address.
        region.resize(read_value<uint64_t>() + 64);
        if (!read_all(region.data(), region.size() - 64)) return 3;
      }
      std::string error;
      for (uint32_t p = 0; p < pointers; ++p) {
        const int32_t index = read_value<int32_t>();
        const uint64_t offset = read_value<uint64_t>();
        if (p >= words.size()) error = "pointer word outside the block";
        if (index >= int32_t(regions.size())) error = "pointer into a region that is not sent";
        if (!error.empty()) continue;
        words[p] =
            index < 0 ? 0 : reinterpret_cast<uintptr_t>(regions[size_t(index)].data()) + offset;
      }
      if (handle >= kernels.size()) error = "unknown kernel handle";
      if (!error.empty()) {
        reply_error(error);
        continue;
      }
      // Two calls over the halves of the rows, as a row-splitting runner makes them: every
      // kernel must honour row_begin != 0 (in order, so order-dependent ops stay correct).
      const int64_t mid = rows / 2;
      if (mid > 0) kernels[handle](words.data(), 0, mid);
      if (rows > mid) kernels[handle](words.data(), mid, rows);
      write_value<uint32_t>(0);
      for (const auto& region : regions) write_all(region.data(), region.size() - 64);
      std::fflush(stdout);
    } else {
      reply_error("unknown request");
      return 2;
    }
  }
}

// Parses the LLVM IR files, then times the O3 pipeline and object emission of each on this
// (emulated) AArch64 CPU for neoverse-v1, as the backend does on an AArch64 host.
int compile_latency(int count, char** files) {
  llvm::InitializeAllTargetInfos();
  llvm::InitializeAllTargets();
  llvm::InitializeAllTargetMCs();
  llvm::InitializeAllAsmPrinters();
  std::printf("%-36s %9s %8s %9s\n", "kernel", "optimise", "emit", "total");
  for (int f = 0; f < count; ++f) {
    std::vector<double> optimise, emit;
    for (int rep = 0; rep < 3; ++rep) {
      llvm::LLVMContext context;
      llvm::SMDiagnostic diagnostic;
      std::unique_ptr<llvm::Module> module = llvm::parseIRFile(files[f], diagnostic, context);
      if (!module) {
        std::fprintf(stderr, "%s: cannot parse\n", files[f]);
        return 1;
      }
      std::string error;
      const auto triple = module->getTargetTriple();
      const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
      if (target == nullptr) {
        std::fprintf(stderr, "%s\n", error.c_str());
        return 1;
      }
      llvm::TargetOptions options;
      options.AllowFPOpFusion = llvm::FPOpFusion::Strict;
      std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
          triple, "neoverse-v1", "+neon,+bf16,+i8mm,+fullfp16", options, llvm::Reloc::PIC_,
          std::nullopt, llvm::CodeGenOpt::Aggressive));
      auto start = std::chrono::steady_clock::now();
      {
        llvm::LoopAnalysisManager lam;
        llvm::FunctionAnalysisManager fam;
        llvm::CGSCCAnalysisManager cgam;
        llvm::ModuleAnalysisManager mam;
        llvm::PassBuilder pb(tm.get());
        pb.registerModuleAnalyses(mam);
        pb.registerCGSCCAnalyses(cgam);
        pb.registerFunctionAnalyses(fam);
        pb.registerLoopAnalyses(lam);
        pb.crossRegisterProxies(lam, fam, cgam, mam);
        pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(*module, mam);
      }
      auto mid = std::chrono::steady_clock::now();
      llvm::SmallVector<char, 0> buffer;
      llvm::raw_svector_ostream os(buffer);
      llvm::legacy::PassManager pm;
      tm->addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_ObjectFile);
      pm.run(*module);
      auto end = std::chrono::steady_clock::now();
      optimise.push_back(std::chrono::duration<double, std::micro>(mid - start).count());
      emit.push_back(std::chrono::duration<double, std::micro>(end - mid).count());
    }
    std::sort(optimise.begin(), optimise.end());
    std::sort(emit.begin(), emit.end());
    std::string name = files[f];
    name = name.substr(name.rfind('/') + 4);  // drop the directory and the "NN-" prefix
    name = name.substr(0, name.size() - 3);
    std::printf("%-36s %9.0f %8.0f %9.0f\n", name.c_str(), optimise[1], emit[1],
                optimise[1] + emit[1]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--selftest") == 0) {
    std::string error;
    auto* loader = jit::codegen::arm::OrcLoader::global(&error);
    if (loader == nullptr) {
      std::fprintf(stderr, "selftest: %s\n", error.c_str());
      return 1;
    }
    // A garbage object must be refused with a message, not crash.
    const uint8_t junk[16] = {0x7f, 'E', 'L', 'F'};
    if (loader->load(junk, sizeof junk, "nothing", &error) != nullptr || error.empty()) {
      std::fprintf(stderr, "selftest: a corrupt object was accepted\n");
      return 1;
    }
    std::printf(
        "selftest: ORC LLJIT is up on this AArch64 process; corrupt objects are refused "
        "(%s)\n",
        error.substr(0, 60).c_str());
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--compile-latency") == 0) {
    return compile_latency(argc - 2, argv + 2);
  }
  return serve();
}
