// Device tests of kernels/cuda/ (backend_ops-style): every op on the GPU
// against its scalar twin, with fresh random non-zero inputs and outputs
// poisoned (all bits set: NaN) before each run, so an unwritten element
// fails. Error measure: ||out - ref|| / ||ref|| against a float64
// reference (f32 arithmetic far under 1e-3; f16 operands within 1e-2), and
// bit equality where the contract promises it (act rows, the mat-vec against
// its host twin, dequantized rows, the two attention modes, a row alone or
// batched). Without a device every test skips, printing the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/device_fixture.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/twins.h"
#include "kernels/kv_types.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/row_ops.h"
#include "kernels/test_weights.h"
#include "quant/quantize.h"

namespace ember::cuda {
namespace {

class CudaDevice : public DeviceTest {
 protected:
  DeviceBuffer poisoned(size_t bytes) {
    auto b = DeviceBuffer::alloc(bytes);
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    EXPECT_TRUE(ctx_->fill(b->data(), 0xFF, b->bytes()).is_ok());
    return std::move(*b);
  }
};

// ||a - ref|| / ||ref|| (inf if any element of a is not finite).
double rel_err(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K,
                            DType::kQ6_K, DType::kF16,  DType::kBF16};

TEST_F(CudaDevice, ActRowsEqualTheHostTwinBitForBit) {
  for (ActKind k : {ActKind::kQ8_0, ActKind::kQ8_K})
    for (int64_t n : {256, 640, 2048, 4096}) {
      if (n % act_block(k)) continue;
      const int64_t tokens = 3, ldx = n + 32;
      const auto x = nonzero_gaussians(static_cast<size_t>(tokens * ldx), static_cast<uint32_t>(n));
      const DType wt = k == ActKind::kQ8_0 ? DType::kQ8_0 : DType::kQ4_K;
      const int64_t stride = act_stride(wt, n);
      auto dx = up(x);
      auto act = poisoned(static_cast<size_t>(stride * tokens));
      ASSERT_TRUE(quantize_act(*ctx_, wt, dx.as<float>(), ldx, n, tokens, act.data()).is_ok());
      const auto got = down<uint8_t>(act, static_cast<size_t>(stride * tokens));
      std::vector<uint8_t> want(static_cast<size_t>(stride));
      const int64_t used = act_bsums_offset(k, n) + 2 * (n / 16);
      for (int64_t t = 0; t < tokens; ++t) {
        act_quantize_host(k, x.data() + t * ldx, n, want.data());
        ASSERT_EQ(0, std::memcmp(got.data() + t * stride, want.data(), static_cast<size_t>(used)))
            << "kind " << static_cast<int>(k) << " n " << n << " token " << t;
      }
    }
}

TEST_F(CudaDevice, MatvecEqualsItsTwinBitForBitAndTheF64Reference) {
  struct Shape {
    int64_t n_in, n_out;
  };
  for (DType dt : kTypes)
    for (Shape sh : {Shape{1024, 37}, Shape{4096, 64}, Shape{2304, 130}, Shape{640, 33}})
      for (int64_t tokens : {1, 3, 8, 11}) {
        const WType wt = *wtype_of(dt);
        if (sh.n_in % (wtype_is_kquant(wt) ? 256 : 32)) continue;
        const auto wbytes = make_weights(dt, sh.n_out, sh.n_in, static_cast<uint32_t>(sh.n_in + tokens));
        TensorView w;
        w.name = "w";
        w.type = dt;
        w.n_dims = 2;
        w.ne[0] = sh.n_in;
        w.ne[1] = sh.n_out;
        w.data = wbytes.data();
        w.nbytes = wbytes.size();
        auto dw = upload_weight(*ctx_, w);
        ASSERT_TRUE(dw.is_ok()) << dw.status().message();
        const auto x = nonzero_gaussians(static_cast<size_t>(tokens * sh.n_in), static_cast<uint32_t>(tokens));
        auto dx = up(x);
        const int64_t stride = act_stride(dt, sh.n_in);
        auto act = poisoned(static_cast<size_t>(stride * tokens));
        ASSERT_TRUE(quantize_act(*ctx_, dt, dx.as<float>(), sh.n_in, sh.n_in, tokens, act.data()).is_ok());
        const int64_t ldy = sh.n_out + 5;  // the gap must stay poisoned
        auto y = poisoned(static_cast<size_t>(ldy * tokens * 4));
        const Status st = matvec(*ctx_, *dw, act.data(), tokens, y.as<float>(), ldy);
        ASSERT_TRUE(st.is_ok()) << st.message();
        const auto got = down<float>(y, static_cast<size_t>(ldy * tokens));
        const auto acts = down<uint8_t>(act, static_cast<size_t>(stride * tokens));
        std::vector<float> deq(static_cast<size_t>(sh.n_in)), xq(static_cast<size_t>(sh.n_in));
        std::vector<float> mine;
        std::vector<double> ref;
        for (int64_t t = 0; t < tokens; ++t) {
          const uint8_t* arow = acts.data() + t * stride;
          // The activations as the kernel sees them, widened.
          if (wtype_is_float(wt)) {
            std::memcpy(xq.data(), arow, xq.size() * 4);
          } else {
            const ActKind k = wtype_act(wt);
            for (int64_t i = 0; i < sh.n_in; ++i) {
              float d;
              std::memcpy(&d, arow + act_d_offset(k, sh.n_in) + 4 * (i / act_block(k)), 4);
              xq[i] = d * static_cast<float>(static_cast<int8_t>(arow[i]));
            }
          }
          for (int64_t r = 0; r < sh.n_out; ++r) {
            const uint8_t* wrow = wbytes.data() + r * w.row_bytes();
            const float twin = rows_host(wt, wrow, sh.n_in, arow);
            const float g = got[t * ldy + r];
            ASSERT_TRUE(same_bits(g, twin)) << dtype_name(dt) << " " << sh.n_in << "x" << sh.n_out << " tokens "
                                            << tokens << " row " << r << " token " << t << ": " << g << " vs " << twin;
            dequantize_row_ref(dt, wrow, deq.data(), sh.n_in);
            double s = 0;
            for (int64_t i = 0; i < sh.n_in; ++i) s += static_cast<double>(deq[i]) * xq[i];
            mine.push_back(g);
            ref.push_back(s);
          }
          for (int64_t r = sh.n_out; r < ldy; ++r) ASSERT_TRUE(std::isnan(got[t * ldy + r])) << "wrote past n_out";
        }
        EXPECT_LT(rel_err(mine, ref), 1e-5) << dtype_name(dt) << " " << sh.n_in << "x" << sh.n_out;
      }
}

TEST_F(CudaDevice, TilesAndCublasMatchTheF64ProductOfF16Operands) {
  for (DType dt : kTypes) {
    const int64_t n_in = 512, n_out = 200, tokens = 37;
    const auto wbytes = make_weights(dt, n_out, n_in, 99);
    TensorView w;
    w.type = dt, w.n_dims = 2, w.ne[0] = n_in, w.ne[1] = n_out, w.data = wbytes.data(), w.nbytes = wbytes.size();
    auto dw = upload_weight(*ctx_, w);
    ASSERT_TRUE(dw.is_ok()) << dw.status().message();
    const auto x = nonzero_gaussians(static_cast<size_t>(tokens * n_in), 5);
    auto dx = up(x);
    const size_t scratch_bytes = tile_scratch_bytes(n_in, tokens, 64);  // 4 tiles
    auto scratch = poisoned(scratch_bytes);
    auto y = poisoned(static_cast<size_t>(tokens * n_out * 4));
    const Status st = matmul_tile(*ctx_, *dw, dx.as<float>(), n_in, tokens, y.as<float>(), n_out, scratch.data(),
                                  scratch_bytes);
    ASSERT_TRUE(st.is_ok()) << st.message();
    const auto got = down<float>(y, static_cast<size_t>(tokens * n_out));
    std::vector<float> deq(static_cast<size_t>(n_in));
    std::vector<double> exact, rounded;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t r = 0; r < n_out; ++r) {
        dequantize_row_ref(dt, wbytes.data() + r * w.row_bytes(), deq.data(), n_in);
        double e = 0, h = 0;
        for (int64_t i = 0; i < n_in; ++i) {
          e += static_cast<double>(deq[i]) * x[t * n_in + i];
          h += static_cast<double>(f16_to_f32(f32_to_f16(deq[i]))) * f16_to_f32(f32_to_f16(x[t * n_in + i]));
        }
        exact.push_back(e);
        rounded.push_back(h);
      }
    EXPECT_LT(rel_err(got, rounded), 1e-4) << dtype_name(dt);
    EXPECT_LT(rel_err(got, exact), 1e-2) << dtype_name(dt);
  }
}

TEST_F(CudaDevice, EmbeddingRowsEqualTheReferenceBitForBit) {
  for (DType dt : kTypes) {
    const int64_t dim = 512, vocab = 50;
    const auto wbytes = make_weights(dt, vocab, dim, 3);
    TensorView w;
    w.type = dt, w.n_dims = 2, w.ne[0] = dim, w.ne[1] = vocab, w.data = wbytes.data(), w.nbytes = wbytes.size();
    auto dw = upload_weight(*ctx_, w);
    ASSERT_TRUE(dw.is_ok());
    const std::vector<int32_t> ids = {3, 49, 0, 3, 17, 50, -1};  // the last two are out of range
    auto did = up(ids);
    for (float scale : {1.f, 2.5f}) {
      auto out = poisoned(ids.size() * dim * 4);
      ASSERT_TRUE(embed(*ctx_, *dw, did.as<int32_t>(), static_cast<int64_t>(ids.size()), scale, out.as<float>()).is_ok());
      const auto got = down<float>(out, ids.size() * dim);
      std::vector<float> want(5 * dim);
      ref::embed_rows(w, ids.data(), 5, scale, want.data());
      for (int64_t i = 0; i < 5 * dim; ++i) ASSERT_TRUE(same_bits(got[i], want[i])) << dtype_name(dt) << " " << i;
      for (int64_t i = 5 * dim; i < 7 * dim; ++i) ASSERT_TRUE(std::isnan(got[i])) << "an invalid id's row";
    }
  }
}

TEST_F(CudaDevice, RowOpsMatchTheScalarTwins) {
  const int64_t n = 7, dim = 384, ld = 400;
  const auto x = nonzero_gaussians(static_cast<size_t>(n * ld), 21, 3.f);
  const auto wv = nonzero_gaussians(static_cast<size_t>(dim), 22);
  auto dx = up(x), dwv = up(wv);
  auto check = [&](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    std::vector<double> w(want.begin(), want.end());
    EXPECT_LT(rel_err(got, w), 1e-5) << what;  // f32 arithmetic against the f64 twins
  };
  {  // RMSNorm with and without a weight, out of place (ld_out != ld_x)
    for (bool with_w : {true, false}) {
      auto out = poisoned(static_cast<size_t>(n * dim * 4));
      ASSERT_TRUE(rms_norm(*ctx_, dx.as<float>(), ld, with_w ? dwv.as<float>() : nullptr, out.as<float>(), dim, n,
                           dim, 1e-6f).is_ok());
      std::vector<float> want(static_cast<size_t>(n * dim));
      for (int64_t t = 0; t < n; ++t)
        ref::rms_norm_row(x.data() + t * ld, with_w ? wv.data() : nullptr, want.data() + t * dim, dim, 1e-6f);
      check(down<float>(out, want.size()), want, "rms_norm");
    }
  }
  {  // RoPE: tables, then normal and NeoX rotations of the first n_rot dims
    const int heads = 3, hd = 128, n_rot = 96;
    const std::vector<int32_t> pos = {0, 1, 17, 255, 4096, 77, 100000};
    std::vector<float> inv(n_rot / 2);
    for (int i = 0; i < n_rot / 2; ++i) inv[i] = std::pow(10000.f, -2.f * i / n_rot);
    auto dpos = up(pos), dinv = up(inv);
    auto ct = poisoned(pos.size() * n_rot / 2 * 4), st = poisoned(pos.size() * n_rot / 2 * 4);
    ASSERT_TRUE(rope_angles(*ctx_, dpos.as<int32_t>(), n, dinv.as<float>(), n_rot, ct.as<float>(), st.as<float>()).is_ok());
    std::vector<float> wc(pos.size() * n_rot / 2), ws(wc.size());
    for (int64_t t = 0; t < n; ++t)
      ref::rope_angles(static_cast<float>(pos[t]), inv.data(), n_rot, wc.data() + t * n_rot / 2, ws.data() + t * n_rot / 2);
    const auto gc = down<float>(ct, wc.size()), gs = down<float>(st, ws.size());
    check(gc, wc, "rope cos");
    check(gs, ws, "rope sin");
    for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
      const auto q = nonzero_gaussians(static_cast<size_t>(n * heads * hd), 31);
      auto dq = up(q);
      ASSERT_TRUE(rope(*ctx_, dq.as<float>(), heads * hd, n, heads, hd, n_rot, style, ct.as<float>(), st.as<float>()).is_ok());
      std::vector<float> want = q;
      for (int64_t t = 0; t < n; ++t)
        for (int h = 0; h < heads; ++h)
          ref::rope_head(want.data() + (t * heads + h) * hd, n_rot, style, gc.data() + t * n_rot / 2, gs.data() + t * n_rot / 2);
      check(down<float>(dq, want.size()), want, "rope");
    }
  }
  {  // bias, residual, gated activations, softcap
    auto y = up(x);
    ASSERT_TRUE(add_bias(*ctx_, y.as<float>(), ld, n, dim, dwv.as<float>()).is_ok());
    std::vector<float> want = x;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < dim; ++i) want[t * ld + i] += wv[i];
    check(down<float>(y, want.size()), want, "add_bias");
    ASSERT_TRUE(add(*ctx_, y.as<float>(), dx.as<float>(), n * ld).is_ok());
    for (size_t i = 0; i < want.size(); ++i) want[i] += x[i];
    check(down<float>(y, want.size()), want, "add");
    const auto up_v = nonzero_gaussians(static_cast<size_t>(n * ld), 41);
    auto dup = up(up_v);
    for (GatedActivation a : {GatedActivation::kSwiGlu, GatedActivation::kGeGluTanh}) {
      auto g = up(x);
      ASSERT_TRUE(gated_activation(*ctx_, a, g.as<float>(), ld, dup.as<float>(), ld, n, dim).is_ok());
      std::vector<float> wg = x;
      for (int64_t t = 0; t < n; ++t) {
        if (a == GatedActivation::kSwiGlu) ref::swiglu_row(wg.data() + t * ld, up_v.data() + t * ld, dim);
        else ref::geglu_tanh_row(wg.data() + t * ld, up_v.data() + t * ld, dim);
      }
      check(down<float>(g, wg.size()), wg, "gated");
    }
    auto sc = up(x);
    ASSERT_TRUE(softcap(*ctx_, sc.as<float>(), n * ld, 5.f).is_ok());
    std::vector<float> ws = x;
    ref::softcap_row(ws.data(), n * ld, 5.f);
    check(down<float>(sc, ws.size()), ws, "softcap");
    EXPECT_FALSE(softcap(*ctx_, sc.as<float>(), 4, 0.f).is_ok());
  }
}

