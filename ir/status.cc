#include "ir/status.h"

namespace jit {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kCompileError: return "compile error";
    case StatusCode::kCacheError: return "cache error";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  std::string text = std::string(status_code_name(code_)) + ": " + message_;
  if (!detail_.empty()) text += "\n" + detail_;
  return text;
}

}  // namespace jit
