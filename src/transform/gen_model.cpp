// Random-weight GGUF models of real shapes; see gen_model.h.
#include "transform/gen_model.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "model/archs/archs.h"
#include "model/io/hf_config.h"
#include "quant/quantize.h"
#include "transform/quant_plan.h"

namespace ember {

namespace {

// ---- shapes ----

// The built-in shapes (the released models' hyper-parameters).
struct NamedShape {
  const char* name;
  const char* arch;
  int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx;
  double rope_base, norm_eps;
  bool tied_embeddings, qkv_bias;
  double rope_scale_factor;  // Llama 3.1 RoPE scaling
  int sliding_window, n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
  int n_rot = 0;              // 0: the head size
  int rope_original_ctx = 0;  // LongRoPE / YaRN (0: keep the default)
  bool longrope = false;
  double yarn_factor = 0;
  float attn_temp_scale = 0;
  double yarn_log_multiplier = 1;  // written with YaRN when > 0 (Ministral 3: 1; gpt-oss: none)
};

constexpr NamedShape kShapes[] = {
    {"llama-3.2-1b", "llama", 16, 2048, 8192, 32, 8, 64, 128256, 131072, 500000, 1e-5, true, false, 32, 0, 0, 0, 0, 0},
    {"llama-3.1-8b", "llama", 32, 4096, 14336, 32, 8, 128, 128256, 131072, 500000, 1e-5, false, false, 8, 0, 0, 0, 0, 0},
    {"qwen2.5-0.5b", "qwen2", 24, 896, 4864, 14, 2, 64, 151936, 32768, 1000000, 1e-6, true, true, 0, 0, 0, 0, 0, 0},
    {"qwen2.5-1.5b", "qwen2", 28, 1536, 8960, 12, 2, 128, 151936, 32768, 1000000, 1e-6, true, true, 0, 0, 0, 0, 0, 0},
    {"qwen3-0.6b", "qwen3", 28, 1024, 3072, 16, 8, 128, 151936, 40960, 1000000, 1e-6, true, false, 0, 0, 0, 0, 0, 0},
    {"gemma-3-270m", "gemma3", 18, 640, 2048, 4, 1, 256, 262144, 32768, 1000000, 1e-6, true, false, 0, 512, 0, 0, 0, 0},
    // Mixture of experts (the released models' hyper-parameters; the cut
    // shapes keep the first layers).
    {"olmoe-1b-7b", "olmoe", 16, 2048, 1024, 16, 16, 128, 50304, 4096, 10000, 1e-5, false, false, 0, 0, 64, 8, 0, 0},
    {"qwen3-30b-a3b", "qwen3moe", 48, 2048, 6144, 32, 4, 128, 151936, 40960, 1000000, 1e-6, false, false, 0, 0, 128, 8,
     768, 0},
    {"qwen3-30b-a3b-12l", "qwen3moe", 12, 2048, 6144, 32, 4, 128, 151936, 40960, 1000000, 1e-6, false, false, 0, 0, 128,
     8, 768, 0},
    {"mixtral-8x7b-4l", "llama", 4, 4096, 14336, 32, 8, 128, 32000, 32768, 1000000, 1e-5, false, false, 0, 0, 8, 2, 0, 0},
    // Phi-3.5-mini and Phi-4-mini: fused Q|K|V and gate|up, LongRoPE over 4k (Phi-4-mini: 96 of 128 dims).
    {"phi-3.5-mini", "phi3", 32, 3072, 8192, 32, 32, 96, 32064, 131072, 10000, 1e-5, false, false, 0, 0, 0, 0, 0, 0, 0, 4096,
     true},
    {"phi-4-mini", "phi3", 32, 3072, 8192, 24, 8, 128, 200064, 131072, 10000, 1e-5, true, false, 0, 0, 0, 0, 0, 0, 96, 4096,
     true},
    // Ministral 3 3B: YaRN x16 over 16k, attention temperature 0.1.
    {"ministral-3-3b", "mistral3", 26, 3072, 9216, 32, 8, 128, 131072, 262144, 1000000, 1e-5, true, false, 0, 0, 0, 0, 0, 0,
     0, 16384, false, 16, 0.1f},
    // SmolLM3 3B: no RoPE in every 4th layer.
    {"smollm3-3b", "smollm3", 36, 2048, 11008, 16, 4, 128, 128256, 65536, 5000000, 1e-6, true, false, 0, 0, 0, 0, 0, 0},
    // OLMo 2 1B: post-norms, QK-norm over the whole projections.
    {"olmo-2-1b", "olmo2", 16, 2048, 8192, 16, 16, 128, 100352, 4096, 500000, 1e-6, false, false, 0, 0, 0, 0, 0, 0},
    // gpt-oss-20b: 24 layers, 32 experts (4 used) of width 2880, attention
    // sinks, a window of 128 on the even layers, YaRN x32 over 4k; and its
    // first 6 layers.
    {"gpt-oss-20b", "gpt-oss", 24, 2880, 2880, 64, 8, 64, 201088, 131072, 150000, 1e-5, false, false, 0, 128, 32, 4,
     2880, 0, 0, 4096, false, 32, 0, 0},
    {"gpt-oss-20b-6l", "gpt-oss", 6, 2880, 2880, 64, 8, 64, 201088, 131072, 150000, 1e-5, false, false, 0, 128, 32, 4,
     2880, 0, 0, 4096, false, 32, 0, 0},
    // Mixtral's layout and RoPE at a small size.
    {"mixtral-tiny", "llama", 8, 1024, 2816, 16, 4, 64, 32000, 32768, 1000000, 1e-5, false, false, 0, 0, 8, 2, 0, 0},
};

Result<GenModelShape> known_shape(const std::string& name) {
  for (const NamedShape& n : kShapes) {
    if (name != n.name) continue;
    GenModelShape s;
    s.name = n.name;
    s.arch = n.arch;
    s.n_layer = n.n_layer, s.n_embd = n.n_embd, s.n_ff = n.n_ff, s.n_head = n.n_head, s.n_head_kv = n.n_head_kv;
    s.head_dim = n.head_dim, s.n_vocab = n.n_vocab, s.n_ctx = n.n_ctx;
    s.rope_base = n.rope_base, s.norm_eps = n.norm_eps;
    s.tied_embeddings = n.tied_embeddings, s.qkv_bias = n.qkv_bias;
    s.rope_scale_factor = n.rope_scale_factor;
    s.sliding_window = n.sliding_window, s.n_expert = n.n_expert, s.n_expert_used = n.n_expert_used;
    s.n_ff_exp = n.n_ff_exp, s.n_ff_shexp = n.n_ff_shexp;
    s.n_rot = n.n_rot, s.longrope = n.longrope, s.yarn_factor = n.yarn_factor, s.attn_temp_scale = n.attn_temp_scale;
    s.yarn_log_multiplier = n.yarn_log_multiplier;
    if (n.rope_original_ctx > 0) s.rope_original_ctx = n.rope_original_ctx;
    return s;
  }
  std::string names;
  for (const std::string& n : gen_model_shape_names()) names += (names.empty() ? "" : ", ") + n;
  return Status::errorf("unknown shape '{}' (known: {})", name, names);
}

// ---- random numbers ----

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// wyrand: one multiply per 64-bit output.
struct Wyrand {
  uint64_t s;
  uint64_t next() {
    s += 0xa0761d6478bd642full;
    const __uint128_t t = static_cast<__uint128_t>(s) * (s ^ 0xe7037ed1a0b428dbull);
    return static_cast<uint64_t>(t >> 64) ^ static_cast<uint64_t>(t);
  }
};

// dst[i] = mean + std * z_i, z approximately standard normal (Irwin-Hall of
// four 16-bit uniforms: bounded at +-3.46, variance 1).
void fill_normal(Wyrand& rng, float* dst, int64_t n, float mean, float std) {
  const float scale = std * 1.7320508f / 65536.0f;  // sqrt(3) / 2^16
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = rng.next();
    const uint32_t sum = static_cast<uint32_t>(r & 0xFFFF) + static_cast<uint32_t>((r >> 16) & 0xFFFF) +
                         static_cast<uint32_t>((r >> 32) & 0xFFFF) + static_cast<uint32_t>(r >> 48);
    // Each part is uniform on {0..65535} + 0.5: the sum has mean 2 * 65536.
    dst[i] = mean + scale * (static_cast<float>(sum) + 2.0f - 131072.0f);
  }
}

// ---- synthetic vocabulary ----

// GPT-2's printable stand-in for each byte, as UTF-8.
std::vector<std::string> byte_symbols() {
  std::vector<int> bs, cs;
  auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  for (int b = 0; b < 256; ++b)
    if (printable(b)) bs.push_back(b), cs.push_back(b);
  int extra = 0;
  for (int b = 0; b < 256; ++b)
    if (!printable(b)) bs.push_back(b), cs.push_back(256 + extra++);
  std::vector<std::string> out(256);
  for (size_t i = 0; i < bs.size(); ++i) {
    const int cp = cs[i];
    std::string u;
    if (cp < 0x80) {
      u += static_cast<char>(cp);
    } else {
      u += static_cast<char>(0xC0 | (cp >> 6));
      u += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out[bs[i]] = u;
  }
  return out;
}

// ---- tensors ----

enum class Fill { kMatrix, kRouter, kNorm, kBias, kRopeFreqs };  // kRouter: matrix values kept in f32

struct TensorPlan {
  std::string name;
  TensorRole role = TensorRole::kUnknown;
  std::vector<int64_t> ne;  // GGML order
  DType type;
  Fill fill;
  size_t nbytes = 0;
};

// The experts' width: n_ff_exp, else n_ff.
int expert_width(const GenModelShape& s) { return s.n_ff_exp > 0 ? s.n_ff_exp : s.n_ff; }
// The shared expert's width: n_ff_shexp, else n_ff where the architecture has one.
int shared_width(const ArchSpec& spec, const GenModelShape& s) {
  if (!spec.find(TensorRole::kFfnGateShexp) || s.n_expert == 0) return 0;
  return s.n_ff_shexp > 0 ? s.n_ff_shexp : s.n_ff;
}

// Whether gen-model writes a listed tensor for shape s.
bool gen_writes(GenWhen when, const GenModelShape& s) {
  switch (when) {
    case GenWhen::kAlways: return true;
    case GenWhen::kNever: return false;
    case GenWhen::kUntied: return !s.tied_embeddings;
    case GenWhen::kRopeScaling: return s.rope_scale_factor > 0;
    case GenWhen::kLongRope: return s.longrope;
    case GenWhen::kQkvBias: return s.qkv_bias;
    case GenWhen::kDense: return s.n_expert == 0;
    case GenWhen::kExperts: return s.n_expert > 0;
  }
  return false;
}

Fill fill_of(TensorKind k) {
  switch (k) {
    case TensorKind::kMatrix:
    case TensorKind::kExperts: return Fill::kMatrix;
    case TensorKind::kRouter: return Fill::kRouter;
    case TensorKind::kNorm: return Fill::kNorm;
    case TensorKind::kBias: return Fill::kBias;
    case TensorKind::kRopeFreqs: return Fill::kRopeFreqs;
  }
  return Fill::kMatrix;
}

// The architecture's tensor list (model/archs) for shape s, in file order:
// model-level tensors, the blocks, the head.
std::vector<TensorPlan> plan_tensors(const ArchSpec& spec, const GenModelShape& s, DType type, GenModelStats* stats) {
  TensorSizes sz;
  sz.embd = s.n_embd, sz.vocab = s.n_vocab, sz.ff = s.n_ff, sz.head_dim = s.head_size();
  sz.q = s.n_head * sz.head_dim, sz.kv = s.n_head_kv * sz.head_dim, sz.v = sz.kv, sz.o = sz.q;
  sz.rope_half = s.rot_dims() / 2, sz.experts = s.n_expert;
  sz.ff_exp = expert_width(s), sz.ff_shexp = shared_width(spec, s);
  sz.q_norm = spec.qk_norm_full ? sz.q : sz.head_dim, sz.k_norm = spec.qk_norm_full ? sz.kv : sz.head_dim;
  sz.head = s.n_head;
  std::vector<TensorPlan> out;
  auto add = [&](const TensorSpec& spec_t, int il) {
    if (!gen_writes(spec_t.gen, s)) return;
    const RoleInfo& r = role_info(spec_t.role);
    TensorPlan t;
    t.name = gguf_tensor_name(spec_t, il);
    t.ne = tensor_shape(spec_t, sz);
    t.role = spec_t.role;
    t.fill = fill_of(r.kind);
    t.type = DType::kF32;
    if (t.fill == Fill::kMatrix) {
      // MXFP4 is an expert type: llama-quantize's MXFP4_MOE puts the other
      // matrices in q8_0.
      const DType want = type == DType::kMXFP4 && r.kind != TensorKind::kExperts ? DType::kQ8_0 : type;
      t.type = fallback_row_type(want, t.ne[0]);
      if (t.type != want)
        stats->fallbacks.push_back(fmt::format("{}: {} -> {}", t.name, dtype_name(want), dtype_name(t.type)));
    }
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    t.nbytes = dtype_row_size(t.type, t.ne[0]) * static_cast<size_t>(n / t.ne[0]);
    stats->n_params += n;
    out.push_back(std::move(t));
  };
  for (const TensorSpec& t : spec.model_tensors)
    if (role_info(t.role).scope == TensorScope::kModel) add(t, -1);
  for (int il = 0; il < s.n_layer; ++il)
    for (const TensorSpec& t : spec.block_tensors) add(t, il);
  for (const TensorSpec& t : spec.model_tensors)
    if (role_info(t.role).scope == TensorScope::kHead) add(t, -1);
  return out;
}

void write_metadata(const GenModelShape& s, const GenModelOptions& o, const Metadata& vocab, GgufWriter* w) {
  const std::string& a = s.arch;
  w->add_string("general.architecture", a);
  w->add_string("general.name", s.name + " (random weights, ember gen-model)");
  w->add_uint32("general.file_type", static_cast<uint32_t>(llama_file_type(o.type)));
  w->add_uint32("general.quantization_version", 2);
  w->add_uint64("ember.gen_model.seed", o.seed);
  w->add_uint32(a + ".vocab_size", static_cast<uint32_t>(s.n_vocab));
  w->add_uint32(a + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w->add_uint32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w->add_uint32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  w->add_uint32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w->add_uint32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w->add_uint32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w->add_uint32(a + ".attention.key_length", static_cast<uint32_t>(s.head_size()));
  w->add_uint32(a + ".attention.value_length", static_cast<uint32_t>(s.head_size()));
  w->add_float32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(s.norm_eps));
  w->add_float32(a + ".rope.freq_base", static_cast<float>(s.rope_base));
  w->add_uint32(a + ".rope.dimension_count", static_cast<uint32_t>(s.rot_dims()));
  if (s.sliding_window > 0) w->add_uint32(a + ".attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  if (s.longrope) {  // as llama.cpp's phi3 converter writes it
    const double scale = static_cast<double>(s.n_ctx) / s.rope_original_ctx;
    w->add_uint32(a + ".rope.scaling.original_context_length", static_cast<uint32_t>(s.rope_original_ctx));
    w->add_float32(a + ".rope.scaling.attn_factor",
                   static_cast<float>(scale > 1 ? std::sqrt(1 + std::log(scale) / std::log(s.rope_original_ctx)) : 1.0));
  }
  if (s.yarn_factor > 0) {  // as llama.cpp's converter writes Ministral 3's
    w->add_string(a + ".rope.scaling.type", "yarn");
    w->add_float32(a + ".rope.scaling.factor", static_cast<float>(s.yarn_factor));
    w->add_uint32(a + ".rope.scaling.original_context_length", static_cast<uint32_t>(s.rope_original_ctx));
    w->add_float32(a + ".rope.scaling.yarn_beta_fast", 32.0f);
    w->add_float32(a + ".rope.scaling.yarn_beta_slow", 1.0f);
    if (s.yarn_log_multiplier > 0)
      w->add_float32(a + ".rope.scaling.yarn_log_multiplier", static_cast<float>(s.yarn_log_multiplier));
  }
  if (s.attn_temp_scale > 0) w->add_float32(a + ".attention.temperature_scale", s.attn_temp_scale);
  if (s.n_expert > 0) {
    w->add_uint32(a + ".expert_count", static_cast<uint32_t>(s.n_expert));
    w->add_uint32(a + ".expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    // Mixtral and OLMoE files give the expert width as feed_forward_length
    // (llama.cpp reads nothing else for them); the others have their own key.
    if (find_arch(a)->gen.expert_ff_key)
      w->add_uint32(a + ".expert_feed_forward_length", static_cast<uint32_t>(expert_width(s)));
    if (const int sh = shared_width(*find_arch(a), s))
      w->add_uint32(a + ".expert_shared_feed_forward_length", static_cast<uint32_t>(sh));
  }
  for (const auto& [k, v] : vocab.entries())
    if (k.rfind("tokenizer.", 0) == 0 || k.rfind("ember.tokenizer.", 0) == 0) w->add(k, v);
}

Status pwrite_all(int fd, const void* p, size_t n, uint64_t off) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t k = ::pwrite(fd, b, n, static_cast<off_t>(off));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return Status::errorf("write failed: {}", std::strerror(errno));
    b += k;
    n -= static_cast<size_t>(k);
    off += static_cast<uint64_t>(k);
  }
  return Status::ok();
}

// Generates one tensor in chunks of rows and writes it at `file_off`.
Status generate_tensor(const TensorPlan& t, const GenModelShape& s, const GenModelOptions& o, int fd,
                       uint64_t file_off, ThreadPool& pool) {
  const int64_t row_len = t.ne[0];
  int64_t rows = 1;
  for (size_t i = 1; i < t.ne.size(); ++i) rows *= t.ne[i];
  if (t.fill == Fill::kRopeFreqs && t.role != TensorRole::kRopeFreqs) {
    // LongRoPE: short factors rising from 1 to 1.1, long ones from 1 to
    // n_ctx / original (geometrically), over the frequencies.
    const bool is_long = t.role == TensorRole::kRopeFactorsLong;
    const double top = is_long ? static_cast<double>(s.n_ctx) / s.rope_original_ctx : 1.1;
    std::vector<float> f(static_cast<size_t>(row_len));
    for (int64_t i = 0; i < row_len; ++i)
      f[i] = static_cast<float>(std::pow(top, row_len > 1 ? static_cast<double>(i) / (row_len - 1) : 0.0));
    return pwrite_all(fd, f.data(), f.size() * sizeof(float), file_off);
  }
  if (t.fill == Fill::kRopeFreqs) {
    const std::vector<float> f =
        llama3_rope_freq_factors(s.rot_dims(), s.rope_base, s.rope_scale_factor, s.rope_low_freq_factor,
                                 s.rope_high_freq_factor, s.rope_original_ctx);
    if (static_cast<int64_t>(f.size()) != row_len) return Status::errorf("{}: rope factor count", t.name);
    return pwrite_all(fd, f.data(), f.size() * sizeof(float), file_off);
  }
  const size_t row_bytes = dtype_row_size(t.type, row_len);
  const int64_t chunk_rows = std::max<int64_t>(1, std::min<int64_t>(rows, (8 << 20) / (row_len * 4)));
  std::vector<uint8_t> out(row_bytes * chunk_rows);
  std::vector<std::vector<float>> scratch(pool.size(), std::vector<float>(row_len));
  const uint64_t tensor_seed = splitmix64(o.seed ^ splitmix64(fnv1a(t.name)));
  const float mean = t.fill == Fill::kNorm ? 1.0f : 0.0f;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t nr = std::min(chunk_rows, rows - r0);
    pool.parallel_for(nr, 4, [&](int64_t b, int64_t e, int ith) {
      float* f = scratch[ith].data();
      for (int64_t r = b; r < e; ++r) {
        Wyrand rng{splitmix64(tensor_seed + static_cast<uint64_t>(r0 + r))};
        fill_normal(rng, f, row_len, mean, o.weight_std);
        quantize_row_ref(t.type, f, out.data() + r * row_bytes, row_len);
      }
    });
    EMBER_RETURN_IF_ERROR(pwrite_all(fd, out.data(), row_bytes * nr, file_off + r0 * row_bytes));
  }
  return Status::ok();
}

}  // namespace

