// Table-driven op tests (like ggml's test-backend-ops): every Backend op at
// every level of every backend (backend_under_test.h) against the scalar
// references of kernels/ref/, over every weight dtype where an op has one:
// matmul (single and multi-target with shared activation conversion, shapes
// with tails in every tile dimension), embedding, RMSNorm, RoPE angles and
// rotation (normal / NeoX, partial n_rot), gated activations, softcap, add /
// bias; K/V stores into paged pages of every row format; buffers
// (alloc); and the sampler's row ops of kernels/ops.h at every ISA level.
// Attention is in backend_attention_test.cpp.
//
// Each tolerance is derived from the op (comment at the check); at the
// reference level (CPU scalar) every result must equal the reference bit
// for bit. Batch invariance is checked at every level: a row computed alone,
// or on one thread, gives the same bits as in the full batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend_under_test.h"
#include "kernels/kv_types.h"
#include "kernels/matmul.h"
#include "kernels/matrix_view.h"
#include "kernels/ref/row_ops.h"
#include "kernels/ref/dot.h"
#include "kernels/registry.h"
#include "quant/quantize.h"
#include "quant/sparse.h"

namespace ember {
namespace {

using testing_backend::BackendTest;
using testing_backend::gaussian;
using testing_backend::kUlp;
using testing_backend::near_all;
using testing_backend::same_all;
using testing_backend::same_bits;

INSTANTIATE_TEST_SUITE_P(Backends, BackendTest, ::testing::ValuesIn(testing_backend::backends_under_test()),
                         testing_backend::backend_test_name);

// Sparse int8 / int4 (quant/sparse.h) with room for 40 of 64: make_weights
// prunes 45% of its inputs first (tests/kernels/sparse_test.cpp checks them
// per level).
const DType kSq8Row = dtype_sq8(40);
const DType kSq4Row = dtype_sq4(40);
const DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                              DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                              DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4, kSq8Row, kSq4Row};

// The reference dot of each weight type, independent of the registry.
VecDotFn ref_dot(DType t) {
  switch (t) {
    case DType::kF32: return ref::f32_dot;
    case DType::kF16: return ref::f16_dot;
    case DType::kBF16: return ref::bf16_dot;
    case DType::kQ4_0: return ref::q4_0_dot;
    case DType::kQ4_1: return ref::q4_1_dot;
    case DType::kQ5_0: return ref::q5_0_dot;
    case DType::kQ5_1: return ref::q5_1_dot;
    case DType::kQ8_0: return ref::q8_0_dot;
    case DType::kMXFP4: return ref::mxfp4_dot;
    case DType::kQ2_K: return ref::q2_K_dot;
    case DType::kQ3_K: return ref::q3_K_dot;
    case DType::kQ4_K: return ref::q4_K_dot;
    case DType::kQ5_K: return ref::q5_K_dot;
    case DType::kQ6_K: return ref::q6_K_dot;
    default: return dtype_is_sq8(t) ? ref::sq8_dot : dtype_is_sq4(t) ? ref::sq4_dot : nullptr;
  }
}

// A row length with tails in every kernel's steps: floats 203 (not a
// multiple of 8 or 16), legacy 13 blocks (8 + 4 + 1), k-quants 3 blocks.
int64_t row_length(DType t) {
  const int64_t bs = dtype_block_size(t);
  return bs == 1 ? 203 : bs == 32 ? 13 * 32 : bs == 64 ? 7 * 64 : 3 * 256;
}

// A weight matrix [rows, n] quantized from gaussian rows of varying
// magnitude (one all-zero row), and its dequantized values.
struct Weights {
  DType type;
  int64_t rows, n;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;
  TensorView view() const { return matrix_view(type, rows, n, bytes); }
};

Weights make_weights(DType t, int64_t rows, int64_t n, uint32_t seed) {
  Weights w{t, rows, n, std::vector<uint8_t>(dtype_row_size(t, n) * rows), std::vector<float>(rows * n)};
  std::vector<float> f = gaussian(rows * n, 1.f, seed);
  const float row_scale[] = {1.f, 0.01f, 30.f, 0.f, 2.5f};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) f[r * n + i] *= row_scale[r % 5];
  const size_t rb = dtype_row_size(t, n);
  if (dtype_is_sparse(t))  // prune 45% (fixed positions) so each row fits the capacity
    for (int64_t i = 0; i < rows * n; ++i)
      if ((i * 7919) % 20 < 9) f[i] = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    if (dtype_is_sq8(t))
      EXPECT_TRUE(quantize_row_sq8_ref(f.data() + r * n, w.bytes.data() + r * rb, n, dtype_sparse_capacity(t)).is_ok());
    else if (dtype_is_sq4(t))
      EXPECT_TRUE(quantize_row_sq4_ref(f.data() + r * n, w.bytes.data() + r * rb, n, dtype_sparse_capacity(t)).is_ok());
    else
      quantize_row_ref(t, f.data() + r * n, w.bytes.data() + r * rb, n);
    dequantize_row_ref(t, w.bytes.data() + r * rb, w.deq.data() + r * n, n);
  }
  return w;
}