// A paged K/V pool on the host and its copy on the device; sequences' pages
// drawn at random.
struct Pool {
  int block_size = 16, n_pages = 0, n_kv = 0, hd = 0;
  KvType type = KvType::kF32;
  int64_t row_bytes = 0;
  std::vector<uint8_t> k, v;
  std::vector<std::vector<int32_t>> tables;
  int64_t table_stride = 0;
};

Pool make_pool(KvType type, int n_kv, int hd, const std::vector<int64_t>& lengths, uint32_t seed) {
  Pool p;
  p.type = type, p.n_kv = n_kv, p.hd = hd;
  p.row_bytes = static_cast<int64_t>(kv_row_bytes(type, static_cast<int64_t>(n_kv) * hd));
  for (int64_t len : lengths) p.table_stride = std::max<int64_t>(p.table_stride, (len + p.block_size - 1) / p.block_size);
  p.n_pages = static_cast<int>(p.table_stride * lengths.size()) + 3;
  std::vector<int32_t> free_pages(p.n_pages);
  for (int i = 0; i < p.n_pages; ++i) free_pages[i] = i;
  std::mt19937 rng(seed);
  std::shuffle(free_pages.begin(), free_pages.end(), rng);
  size_t next = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    p.tables.emplace_back(p.table_stride, -1);
    for (int64_t b = 0; b < (lengths[s] + p.block_size - 1) / p.block_size; ++b) p.tables[s][b] = free_pages[next++];
  }
  const size_t bytes = static_cast<size_t>(p.n_pages) * p.block_size * p.row_bytes;
  p.k.resize(bytes), p.v.resize(bytes);
  const auto rows = nonzero_gaussians(static_cast<size_t>(p.n_pages) * p.block_size * n_kv * hd * 2, seed + 1);
  for (int64_t r = 0; r < static_cast<int64_t>(p.n_pages) * p.block_size; ++r) {
    kv_store_row(type, rows.data() + 2 * r * n_kv * hd, static_cast<int64_t>(n_kv) * hd, p.k.data() + r * p.row_bytes);
    kv_store_row(type, rows.data() + (2 * r + 1) * n_kv * hd, static_cast<int64_t>(n_kv) * hd,
                 p.v.data() + r * p.row_bytes);
  }
  return p;
}

