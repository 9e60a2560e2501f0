// Q8_0 / Q5_0 / Q4_0 x Q8_0 and Q4_1 / Q5_1 x Q8_1 kernels of the AVX-512
// level (kernels/cpu/avx512/legacy_lanes.cpp, avx512/legacy_rows.cpp) and the
// Q8_0 / Q5_0 / Q4_0 ones of the AVX2 level (avx2/legacy_lanes.cpp). Those
// levels define their own arithmetic for these types: per block an exact
// integer dot of the weight quants (minus the offset) and activation quants,
// then acc = fma(float(isum), d_w * d_x, acc) and, for Q4_1 / Q5_1,
// acc = fma(m_w, s_x, acc), in block order.
// The scalar model below performs exactly those steps, so vec_dot,
// vec_dot_rows, every tile shape and the matmul driver (any token count, thread count, row
// slice) must match it bit for bit at both levels (so the two levels agree);
// it must also stay within rounding of the scalar reference vec_dot (8-lane
// partial sums per block).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kernels/legacy_weights.h"
#include "kernels/matrix_view.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/registry.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

namespace ember {
namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

const DType kTypes[] = {DType::kQ8_0, DType::kQ5_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_1};

// The types with this arithmetic at a level (AVX2: the Q8_0 activation types).
std::vector<DType> lane_types(Isa isa) {
  if (isa == Isa::kAvx512) return {std::begin(kTypes), std::end(kTypes)};
  return {DType::kQ8_0, DType::kQ5_0, DType::kQ4_0};
}

// Signed weight i of a block and its scale.
int weight_q(DType t, const uint8_t* block, int i) {
  if (t == DType::kQ8_0) return reinterpret_cast<const BlockQ8_0*>(block)->qs[i];
  if (t == DType::kQ4_0 || t == DType::kQ4_1) {
    const uint8_t* qs = t == DType::kQ4_0 ? reinterpret_cast<const BlockQ4_0*>(block)->qs
                                          : reinterpret_cast<const BlockQ4_1*>(block)->qs;
    return (i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4)) - (t == DType::kQ4_0 ? 8 : 0);
  }
  const uint8_t* qs = t == DType::kQ5_0 ? reinterpret_cast<const BlockQ5_0*>(block)->qs
                                        : reinterpret_cast<const BlockQ5_1*>(block)->qs;
  const uint8_t* qhb = t == DType::kQ5_0 ? reinterpret_cast<const BlockQ5_0*>(block)->qh
                                         : reinterpret_cast<const BlockQ5_1*>(block)->qh;
  uint32_t qh;
  std::memcpy(&qh, qhb, 4);
  const int nib = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
  return (nib | static_cast<int>(((qh >> i) & 1u) << 4)) - (t == DType::kQ5_0 ? 16 : 0);
}

bool has_min(DType t) { return t == DType::kQ4_1 || t == DType::kQ5_1; }

// f16 field at byte offset off of a block: d at 0 in every weight and
// activation block type; the weight min m / the Q8_1 s at 2.
float f16_field(const uint8_t* block, size_t off) {
  uint16_t d;
  std::memcpy(&d, block + off, 2);
  return f16_to_f32(d);
}
float weight_d(const uint8_t* block) { return f16_field(block, 0); }

// Activation block b of a row of vec_dot_type(t): its quant i and fields.
struct XView {
  DType t;
  const uint8_t* row;
  size_t bytes() const { return dtype_row_size(vec_dot_type(t), kQK); }
  const uint8_t* block(int64_t b) const { return row + bytes() * static_cast<size_t>(b); }
  int q(int64_t b, int i) const {
    return has_min(t) ? reinterpret_cast<const BlockQ8_1*>(block(b))->qs[i]
                      : reinterpret_cast<const BlockQ8_0*>(block(b))->qs[i];
  }
  float d(int64_t b) const { return f16_field(block(b), 0); }
  float s(int64_t b) const { return f16_field(block(b), 2); }
};

// The AVX-512 arithmetic of these types, one block at a time (x: a row of
// vec_dot_type(t)).
float model_dot(DType t, int64_t n, const uint8_t* w, const void* x) {
  const size_t bb = dtype_row_size(t, kQK);
  const XView xv{t, static_cast<const uint8_t*>(x)};
  float acc = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint8_t* wb = w + bb * static_cast<size_t>(b);
    int32_t isum = 0;
    for (int i = 0; i < kQK; ++i) isum += weight_q(t, wb, i) * xv.q(b, i);
    const float scale = weight_d(wb) * xv.d(b);
    acc = std::fma(static_cast<float>(isum), scale, acc);
    if (has_min(t)) acc = std::fma(f16_field(wb, 2), xv.s(b), acc);
  }
  return acc;
}


