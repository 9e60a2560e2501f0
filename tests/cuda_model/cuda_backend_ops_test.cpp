// The CUDA Backend op by op (backend_ops-style) against the CPU backend at
// the scalar level (kernels/ref/'s twins): host buffers (staged) and the
// backend's own device buffers (copied in and out), fresh random non-zero
// inputs, outputs poisoned (NaN) before each run. Tolerances: row ops 1e-5
// relative; the mat-vec path (fewer than gemm_min_tokens tokens: the CPU's
// int8 activation types, block terms equal, only the summation order
// differs) 1e-4 relative to the row's magnitude; the f16-tile path 2e-2; f32
// weights 1e-5; K/V stores bit for bit (the bytes of kv_store_row);
// attention over those pages 1e-5. Without a GPU every test skips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "engine/kv/kv_pool.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#include "kernels/test_weights.h"

namespace ember {
namespace {

class CudaBackendOps : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device (" << why << "): device test skipped";
    saved_ = active_isa();
    set_active_isa(Isa::kScalar);
    cpu_ = make_cpu_backend(pool_);
    auto g = cuda::make_cuda_backend();
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    gpu_ = std::move(*g);
  }
  void TearDown() override {
    if (cpu_) set_active_isa(saved_);
  }
  // The op run on the device through a device buffer: x copied in, the op
  // on device pointers, the result copied out.
  std::vector<float> on_device(const std::vector<float>& in, const std::function<void(float*)>& op) {
    auto b = gpu_->alloc(in.size() * sizeof(float));
    EXPECT_TRUE(b);
    gpu_->copy(b->data(), in.data(), in.size() * sizeof(float));
    op(b->as<float>());
    std::vector<float> out(in.size());
    gpu_->copy(out.data(), b->data(), out.size() * sizeof(float));
    const Status st = gpu_->sync();
    EXPECT_TRUE(st.is_ok()) << st.message();
    return out;
  }
  void expect_ok() {
    const Status st = gpu_->sync();
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
  ThreadPool pool_{2};
  std::unique_ptr<Backend> cpu_, gpu_;
  Isa saved_ = Isa::kScalar;
};

// max |a - b| / max(|b|) over the elements, inf on a non-finite a.
double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, m = 1e-30;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    e = std::max(e, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return e / m;
}

TEST_F(CudaBackendOps, RowOpsOnHostAndDeviceBuffers) {
  const int64_t n = 7, dim = 320, ld = 330;
  const std::vector<float> x = nonzero_gaussians(n * ld, 1), w = nonzero_gaussians(dim, 2), up = nonzero_gaussians(n * ld, 3);
  std::vector<float> want(n * ld, NAN), got(n * ld, NAN);
  cpu_->rms_norm(x.data(), ld, w.data(), want.data(), ld, n, dim, 1e-6f);
  gpu_->rms_norm(x.data(), ld, w.data(), got.data(), ld, n, dim, 1e-6f);
  expect_ok();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = dim; i < ld; ++i) ASSERT_TRUE(std::isnan(got[t * ld + i])) << "a gap was written";
  auto cols = [&](const std::vector<float>& a) {
    std::vector<float> c;
    for (int64_t t = 0; t < n; ++t) c.insert(c.end(), a.begin() + t * ld, a.begin() + t * ld + dim);
    return c;
  };
  EXPECT_LT(rel(cols(got), cols(want)), 1e-5) << "rms_norm (host buffers)";
  std::vector<float> dev = on_device(x, [&](float* d) { gpu_->rms_norm(d, ld, w.data(), d, ld, n, dim, 1e-6f); });
  std::vector<float> in_place = x;
  cpu_->rms_norm(in_place.data(), ld, w.data(), in_place.data(), ld, n, dim, 1e-6f);
  EXPECT_LT(rel(dev, in_place), 1e-5) << "rms_norm in place (device buffer)";

