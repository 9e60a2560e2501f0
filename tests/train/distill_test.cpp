// The distillation loop (train/distill.h) on tiny models: a student with a
// layer removed, distilled from its teacher (live, and through a cache of
// sampled tokens with importance weights), ends far below its starting KL
// on held-out windows; a run stopped and resumed from its checkpoint gives
// the bits of an uninterrupted run; damaged, truncated and mismatched
// checkpoints and caches are refused with a clear error.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/tiny_layered_model.h"
#include "train/distill.h"
#include "train/rng.h"

namespace ember {
namespace {

// A token stream with structure to learn: a random walk over the vocabulary.
std::vector<int32_t> stream(int vocab, int64_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> s;
  int32_t t = 1;
  for (int64_t i = 0; i < n; ++i) {
    t = static_cast<int32_t>((t + 1 + static_cast<int32_t>(r.below(3))) % vocab);
    s.push_back(t);
  }
  return s;
}

struct Fixture {
  std::unique_ptr<Model> teacher;
  std::unique_ptr<TrainModel> student;
  std::unique_ptr<TokenWindows> data;
};

Fixture make_setup(const std::string& arch = "qwen3", std::vector<int> keep = {0, 2}) {
  Fixture s;
  test::TinySpec spec;
  for (const auto& t : test::tiny_specs())
    if (t.arch == arch) spec = t;
  s.teacher = test::load_tiny(spec);
  auto full = TrainModel::from_model(*s.teacher);
  EXPECT_TRUE(full);
  auto sub = (*full)->subset_layers(keep);
  EXPECT_TRUE(sub);
  s.student = std::move(*sub);
  auto d = TokenWindows::make(stream(s.teacher->config().n_vocab, 6000, 3), 16, -1, 6, {}, 9);
  EXPECT_TRUE(d);
  s.data = std::make_unique<TokenWindows>(std::move(*d));
  return s;
}

DistillOptions options(int64_t steps, const std::string& ckpt = "") {
  DistillOptions o;
  o.batch = 4;
  o.accum = 2;
  o.steps = steps;
  o.opt.lr = 3e-3;
  o.opt.warmup_steps = 2;
  o.checkpoint_path = ckpt;
  o.seed = 5;
  return o;
}

TEST(Distill, StudentWithALayerRemovedRecoversTowardsTheTeacher) {
  ThreadPool pool(2);
  for (bool cached : {false, true}) {
    SCOPED_TRACE(cached ? "teacher cache" : "live teacher");
    Fixture s = make_setup();
    ASSERT_TRUE(select_trainable(*s.student, "all", 1).is_ok());
    LiveTeacher live(*s.teacher, pool, 4 * 16);
    std::unique_ptr<TeacherCache> cache;
    if (cached) {
      const std::string path = ::testing::TempDir() + "distill_cache.bin";
      TeacherCacheOptions co;
      co.samples = 16;
      co.beta = 0.5f;  // a flatter proposal: importance weights != 1 / K
      ASSERT_TRUE(TeacherCache::build(live, *s.data, 4, co, path, pool).is_ok());
      auto c = TeacherCache::open(path, *s.data, live.digest(), co);
      ASSERT_TRUE(c) << c.status().message();
      cache = std::move(*c);
      std::remove(path.c_str());
    }
    DistillOptions o = options(150);
    o.accum = 1;
    o.opt.lr = 1e-2;
    Distiller d(*s.student, &live, cache.get(), *s.data, o, pool);
    auto before = d.evaluate();
    ASSERT_TRUE(before) << before.status().message();
    auto r = d.run(nullptr, nullptr, nullptr);
    ASSERT_TRUE(r) << r.status().message();
    EXPECT_FALSE(*r);
    auto after = d.evaluate();
    ASSERT_TRUE(after);
    EXPECT_LT(after->kl, 0.4 * before->kl) << before->kl << " -> " << after->kl;
    EXPECT_GT(after->top1, before->top1);
  }
}

std::vector<float> params_of(const TrainModel& m) { return std::vector<float>(m.params(), m.params() + m.n_params()); }

TEST(Distill, StoppedAndResumedRunGivesTheUninterruptedBits) {
  ThreadPool pool(2);
  const std::string ckpt = ::testing::TempDir() + "distill_resume.ckpt";
  std::remove(ckpt.c_str());
  DistillOptions o = options(10, ckpt);
  o.hidden_weight = 0.5f;  // with the hidden-state term and its state
  o.hidden_map = {0, 2};
  o.checkpoint_every = 4;
  // Uninterrupted.
  Fixture a = make_setup();
  ASSERT_TRUE(select_trainable(*a.student, "lora:2", 1).is_ok());
  LiveTeacher la(*a.teacher, pool, 64, o.hidden_map);
  Distiller da(*a.student, &la, nullptr, *a.data, o, pool);
  ASSERT_TRUE(da.run(nullptr, nullptr, nullptr));
  const std::vector<float> want = params_of(*a.student);
  // Stopped after 6 steps (a checkpoint at 4 was overwritten by the stop's).
  Fixture b = make_setup();
  ASSERT_TRUE(select_trainable(*b.student, "lora:2", 1).is_ok());
  {
    LiveTeacher lb(*b.teacher, pool, 64, o.hidden_map);
    Distiller db(*b.student, &lb, nullptr, *b.data, o, pool);
    std::atomic<bool> stop{false};
    auto r = db.run([&](const DistillProgress& p) { if (p.step == 6) stop = true; }, nullptr, &stop);
    ASSERT_TRUE(r);
    EXPECT_TRUE(*r);
    EXPECT_EQ(db.step(), 6);
  }
  // A fresh process: new student from the file, resumed.
  Fixture c = make_setup();
  ASSERT_TRUE(select_trainable(*c.student, "lora:2", 1).is_ok());
  LiveTeacher lc(*c.teacher, pool, 64, o.hidden_map);
  Distiller dc(*c.student, &lc, nullptr, *c.data, o, pool);
  ASSERT_TRUE(dc.resume().is_ok());
  EXPECT_EQ(dc.step(), 6);
  ASSERT_TRUE(dc.run(nullptr, nullptr, nullptr));
  const std::vector<float> got = params_of(*c.student);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  std::remove(ckpt.c_str());
}

TEST(Distill, OneAndTwoThreadsGiveTheSameBits) {
  std::vector<float> got[2];
  for (int th = 1; th <= 2; ++th) {
    ThreadPool pool(th);
    Fixture s = make_setup();
    ASSERT_TRUE(select_trainable(*s.student, "all", 1).is_ok());
    LiveTeacher live(*s.teacher, pool, 64);
    Distiller d(*s.student, &live, nullptr, *s.data, options(4), pool);
    ASSERT_TRUE(d.run(nullptr, nullptr, nullptr));
    got[th - 1] = params_of(*s.student);
  }
  EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)));
}

