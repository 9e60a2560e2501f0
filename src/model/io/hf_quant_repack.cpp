// Exact repacking of unpacked HF quantized linears (HfQuantMatrix) into
// Q4_0 / Q4_1 / Q5_0 / Q8_0 blocks, or dense F16 / F32 when no block type
// reproduces the reference dequantization; see the contract and the layout
// table in hf_quant.h.
#include <cstring>

#include "core/fp16.h"
#include "model/io/hf_quant.h"
#include "quant/blocks.h"

namespace ember {
namespace {

bool fp16_exact(float x) { return f16_to_f32(f32_to_f16(x)) == x; }

float weight_at(const HfQuantMatrix& m, int64_t o, int64_t i) {
  const int64_t g = m.g_idx[i];
  return m.scale[o * m.n_groups + g] * static_cast<float>(static_cast<int>(m.q[o * m.n_in + i]) -
                                                          static_cast<int>(m.zero[o * m.n_groups + g]));
}

// Group of each aligned 32-column block, or empty when some block spans two
// groups (or n_in is not a multiple of 32).
std::vector<int32_t> block_groups(const HfQuantMatrix& m) {
  if (m.n_in % kQK != 0) return {};
  std::vector<int32_t> out(static_cast<size_t>(m.n_in / kQK));
  for (int64_t b = 0; b < m.n_in / kQK; ++b) {
    out[b] = m.g_idx[b * kQK];
    for (int j = 1; j < kQK; ++j)
      if (m.g_idx[b * kQK + j] != out[b]) return {};
  }
  return out;
}

// Every (row, group) pair that some block uses satisfies `pred(scale, zero)`.
template <typename Pred>
bool all_groups(const HfQuantMatrix& m, const std::vector<int32_t>& groups, Pred pred) {
  std::vector<char> used(static_cast<size_t>(m.n_groups), 0);
  for (int32_t g : groups) used[g] = 1;
  for (int64_t o = 0; o < m.n_out; ++o)
    for (int64_t g = 0; g < m.n_groups; ++g)
      if (used[g] && !pred(m.scale[o * m.n_groups + g], m.zero[o * m.n_groups + g])) return false;
  return true;
}

void set_nibble(uint8_t* qs, int j, int v) {
  if (j < kQK / 2) qs[j] = static_cast<uint8_t>((qs[j] & 0xF0) | v);
  else qs[j - kQK / 2] = static_cast<uint8_t>((qs[j - kQK / 2] & 0x0F) | (v << 4));
}

template <typename Block, typename Fill>
void pack_blocks(const HfQuantMatrix& m, const std::vector<int32_t>& groups, uint8_t* dst, Fill fill) {
  const int64_t nb = m.n_in / kQK;
  for (int64_t o = 0; o < m.n_out; ++o)
    for (int64_t b = 0; b < nb; ++b) {
      Block blk;
      std::memset(&blk, 0, sizeof blk);
      const int64_t g = groups[b];
      fill(&blk, m.scale[o * m.n_groups + g], m.zero[o * m.n_groups + g], &m.q[o * m.n_in + b * kQK]);
      std::memcpy(dst + (o * nb + b) * sizeof(Block), &blk, sizeof blk);
    }
}

}  // namespace

void hf_quant_dequantize_ref(const HfQuantMatrix& m, float* out) {
  for (int64_t o = 0; o < m.n_out; ++o)
    for (int64_t i = 0; i < m.n_in; ++i) out[o * m.n_in + i] = weight_at(m, o, i);
}

DType hf_quant_layout(const HfQuantMatrix& m) {
  const std::vector<int32_t> groups = block_groups(m);
  if (!groups.empty() && all_groups(m, groups, [](float s, int) { return fp16_exact(s); })) {
    if (m.bits == 4) {
      if (all_groups(m, groups, [](float, int z) { return z == 8; })) return DType::kQ4_0;
      if (all_groups(m, groups, [](float s, int z) { return fp16_exact(-s * static_cast<float>(z)); }))
        return DType::kQ4_1;
      if (all_groups(m, groups, [](float, int z) { return z >= 0 && z <= 16; })) return DType::kQ5_0;
    } else if (m.bits == 8 && all_groups(m, groups, [](float, int z) { return z == 128; })) {
      return DType::kQ8_0;
    }
  }
  for (int64_t o = 0; o < m.n_out; ++o)
    for (int64_t i = 0; i < m.n_in; ++i)
      if (!fp16_exact(weight_at(m, o, i))) return DType::kF32;
  return DType::kF16;
}

TensorView repack_hf_quant(const HfQuantMatrix& m, const std::string& name, std::vector<std::shared_ptr<void>>* owners) {
  const DType t = hf_quant_layout(m);
  TensorView v;
  v.name = name;
  v.type = t;
  v.n_dims = 2;
  v.ne[0] = m.n_in;
  v.ne[1] = m.n_out;
  v.nbytes = dtype_row_size(t, m.n_in) * static_cast<size_t>(m.n_out);
  auto buf = std::make_shared<std::vector<uint64_t>>((v.nbytes + 7) / 8);
  uint8_t* dst = reinterpret_cast<uint8_t*>(buf->data());
  const std::vector<int32_t> groups = block_groups(m);
  switch (t) {
    case DType::kQ4_0:
      pack_blocks<BlockQ4_0>(m, groups, dst, [](BlockQ4_0* b, float s, int, const uint8_t* q) {
        b->d = f32_to_f16(s);
        for (int j = 0; j < kQK; ++j) set_nibble(b->qs, j, q[j]);
      });
      break;
    case DType::kQ4_1:
      pack_blocks<BlockQ4_1>(m, groups, dst, [](BlockQ4_1* b, float s, int z, const uint8_t* q) {
        b->d = f32_to_f16(s);
        b->m = f32_to_f16(-s * static_cast<float>(z));
        for (int j = 0; j < kQK; ++j) set_nibble(b->qs, j, q[j]);
      });
      break;
    case DType::kQ5_0:
      pack_blocks<BlockQ5_0>(m, groups, dst, [](BlockQ5_0* b, float s, int z, const uint8_t* q) {
        b->d = f32_to_f16(s);
        uint32_t qh = 0;
        for (int j = 0; j < kQK; ++j) {
          const int q5 = q[j] - z + 16;  // 0..31
          set_nibble(b->qs, j, q5 & 15);
          qh |= static_cast<uint32_t>(q5 >> 4) << j;
        }
        std::memcpy(b->qh, &qh, sizeof qh);
      });
      break;
    case DType::kQ8_0:
      pack_blocks<BlockQ8_0>(m, groups, dst, [](BlockQ8_0* b, float s, int, const uint8_t* q) {
        b->d = f32_to_f16(s);
        for (int j = 0; j < kQK; ++j) b->qs[j] = static_cast<int8_t>(q[j] - 128);
      });
      break;
    case DType::kF16: {
      auto* h = reinterpret_cast<f16_t*>(dst);
      for (int64_t o = 0; o < m.n_out; ++o)
        for (int64_t i = 0; i < m.n_in; ++i) h[o * m.n_in + i] = f32_to_f16(weight_at(m, o, i));
      break;
    }
    default:
      hf_quant_dequantize_ref(m, reinterpret_cast<float*>(dst));
      break;
  }
  v.data = dst;
  owners->push_back(std::move(buf));
  return v;
}

}  // namespace ember
