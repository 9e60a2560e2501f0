// Architecture registry: the ArchSpec of every supported architecture
// (model/archs/<name>.cpp), looked up by GGUF name or Hugging Face class /
// model_type. The list is constant; thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "model/archs/arch_spec.h"

namespace ember {

// One per architecture file.
extern const ArchSpec kLlamaSpec;
extern const ArchSpec kQwen2Spec;
extern const ArchSpec kQwen3Spec;
extern const ArchSpec kGemma3Spec;
extern const ArchSpec kQwen2MoeSpec;
extern const ArchSpec kQwen3MoeSpec;
extern const ArchSpec kOlmoeSpec;
extern const ArchSpec kPhi3Spec;
extern const ArchSpec kMistral3Spec;
extern const ArchSpec kSmolLM3Spec;
extern const ArchSpec kOlmo2Spec;
extern const ArchSpec kGptOssSpec;

// Every registered spec, in registration order.
std::span<const ArchSpec* const> arch_specs();
// The spec named `name` (general.architecture), or null.
const ArchSpec* find_arch(std::string_view name);
// The spec whose hf_classes / hf_model_types contain `name`, or null.
const ArchSpec* find_arch_by_hf_class(std::string_view name);
const ArchSpec* find_arch_by_hf_model_type(std::string_view name);
// "llama, qwen2, qwen3, gemma3, ..." (joined by `sep`).
std::string arch_names(std::string_view sep = ", ");
// "unsupported architecture 'X' (supported: llama, qwen2, ...)".
Status unsupported_arch_error(std::string_view name);

}  // namespace ember
