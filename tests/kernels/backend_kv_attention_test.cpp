// Compressed KV pages (kernels/kv_types.h): the row encoder and decoder, and
// Backend::attention at every level of every backend (backend_under_test.h)
// reading f16 / bf16 / q8 / q4 pages (K and V types equal and mixed) against
// the reference, which decodes each row with kv_load_row: a ragged batch of
// three paged sequences (a prefill crossing the 256-key chunk boundary,
// decode at 520 keys, a short decode burst), pages in shuffled order,
// released pages before a sliding window, and rows past the last query
// poisoned with NaN (a read past the causal edge shows). Both sides compute
// on the same decoded values, so the tolerance is the f32 one of
// backend_attention_test.cpp; batch invariance (token alone, one thread)
// must hold bit for bit. A last check bounds how far a compressed cache
// moves attention from the f32 one (a broken encoding would show).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "kernels/attention_batch_check.h"
#include "kernels/backend_under_test.h"
#include "kernels/kv_types.h"
#include "kernels/ref/attention.h"

namespace ember {
namespace {

using testing_backend::BackendTest;
using testing_backend::gaussian;
using testing_backend::SeqSpec;

TEST(KvTypes, RowBytesAndNames) {
  EXPECT_EQ(kv_row_bytes(KvType::kF32, 64), 256u);
  EXPECT_EQ(kv_row_bytes(KvType::kF16, 64), 128u);
  EXPECT_EQ(kv_row_bytes(KvType::kBF16, 64), 128u);
  EXPECT_EQ(kv_row_bytes(KvType::kQ8, 64), 68u);
  EXPECT_EQ(kv_row_bytes(KvType::kQ4, 64), 36u);
  for (int i = 0; i < kKvTypeCount; ++i) {
    const KvType t = static_cast<KvType>(i);
    auto r = parse_kv_type(kv_type_name(t));
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r.value(), t);
  }
  EXPECT_EQ(parse_kv_type("Q8_0").value(), KvType::kQ8);
  EXPECT_FALSE(parse_kv_type("q5").is_ok());
  EXPECT_FALSE(kv_type_check(KvType::kQ4, 40).is_ok());
  EXPECT_TRUE(kv_type_check(KvType::kF16, 40).is_ok());
  EXPECT_TRUE(kv_type_check(KvType::kQ8, 64).is_ok());
}

// Round trip error of each format over rows of 2 heads x 64: exact for f32,
// half / bfloat16 rounding for f16 / bf16, half a step of the group scale
// for q8 / q4 (plus the f16 rounding of the scale).
TEST(KvTypes, EncodeDecodeRoundTrip) {
  const int n = 128;
  std::vector<float> x = gaussian(n, 1.f, 5);
  x[7] = 6.f;  // an outlier: its group's scale grows, the others' do not
  for (int i = 0; i < kKvTypeCount; ++i) {
    const KvType t = static_cast<KvType>(i);
    if (kv_token_grouped(t)) continue;  // a group format (backend_kv_q4c_test.cpp)
    SCOPED_TRACE(kv_type_name(t));
    std::vector<uint8_t> buf(kv_row_bytes(t, n));
    std::vector<float> y(n);
    kv_store_row(t, x.data(), n, buf.data());
    kv_load_row(t, buf.data(), n, y.data());
    for (int g = 0; g < n / kKvGroup; ++g) {
      float amax = 0.f;
      for (int j = 0; j < kKvGroup; ++j) amax = std::max(amax, std::fabs(x[g * kKvGroup + j]));
      for (int j = 0; j < kKvGroup; ++j) {
        const int k = g * kKvGroup + j;
        double tol = 0;
        switch (t) {
          case KvType::kF32: tol = 0; break;
          case KvType::kF16: tol = std::fabs(x[k]) * 0x1p-11 + 1e-7; break;
          case KvType::kBF16: tol = std::fabs(x[k]) * 0x1p-8; break;
          case KvType::kQ8: tol = amax / 127 * 0.5 * 1.01 + std::fabs(x[k]) * 0x1p-10; break;
          case KvType::kQ4: tol = amax / 8 * 0.5 * 1.01 + std::fabs(x[k]) * 0x1p-10; break;
          case KvType::kQ4C: break;
        }
        ASSERT_LE(std::fabs(y[k] - x[k]), tol) << "element " << k;
      }
    }
    if (t == KvType::kQ8 || t == KvType::kQ4) {  // the scale sits first in each group, as f16
      f16_t h;
      std::memcpy(&h, buf.data(), 2);
      EXPECT_NEAR(std::fabs(f16_to_f32(h)), 6.f / (t == KvType::kQ8 ? 127.f : 8.f), 1e-2);
    }
  }
}

// One sequence's compressed pages: n_pos positions of [n_kv, head_dim] K and
// [n_kv, head_dim_v] V rows, in blocks of block_size in shuffled order;
// blocks wholly before first_visible released; rows >= end_visible
// decode to NaN.
struct KvPages {
  KvPages(KvTypes ty, int64_t n_pos, int bs, int n_kv, int hd, int hdv, int64_t first_visible, int64_t end_visible,
          uint32_t seed)
      : types(ty), block_size(bs) {
    const int64_t kd = int64_t{n_kv} * hd, vd = int64_t{n_kv} * hdv;
    kb_row = static_cast<int64_t>(kv_row_bytes(ty.k, kd));
    vb_row = static_cast<int64_t>(kv_row_bytes(ty.v, vd));
    const int64_t n_blocks = (n_pos + bs - 1) / bs;
    kf = gaussian(n_blocks * bs * kd, 1.f, seed);
    vf = gaussian(n_blocks * bs * vd, 1.f, seed + 1);
    for (int64_t p = 0; p < n_blocks * bs; p += 37) kf[p * kd % kf.size()] = 5.f;  // outliers
    for (int64_t p = end_visible; p < n_blocks * bs; ++p) {
      std::fill_n(kf.begin() + p * kd, kd, std::nanf(""));
      std::fill_n(vf.begin() + p * vd, vd, std::nanf(""));
    }
    k.resize(n_blocks * bs * kb_row);
    v.resize(n_blocks * bs * vb_row);
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t phys = (b * 7 + 3) % n_blocks;
      const bool released = (b + 1) * bs <= first_visible;
      kb.push_back(released ? nullptr : k.data() + phys * bs * kb_row);
      vb.push_back(released ? nullptr : v.data() + phys * bs * vb_row);
      for (int64_t r = 0; r < bs; ++r) {
        const int64_t p = b * bs + r;
        encode(ty.k, kf.data() + p * kd, kd, k.data() + (phys * bs + r) * kb_row, p >= end_visible);
        encode(ty.v, vf.data() + p * vd, vd, v.data() + (phys * bs + r) * vb_row, p >= end_visible);
      }
    }
  }
  // Quantized rows poisoned through their scales (NaN does not quantize).
  static void encode(KvType t, const float* x, int64_t n, uint8_t* dst, bool poison) {
    if (!poison || t == KvType::kF32 || t == KvType::kF16 || t == KvType::kBF16) {  // floats keep NaN
      kv_store_row(t, x, n, dst);
      return;
    }
    const size_t group = kv_row_bytes(t, kKvGroup);
    std::vector<float> zero(n, 0.f);
    kv_store_row(t, zero.data(), n, dst);
    const f16_t nan = 0x7E00;
    for (int64_t g = 0; g < n / kKvGroup; ++g) std::memcpy(dst + g * group, &nan, 2);
  }
  KvView view() const { return testing_backend::paged_view(kb, vb, block_size, kb_row, vb_row, types.k, types.v); }
  KvTypes types;
  int block_size;
  int64_t kb_row = 0, vb_row = 0;
  std::vector<float> kf, vf;  // the f32 values before encoding
  std::vector<uint8_t> k, v;
  std::vector<const uint8_t*> kb, vb;
};

