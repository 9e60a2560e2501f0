// Host twins of the CUDA kernels; see twins.h. Compiled without FMA
// contraction (CMakeLists.txt), as the shared functions require.
#include "kernels/cuda/twins.h"

#include <cmath>
#include <cstring>

namespace ember::cuda {
namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// The act row's values of unit ue (32 elements from element ue), its two
// 16-sums and its scale.
void act_unit(ActKind k, const uint8_t* row, int64_t n, int64_t ue, int* a, int* bs0, int* bs1, float* dx) {
  std::memcpy(a, row + ue, 32);
  const uint8_t* bs = row + act_bsums_offset(k, n) + 2 * (ue / 16);
  *bs0 = load<int16_t>(bs);
  *bs1 = load<int16_t>(bs + 2);
  *dx = load<float>(row + act_d_offset(k, n) + 4 * (ue / act_block(k)));
}

template <WType T>
float rows_typed(const uint8_t* w_row, int64_t n, const void* act) {
  float acc[32] = {};
  const int64_t n_chunks = (n + kRowsChunk - 1) / kRowsChunk;
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int elems = static_cast<int>(n - c * kRowsChunk < kRowsChunk ? n - c * kRowsChunk : kRowsChunk);
    const uint8_t* data = w_row + c * wtype_chunk_bytes(T);
    if constexpr (wtype_is_float(T)) {
      for (int lane = 0; lane < 32; ++lane)
        acc[lane] = float_unit_dot<T>(data, static_cast<const float*>(act), lane, elems, c * kRowsChunk, acc[lane]);
    } else {
      const auto* row = static_cast<const uint8_t*>(act);
      int sumi[32] = {}, summ[32] = {};
      float dx[32] = {};
      Unit u[32];
      const int lanes = chunk_lanes(T, elems);
      for (int lane = 0; lane < lanes; ++lane) {
        unpack_unit<T>(data, lane, &u[lane]);
        int a[8], bs0, bs1;
        act_unit(wtype_act(T), row, n, c * kRowsChunk + 32 * lane, a, &bs0, &bs1, &dx[lane]);
        sumi[lane] = unit_sums<T>(u[lane], a, bs0, bs1, &summ[lane]);
      }
      if constexpr (wtype_is_kquant(T)) {
        for (int g = 0; g < lanes; g += 8) {  // a super-block's 8 lanes: exact integer sums, the term in lane g
          int si = 0, sm = 0;
          for (int j = 0; j < 8; ++j) si += sumi[g + j], sm += summ[g + j];
          acc[g] = add_rn(acc[g], block_term<T>(u[g], dx[g], si, sm));
        }
      } else {
        for (int lane = 0; lane < lanes; ++lane)
          acc[lane] = add_rn(acc[lane], block_term<T>(u[lane], dx[lane], sumi[lane], summ[lane]));
      }
    }
  }
  for (int off = 16; off > 0; off >>= 1) {  // the butterfly: every lane ends with the same sum
    float next[32];
    for (int lane = 0; lane < 32; ++lane) next[lane] = add_rn(acc[lane], acc[lane ^ off]);
    std::memcpy(acc, next, sizeof(acc));
  }
  return acc[0];
}

template <WType T>
void terms_typed(const uint8_t* w_row, int64_t n, const uint8_t* act, float* terms) {
  const int64_t units = n / 32;
  if constexpr (wtype_is_kquant(T)) {
    for (int64_t sb = 0; sb < units / 8; ++sb) {
      int si = 0, sm = 0;
      Unit u0;
      float dx = 0.f;
      for (int j = 0; j < 8; ++j) {
        Unit u;
        unpack_row_unit<T>(w_row, sb * 8 + j, &u);
        int a[8], bs0, bs1, m;
        act_unit(wtype_act(T), act, n, (sb * 8 + j) * 32, a, &bs0, &bs1, &dx);
        si += unit_sums<T>(u, a, bs0, bs1, &m);
        sm += m;
        if (j == 0) u0 = u;
      }
      terms[sb] = block_term<T>(u0, dx, si, sm);
    }
  } else if constexpr (!wtype_is_float(T)) {
    for (int64_t b = 0; b < units; ++b) {
      Unit u;
      unpack_row_unit<T>(w_row, b, &u);
      int a[8], bs0, bs1, m;
      float dx;
      act_unit(wtype_act(T), act, n, b * 32, a, &bs0, &bs1, &dx);
      terms[b] = block_term<T>(u, dx, unit_sums<T>(u, a, bs0, bs1, &m), m);
    }
  }
}

}  // namespace

