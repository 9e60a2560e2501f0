// Engine::create over a chosen backend (EngineConfig::backend, a
// BackendFactory): the target's runner and a draft model's (a view of the
// target with a truncated head, whose context tokens are scored with the
// backend's matmul) run on the backends the factory makes, here a wrapper
// of the CPU backend that counts the ops it forwards: every runner's ops go
// to it (K/V stores included), its scratch is the backend's memory
// (Backend::alloc), and the outputs are bit-identical to the default
// engine's. A factory that fails, and a backend that refuses the
// model's weight type, are clear errors from Engine::create.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/speculative/layerskip.h"
#include "engine/speculative_test_util.h"

namespace ember {
namespace {

// Counts the ops it forwards to a CPU backend; refuses `refused` weights.
class CountingBackend final : public Backend {
 public:
  CountingBackend(ThreadPool& pool, std::map<std::string, int>* ops, DType refused, bool device_like = false)
      : cpu_(make_cpu_backend(pool)), ops_(*ops), refused_(refused), device_like_(device_like) {}
  const char* name() const override { return "counting"; }
  // device_like: says its memory is not the host's (as a device backend
  // does), so the runner's KV pages come from alloc() and move by copy().
  bool host_memory() const override { return !device_like_; }
  void copy(void* dst, const void* src, size_t bytes) override {
    ++ops_["copy"];
    cpu_->copy(dst, src, bytes);
  }
  // As a device backend would: each sync() closes a "device span" of 1 ms
  // and each copy() costs 0.5 ms of copying (device_like only), so the
  // engine's step times can be checked against the counts.
  Status sync() override {
    ++ops_["sync"];
    return cpu_->sync();
  }
  BackendTimes times() const override {
    BackendTimes t;
    if (!device_like_) return t;
    t.device_measured = true;
    t.device_seconds = 1e-3 * count("sync");
    t.copy_seconds = 0.5e-3 * count("copy");
    return t;
  }
  std::unique_ptr<BackendBuffer> alloc_host(size_t bytes) override {
    ++ops_["alloc_host"];
    return cpu_->alloc_host(bytes);
  }
  Status upload_weights(const TensorView* const* w, int64_t n) override {
    ++ops_["upload_weights"];
    for (int64_t i = 0; i < n; ++i) uploaded_.push_back(w[i]);
    return upload_error_.empty() ? Status::ok() : Status::error(upload_error_);
  }
  bool supports(DType t, WeightOp op) const override { return t != refused_ && cpu_->supports(t, op); }
  Result<int> prepare_weights(const WeightToPrepare* w, int64_t n, std::vector<std::shared_ptr<void>>* owners,
                              const WeightRetired& retired) override {
    return cpu_->prepare_weights(w, n, owners, retired);
  }
  std::unique_ptr<BackendBuffer> alloc(size_t bytes) override {
    ++ops_["alloc"];
    return cpu_->alloc(bytes);
  }
  void matmul(const float* x, int64_t ldx, int64_t n, const MatmulTarget* t, int n_t) override {
    ++ops_["matmul"];
    cpu_->matmul(x, ldx, n, t, n_t);
  }
  void embed(const TensorView& table, const int32_t* ids, int64_t n, float scale, float* out) override {
    ++ops_["embed"];
    cpu_->embed(table, ids, n, scale, out);
  }
  void rms_norm(const float* x, int64_t ld_x, const float* w, float* out, int64_t ld_out, int64_t n_rows,
                int64_t dim, float eps) override {
    ++ops_["rms_norm"];
    cpu_->rms_norm(x, ld_x, w, out, ld_out, n_rows, dim, eps);
  }
  void rope_angles(const int32_t* pos, int64_t n, const float* inv_freq, int n_rot, float* c, float* s) override {
    cpu_->rope_angles(pos, n, inv_freq, n_rot, c, s);
  }
  void rope(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, int n_rot, RopeStyle style, const float* c,
            const float* s) override {
    cpu_->rope(x, ld, n, n_heads, head_dim, n_rot, style, c, s);
  }
  void add_bias(float* x, int64_t ld, int64_t n, int64_t dim, const float* b) override {
    cpu_->add_bias(x, ld, n, dim, b);
  }
  void hadamard(float* x, int64_t ld, int64_t n, int n_heads, int head_dim, bool transpose) override {
    cpu_->hadamard(x, ld, n, n_heads, head_dim, transpose);
  }
  void add(float* y, const float* x, int64_t n) override { cpu_->add(y, x, n); }
  void gated_activation(GatedActivation a, float* g, int64_t ldg, const float* u, int64_t ldu, int64_t n,
                        int64_t dim) override {
    cpu_->gated_activation(a, g, ldg, u, ldu, n, dim);
  }
  void softcap(float* x, int64_t n, float cap) override { cpu_->softcap(x, n, cap); }
  void moe_route(const float* logits, int64_t ld, int64_t n, const MoeRouting& r, int32_t* ids, float* w) override {
    cpu_->moe_route(logits, ld, n, r, ids, w);
  }
  void moe_matmul(const float* x, int64_t ldx, int64_t n_slots, const int32_t* expert, const int32_t* x_row,
                  int n_expert, const ExpertTarget* targets, int n_targets) override {
    cpu_->moe_matmul(x, ldx, n_slots, expert, x_row, n_expert, targets, n_targets);
  }
  void moe_combine(const float* y, int64_t ldy, const float* w, int k, int64_t n, int64_t dim, float* out,
                   int64_t ld_out, bool accumulate) override {
    cpu_->moe_combine(y, ldy, w, k, n, dim, out, ld_out, accumulate);
  }
  void kv_store(const float* k, int64_t ldk, int64_t kw, const float* v, int64_t ldv, int64_t vw, const int32_t* pos,
                int64_t n, const KvStoreView* views, const int32_t* vot) override {
    ++ops_["kv_store"];
    cpu_->kv_store(k, ldk, kw, v, ldv, vw, pos, n, views, vot);
  }
  void attention(const AttentionShape& s, const float* q, const int32_t* pos, int64_t n, const KvView* views,
                 const int32_t* vot, float* out) override {
    ++ops_["attention"];
    cpu_->attention(s, q, pos, n, views, vot, out);
  }

