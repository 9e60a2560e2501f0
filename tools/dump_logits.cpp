// dump_logits: writes the logits [n_tokens, n_vocab] (f32, row-major) of a
// token sequence, for numerical studies (tools/noise_study.py).
//   build/ember_dump_logits MODEL OUT.bin [--f32] TOKEN...
// --f32 dequantizes every weight to f32 first. EMBER_ISA=scalar|avx2|avx512
// selects the kernel level.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "model/model.h"
#include "transform/convert.h"

int main(int argc, char** argv) {
  using namespace ember;
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL OUT.bin [--f32] TOKEN...\n", argv[0]);
    return 2;
  }
  bool f32 = false;
  std::vector<int32_t> toks;
  for (int i = 3; i < argc; ++i) {
    if (std::string(argv[i]) == "--f32") f32 = true;
    else toks.push_back(static_cast<int32_t>(std::strtol(argv[i], nullptr, 10)));
  }
  ThreadPool pool(2);
  auto file = open_model_file(argv[1]);
  if (!file) {
    std::fprintf(stderr, "%s\n", file.status().message().c_str());
    return 2;
  }
  std::unique_ptr<ModelFile> mf = std::move(file.value());
  if (f32) {
    ConvertOptions o;
    o.type = DType::kF32;
    auto c = convert_model(std::move(mf), o, pool);
    if (!c) {
      std::fprintf(stderr, "%s\n", c.status().message().c_str());
      return 1;
    }
    mf = std::move(c.value());
  }
  auto m = Model::from_file(std::move(mf));
  if (!m) {
    std::fprintf(stderr, "%s\n", m.status().message().c_str());
    return 2;
  }
  const int64_t n = static_cast<int64_t>(toks.size()), V = (*m)->config().n_vocab;
  ForwardContext ctx(**m, pool, 512);
  ContiguousKvCache cache((*m)->config(), n);
  std::vector<float> all(n * V);
  if (Status st = ctx.forward(toks.data(), n, 0, cache, nullptr, all.data()); !st) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  FILE* f = std::fopen(argv[2], "wb");
  if (!f || std::fwrite(all.data(), sizeof(float), all.size(), f) != all.size()) return 1;
  std::fclose(f);
  return 0;
}
