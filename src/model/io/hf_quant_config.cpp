// config.json's quantization_config for GPTQ, AWQ and compressed-tensors
// checkpoints: parsed, validated, unsupported variants named; see
// hf_quant.h. Field names follow the writers: AutoGPTQ / GPTQModel /
// optimum (bits, group_size, desc_act, sym, checkpoint_format), AutoAWQ /
// transformers AwqConfig (bits or w_bit, group_size or q_group_size,
// zero_point, version), compressed-tensors (format, quantization_status,
// config_groups.*.weights / input_activations / output_activations).
#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/io/hf_config.h"
#include "model/io/hf_quant.h"

namespace ember {
namespace {

using json = nlohmann::json;

// Typed access to one object of the config; errors name "<path>.<key>".
class Fields {
 public:
  Fields(const json& obj, std::string path, const std::string& file) : obj_(obj), path_(std::move(path)), file_(file) {}

  const json* get(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string where(const char* key) const { return fmt::format("{}: {}.{}", file_, path_, key); }

  Status get_int(const char* key, int64_t* out, std::optional<int64_t> def) const {
    const json* j = get(key);
    if (!j) {
      if (!def) return Status::errorf("{} is missing", where(key));
      *out = *def;
      return Status::ok();
    }
    if (!j->is_number_integer()) return Status::errorf("{} must be an integer", where(key));
    *out = j->get<int64_t>();
    return Status::ok();
  }
  Status get_bool(const char* key, bool* out, bool def) const {
    const json* j = get(key);
    if (!j) {
      *out = def;
      return Status::ok();
    }
    if (!j->is_boolean()) return Status::errorf("{} must be true or false", where(key));
    *out = j->get<bool>();
    return Status::ok();
  }
  // A string, lower-cased when `lower`.
  Status get_string(const char* key, std::string* out, std::optional<std::string> def, bool lower = false) const {
    const json* j = get(key);
    if (!j) {
      if (!def) return Status::errorf("{} is missing", where(key));
      *out = *def;
      return Status::ok();
    }
    if (!j->is_string()) return Status::errorf("{} must be a string", where(key));
    *out = j->get<std::string>();
    if (lower)
      for (char& c : *out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return Status::ok();
  }
  // An integer key that may be spelled two ways (AutoAWQ's w_bit / bits).
  Status get_int_either(const char* a, const char* b, int64_t* out, std::optional<int64_t> def) const {
    return get(a) || !get(b) ? get_int(a, out, def) : get_int(b, out, def);
  }
  const std::string& path() const { return path_; }

 private:
  const json& obj_;
  std::string path_;
  const std::string& file_;
};

Status check_group_size(const Fields& f, const char* key, int64_t g) {
  if (g == -1 || g > 0) return Status::ok();
  return Status::errorf("{} = {} is not supported (a positive group size, or -1 for per-channel)", f.where(key), g);
}

std::string group_text(int64_t g) { return g < 0 ? std::string("per-channel") : fmt::format("group {}", g); }

Status parse_gptq(const Fields& f, HfQuantConfig* c) {
  int64_t bits = 0;
  EMBER_RETURN_IF_ERROR(f.get_int("bits", &bits, std::nullopt));
  if (bits != 4 && bits != 8)
    return Status::errorf("{} = {} is not supported for gptq (supported: 4, 8)", f.where("bits"), bits);
  c->bits = static_cast<int>(bits);
  EMBER_RETURN_IF_ERROR(f.get_int("group_size", &c->group_size, 128));
  EMBER_RETURN_IF_ERROR(check_group_size(f, "group_size", c->group_size));
  EMBER_RETURN_IF_ERROR(f.get_bool("desc_act", &c->desc_act, false));
  EMBER_RETURN_IF_ERROR(f.get_bool("sym", &c->sym, true));
  if (!c->sym && bits == 8)
    return Status::errorf("{} = false with bits = 8 (asymmetric 8-bit) is not supported", f.where("sym"));
  std::string fmt_name;
  const char* fmt_key = f.get("checkpoint_format") || !f.get("format") ? "checkpoint_format" : "format";
  EMBER_RETURN_IF_ERROR(f.get_string(fmt_key, &fmt_name, std::string("gptq"), true));
  if (fmt_name != "gptq" && fmt_name != "gptq_v2")
    return Status::errorf("{} = '{}' is not supported (supported: gptq, gptq_v2)", f.where(fmt_key), fmt_name);
  c->gptq_v2 = fmt_name == "gptq_v2";
  std::string pack;
  EMBER_RETURN_IF_ERROR(f.get_string("pack_dtype", &pack, std::string("int32"), true));
  if (pack != "int32") return Status::errorf("{} = '{}' is not supported (supported: int32)", f.where("pack_dtype"), pack);
  if (const json* d = f.get("dynamic"); d && !(d->is_object() && d->empty()))
    return Status::errorf("{} (per-module overrides) is not supported", f.where("dynamic"));
  c->summary = fmt::format("gptq {}-bit, {}, {}{}, {}", bits, group_text(c->group_size), c->sym ? "sym" : "asym",
                           c->desc_act ? ", desc_act" : "", c->gptq_v2 ? "gptq_v2 zeros" : "v1 zeros (stored zero - 1)");
  return Status::ok();
}

Status parse_awq(const Fields& f, HfQuantConfig* c) {
  std::string version;
  EMBER_RETURN_IF_ERROR(f.get_string("version", &version, std::string("gemm"), true));
  if (version != "gemm")
    return Status::errorf("{} = '{}' is not supported (supported: gemm)", f.where("version"), version);
  int64_t bits = 0;
  EMBER_RETURN_IF_ERROR(f.get_int_either("bits", "w_bit", &bits, std::nullopt));
  if (bits != 4) return Status::errorf("{} = {} is not supported for awq (supported: 4)", f.where("bits"), bits);
  c->bits = 4;
  EMBER_RETURN_IF_ERROR(f.get_int_either("group_size", "q_group_size", &c->group_size, 128));
  EMBER_RETURN_IF_ERROR(check_group_size(f, "group_size", c->group_size));
  bool zero_point = true;
  EMBER_RETURN_IF_ERROR(f.get_bool("zero_point", &zero_point, true));
  if (!zero_point) return Status::errorf("{} = false is not supported (AWQ GEMM stores zero points)", f.where("zero_point"));
  c->sym = false;
  c->summary = fmt::format("awq gemm 4-bit, {}, zero points", group_text(c->group_size));
  return Status::ok();
}

// One quantization args object of compressed-tensors (weights or
// input_activations).
struct CtArgs {
  int64_t bits = 0;
  std::string type, strategy;
  bool sym = true, dynamic = false;
  int64_t group_size = -1;
};

Status parse_ct_args(const Fields& f, CtArgs* a) {
  EMBER_RETURN_IF_ERROR(f.get_string("type", &a->type, std::string("int"), true));
  EMBER_RETURN_IF_ERROR(f.get_int("num_bits", &a->bits, std::nullopt));
  EMBER_RETURN_IF_ERROR(f.get_bool("symmetric", &a->sym, true));
  EMBER_RETURN_IF_ERROR(f.get_string("strategy", &a->strategy, std::string("tensor"), true));
  if (const json* d = f.get("dynamic")) a->dynamic = d->is_boolean() ? d->get<bool>() : true;  // "local" counts as dynamic
  if (a->strategy == "group") {
    EMBER_RETURN_IF_ERROR(f.get_int("group_size", &a->group_size, std::nullopt));
    if (a->group_size <= 0)
      return Status::errorf("{} = {} is not supported (must be positive)", f.where("group_size"), a->group_size);
  }
  if (a->type != "int")
    return Status::errorf("{} = '{}' is not supported (supported: int)", f.where("type"), a->type);
  return Status::ok();
}

Status parse_ct(const Fields& f, const std::string& file, HfQuantConfig* c) {
  EMBER_RETURN_IF_ERROR(f.get_string("format", &c->ct_format, std::nullopt, true));
  if (c->ct_format != "pack-quantized" && c->ct_format != "int-quantized" && c->ct_format != "naive-quantized")
    return Status::errorf("{} = '{}' is not supported (supported: pack-quantized, int-quantized, naive-quantized)",
                          f.where("format"), c->ct_format);
  std::string status;
  EMBER_RETURN_IF_ERROR(f.get_string("quantization_status", &status, std::string("compressed"), true));
  if (status != "compressed")
    return Status::errorf("{} = '{}' is not supported (supported: compressed)", f.where("quantization_status"), status);
  if (f.get("kv_cache_scheme"))
    return Status::errorf("{} (quantized KV cache) is not supported", f.where("kv_cache_scheme"));
  const json* groups = f.get("config_groups");
  if (!groups || !groups->is_object() || groups->empty())
    return Status::errorf("{} must be a non-empty object", f.where("config_groups"));
  bool first = true;
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    const std::string gpath = f.path() + ".config_groups." + it.key();
    if (!it.value().is_object()) return Status::errorf("{}: {} must be an object", file, gpath);
    const Fields g(it.value(), gpath, file);
    const json* w = g.get("weights");
    if (!w || !w->is_object()) return Status::errorf("{} must be an object", g.where("weights"));
    const Fields wf(*w, gpath + ".weights", file);
    CtArgs wa;
    EMBER_RETURN_IF_ERROR(parse_ct_args(wf, &wa));
    const bool packed = c->ct_format == "pack-quantized";
    if (packed ? (wa.bits != 4 && wa.bits != 8) : wa.bits != 8)
      return Status::errorf("{} = {} is not supported for {} (supported: {})", wf.where("num_bits"), wa.bits,
                            c->ct_format, packed ? "4, 8" : "8");
    if (!wa.sym && wa.bits == 8)
      return Status::errorf("{} = false with num_bits = 8 (asymmetric 8-bit) is not supported", wf.where("symmetric"));
    if (wa.strategy != "group" && wa.strategy != "channel" && wa.strategy != "tensor")
      return Status::errorf("{} = '{}' is not supported (supported: group, channel, tensor)", wf.where("strategy"),
                            wa.strategy);
    if (wa.dynamic) return Status::errorf("{} = true is not supported for weights", wf.where("dynamic"));
    if (g.get("output_activations"))
      return Status::errorf("{} is not supported (output quantization)", g.where("output_activations"));
    bool dyn_act = false;
    if (const json* ia = g.get("input_activations")) {
      if (!ia->is_object()) return Status::errorf("{} must be an object", g.where("input_activations"));
      const Fields af(*ia, gpath + ".input_activations", file);
      CtArgs aa;
      EMBER_RETURN_IF_ERROR(parse_ct_args(af, &aa));
      if (aa.bits != 8)
        return Status::errorf("{} = {} is not supported (supported: 8)", af.where("num_bits"), aa.bits);
      if (!aa.dynamic)
        return Status::errorf("{} = false (static activation scales) is not supported", af.where("dynamic"));
      if (!aa.sym) return Status::errorf("{} = false is not supported", af.where("symmetric"));
      if (aa.strategy != "token" && aa.strategy != "tensor")
        return Status::errorf("{} = '{}' is not supported (supported: token, tensor)", af.where("strategy"),
                              aa.strategy);
      dyn_act = true;
    }
    if (first) {
      c->bits = static_cast<int>(wa.bits);
      c->sym = wa.sym;
      c->group_size = wa.strategy == "group" ? wa.group_size : -1;
      c->ct_dynamic_activations = dyn_act;
      first = false;
    } else if (wa.bits != c->bits || wa.sym != c->sym || dyn_act != c->ct_dynamic_activations) {
      return Status::errorf("{}: {} differs from the first group in num_bits, symmetric or input_activations "
                            "(mixed schemes are not supported)",
                            file, gpath);
    }
  }
  c->summary = fmt::format("compressed-tensors {} {}-bit weights, {}, {}{}", c->ct_format, c->bits,
                           group_text(c->group_size), c->sym ? "sym" : "asym",
                           c->ct_dynamic_activations
                               ? "; int8 dynamic activations (ember quantizes activations per 32-element block)"
                               : "");
  return Status::ok();
}

}  // namespace

Result<std::optional<HfQuantConfig>> parse_hf_quant_config(const std::string& text, const std::string& name) {
  json root;
  EMBER_RETURN_IF_ERROR(parse_hf_config_json(text, name, &root));
  auto it = root.find("quantization_config");
  if (it == root.end() || it->is_null()) return std::optional<HfQuantConfig>();
  if (!it->is_object()) return Status::errorf("{}: quantization_config must be an object", name);
  const Fields f(*it, "quantization_config", name);
  std::string method;
  EMBER_RETURN_IF_ERROR(f.get_string("quant_method", &method, std::nullopt, true));
  // gpt-oss's MXFP4 experts (_blocks / _scales): repacked by the
  // architecture's ArchSpec::hf_rearrange; the other weights are plain.
  if (method == "mxfp4") return std::optional<HfQuantConfig>();
  HfQuantConfig c;
  if (method == "gptq") {
    c.method = HfQuantMethod::kGptq;
    EMBER_RETURN_IF_ERROR(parse_gptq(f, &c));
  } else if (method == "awq") {
    c.method = HfQuantMethod::kAwq;
    EMBER_RETURN_IF_ERROR(parse_awq(f, &c));
  } else if (method == "compressed-tensors") {
    c.method = HfQuantMethod::kCompressedTensors;
    EMBER_RETURN_IF_ERROR(parse_ct(f, name, &c));
  } else {
    return Status::errorf("{} = '{}' is not supported (supported: gptq, awq, compressed-tensors, mxfp4 for gpt-oss)",
                          f.where("quant_method"), method);
  }
  return std::optional<HfQuantConfig>(std::move(c));
}

}  // namespace ember