// y = x · Wᵀ the reference way: x quantized by the reference quantizer of
// the weight's vec_dot_type, one reference dot per (row, token); mag = sum
// |w x| of the dequantized operands (the scale of the rounding error).
struct RefProduct {
  std::vector<float> y;      // [n_tokens, rows]
  std::vector<double> mag;   // [n_tokens, rows]
};

RefProduct ref_matmul(const Weights& w, const float* x, int64_t ldx, int64_t n_tokens) {
  const DType at = vec_dot_type(w.type);
  const int64_t n = w.n;
  const size_t xrb = at == DType::kF32 ? n * sizeof(float) : dtype_row_size(at, n);
  std::vector<uint8_t> xq(xrb);
  std::vector<float> xd(n);
  RefProduct p{std::vector<float>(n_tokens * w.rows), std::vector<double>(n_tokens * w.rows)};
  const size_t wrb = dtype_row_size(w.type, n);
  for (int64_t t = 0; t < n_tokens; ++t) {
    quantize_row_ref(at, x + t * ldx, xq.data(), n);
    dequantize_row_ref(at, xq.data(), xd.data(), n);
    for (int64_t r = 0; r < w.rows; ++r) {
      ref_dot(w.type)(n, &p.y[t * w.rows + r], w.bytes.data() + r * wrb, xq.data());
      double m = 0;
      for (int64_t i = 0; i < n; ++i) m += std::fabs(static_cast<double>(w.deq[r * n + i]) * xd[i]);
      p.mag[t * w.rows + r] = m;
    }
  }
  return p;
}

// Kernels and reference differ only in the order of their f32 additions
// (integer block sums are exact; quantizers are bit-identical to the
// reference): a few roundings per block step (per 8 elements for float
// weights, whose reference sums in double) of at most sum |w x| each.
double matmul_tol(DType t, int64_t n, double mag) {
  const int64_t bs = dtype_block_size(t);
  const double steps = bs == 1 ? n / 8.0 : static_cast<double>(n / bs);
  return (4 * steps + 16) * kUlp * mag + 1e-30;
}

// Columns [0, rows) of y [n_tokens, ldy].
std::vector<float> columns(const std::vector<float>& y, int64_t ldy, int64_t n_tokens, int64_t rows) {
  std::vector<float> c(n_tokens * rows);
  for (int64_t t = 0; t < n_tokens; ++t) std::copy_n(y.begin() + t * ldy, rows, c.begin() + t * rows);
  return c;
}

TEST_P(BackendTest, MatmulEveryWeightTypeAgainstReference) {
  const int64_t rows = 67, n_tokens = 70;  // tails of every tile's rows (32, 16, 4) and tokens (64, 60)
  for (DType t : kWeightTypes) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t n = row_length(t), ldx = n + 5, ldy = rows + 3;
    const Weights w = make_weights(t, rows, n, 11 + static_cast<uint32_t>(t));
    const TensorView wv = w.view();
    const std::vector<float> x = gaussian(n_tokens * ldx, 1.f, 5);
    const RefProduct want = ref_matmul(w, x.data(), ldx, n_tokens);
    std::vector<float> y(n_tokens * ldy, std::nanf(""));
    backend_->matmul(wv, x.data(), ldx, y.data(), ldy, n_tokens);
    const std::vector<float> got = columns(y, ldy, n_tokens, rows);
    EXPECT_TRUE(near_all(got.data(), want.y.data(), n_tokens * rows, exact(),
                         [&](int64_t i) { return matmul_tol(t, n, want.mag[i]); }));
    for (int64_t tk = 0; tk < n_tokens; ++tk)  // the padding columns stay untouched
      for (int64_t c = rows; c < ldy; ++c) ASSERT_TRUE(std::isnan(y[tk * ldy + c]));
    // Batch invariance: one thread; a token alone (the decode kernels); a
    // batch of 5 in the middle.
    std::vector<float> y1(y.size(), std::nanf(""));
    backend1_->matmul(wv, x.data(), ldx, y1.data(), ldy, n_tokens);
    EXPECT_TRUE(same_all(columns(y1, ldy, n_tokens, rows), got));
    for (int64_t tk : {int64_t{0}, int64_t{33}, n_tokens - 1}) {
      std::vector<float> one(rows);
      backend_->matmul(wv, x.data() + tk * ldx, ldx, one.data(), rows, 1);
      EXPECT_TRUE(same_all(one.data(), got.data() + tk * rows, rows)) << "token " << tk << " alone";
    }
    std::vector<float> five(5 * rows);
    backend_->matmul(wv, x.data() + 30 * ldx, ldx, five.data(), rows, 5);
    EXPECT_TRUE(same_all(five.data(), got.data() + 30 * rows, 5 * rows));
  }
}

