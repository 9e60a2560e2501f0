// Status and Result<T>: error values for everything that can fail at a
// boundary (files, arguments, user input). Library code returns these and
// never exits or throws across its API.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace ember {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string msg) { return Status(std::move(msg), true); }
  template <typename... Args>
  static Status errorf(fmt::format_string<Args...> f, Args&&... args) {
    return error(fmt::format(f, std::forward<Args>(args)...));
  }

  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const std::string& message() const { return msg_; }

  // Prefixes the message with context ("loading x: <msg>").
  Status with_context(const std::string& ctx) const {
    return failed_ ? error(ctx + ": " + msg_) : *this;
  }

 private:
  Status(std::string msg, bool failed) : msg_(std::move(msg)), failed_(failed) {}
  std::string msg_;
  bool failed_ = false;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace ember

// Propagates a failed Status from an expression returning Status.
#define EMBER_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::ember::Status _st = (expr);            \
    if (!_st.is_ok()) return _st;            \
  } while (0)
