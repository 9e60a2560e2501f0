// GGUF v3 writer: metadata in insertion order, tensor infos, then tensor data
// aligned to the file's alignment. The same emit() code produces an in-memory
// image (tests) or streams to a file, so tensors added by reference are never
// copied.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "model/io/gguf.h"

namespace ember {

class GgufWriter::Sink {
 public:
  virtual ~Sink() = default;
  virtual bool put(const void* p, size_t n) = 0;
  uint64_t written = 0;
};

void GgufWriter::add(const std::string& key, const GgufValue& v) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = v;
      return;
    }
  }
  kv_.emplace_back(key, v);
}

void GgufWriter::add_metadata(const Metadata& m) {
  for (const auto& kv : m.entries()) add(kv.first, kv.second);
}

void GgufWriter::add_string(const std::string& key, const std::string& v) { add(key, Metadata::make_string(v)); }
void GgufWriter::add_uint32(const std::string& key, uint32_t v) { add(key, Metadata::make_int(v, GgufType::kUint32)); }
void GgufWriter::add_int32(const std::string& key, int32_t v) { add(key, Metadata::make_int(v, GgufType::kInt32)); }
void GgufWriter::add_uint64(const std::string& key, uint64_t v) {
  add(key, Metadata::make_int(static_cast<int64_t>(v), GgufType::kUint64));
}
void GgufWriter::add_float32(const std::string& key, float v) { add(key, Metadata::make_float(v, GgufType::kFloat32)); }
void GgufWriter::add_bool(const std::string& key, bool v) { add(key, Metadata::make_bool(v)); }

void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& v) {
  GgufValue a;
  a.type = GgufType::kArray;
  a.elem_type = GgufType::kString;
  a.count = v.size();
  a.strings = v;
  add(key, a);
}

void GgufWriter::add_int32_array(const std::string& key, const std::vector<int32_t>& v) {
  GgufValue a;
  a.type = GgufType::kArray;
  a.elem_type = GgufType::kInt32;
  a.count = v.size();
  a.ints.assign(v.begin(), v.end());
  add(key, a);
}

void GgufWriter::add_float32_array(const std::string& key, const std::vector<float>& v) {
  GgufValue a;
  a.type = GgufType::kArray;
  a.elem_type = GgufType::kFloat32;
  a.count = v.size();
  a.nums.assign(v.begin(), v.end());
  add(key, a);
}

Status GgufWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne, const void* data,
                              size_t nbytes) {
  return add_tensor_impl(name, type, ne, data, nbytes, true);
}

Status GgufWriter::add_tensor_ref(const std::string& name, DType type, const std::vector<int64_t>& ne,
                                  const void* data, size_t nbytes) {
  return add_tensor_impl(name, type, ne, data, nbytes, false);
}

Status GgufWriter::add_tensor_impl(const std::string& name, DType type, const std::vector<int64_t>& ne,
                                   const void* data, size_t nbytes, bool copy) {
  const DTypeTraits* tr = dtype_traits(type);
  if (!tr) return Status::errorf("tensor '{}': unsupported type id {}", name, static_cast<uint32_t>(type));
  if (name.empty()) return Status::error("tensor with an empty name");
  if (tensor_names_.count(name)) return Status::errorf("tensor '{}': added twice", name);
  if (ne.empty() || ne.size() > 4) return Status::errorf("tensor '{}': {} dims (must be 1..4)", name, ne.size());
  uint64_t nelem = 1;
  for (int64_t d : ne) {
    if (d < 1 || static_cast<uint64_t>(d) > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / nelem)
      return Status::errorf("tensor '{}': bad dimension {}", name, d);
    nelem *= static_cast<uint64_t>(d);
  }
  if (ne[0] % tr->block_size != 0)
    return Status::errorf("tensor '{}': ne[0] = {} is not a multiple of the {} block size {}", name, ne[0], tr->name,
                          tr->block_size);
  const uint64_t expect = nelem / tr->block_size * tr->type_size;
  if (expect != nbytes)
    return Status::errorf("tensor '{}': {} bytes given, {} {} elements need {}", name, nbytes, nelem, tr->name, expect);
  if (!data) return Status::errorf("tensor '{}': null data", name);
  PendingTensor t;
  t.name = name;
  t.type = type;
  t.ne = ne;
  t.nbytes = nbytes;
  if (copy) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    t.owned.assign(p, p + nbytes);
  } else {
    t.ref = data;
  }
  tensor_names_.insert(name);
  tensors_.push_back(std::move(t));
  return Status::ok();
}

namespace {

bool put_u32(GgufWriter::Sink& s, uint32_t v) { return s.put(&v, 4); }
bool put_u64(GgufWriter::Sink& s, uint64_t v) { return s.put(&v, 8); }
bool put_str(GgufWriter::Sink& s, const std::string& v) { return put_u64(s, v.size()) && s.put(v.data(), v.size()); }

bool put_scalar(GgufWriter::Sink& s, GgufType t, int64_t i, double f) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: {
      uint8_t b = t == GgufType::kBool ? (i != 0) : static_cast<uint8_t>(i);
      return s.put(&b, 1);
    }
    case GgufType::kUint16: case GgufType::kInt16: {
      uint16_t x = static_cast<uint16_t>(i);
      return s.put(&x, 2);
    }
    case GgufType::kUint32: case GgufType::kInt32: return put_u32(s, static_cast<uint32_t>(i));
    case GgufType::kUint64: case GgufType::kInt64: return put_u64(s, static_cast<uint64_t>(i));
    case GgufType::kFloat32: {
      float x = static_cast<float>(f);
      return s.put(&x, 4);
    }
    case GgufType::kFloat64: return s.put(&f, 8);
    default: return false;
  }
}