// Ten matrices reading the same rows (more than one driver pass takes; four
// activation types): one multi-target call gives exactly the bits of one
// call per matrix, for prefill and for a single token.
TEST_P(BackendTest, MatmulMultiTargetEqualsSeparateCalls) {
  const int64_t n = 768, ldx = n + 16;
  struct Spec {
    DType type;
    int64_t rows;
  };
  const Spec specs[] = {{DType::kQ4_K, 67}, {DType::kQ6_K, 40}, {DType::kQ8_0, 24}, {DType::kQ4_1, 9},
                        {DType::kF16, 16},  {DType::kBF16, 5},  {DType::kQ5_K, 31}, {DType::kQ2_K, 8},
                        {DType::kF32, 3},   {DType::kQ5_0, 12}};
  std::vector<Weights> ws;
  std::vector<TensorView> views;
  for (const Spec& s : specs) ws.push_back(make_weights(s.type, s.rows, n, 100 + static_cast<uint32_t>(s.rows)));
  for (const Weights& w : ws) views.push_back(w.view());
  for (int64_t n_tokens : {int64_t{33}, int64_t{1}}) {
    const std::vector<float> x = gaussian(n_tokens * ldx, 1.f, 9);
    std::vector<std::vector<float>> together(ws.size()), separate(ws.size());
    std::vector<MatmulTarget> targets;
    for (size_t i = 0; i < ws.size(); ++i) {
      const int64_t ldy = ws[i].rows + 1;
      together[i].assign(n_tokens * ldy, 0.f);
      separate[i].assign(n_tokens * ldy, 0.f);
      targets.push_back({&views[i], together[i].data(), ldy});
    }
    backend_->matmul(x.data(), ldx, n_tokens, targets.data(), static_cast<int>(targets.size()));
    for (size_t i = 0; i < ws.size(); ++i) {
      SCOPED_TRACE(dtype_name(ws[i].type));
      const int64_t ldy = ws[i].rows + 1;
      backend_->matmul(views[i], x.data(), ldx, separate[i].data(), ldy, n_tokens);
      EXPECT_TRUE(same_all(together[i], separate[i])) << n_tokens << " tokens";
      const RefProduct want = ref_matmul(ws[i], x.data(), ldx, n_tokens);
      const std::vector<float> got = columns(together[i], ldy, n_tokens, ws[i].rows);
      EXPECT_TRUE(near_all(got.data(), want.y.data(), n_tokens * ws[i].rows, exact(),
                           [&](int64_t k) { return matmul_tol(ws[i].type, n, want.mag[k]); }));
    }
  }
}

// The driver converts the activations once per distinct vec_dot_type of a
// multi-target call: Q4_K and Q6_K share Q8_K rows, Q8_0 has its own, F16
// reads the f32 rows as they are.
TEST(MatmulDriver, ConvertsSharedActivationsOncePerType) {
  const int64_t n = 512, n_tokens = 7;
  const Weights a = make_weights(DType::kQ4_K, 8, n, 1), b = make_weights(DType::kQ6_K, 4, n, 2);
  const Weights c = make_weights(DType::kQ8_0, 4, n, 3), d = make_weights(DType::kF16, 4, n, 4);
  const TensorView va = a.view(), vb = b.view(), vc = c.view(), vd = d.view();
  const std::vector<float> x = gaussian(n_tokens * n, 1.f, 5);
  std::vector<float> ya(n_tokens * 8), yb(n_tokens * 4), yc(n_tokens * 4), yd(n_tokens * 4);
  const MatmulTarget targets[] = {{&va, ya.data(), 8}, {&vb, yb.data(), 4}, {&vc, yc.data(), 4}, {&vd, yd.data(), 4}};
  ThreadPool pool(2);
  MatmulScratch shared, separate;
  matmul(x.data(), n, n_tokens, targets, 4, pool, shared);
  EXPECT_EQ(shared.converted_rows(), 2 * n_tokens);
  for (const MatmulTarget& t : targets) matmul(*t.w, x.data(), n, t.y, t.ldy, n_tokens, pool, separate);
  EXPECT_EQ(separate.converted_rows(), 3 * n_tokens);
}