 private:
  int count(const char* op) const {
    auto it = ops_.find(op);
    return it == ops_.end() ? 0 : it->second;
  }
  std::unique_ptr<Backend> cpu_;
  std::map<std::string, int>& ops_;

 public:
  std::vector<const TensorView*> uploaded_;
  std::string upload_error_;

 private:
  DType refused_;
  bool device_like_;
};

// A factory of counting backends, each with its own op counts.
struct Counting {
  std::vector<std::unique_ptr<std::map<std::string, int>>> ops;  // per backend made
  std::vector<CountingBackend*> made;                             // (owned by their runners)
  DType refused = DType::kMXFP4;
  bool device_like = false;
  std::string upload_error;
  BackendFactory factory() {
    return [this](ThreadPool& pool) -> Result<std::unique_ptr<Backend>> {
      ops.push_back(std::make_unique<std::map<std::string, int>>());
      auto b = std::make_unique<CountingBackend>(pool, ops.back().get(), refused, device_like);
      b->upload_error_ = upload_error;
      made.push_back(b.get());
      return std::unique_ptr<Backend>(std::move(b));
    };
  }
};

TEST(EngineBackend, TargetAndDraftRunOnTheBackendTheFactoryMakes) {
  auto target = test::load_model(test::kTinyQwen);
  ASSERT_TRUE(target);
  const int V = target->config().n_vocab;
  std::vector<int32_t> head;
  for (int32_t t = 0; t < V; t += 3) head.push_back(t);
  auto draft = make_draft_view(*target, {}, head);
  ASSERT_TRUE(draft.is_ok()) << draft.status().message();
  ThreadPool pool(2);
  EngineConfig cfg;
  cfg.num_kv_blocks = 256;
  cfg.spec.method = SpecMethod::kDraft;
  cfg.spec.draft_model = draft.value().get();
  cfg.spec.num_speculative_tokens = 3;
  const std::vector<RequestParams> reqs = test::workload(6, V, 11);
  const test::RunResult want = test::run(*target, pool, cfg, reqs);

  Counting counting;
  cfg.backend = counting.factory();
  const test::RunResult got = test::run(*target, pool, cfg, reqs);
  test::expect_same(want, got, "counting backend");
  // The target's runner, the draft's runner, the draft's context tokens.
  ASSERT_EQ(counting.ops.size(), 3u);
  const int L = target->config().n_layer;
  for (int i = 0; i < 2; ++i) {
    const std::map<std::string, int>& ops = *counting.ops[static_cast<size_t>(i)];
    SCOPED_TRACE(i == 0 ? "target" : "draft");
    ASSERT_GT(ops.count("embed"), 0u);
    EXPECT_GT(ops.at("embed"), 0);
    // The residual stream (x, xn, y) and the scratch of Q, K, V, the
    // attention output, gate and up; one K/V store and one attention per
    // layer and forward pass.
    EXPECT_EQ(ops.at("alloc"), 9);
    EXPECT_EQ(ops.at("kv_store"), L * ops.at("embed"));
    EXPECT_EQ(ops.at("attention"), L * ops.at("embed"));
  }
  const std::map<std::string, int>& ctx = *counting.ops[2];
  ASSERT_GT(ctx.count("matmul"), 0u);  // the context tokens' head rows
  EXPECT_EQ(ctx.at("matmul"), ctx.at("rms_norm"));
  EXPECT_EQ(ctx.count("embed"), 0u);
}

// A backend whose memory is not the host's (a device's): the runner's KV
// pool takes its pages from the backend (alloc) and the page ops and the
// head's row gather move bytes through Backend::copy; the outputs keep
// their bits. Parallel samples (n = 2) share a prompt's partial block, so
// copy-on-write page copies happen.
TEST(EngineBackend, KvPagesLiveInTheBackendsMemoryWhenItIsNotTheHosts) {
  auto target = test::load_model(test::kTinyQwen);
  ASSERT_TRUE(target);
  const int V = target->config().n_vocab;
  ThreadPool pool(2);
  EngineConfig cfg;
  cfg.num_kv_blocks = 256;
  std::vector<RequestParams> reqs = test::workload(4, V, 5);
  for (RequestParams& r : reqs) r.n = 2;
  const test::RunResult want = test::run(*target, pool, cfg, reqs);
  Counting counting;
  counting.device_like = true;
  cfg.backend = counting.factory();
  const test::RunResult got = test::run(*target, pool, cfg, reqs);
  test::expect_same(want, got, "a backend with its own memory");
  ASSERT_EQ(counting.ops.size(), 1u);
  const std::map<std::string, int>& ops = *counting.ops[0];
  const KvLayout layout = KvLayout::from_config(target->config(), true);
  // 9 forward buffers, the RoPE tables (cos, sin: computed and read in the
  // backend's memory), then K and V of every page slot.
  EXPECT_EQ(ops.at("alloc"), 9 + 2 + 2 * layout.layers_per_group);
  ASSERT_GT(ops.count("copy"), 0u);
  // The head's rows (one copy each) and the copy-on-write pages (K and V of
  // every slot per copied page).
  EXPECT_GT(ops.at("copy"), static_cast<int>(reqs.size()));
}

TEST(EngineBackend, FactoryErrorsAndRefusedWeightsAreClearErrors) {
  auto target = test::load_model(test::kTinyQwen);
  ASSERT_TRUE(target);
  ThreadPool pool(1);
  EngineConfig cfg;
  cfg.num_kv_blocks = 64;
  cfg.backend = [](ThreadPool&) -> Result<std::unique_ptr<Backend>> { return Status::error("no CUDA device"); };
  auto e = Engine::create(*target, pool, cfg);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("no CUDA device"), std::string::npos) << e.status().message();