  for (GatedActivation a : {GatedActivation::kSwiGlu, GatedActivation::kGeGluTanh}) {
    std::vector<float> g0 = x, g1 = x;
    cpu_->gated_activation(a, g0.data(), ld, up.data(), ld, n, dim);
    g1 = on_device(x, [&](float* d) { gpu_->gated_activation(a, d, ld, up.data(), ld, n, dim); });
    EXPECT_LT(rel(g1, g0), 1e-5) << "gated activation " << static_cast<int>(a);
  }
  std::vector<float> s0 = x;
  cpu_->softcap(s0.data(), n * ld, 3.f);
  EXPECT_LT(rel(on_device(x, [&](float* d) { gpu_->softcap(d, n * ld, 3.f); }), s0), 1e-5) << "softcap";
  std::vector<float> a0 = x;
  cpu_->add(a0.data(), up.data(), n * ld);
  EXPECT_EQ(rel(on_device(x, [&](float* d) { gpu_->add(d, up.data(), n * ld); }), a0), 0.0) << "add";
  std::vector<float> b0 = x;
  cpu_->add_bias(b0.data(), ld, n, dim, w.data());
  EXPECT_EQ(rel(on_device(x, [&](float* d) { gpu_->add_bias(d, ld, n, dim, w.data()); }), b0), 0.0) << "add_bias";

  // RoPE: angles from positions, then rotation (normal and NeoX, partial).
  const int heads = 4, hd = 64, n_rot = 48;
  std::vector<int32_t> pos = {0, 5, 17, 100, 1023, 4096, 9};
  std::vector<float> inv(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) inv[i] = std::pow(10000.f, -2.f * i / n_rot);
  std::vector<float> c0(n * n_rot / 2), s_0(c0.size()), c1(c0.size(), NAN), s1(c0.size(), NAN);
  cpu_->rope_angles(pos.data(), n, inv.data(), n_rot, c0.data(), s_0.data());
  gpu_->rope_angles(pos.data(), n, inv.data(), n_rot, c1.data(), s1.data());
  expect_ok();
  EXPECT_LT(rel(c1, c0), 1e-6);
  EXPECT_LT(rel(s1, s_0), 1e-6);
  const std::vector<float> q = nonzero_gaussians(n * heads * hd, 9);
  for (RopeStyle st : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    std::vector<float> r0 = q;
    cpu_->rope(r0.data(), heads * hd, n, heads, hd, n_rot, st, c0.data(), s_0.data());
    EXPECT_LT(rel(on_device(q, [&](float* d) { gpu_->rope(d, heads * hd, n, heads, hd, n_rot, st, c0.data(), s_0.data()); }), r0),
              1e-5);
  }
}

TEST_F(CudaBackendOps, MatmulBothPathsEveryDeviceTypeAndEmbedding) {
  const int64_t rows = 200, n = 512;
  for (DType t : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kF16, DType::kBF16,
                  DType::kF32}) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<uint8_t> bytes = make_weights(t, rows, n, 3 + static_cast<uint32_t>(t));
    TensorView w;
    w.name = "w", w.type = t, w.n_dims = 2, w.ne[0] = n, w.ne[1] = rows, w.data = bytes.data(), w.nbytes = bytes.size();
    for (int64_t nt : {1, 5, 40}) {  // 40 >= gemm_min_tokens (32): the f16 tiles
      const std::vector<float> x = nonzero_gaussians(nt * n, 100 + static_cast<uint32_t>(nt));
      std::vector<float> want(nt * rows), got(nt * rows, NAN);
      cpu_->matmul(w, x.data(), n, want.data(), rows, nt);
      gpu_->matmul(w, x.data(), n, got.data(), rows, nt);
      expect_ok();
      const double tol = t == DType::kF32 ? 1e-5 : nt >= 32 ? 2e-2 : 1e-4;
      EXPECT_LT(rel(got, want), tol) << nt << " tokens";
    }
    const std::vector<int32_t> ids = {0, 199, 7, 7, 120};
    std::vector<float> e0(ids.size() * n), e1(e0.size(), NAN);
    cpu_->embed(w, ids.data(), 5, 0.5f, e0.data());
    gpu_->embed(w, ids.data(), 5, 0.5f, e1.data());
    expect_ok();
    EXPECT_EQ(rel(e1, e0), 0.0) << "embedding";
  }
  // What the device lacks is a Status from sync(), then the backend works on.
  TensorView w4;
  const std::vector<uint8_t> b4 = make_weights(DType::kQ4_1, 8, 64, 1);
  w4.name = "q4_1", w4.type = DType::kQ4_1, w4.n_dims = 2, w4.ne[0] = 64, w4.ne[1] = 8, w4.data = b4.data(),
  w4.nbytes = b4.size();
  std::vector<float> x(64, 1.f), y(8);
  gpu_->matmul(w4, x.data(), 64, y.data(), 8, 1);
  const Status st = gpu_->sync();
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("q4_1"), std::string::npos) << st.message();
  EXPECT_TRUE(gpu_->sync().is_ok());
}