TEST_P(BackendTest, EmbedEveryTypeIsExact) {
  const DType types[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                         DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                         DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K, DType::kMXFP4};
  const int64_t dim = 512, n_rows = 21;
  const int32_t ids[] = {3, 0, 20, 3, 11, 7};
  for (DType t : types) {
    SCOPED_TRACE(dtype_name(t));
    const Weights table = make_weights(t, n_rows, dim, 40 + static_cast<uint32_t>(t));
    for (float scale : {1.f, 25.298f}) {
      // Dequantizers at every level are bit-identical to the reference, and
      // the scale is one float multiply: exact everywhere.
      std::vector<float> got(6 * dim), want(6 * dim), one(dim);
      backend_->embed(table.view(), ids, 6, scale, got.data());
      ref::embed_rows(table.view(), ids, 6, scale, want.data());
      EXPECT_TRUE(same_all(got, want));
      backend_->embed(table.view(), ids + 4, 1, scale, one.data());
      EXPECT_TRUE(same_all(one.data(), want.data() + 4 * dim, dim));
    }
  }
}

TEST_P(BackendTest, RmsNorm) {
  for (int64_t dim : {1, 7, 8, 33, 256, 640, 1152}) {
    for (bool with_weight : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << (with_weight ? " weighted" : ""));
      const int64_t n_rows = 9, ld_x = dim + 3, ld_out = dim + 5;
      std::vector<float> x = gaussian(n_rows * ld_x, 2.f, 17);
      for (int64_t i = 0; i < dim; ++i) {
        x[2 * ld_x + i] *= 1e-3f;
        x[5 * ld_x + i] *= 1e3f;
      }
      const std::vector<float> w = gaussian(dim, 1.f, 18);
      const float* wp = with_weight ? w.data() : nullptr;
      std::vector<float> want(n_rows * dim), got(n_rows * ld_out, 0.f);
      for (int64_t r = 0; r < n_rows; ++r) ref::rms_norm_row(x.data() + r * ld_x, wp, want.data() + r * dim, dim, 1e-6f);
      backend_->rms_norm(x.data(), ld_x, wp, got.data(), ld_out, n_rows, dim, 1e-6f);
      const std::vector<float> g = columns(got, ld_out, n_rows, dim);
      // f32 lane sums of squares (dim / 32 additions per lane of positive
      // terms), a float 1/sqrt and two multiplies.
      EXPECT_TRUE(near_all(g.data(), want.data(), n_rows * dim, exact(),
                           [&](int64_t i) { return (dim / 32.0 + 8) * kUlp * std::fabs(want[i]) + 1e-37; }));
      // In place, alone, and on one thread: the same bits.
      std::vector<float> in_place = x, one(dim), g1(got.size(), 0.f);
      backend_->rms_norm(in_place.data(), ld_x, wp, in_place.data(), ld_x, n_rows, dim, 1e-6f);
      EXPECT_TRUE(same_all(columns(in_place, ld_x, n_rows, dim), g));
      backend_->rms_norm(x.data() + 5 * ld_x, ld_x, wp, one.data(), dim, 1, dim, 1e-6f);
      EXPECT_TRUE(same_all(one.data(), g.data() + 5 * dim, dim));
      backend1_->rms_norm(x.data(), ld_x, wp, g1.data(), ld_out, n_rows, dim, 1e-6f);
      EXPECT_TRUE(same_all(g1, got));
    }
  }
}

std::vector<float> inv_freqs(int n_rot, float freq_scale) {
  std::vector<float> f(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) f[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / n_rot)) * freq_scale;
  return f;
}

TEST_P(BackendTest, RopeAngles) {
  const int32_t pos[] = {0, 1, 2, 17, 255, 256, 4095, 30000};
  for (int n_rot : {2, 64, 128}) {
    for (float freq_scale : {1.f, 0.25f}) {
      const std::vector<float> inv = inv_freqs(n_rot, freq_scale);
      const int64_t half = n_rot / 2;
      std::vector<float> c(8 * half), s(8 * half), wc(8 * half), ws(8 * half);
      backend_->rope_angles(pos, 8, inv.data(), n_rot, c.data(), s.data());
      for (int t = 0; t < 8; ++t)
        ref::rope_angles(static_cast<float>(pos[t]), inv.data(), n_rot, wc.data() + t * half, ws.data() + t * half);
      // Both take cos / sin of the same float angle pos * inv_freq; a float
      // cosf / sinf is within an ulp of the correctly rounded value (<= 1).
      auto tol = [](int64_t) { return 2 * kUlp; };
      EXPECT_TRUE(near_all(c.data(), wc.data(), 8 * half, exact(), tol)) << "cos, n_rot " << n_rot;
      EXPECT_TRUE(near_all(s.data(), ws.data(), 8 * half, exact(), tol)) << "sin, n_rot " << n_rot;
    }
  }
}

