// GGUF reader: the validating parser. Every
// count, length, type id, dimension, offset and size read from the file is
// checked against the bytes that remain before it is used, so a corrupt or
// truncated file yields a one-line error (path, field, reason) instead of a
// crash, a hang or a huge allocation. The writer lives in gguf_writer.cpp.
#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "model/io/gguf.h"

#include "quant/sparse.h"

namespace ember {

// ---------------------------------------------------------------------------
// Parser

namespace {

constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint64_t kMaxKeyLength = 65535;   // metadata keys
constexpr uint64_t kMaxNameLength = 65535;  // tensor names
constexpr int kMaxArrayDepth = 8;           // nested arrays
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
constexpr int kMaxDims = 4;

// Bytes a value of type `t` occupies at the least (used to bound counts
// before anything is allocated).
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;   // length
    case GgufType::kArray: return 12;   // element type + count
  }
  return 1;
}

bool gguf_type_valid(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

}  // namespace

class GgufParser {
 public:
  GgufParser(const uint8_t* data, size_t size, const std::string& name) : p_(data), size_(size), name_(name) {}

  Status run(GgufFile* out);

 private:
  size_t left() const { return size_ - pos_; }

  // Low-level reads: on failure they set err_ (the reason, with the offset)
  // and return false; callers add the context and call fail().
  bool read_raw(void* dst, size_t n, const char* what) {
    if (n > left()) {
      err_ = fmt::format("truncated {} at offset {} (needs {} bytes, {} left)", what, pos_, n, left());
      return false;
    }
    std::memcpy(dst, p_ + pos_, n);
    pos_ += n;
    return true;
  }
  bool read_u32(uint32_t* v, const char* what) { return read_raw(v, 4, what); }
  bool read_u64(uint64_t* v, const char* what) { return read_raw(v, 8, what); }
  bool read_string(std::string* s, const char* what, uint64_t max_len) {
    uint64_t n = 0;
    size_t at = pos_;
    if (!read_u64(&n, what)) return false;
    if (n > left()) {
      err_ = fmt::format("{} {} at offset {} exceeds the {} bytes left in the file", what, n, at, left());
      return false;
    }
    if (n > max_len) {
      err_ = fmt::format("{} {} at offset {} exceeds the limit of {}", what, n, at, max_len);
      return false;
    }
    s->assign(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return true;
  }
  bool read_scalar(GgufValue* v, GgufType t);
  bool read_value(GgufValue* v, GgufType t, int depth);
  bool read_array(GgufValue* v, int depth);

  Status fail(const std::string& ctx) const { return Status::errorf("{}: {}: {}", name_, ctx, err_); }
  Status fail_msg(const std::string& msg) const { return Status::errorf("{}: {}", name_, msg); }

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& name_;
  std::string err_;
};

bool GgufParser::read_scalar(GgufValue* v, GgufType t) {
  uint8_t b[8] = {0};
  const size_t n = min_encoded_size(t);
  if (!read_raw(b, n, "value")) return false;
  switch (t) {
    case GgufType::kUint8: v->i = b[0]; break;
    case GgufType::kInt8: v->i = static_cast<int8_t>(b[0]); break;
    case GgufType::kBool: v->i = b[0] != 0; break;
    case GgufType::kUint16: { uint16_t x; std::memcpy(&x, b, 2); v->i = x; break; }
    case GgufType::kInt16: { int16_t x; std::memcpy(&x, b, 2); v->i = x; break; }
    case GgufType::kUint32: { uint32_t x; std::memcpy(&x, b, 4); v->i = x; break; }
    case GgufType::kInt32: { int32_t x; std::memcpy(&x, b, 4); v->i = x; break; }
    case GgufType::kUint64: { uint64_t x; std::memcpy(&x, b, 8); v->i = static_cast<int64_t>(x); break; }
    case GgufType::kInt64: { int64_t x; std::memcpy(&x, b, 8); v->i = x; break; }
    case GgufType::kFloat32: { float x; std::memcpy(&x, b, 4); v->f = x; break; }
    case GgufType::kFloat64: { double x; std::memcpy(&x, b, 8); v->f = x; break; }
    default: err_ = "internal: not a scalar type"; return false;
  }
  return true;
}

bool GgufParser::read_value(GgufValue* v, GgufType t, int depth) {
  v->type = t;
  if (t == GgufType::kString) return read_string(&v->str, "string length", std::numeric_limits<uint64_t>::max());
  if (t == GgufType::kArray) return read_array(v, depth);
  return read_scalar(v, t);
}

bool GgufParser::read_array(GgufValue* v, int depth) {
  uint32_t et = 0;
  uint64_t n = 0;
  const size_t at = pos_;
  if (!read_u32(&et, "array element type") || !read_u64(&n, "array length")) return false;
  if (!gguf_type_valid(et)) {
    err_ = fmt::format("invalid array element type {} at offset {}", et, at);
    return false;
  }
  const GgufType t = static_cast<GgufType>(et);
  if (t == GgufType::kArray && depth >= kMaxArrayDepth) {
    err_ = fmt::format("arrays nested deeper than {} levels at offset {}", kMaxArrayDepth, at);
    return false;
  }
  const uint64_t min_size = min_encoded_size(t);
  if (n > left() / min_size) {
    err_ = fmt::format("array of {} {} elements at offset {} needs at least {} bytes per element, only {} bytes left",
                       n, gguf_type_name(t), at, min_size, left());
    return false;
  }
  v->elem_type = t;
  v->count = n;
  const size_t count = static_cast<size_t>(n);
  if (gguf_type_is_int(t)) {
    v->ints.resize(count);
    GgufValue tmp;
    for (size_t k = 0; k < count; ++k) {
      if (!read_scalar(&tmp, t)) return false;  // cannot fail: length checked above
      v->ints[k] = tmp.i;
    }
  } else if (gguf_type_is_float(t)) {
    v->nums.resize(count);
    GgufValue tmp;
    for (size_t k = 0; k < count; ++k) {
      if (!read_scalar(&tmp, t)) return false;
      v->nums[k] = tmp.f;
    }
  } else if (t == GgufType::kString) {
    v->strings.resize(count);
    for (size_t k = 0; k < count; ++k) {
      if (!read_string(&v->strings[k], "string length", std::numeric_limits<uint64_t>::max())) {
        err_ = fmt::format("element {}: {}", k, err_);
        return false;
      }
    }
  } else {  // nested arrays
    v->items.resize(count);
    for (size_t k = 0; k < count; ++k) {
      v->items[k].type = GgufType::kArray;
      if (!read_array(&v->items[k], depth + 1)) {
        err_ = fmt::format("element {}: {}", k, err_);
        return false;
      }
    }
  }
  return true;
}

Status GgufParser::run(GgufFile* out) {
  out->data_ = p_;
  out->size_ = size_;
  if (size_ < 4 || std::memcmp(p_, kMagic, 4) != 0) {
    if (size_ < 4) return fail_msg(fmt::format("not a GGUF file (only {} bytes)", size_));
    return fail_msg(fmt::format("not a GGUF file (bad magic {:02x} {:02x} {:02x} {:02x})", p_[0], p_[1], p_[2], p_[3]));
  }
  pos_ = 4;
  uint32_t version = 0;
  if (!read_u32(&version, "version")) return fail("header");
  if (version == 1) return fail_msg("GGUF version 1 is not supported (only versions 2 and 3)");
  if (version != 2 && version != 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped == 2 || swapped == 3)
      return fail_msg(fmt::format("big-endian GGUF files are not supported (version field {:#x})", version));
    return fail_msg(fmt::format("unsupported GGUF version {} (only versions 2 and 3)", version));
  }
  out->version_ = version;