std::vector<std::string> gen_model_shape_names() {
  std::vector<std::string> v;
  for (const NamedShape& n : kShapes) v.emplace_back(n.name);
  return v;
}

Result<GenModelShape> gen_model_shape(const std::string& name) { return known_shape(name); }

Result<GenModelShape> gen_model_arch_defaults(const std::string& arch) {
  const ArchSpec* spec = find_arch(arch);
  if (!spec) return unsupported_arch_error(arch);
  const GenModelDefaults& g = spec->gen;
  GenModelShape s;
  s.name = "custom-" + arch;
  s.arch = spec->name;
  s.n_vocab = g.n_vocab;
  s.n_ctx = g.n_ctx;
  s.rope_base = g.rope_base;
  s.norm_eps = g.norm_eps;
  s.tied_embeddings = g.tied_embeddings;
  s.qkv_bias = g.qkv_bias;
  s.sliding_window = g.sliding_window;
  return s;
}

Status validate_gen_model_shape(const GenModelShape& s) {
  const ArchSpec* spec = find_arch(s.arch);
  if (!spec) return unsupported_arch_error(s.arch);
  auto in = [](const char* what, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi) return Status::errorf("{} = {} must be in [{}, {}]", what, v, lo, hi);
    return Status::ok();
  };
  EMBER_RETURN_IF_ERROR(in("n_layer", s.n_layer, 1, 1024));
  EMBER_RETURN_IF_ERROR(in("n_embd", s.n_embd, 1, 1 << 16));
  EMBER_RETURN_IF_ERROR(in("n_ff", s.n_ff, 1, 1 << 18));
  EMBER_RETURN_IF_ERROR(in("n_head", s.n_head, 1, 1024));
  EMBER_RETURN_IF_ERROR(in("n_head_kv", s.n_head_kv, 1, s.n_head));
  EMBER_RETURN_IF_ERROR(in("n_vocab", s.n_vocab, 1, 1 << 22));
  EMBER_RETURN_IF_ERROR(in("context", s.n_ctx, 1, 1 << 24));
  if (s.head_dim == 0 && s.n_embd % s.n_head != 0)
    return Status::errorf("n_embd {} is not a multiple of n_head {} (give head_dim)", s.n_embd, s.n_head);
  EMBER_RETURN_IF_ERROR(in("head_dim", s.head_size(), 2, 1024));
  if (s.n_head % s.n_head_kv != 0)
    return Status::errorf("n_head {} is not a multiple of n_head_kv {}", s.n_head, s.n_head_kv);
  if (s.head_size() % 2 != 0) return Status::errorf("head size {} is odd", s.head_size());
  if (s.sliding_window < 0) return Status::error("negative sliding window");
  if (s.n_rot < 0 || s.n_rot % 2 != 0 || s.rot_dims() > s.head_size())
    return Status::errorf("rotated dimensions {} must be even and at most the head size {}", s.n_rot, s.head_size());
  if (s.longrope && !spec->find(TensorRole::kRopeFactorsLong))
    return Status::errorf("LongRoPE factors are part of phi3 files, not {}", s.arch);
  if ((s.longrope || s.yarn_factor > 0) && !(s.rope_original_ctx > 0 && s.rope_original_ctx <= s.n_ctx))
    return Status::errorf("the original context {} must be in [1, context {}]", s.rope_original_ctx, s.n_ctx);
  if (s.yarn_factor < 0 || s.attn_temp_scale < 0) return Status::error("negative RoPE scaling parameter");
  if (s.n_expert != 0) {
    if (!spec->has_experts()) {
      std::string with;
      for (const ArchSpec* a : arch_specs())
        if (a->has_experts()) with += std::string(with.empty() ? "" : ", ") + a->name;
      return Status::errorf("experts are supported for {} only, not {}", with, s.arch);
    }
    EMBER_RETURN_IF_ERROR(in("n_expert", s.n_expert, 2, 512));
    EMBER_RETURN_IF_ERROR(in("n_expert_used", s.n_expert_used, 1, std::min(s.n_expert, kMaxExpertsUsed)));
    EMBER_RETURN_IF_ERROR(in("n_ff_exp", s.n_ff_exp, 0, 1 << 18));
    EMBER_RETURN_IF_ERROR(in("n_ff_shexp", s.n_ff_shexp, 0, 1 << 18));
    // Where the file gives the expert width as feed_forward_length (llama
    // as Mixtral, OLMoE), the two are one size.
    if (s.n_ff_exp > 0 && s.n_ff_exp != s.n_ff && !spec->gen.expert_ff_key)
      return Status::errorf("{} files give the expert width as the FFN width: n_ff_exp {} must equal n_ff {}", s.arch,
                            s.n_ff_exp, s.n_ff);
    if (s.n_ff_shexp > 0 && !spec->find(TensorRole::kFfnGateShexp))
      return Status::errorf("{} has no shared expert", s.arch);
  } else if (s.n_expert_used != 0) {
    return Status::error("n_expert_used needs n_expert");
  } else if (spec->has_experts() && spec->requires_tensor(TensorRole::kFfnGateInp) && !spec->find(TensorRole::kFfnGate)) {
    return Status::errorf("{} is a Mixture-of-Experts architecture: give n_expert", s.arch);
  }
  if (!(s.rope_base > 0) || !(s.norm_eps > 0)) return Status::error("rope base and norm epsilon must be positive");
  return Status::ok();
}