std::string read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

TEST(Distill, DamagedOrMismatchedCheckpointsAreRefused) {
  ThreadPool pool(2);
  const std::string ckpt = ::testing::TempDir() + "distill_damaged.ckpt";
  Fixture a = make_setup();
  ASSERT_TRUE(select_trainable(*a.student, "ffn", 1).is_ok());
  LiveTeacher la(*a.teacher, pool, 64);
  {
    Distiller d(*a.student, &la, nullptr, *a.data, options(2, ckpt), pool);
    ASSERT_TRUE(d.run(nullptr, nullptr, nullptr));
  }
  const std::string good = read_bytes(ckpt);
  // The message of resuming from `bytes` (empty: it loaded).
  auto resume = [&](const std::string& bytes, DistillOptions o, const std::string& train = "ffn",
                    bool touch_frozen = false) {
    write_bytes(ckpt, bytes);
    Fixture s = make_setup();
    EXPECT_TRUE(select_trainable(*s.student, train, 1).is_ok());
    if (touch_frozen) s.student->params()[s.student->find(TensorRole::kTokenEmbd, -1)->offset] += 1.f;
    LiveTeacher l(*s.teacher, pool, 64);
    Distiller d(*s.student, &l, nullptr, *s.data, o, pool);
    return d.resume().message();
  };
  EXPECT_EQ(resume(good, options(2, ckpt)), "");
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  EXPECT_NE(resume(flipped, options(2, ckpt)).find("checksum"), std::string::npos);
  EXPECT_NE(resume(good.substr(0, good.size() - 100), options(2, ckpt)).find("truncated"), std::string::npos);
  EXPECT_NE(resume("garbage", options(2, ckpt)).find("not an ember training checkpoint"), std::string::npos);
  DistillOptions other = options(2, ckpt);
  other.opt.lr = 1e-2;
  EXPECT_NE(resume(good, other).find("other training options"), std::string::npos);
  EXPECT_NE(resume(good, options(2, ckpt), "all").find("another student"), std::string::npos);
  EXPECT_NE(resume(good, options(2, ckpt), "ffn", true).find("frozen weights"), std::string::npos);
  write_bytes(ckpt, "");
  std::remove(ckpt.c_str());
  DistillOptions none = options(2, ckpt);
  Fixture s = make_setup();
  ASSERT_TRUE(select_trainable(*s.student, "ffn", 1).is_ok());
  LiveTeacher l(*s.teacher, pool, 64);
  Distiller d(*s.student, &l, nullptr, *s.data, none, pool);
  EXPECT_NE(d.resume().message().find("cannot open"), std::string::npos);
}

TEST(Distill, DamagedOrMismatchedTeacherCachesAreRefused) {
  ThreadPool pool(2);
  Fixture s = make_setup();
  LiveTeacher live(*s.teacher, pool, 64);
  const std::string path = ::testing::TempDir() + "distill_cache_bad.bin";
  TeacherCacheOptions co;
  co.samples = 4;
  ASSERT_TRUE(TeacherCache::build(live, *s.data, 4, co, path, pool).is_ok());
  const std::string good = read_bytes(path);
  auto open_error = [&](const std::string& bytes, const TeacherCacheOptions& o) {
    write_bytes(path, bytes);
    auto c = TeacherCache::open(path, *s.data, live.digest(), o);
    EXPECT_FALSE(c);
    return c ? std::string() : c.status().message();
  };
  std::string flipped = good;
  flipped[good.size() / 3] ^= 1;
  EXPECT_NE(open_error(flipped, co).find("checksum"), std::string::npos);
  EXPECT_NE(open_error(good.substr(0, 200), co).find("truncated"), std::string::npos);
  TeacherCacheOptions k8 = co;
  k8.samples = 8;
  EXPECT_NE(open_error(good, k8).find("samples"), std::string::npos);
  write_bytes(path, good);
  auto other_data = TokenWindows::make(stream(s.teacher->config().n_vocab, 1600, 4), 16, -1, 6, {}, 9);
  ASSERT_TRUE(other_data);
  auto c = TeacherCache::open(path, *other_data, live.digest(), co);
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("other training data"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace ember