  uint64_t n_tensors = 0, n_kv = 0;
  if (!read_u64(&n_tensors, "tensor count") || !read_u64(&n_kv, "metadata count")) return fail("header");
  // Each metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes,
  // each tensor info 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset).
  if (n_kv > left() / 13)
    return fail_msg(fmt::format("header: metadata count {} is impossible for a file of {} bytes", n_kv, size_));
  if (n_tensors > left() / 32)
    return fail_msg(fmt::format("header: tensor count {} is impossible for a file of {} bytes", n_tensors, size_));

  // Metadata.
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    if (!read_string(&key, "key length", kMaxKeyLength)) return fail(fmt::format("metadata entry {}", k));
    if (key.empty()) return fail_msg(fmt::format("metadata entry {}: empty key", k));
    if (out->meta_.find(key)) return fail_msg(fmt::format("duplicate metadata key '{}'", key));
    const std::string ctx = fmt::format("metadata key '{}'", key);
    uint32_t type = 0;
    const size_t type_at = pos_;
    if (!read_u32(&type, "value type")) return fail(ctx);
    if (!gguf_type_valid(type)) return fail_msg(fmt::format("{}: invalid value type {} at offset {}", ctx, type, type_at));
    GgufValue v;
    if (!read_value(&v, static_cast<GgufType>(type), 0)) return fail(ctx);
    out->meta_.set(key, std::move(v));
  }

  if (const GgufValue* a = out->meta_.find("general.alignment")) {
    const bool ok_type = a->is_int() && a->type != GgufType::kBool;
    const uint64_t al = static_cast<uint64_t>(a->i);
    if (!ok_type || a->i <= 0 || (al & (al - 1)) != 0 || al > kMaxAlignment)
      return fail_msg(fmt::format("metadata key 'general.alignment': must be a power of two in 1..{} (got {} {})",
                                  kMaxAlignment, gguf_type_name(a->type), a->is_int() ? std::to_string(a->i) : "value"));
    out->alignment_ = al;
  } else {
    out->alignment_ = 32;
  }
  const uint64_t align = out->alignment_;

  // Tensor infos.
  out->tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo info;
    TensorView& t = info.view;
    if (!read_string(&t.name, "name length", kMaxNameLength)) return fail(fmt::format("tensor info {}", k));
    if (t.name.empty()) return fail_msg(fmt::format("tensor info {}: empty name", k));
    if (out->tensor_index_.count(t.name)) return fail_msg(fmt::format("duplicate tensor name '{}'", t.name));
    const std::string ctx = fmt::format("tensor '{}'", t.name);
    uint32_t n_dims = 0;
    if (!read_u32(&n_dims, "n_dims")) return fail(ctx);
    if (n_dims < 1 || n_dims > kMaxDims)
      return fail_msg(fmt::format("{}: n_dims {} is out of range (1..{})", ctx, n_dims, kMaxDims));
    t.n_dims = static_cast<int>(n_dims);
    uint64_t nelem = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      if (!read_u64(&ne, "dimension")) return fail(ctx);
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return fail_msg(fmt::format("{}: dimension ne[{}] = {} is out of range", ctx, d, ne));
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / nelem)
        return fail_msg(fmt::format("{}: element count overflows (ne[{}] = {})", ctx, d, ne));
      nelem *= ne;
      t.ne[d] = static_cast<int64_t>(ne);
    }
    uint32_t type_id = 0;
    if (!read_u32(&type_id, "type")) return fail(ctx);
    if (!dtype_valid(type_id)) return fail_msg(fmt::format("{}: unknown or unsupported tensor type id {}", ctx, type_id));
    t.type = static_cast<DType>(type_id);
    const DTypeTraits* tr = dtype_traits(t.type);
    if (t.ne[0] % tr->block_size != 0)
      return fail_msg(fmt::format("{}: ne[0] = {} is not a multiple of the {} block size {}", ctx, t.ne[0], tr->name,
                                  tr->block_size));
    const uint64_t nblocks = nelem / static_cast<uint64_t>(tr->block_size);
    if (nblocks > std::numeric_limits<uint64_t>::max() / tr->type_size ||
        nblocks * tr->type_size > std::numeric_limits<size_t>::max())
      return fail_msg(fmt::format("{}: byte size overflows (shape {})", ctx, t.shape_string()));
    t.nbytes = static_cast<size_t>(nblocks * tr->type_size);
    if (!read_u64(&info.offset, "data offset")) return fail(ctx);
    if (info.offset % align != 0)
      return fail_msg(fmt::format("{}: data offset {} is not a multiple of the alignment {}", ctx, info.offset, align));
    out->tensor_index_.emplace(t.name, out->tensors_.size());
    out->tensors_.push_back(std::move(info));
  }

  // Data section: starts at the next multiple of the alignment. A file
  // without tensors may end before it (data_offset() is then the file size;
  // with tensors, data_start <= size is implied by the checks below).
  const uint64_t pad = (align - pos_ % align) % align;
  const uint64_t data_start = static_cast<uint64_t>(pos_) + pad;
  out->data_offset_ = static_cast<size_t>(std::min<uint64_t>(data_start, size_));
  const uint64_t avail = data_start <= size_ ? size_ - data_start : 0;
  for (GgufTensorInfo& info : out->tensors_) {
    TensorView& t = info.view;
    if (info.offset > avail || t.nbytes > avail - info.offset) {
      if (info.offset > std::numeric_limits<uint64_t>::max() - data_start)
        return fail_msg(fmt::format("tensor '{}': data offset {} extends past end of file (size {})", t.name,
                                    info.offset, size_));
      return fail_msg(fmt::format("tensor '{}': data [offset {}, size {}] extends past end of file (size {})", t.name,
                                  data_start + info.offset, t.nbytes, size_));
    }
    t.data = p_ + data_start + info.offset;
    if (dtype_is_sparse(t.type)) {  // masks against the capacity, values in range (quant/sparse.h)
      const Status st = validate_sparse_rows(t.type, t.data, t.nrows(), t.ne[0]);
      if (!st.is_ok()) return fail_msg(fmt::format("tensor '{}' ({}): {}", t.name, dtype_name(t.type), st.message()));
    }
  }

  // Tensors must not overlap.
  std::vector<const GgufTensorInfo*> order;
  order.reserve(out->tensors_.size());
  for (const GgufTensorInfo& info : out->tensors_) order.push_back(&info);
  std::sort(order.begin(), order.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensorInfo* a = order[k - 1];
    const GgufTensorInfo* b = order[k];
    if (a->offset + a->view.nbytes > b->offset)  // both in bounds: no overflow
      return fail_msg(fmt::format("tensors '{}' [offset {}, size {}] and '{}' [offset {}] overlap", a->view.name,
                                  data_start + a->offset, a->view.nbytes, b->view.name, data_start + b->offset));
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------
// GgufFile

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size, const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  GgufParser parser(data, size, f->path_);
  EMBER_RETURN_IF_ERROR(parser.run(f.get()));
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  Result<MappedFile> mf = MappedFile::open(path);
  if (!mf) return mf.status();
  MappedFile file = std::move(mf.value());
  // The mapping does not move when the MappedFile object does, so the views
  // made by parse() stay valid once the map is handed to the GgufFile.
  Result<std::unique_ptr<GgufFile>> r = parse(file.data(), file.size(), path);
  if (!r) return r.status();
  r.value()->file_ = std::move(file);
  return r;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace ember
