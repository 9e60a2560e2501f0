// q4c keys (kernels/kv_types.h: KIVI-style 4 bits per channel over a group
// of 16 positions, the unfinished group of a query read in f16 from a tail):
// the group encoder / decoder, and Backend::attention at every level of
// every backend (backend_under_test.h) reading q4c pages against the
// reference (kv_load_key: the same tail rule, row by row). A ragged batch of
// three paged sequences (a prefill crossing the 256-key chunk boundary and
// several groups, a lone decode in the middle of a group, a decode burst
// that finishes a group), pages in shuffled order, a sliding window that
// releases pages, V in f16 and q4. The encoded region of a group that is not
// full is poisoned (NaN scales) and so are tail rows of positions never
// written: a query that reads the wrong form of a key shows as NaN or as a
// 4-bit / f16 difference far above the tolerance. Batch invariance (each
// token alone, one thread) must hold bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kernels/attention.h"
#include "kernels/attention_batch_check.h"
#include "kernels/backend_under_test.h"
#include "kernels/kv_types.h"
#include "kernels/ref/attention.h"

namespace ember {
namespace {

using testing_backend::BackendTest;
using testing_backend::gaussian;
using testing_backend::SeqSpec;
using testing_backend::same_all;

TEST(KvQ4c, RowBytesNamesAndChecks) {
  EXPECT_EQ(kv_row_bytes(KvType::kQ4C, 64), 48u);  // 16 rows share 12 * 64 bytes
  EXPECT_EQ(parse_kv_type("q4c").value(), KvType::kQ4C);
  EXPECT_EQ(parse_kv_type("KIVI").value(), KvType::kQ4C);
  EXPECT_FALSE(kv_type_check(KvType::kQ4C, 40).is_ok());
  EXPECT_TRUE(kv_type_check(KvType::kQ4C, 64).is_ok());
}

// One group of 16 rows of 2 heads x 64: each element decodes within half a
// step of its channel's (max - min) / 15 (plus f16 rounding of the inputs,
// scale and minimum), and a channel with an outlier does not widen the
// others' steps (per-channel scales).
TEST(KvQ4c, GroupRoundTripPerChannel) {
  const int hd = 64, nh = 2, n = nh * hd;
  std::vector<float> x = gaussian(kKvTokenGroup * n, 1.f, 11);
  for (int r = 0; r < kKvTokenGroup; ++r) x[r * n + 5] = 20.f + r;  // an outlier channel
  std::vector<uint8_t> rows(kKvTokenGroup * n * 2), region(12 * n);
  for (int r = 0; r < kKvTokenGroup; ++r) kv_store_row(KvType::kF16, x.data() + r * n, n, rows.data() + r * n * 2);
  kv_q4c_encode_group(rows.data(), n * 2, nh, hd, region.data());
  std::vector<float> y(hd);
  for (int h = 0; h < nh; ++h)
    for (int r = 0; r < kKvTokenGroup; ++r) {
      kv_q4c_load_row(region.data() + h * 12 * hd, r, hd, y.data());
      for (int c = 0; c < hd; ++c) {
        const int i = h * hd + c;
        float lo = INFINITY, hi = -INFINITY;
        for (int j = 0; j < kKvTokenGroup; ++j) {
          lo = std::min(lo, x[j * n + i]);
          hi = std::max(hi, x[j * n + i]);
        }
        const double tol = (hi - lo) / 15 * 0.5 * 1.02 + (std::fabs(lo) + std::fabs(hi)) * 0x1p-10;
        ASSERT_LE(std::fabs(y[c] - x[r * n + i]), tol) << "head " << h << " row " << r << " channel " << c;
        if (i != 5) {
          ASSERT_LT(hi - lo, 10.f);  // the outlier stayed in its channel
        }
      }
    }
}

// One sequence's q4c K pages and V pages (vt): n_pos positions in blocks of
// block_size in shuffled order, blocks wholly before first_visible released;
// positions < written are stored: full groups encoded, every written
// position's f16 row in its group's tail (the tail a cache keeps for the
// groups of the last forward pass); unfinished groups' regions and unwritten
// tail rows poisoned.
struct Q4cPages {
  Q4cPages(KvType vt, int64_t n_pos, int bs, int n_kv, int hd, int hdv, int64_t first_visible, int64_t written,
           uint32_t seed)
      : v_type(vt), block_size(bs) {
    const int64_t kd = int64_t{n_kv} * hd, vd = int64_t{n_kv} * hdv;
    kb_row = static_cast<int64_t>(kv_row_bytes(KvType::kQ4C, kd));
    vb_row = static_cast<int64_t>(kv_row_bytes(vt, vd));
    const int64_t n_blocks = (n_pos + bs - 1) / bs, gpb = bs / kKvTokenGroup;
    std::vector<float> kf = gaussian(n_blocks * bs * kd, 1.f, seed), vf = gaussian(n_blocks * bs * vd, 1.f, seed + 1);
    for (int64_t p = 0; p < n_blocks * bs; ++p) kf[p * kd + 3] += 4.f;  // a channel with an offset (KIVI's case)
    k.resize(n_blocks * bs * kb_row);
    v.resize(n_blocks * bs * vb_row);
    tail.resize(n_blocks * gpb, std::vector<uint8_t>(kKvTokenGroup * kd * 2));
    const f16_t nan = 0x7E00;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t phys = (b * 5 + 2) % n_blocks;
      const bool released = (b + 1) * bs <= first_visible;
      kb.push_back(released ? nullptr : k.data() + phys * bs * kb_row);
      vb.push_back(released ? nullptr : v.data() + phys * bs * vb_row);
      for (int64_t g = 0; g < gpb; ++g) {
        std::vector<uint8_t>& t = tail[phys * gpb + g];
        const int64_t p0 = b * bs + g * kKvTokenGroup;
        for (int r = 0; r < kKvTokenGroup; ++r) {
          if (p0 + r < written)
            kv_store_row(KvType::kF16, kf.data() + (p0 + r) * kd, kd, t.data() + r * kd * 2);
          else
            for (int64_t i = 0; i < kd; ++i) std::memcpy(t.data() + (r * kd + i) * 2, &nan, 2);
        }
        uint8_t* region = k.data() + (phys * bs + g * kKvTokenGroup) * kb_row;
        if (p0 + kKvTokenGroup <= written) {
          kv_q4c_encode_group(t.data(), kd * 2, n_kv, hd, region);
        } else {
          std::memset(region, 0, kKvTokenGroup * kb_row);
          for (int h = 0; h < n_kv; ++h)
            for (int c = 0; c < hd; ++c) std::memcpy(region + h * 12 * hd + 2 * c, &nan, 2);
        }
      }
      for (int64_t r = 0; r < bs; ++r) {
        const int64_t p = b * bs + r;
        std::vector<float> row(vf.begin() + p * vd, vf.begin() + (p + 1) * vd);
        if (p >= written) std::fill(row.begin(), row.end(), 0.f);
        kv_store_row(vt, row.data(), vd, v.data() + (phys * bs + r) * vb_row);
      }
    }
    for (int64_t b = 0; b < n_blocks; ++b)  // by logical block, as the caches build them
      for (int64_t g = 0; g < gpb; ++g)
        tails.push_back(kb[b] ? tail[(b * 5 + 2) % n_blocks * gpb + g].data() : nullptr);
    tail_row_bytes = kd * 2;
  }
  KvView view() const {
    KvView r = testing_backend::paged_view(kb, vb, block_size, kb_row, vb_row, KvType::kQ4C, v_type);
    r.k_tails = tails.data();
    r.k_tail_row_bytes = tail_row_bytes;
    return r;
  }
  KvType v_type;
  int block_size;
  int64_t kb_row = 0, vb_row = 0, tail_row_bytes = 0;
  std::vector<uint8_t> k, v;
  std::vector<std::vector<uint8_t>> tail;
  std::vector<const uint8_t*> kb, vb, tails;
};

// A prefill of 40 across the chunk boundary and 3 groups, a lone decode at
// position 520 (inside its group), a burst 524..527 that ends a group.
const SeqSpec kSeqs[] = {{230, 40, 16, 300}, {520, 1, 32, 544}, {524, 4, 16, 544}};


// The ragged batch of kSeqs over q4c K pages and vt V pages.
struct Q4cBatch {
  Q4cBatch(const AttentionShape& s, KvType vt) {
    for (size_t i = 0; i < std::size(kSeqs); ++i) {
      const SeqSpec& sp = kSeqs[i];
      const int64_t first = s.sliding_window > 0 ? std::max<int64_t>(0, sp.pos0 - s.sliding_window + 1) : 0;
      seqs.emplace_back(vt, sp.n_pos, sp.block_size, s.n_head_kv, s.head_dim, s.head_dim_v, first, sp.pos0 + sp.n,
                        70 + static_cast<uint32_t>(i));
    }
    for (const Q4cPages& p : seqs) views.push_back(p.view());
    for (int i : {2, 0, 1})
      for (int j = 0; j < kSeqs[i].n; ++j) {
        pos.push_back(kSeqs[i].pos0 + j);
        view_of.push_back(i);
      }
    q = gaussian(pos.size() * s.n_head * s.head_dim, 2.f, 99);
  }
  int64_t n() const { return static_cast<int64_t>(pos.size()); }
  std::vector<Q4cPages> seqs;
  std::vector<KvView> views;
  std::vector<int32_t> pos, view_of;
  std::vector<float> q;
};

const std::vector<AttentionShape> kShapes = testing_backend::compressed_page_shapes();

TEST_P(BackendTest, Q4cKeysAgainstReference) {
  for (KvType vt : {KvType::kF16, KvType::kQ4})
    for (const AttentionShape& s : kShapes) {
      SCOPED_TRACE(std::string("v=") + kv_type_name(vt) + " hd=" + std::to_string(s.head_dim));
      const Q4cBatch b(s, vt);
      std::vector<float> want(b.n() * s.n_head * s.head_dim_v);
      ref::attention(s, b.q.data(), b.pos.data(), b.n(), b.views.data(), b.view_of.data(), want.data());
      for (float w : want) ASSERT_FALSE(std::isnan(w)) << "the reference read a poisoned key";
      testing_backend::expect_attention_batch_matches(*backend_, *backend1_, exact(), s, b.q, b.pos, b.views,
                                                      b.view_of);
    }
}

// The AVX-512 build of the tiled kernel gives the AVX2 level's bits on q4c
// keys too (kernels/cpu/attention_tiles.h: the same lanes and sums).
TEST(KvQ4c, Avx512MatchesAvx2BitForBit) {
  if (cpu_max_isa() < Isa::kAvx512) GTEST_SKIP() << "CPU without AVX-512";
  ThreadPool pool(2);
  for (KvType vt : {KvType::kF16, KvType::kQ4})
    for (const AttentionShape& s : kShapes) {
      SCOPED_TRACE(std::string("v=") + kv_type_name(vt) + " hd=" + std::to_string(s.head_dim));
      const Q4cBatch b(s, vt);
      std::vector<float> out[2];
      for (int l = 0; l < 2; ++l) {
        const Isa saved = set_active_isa(l == 0 ? Isa::kAvx2 : Isa::kAvx512);
        out[l].assign(b.n() * s.n_head * s.head_dim_v, std::nanf(""));
        std::vector<float> scratch(attention_scratch_floats(s, b.n(), pool.size(), 600));
        attention_ragged(s, b.q.data(), b.pos.data(), b.n(), b.views.data(), b.view_of.data(), out[l].data(),
                         scratch.data(), pool);
        set_active_isa(saved);
      }
      EXPECT_TRUE(same_all(out[1], out[0]));
    }
}

// The tail rule itself: a query inside an unfinished group reads that
// group's keys in f16, one that ends its group reads them encoded.
TEST(KvQ4c, TailRule) {
  KvView kv;
  kv.k_type = KvType::kQ4C;
  EXPECT_EQ(kv_tail_from(kv, 0), 0);
  EXPECT_EQ(kv_tail_from(kv, 14), 0);
  EXPECT_EQ(kv_tail_from(kv, 15), INT64_MAX);
  EXPECT_EQ(kv_tail_from(kv, 37), 32);
  kv.k_type = KvType::kQ4;
  EXPECT_EQ(kv_tail_from(kv, 37), INT64_MAX);
}

}  // namespace
}  // namespace ember
