// Status and Result<T>: errors a user or a file can cause, with a message a
// user understands. Internal invariants use PAGODA_CHECK instead.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace pagoda {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad user input (CLI flag, HTTP field, prompt)
  kNotFound,
  kOutOfRange,
  kDataLoss,       // corrupt or truncated file
  kUnimplemented,  // valid input we do not support (e.g. unknown dtype)
  kResourceExhausted,
  kUnavailable,
  kInternal,
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a value or a non-ok Status.
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).is_ok()) {
      std::fprintf(stderr, "Result constructed from ok Status\n");
      std::abort();
    }
  }
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace pagoda

// Propagate a non-ok Status from an expression returning Status.
#define PAGODA_RETURN_IF_ERROR(expr) \
  do {                               \
    ::pagoda::Status _st = (expr);   \
    if (!_st.is_ok()) return _st;    \
  } while (0)

#define PAGODA_CONCAT_INNER(a, b) a##b
#define PAGODA_CONCAT(a, b) PAGODA_CONCAT_INNER(a, b)
// Assign the value of a Result expression or return its Status.
#define PAGODA_ASSIGN_OR_RETURN(lhs, expr)                                                     \
  auto PAGODA_CONCAT(_res_, __LINE__) = (expr);                                                \
  if (!PAGODA_CONCAT(_res_, __LINE__).is_ok()) return PAGODA_CONCAT(_res_, __LINE__).status(); \
  lhs = std::move(PAGODA_CONCAT(_res_, __LINE__)).value()
