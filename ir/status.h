// Status and Result<T>: errors as values at the compile boundary.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace jit {

/// What went wrong, coarsely; the message says precisely.
enum class StatusCode : uint8_t {
  kOk,
  kInvalidArgument,  ///< a spec, tensor or option the caller passed is not acceptable
  kUnsupported,      ///< valid, but no backend serves it on this target
  kCompileError,     ///< a backend failed to generate code (bug or resource limit)
  kCacheError,       ///< the disk cache is unusable (permissions, ownership, I/O)
  kUnavailable,      ///< a runtime dependency is missing (e.g. CUDA driver)
  kTimeout,          ///< a lock or wait exceeded its deadline
  kInternal,         ///< an invariant broke: a kiln bug
};

/// Printable name of a status code ("invalid argument", ...).
const char* status_code_name(StatusCode code);

/// Success, or a code with a message and an optional detail (a compiler log, a dump path).
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message, std::string detail = {})
      : code_(code), message_(std::move(message)), detail_(std::move(detail)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& detail() const { return detail_; }
  /// "invalid argument: <message>" (+ "\n<detail>" when present).
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string detail_;
};

inline Status invalid_argument(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}

/// A value or the Status that explains its absence.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {}  // NOLINT: implicit by design

  bool is_ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return is_ok(); }
  /// The error; Status::ok() when a value is held.
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(state_); }
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> state_;
};

/// Thrown by the `jit::ops::` functions (like TORCH_CHECK); `compile` returns Status instead.
class Error : public std::exception {
 public:
  explicit Error(Status status) : status_(std::move(status)), what_(status_.to_string()) {}
  const char* what() const noexcept override { return what_.c_str(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
  std::string what_;
};

}  // namespace jit

/// Returns early from a function returning Status or Result<T> when `expr` fails.
#define KILN_RETURN_IF_ERROR(expr)                  \
  do {                                              \
    ::jit::Status kiln_status_ = (expr);            \
    if (!kiln_status_.is_ok()) return kiln_status_; \
  } while (0)