  cfg.backend = [](ThreadPool&) -> Result<std::unique_ptr<Backend>> { return std::unique_ptr<Backend>(); };
  e = Engine::create(*target, pool, cfg);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("made no backend"), std::string::npos) << e.status().message();

  Counting counting;
  counting.refused = target->weights().layers[0].q.weight->type;
  cfg.backend = counting.factory();
  e = Engine::create(*target, pool, cfg);
  ASSERT_FALSE(e.is_ok());
  const std::string msg = e.status().message();
  EXPECT_NE(msg.find("the counting backend does not run matmul with"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dtype_name(counting.refused)), std::string::npos) << msg;
}

// Engine::create hands the backend every weight the forward pass reads
// (Backend::upload_weights: matrices, the output head, the embedding table)
// before the first step, and its error (a device short of memory) is
// Engine::create's; a backend whose memory is not the host's gets the
// logits rows in its host memory (alloc_host, page-locked on a device).
TEST(EngineBackend, WeightsAreUploadedWhenTheEngineIsMade) {
  auto target = test::load_model(test::kTinyQwen);
  ASSERT_TRUE(target);
  ThreadPool pool(1);
  EngineConfig cfg;
  cfg.num_kv_blocks = 64;
  Counting counting;
  counting.device_like = true;
  cfg.backend = counting.factory();
  auto e = Engine::create(*target, pool, cfg);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  ASSERT_EQ(counting.made.size(), 1u);
  const std::map<std::string, int>& ops = *counting.ops[0];
  EXPECT_EQ(ops.at("upload_weights"), 1);
  EXPECT_EQ(ops.count("matmul"), 0u);  // no step ran yet
  const std::vector<const TensorView*>& up = counting.made[0]->uploaded_;
  const std::vector<const TensorView*> want = target->backend_weights();
  EXPECT_EQ(up, want);
  const ModelWeights& w = target->weights();
  // 7 matrices a layer (q, k, v, o, gate, up, down) and the embedding
  // (the tiny model's head is tied to it).
  EXPECT_EQ(up.size(), 7 * w.layers.size() + 1 + (w.output.weight != w.tok_embd ? 1 : 0));
  EXPECT_NE(std::find(up.begin(), up.end(), w.tok_embd), up.end());
  EXPECT_NE(std::find(up.begin(), up.end(), w.layers[0].q.weight), up.end());
  ASSERT_TRUE(e.value()->add_request("a", test::workload(1, target->config().n_vocab, 3)[0]).is_ok());
  while (e.value()->has_unfinished()) ASSERT_TRUE(e.value()->step().is_ok());
  EXPECT_GE(ops.at("alloc_host"), 1);  // the logits rows (grown geometrically)

  counting.upload_error = "cuda: the model's weights need 9.00 GiB of device memory and 1.00 GiB are free";
  cfg.backend = counting.factory();
  auto refused = Engine::create(*target, pool, cfg);
  ASSERT_FALSE(refused.is_ok());
  const std::string msg = refused.status().message();
  EXPECT_NE(msg.find("uploading the weights to the counting backend"), std::string::npos) << msg;
  EXPECT_NE(msg.find("9.00 GiB of device memory"), std::string::npos) << msg;
}