TEST_F(CudaDevice, PagedAttentionMatchesTheReferenceInBothModesAndAloneOrBatched) {
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kBF16})
    for (int hd : {64, 128})
      for (int variant = 0; variant < 3; ++variant) {
        AttentionShape s;
        s.n_head = 8, s.n_head_kv = 2, s.head_dim = hd, s.head_dim_v = hd;
        s.scale = 1.f / std::sqrt(static_cast<float>(hd));
        if (variant == 1) s.sliding_window = 100;
        if (variant == 2) s.softcap = 20.f, s.n_head_kv = 8;
        // Sequence 0: a prefill of 40 tokens from position 0; 1: one decode token at 700;
        // 2: five tokens at 300..304 (a chunked prefill or a verification).
        const std::vector<int64_t> lengths = {40, 701, 305};
        Pool pool = make_pool(type, s.n_head_kv, hd, lengths, 7 + variant);
        std::vector<int32_t> seq, pos;
        for (int i = 0; i < 40; ++i) seq.push_back(0), pos.push_back(i);
        seq.push_back(1), pos.push_back(700);
        for (int i = 300; i < 305; ++i) seq.push_back(2), pos.push_back(i);
        const int64_t n = static_cast<int64_t>(seq.size());
        const auto q = nonzero_gaussians(static_cast<size_t>(n * s.n_head * hd), 3);
        // Reference: KvViews over the host pool.
        std::vector<std::vector<const uint8_t*>> kb(3), vb(3);
        std::vector<KvView> views(3);
        for (int sq = 0; sq < 3; ++sq) {
          for (int32_t pg : pool.tables[sq]) {
            kb[sq].push_back(pg < 0 ? nullptr : pool.k.data() + static_cast<int64_t>(pg) * pool.block_size * pool.row_bytes);
            vb[sq].push_back(pg < 0 ? nullptr : pool.v.data() + static_cast<int64_t>(pg) * pool.block_size * pool.row_bytes);
          }
          views[sq].k_blocks = kb[sq].data(), views[sq].v_blocks = vb[sq].data();
          views[sq].block_size = pool.block_size, views[sq].k_row_bytes = pool.row_bytes;
          views[sq].v_row_bytes = pool.row_bytes, views[sq].k_type = type, views[sq].v_type = type;
        }
        std::vector<float> want(static_cast<size_t>(n * s.n_head * hd));
        ref::attention(s, q.data(), pos.data(), n, views.data(), seq.data(), want.data());
        // Device.
        auto dk = up(pool.k), dv = up(pool.v), dq = up(q), dpos = up(pos), dseq = up(seq);
        std::vector<int32_t> flat;
        for (auto& t : pool.tables) flat.insert(flat.end(), t.begin(), t.end());
        auto dtab = up(flat);
        DevicePages pages;
        pages.k = dk.as<uint8_t>(), pages.v = dv.as<uint8_t>(), pages.block_size = pool.block_size;
        pages.k_row_bytes = pages.v_row_bytes = pool.row_bytes, pages.k_type = pages.v_type = type;
        std::vector<std::vector<float>> outs;
        for (AttnMode mode : {AttnMode::kOnePass, AttnMode::kSplit}) {
          auto plan = plan_attention(*ctx_, s, seq.data(), pos.data(), n, mode);
          ASSERT_TRUE(plan.is_ok()) << plan.status().message();
          if (mode == AttnMode::kSplit) {
            EXPECT_GT(plan->n_split, 1);
          }
          auto out = poisoned(want.size() * 4);
          const Status st = attention(*ctx_, s, pages, dq.as<float>(), dpos.as<int32_t>(), dseq.as<int32_t>(),
                                      dtab.as<int32_t>(), pool.table_stride, *plan, out.as<float>());
          ASSERT_TRUE(st.is_ok()) << st.message();
          outs.push_back(down<float>(out, want.size()));
          std::vector<double> w(want.begin(), want.end());
          EXPECT_LT(rel_err(outs.back(), w), 1e-5)
              << kv_type_name(type) << " hd " << hd << " variant " << variant << " mode " << static_cast<int>(mode);
        }
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_TRUE(same_bits(outs[0][i], outs[1][i])) << "one pass and split-K differ at " << i;
        // The decode token alone (token 40 of the batch) gets the same bits.
        {
          const std::vector<int32_t> seq1 = {1}, pos1 = {700};
          auto dpos1 = up(pos1), dseq1 = up(seq1);
          std::vector<float> q1(q.begin() + 40 * s.n_head * hd, q.begin() + 41 * s.n_head * hd);
          auto dq1 = up(q1);
          auto plan = plan_attention(*ctx_, s, seq1.data(), pos1.data(), 1);
          ASSERT_TRUE(plan.is_ok());
          auto out = poisoned(q1.size() * 4);
          ASSERT_TRUE(attention(*ctx_, s, pages, dq1.as<float>(), dpos1.as<int32_t>(), dseq1.as<int32_t>(),
                                dtab.as<int32_t>(), pool.table_stride, *plan, out.as<float>()).is_ok());
          const auto alone = down<float>(out, q1.size());
          for (size_t i = 0; i < alone.size(); ++i)
            ASSERT_TRUE(same_bits(alone[i], outs[0][40 * s.n_head * hd + i])) << "alone vs batched at " << i;
        }
      }
}