const SeqSpec kSeqs[] = {{250, 21, 16, 300}, {520, 1, 16, 530}, {515, 4, 32, 530}};

const KvTypes kTypes[] = {{KvType::kF16, KvType::kF16}, {KvType::kBF16, KvType::kBF16}, {KvType::kQ8, KvType::kQ8},
                          {KvType::kQ4, KvType::kQ4},   {KvType::kQ8, KvType::kF16},   {KvType::kF32, KvType::kQ4}};

const std::vector<AttentionShape> kShapes = testing_backend::compressed_page_shapes();

struct Batch {
  std::vector<KvPages> seqs;
  std::vector<KvView> views;
  std::vector<int32_t> pos, view_of_token;
  std::vector<float> q;
};

Batch make_batch(const AttentionShape& s, KvTypes ty) {
  Batch b;
  for (size_t i = 0; i < std::size(kSeqs); ++i) {
    const SeqSpec& sp = kSeqs[i];
    const int64_t first = s.sliding_window > 0 ? std::max<int64_t>(0, sp.pos0 - s.sliding_window + 1) : 0;
    b.seqs.emplace_back(ty, sp.n_pos, sp.block_size, s.n_head_kv, s.head_dim, s.head_dim_v, first, sp.pos0 + sp.n,
                        40 + static_cast<uint32_t>(i));
  }
  for (const KvPages& p : b.seqs) b.views.push_back(p.view());
  for (int i : {2, 0, 1})
    for (int j = 0; j < kSeqs[i].n; ++j) {
      b.pos.push_back(kSeqs[i].pos0 + j);
      b.view_of_token.push_back(i);
    }
  b.q = gaussian(b.pos.size() * s.n_head * s.head_dim, 2.f, 98);
  return b;
}

