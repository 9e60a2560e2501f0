// Sparse int8 / int4 weights (kSQ8 | C, kSQ4 | C, quant/sparse.h): the
// reference conversions against dense Q8_0 / Q4_0, the scalar twins against
// the dequantized weights, the AVX2 and AVX-512 (VBMI2) kernels (decode and
// the prefill tile) and the matmul driver against the twins bit for bit at
// every ISA level and batch size. GGUF: tests/model/
// sparse_gguf_test.cpp.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/matrix_view.h"
#include "kernels/ref/dot.h"
#include "kernels/registry.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "quant/sparse.h"

namespace ember {
namespace {

// rows x n floats, row r with a fraction keep(r) of its inputs nonzero
// (all-zero rows, fully dense rows, rows of mixed scale).
// special = false: every row at `keep` (the capacity is tight: the densest
// row's values end at its row's end).
std::vector<float> pruned_floats(int64_t rows, int64_t n, double keep, uint32_t seed, bool special = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> f(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    const double k = !special ? keep : r % 7 == 3 ? 0.0 : r % 7 == 5 ? 1.0 : keep;
    const float scale = r % 3 == 1 ? 40.f : r % 3 == 2 ? 0.02f : 1.f;
    for (int64_t i = 0; i < n; ++i) f[r * n + i] = u(rng) < k ? g(rng) * scale : 0.f;
  }
  return f;
}

struct Sparse {
  DType type;
  int64_t rows, n;
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> dense;  // the dense Q8_0 / Q4_0 export of the same floats
  TensorView view() const { return matrix_view(type, rows, n, bytes); }
};

// bits 8: sq8 from Q8_0; bits 4: sq4 from Q4_0.
Sparse make_sparse(int64_t rows, int64_t n, double keep, uint32_t seed, int bits = 8, bool special = true) {
  const std::vector<float> f = pruned_floats(rows, n, keep, seed, special);
  const DType dt = bits == 4 ? DType::kQ4_0 : DType::kQ8_0;
  const size_t qrb = dtype_row_size(dt, n);
  Sparse s{DType::kF32, rows, n, {}, std::vector<uint8_t>(qrb * rows)};
  for (int64_t r = 0; r < rows; ++r) quantize_row_ref(dt, f.data() + r * n, s.dense.data() + r * qrb, n);
  const int cap = bits == 4 ? sparse_capacity_q4_0(s.dense.data(), rows, n) : sparse_capacity_q8_0(s.dense.data(), rows, n);
  s.type = bits == 4 ? dtype_sq4(cap) : dtype_sq8(cap);
  const size_t rb = dtype_row_size(s.type, n);
  s.bytes.assign(rb * rows, 0xAB);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_TRUE((bits == 4 ? quantize_row_sq4_ref(f.data() + r * n, s.bytes.data() + r * rb, n, cap)
                           : quantize_row_sq8_ref(f.data() + r * n, s.bytes.data() + r * rb, n, cap))
                    .is_ok());
  return s;
}

VecDotFn twin(DType t) { return dtype_is_sq4(t) ? ref::sq4_dot : ref::sq8_dot; }

// A copy of `bytes` that ends where an inaccessible page begins: a kernel
// reading past the tensor's last byte faults (the test dies) instead of
// reading a neighbour's memory unnoticed.
class GuardedCopy {
 public:
  explicit GuardedCopy(const std::vector<uint8_t>& bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t data_pages = (bytes.size() + page - 1) / page;
    size_ = (data_pages + 1) * page;
    base_ = static_cast<uint8_t*>(mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(mprotect(base_ + data_pages * page, page, PROT_NONE), 0);
    data_ = base_ + data_pages * page - bytes.size();
    std::memcpy(data_, bytes.data(), bytes.size());
  }
  ~GuardedCopy() { munmap(base_, size_); }
  GuardedCopy(const GuardedCopy&) = delete;
  GuardedCopy& operator=(const GuardedCopy&) = delete;
  const uint8_t* data() const { return data_; }

 private:
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

TEST(SparseFormat, TypeFamilyAndRowSize) {
  EXPECT_FALSE(dtype_is_sparse(DType::kQ8_0));
  EXPECT_FALSE(dtype_is_sparse(kSQ8));
  for (int c : {1, 32, 64}) {
    const DType t = dtype_sq8(c);
    EXPECT_TRUE(dtype_is_sparse(t));
    EXPECT_TRUE(dtype_valid(static_cast<uint32_t>(t)));
    EXPECT_EQ(dtype_sparse_capacity(t), c);
    EXPECT_EQ(dtype_row_size(t, 2048), static_cast<size_t>(32 * (12 + c)));
    EXPECT_EQ(std::string(dtype_name(t)), "sq8_c" + std::to_string(c));
    EXPECT_EQ(vec_dot_type(t), DType::kQ8_0);
  }
  EXPECT_FALSE(dtype_valid(static_cast<uint32_t>(kSQ8) + 65));
  EXPECT_FALSE(dtype_valid(static_cast<uint32_t>(kSQ8)));
}

TEST(SparseFormat, DecodesToTheDenseExport) {
  const int64_t rows = 21, n = 640;
  const Sparse s = make_sparse(rows, n, 0.5, 1);
  EXPECT_EQ(dtype_sparse_capacity(s.type), 64);  // the fully dense rows set the capacity
  const Sparse s30 = make_sparse(14, n, 0.3, 2);
  const Sparse s4 = make_sparse(rows, n, 0.5, 3, 4);  // Q4_0 rounds small weights to 0: less than 64
  const Sparse s4_30 = make_sparse(14, n, 0.3, 4, 4);
  EXPECT_TRUE(dtype_is_sq4(s4_30.type));
  for (const Sparse* p : {&s, &s30, &s4, &s4_30}) {
    const DType dt = dtype_sparse_dense(p->type);
    std::vector<float> a(n), b(n);
    for (int64_t r = 0; r < p->rows; ++r) {
      dequantize_row_ref(p->type, p->bytes.data() + r * dtype_row_size(p->type, n), a.data(), n);
      dequantize_row_ref(dt, p->dense.data() + r * dtype_row_size(dt, n), b.data(), n);
      // Equal values (Q4_0's zero level gives -0.0 where its scale is negative; the sparse form +0.0).
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], b[i]) << dtype_name(p->type) << " row " << r << " input " << i;
    }
  }
}

TEST(SparseFormat, Int4TypesAndCapacity) {
  for (int c : {2, 32, 64}) {
    const DType t = dtype_sq4(c);
    EXPECT_TRUE(dtype_is_sparse(t));
    EXPECT_TRUE(dtype_is_sq4(t));
    EXPECT_FALSE(dtype_is_sq8(t));
    EXPECT_EQ(dtype_sparse_bits(t), 4);
    EXPECT_EQ(dtype_sparse_dense(t), DType::kQ4_0);
    EXPECT_EQ(dtype_sparse_dense(dtype_sq8(c)), DType::kQ8_0);
    EXPECT_EQ(dtype_sparse_capacity(t), c);
    EXPECT_EQ(dtype_row_size(t, 2048), static_cast<size_t>(32 * (12 + c / 2)));
    EXPECT_EQ(std::string(dtype_name(t)), "sq4_c" + std::to_string(c));
    EXPECT_EQ(vec_dot_type(t), DType::kQ8_0);
  }
  EXPECT_EQ(dtype_sparse_dense(DType::kQ4_K), DType::kQ4_K);  // not sparse: itself
  EXPECT_FALSE(dtype_valid(static_cast<uint32_t>(kSQ4) + 3));   // odd
  EXPECT_FALSE(dtype_valid(static_cast<uint32_t>(kSQ4) + 66));  // past 64
  EXPECT_FALSE(dtype_valid(static_cast<uint32_t>(kSQ4)));
  // One row of 2 blocks: block 0 keeps 3 values (2 bytes), block 1 keeps 6
  // (3 bytes): 5 bytes -> capacity 2 * ceil(5 / 2) = 6.
  const int64_t n = 128;
  std::vector<float> f(n, 0.f);
  f[0] = 7.f, f[5] = -3.f, f[40] = 1.f;
  for (int i = 0; i < 6; ++i) f[64 + 3 * i] = 2.5f - i;
  std::vector<uint8_t> q(dtype_row_size(DType::kQ4_0, n));
  quantize_row_q4_0_ref(f.data(), q.data(), n);
  EXPECT_EQ(sparse_capacity_q4_0(q.data(), 1, n), 6);
  std::vector<uint8_t> out(dtype_row_size(dtype_sq4(4), n));
  const Status st = sparse_from_q4_0_row(q.data(), out.data(), n, 4);  // 5 bytes > 4
  EXPECT_FALSE(st.is_ok());
  EXPECT_FALSE(sparse_from_q4_0_row(q.data(), out.data(), n, 5).is_ok());  // odd capacity
  out.assign(dtype_row_size(dtype_sq4(6), n), 0);
  ASSERT_TRUE(sparse_from_q4_0_row(q.data(), out.data(), n, 6).is_ok());
  std::vector<float> a(n), b(n);
  dequantize_row_sq4_ref(out.data(), a.data(), n);
  dequantize_row_q4_0_ref(q.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(a[i], b[i]) << "input " << i;
}

TEST(SparseFormat, CapacityIsTheDensestRow) {
  const int64_t n = 256;  // 4 blocks
  std::vector<float> f(2 * n, 0.f);
  for (int i = 0; i < 9; ++i) f[i * 7] = 1.f + i;       // row 0: 9 nonzeros -> ceil(9 / 4) = 3
  for (int i = 0; i < 3; ++i) f[n + i * 50] = -2.f - i;  // row 1: 3
  std::vector<uint8_t> q(2 * dtype_row_size(DType::kQ8_0, n));
  for (int r = 0; r < 2; ++r) quantize_row_q8_0_ref(f.data() + r * n, q.data() + r * q.size() / 2, n);
  EXPECT_EQ(sparse_capacity_q8_0(q.data(), 2, n), 3);
  std::vector<uint8_t> out(dtype_row_size(dtype_sq8(2), n));
  const Status st = quantize_row_sq8_ref(f.data(), out.data(), n, 2);  // 9 > 8
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("more than 8 nonzeros"), std::string::npos) << st.message();
}

// The twin against the dequantized operands (an independent formula).
class SparseBits : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Values, SparseBits, ::testing::Values(8, 4),
                         [](const ::testing::TestParamInfo<int>& i) { return i.param == 8 ? "int8" : "int4"; });

TEST_P(SparseBits, TwinMatchesDequantizedDot) {
  const int64_t rows = 14, n = 1024;
  const Sparse s = make_sparse(rows, n, 0.4, 3, GetParam());
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(n), wd(n), xd(n);
  for (float& v : x) v = g(rng);
  std::vector<BlockQ8_0> xq(n / 32);
  quantize_row_q8_0_ref(x.data(), xq.data(), n);
  dequantize_row_q8_0_ref(xq.data(), xd.data(), n);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* w = s.bytes.data() + r * dtype_row_size(s.type, n);
    dequantize_row_ref(s.type, w, wd.data(), n);
    double want = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      want += static_cast<double>(wd[i]) * xd[i];
      mag += std::fabs(static_cast<double>(wd[i]) * xd[i]);
    }
    float got = 0;
    twin(s.type)(n, &got, w, xq.data());
    EXPECT_NEAR(got, want, 1e-5 * mag + 1e-30) << "row " << r;
  }
}