// K/V stores into a pool in the device's memory and attention over it,
// against the CPU's over a host pool: the pages bit for bit, the output
// within 1e-5.
TEST_F(CudaBackendOps, KvStoreAndAttentionOverThePagedPool) {
  for (KvType kt : {KvType::kF32, KvType::kF16, KvType::kBF16}) {
    SCOPED_TRACE(kv_type_name(kt));
    KvSpec spec;
    spec.layers = {{0, 2 * 64, 2 * 64}};
    spec.types = {kt, kt};
    const KvLayout layout = KvLayout::from_spec(spec, false);
    auto hp = KvBlockPool::create(spec, layout, 16, 0, 12);
    auto dp = KvBlockPool::create(spec, layout, 16, 0, 12, {}, gpu_.get());
    ASSERT_TRUE(hp.is_ok() && dp.is_ok());
    // Two sequences: 40 positions (prefill) and 9, pages shuffled.
    std::vector<std::vector<int32_t>> ta = {{5, 0, 9}}, tb = {{3}};
    PagedKvCache ha(**hp, ta), hb(**hp, tb), da(**dp, ta), db(**dp, tb);
    for (PagedKvCache* c : {&ha, &hb, &da, &db}) c->sync();
    std::vector<int32_t> pos, seg;
    for (int p = 0; p < 40; ++p) pos.push_back(p), seg.push_back(0);
    for (int p = 0; p < 9; ++p) pos.push_back(p), seg.push_back(1);
    const int64_t n = static_cast<int64_t>(pos.size()), K = 128;
    const std::vector<float> k = nonzero_gaussians(n * K, 21), v = nonzero_gaussians(n * K, 22), q = nonzero_gaussians(n * 4 * 64, 23);
    KvStoreView hs[2] = {ha.store_view(0), hb.store_view(0)}, ds[2] = {da.store_view(0), db.store_view(0)};
    cpu_->kv_store(k.data(), K, K, v.data(), K, K, pos.data(), n, hs, seg.data());
    gpu_->kv_store(k.data(), K, K, v.data(), K, K, pos.data(), n, ds, seg.data());
    expect_ok();
    // The written rows of each page (the rest is not written: host pages
    // are uninitialised, device pages zeroed).
    const std::pair<int32_t, int> written[] = {{5, 16}, {0, 16}, {9, 8}, {3, 9}};
    for (const auto& [page, rows] : written) {
      const size_t kb = static_cast<size_t>(rows) * (*hp)->k_row_bytes(0);
      std::vector<uint8_t> got(kb);
      gpu_->copy(got.data(), (*dp)->k_block(0, page), kb);
      EXPECT_EQ(0, std::memcmp(got.data(), (*hp)->k_block(0, page), kb)) << "K page " << page;
      gpu_->copy(got.data(), (*dp)->v_block(0, page), kb);
      EXPECT_EQ(0, std::memcmp(got.data(), (*hp)->v_block(0, page), kb)) << "V page " << page;
    }
    AttentionShape s;
    s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64, s.head_dim_v = 64, s.scale = 0.125f;
    KvView hv[2] = {ha.view(0), hb.view(0)}, dv[2] = {da.view(0), db.view(0)};
    std::vector<float> want(n * 4 * 64), got(want.size(), NAN);
    cpu_->attention(s, q.data(), pos.data(), n, hv, seg.data(), want.data());
    gpu_->attention(s, q.data(), pos.data(), n, dv, seg.data(), got.data());
    expect_ok();
    EXPECT_LT(rel(got, want), 1e-5);
  }
}

