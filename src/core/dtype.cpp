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
constexpr uint32_t kSparseBase = static_cast<uint32_t>(kSQ8);
constexpr int kSparseBlock = 64;
constexpr size_t kSparseHeaderBytes = 12;  // u64 mask + 2 f16 scales per block (quant/sparse.h)

// Traits of kSQ8 | C, C = 1..64: blocks of 64, 12 + C bytes a block.
struct SparseTraits {
  std::array<std::string, 65> names;
  std::array<DTypeTraits, 65> traits;
  SparseTraits() {
    for (int c = 1; c <= kSparseBlock; ++c) {
      names[c] = "sq8_c" + std::to_string(c);
      traits[c] = {names[c].c_str(), kSparseBlock, kSparseHeaderBytes + static_cast<size_t>(c), true};
    }
  }
};

const SparseTraits& sparse_traits() {
  static const SparseTraits t;
  return t;
}

}  // namespace

bool dtype_is_sparse(DType t) {
  const uint32_t id = static_cast<uint32_t>(t);
  return id > kSparseBase && id <= kSparseBase + kSparseBlock;
}

int dtype_sparse_capacity(DType t) {
  return dtype_is_sparse(t) ? static_cast<int>(static_cast<uint32_t>(t) - kSparseBase) : 0;
}

DType dtype_sq8(int capacity) { return static_cast<DType>(kSparseBase + static_cast<uint32_t>(capacity)); }

const DTypeTraits* dtype_traits(DType t) {
  if (dtype_is_sparse(t)) return &sparse_traits().traits[static_cast<size_t>(dtype_sparse_capacity(t))];
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
