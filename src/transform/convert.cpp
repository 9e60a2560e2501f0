// Model type conversion; see convert.h.
#include "transform/convert.h"

#include <cstring>
#include <vector>

#include "kernels/registry.h"
#include "quant/quantize.h"

namespace ember {

namespace {

DType fallback_type(DType t) {
  switch (t) {
    case DType::kQ4_K: return DType::kQ5_0;
    case DType::kQ5_K: return DType::kQ5_1;
    case DType::kQ6_K: return DType::kQ8_0;
    case DType::kQ2_K:
    case DType::kQ3_K: return DType::kQ4_0;
    default: return DType::kF16;
  }
}

bool is_weight_matrix(const TensorView& t) {
  return t.n_dims == 2 && t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
}

// Row permutation that turns HF (rotate_half) Q/K rows into GGUF's
// interleaved-pair order: within each head, row 2i <- i, 2i+1 <- i + hd/2.
int64_t permuted_source_row(int64_t r, int64_t head_dim) {
  const int64_t h = r / head_dim, j = r % head_dim;
  const int64_t src_j = (j % 2 == 0) ? j / 2 : j / 2 + head_dim / 2;
  return h * head_dim + src_j;
}

}  // namespace

bool convertible_to(DType t) {
  if (t == DType::kQ8_1 || t == DType::kQ8_K) return false;
  if (t == DType::kF32) return true;
  return can_quantize(t);
}

int llama_file_type(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 11;
    case DType::kQ4_K: return 14;
    case DType::kQ5_K: return 16;
    case DType::kQ6_K: return 18;
    case DType::kBF16: return 32;
    default: return 0;
  }
}

Result<std::unique_ptr<ModelFile>> convert_model(std::unique_ptr<ModelFile> src, const ConvertOptions& opts,
                                                 ThreadPool& pool) {
  if (!convertible_to(opts.type)) return Status::errorf("cannot convert to type {}", dtype_name(opts.type));
  auto out = std::make_unique<ModelFile>();
  out->path = src->path;
  out->format = "gguf";
  out->metadata = src->metadata;

  const std::string arch = src->architecture() ? *src->architecture() : "";
  // HF llama: Q/K rows are in rotate_half order; GGUF llama expects pairs.
  bool permute_qk = false;
  int64_t head_dim = 0;
  if (arch == "llama") {
    const std::string* rt = src->metadata.get_string("llama.rope.type");
    if (rt && *rt == "neox" && src->format == "safetensors") {
      permute_qk = true;
      const int64_t n_embd = src->metadata.get_int("llama.embedding_length").value_or(0);
      const int64_t n_head = src->metadata.get_int("llama.attention.head_count").value_or(1);
      head_dim = src->metadata.get_int("llama.attention.key_length").value_or(n_head ? n_embd / n_head : 0);
      if (head_dim <= 0 || head_dim % 2) return Status::error("cannot determine the head size to permute Q/K");
      GgufValue normal = Metadata::make_string("normal");
      out->metadata.set("llama.rope.type", normal);
    }
  }

  for (DType t : {opts.output_type.value_or(opts.type), opts.token_embd_type.value_or(opts.type)})
    if (!convertible_to(t)) return Status::errorf("cannot convert to type {}", dtype_name(t));
  const bool tied = src->tensors.find("output.weight") == src->tensors.end();
  for (const auto& [name, t] : src->tensors) {
    DType target = DType::kF32;
    if (is_weight_matrix(t)) {
      target = opts.type;
      const bool head = name == "output.weight" || (tied && name == "token_embd.weight");
      if (head && opts.output_type) target = *opts.output_type;
      else if (name == "token_embd.weight" && opts.token_embd_type) target = *opts.token_embd_type;
      if (t.ne[0] % dtype_block_size(target) != 0) {
        if (!opts.allow_fallback)
          return Status::errorf("tensor '{}': row length {} is not a multiple of {}'s block size {}", name, t.ne[0],
                                dtype_name(target), dtype_block_size(target));
        target = fallback_type(target);
        if (t.ne[0] % dtype_block_size(target) != 0) target = DType::kF16;
      }
    }
    const bool permute = permute_qk && (name.find(".attn_q.") != std::string::npos ||
                                        name.find(".attn_k.") != std::string::npos);
    if (target == t.type && !permute) {
      out->tensors[name] = t;
      continue;
    }
    const KernelSet& in_k = kernels(t.type);
    if (!in_k.dequantize_row && t.type != DType::kF32)
      return Status::errorf("tensor '{}': cannot read type {}", name, dtype_name(t.type));
    const int64_t n_per_row = t.ne[0], n_rows = t.nrows();
    const size_t out_row = dtype_row_size(target, n_per_row);
    auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[out_row * n_rows]);
    uint8_t* dst = buf.get();
    std::vector<std::vector<float>> tmp(pool.size(), std::vector<float>(n_per_row));
    pool.parallel_for(n_rows, 16, [&](int64_t b, int64_t e, int ith) {
      float* row = tmp[ith].data();
      for (int64_t r = b; r < e; ++r) {
        const int64_t sr = permute ? permuted_source_row(r, head_dim) : r;
        if (t.type == DType::kF32) std::memcpy(row, t.row(sr), n_per_row * sizeof(float));
        else in_k.dequantize_row(t.row(sr), row, n_per_row);
        if (target == DType::kF32) std::memcpy(dst + r * out_row, row, out_row);
        else quantize_row_ref(target, row, dst + r * out_row, n_per_row);
      }
    });
    TensorView v = t;
    v.type = target;
    v.data = dst;
    v.nbytes = out_row * n_rows;
    out->tensors[name] = v;
    out->owners.push_back(std::static_pointer_cast<void>(std::shared_ptr<uint8_t>(buf, buf.get())));
  }
  out->metadata.set("general.file_type", Metadata::make_int(llama_file_type(opts.type), GgufType::kUint32));
  out->metadata.set("general.quantization_version", Metadata::make_int(2, GgufType::kUint32));
  std::shared_ptr<ModelFile> keep(std::move(src));
  out->owners.push_back(std::static_pointer_cast<void>(keep));
  return out;
}

}  // namespace ember