TEST_P(BackendTest, RopeNormalAndNeoxWithPartialRotation) {
  const int64_t n = 7;
  const int n_heads = 3, head_dim = 64;
  const int64_t ld = n_heads * head_dim + 8;
  const int32_t pos[] = {0, 1, 5, 100, 255, 256, 1000};
  for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    for (int n_rot : {64, 32, 16}) {
      SCOPED_TRACE(::testing::Message() << (style == RopeStyle::kNeox ? "neox" : "normal") << " n_rot " << n_rot);
      const int64_t half = n_rot / 2;
      const std::vector<float> inv = inv_freqs(n_rot, 1.f);
      std::vector<float> c(n * half), s(n * half);
      for (int64_t t = 0; t < n; ++t)
        ref::rope_angles(static_cast<float>(pos[t]), inv.data(), n_rot, c.data() + t * half, s.data() + t * half);
      const std::vector<float> x = gaussian(n * ld, 1.5f, 23);
      std::vector<float> want = x, got = x;
      for (int64_t t = 0; t < n; ++t)
        for (int h = 0; h < n_heads; ++h)
          ref::rope_head(want.data() + t * ld + h * head_dim, n_rot, style, c.data() + t * half, s.data() + t * half);
      backend_->rope(got.data(), ld, n, n_heads, head_dim, n_rot, style, c.data(), s.data());
      // Each output is x0 c -/+ x1 s: two products and a sum (or one fma),
      // bounded by 2 max|x| of its head.
      EXPECT_TRUE(near_all(got.data(), want.data(), n * ld, exact(), [&](int64_t i) {
        const int64_t h0 = i / head_dim * head_dim;
        double mx = 0;
        for (int64_t k = h0; k < std::min<int64_t>(h0 + head_dim, n * ld); ++k) mx = std::max<double>(mx, std::fabs(x[k]));
        return 4 * kUlp * mx;
      }));
      for (int64_t t = 0; t < n; ++t) {  // unrotated dims and the row padding keep their bits
        for (int h = 0; h < n_heads; ++h)
          for (int i = n_rot; i < head_dim; ++i) {
            const int64_t k = t * ld + h * head_dim + i;
            ASSERT_TRUE(same_bits(got[k], x[k])) << "t " << t << " h " << h << " i " << i;
          }
        for (int64_t k = t * ld + n_heads * head_dim; k < (t + 1) * ld; ++k) ASSERT_TRUE(same_bits(got[k], x[k]));
      }
      std::vector<float> one(x.begin() + 4 * ld, x.begin() + 5 * ld), g1 = x;
      backend_->rope(one.data(), ld, 1, n_heads, head_dim, n_rot, style, c.data() + 4 * half, s.data() + 4 * half);
      EXPECT_TRUE(same_all(one.data(), got.data() + 4 * ld, ld));
      backend1_->rope(g1.data(), ld, n, n_heads, head_dim, n_rot, style, c.data(), s.data());
      EXPECT_TRUE(same_all(g1, got));
    }
  }
}

// Gate inputs over the whole range the activations see, with extremes.
std::vector<float> gate_inputs(int64_t n, uint32_t seed) {
  std::vector<float> g = gaussian(n, 4.f, seed);
  const float extremes[] = {0.f, -0.f, 30.f, -30.f, 88.f, -88.f, 1e-30f, -1e-30f, 100.f, -100.f, 7.5f, -7.5f};
  for (size_t i = 0; i < std::size(extremes); ++i) g[i * 37 % n] = extremes[i];
  return g;
}

// gpt-oss's clamped SwiGLU at every level against the scalar twin (the
// 8-lane exp polynomial: within 1e-5 (1 + |ref|)), rows with padding.
TEST_P(BackendTest, GatedActivationSwiGluOai) {
  const int64_t rows = 4, dim = 1003, ld = dim + 5;
  const std::vector<float> gate = gate_inputs(rows * ld, 41), up = gaussian(rows * ld, 5.f, 42);
  std::vector<float> got = gate, want = gate;
  backend_->gated_activation(GatedActivation::kSwiGluOai, got.data(), ld, up.data(), ld, rows, dim);
  for (int64_t r = 0; r < rows; ++r) ref::swiglu_oai_row(want.data() + r * ld, up.data() + r * ld, dim);
  EXPECT_TRUE(near_all(got.data(), want.data(), rows * ld, exact(),
                       [&](int64_t i) { return 1e-5 * (1 + std::fabs(want[i])); }));
}