void act_quantize_host(ActKind k, const float* x, int64_t n, uint8_t* row) {
  std::memset(row, 0, static_cast<size_t>(act_row_bytes(k, n)));
  const int bl = act_block(k);
  uint8_t* d = row + act_d_offset(k, n);
  uint8_t* bs = row + act_bsums_offset(k, n);
  for (int64_t b = 0; b < n / bl; ++b) {
    const float* xb = x + b * bl;
    auto* q = reinterpret_cast<int8_t*>(row + b * bl);
    if (k == ActKind::kQ8_0) {
      float amax = 0.f;
      for (int j = 0; j < bl; ++j) amax = std::fmax(amax, abs_f(xb[j]));
      const float dd = q8_0_scale(amax), id = q8_0_inverse(dd);
      for (int j = 0; j < bl; ++j) q[j] = q8_0_value(xb[j], id);
      store<float>(d + 4 * b, q8_0_stored_scale(dd));
    } else {
      float best = -1.f, vmax = 0.f;
      for (int j = 0; j < bl; ++j)
        if (abs_f(xb[j]) > best) best = abs_f(xb[j]), vmax = xb[j];
      float dd = 0.f;
      if (best > 0.f) {
        const float iscale = q8_K_iscale(vmax);
        for (int j = 0; j < bl; ++j) q[j] = q8_K_value(xb[j], iscale);
        dd = q8_K_stored_scale(iscale);
      }  // else: zeros (memset)
      store<float>(d + 4 * b, dd);
    }
    for (int g = 0; g < bl / 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += q[16 * g + j];
      store<int16_t>(bs + 2 * (b * (bl / 16) + g), static_cast<int16_t>(s));
    }
  }
}

void act_to_q8_0(const uint8_t* row, int64_t n, BlockQ8_0* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    out[b].d = float_to_half(load<float>(row + act_d_offset(ActKind::kQ8_0, n) + 4 * b));
    std::memcpy(out[b].qs, row + 32 * b, 32);
  }
}

void act_to_q8_K(const uint8_t* row, int64_t n, BlockQ8_K* out) {
  for (int64_t b = 0; b < n / 256; ++b) {
    out[b].d = load<float>(row + act_d_offset(ActKind::kQ8_K, n) + 4 * b);
    std::memcpy(out[b].qs, row + 256 * b, 256);
    std::memcpy(out[b].bsums, row + act_bsums_offset(ActKind::kQ8_K, n) + 32 * b, 32);
  }
}

float rows_host(WType t, const uint8_t* w_row, int64_t n, const void* act) {
  switch (t) {
    case WType::kQ4_0: return rows_typed<WType::kQ4_0>(w_row, n, act);
    case WType::kQ5_0: return rows_typed<WType::kQ5_0>(w_row, n, act);
    case WType::kQ8_0: return rows_typed<WType::kQ8_0>(w_row, n, act);
    case WType::kQ4_K: return rows_typed<WType::kQ4_K>(w_row, n, act);
    case WType::kQ6_K: return rows_typed<WType::kQ6_K>(w_row, n, act);
    case WType::kF16: return rows_typed<WType::kF16>(w_row, n, act);
    case WType::kBF16: return rows_typed<WType::kBF16>(w_row, n, act);
  }
  return NAN;
}

void rows_block_terms_host(WType t, const uint8_t* w_row, int64_t n, const uint8_t* act, float* terms) {
  switch (t) {
    case WType::kQ4_0: return terms_typed<WType::kQ4_0>(w_row, n, act, terms);
    case WType::kQ5_0: return terms_typed<WType::kQ5_0>(w_row, n, act, terms);
    case WType::kQ8_0: return terms_typed<WType::kQ8_0>(w_row, n, act, terms);
    case WType::kQ4_K: return terms_typed<WType::kQ4_K>(w_row, n, act, terms);
    case WType::kQ6_K: return terms_typed<WType::kQ6_K>(w_row, n, act, terms);
    default: return;
  }
}

void kv_store_host(const launch::KvStoreArgs& a) {
  for (int64_t t = 0; t < a.n_tokens; ++t)
    for (int which = 0; which < (a.v ? 2 : 1); ++which) {
      const bool is_v = which == 1;
      const float* src = is_v ? a.v + t * a.ldv : a.k + t * a.ldk;
      const int64_t width = is_v ? a.v_width : a.k_width;
      const int64_t rb = is_v ? a.v_row_bytes : a.k_row_bytes;
      const int32_t* table = a.tables + static_cast<int64_t>(a.seq_of_token[t]) * a.table_stride;
      uint8_t* row = (is_v ? a.v_pages : a.k_pages) + kv_row_offset(table, a.pos[t], a.block_size, rb, 0, 0);
      for (int64_t i = 0; i < width; ++i) kv_store_elem(is_v ? a.v_type : a.k_type, src[i], row, i);
    }
}

}  // namespace ember::cuda
