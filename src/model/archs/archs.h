// Architecture registry: one small filler per architecture completes a
// ModelConfig from metadata (block wiring flags, RoPE style, per-layer
// attention windows and RoPE bases). Tensor names are the GGUF ones for all.
#pragma once

#include <string>

#include "core/status.h"
#include "model/config.h"

namespace ember {

struct ArchFiller {
  const char* name;
  Status (*fill)(const Metadata& meta, ModelConfig* cfg);
};

Status fill_llama(const Metadata& meta, ModelConfig* cfg);
Status fill_qwen2(const Metadata& meta, ModelConfig* cfg);
Status fill_qwen3(const Metadata& meta, ModelConfig* cfg);
Status fill_gemma3(const Metadata& meta, ModelConfig* cfg);

// Fills per-layer RoPE settings shared by most architectures from
// "<arch>.rope.freq_base" and "<arch>.rope.scaling.*".
Status fill_default_rope(const Metadata& meta, ModelConfig* cfg);
// Reads "<arch>.rope.type" ("normal"/"neox") if present, else keeps `fallback`.
RopeStyle rope_style_from_metadata(const Metadata& meta, const std::string& arch, RopeStyle fallback);

}  // namespace ember