// CudaBackendOptions::decode_graphs: a mat-vec matmul over device buffers
// (three targets sharing x, two activation kinds, as Q/K/V) is captured once
// per token count and replayed after; every replay gives the eager
// backend's bits, with x's contents changed in place between runs (the
// graph reads the buffer, not a copy) and outputs poisoned before each run.
// Host buffers are staged, so such calls run eagerly.
TEST_F(CudaBackendOps, DecodeGraphsReplayTheEagerBits) {
  cuda::CudaBackendOptions go;
  go.decode_graphs = true;
  auto made = cuda::make_cuda_backend(go);
  ASSERT_TRUE(made.is_ok()) << made.status().message();
  Backend& graphs = **made;
  const int64_t n_in = 512, max_n = 17;
  const DType types[3] = {DType::kQ4_K, DType::kQ8_0, DType::kQ6_K};
  const int64_t rows[3] = {192, 64, 256};
  std::vector<std::vector<uint8_t>> bytes;
  TensorView w[3];
  for (int i = 0; i < 3; ++i) {
    bytes.push_back(make_weights(types[i], rows[i], n_in, 50 + static_cast<uint32_t>(i)));
    w[i].name = "w", w[i].type = types[i], w[i].n_dims = 2, w[i].ne[0] = n_in, w[i].ne[1] = rows[i];
    w[i].data = bytes.back().data(), w[i].nbytes = bytes.back().size();
  }
  struct Side {
    Backend* b;
    std::unique_ptr<BackendBuffer> x, y[3];
  } sides[2] = {{gpu_.get(), {}, {}}, {&graphs, {}, {}}};
  for (Side& s : sides) {
    s.x = s.b->alloc(max_n * n_in * sizeof(float));
    for (int i = 0; i < 3; ++i) s.y[i] = s.b->alloc(max_n * rows[i] * sizeof(float));
  }
  int runs = 0;
  // The largest count first: the activation scratch is sized then, so the
  // graphs' addresses stay put and each count is captured exactly once.
  for (int64_t n : {17, 1, 3, 8, 17, 3, 1, 8}) {
    for (uint32_t round = 0; round < 2; ++round, ++runs) {
      SCOPED_TRACE(std::to_string(n) + " tokens, round " + std::to_string(round));
      const std::vector<float> x = nonzero_gaussians(n * n_in, 1000 + static_cast<uint32_t>(runs));
      std::vector<float> out[2][3];
      for (int side = 0; side < 2; ++side) {
        Side& s = sides[side];
        s.b->copy(s.x->data(), x.data(), x.size() * sizeof(float));
        MatmulTarget t[3];
        for (int i = 0; i < 3; ++i) {
          const std::vector<float> poison(static_cast<size_t>(n * rows[i]), NAN);
          s.b->copy(s.y[i]->data(), poison.data(), poison.size() * sizeof(float));
          t[i] = MatmulTarget{&w[i], s.y[i]->as<float>(), rows[i]};
        }
        s.b->matmul(s.x->as<float>(), n_in, n, t, 3);
        for (int i = 0; i < 3; ++i) {
          out[side][i].resize(static_cast<size_t>(n * rows[i]));
          s.b->copy(out[side][i].data(), s.y[i]->data(), out[side][i].size() * sizeof(float));
        }
        const Status st = s.b->sync();
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
      for (int i = 0; i < 3; ++i) {
        for (float v : out[1][i]) ASSERT_TRUE(std::isfinite(v)) << "target " << i << ": not written";
        EXPECT_EQ(std::memcmp(out[0][i].data(), out[1][i].data(), out[0][i].size() * sizeof(float)), 0)
            << "target " << i << " (" << dtype_name(types[i]) << "): graph replay differs from eager";
      }
    }
  }
  EXPECT_EQ(cuda::cuda_graphs_captured(graphs), 4);  // 17, 1, 3 and 8 tokens: each captured once
  EXPECT_EQ(cuda::cuda_graphs_captured(*gpu_), 0);
  // Host buffers: staged, run eagerly (no new graph), the same bits.
  const std::vector<float> x = nonzero_gaussians(3 * n_in, 77);
  std::vector<float> a(3 * rows[0], NAN), b(3 * rows[0], NAN);
  gpu_->matmul(w[0], x.data(), n_in, a.data(), rows[0], 3);
  graphs.matmul(w[0], x.data(), n_in, b.data(), rows[0], 3);
  ASSERT_TRUE(gpu_->sync().is_ok() && graphs.sync().is_ok());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(cuda::cuda_graphs_captured(graphs), 4);
}

}  // namespace
}  // namespace ember
