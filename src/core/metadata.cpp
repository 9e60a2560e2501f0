// GgufValue / Metadata helpers; see metadata.h.
#include "core/metadata.h"

namespace ember {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

bool gguf_type_is_int(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kUint16: case GgufType::kInt16:
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kUint64: case GgufType::kInt64:
    case GgufType::kBool:
      return true;
    default:
      return false;
  }
}

bool gguf_type_is_float(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

bool GgufValue::is_int() const { return gguf_type_is_int(type); }
bool GgufValue::is_float() const { return gguf_type_is_float(type); }

// ---------------------------------------------------------------------------
// Metadata

const GgufValue* Metadata::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &kv_[it->second].second;
}

void Metadata::set(const std::string& key, GgufValue v) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    kv_[it->second].second = std::move(v);
    return;
  }
  index_.emplace(key, kv_.size());
  kv_.emplace_back(key, std::move(v));
}

std::optional<int64_t> Metadata::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v || !v->is_int()) return std::nullopt;
  if (v->type == GgufType::kUint64 && v->i < 0) return std::nullopt;  // above INT64_MAX
  return v->i;
}

std::optional<double> Metadata::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->type == GgufType::kUint64) return static_cast<double>(static_cast<uint64_t>(v->i));
  if (v->is_int()) return static_cast<double>(v->i);
  return std::nullopt;
}

std::optional<bool> Metadata::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufType::kBool) return std::nullopt;
  return v->i != 0;
}

const std::string* Metadata::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufType::kString) return nullptr;
  return &v->str;
}

GgufValue Metadata::make_string(std::string s) {
  GgufValue v;
  v.type = GgufType::kString;
  v.str = std::move(s);
  return v;
}

GgufValue Metadata::make_int(int64_t x, GgufType t) {
  GgufValue v;
  v.type = gguf_type_is_int(t) ? t : GgufType::kInt64;
  v.i = x;
  return v;
}

GgufValue Metadata::make_float(double x, GgufType t) {
  GgufValue v;
  v.type = gguf_type_is_float(t) ? t : GgufType::kFloat32;
  v.f = x;
  return v;
}

GgufValue Metadata::make_bool(bool b) {
  GgufValue v;
  v.type = GgufType::kBool;
  v.i = b ? 1 : 0;
  return v;
}

GgufValue Metadata::make_string_array(std::vector<std::string> v) {
  GgufValue a;
  a.type = GgufType::kArray;
  a.elem_type = GgufType::kString;
  a.count = v.size();
  a.strings = std::move(v);
  return a;
}

GgufValue Metadata::make_int_array(const std::vector<int32_t>& v, GgufType t) {
  GgufValue a;
  a.type = GgufType::kArray;
  a.elem_type = t;
  a.count = v.size();
  a.ints.assign(v.begin(), v.end());
  return a;
}

}  // namespace ember
