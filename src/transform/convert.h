// Converts every weight matrix of a model to another tensor type: the
// per-tensor plan of quant_plan.h executed with round-to-nearest
// quantization (the reference quantizers) or plain float conversion. Used by
// `ember quantize` and by tests that need a float copy of a quantized model.
#pragma once

#include <memory>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/io/model_file.h"
#include "transform/quant_plan.h"

namespace ember {

// plan_quantization(*src, opts) executed with RtnQuantizer: a model whose
// 2-D weights are in opts.type (with the overrides and fallbacks of the
// plan; 1-D tensors become f32). The source is kept alive by the result.
// Hugging Face llama files (Q/K stored for NeoX RoPE) get Q/K rows permuted
// to the GGUF convention.
Result<std::unique_ptr<ModelFile>> convert_model(std::unique_ptr<ModelFile> src, const ConvertOptions& opts,
                                                 ThreadPool& pool);

// Executes a plan built for `src` (plan_quantization, possibly edited) with
// RtnQuantizer for its kRtn entries.
Result<std::unique_ptr<ModelFile>> convert_model(std::unique_ptr<ModelFile> src, const QuantPlan& plan,
                                                 ThreadPool& pool);

}  // namespace ember
