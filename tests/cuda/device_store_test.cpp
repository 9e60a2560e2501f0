// Device tests of the ops the CUDA backend added to kernels/cuda/ops.h: the
// K/V store kernel against its host twin (bit for bit, pages poisoned
// around the rows), the f32 cuBLAS product against an f64 reference, and
// the f32 embedding against the scalar reference (bit for bit). Without a
// device every test skips, printing the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/device_fixture.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/twins.h"
#include "kernels/kv_types.h"
#include "kernels/test_weights.h"
#include "kernels/ref/row_ops.h"

namespace ember::cuda {
namespace {

class CudaStore : public DeviceTest {};

TEST_F(CudaStore, KvStoreEqualsItsTwinBitForBit) {
  const KvType types[] = {KvType::kF32, KvType::kF16, KvType::kBF16};
  const KvElem elems[] = {KvElem::kF32, KvElem::kF16, KvElem::kBF16};
  const int bs = 16, n_pages = 40, stride = 12;
  const int64_t k_width = 256, v_width = 192;
  std::mt19937 rng(3);
  std::vector<int32_t> ids(n_pages);
  for (int i = 0; i < n_pages; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> tables(3 * stride);
  for (int i = 0; i < 3 * stride; ++i) tables[i] = ids[i];
  std::vector<int32_t> pos, seq;  // a prefill of 70 tokens, two decodes
  for (int p = 0; p < 70; ++p) pos.push_back(p), seq.push_back(0);
  pos.push_back(150), seq.push_back(1);
  pos.push_back(17), seq.push_back(2);
  const int64_t n = static_cast<int64_t>(pos.size());
  const std::vector<float> k = nonzero_gaussians(n * k_width, 1, 2.f), v = nonzero_gaussians(n * (v_width + 8), 2, 2.f);
  for (int ki = 0; ki < 3; ++ki)
    for (int vi = 0; vi < 3; ++vi) {
      SCOPED_TRACE(std::string(kv_type_name(types[ki])) + " / " + kv_type_name(types[vi]));
      const int64_t krb = static_cast<int64_t>(kv_row_bytes(types[ki], k_width));
      const int64_t vrb = static_cast<int64_t>(kv_row_bytes(types[vi], v_width)) + 64;
      std::vector<uint8_t> kp(n_pages * bs * krb, 0xA5), vp(n_pages * bs * vrb, 0x5A);
      DeviceBuffer dk = up(k), dv = up(v), dpos = up(pos), dseq = up(seq), dtab = up(tables);
      DeviceBuffer dkp = up(kp), dvp = up(vp);
      StorePages p;
      p.k = dkp.as<uint8_t>(), p.v = dvp.as<uint8_t>(), p.block_size = bs;
      p.k_row_bytes = krb, p.v_row_bytes = vrb, p.k_type = types[ki], p.v_type = types[vi];
      ASSERT_TRUE(kv_store(*ctx_, p, dk.as<float>(), k_width, k_width, dv.as<float>(), v_width + 8, v_width,
                           dpos.as<int32_t>(), dseq.as<int32_t>(), n, dtab.as<int32_t>(), stride)
                      .is_ok());
      launch::KvStoreArgs a;
      a.k = k.data(), a.ldk = k_width, a.k_width = k_width;
      a.v = v.data(), a.ldv = v_width + 8, a.v_width = v_width;
      a.pos = pos.data(), a.seq_of_token = seq.data(), a.n_tokens = n;
      a.k_pages = kp.data(), a.v_pages = vp.data(), a.block_size = bs;
      a.k_row_bytes = krb, a.v_row_bytes = vrb, a.k_type = elems[ki], a.v_type = elems[vi];
      a.tables = tables.data(), a.table_stride = stride;
      kv_store_host(a);
      EXPECT_EQ(down<uint8_t>(dkp, kp.size()), kp);
      EXPECT_EQ(down<uint8_t>(dvp, vp.size()), vp);
    }
  // q8 pages are an error, not a write.
  StorePages bad;
  bad.k_type = KvType::kQ8;
  EXPECT_FALSE(kv_store(*ctx_, bad, nullptr, 1, 1, nullptr, 1, 1, nullptr, nullptr, 1, nullptr, 1).is_ok());
}

TEST_F(CudaStore, F32ProductAndEmbeddingMatchTheReferences) {
  const int64_t n_in = 320, n_out = 200;
  const std::vector<float> w = nonzero_gaussians(n_in * n_out, 5, 2.f);
  TensorView tv;
  tv.name = "w";
  tv.type = DType::kF32;
  tv.ne[0] = n_in;
  tv.ne[1] = n_out;
  tv.data = w.data();
  tv.nbytes = w.size() * 4;
  auto dw = upload_weight(*ctx_, tv);
  ASSERT_TRUE(dw.is_ok()) << dw.status().message();
  for (int64_t nt : {1, 7, 40}) {
    const std::vector<float> x = nonzero_gaussians(nt * (n_in + 3), 100 + static_cast<uint32_t>(nt), 2.f);
    DeviceBuffer dx = up(x);
    auto dy = DeviceBuffer::alloc(nt * n_out * 4);
    ASSERT_TRUE(dy.is_ok());
    ASSERT_TRUE(ctx_->fill(dy->data(), 0xFF, dy->bytes()).is_ok());
    ASSERT_TRUE(matmul_f32(*ctx_, *dw, dx.as<float>(), n_in + 3, nt, dy->as<float>(), n_out).is_ok());
    const std::vector<float> y = down<float>(*dy, nt * n_out);
    double num = 0, den = 0;
    for (int64_t t = 0; t < nt; ++t)
      for (int64_t r = 0; r < n_out; ++r) {
        double ref = 0;
        for (int64_t i = 0; i < n_in; ++i) ref += static_cast<double>(w[r * n_in + i]) * x[t * (n_in + 3) + i];
        ASSERT_TRUE(std::isfinite(y[t * n_out + r]));
        num += (y[t * n_out + r] - ref) * (y[t * n_out + r] - ref);
        den += ref * ref;
      }
    EXPECT_LT(std::sqrt(num / den), 1e-6) << nt << " tokens";
  }
  const std::vector<int32_t> ids = {3, 0, 199, 3, 57};
  DeviceBuffer did = up(ids);
  auto dout = DeviceBuffer::alloc(ids.size() * n_in * 4);
  ASSERT_TRUE(dout.is_ok());
  ASSERT_TRUE(embed(*ctx_, *dw, did.as<int32_t>(), 5, 0.37f, dout->as<float>()).is_ok());
  std::vector<float> want(ids.size() * n_in);
  ref::embed_rows(tv, ids.data(), 5, 0.37f, want.data());
  const std::vector<float> got = down<float>(*dout, want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
}

}  // namespace
}  // namespace ember::cuda
