// ModelFile: one weight map + metadata, whatever the on-disk format.
// GGUF files are used as they are; a Hugging Face folder (config.json +
// *.safetensors, optionally sharded) is translated on load into GGUF-style
// metadata keys ("llama.block_count", "tokenizer.ggml.tokens", ...) and GGUF
// tensor names ("blk.0.attn_q.weight"), so the rest of ember reads one form.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/gguf.h"

namespace ember {

struct ModelFile {
  std::string path;
  std::string format;  // "gguf" or "safetensors"
  Metadata metadata;
  std::map<std::string, TensorView> tensors;  // by GGUF-style name

  // Keeps mapped files and any converted/owned tensor buffers alive.
  std::vector<std::shared_ptr<void>> owners;

  const TensorView* tensor(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
  const std::string* architecture() const { return metadata.get_string("general.architecture"); }
};

// Opens a .gguf file, a .safetensors file (config.json beside it), or a
// Hugging Face model folder.
Result<std::unique_ptr<ModelFile>> open_model_file(const std::string& path);

}  // namespace ember
