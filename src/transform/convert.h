// Converts every weight matrix of a model to another tensor type
// (round-to-nearest quantization with the reference quantizers, or plain
// float conversion). Used by `ember quantize` and by tests that need a
// float copy of a quantized model.
#pragma once

#include <memory>
#include <optional>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/io/model_file.h"

namespace ember {

struct ConvertOptions {
  DType type = DType::kQ8_0;
  // Matrices whose rows are not a multiple of the block size fall back to a
  // compatible type (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, q2_K/q3_K ->
  // q4_0, legacy -> f16), as llama.cpp does.
  bool allow_fallback = true;
  // Per-tensor overrides, as llama-quantize's --output-tensor-type and
  // --token-embedding-type: the output head (output.weight, or
  // token_embd.weight when the model ties them) and the token embedding.
  std::optional<DType> output_type;
  std::optional<DType> token_embd_type;
};

// True if t can be the target of a conversion (f32, f16, bf16 and the
// storage quantization types; not the activation types q8_1 / q8_K).
bool convertible_to(DType t);

// The llama.cpp "general.file_type" value for a model converted to t.
int llama_file_type(DType t);

// Returns a model whose 2-D weights are in opts.type (1-D tensors become
// f32). The source is kept alive by the result. Hugging Face llama files
// (Q/K stored for NeoX RoPE) get Q/K rows permuted to the GGUF convention.
Result<std::unique_ptr<ModelFile>> convert_model(std::unique_ptr<ModelFile> src, const ConvertOptions& opts,
                                                 ThreadPool& pool);

}  // namespace ember
