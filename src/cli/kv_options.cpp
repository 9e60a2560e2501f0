// KV-cache storage flags; see kv_options.h.
#include "cli/kv_options.h"

#include <fmt/format.h>

#include "kernels/hadamard.h"

namespace ember::cli {

void KvOptions::add_to(ArgParser& p) {
  p.option("--kv-cache-dtype", &both, "T",
           fmt::format("KV cache storage for K and V: f32, f16, bf16, q8, q4, q4c (= K q4c, V q4: the closest 4-bit "
                       "cache) (default {})",
                       kv_type_name(kDefaultKvType)));
  p.option("-ctk,--kv-cache-dtype-k", &k, "T",
           "KV cache storage for K (overrides --kv-cache-dtype); also q4c: 4-bit per channel over 16 tokens (KIVI)");
  p.option("-ctv,--kv-cache-dtype-v", &v, "T", "KV cache storage for V (overrides --kv-cache-dtype)");
  p.option("--kv-rotation", &rotation, "R",
           "Hadamard rotation of cached K/V heads: auto (default: rotate what is stored in q8 / q4, not q4c keys), "
           "hadamard, none");
}

Result<KvTypes> KvOptions::to_types(const ModelConfig& cfg) const {
  KvTypes t;
  t.k = t.v = kDefaultKvType;
  auto parse = [](const std::string& s, const char* flag, KvType* out) -> Status {
    if (s.empty()) return Status::ok();
    auto r = parse_kv_type(s);
    if (!r) return Status::errorf("{}: {}", flag, r.status().message());
    *out = r.value();
    return Status::ok();
  };
  EMBER_RETURN_IF_ERROR(parse(both, "--kv-cache-dtype", &t.k));
  // q4c for both: KIVI's pairing, keys per channel (q4c), values per token (q4).
  t.v = kv_token_grouped(t.k) ? KvType::kQ4 : t.k;
  EMBER_RETURN_IF_ERROR(parse(k, "--kv-cache-dtype-k", &t.k));
  EMBER_RETURN_IF_ERROR(parse(v, "--kv-cache-dtype-v", &t.v));
  if (kv_token_grouped(t.v))
    return Status::error(
        "--kv-cache-dtype-v: q4c is a key format (keys per channel, values per token: -ctk q4c -ctv q4)");
  EMBER_RETURN_IF_ERROR(kv_type_check(t.k, cfg.head_dim));
  EMBER_RETURN_IF_ERROR(kv_type_check(t.v, cfg.head_dim_v));
  EMBER_RETURN_IF_ERROR(apply_kv_rotation(rotation, cfg, &t));
  return t;
}

Status apply_kv_rotation(const std::string& rotation, const ModelConfig& cfg, KvTypes* t) {
  const std::string r = rotation.empty() ? "auto" : rotation;
  if (r == "auto") {
    // q4c keys stay unrotated: their scales are per channel, and a rotation
    // mixes the channels (docs/performance.md, "KIVI keys").
    auto quantized = [](KvType d) { return d == KvType::kQ8 || d == KvType::kQ4; };
    t->rot_k = quantized(t->k) ? KvRotation::kHadamard : KvRotation::kNone;
    t->rot_v = quantized(t->v) ? KvRotation::kHadamard : KvRotation::kNone;
  } else if (r == "hadamard") {
    t->rot_k = t->rot_v = KvRotation::kHadamard;
  } else if (r == "none") {
    t->rot_k = t->rot_v = KvRotation::kNone;
  } else {
    return Status::errorf("--kv-rotation: '{}' is not auto, hadamard or none", rotation);
  }
  if (t->rot_k == KvRotation::kHadamard)
    if (Status st = hadamard_check(cfg.head_dim); !st)
      return Status::errorf("--kv-rotation: head dim {}: {}", cfg.head_dim, st.message());
  if (t->rot_v == KvRotation::kHadamard)
    if (Status st = hadamard_check(cfg.head_dim_v); !st)
      return Status::errorf("--kv-rotation: V head dim {}: {}", cfg.head_dim_v, st.message());
  return Status::ok();
}

std::string kv_types_name(KvTypes t) {
  std::string s = t.k == t.v ? std::string(kv_type_name(t.k))
                             : fmt::format("k={},v={}", kv_type_name(t.k), kv_type_name(t.v));
  const bool rk = t.rot_k == KvRotation::kHadamard, rv = t.rot_v == KvRotation::kHadamard;
  if (rk && rv) s += "+hadamard";
  else if (rk) s += "+hadamard-k";
  else if (rv) s += "+hadamard-v";
  return s;
}

}  // namespace ember::cli