// Each step's times (StepOutput::times) split its wall time: scheduler,
// step inputs, forward pass and sampler add up to at most the step, and the
// backend's own measures (Backend::times) are the step's share of them: a
// device-like backend counting 1 ms of device time per sync() and 0.5 ms
// per copy() shows exactly those for each step (the runner syncs after the
// page ops and after the forward pass); the CPU backend measures no device
// time, so the model's time is the forward pass.
TEST(EngineBackend, StepTimesAddUpAndCarryTheBackendsMeasures) {
  auto target = test::load_model(test::kTinyQwen);
  ASSERT_TRUE(target);
  ThreadPool pool(1);
  EngineConfig cfg;
  cfg.num_kv_blocks = 64;
  const std::vector<RequestParams> reqs = test::workload(3, target->config().n_vocab, 7);
  for (bool device_like : {false, true}) {
    SCOPED_TRACE(device_like ? "device-like backend" : "host backend");
    Counting counting;
    counting.device_like = device_like;
    cfg.backend = counting.factory();
    auto e = Engine::create(*target, pool, cfg);
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    for (size_t i = 0; i < reqs.size(); ++i)
      ASSERT_TRUE(e.value()->add_request("r" + std::to_string(i), reqs[i]).is_ok());
    const std::map<std::string, int>& ops = *counting.ops[0];
    auto count = [&](const char* op) { return ops.count(op) ? ops.at(op) : 0; };
    int steps = 0;
    while (e.value()->has_unfinished()) {
      const int syncs0 = count("sync"), copies0 = count("copy");
      auto out = e.value()->step();
      ASSERT_TRUE(out.is_ok()) << out.status().message();
      if (out->n_seqs == 0) continue;
      ++steps;
      const StepTimes& t = out->times;
      EXPECT_GE(t.schedule, 0);
      EXPECT_GE(t.inputs, 0);
      EXPECT_GT(t.forward, 0);
      EXPECT_GE(t.sample, 0);
      EXPECT_LE(t.schedule + t.inputs + t.forward + t.sample, out->seconds * (1 + 1e-12));
      EXPECT_EQ(t.device_measured, device_like);
      if (device_like) {
        EXPECT_EQ(count("sync") - syncs0, 2);
        EXPECT_NEAR(t.device, 2e-3, 1e-12);
        EXPECT_NEAR(t.copies, 0.5e-3 * (count("copy") - copies0), 1e-12);
        EXPECT_DOUBLE_EQ(t.model(), t.device);
      } else {
        EXPECT_EQ(t.device, 0);
        EXPECT_EQ(t.copies, 0);
        EXPECT_DOUBLE_EQ(t.model(), t.forward);
      }
    }
    EXPECT_GT(steps, 2);
    EXPECT_EQ(count("alloc_host") > 0, device_like);  // host backends keep the logits in plain host memory
  }
}

}  // namespace
}  // namespace ember