TEST_P(BackendTest, GatedActivations) {
  const int64_t rows = 5, dim = 1003, ld_gate = dim + 4, ld_up = dim + 12;
  for (GatedActivation a : {GatedActivation::kSwiGlu, GatedActivation::kGeGluTanh}) {
    SCOPED_TRACE(a == GatedActivation::kSwiGlu ? "swiglu" : "geglu_tanh");
    const std::vector<float> gate = gate_inputs(rows * ld_gate, 31), up = gaussian(rows * ld_up, 1.f, 32);
    std::vector<float> got = gate, want(rows * dim), act(rows * dim);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(gate.begin() + r * ld_gate, dim, want.begin() + r * dim);
      std::copy_n(gate.begin() + r * ld_gate, dim, act.begin() + r * dim);
      if (a == GatedActivation::kSwiGlu) {
        ref::swiglu_row(want.data() + r * dim, up.data() + r * ld_up, dim);
        ref::silu_row(act.data() + r * dim, dim);
      } else {
        ref::geglu_tanh_row(want.data() + r * dim, up.data() + r * ld_up, dim);
        ref::gelu_tanh_row(act.data() + r * dim, dim);
      }
    }
    backend_->gated_activation(a, got.data(), ld_gate, up.data(), ld_up, rows, dim);
    const std::vector<float> g = columns(got, ld_gate, rows, dim);
    // The 8-lane exp polynomial keeps SiLU / GELU within 1e-6 + 2e-6 |act|
    // (tests/kernels/ops_test.cpp); times |up|, plus the product's rounding.
    EXPECT_TRUE(near_all(g.data(), want.data(), rows * dim, exact(), [&](int64_t i) {
      const double u = std::fabs(up[i / dim * ld_up + i % dim]);
      return (1e-6 + 2e-6 * std::fabs(act[i])) * u + 2 * kUlp * std::fabs(want[i]);
    }));
    for (int64_t r = 0; r < rows; ++r)  // padding between rows untouched
      for (int64_t k = r * ld_gate + dim; k < (r + 1) * ld_gate; ++k) ASSERT_TRUE(same_bits(got[k], gate[k]));
    std::vector<float> one(gate.begin() + 3 * ld_gate, gate.begin() + 3 * ld_gate + dim), g1 = gate;
    backend_->gated_activation(a, one.data(), dim, up.data() + 3 * ld_up, dim, 1, dim);
    EXPECT_TRUE(same_all(one.data(), g.data() + 3 * dim, dim));
    backend1_->gated_activation(a, g1.data(), ld_gate, up.data(), ld_up, rows, dim);
    EXPECT_TRUE(same_all(g1, got));
  }
}

TEST_P(BackendTest, Softcap) {
  const int64_t n = 40000;  // several tasks of the element-wise split
  std::vector<float> x = gaussian(n, 60.f, 41);
  x[7] = 1e6f;
  x[8] = -1e6f;
  x[9] = 0.f;
  x[10] = 1e-20f;
  for (float cap : {30.f, 50.f}) {
    std::vector<float> got = x, want = x, g1 = x;
    backend_->softcap(got.data(), n, cap);
    ref::softcap_row(want.data(), n, cap);
    // tanh within a few ulps, the rounding of x / cap (slope <= 1 after the
    // multiply back) and the final multiply.
    EXPECT_TRUE(near_all(got.data(), want.data(), n, exact(), [&](int64_t i) {
      return kUlp * (4 * std::fabs(want[i]) + std::fabs(x[i]));
    })) << "cap " << cap;
    backend1_->softcap(g1.data(), n, cap);
    EXPECT_TRUE(same_all(g1, got));
  }
}

TEST_P(BackendTest, AddAndBiasAreExact) {
  // One float addition per element: the same bits at every level.
  const int64_t n = 100003;
  const std::vector<float> x = gaussian(n, 3.f, 51), y0 = gaussian(n, 3.f, 52);
  std::vector<float> got = y0, want = y0;
  backend_->add(got.data(), x.data(), n);
  ref::add_row(want.data(), x.data(), n);
  EXPECT_TRUE(same_all(got, want));
  const int64_t rows = 5, dim = 37, ld = 40;
  const std::vector<float> b = gaussian(dim, 1.f, 53);
  std::vector<float> gb = y0, wb = y0;
  backend_->add_bias(gb.data(), ld, rows, dim, b.data());
  for (int64_t r = 0; r < rows; ++r) ref::add_row(wb.data() + r * ld, b.data(), dim);
  EXPECT_TRUE(same_all(gb, wb));
}