Status synthetic_bpe_vocab(const std::string& arch, int n_vocab, Metadata* out) {
  const ArchSpec* spec = find_arch(arch);
  if (!spec) return unsupported_arch_error(arch);
  const SyntheticVocab kind = spec->gen.vocab;
  const bool qwen = kind == SyntheticVocab::kQwen2, phi = kind == SyntheticVocab::kPhi3;
  const std::vector<std::string> specials =
      qwen  ? std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
      : phi ? std::vector<std::string>{"<unk>", "<s>", "</s>", "<|endoftext|>", "<|system|>", "<|user|>",
                                       "<|assistant|>", "<|end|>"}
            : std::vector<std::string>{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                       "<|end_header_id|>", "<|eot_id|>",      "<|eom_id|>"};
  const int n_special = static_cast<int>(specials.size());
  if (n_vocab < 256 + n_special)
    return Status::errorf("a synthetic byte-level vocabulary needs at least {} tokens, got {}", 256 + n_special,
                          n_vocab);
  const int n_merges = n_vocab - 256 - n_special;
  std::vector<std::string> tokens = byte_symbols();
  std::vector<std::string> merges;
  merges.reserve(n_merges);
  // Merges grow words one letter at a time: level 2 is (space or letter) +
  // lowercase letter, level L+1 extends each level-L token by a letter, in
  // creation order. Every merge joins two existing tokens into a new one.
  const std::string lower = "etaoinshrdlcumwfgypbvkjxqz";
  const std::string upper = "TAISOWHBCMFPDRLEGNYUKVJQXZ";
  const std::string space = "\xC4\xA0";  // GPT-2's stand-in for ' ' (U+0120)
  std::vector<std::string> level = {space};
  for (char c : lower) level.emplace_back(1, c);
  for (char c : upper) level.emplace_back(1, c);
  while (static_cast<int>(merges.size()) < n_merges) {
    std::vector<std::string> next;
    for (const std::string& x : level) {
      for (char c : lower) {
        if (static_cast<int>(merges.size()) >= n_merges) break;
        merges.push_back(x + " " + c);
        tokens.push_back(x + c);
        next.push_back(x + c);
      }
    }
    level = std::move(next);
  }
  std::vector<int32_t> types(tokens.size(), static_cast<int32_t>(1));  // normal
  for (const std::string& sp : specials) {
    tokens.push_back(sp);
    types.push_back(3);  // control
  }
  const int32_t first_special = n_vocab - n_special;
  out->set("tokenizer.ggml.model", Metadata::make_string("gpt2"));
  out->set("tokenizer.ggml.pre", Metadata::make_string(qwen ? "qwen2" : "llama-bpe"));
  out->set("tokenizer.ggml.tokens", Metadata::make_string_array(std::move(tokens)));
  out->set("tokenizer.ggml.token_type", Metadata::make_int_array(types));
  out->set("tokenizer.ggml.merges", Metadata::make_string_array(std::move(merges)));
  const auto u32 = [](int64_t v) { return Metadata::make_int(v, GgufType::kUint32); };
  if (qwen) {
    out->set("tokenizer.ggml.bos_token_id", u32(first_special));  // <|endoftext|>, not added
    out->set("tokenizer.ggml.eos_token_id", u32(first_special));
    out->set("tokenizer.ggml.padding_token_id", u32(first_special));
    out->set("tokenizer.ggml.add_bos_token", Metadata::make_bool(false));
  } else if (phi) {
    out->set("tokenizer.ggml.bos_token_id", u32(first_special + 1));      // <s>, not added
    out->set("tokenizer.ggml.eos_token_id", u32(first_special + 3));      // <|endoftext|>
    out->set("tokenizer.ggml.eot_token_id", u32(first_special + 7));      // <|end|>
    out->set("tokenizer.ggml.unknown_token_id", u32(first_special));      // <unk>
    out->set("tokenizer.ggml.add_bos_token", Metadata::make_bool(false));
  } else {
    out->set("tokenizer.ggml.bos_token_id", u32(first_special));      // <|begin_of_text|>
    out->set("tokenizer.ggml.eos_token_id", u32(first_special + 1));  // <|end_of_text|>
    out->set("tokenizer.ggml.eot_token_id", u32(first_special + 4));  // <|eot_id|>
    out->set("tokenizer.ggml.add_bos_token", Metadata::make_bool(true));
  }
  return Status::ok();
}