// Every level's vec_dot and vec_dot_rows, and the matmul driver at 1, 5 and
// 70 tokens on 1 and 2 threads, give the twin's bits.
TEST_P(SparseBits, EveryLevelAndBatchSizeIsBitIdenticalToTheTwin) {
  const Isa saved = active_isa();
  for (double keep : {0.5, 0.3, 0.05, -0.4}) {  // < 0: every row at |keep|, a tight capacity
    const int64_t rows = 37, n = 704;  // 11 blocks; rows: groups of 4 and a tail
    const Sparse s = make_sparse(rows, n, std::fabs(keep), 7, GetParam(), keep > 0);
    const TensorView wv = s.view();
    const size_t rb = wv.row_bytes();
    const GuardedCopy guarded(s.bytes);  // the kernels' direct calls read this copy
    const uint8_t* wg = guarded.data();
    const int64_t n_tokens = 70;
    std::mt19937 rng(8);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> x(n_tokens * n);
    for (float& v : x) v = g(rng);
    std::vector<BlockQ8_0> xq(n_tokens * n / 32);
    for (int64_t t = 0; t < n_tokens; ++t) quantize_row_q8_0_ref(x.data() + t * n, xq.data() + t * n / 32, n);
    std::vector<float> want(n_tokens * rows);
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t r = 0; r < rows; ++r) twin(s.type)(n, &want[t * rows + r], s.bytes.data() + r * rb, &xq[t * n / 32]);
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (isa > cpu_max_isa()) continue;
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " keep " << keep);
      const KernelSet& k = kernels(s.type, isa);
      ASSERT_NE(k.vec_dot, nullptr);
      std::vector<float> got(rows);
      for (int64_t r = 0; r < rows; ++r) k.vec_dot(n, &got[r], wg + r * rb, xq.data());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), rows * sizeof(float))) << "vec_dot";
      if (isa != Isa::kScalar) {
        ASSERT_NE(k.vec_dot_rows, nullptr);
        for (int64_t nr : {rows, int64_t{1}, int64_t{6}}) {
          std::vector<float> y(nr);
          k.vec_dot_rows(n, y.data(), wg, rb, xq.data(), nr);
          EXPECT_EQ(0, std::memcmp(y.data(), want.data(), nr * sizeof(float))) << "rows, nr " << nr;
          k.vec_dot_rows(n, y.data(), wg + (rows - nr) * rb, rb, xq.data(), nr);  // the last rows
          EXPECT_EQ(0, std::memcmp(y.data(), want.data() + rows - nr, nr * sizeof(float))) << "last rows, nr " << nr;
        }
      }
      set_active_isa(isa);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        MatmulScratch scratch;
        for (int64_t nt : {int64_t{1}, int64_t{5}, n_tokens}) {
          std::vector<float> y(nt * rows);
          matmul(wv, x.data(), n, y.data(), rows, nt, pool, scratch);
          EXPECT_EQ(0, std::memcmp(y.data(), want.data(), nt * rows * sizeof(float)))
              << nt << " tokens, " << threads << " threads";
        }
      }
      set_active_isa(saved);
    }
  }
  if (__builtin_cpu_supports("avx512vbmi2") && cpu_max_isa() >= Isa::kAvx512) {
    // The VBMI2 row is installed (not the AVX2 kernels carried up).
    const DType t = GetParam() == 4 ? dtype_sq4(32) : dtype_sq8(32);
    EXPECT_NE(kernels(t, Isa::kAvx512).vec_dot, kernels(t, Isa::kAvx2).vec_dot);
  }
}

