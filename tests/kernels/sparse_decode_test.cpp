// Decode (vec_dot_rows) of the sparse int8 weights (kSQ8 | C) at every SIMD
// level against the scalar twin, bit for bit, over the shapes that take
// different paths through the AVX-512 kernel (avx512/sparse_rows.cpp): row
// groups of 4 and their tails, rows shorter than one 64-byte load, inputs
// longer than one prepared chunk of activations (n > 16384), empty and full
// rows; and that no kernel reads past the last row of its call (the rows end
// at a page followed by an inaccessible one).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/ref/dot.h"
#include "kernels/registry.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "quant/sparse.h"

namespace ember {
namespace {

// rows x n weights in kSQ8 | C: row r keeps a fraction keep of its inputs
// (every 5th row none, every 7th all of them), scales from 0.01 to 50.
// tight_end: no full rows, and the last row keeps every input but those of
// its last block, which keeps only its last input: the densest row sets the
// capacity, its last block's one value lies under 64 bytes before the
// row's end, and a 64-byte load from it would run past the row.
struct Rows {
  DType type;
  size_t row_bytes;
  std::vector<uint8_t> bytes;
};

Rows sparse_rows(int64_t rows, int64_t n, double keep, uint32_t seed, bool tight_end = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> f(rows * n);
  int64_t densest = 1;
  for (int64_t r = 0; r < rows; ++r) {
    const double k = r % 5 == 4 ? 0.0 : r % 7 == 6 && !tight_end ? 1.0 : keep;
    const float scale = r % 3 == 0 ? 50.f : r % 3 == 1 ? 0.01f : 1.f;
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool on = tight_end && r == rows - 1 ? i < n - 64 || i == n - 1 : u(rng) < k;
      f[r * n + i] = on ? g(rng) * scale : 0.f;
      kept += on;
    }
    densest = std::max(densest, kept);
  }
  const int cap = static_cast<int>(std::min<int64_t>(64, (densest * 64 + n - 1) / n));
  Rows out{dtype_sq8(cap), dtype_row_size(dtype_sq8(cap), n), {}};
  out.bytes.assign(out.row_bytes * rows, 0);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_TRUE(quantize_row_sq8_ref(f.data() + r * n, out.bytes.data() + r * out.row_bytes, n, cap).is_ok());
  return out;
}

std::vector<BlockQ8_0> activations(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = g(rng);
  x[0] = 0.f;
  std::vector<BlockQ8_0> q(n / 32);
  quantize_row_q8_0_ref(x.data(), q.data(), n);
  return q;
}

std::vector<Isa> simd_levels() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (isa <= cpu_max_isa()) v.push_back(isa);
  return v;
}

TEST(SparseDecode, RowsAreBitIdenticalToTheTwinOnEveryPath) {
  // n: 1 block, short rows (5 blocks: 60 bytes of masks and scales), an odd
  // count of 8-block scale chunks, 260 and 513 blocks (over one prepared
  // chunk of 256).
  for (int64_t n : {64, 320, 704, 64 * 260, 64 * 513}) {
    for (double keep : {0.5, 0.3, 0.02, 1.0}) {
      const int64_t rows = n > 20000 ? 11 : 37;
      const Rows w = sparse_rows(rows, n, keep, static_cast<uint32_t>(n + 1000 * keep));
      const std::vector<BlockQ8_0> x = activations(n, static_cast<uint32_t>(n));
      std::vector<float> want(rows);
      for (int64_t r = 0; r < rows; ++r) ref::sq8_dot(n, &want[r], w.bytes.data() + r * w.row_bytes, x.data());
      for (Isa isa : simd_levels()) {
        const KernelSet& k = kernels(w.type, isa);
        ASSERT_NE(k.vec_dot_rows, nullptr);
        // Every call length up to 9 (groups of 4 and each tail), all rows,
        // and calls starting inside the matrix.
        for (int64_t r0 : {int64_t{0}, int64_t{3}}) {
          std::vector<int64_t> lengths = {rows - r0};
          for (int64_t nr = 1; nr <= 9 && r0 + nr < rows; ++nr) lengths.push_back(nr);
          for (int64_t nr : lengths) {
            std::vector<float> y(nr, -1.f);
            k.vec_dot_rows(n, y.data(), w.bytes.data() + r0 * w.row_bytes, w.row_bytes, x.data(), nr);
            ASSERT_EQ(0, std::memcmp(y.data(), want.data() + r0, nr * sizeof(float)))
                << isa_name(isa) << " n " << n << " keep " << keep << " rows " << r0 << " + " << nr;
          }
        }
      }
    }
  }
}

// The rows end exactly where an inaccessible page starts: a load past the
// last row's kept values faults.
TEST(SparseDecode, NoLoadPastTheLastRowOfACall) {
  const long page = sysconf(_SC_PAGESIZE);
  for (int64_t n : {64, 320, 2048}) {
    for (double keep : {0.5, 0.05}) {
      const int64_t rows = 9;
      const Rows w = sparse_rows(rows, n, keep, 11, true);
      const size_t bytes = w.bytes.size();
      const size_t span = (bytes + page - 1) / page * page;
      void* m = mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(m, MAP_FAILED);
      ASSERT_EQ(0, mprotect(static_cast<uint8_t*>(m) + span, page, PROT_NONE));
      uint8_t* at = static_cast<uint8_t*>(m) + span - bytes;
      std::memcpy(at, w.bytes.data(), bytes);
      const std::vector<BlockQ8_0> x = activations(n, 12);
      std::vector<float> want(rows);
      for (int64_t r = 0; r < rows; ++r) ref::sq8_dot(n, &want[r], at + r * w.row_bytes, x.data());
      for (Isa isa : simd_levels()) {
        const KernelSet& k = kernels(w.type, isa);
        for (int64_t nr = 1; nr <= rows; ++nr) {  // the call's last row is the matrix's
          std::vector<float> y(nr);
          k.vec_dot_rows(n, y.data(), at + (rows - nr) * w.row_bytes, w.row_bytes, x.data(), nr);
          EXPECT_EQ(0, std::memcmp(y.data(), want.data() + rows - nr, nr * sizeof(float)))
              << isa_name(isa) << " n " << n << " nr " << nr;
        }
        float y1;
        k.vec_dot(n, &y1, at + (rows - 1) * w.row_bytes, x.data());
        EXPECT_EQ(0, std::memcmp(&y1, &want[rows - 1], sizeof(float)));
      }
      munmap(m, span + page);
    }
  }
}

}  // namespace
}  // namespace ember