// Backend::kv_store over a paged pool: a ragged batch of three sequences
// (a 40-token prefill, one decode token, a two-token burst whose cache keeps
// its own K rows: k_blocks null) over pages in shuffled order, every
// per-row format for K and V (equal and mixed), row strides wider than the
// rows written. Reference: each row encoded alone by the format's scalar
// encoder (kv_store_row) at the address the test's own page map gives;
// every other byte of the pages is poisoned and must stay so. The same bytes
// on one thread and token by token; f32 rows hold the input floats.
TEST_P(BackendTest, KvStoreEveryRowFormatAgainstReference) {
  const int bs = 8, n_pages = 12;
  const int64_t kw = 64, vw = 96, k_room = 128, v_room = 128, ldk = kw + 5, ldv = vw + 3;
  struct Seq {
    std::vector<int32_t> pages;
    int64_t pos0, n;
    bool k_kept;  // the cache stores its own K rows
  };
  const Seq seqs[] = {{{7, 2, 9, 0, 11}, 0, 40, false}, {{5, 10, 3}, 20, 1, false}, {{4, 8}, 9, 2, true}};
  std::vector<int32_t> pos, vot;
  for (int i = 0; i < 3; ++i)
    for (int64_t j = 0; j < seqs[i].n; ++j) pos.push_back(static_cast<int32_t>(seqs[i].pos0 + j)), vot.push_back(i);
  const int64_t n = static_cast<int64_t>(pos.size());
  const std::vector<float> k = gaussian(static_cast<size_t>(n * ldk), 1.5f, 61);
  const std::vector<float> v = gaussian(static_cast<size_t>(n * ldv), 0.7f, 62);
  const KvType kTypes[] = {KvType::kF32, KvType::kF16, KvType::kBF16, KvType::kQ8, KvType::kQ4};
  for (int a = 0; a < 5; ++a)
    for (int d : {0, 1}) {
      const KvType kt = kTypes[a], vt = kTypes[(a + d * 2) % 5];
      SCOPED_TRACE(std::string("K ") + kv_type_name(kt) + ", V " + kv_type_name(vt));
      const int64_t krb = static_cast<int64_t>(kv_row_bytes(kt, k_room));
      const int64_t vrb = static_cast<int64_t>(kv_row_bytes(vt, v_room));
      const std::vector<uint8_t> kpoison(static_cast<size_t>(n_pages * bs * krb), 0xA5),
          vpoison(static_cast<size_t>(n_pages * bs * vrb), 0x5A);
      std::vector<uint8_t> kwant = kpoison, vwant = vpoison;
      for (int64_t t = 0; t < n; ++t) {
        const Seq& q = seqs[vot[t]];
        const int64_t page = q.pages[pos[t] / bs], row = pos[t] % bs;
        if (!q.k_kept) kv_store_row(kt, k.data() + t * ldk, kw, kwant.data() + (page * bs + row) * krb);
        kv_store_row(vt, v.data() + t * ldv, vw, vwant.data() + (page * bs + row) * vrb);
        if (kt == KvType::kF32 && !q.k_kept) {
          ASSERT_EQ(0, std::memcmp(kwant.data() + (page * bs + row) * krb, k.data() + t * ldk, kw * 4));
        }
      }
      auto run = [&](Backend& be, bool one_by_one, std::vector<uint8_t>* kgot, std::vector<uint8_t>* vgot) {
        *kgot = kpoison, *vgot = vpoison;
        std::vector<std::vector<uint8_t*>> kb(3), vb(3);
        std::vector<KvStoreView> views(3);
        for (int i = 0; i < 3; ++i) {
          for (int32_t pg : seqs[i].pages) {
            kb[i].push_back(kgot->data() + int64_t{pg} * bs * krb);
            vb[i].push_back(vgot->data() + int64_t{pg} * bs * vrb);
          }
          views[i] = {seqs[i].k_kept ? nullptr : kb[i].data(), vb[i].data(), bs, krb, vrb, kt, vt};
        }
        if (!one_by_one)
          return be.kv_store(k.data(), ldk, kw, v.data(), ldv, vw, pos.data(), n, views.data(), vot.data());
        for (int64_t t = 0; t < n; ++t)
          be.kv_store(k.data() + t * ldk, ldk, kw, v.data() + t * ldv, ldv, vw, &pos[t], 1, views.data(), &vot[t]);
      };
      std::vector<uint8_t> kgot, vgot;
      const std::pair<Backend*, bool> runs[] = {
          {backend_.get(), false}, {backend1_.get(), false}, {backend_.get(), true}};
      for (const auto& [be, one] : runs) {
        run(*be, one, &kgot, &vgot);
        EXPECT_TRUE(kgot == kwant);
        EXPECT_TRUE(vgot == vwant);
      }
    }
}

