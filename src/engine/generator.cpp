// Prefill + decode loop; see generator.h.
#include "engine/generator.h"

#include <chrono>

namespace ember {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Generator::Generator(const Model& model, ThreadPool& pool, int64_t n_ctx, int max_batch, KvTypes kv_types)
    : model_(model),
      ctx_(model, pool, max_batch),
      cache_(model.config(), n_ctx, kv_types),
      logits_(model.config().n_vocab) {}

Status Generator::prefill(const std::vector<int32_t>& tokens, int64_t pos0, float* logits) {
  return ctx_.forward(tokens.data(), static_cast<int64_t>(tokens.size()), pos0, cache_, logits);
}

Status Generator::decode_one(int32_t token, int64_t pos, float* logits) {
  return ctx_.forward(&token, 1, pos, cache_, logits);
}

Status Generator::generate(const std::vector<int32_t>& prompt, int n_predict, Sampler& sampler,
                           const std::function<bool(int32_t)>& on_token, GenerationStats* stats) {
  GenerationStats st;
  if (prompt.empty()) return Status::error("empty prompt");
  if (static_cast<int64_t>(prompt.size()) >= cache_.capacity())
    return Status::errorf("prompt of {} tokens does not fit the context of {} tokens", prompt.size(),
                          cache_.capacity());
  st.n_prompt = static_cast<int64_t>(prompt.size());
  double t0 = now_seconds();
  EMBER_RETURN_IF_ERROR(prefill(prompt, 0, logits_.data()));
  st.prefill_seconds = now_seconds() - t0;
  for (int32_t t : prompt) sampler.accept(t);

  int64_t pos = st.n_prompt;
  const int n_vocab = model_.config().n_vocab;
  for (int i = 0; i < n_predict; ++i) {
    const int32_t tok = sampler.sample(logits_.data(), n_vocab);
    sampler.accept(tok);
    ++st.n_generated;
    const bool more = on_token(tok);
    if (!more || i + 1 == n_predict || pos >= cache_.capacity()) break;
    double t1 = now_seconds();
    EMBER_RETURN_IF_ERROR(decode_one(tok, pos, logits_.data()));
    st.decode_seconds += now_seconds() - t1;
    ++st.n_decoded;
    ++pos;
  }
  if (stats) *stats = st;
  return Status::ok();
}

}  // namespace ember