std::vector<float> make_x(int64_t tokens, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens * n));
  for (int64_t t = 0; t < tokens; ++t) {
    const float mag = t == 2 ? 0.0f : std::ldexp(1.0f, static_cast<int>(t % 7) - 3);
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(t * n + i)] = gauss(rng) * mag;
  }
  return x;
}

// Activation rows of weight type wt's vec_dot_type, quantized as the driver does.
std::vector<uint8_t> quantize_x(DType wt, const std::vector<float>& x, int64_t tokens, int64_t n) {
  const DType xt = vec_dot_type(wt);
  const size_t rb = dtype_row_size(xt, n);
  std::vector<uint8_t> out(rb * static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) kernels(xt, Isa::kAvx512).quantize_row(x.data() + t * n, out.data() + rb * t, n);
  return out;
}

class GemmLanes : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (cpu_max_isa() < GetParam()) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
  }
  static const KernelSet& k(DType t) { return kernels(t, GetParam()); }
  static std::vector<DType> types() { return lane_types(GetParam()); }
};

TEST(GemmLanesAvx512, ThirtyTwoRowTiles) {
  if (cpu_max_isa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  auto k = [](DType t) -> const KernelSet& { return kernels(t, Isa::kAvx512); };
  for (DType t : kTypes) {
    EXPECT_EQ(k(t).tile_rows, 32) << dtype_name(t);
    EXPECT_GE(k(t).tile_cols, 16) << dtype_name(t);
    EXPECT_NE(k(t).vec_dot, kernels(t, Isa::kAvx2).vec_dot) << dtype_name(t);
  }
}

// vec_dot equals the model bit for bit and the scalar reference within
// rounding, for 1 .. 67 blocks (several transpose chunks of 32).
TEST_P(GemmLanes, VecDotMatchesModel) {
  for (DType ty : types()) {
    const size_t bb = dtype_row_size(ty, kQK);
    // 1 .. 67 blocks: the 8-block steps of vec_dot with 0..7 tail blocks.
    for (int64_t n : {32, 64, 96, 256, 288, 480, 640, 1024, 1056, 2144}) {
      const int64_t rows = 10, tokens = 4;
      const auto w = make_legacy_weights(ty, rows, n, static_cast<uint32_t>(n));
      const auto xq = quantize_x(ty, make_x(tokens, n, static_cast<uint32_t>(n) + 1), tokens, n);
      const size_t rb = dtype_row_size(ty, n), xrb = dtype_row_size(vec_dot_type(ty), n);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t t = 0; t < tokens; ++t) {
          const uint8_t* wr = w.data() + rb * r;
          const auto* xt = xq.data() + xrb * t;
          float got = 0, ref = 0;
          k(ty).vec_dot(n, &got, wr, xt);
          kernels(ty, Isa::kScalar).vec_dot(n, &ref, wr, xt);
          const float want = model_dot(ty, n, wr, xt);
          ASSERT_TRUE(same_bits(got, want))
              << dtype_name(ty) << " n=" << n << " r=" << r << " t=" << t << " " << got << " vs " << want;
          const XView xv{ty, xt};
          double scale = 0;
          for (int64_t b = 0; b < n / kQK; ++b) {
            for (int i = 0; i < kQK; ++i)
              scale += std::fabs(static_cast<double>(weight_d(wr + bb * b)) * weight_q(ty, wr + bb * b, i) * xv.d(b) *
                                 xv.q(b, i));
            if (has_min(ty)) scale += std::fabs(static_cast<double>(f16_field(wr + bb * b, 2)) * xv.s(b));
          }
          ASSERT_NEAR(got, ref, 1e-5 * scale + 1e-30) << dtype_name(ty) << " n=" << n << " r=" << r << " t=" << t;
        }
      }
    }
  }
}

