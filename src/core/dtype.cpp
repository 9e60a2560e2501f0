// DType traits table; see dtype.h.
#include "core/dtype.h"
#include "core/dtype_sparse.h"

#include <array>
#include <cctype>
#include <string>

namespace ember {
namespace {

struct Entry {
  DType type;
  DTypeTraits traits;
};

// Sizes must match quant/blocks.h (static_asserts there check them).
constexpr Entry kTable[] = {
    {DType::kF32, {"f32", 1, 4, false}},
    {DType::kF16, {"f16", 1, 2, false}},
    {DType::kQ4_0, {"q4_0", 32, 18, true}},
    {DType::kQ4_1, {"q4_1", 32, 20, true}},
    {DType::kQ5_0, {"q5_0", 32, 22, true}},
    {DType::kQ5_1, {"q5_1", 32, 24, true}},
    {DType::kQ8_0, {"q8_0", 32, 34, true}},
    {DType::kQ8_1, {"q8_1", 32, 36, true}},
    {DType::kQ2_K, {"q2_K", 256, 84, true}},
    {DType::kQ3_K, {"q3_K", 256, 110, true}},
    {DType::kQ4_K, {"q4_K", 256, 144, true}},
    {DType::kQ5_K, {"q5_K", 256, 176, true}},
    {DType::kQ6_K, {"q6_K", 256, 210, true}},
    {DType::kQ8_K, {"q8_K", 256, 292, true}},
    {DType::kI8, {"i8", 1, 1, false}},
    {DType::kI16, {"i16", 1, 2, false}},
    {DType::kI32, {"i32", 1, 4, false}},
    {DType::kI64, {"i64", 1, 8, false}},
    {DType::kF64, {"f64", 1, 8, false}},
    {DType::kBF16, {"bf16", 1, 2, false}},
    {DType::kMXFP4, {"mxfp4", 32, 17, true}},
    {DType::kQ4_0_R16, {"q4_0_r16", 32, 18, true}},
    {DType::kQ5_0_R16, {"q5_0_r16", 32, 22, true}},
    {DType::kQ8_0_R16, {"q8_0_r16", 32, 34, true}},
    {DType::kQ4_K_R16, {"q4_K_r16", 256, 144, true}},
    {DType::kQ6_K_R16, {"q6_K_r16", 256, 210, true}},
};

constexpr uint32_t kLayoutBit = 0x100;
constexpr uint32_t kSq8Base = static_cast<uint32_t>(kSQ8);
constexpr uint32_t kSq4Base = static_cast<uint32_t>(kSQ4);
constexpr int kSparseBlock = 64;
constexpr size_t kSparseHeaderBytes = 12;  // u64 mask + 2 f16 scales per block (quant/sparse.h)

// Traits of kSQ8 | C (C = 1..64: 12 + C bytes a block of 64) and kSQ4 | C
// (C even, 2..64: 12 + C / 2 bytes).
struct SparseTraits {
  std::array<std::string, 65> names8, names4;
  std::array<DTypeTraits, 65> traits8, traits4;
  SparseTraits() {
    for (int c = 1; c <= kSparseBlock; ++c) {
      names8[c] = "sq8_c" + std::to_string(c);
      traits8[c] = {names8[c].c_str(), kSparseBlock, kSparseHeaderBytes + static_cast<size_t>(c), true};
      if (c % 2) continue;
      names4[c] = "sq4_c" + std::to_string(c);
      traits4[c] = {names4[c].c_str(), kSparseBlock, kSparseHeaderBytes + static_cast<size_t>(c / 2), true};
    }
  }
};

const SparseTraits& sparse_traits() {
  static const SparseTraits t;
  return t;
}

}  // namespace

bool dtype_is_sq8(DType t) {
  const uint32_t id = static_cast<uint32_t>(t);
  return id > kSq8Base && id <= kSq8Base + kSparseBlock;
}

bool dtype_is_sq4(DType t) {
  const uint32_t id = static_cast<uint32_t>(t);
  return id > kSq4Base && id <= kSq4Base + kSparseBlock && id % 2 == 0;
}

bool dtype_is_sparse(DType t) { return dtype_is_sq8(t) || dtype_is_sq4(t); }

int dtype_sparse_capacity(DType t) {
  const uint32_t id = static_cast<uint32_t>(t);
  return dtype_is_sq8(t) ? static_cast<int>(id - kSq8Base) : dtype_is_sq4(t) ? static_cast<int>(id - kSq4Base) : 0;
}

int dtype_sparse_bits(DType t) { return dtype_is_sq8(t) ? 8 : dtype_is_sq4(t) ? 4 : 0; }

DType dtype_sq8(int capacity) { return static_cast<DType>(kSq8Base + static_cast<uint32_t>(capacity)); }

DType dtype_sq4(int capacity) { return static_cast<DType>(kSq4Base + static_cast<uint32_t>(capacity)); }
DType dtype_sparse_dense(DType t) { return dtype_is_sq8(t) ? DType::kQ8_0 : dtype_is_sq4(t) ? DType::kQ4_0 : t; }

const DTypeTraits* dtype_traits(DType t) {
  if (dtype_is_sq8(t)) return &sparse_traits().traits8[static_cast<size_t>(dtype_sparse_capacity(t))];
  if (dtype_is_sq4(t)) return &sparse_traits().traits4[static_cast<size_t>(dtype_sparse_capacity(t))];
  for (const Entry& e : kTable)
    if (e.type == t) return &e.traits;
  return nullptr;
}

bool dtype_valid(uint32_t id) { return (id & kLayoutBit) == 0 && dtype_traits(static_cast<DType>(id)) != nullptr; }

int dtype_row_group(DType t) { return (static_cast<uint32_t>(t) & kLayoutBit) ? 16 : 1; }

DType dtype_layout_base(DType t) { return static_cast<DType>(static_cast<uint32_t>(t) & ~kLayoutBit); }

const char* dtype_name(DType t) {
  const DTypeTraits* tr = dtype_traits(t);
  return tr ? tr->name : "unknown";
}

bool dtype_from_name(std::string_view name, DType* out) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const Entry& e : kTable) {
    if (static_cast<uint32_t>(e.type) & kLayoutBit) continue;
    std::string n = e.traits.name;
    for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (n == lower) {
      *out = e.type;
      return true;
    }
  }
  return false;
}

}  // namespace ember
