// GGUF reader (v2, v3) and writer. The reader memory-maps the file and checks
// every count, length, offset and size against the file before use: a corrupt
// or truncated file gives an error naming the file, the field and the reason.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "core/status.h"
#include "core/metadata.h"
#include "core/tensor.h"

namespace ember {

struct GgufTensorInfo {
  TensorView view;      // name, type, dims; data points into the mapped file
  uint64_t offset = 0;  // relative to the start of the data section
};

class GgufFile {
 public:
  // Opens and validates `path`. Every error message starts with the path.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses an in-memory image (used by tests and the fuzz target). The buffer
  // must outlive the GgufFile. `name` is used in error messages.
  static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size, const std::string& name);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }
  // Absolute file offset of the tensor data section (aligned).
  size_t data_offset() const { return data_offset_; }
  // The whole file image (mapped file or the buffer given to parse()).
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Metadata, in file order.
  const Metadata& metadata() const { return meta_; }

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;

 private:
  GgufFile() = default;
  MappedFile file_;  // empty when parsed from memory
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  size_t data_offset_ = 0;
  Metadata meta_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
  friend class GgufParser;
};

// Builds a GGUF v3 file: metadata in insertion order, then tensors aligned to
// `alignment` (general.alignment is written if it differs from 32; an added
// general.alignment key is rewritten to match set_alignment()). Adding a
// key that is already present replaces its value. The alignment must be a
// power of two: write() fails and serialize() returns an empty image
// otherwise.
class GgufWriter {
 public:
  void set_alignment(uint64_t a) { alignment_ = a; }
  void add(const std::string& key, const GgufValue& v);
  void add_metadata(const Metadata& m);  // every entry of `m`, in order
  void add_string(const std::string& key, const std::string& v);
  void add_uint32(const std::string& key, uint32_t v);
  void add_int32(const std::string& key, int32_t v);
  void add_uint64(const std::string& key, uint64_t v);
  void add_float32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_int32_array(const std::string& key, const std::vector<int32_t>& v);
  void add_float32_array(const std::string& key, const std::vector<float>& v);
  // Tensor payload is copied; dims in GGML order (ne[0] innermost). Fails if
  // the name is empty or taken, n_dims is not 1..4, a dim is < 1, ne[0] is
  // not a multiple of the type's block size, or nbytes does not match.
  Status add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne, const void* data,
                    size_t nbytes);
  // Same checks, but the payload is only referenced: `data` must stay valid
  // until write()/serialize() has returned (no copy of multi-GB weights).
  Status add_tensor_ref(const std::string& name, DType type, const std::vector<int64_t>& ne, const void* data,
                        size_t nbytes);
  // Streams the file to `path` (removed again if writing fails).
  Status write(const std::string& path) const;
  // The file image in memory (tests).
  std::vector<uint8_t> serialize() const;

  class Sink;  // where emit() writes (defined in gguf_writer.cpp)

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> owned;  // add_tensor: the copied payload
    const void* ref = nullptr;   // add_tensor_ref: the caller's buffer
    size_t nbytes = 0;
    const void* bytes() const { return ref ? ref : owned.data(); }
  };
  Status add_tensor_impl(const std::string& name, DType type, const std::vector<int64_t>& ne, const void* data,
                         size_t nbytes, bool copy);
  bool emit(Sink& out) const;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
  std::set<std::string> tensor_names_;
};

}  // namespace ember