// vec_dot_rows (the decode kernels) gives the model's bits for every start
// row and row count (partial 16-row groups anywhere, odd block counts, rows
// longer than one activation preparation chunk of 256 blocks) and writes
// nothing past s[nr - 1].
TEST_P(GemmLanes, RowsMatchModel) {
  for (DType ty : types()) {
    ASSERT_NE(k(ty).vec_dot_rows, nullptr) << dtype_name(ty);
    for (int64_t n : {32, 64, 96, 160, 640, 1056, 2144, 8224}) {
      const int64_t rows = 37;
      const auto w = make_legacy_weights(ty, rows, n, 23 + static_cast<uint32_t>(n));
      const auto xq = quantize_x(ty, make_x(3, n, 29 + static_cast<uint32_t>(n)), 3, n);
      const size_t rb = dtype_row_size(ty, n), xrb = dtype_row_size(vec_dot_type(ty), n);
      for (int64_t t = 0; t < 3; ++t) {
        const auto* xt = xq.data() + xrb * t;
        std::vector<float> want(rows);
        for (int64_t r = 0; r < rows; ++r) want[r] = model_dot(ty, n, w.data() + rb * r, xt);
        for (int64_t r0 = 0; r0 < rows; r0 += (n > 2144 ? 11 : 4)) {
          for (int64_t nr = 1; r0 + nr <= rows; nr += (nr < 17 ? 1 : 5)) {
            std::vector<float> got(static_cast<size_t>(nr + 1), std::numeric_limits<float>::quiet_NaN());
            k(ty).vec_dot_rows(n, got.data(), w.data() + rb * r0, rb, xt, nr);
            ASSERT_TRUE(std::isnan(got[nr])) << dtype_name(ty) << " wrote past the rows: n=" << n << " nr=" << nr;
            for (int64_t r = 0; r < nr; ++r)
              ASSERT_TRUE(same_bits(got[r], want[r0 + r]))
                  << dtype_name(ty) << " n=" << n << " t=" << t << " r0=" << r0 << " nr=" << nr << " r=" << r
                  << " got " << got[r] << " want " << want[r0 + r];
          }
        }
      }
    }
  }
}

// Every tile shape (rows 1..32: one or two sets of 16 lanes, tokens
// 1..tile_cols incl. partial register groups) at offsets inside a larger
// output: model bits, nothing written outside the tile.
TEST_P(GemmLanes, TilesMatchModel) {
  const int64_t rows = 35, tokens = 70;
  for (DType ty : types())
    for (int64_t n : {32, 640, 1056}) {  // 1056 = 33 blocks: several transpose chunks
      const auto w = make_legacy_weights(ty, rows, n, 3 + static_cast<uint32_t>(n));
      const auto xq = quantize_x(ty, make_x(tokens, n, 5 + static_cast<uint32_t>(n)), tokens, n);
      const size_t rb = dtype_row_size(ty, n), xrb = dtype_row_size(vec_dot_type(ty), n);
      std::vector<float> want(static_cast<size_t>(rows * tokens));
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t r = 0; r < rows; ++r)
          want[t * rows + r] =
              model_dot(ty, n, w.data() + rb * r, xq.data() + xrb * t);
      const int64_t lds = rows + 2;
      const KernelSet& kt = k(ty);
      for (int nr = 1; nr <= kt.tile_rows; ++nr) {
        for (int nc = 1; nc <= kt.tile_cols; nc += (nc < 18 ? 1 : 7)) {
          const int64_t r0 = (nr * 7) % (rows - nr + 1), c0 = (nc * 5) % (tokens - nc + 1);
          std::vector<float> s(static_cast<size_t>(lds * tokens), std::numeric_limits<float>::quiet_NaN());
          kt.vec_dot_tile(n, s.data() + c0 * lds + r0, lds, w.data() + rb * r0, rb, xq.data() + xrb * c0, xrb, nr, nc);
          for (int64_t c = 0; c < tokens; ++c) {
            for (int64_t r = 0; r < lds; ++r) {
              const float got = s[static_cast<size_t>(c * lds + r)];
              if (r < r0 || r >= r0 + nr || c < c0 || c >= c0 + nc) {
                ASSERT_TRUE(std::isnan(got))
                    << dtype_name(ty) << " wrote outside the tile: n=" << n << " tile " << nr << "x" << nc;
                continue;
              }
              ASSERT_TRUE(same_bits(got, want[c * rows + r]))
                  << dtype_name(ty) << " n=" << n << " tile " << nr << "x" << nc << " r=" << r << " c=" << c << " got "
                  << got << " want " << want[c * rows + r];
            }
          }
        }
      }
    }
}

