/* Writes tests/data/quant/imatrix_quant.bin: rows of floats, an importance
 * vector, and what llama.cpp's own library (ggml_quantize_chunk with that
 * importance matrix) makes of them in every type ember's importance-weighted
 * quantizers support. The reference for tests/quant/quantize_imatrix_test.cpp.
 * Built and run by tools/gen_imatrix_quant_fixture.sh against llama.cpp's
 * libggml-base (see tools/build_llama_cpp.sh).
 *
 * Format (little-endian):
 *   char[8] "EMBIMQ01"; u32 n_rows; u32 n_per_row; u32 n_types
 *   f32 src[n_rows * n_per_row]; f32 qw[n_per_row]
 *   n_types times: u32 ggml type id; u32 nbytes; u8 data[nbytes]
 * The rows mix Gaussian values, heavy-tailed outliers and one all-zero
 * block; the importance spans six orders of magnitude. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return ((rng >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform()); }

int main(int argc, char** argv) {
  if (argc != 2) { fprintf(stderr, "usage: %s OUT\n", argv[0]); return 2; }
  enum { kRows = 4, kPerRow = 512 };
  static float src[kRows * kPerRow], qw[kPerRow];
  for (int i = 0; i < kRows * kPerRow; ++i) {
    double v = 0.02 * gauss();
    if (uniform() < 0.01) v *= 12;  /* outliers */
    src[i] = (float)v;
  }
  for (int i = 64; i < 96; ++i) src[2 * kPerRow + i] = 0.0f;  /* an all-zero block */
  for (int i = 0; i < kPerRow; ++i) qw[i] = (float)exp(3.0 * gauss());
  const enum ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K,
                                  GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
  const uint32_t n_types = sizeof(types) / sizeof(types[0]);
  FILE* f = fopen(argv[1], "wb");
  if (!f) { perror(argv[1]); return 1; }
  const uint32_t hdr[3] = {kRows, kPerRow, n_types};
  fwrite("EMBIMQ01", 1, 8, f);
  fwrite(hdr, 4, 3, f);
  fwrite(src, 4, kRows * kPerRow, f);
  fwrite(qw, 4, kPerRow, f);
  ggml_quantize_init(GGML_TYPE_COUNT);
  for (uint32_t k = 0; k < n_types; ++k) {
    const size_t nbytes = ggml_row_size(types[k], kPerRow) * kRows;
    void* dst = calloc(1, nbytes);
    const size_t got = ggml_quantize_chunk(types[k], src, dst, 0, kRows, kPerRow, qw);
    if (got != nbytes) { fprintf(stderr, "size mismatch for %s\n", ggml_type_name(types[k])); return 1; }
    const uint32_t th[2] = {(uint32_t)types[k], (uint32_t)nbytes};
    fwrite(th, 4, 2, f);
    fwrite(dst, 1, nbytes, f);
    free(dst);
  }
  fclose(f);
  printf("wrote %s\n", argv[1]);
  return 0;
}
