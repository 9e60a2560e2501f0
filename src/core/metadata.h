// Key/value metadata of a model file (GGUF's typed values), in insertion
// order with lookup by key. GGUF files and the Hugging Face loader (which
// translates config.json into GGUF keys) both produce one, and everything
// downstream (config, tokenizer, templates) reads it, so it lives in core/:
// the tokenizer does not need to link the model library to read it.
// Plain value types; not thread-safe for concurrent mutation.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ember {

enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5,
  kFloat32 = 6, kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* gguf_type_name(GgufType t);
// Integer types (bool included) and float types.
bool gguf_type_is_int(GgufType t);
bool gguf_type_is_float(GgufType t);

// One metadata value. Scalars hold their value in the matching field; arrays
// hold their elements (numeric arrays in `nums`/`ints`, strings in
// `strings`, nested arrays in `items`).
struct GgufValue {
  GgufType type = GgufType::kUint8;
  GgufType elem_type = GgufType::kUint8;  // arrays only
  uint64_t count = 0;                     // arrays only: number of elements

  int64_t i = 0;        // integer and bool scalars (uint64 values above INT64_MAX keep their bits)
  double f = 0;         // float scalars
  std::string str;      // string scalar
  std::vector<std::string> strings;  // array of strings
  std::vector<int64_t> ints;         // array of integers / bools
  std::vector<double> nums;          // array of floats
  std::vector<GgufValue> items;      // array of arrays

  bool is_int() const;    // any integer type or bool
  bool is_float() const;  // float32/float64
};

// Key/value metadata in insertion order with lookup by key. GGUF files and
// the Hugging Face loader (which translates config.json into GGUF keys) both
// produce one of these, so everything downstream reads one format.
class Metadata {
 public:
  const std::vector<std::pair<std::string, GgufValue>>& entries() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  // Inserts or replaces.
  void set(const std::string& key, GgufValue v);
  // Typed getters: nullopt if the key is missing or has an incompatible type
  // (get_int: integer or bool scalars; uint64 values above INT64_MAX give
  // nullopt. get_bool: bool scalars only).
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;  // accepts ints too
  std::optional<bool> get_bool(const std::string& key) const;
  const std::string* get_string(const std::string& key) const;

  // Convenience constructors for values.
  static GgufValue make_string(std::string s);
  static GgufValue make_int(int64_t v, GgufType t = GgufType::kInt64);
  static GgufValue make_float(double v, GgufType t = GgufType::kFloat32);
  static GgufValue make_bool(bool v);
  static GgufValue make_string_array(std::vector<std::string> v);
  // Integer array with elements of type t (GGUF's int32 by default).
  static GgufValue make_int_array(const std::vector<int32_t>& v, GgufType t = GgufType::kInt32);

 private:
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> index_;
};

}  // namespace ember