// Backend::alloc: buffers of the size asked, zeroed, 64-byte aligned,
// distinct (the CPU backend's memory is the host's: written and read here).
TEST_P(BackendTest, AllocGivesZeroedAlignedBuffers) {
  for (size_t bytes : {size_t{4}, size_t{100}, size_t{1} << 20}) {
    auto a = backend_->alloc(bytes), b = backend_->alloc(bytes);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->bytes(), bytes);
    EXPECT_NE(a->data(), b->data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % 64, 0u);
    const auto* p = a->as<uint8_t>();
    EXPECT_TRUE(std::all_of(p, p + bytes, [](uint8_t x) { return x == 0; }));
    std::memset(a->data(), 0xFF, bytes);
    EXPECT_TRUE(std::all_of(b->as<uint8_t>(), b->as<uint8_t>() + bytes, [](uint8_t x) { return x == 0; }));
  }
}

// The sampler's row ops (kernels/ops.h) at every ISA level, against the
// references; exact at the scalar level.
class RowOpsTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    saved_ = active_isa();
    set_active_isa(GetParam());
  }
  void TearDown() override { set_active_isa(saved_); }
  bool exact() const { return GetParam() == Isa::kScalar; }
  Isa saved_ = Isa::kScalar;
};

std::vector<Isa> cpu_levels() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa <= cpu_max_isa()) v.push_back(isa);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Levels, RowOpsTest, ::testing::ValuesIn(cpu_levels()),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

TEST_P(RowOpsTest, SoftmaxMaxLogSumExp) {
  for (int64_t n : {1, 7, 8, 13, 1000, 262144}) {
    SCOPED_TRACE(n);
    std::vector<float> x = gaussian(n, 6.f, 61);
    if (n > 8) x[3] = x[n - 1] = -INFINITY;
    if (n > 20) x[11] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(same_bits(max_row(x.data(), n), ref::max_row(x.data(), n)));  // max is exact
    if (n > 20) x[11] = -INFINITY;
    const double lse = log_sum_exp_row(x.data(), n), want_lse = ref::log_sum_exp_row(x.data(), n);
    // Each exp term is within (|x - max| + 4) ulps; their softmax-weighted
    // mean of |x - max| is at most the entropy, <= ln n.
    if (exact()) EXPECT_EQ(lse, want_lse);
    else EXPECT_NEAR(lse, want_lse, (std::log(static_cast<double>(n)) + 4) * kUlp);
    std::vector<float> p = x, want = x;
    const float mx = softmax_row(p.data(), n);
    EXPECT_TRUE(same_bits(mx, ref::softmax_row(want.data(), n)));
    // exp of the float difference d (rounded: |d| ulps relative), the 8-lane
    // exp (2 ulps), the float reciprocal and multiply, and the sum of the
    // float terms (their weighted mean error: <= ln n + 2 ulps, as above);
    // terms below exp(-87) may flush to 0.
    const double ln_n = std::log(static_cast<double>(n));
    EXPECT_TRUE(near_all(p.data(), want.data(), n, exact(), [&](int64_t i) {
      const double d = std::fabs(static_cast<double>(x[i]) - mx);
      return (std::isfinite(d) ? (d + ln_n + 8) * kUlp * want[i] : 0.0) + 1e-37;
    }));
  }
}

TEST_P(RowOpsTest, ExpShiftedSiluGelu) {
  const int64_t n = 4099;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = -100.f + 100.f * static_cast<float>(i) / (n - 1);  // x - mx in [-100, 0]
  std::vector<float> got = x, want = x;
  exp_shifted_row(got.data(), n, 0.f);
  ref::exp_shifted_row(want.data(), n, 0.f);
  // The 8-lane exp is within 2 ulps; below exp(-87.3) it returns ~1.2e-38.
  EXPECT_TRUE(near_all(got.data(), want.data(), n, exact(), [&](int64_t i) { return 4 * kUlp * want[i] + 1.2e-38; }));
  const std::vector<float> g = gate_inputs(n, 62);
  std::vector<float> s = g, ws = g, e = g, we = g;
  silu_row(s.data(), n);
  ref::silu_row(ws.data(), n);
  gelu_tanh_row(e.data(), n);
  ref::gelu_tanh_row(we.data(), n);
  auto tol = [](const std::vector<float>& w) { return [&w](int64_t i) { return 1e-6 + 2e-6 * std::fabs(w[i]); }; };
  EXPECT_TRUE(near_all(s.data(), ws.data(), n, exact(), tol(ws))) << "silu";
  EXPECT_TRUE(near_all(e.data(), we.data(), n, exact(), tol(we))) << "gelu_tanh";
}

}  // namespace
}  // namespace ember