// An array value without its leading type tag: element type, count, data.
bool put_array(GgufWriter::Sink& s, const GgufValue& v) {
  const GgufType et = v.elem_type;
  if (!put_u32(s, static_cast<uint32_t>(et))) return false;
  switch (et) {
    case GgufType::kString:
      if (!put_u64(s, v.strings.size())) return false;
      for (const std::string& x : v.strings)
        if (!put_str(s, x)) return false;
      return true;
    case GgufType::kArray:
      if (!put_u64(s, v.items.size())) return false;
      for (const GgufValue& x : v.items)
        if (!put_array(s, x)) return false;
      return true;
    case GgufType::kFloat32: case GgufType::kFloat64:
      if (!put_u64(s, v.nums.size())) return false;
      for (double x : v.nums)
        if (!put_scalar(s, et, 0, x)) return false;
      return true;
    default:
      if (!put_u64(s, v.ints.size())) return false;
      for (int64_t x : v.ints)
        if (!put_scalar(s, et, x, 0)) return false;
      return true;
  }
}

bool put_value(GgufWriter::Sink& s, const GgufValue& v) {
  if (!put_u32(s, static_cast<uint32_t>(v.type))) return false;
  if (v.type == GgufType::kString) return put_str(s, v.str);
  if (v.type == GgufType::kArray) return put_array(s, v);
  return put_scalar(s, v.type, v.i, v.f);
}

bool put_zeros(GgufWriter::Sink& s, uint64_t n) {
  static const uint8_t kZeros[64] = {0};
  while (n > 0) {
    const size_t k = n < sizeof(kZeros) ? static_cast<size_t>(n) : sizeof(kZeros);
    if (!s.put(kZeros, k)) return false;
    n -= k;
  }
  return true;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

bool alignment_ok(uint64_t a) { return a > 0 && (a & (a - 1)) == 0 && a <= (uint64_t{1} << 30); }

class MemorySink : public GgufWriter::Sink {
 public:
  bool put(const void* p, size_t n) override {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    buf.insert(buf.end(), b, b + n);
    written += n;
    return true;
  }
  std::vector<uint8_t> buf;
};

class FileSink : public GgufWriter::Sink {
 public:
  explicit FileSink(std::FILE* f) : f_(f) {}
  bool put(const void* p, size_t n) override {
    if (n == 0) return true;
    if (std::fwrite(p, 1, n, f_) != n) return false;
    written += n;
    return true;
  }

 private:
  std::FILE* f_;
};

}  // namespace

bool GgufWriter::emit(Sink& out) const {
  const uint64_t align = alignment_;
  bool has_align_key = false;
  for (const auto& kv : kv_) has_align_key |= kv.first == "general.alignment";
  const bool add_align_key = !has_align_key && align != 32;

  // Header.
  if (!out.put("GGUF", 4) || !put_u32(out, 3) || !put_u64(out, tensors_.size()) ||
      !put_u64(out, kv_.size() + (add_align_key ? 1 : 0)))
    return false;
  // Metadata.
  if (add_align_key) {
    if (!put_str(out, "general.alignment") ||
        !put_value(out, Metadata::make_int(static_cast<int64_t>(align), GgufType::kUint32)))
      return false;
  }
  for (const auto& kv : kv_) {
    if (!put_str(out, kv.first)) return false;
    if (kv.first == "general.alignment") {  // keep it consistent with the layout
      if (!put_value(out, Metadata::make_int(static_cast<int64_t>(align), GgufType::kUint32))) return false;
    } else if (!put_value(out, kv.second)) {
      return false;
    }
  }
  // Tensor infos; offsets relative to the data section.
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    if (!put_str(out, t.name) || !put_u32(out, static_cast<uint32_t>(t.ne.size()))) return false;
    for (int64_t d : t.ne)
      if (!put_u64(out, static_cast<uint64_t>(d))) return false;
    if (!put_u32(out, static_cast<uint32_t>(t.type)) || !put_u64(out, offset)) return false;
    offset = align_up(offset + t.nbytes, align);
  }
  // Data.
  if (!put_zeros(out, align_up(out.written, align) - out.written)) return false;
  for (const PendingTensor& t : tensors_) {
    if (!out.put(t.bytes(), t.nbytes)) return false;
    if (!put_zeros(out, align_up(t.nbytes, align) - t.nbytes)) return false;
  }
  return true;
}

std::vector<uint8_t> GgufWriter::serialize() const {
  if (!alignment_ok(alignment_)) return {};
  MemorySink sink;
  if (!emit(sink)) return {};
  return std::move(sink.buf);
}

Status GgufWriter::write(const std::string& path) const {
  if (!alignment_ok(alignment_))
    return Status::errorf("{}: alignment {} is not a power of two in 1..2^30", path, alignment_);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::errorf("{}: cannot create: {}", path, std::strerror(errno));
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  FileSink sink(f);
  bool ok = emit(sink);
  int err = ok ? 0 : errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(path.c_str());
    return Status::errorf("{}: write failed: {}", path, std::strerror(err));
  }
  return Status::ok();
}

}  // namespace ember