TEST_F(CudaDevice, BadArgumentsAreStatusesNotCrashes) {
  AttentionShape s;
  s.n_head = 4, s.n_head_kv = 1, s.head_dim = 80, s.head_dim_v = 80;
  const std::vector<int32_t> seq = {0}, pos = {0};
  EXPECT_FALSE(plan_attention(*ctx_, s, seq.data(), pos.data(), 1).is_ok());  // head dim 80
  s.head_dim = s.head_dim_v = 64;
  auto plan = plan_attention(*ctx_, s, seq.data(), pos.data(), 1);
  ASSERT_TRUE(plan.is_ok());
  DevicePages pages;
  pages.k_type = KvType::kQ8;
  const Status st = attention(*ctx_, s, pages, nullptr, nullptr, nullptr, nullptr, 1, *plan, nullptr);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("not supported"), std::string::npos) << st.message();
  const std::vector<int32_t> broken = {0, 1, 0}, pos3 = {0, 0, 1};
  EXPECT_FALSE(plan_attention(*ctx_, s, broken.data(), pos3.data(), 3).is_ok());
  // A misaligned activation pointer.
  const auto wbytes = make_weights(DType::kQ8_0, 4, 256, 1);
  TensorView w;
  w.type = DType::kQ8_0, w.n_dims = 2, w.ne[0] = 256, w.ne[1] = 4, w.data = wbytes.data(), w.nbytes = wbytes.size();
  auto dw = upload_weight(*ctx_, w);
  ASSERT_TRUE(dw.is_ok());
  auto act = poisoned(4096);
  auto y = poisoned(64);
  EXPECT_FALSE(matvec(*ctx_, *dw, act.as<uint8_t>() + 4, 1, y.as<float>(), 4).is_ok());
  w.type = DType::kQ4_1;
  EXPECT_FALSE(upload_weight(*ctx_, w).is_ok());
  auto huge = DeviceBuffer::alloc(size_t{1} << 50);
  EXPECT_FALSE(huge.is_ok());  // an allocation failure is a Status
}

}  // namespace
}  // namespace ember::cuda
