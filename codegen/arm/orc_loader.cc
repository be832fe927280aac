#include "codegen/arm/orc_loader.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>

#include <mutex>

namespace jit::codegen::arm {

struct OrcLoader::State {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::mutex mutex;  // one object at a time: symbols are looked up right after adding
  uint64_t dylibs = 0;
};

OrcLoader::OrcLoader(std::unique_ptr<State> state) : state_(std::move(state)) {}
OrcLoader::~OrcLoader() = default;

OrcLoader* OrcLoader::global(std::string* error) {
  static std::string init_error;
  static OrcLoader* loader = []() -> OrcLoader* {
    // The host's target only: kernels run where they are linked. (On AArch64 this is the
    // AArch64 target; the x86-hardwired InitializeNativeTarget header is not used.)
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
    auto jit = llvm::orc::LLJITBuilder().create();
    if (!jit) {
      init_error = llvm::toString(jit.takeError());
      return nullptr;
    }
    auto state = std::make_unique<State>();
    state->jit = std::move(*jit);
    return new OrcLoader(std::move(state));
  }();
  if (loader == nullptr && error != nullptr) *error = "ORC LLJIT: " + init_error;
  return loader;
}

void* OrcLoader::load(const uint8_t* object, size_t size, const std::string& symbol,
                      std::string* error) {
  std::lock_guard lock(state_->mutex);
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(
      llvm::StringRef(reinterpret_cast<const char*>(object), size), symbol);
  // One JITDylib per object: the same kernel may be linked again (another runtime, another
  // config) without a duplicate-symbol error.
  auto dylib = state_->jit->createJITDylib("kiln" + std::to_string(state_->dylibs++));
  if (!dylib) {
    *error = "ORC cannot create a JITDylib: " + llvm::toString(dylib.takeError());
    return nullptr;
  }
  // LLVM may turn a zeroing or copy loop into a memset/memcpy call: resolve such calls
  // against this process (libc).
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      state_->jit->getDataLayout().getGlobalPrefix());
  if (!process) {
    *error = "ORC cannot search this process's symbols: " + llvm::toString(process.takeError());
    return nullptr;
  }
  dylib->addGenerator(std::move(*process));
  if (auto err = state_->jit->addObjectFile(*dylib, std::move(buffer))) {
    *error = "ORC cannot add the object of " + symbol + ": " + llvm::toString(std::move(err));
    return nullptr;
  }
  auto address = state_->jit->lookup(*dylib, symbol);
  if (!address) {
    *error = "ORC cannot find " + symbol + ": " + llvm::toString(address.takeError());
    return nullptr;
  }
  return address->toPtr<void*>();
}

}  // namespace jit::codegen::arm