Result<GenModelStats> write_random_model(const GenModelShape& shape_in, const GenModelOptions& opts,
                                         const std::string& path, ThreadPool& pool) {
  GenModelShape shape = shape_in;
  if (!convertible_to(opts.type)) return Status::errorf("unsupported tensor type {}", dtype_name(opts.type));
  if (!(opts.weight_std > 0) || !std::isfinite(opts.weight_std)) return Status::error("invalid weight scale");
  Metadata vocab;
  if (opts.vocab) {
    const GgufValue* toks = opts.vocab->find("tokenizer.ggml.tokens");
    if (!toks || toks->elem_type != GgufType::kString || toks->count == 0)
      return Status::error("the vocabulary source has no tokenizer.ggml.tokens");
    shape.n_vocab = static_cast<int>(toks->count);
    vocab = *opts.vocab;
  }
  EMBER_RETURN_IF_ERROR(validate_gen_model_shape(shape));
  if (!opts.vocab) EMBER_RETURN_IF_ERROR(synthetic_bpe_vocab(shape.arch, shape.n_vocab, &vocab));

  GenModelStats stats;
  stats.n_vocab = shape.n_vocab;
  const std::vector<TensorPlan> tensors = plan_tensors(*find_arch(shape.arch), shape, opts.type, &stats);
  stats.n_tensors = static_cast<int64_t>(tensors.size());

  // Pass 1: the file layout, with every payload read from a zero mapping.
  size_t max_bytes = 0;
  for (const TensorPlan& t : tensors) max_bytes = std::max(max_bytes, t.nbytes);
  void* zeros = ::mmap(nullptr, max_bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (zeros == MAP_FAILED) return Status::errorf("cannot map {} bytes: {}", max_bytes, std::strerror(errno));
  GgufWriter w;
  write_metadata(shape, opts, vocab, &w);
  Status st;
  for (const TensorPlan& t : tensors) {
    st = w.add_tensor_ref(t.name, t.type, t.ne, zeros, t.nbytes);
    if (!st) break;
  }
  if (st) st = w.write(path);
  ::munmap(zeros, max_bytes);
  EMBER_RETURN_IF_ERROR(st);

  // Where each payload landed.
  std::map<std::string, uint64_t> offsets;
  {
    auto f = GgufFile::open(path);
    if (!f) {
      std::remove(path.c_str());
      return f.status();
    }
    for (const GgufTensorInfo& ti : (*f)->tensors()) offsets[ti.view.name] = (*f)->data_offset() + ti.offset;
    stats.file_bytes = (*f)->size();
  }

  // Pass 2: generate and write each tensor in place.
  const int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) {
    std::remove(path.c_str());
    return Status::errorf("{}: cannot open for writing: {}", path, std::strerror(errno));
  }
  uint64_t total = 0, done = 0;
  for (const TensorPlan& t : tensors) total += t.nbytes;
  for (const TensorPlan& t : tensors) {
    auto it = offsets.find(t.name);
    st = it == offsets.end() ? Status::errorf("tensor '{}' missing from the written file", t.name)
                             : generate_tensor(t, shape, opts, fd, it->second, pool);
    if (!st) break;
    done += t.nbytes;
    if (opts.progress) opts.progress(done, total);
  }
  if (::close(fd) != 0 && st) st = Status::errorf("close failed: {}", std::strerror(errno));
  if (!st) {
    std::remove(path.c_str());
    return st.with_context(path);
  }
  return stats;
}

}  // namespace ember
