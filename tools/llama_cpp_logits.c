/* llama.cpp's logits for a token sequence, for tools/gen_hf_arch_fixtures.py.
 *
 *   llama_cpp_logits MODEL.gguf N_CTX N_GREEDY OUT.bin TOKEN...
 *
 * Loads the model with libllama (CPU, F32 KV cache, no flash attention, a
 * context of N_CTX: llama.cpp pads it to a multiple of 256), evaluates the
 * tokens in one batch with the logits of every position, then decodes
 * N_GREEDY tokens one at a time by argmax. Writes OUT.bin: the n_tokens x
 * n_vocab float32 logits rows, then the N_GREEDY greedy ids as int32.
 * Built by the fixture script against the static libraries of
 * tools/build_llama_cpp.sh (compiled as C).
 */
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char* text, void* user) {
  (void)user;
  if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s MODEL.gguf N_CTX N_GREEDY OUT.bin TOKEN...\n", argv[0]);
    return 2;
  }
  const int n_ctx = atoi(argv[2]), n_greedy = atoi(argv[3]), n = argc - 5;
  llama_log_set(quiet, NULL);
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  struct llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)n_ctx;
  cp.n_batch = cp.n_ubatch = (uint32_t)(n > 512 ? n : 512);
  cp.n_threads = cp.n_threads_batch = 2;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  struct llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return fprintf(stderr, "cannot create a context\n"), 1;
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  struct llama_batch b = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    b.token[i] = atoi(argv[5 + i]);
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = n;
  if (llama_decode(ctx, b) != 0) return fprintf(stderr, "decode failed\n"), 1;
  FILE* f = fopen(argv[4], "wb");
  if (!f) return fprintf(stderr, "cannot write %s\n", argv[4]), 1;
  for (int i = 0; i < n; ++i) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)n_vocab, f);
  int tok = argmax(llama_get_logits_ith(ctx, n - 1), n_vocab);
  for (int k = 0; k < n_greedy; ++k) {
    fwrite(&tok, sizeof(int), 1, f);
    if (k + 1 == n_greedy) break;
    b.n_tokens = 1;
    b.token[0] = tok;
    b.pos[0] = n + k;
    b.logits[0] = 1;
    if (llama_decode(ctx, b) != 0) return fprintf(stderr, "decode failed\n"), 1;
    tok = argmax(llama_get_logits_ith(ctx, 0), n_vocab);
  }
  fclose(f);
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