TEST_P(BackendTest, AttentionOnCompressedPagesAgainstReference) {
  for (const KvTypes& ty : kTypes)
    for (const AttentionShape& s : kShapes) {
      SCOPED_TRACE(std::string("k=") + kv_type_name(ty.k) + " v=" + kv_type_name(ty.v) +
                   " hd=" + std::to_string(s.head_dim));
      const Batch b = make_batch(s, ty);
      testing_backend::expect_attention_batch_matches(*backend_, *backend1_, exact(), s, b.q, b.pos, b.views,
                                                      b.view_of_token);
    }
}

// The same batch over f32 pages of the unencoded values: how far each
// format moves the attention output (mean |diff| over outputs of unit-scale
// inputs). Bounds about twice the measured error: a wrong nibble order,
// scale or sign would be far above them.
TEST_P(BackendTest, CompressedPagesStayCloseToF32) {
  const AttentionShape s = kShapes[0];
  const Batch f = make_batch(s, {});
  const int64_t n = static_cast<int64_t>(f.pos.size()), o_row = int64_t{s.n_head} * s.head_dim_v;
  std::vector<float> base(n * o_row);
  backend_->attention(s, f.q.data(), f.pos.data(), n, f.views.data(), f.view_of_token.data(), base.data());
  for (const KvTypes& ty : kTypes) {
    SCOPED_TRACE(std::string("k=") + kv_type_name(ty.k) + " v=" + kv_type_name(ty.v));
    const Batch b = make_batch(s, ty);
    std::vector<float> got(n * o_row);
    backend_->attention(s, b.q.data(), b.pos.data(), n, b.views.data(), b.view_of_token.data(), got.data());
    double err = 0, mag = 0;
    for (int64_t i = 0; i < n * o_row; ++i) {
      err += std::fabs(got[i] - base[i]);
      mag += std::fabs(base[i]);
    }
    // Measured (AVX2, this batch): f16 4e-4, bf16 3.6e-3, q8 1.1e-2, q4 0.18.
    auto bound = [](KvType t) {
      switch (t) {
        case KvType::kF32: return 0.0;
        case KvType::kF16: return 2e-3;
        case KvType::kBF16: return 1e-2;
        case KvType::kQ8: return 3e-2;
        case KvType::kQ4: return 0.3;
        case KvType::kQ4C: return 0.3;
      }
      return 0.0;
    };
    EXPECT_LT(err / mag, std::max(bound(ty.k), bound(ty.v))) << "relative error";
    EXPECT_GT(err, 0.0);  // the cache really is compressed
  }
}

}  // namespace
}  // namespace ember
