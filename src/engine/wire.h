// WireWriter / WireReader: the byte form of the messages the ranks of a
// parallel job exchange (step inputs, step_input.h; the session messages of
// parallel_runner.h): numbers in the host's layout (the ranks of a job run
// one build), arrays as a 64-bit count then the items. The reader checks
// every count against the bytes left, so a bad message is an error, never
// an overrun.
//
// Plain values; one thread each.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace ember {

class WireWriter {
 public:
  explicit WireWriter(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void put(T v) {
    static_assert(std::is_arithmetic_v<T>);
    const size_t n = out_->size();
    out_->resize(n + sizeof(T));
    std::memcpy(out_->data() + n, &v, sizeof(T));
  }
  template <typename T>
  void put_array(const std::vector<T>& v) {
    static_assert(std::is_arithmetic_v<T>);
    put<uint64_t>(v.size());
    const size_t n = out_->size();
    out_->resize(n + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(out_->data() + n, v.data(), v.size() * sizeof(T));
  }

 private:
  std::vector<uint8_t>* out_;
};

class WireReader {
 public:
  WireReader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  template <typename T>
  bool get(T* v) {
    static_assert(std::is_arithmetic_v<T>);
    if (n_ - off_ < sizeof(T)) return false;
    std::memcpy(v, p_ + off_, sizeof(T));
    off_ += sizeof(T);
    return true;
  }
  // A count of items of at least `item_bytes` each that the rest can hold.
  bool count(uint64_t* c, size_t item_bytes) {
    return get(c) && *c <= (n_ - off_) / std::max<size_t>(1, item_bytes);
  }
  template <typename T>
  bool get_array(std::vector<T>* v) {
    uint64_t c = 0;
    if (!count(&c, sizeof(T))) return false;
    v->resize(c);
    if (c) std::memcpy(v->data(), p_ + off_, c * sizeof(T));
    off_ += c * sizeof(T);
    return true;
  }
  bool at_end() const { return off_ == n_; }

 private:
  const uint8_t* p_;
  size_t n_, off_ = 0;
};

}  // namespace ember
