// KV-cache storage flags; see kv_options.h.
#include "cli/kv_options.h"

#include <fmt/format.h>

namespace ember::cli {

void KvOptions::add_to(ArgParser& p) {
  p.option("--kv-cache-dtype", &both, "T", "KV cache storage for K and V: f32 (default), f16, bf16, q8, q4");
  p.option("-ctk,--kv-cache-dtype-k", &k, "T", "KV cache storage for K (overrides --kv-cache-dtype)");
  p.option("-ctv,--kv-cache-dtype-v", &v, "T", "KV cache storage for V (overrides --kv-cache-dtype)");
}

Result<KvTypes> KvOptions::to_types(const ModelConfig& cfg) const {
  KvTypes t;
  auto parse = [](const std::string& s, const char* flag, KvType* out) -> Status {
    if (s.empty()) return Status::ok();
    auto r = parse_kv_type(s);
    if (!r) return Status::errorf("{}: {}", flag, r.status().message());
    *out = r.value();
    return Status::ok();
  };
  EMBER_RETURN_IF_ERROR(parse(both, "--kv-cache-dtype", &t.k));
  t.v = t.k;
  EMBER_RETURN_IF_ERROR(parse(k, "--kv-cache-dtype-k", &t.k));
  EMBER_RETURN_IF_ERROR(parse(v, "--kv-cache-dtype-v", &t.v));
  EMBER_RETURN_IF_ERROR(kv_type_check(t.k, cfg.head_dim));
  EMBER_RETURN_IF_ERROR(kv_type_check(t.v, cfg.head_dim_v));
  return t;
}

std::string kv_types_name(KvTypes t) {
  if (t.k == t.v) return kv_type_name(t.k);
  return fmt::format("k={},v={}", kv_type_name(t.k), kv_type_name(t.v));
}

}  // namespace ember::cli
