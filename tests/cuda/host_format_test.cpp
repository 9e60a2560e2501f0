// Host-side tests of kernels/cuda/ that need no GPU (they run in CI): the
// int8 activation format and its host twin against quant/'s reference
// quantizers (bit for bit), the device mat-vec arithmetic (the very
// functions rows.cu runs, driven on the CPU) against kernels/ref/dot.h
// block by block (bit for bit) and row by row, dequantization against
// quant/'s dequantizers (bit for bit), launch geometry (slots, covers,
// alignment), attention work items and block-table addressing, and the
// Status errors of a machine without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kv_types.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/geometry.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/twins.h"
#include "kernels/ref/dot.h"
#include "kernels/test_weights.h"
#include "quant/quantize.h"

namespace ember::cuda {
namespace {

constexpr WType kQuantTypes[] = {WType::kQ4_0, WType::kQ5_0, WType::kQ8_0, WType::kQ4_K, WType::kQ6_K};
constexpr WType kAllTypes[] = {WType::kQ4_0, WType::kQ5_0, WType::kQ8_0, WType::kQ4_K,
                               WType::kQ6_K, WType::kF16,  WType::kBF16};

DType dtype_of(WType t) {
  switch (t) {
    case WType::kQ4_0: return DType::kQ4_0;
    case WType::kQ5_0: return DType::kQ5_0;
    case WType::kQ8_0: return DType::kQ8_0;
    case WType::kQ4_K: return DType::kQ4_K;
    case WType::kQ6_K: return DType::kQ6_K;
    case WType::kF16: return DType::kF16;
    case WType::kBF16: return DType::kBF16;
  }
  return DType::kF32;
}

using DotFn = void (*)(int64_t, float*, const void*, const void*);
DotFn ref_dot(WType t) {
  switch (t) {
    case WType::kQ4_0: return ref::q4_0_dot;
    case WType::kQ5_0: return ref::q5_0_dot;
    case WType::kQ8_0: return ref::q8_0_dot;
    case WType::kQ4_K: return ref::q4_K_dot;
    case WType::kQ6_K: return ref::q6_K_dot;
    case WType::kF16: return ref::f16_dot;
    case WType::kBF16: return ref::bf16_dot;
  }
  return nullptr;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// Activations with every kind of block: gaussians of varying scale, an
// all-zero block, ties of magnitude with opposite signs, a negative max.
std::vector<float> make_act(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = g(rng) * std::ldexp(1.f, static_cast<int>((i / 32) % 9) - 4);
  if (n >= 512) {
    for (int i = 256; i < 288; ++i) x[i] = 0.f;  // a zero Q8_0 block
    x[300] = 7.f, x[301] = -7.f;                 // a magnitude tie, positive first
    x[40] = -9.f;                                // a negative max
  }
  return x;
}

TEST(CudaActFormat, LayoutFitsAndAligns) {
  for (ActKind k : {ActKind::kQ8_0, ActKind::kQ8_K})
    for (int64_t n : {256, 640, 1024, 2048, 4096, 14336}) {
      if (n % act_block(k)) continue;
      EXPECT_EQ(act_row_bytes(k, n) % 128, 0);
      EXPECT_GE(act_row_bytes(k, n), act_bsums_offset(k, n) + 2 * (n / 16));
      EXPECT_EQ(act_d_offset(k, n) % 16, 0);        // qs end, d start: aligned
      EXPECT_EQ(act_bsums_offset(k, n) % 4, 0);      // int16 sums
    }
}

TEST(CudaActFormat, HostTwinMatchesReferenceQuantizersBitForBit) {
  for (int64_t n : {256, 1024, 4096}) {
    const std::vector<float> x = make_act(n, static_cast<uint32_t>(n));
    std::vector<uint8_t> row(static_cast<size_t>(act_row_bytes(ActKind::kQ8_0, n)));
    act_quantize_host(ActKind::kQ8_0, x.data(), n, row.data());
    std::vector<BlockQ8_0> mine(n / 32), ref(n / 32);
    act_to_q8_0(row.data(), n, mine.data());
    quantize_row_q8_0_ref(x.data(), ref.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      ASSERT_EQ(mine[b].d, ref[b].d) << "block " << b;
      ASSERT_EQ(0, std::memcmp(mine[b].qs, ref[b].qs, 32)) << "block " << b;
      for (int g = 0; g < 2; ++g) {
        int s = 0;
        for (int j = 0; j < 16; ++j) s += ref[b].qs[16 * g + j];
        int16_t got;
        std::memcpy(&got, row.data() + act_bsums_offset(ActKind::kQ8_0, n) + 2 * (2 * b + g), 2);
        ASSERT_EQ(got, s);
      }
    }
    row.assign(static_cast<size_t>(act_row_bytes(ActKind::kQ8_K, n)), 0xAB);
    act_quantize_host(ActKind::kQ8_K, x.data(), n, row.data());
    std::vector<BlockQ8_K> mk(n / 256), rk(n / 256);
    act_to_q8_K(row.data(), n, mk.data());
    quantize_row_q8_K_ref(x.data(), rk.data(), n);
    for (int64_t b = 0; b < n / 256; ++b) {
      ASSERT_TRUE(same_bits(mk[b].d, rk[b].d)) << "block " << b;
      ASSERT_EQ(0, std::memcmp(mk[b].qs, rk[b].qs, 256)) << "block " << b;
      ASSERT_EQ(0, std::memcmp(mk[b].bsums, rk[b].bsums, 32)) << "block " << b;
    }
  }
}

// The act row (quantized types) or the f32 row (float types) a weight type takes.
std::vector<uint8_t> act_for(WType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  if (wtype_is_float(t)) {
    std::vector<uint8_t> r(x.size() * 4);
    std::memcpy(r.data(), x.data(), r.size());
    return r;
  }
  std::vector<uint8_t> r(static_cast<size_t>(act_row_bytes(wtype_act(t), n)));
  act_quantize_host(wtype_act(t), x.data(), n, r.data());
  return r;
}
// The CPU's activation blocks for the reference dot (Q8_0 / Q8_K, or f32).
std::vector<uint8_t> ref_act_for(WType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  if (wtype_is_float(t)) return act_for(t, x);
  const DType at = wtype_act(t) == ActKind::kQ8_0 ? DType::kQ8_0 : DType::kQ8_K;
  std::vector<uint8_t> r(dtype_row_size(at, n));
  quantize_row_ref(at, x.data(), r.data(), n);
  return r;
}

TEST(CudaRowsMath, BlockTermsEqualTheReferenceDotsBitForBit) {
  for (WType t : kQuantTypes) {
    const int64_t n = 2048;
    const DType dt = dtype_of(t);
    const auto w = make_weights(dt, 4, n, 7);
    const auto x = make_act(n, 11);
    const auto act = act_for(t, x);
    const auto ref_act = ref_act_for(t, x);
    const int bl = wtype_block(t);
    const size_t ab = dtype_row_size(wtype_act(t) == ActKind::kQ8_0 ? DType::kQ8_0 : DType::kQ8_K, bl);
    std::vector<float> terms(static_cast<size_t>(n / bl));
    for (int r = 0; r < 4; ++r) {
      const uint8_t* row = w.data() + r * dtype_row_size(dt, n);
      rows_block_terms_host(t, row, n, act.data(), terms.data());
      for (int64_t b = 0; b < n / bl; ++b) {
        float s = 0.f;
        ref_dot(t)(bl, &s, row + b * wtype_block_bytes(t), ref_act.data() + b * ab);
        // The reference's sum of one block is 0 + its term (so -0 reads +0).
        ASSERT_TRUE(same_bits(s, 0.f + terms[b])) << dtype_name(dt) << " row " << r << " block " << b << ": " << s
                                            << " vs " << terms[b];
      }
    }
  }
}

TEST(CudaRowsMath, RowsTwinAgreesWithReferenceDots) {
  for (WType t : kAllTypes)
    for (int64_t n : {256, 1024, 2304, 4096}) {
      if (n % (wtype_is_kquant(t) ? 256 : 32)) continue;
      const DType dt = dtype_of(t);
      const auto w = make_weights(dt, 6, n, static_cast<uint32_t>(n));
      const auto x = make_act(n, 3);
      const auto act = act_for(t, x), ref_act = ref_act_for(t, x);
      std::vector<float> deq(static_cast<size_t>(n));
      for (int r = 0; r < 6; ++r) {
        const uint8_t* row = w.data() + r * dtype_row_size(dt, n);
        float s = 0.f;
        ref_dot(t)(n, &s, row, ref_act.data());
        const float mine = rows_host(t, row, n, act.data());
        // Same terms, another summation order: within float rounding of the sum of |terms|.
        dequantize_row_ref(dt, row, deq.data(), n);
        double mag = 0.0;
        for (int64_t i = 0; i < n; ++i) mag += std::fabs(deq[i] * x[i]);
        EXPECT_LE(std::fabs(mine - s), 1e-5 * mag + 1e-30) << dtype_name(dt) << " n " << n << " row " << r;
      }
    }
}

TEST(CudaRowsMath, DequantizedUnitsEqualTheReferenceDequantizers) {
  for (WType t : kQuantTypes) {
    const int64_t n = 1024;
    const DType dt = dtype_of(t);
    const auto w = make_weights(dt, 4, n, 5);
    std::vector<float> ref(static_cast<size_t>(n));
    for (int r = 0; r < 4; ++r) {
      const uint8_t* row = w.data() + r * dtype_row_size(dt, n);
      dequantize_row_ref(dt, row, ref.data(), n);
      for (int64_t u = 0; u < n / 32; ++u) {
        Unit un;
        float v[32];
        switch (t) {
          case WType::kQ4_0: unpack_row_unit<WType::kQ4_0>(row, u, &un); for (int e = 0; e < 32; ++e) v[e] = unit_value<WType::kQ4_0>(un, e); break;
          case WType::kQ5_0: unpack_row_unit<WType::kQ5_0>(row, u, &un); for (int e = 0; e < 32; ++e) v[e] = unit_value<WType::kQ5_0>(un, e); break;
          case WType::kQ8_0: unpack_row_unit<WType::kQ8_0>(row, u, &un); for (int e = 0; e < 32; ++e) v[e] = unit_value<WType::kQ8_0>(un, e); break;
          case WType::kQ4_K: unpack_row_unit<WType::kQ4_K>(row, u, &un); for (int e = 0; e < 32; ++e) v[e] = unit_value<WType::kQ4_K>(un, e); break;
          case WType::kQ6_K: unpack_row_unit<WType::kQ6_K>(row, u, &un); for (int e = 0; e < 32; ++e) v[e] = unit_value<WType::kQ6_K>(un, e); break;
          default: break;
        }
        for (int e = 0; e < 32; ++e)
          ASSERT_TRUE(same_bits(v[e], ref[u * 32 + e])) << dtype_name(dt) << " unit " << u << " element " << e;
      }
    }
  }
}

TEST(CudaGeometry, RowsSlotsHoldEveryChunkCoverAndBlocksKeepTheirAlignment) {
  for (WType t : kAllTypes)
    for (int64_t n : {256, 640, 1024, 2304, 4096, 14336}) {
      if (n % (wtype_is_kquant(t) ? 256 : 32)) continue;
      const int64_t rb = wtype_row_bytes(t, n);
      EXPECT_EQ(rb, static_cast<int64_t>(dtype_row_size(dtype_of(t), n)));
      const int64_t chunks = (n + kRowsChunk - 1) / kRowsChunk;
      for (int64_t r = 0; r < 37; ++r)
        for (int64_t c = 0; c < chunks; ++c) {
          const int64_t b0 = r * rb + c * wtype_chunk_bytes(t);
          const int64_t b1 = r * rb + (c + 1 < chunks ? (c + 1) * wtype_chunk_bytes(t) : rb);
          ASSERT_LE(cover_end(b1) - cover_begin(b0), rows_slot_bytes(t));
          ASSERT_EQ(cover_begin(b0) % 16, 0);
          // In the slot the chunk keeps its offset mod 16: f16 / bf16 and Q4_K need 16 / 4.
          if (wtype_is_float(t)) {
            ASSERT_EQ(b0 % 16, 0);
          }
          if (t == WType::kQ4_K) {
            ASSERT_EQ(b0 % 4, 0);
          }
          ASSERT_EQ(b0 % 2, 0);
        }
      EXPECT_LE(rows_smem_bytes(t), 48 * 1024);  // static shared memory
    }
  EXPECT_EQ(rows_grid(4096), 1024);
  EXPECT_EQ(rows_grid(4097), 1025);
  EXPECT_EQ(chunk_lanes(WType::kQ4_0, 640 - 0 * kRowsChunk), 20);
  EXPECT_EQ(chunk_lanes(WType::kQ4_K, 512), 16);
}

TEST(CudaGeometry, AttentionItemsCoverEveryRowOnce) {
  for (int group : {1, 2, 4, 7, 8, 16, 24, 40}) {
    const std::vector<int32_t> seq = {3, 3, 3, 3, 3, 0, 9, 9, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    std::vector<AttnItem> items;
    ASSERT_TRUE(attention_items(seq.data(), static_cast<int64_t>(seq.size()), group,
                                attention_tokens_per_item(group), &items));
    std::set<std::pair<int64_t, int>> rows;  // (token, head in group)
    for (const AttnItem& it : items) {
      ASSERT_GE(it.n_rows, 1);
      ASSERT_LE(it.n_rows, kAttnMaxWarps);
      for (int r = 0; r < it.n_rows; ++r) {
        const int64_t tok = it.t0 + (it.row0 + r) / group;
        ASSERT_LT(tok, static_cast<int64_t>(seq.size()));
        ASSERT_EQ(seq[tok], seq[it.t0]) << "an item crosses sequences";
        ASSERT_TRUE(rows.insert({tok, (it.row0 + r) % group}).second) << "a row twice";
      }
    }
    EXPECT_EQ(rows.size(), seq.size() * group);
  }
  const std::vector<int32_t> broken = {1, 1, 2, 1};
  std::vector<AttnItem> items;
  EXPECT_FALSE(attention_items(broken.data(), 4, 4, 4, &items));
}

TEST(CudaGeometry, VisibleRangeAndPageAddressingMatchTheCpu) {
  for (int window : {0, 1, 5, 300})
    for (int64_t p : {0, 1, 4, 5, 299, 300, 1000}) {
      AttentionShape s;
      s.sliding_window = window;
      int64_t lo, hi, lo2, hi2;
      attention_visible_range(s, p, &lo, &hi);
      visible_range(p, window, &lo2, &hi2);
      EXPECT_EQ(lo, lo2);
      EXPECT_EQ(hi, hi2);
    }
  // kv_row_offset against the CPU's KvView addressing over the same pool.
  const int bs = 16, hd = 64, n_kv = 3;
  const int64_t row_bytes = n_kv * hd * 2;
  std::vector<uint8_t> pool(static_cast<size_t>(10 * bs * row_bytes));
  const std::vector<int32_t> table = {7, 2, 9, 0, 5};
  std::vector<const uint8_t*> blocks;
  for (int32_t b : table) blocks.push_back(pool.data() + static_cast<int64_t>(b) * bs * row_bytes);
  KvView v;
  v.k_blocks = blocks.data();
  v.block_size = bs;
  v.k_row_bytes = row_bytes;
  v.k_type = KvType::kF16;
  for (int64_t p = 0; p < bs * 5; p += 3)
    for (int h = 0; h < n_kv; ++h)
      ASSERT_EQ(kv_key_row(v, p, h, hd) - pool.data(), kv_row_offset(table.data(), p, bs, row_bytes, h, hd * 2));
  EXPECT_EQ(attention_chunks(255), 1);
  EXPECT_EQ(attention_chunks(256), 2);
  EXPECT_EQ(attention_split_floats(3, 8, 64, 600), 3 * 8 * 3 * 66);
}

// The K/V store kernel's twin (the kernel's addressing and per-element
// encoder, driven on the host) against kv_store_row (the CPU's encoder,
// kernels/kv_types.h) at the address the test's own page map gives, for every
// row format the device stores, K and V equal and mixed: two sequences over
// shuffled pages, rows narrower than the page row, special values (signed
// zeros, infinities, NaN, subnormals, halfway cases); every other byte keeps
// its poison.
TEST(CudaKvStore, TwinWritesTheBytesOfKvStoreRowAtTheTablesAddress) {
  const KvType types[] = {KvType::kF32, KvType::kF16, KvType::kBF16};
  const KvElem elems[] = {KvElem::kF32, KvElem::kF16, KvElem::kBF16};
  const int bs = 4, n_pages = 12, stride = 6;
  const int64_t k_width = 96, v_width = 64;
  std::vector<int32_t> tables(2 * stride);
  std::vector<int32_t> ids(n_pages);
  for (int i = 0; i < n_pages; ++i) ids[i] = i;
  std::mt19937 rng(7);
  std::shuffle(ids.begin(), ids.end(), rng);
  for (int i = 0; i < 2 * stride; ++i) tables[i] = ids[i];
  // Sequence 0: positions 0..6 (prefill); sequence 1: position 21 (decode).
  std::vector<int32_t> pos, seq;
  for (int p = 0; p < 7; ++p) pos.push_back(p), seq.push_back(0);
  pos.push_back(21), seq.push_back(1);
  const int64_t n = static_cast<int64_t>(pos.size());
  std::normal_distribution<float> g(0.f, 3.f);
  std::vector<float> k(n * (k_width + 5)), v(n * v_width);
  for (float& x : k) x = g(rng);
  for (float& x : v) x = g(rng);
  const float specials[] = {0.f, -0.f, INFINITY, -INFINITY, NAN, 1e-40f, -3e-45f, 65520.f, 1.00048828125f,
                            std::ldexp(1.f, -25), 3.0e38f};
  for (size_t i = 0; i < std::size(specials); ++i) k[i * 3] = specials[i], v[i * 5] = specials[i];
  for (int ki = 0; ki < 3; ++ki)
    for (int vi = 0; vi < 3; ++vi) {
      SCOPED_TRACE(std::string(kv_type_name(types[ki])) + " / " + kv_type_name(types[vi]));
      const int64_t krb = static_cast<int64_t>(kv_row_bytes(types[ki], k_width)) + 32;  // wider page rows
      const int64_t vrb = static_cast<int64_t>(kv_row_bytes(types[vi], v_width)) + 16;
      std::vector<uint8_t> kp(n_pages * bs * krb, 0xA5), vp(n_pages * bs * vrb, 0x5A);
      std::vector<uint8_t> kw = kp, vw = vp;
      for (int64_t t = 0; t < n; ++t) {
        const int64_t page = tables[seq[t] * stride + pos[t] / bs];
        kv_store_row(types[ki], k.data() + t * (k_width + 5), k_width,
                     kw.data() + (page * bs + pos[t] % bs) * krb);
        kv_store_row(types[vi], v.data() + t * v_width, v_width, vw.data() + (page * bs + pos[t] % bs) * vrb);
      }
      launch::KvStoreArgs a;
      a.k = k.data(), a.ldk = k_width + 5, a.k_width = k_width;
      a.v = v.data(), a.ldv = v_width, a.v_width = v_width;
      a.pos = pos.data(), a.seq_of_token = seq.data(), a.n_tokens = n;
      a.k_pages = kp.data(), a.v_pages = vp.data(), a.block_size = bs;
      a.k_row_bytes = krb, a.v_row_bytes = vrb, a.k_type = elems[ki], a.v_type = elems[vi];
      a.tables = tables.data(), a.table_stride = stride;
      kv_store_host(a);
      EXPECT_EQ(kp, kw);
      EXPECT_EQ(vp, vw);
    }
}

TEST(CudaErrors, UnsupportedTypesAndMissingDevicesAreStatuses) {
  EXPECT_FALSE(wtype_of(DType::kQ4_1).is_ok());
  EXPECT_NE(wtype_of(DType::kQ2_K).status().message().find("not supported"), std::string::npos);
  EXPECT_TRUE(weight_type_supported(DType::kQ6_K));
  EXPECT_FALSE(weight_type_supported(DType::kF32));
  EXPECT_TRUE(device_weight_supported(DType::kF32));
  EXPECT_FALSE(device_weight_supported(DType::kQ4_1));
  EXPECT_EQ(act_stride(DType::kQ4_1, 256), 0);
  std::string why;
  if (device_count(&why) == 0) {
    auto ctx = Context::create();
    ASSERT_FALSE(ctx.is_ok());
    EXPECT_NE(ctx.status().message().find("no device"), std::string::npos) << ctx.status().message();
    auto buf = DeviceBuffer::alloc(1024);
    EXPECT_FALSE(buf.is_ok());
    std::printf("no CUDA device here (%s): the allocation failed with \"%s\"\n", why.c_str(),
                buf.status().message().c_str());
    // Page-locked host memory needs the driver too: a Status, not an abort.
    auto pinned = PinnedBuffer::alloc(4096);
    EXPECT_FALSE(pinned.is_ok());
    // A graph never captured does not launch.
    Graph g;
    EXPECT_FALSE(g.ready());
  }
}

// The engine-creation check of the weights against the device's free
// memory (CudaBackend::upload_weights): they fit with kDeviceReserveBytes to
// spare, else an error saying both sizes.
TEST(CudaErrors, WeightsThatDoNotFitAreAClearError) {
  constexpr size_t kGiB = size_t{1} << 30;
  EXPECT_TRUE(weights_fit(0, kDeviceReserveBytes).is_ok());
  EXPECT_TRUE(weights_fit(4 * kGiB, 4 * kGiB + kDeviceReserveBytes).is_ok());
  const Status st = weights_fit(9 * kGiB, 4 * kGiB + kDeviceReserveBytes - 1);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("need 9.00 GiB of device memory and 4.25 GiB are free"), std::string::npos)
      << st.message();
  EXPECT_FALSE(weights_fit(kGiB, kGiB).is_ok());  // nothing left for the workspace
}

}  // namespace
}  // namespace ember::cuda
