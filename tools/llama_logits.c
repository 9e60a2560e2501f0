// llama_logits: llama.cpp's logits [n_tokens, n_vocab] (f32, row-major) of
// one token sequence, evaluated in one batch with an F32 KV cache, for the
// reference data of tools/gen_moe_gguf_reference.py.
//   llama_logits MODEL OUT.bin TOKEN...
// Built by that script against a llama.cpp build (tools/build_llama_cpp.sh):
//   c++ -x c tools/llama_logits.c -x none -I$LLAMA/src/llama.cpp/include
//      -I$LLAMA/src/llama.cpp/ggml/include -L$LLAMA/build/src
//      -L$LLAMA/build/ggml/src -lllama -lggml -lggml-cpu -lggml-base -fopenmp
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL OUT.bin TOKEN...\n", argv[0]);
    return 2;
  }
  const int n = argc - 3;
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  struct llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = 256;
  cp.n_ubatch = 256;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;  // plain softmax attention in f32
  struct llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  struct llama_batch b = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    b.token[i] = atoi(argv[3 + i]);
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = n;
  if (llama_decode(ctx, b) != 0) {
    fprintf(stderr, "decode failed\n");
    return 1;
  }
  const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
  FILE* f = fopen(argv[2], "wb");
  if (!f) return 1;
  for (int i = 0; i < n; ++i) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)V, f);
  fclose(f);
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
