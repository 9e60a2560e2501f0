// The checks every paged-attention test makes on a ragged batch
// (backend_kv_attention_test.cpp, backend_kv_q4c_test.cpp): Backend::
// attention against ref::attention (bit for bit at the reference level,
// else within 2e-5 relative), the same bits on one thread, and each token
// alone (the decode path) through its own view; plus the batch shapes
// those tests share.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/backend_under_test.h"
#include "kernels/ref/attention.h"

namespace ember::testing_backend {

// One paged sequence of a test batch: queries at pos0 .. pos0 + n - 1, pages
// of block_size positions, n_pos positions allocated.
struct SeqSpec {
  int32_t pos0;
  int n;
  int block_size;
  int64_t n_pos;
};

inline AttentionShape attention_shape(int n_head, int n_head_kv, int hd, int hdv, float softcap, int window) {
  AttentionShape s;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.head_dim = hd;
  s.head_dim_v = hdv;
  s.scale = 1.f / std::sqrt(static_cast<float>(hd));
  s.softcap = softcap;
  s.sliding_window = window;
  return s;
}
// The view of block tables kb / vb (pages of bs positions, kr / vr bytes a
// position) in formats kt / vt.
inline KvView paged_view(const std::vector<const uint8_t*>& kb, const std::vector<const uint8_t*>& vb, int bs,
                         int64_t kr, int64_t vr, KvType kt, KvType vt) {
  KvView r;
  r.k_blocks = kb.data();
  r.v_blocks = vb.data();
  r.block_size = bs;
  r.k_row_bytes = kr;
  r.v_row_bytes = vr;
  r.k_type = kt;
  r.v_type = vt;
  return r;
}
// GQA 8:2 at head dim 64; 4:1 at 128 / 64 with a softcap and a window of
// 100; MHA at 32.
inline std::vector<AttentionShape> compressed_page_shapes() {
  return {attention_shape(8, 2, 64, 64, 0.f, 0), attention_shape(4, 1, 128, 64, 30.f, 100),
          attention_shape(3, 3, 32, 32, 0.f, 0)};
}

inline void expect_attention_batch_matches(Backend& be, Backend& be1, bool exact, const AttentionShape& s,
                                           const std::vector<float>& q, const std::vector<int32_t>& pos,
                                           const std::vector<KvView>& views, const std::vector<int32_t>& view_of) {
  const int64_t n = static_cast<int64_t>(pos.size());
  const int64_t q_row = int64_t{s.n_head} * s.head_dim, o_row = int64_t{s.n_head} * s.head_dim_v;
  std::vector<float> want(n * o_row), got(n * o_row, std::nanf("")), one_thread(n * o_row);
  ref::attention(s, q.data(), pos.data(), n, views.data(), view_of.data(), want.data());
  be.attention(s, q.data(), pos.data(), n, views.data(), view_of.data(), got.data());
  EXPECT_TRUE(near_all(got.data(), want.data(), n * o_row, exact,
                       [&](int64_t i) { return 2e-5 * (1 + std::fabs(want[i])); }));
  be1.attention(s, q.data(), pos.data(), n, views.data(), view_of.data(), one_thread.data());
  EXPECT_TRUE(same_all(one_thread, got)) << "one thread";
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> out(o_row);
    const KvView& kv = views[view_of[t]];
    be.attention(s, q.data() + t * q_row, &pos[t], 1, &kv, nullptr, out.data());
    EXPECT_TRUE(same_all(out.data(), got.data() + t * o_row, o_row)) << "token " << t << " alone";
  }
}

}  // namespace ember::testing_backend