// The prefill tile of every level that has one, called directly: every
// (nr, nc) shape up to its bounds, rows longer than one expansion chunk
// (37 blocks: two chunks of 16 and a tail), the twin's bits; and the
// driver's prefill (64 and 130 tokens) through it.
TEST_P(SparseBits, TileIsBitIdenticalToTheTwin) {
  const Isa saved = active_isa();
  const int64_t rows = 19, n = 37 * 64, n_tokens = 130;
  for (double keep : {0.5, -0.25}) {  // < 0: every row at |keep|, a tight capacity
    const Sparse s = make_sparse(rows, n, std::fabs(keep), 11, GetParam(), keep > 0);
    const size_t rb = dtype_row_size(s.type, n), xrb = dtype_row_size(DType::kQ8_0, n);
    std::mt19937 rng(12);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> x(n_tokens * n);
    for (float& v : x) v = g(rng);
    std::vector<uint8_t> xq(n_tokens * xrb);
    for (int64_t t = 0; t < n_tokens; ++t) quantize_row_q8_0_ref(x.data() + t * n, xq.data() + t * xrb, n);
    std::vector<float> want(n_tokens * rows);
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t r = 0; r < rows; ++r) twin(s.type)(n, &want[t * rows + r], s.bytes.data() + r * rb, &xq[t * xrb]);
    const GuardedCopy guarded(s.bytes);
    int tiles = 0;
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
      if (isa > cpu_max_isa()) continue;
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " keep " << keep);
      const KernelSet& k = kernels(s.type, isa);
      if (!k.vec_dot_tile) continue;
      ++tiles;
      ASSERT_GE(k.tile_rows, 1);
      ASSERT_GE(k.tile_cols, 2);
      for (int nr = 1; nr <= k.tile_rows; ++nr)
        for (int nc : {1, 2, 3, k.tile_cols - 1, k.tile_cols}) {
          const int64_t r0 = rows - nr;  // the matrix's last rows: reads must stay inside
          const int64_t t0 = 5;
          std::vector<float> y(nc * rows, -1.f);
          k.vec_dot_tile(n, y.data(), rows, guarded.data() + r0 * rb, rb, &xq[t0 * xrb], xrb, nr, nc);
          for (int c = 0; c < nc; ++c)
            for (int i = 0; i < nr; ++i)
              ASSERT_EQ(std::bit_cast<uint32_t>(y[c * rows + i]),
                        std::bit_cast<uint32_t>(want[(t0 + c) * rows + r0 + i]))
                  << "nr " << nr << " nc " << nc << " token " << c << " row " << i;
        }
      set_active_isa(isa);
      ThreadPool pool(2);
      MatmulScratch scratch;
      for (int64_t nt : {int64_t{2}, int64_t{64}, n_tokens}) {
        std::vector<float> y(nt * rows);
        matmul(s.view(), x.data(), n, y.data(), rows, nt, pool, scratch);
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), nt * rows * sizeof(float))) << nt << " tokens";
      }
      set_active_isa(saved);
    }
    if (cpu_max_isa() >= Isa::kAvx2) {
      EXPECT_GE(tiles, 1) << "prefill has no tile kernel";
    }
  }
}

}  // namespace
}  // namespace ember