// The driver at the level: any token count (1 = decode path, 2+ the token
// lanes where the level has them), thread count and row slice gives the
// model's bits.
TEST_P(GemmLanes, MatmulMatchesModel) {
  const Isa saved = active_isa();
  set_active_isa(GetParam());
  for (DType ty : types()) {
    const int64_t n = 640, rows = 301, tokens = 21;
    const auto wbytes = make_legacy_weights(ty, rows, n, 17);
    const TensorView w = matrix_view(ty, rows, n, wbytes);
    const auto x = make_x(tokens, n, 19);
    const auto xq = quantize_x(ty, x, tokens, n);
    const size_t rb = dtype_row_size(ty, n), xrb = dtype_row_size(vec_dot_type(ty), n);
    std::vector<float> want(static_cast<size_t>(rows * tokens));
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t r = 0; r < rows; ++r)
        want[t * rows + r] =
            model_dot(ty, n, wbytes.data() + rb * r, xq.data() + xrb * t);
    MatmulScratch scratch;
    for (int nt : {1, 2, 3}) {
      ThreadPool pool(nt);
      for (int64_t batch : {int64_t{1}, int64_t{5}, int64_t{16}, tokens}) {
        std::vector<float> y(want.size(), std::nanf(""));
        for (int64_t t0 = 0; t0 < tokens; t0 += batch) {
          const int64_t bt = std::min(batch, tokens - t0);
          matmul(w, x.data() + t0 * n, n, y.data() + t0 * rows, rows, bt, pool, scratch);
        }
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_TRUE(same_bits(y[i], want[i]))
              << dtype_name(ty) << " threads=" << nt << " batch=" << batch << " i=" << i;
      }
      std::vector<float> slice(static_cast<size_t>(100 * tokens));
      matmul(row_range(w, 37, 137), x.data(), n, slice.data(), 100, tokens, pool, scratch);
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t r = 37; r < 137; ++r)
          ASSERT_TRUE(same_bits(slice[t * 100 + r - 37], want[t * rows + r]))
              << dtype_name(ty) << " slice r=" << r << " t=" << t;
    }
  }
  set_active_isa(saved);
}

// The token-lane form (vec_dot_tokens over pack_tokens' layout) where the
// level has it: the pack written in two disjoint block ranges, any row count
// (partial 8-row groups) and token count (partial register passes, more
// than one 64-token block), rows longer than one transposed chunk of 64
// blocks: model bits, nothing written outside the rows and tokens.
TEST_P(GemmLanes, TokensMatchModel) {
  bool any = false;
  for (DType ty : types()) {
    const KernelSet& kt = k(ty);
    if (!kt.vec_dot_tokens) continue;
    any = true;
    for (int64_t n : {32, 640, 2080}) {
      const int64_t rows = 21, tokens = 70;
      const auto w = make_legacy_weights(ty, rows, n, 41 + static_cast<uint32_t>(n));
      const auto xq = quantize_x(ty, make_x(tokens, n, 43 + static_cast<uint32_t>(n)), tokens, n);
      const size_t rb = dtype_row_size(ty, n), xrb = dtype_row_size(vec_dot_type(ty), n);
      for (int nc : {1, 2, 5, 8, 67, 70}) {
        std::vector<uint8_t> packed(kt.tokens_pack_bytes(n, nc) + 64);
        uint8_t* pk = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
        const int64_t nb = n / kQK, mid = nb / 2;
        kt.pack_tokens(n, xq.data(), xrb, nc, pk, mid, nb);
        kt.pack_tokens(n, xq.data(), xrb, nc, pk, 0, mid);
        for (int64_t nr : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{13}, rows}) {
          const int64_t lds = nr + 3;
          std::vector<float> s(static_cast<size_t>(lds * (nc + 1)), std::numeric_limits<float>::quiet_NaN());
          kt.vec_dot_tokens(n, s.data(), lds, w.data(), rb, pk, nr, nc);
          for (int64_t c = 0; c <= nc; ++c)
            for (int64_t r = 0; r < lds; ++r) {
              const float got = s[static_cast<size_t>(c * lds + r)];
              if (c == nc || r >= nr) {
                ASSERT_TRUE(std::isnan(got)) << dtype_name(ty) << " wrote outside: n=" << n << " nr=" << nr;
                continue;
              }
              const float want = model_dot(ty, n, w.data() + rb * r, xq.data() + xrb * c);
              ASSERT_TRUE(same_bits(got, want)) << dtype_name(ty) << " n=" << n << " nr=" << nr << " nc=" << nc
                                                << " r=" << r << " c=" << c << " got " << got << " want " << want;
            }
        }
      }
    }
  }
  if (!any) GTEST_SKIP() << "no token-lane form for these types at " << isa_name(GetParam());
}

// The AVX2 level has the token-lane form for Q4_0 / Q5_0 / Q8_0 from two
// tokens on (the tile path of the driver is then only for other types).
TEST(GemmLanesAvx2, TokenLanesRegistered) {
  if (cpu_max_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  for (DType t : lane_types(Isa::kAvx2)) {
    const KernelSet& k = kernels(t, Isa::kAvx2);
    ASSERT_NE(k.vec_dot_tokens, nullptr) << dtype_name(t);
    EXPECT_LE(k.tokens_min, 2) << dtype_name(t);
    EXPECT_GE(k.tokens_max, 4096) << dtype_name(t);
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, GemmLanes, ::testing::Values(Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

}  // namespace
}  // namespace ember
