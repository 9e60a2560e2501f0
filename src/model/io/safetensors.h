// Reader for Hugging Face *.safetensors files: an 8-byte little-endian header
// length, a JSON header ({"name": {"dtype", "shape", "data_offsets"}, ...,
// "__metadata__": {str: str}}) and the raw tensor bytes. Files are
// memory-mapped; every offset, shape and size is validated (in bounds,
// consistent with dtype x shape, no overlaps) before a view is handed out.
// A model folder may be sharded through model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace ember {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // as written: "F16", "BF16", "F32", "I64", ...
  bool supported = false;      // dtype is F32, F16 or BF16
  DType type = DType::kF32;    // meaningful when `supported`
  std::vector<int64_t> shape;  // as in the file: outermost first (PyTorch order)
  uint64_t begin = 0;          // byte range relative to the data section
  uint64_t end = 0;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
};

class SafetensorsFile {
 public:
  // Opens and validates `path`. Error messages start with the path.
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  // Parses an in-memory image; the buffer must outlive the object.
  static Result<std::unique_ptr<SafetensorsFile>> parse(const uint8_t* data, size_t size, const std::string& name);

  const std::string& path() const { return path_; }
  // Sorted by name.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  MappedFile file_;
  std::string path_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A GGML-order view of a safetensors tensor (ne[0] = last PyTorch dim),
// named `name`. Fails for dtypes other than F32/F16/BF16 and for rank > 4.
// A rank-0 tensor becomes a 1-element 1-D view.
Result<TensorView> safetensors_view(const SafetensorsTensor& t, const std::string& name, const std::string& file);

// The weights of one model, possibly spread over several files.
struct SafetensorsSet {
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  struct Entry {
    const SafetensorsTensor* tensor;
    const SafetensorsFile* file;
  };
  std::map<std::string, Entry> tensors;  // by HF tensor name
};

// Opens the weights in a model folder: model.safetensors.index.json (its
// weight_map names the shard of every tensor; each is checked), else
// model.safetensors, else every *.safetensors file in the folder. A tensor
// name found in two files is an error.
Result<SafetensorsSet> open_safetensors_dir(const std::string& dir);
// Opens the given files as one set.
Result<SafetensorsSet> open_safetensors_files(const std::vector<std::string>& paths);

}  // namespace ember
