// Hugging Face quantized checkpoints: GPTQ (v1 and gptq_v2), AWQ GEMM and
// compressed-tensors (pack-quantized W4A16/W8A16, int8 W8A8), read from
// config.json's quantization_config and repacked at load time into ember's
// block types, exactly.
//
// Arithmetic contract (the reference dequantization, tested bit for bit):
// every format unpacks to integer codes q (0 .. 2^bits-1), one integer zero
// point z and one scale s per (output row, group), and a group index g(i)
// per input column (GPTQ g_idx / compressed-tensors weight_g_idx when the
// checkpoint has one, else i / group_size). The weight is
//     w[o][i] = s[o][g(i)] * (q[o][i] - z[o][g(i)])
// evaluated as one f32 multiply: q - z is an exact integer (|q - z| < 2^9)
// and s an fp16 / bf16 / f32 value, so for fp16 / bf16 scales the product
// (at most 11 + 9 significant bits) is exact, and for f32 scales it is the
// correctly rounded f32 product. This is what
// the libraries' own dequantizers compute when run in float32 (AutoGPTQ /
// GPTQModel `scales[g_idx] * (weight - zeros[g_idx])`, AutoAWQ
// `dequantize_gemm`, compressed-tensors `dequantize`: (x_q - zp) * scale);
// run in fp16 / bf16 they return this value rounded once to that type
// (PyTorch's CPU multiply rounds the exact product), so
// round_to_fp16(ember's w) == the library's fp16 w as well.
//
// Per-format unpacking (PyTorch layout: weight [N out, K in]):
//   GPTQ   qweight I32 [K*bits/32, N]: code of (k, n) in word (k*bits/32, n)
//          at bits (k % (32/bits))*bits; qzeros I32 [G, N*bits/32] packed
//          the same way along N; scales [G, N]; g_idx I32 [K] (optional).
//          v1 ("gptq"): z = (stored + 1) mod 2^bits (AutoGPTQ's torch
//          path); gptq_v2: z = stored.
//   AWQ    qweight I32 [K, N/8], qzeros I32 [G, N/8]: column 8c + j is in
//          word c at nibble kAwqReverseOrder[j] = {0,4,1,5,2,6,3,7}[j]
//          (AutoAWQ packs with order {0,2,4,6,1,3,5,7}); z = stored.
//   CT     weight_packed I32 [N, ceil(K*bits/32)]: code of (n, k) in word
//          k / (32/bits) at bits (k % (32/bits))*bits, stored offset-binary
//          (signed value + 2^(bits-1)); weight_zero_point (asymmetric only)
//          I32 [ceil(N*bits/32), G] packed along N, same offset; weight_scale
//          [N, G] ([N, 1] per channel, [1] per tensor); weight_shape [2].
//          int-quantized / naive-quantized (W8A8): weight I8 [N, K] signed,
//          weight_scale [N, 1] or [1]. Signed codes are shifted by 2^(bits-1)
//          into the unsigned form above (q - z is unchanged).
//
// Repacked layouts, chosen per tensor, all exact (ember's scalar
// dequantizers, quant/quantize.h, evaluate them without rounding):
//   bits 4, every z == 8          -> Q4_0: d = s, nibble = q        (d*(q-8))
//   bits 4, every s*z an fp16     -> Q4_1: d = s, m = -s*z, nibble = q
//   bits 4, otherwise             -> Q5_0: d = s, q5 = q - z + 16 in 0..31
//   bits 8, every z == 128        -> Q8_0: d = s, qs = q - 128
// each when the groups are whole 32-column blocks (every aligned run of 32
// input columns has one g(i): group sizes that are multiples of 32, and
// act-order g_idx whose groups happen to be aligned) and every s is an fp16
// value (bf16 and f32 scales are checked one by one). Otherwise (act-order
// g_idx with scattered groups, per-channel or per-tensor f32 scales that fp16
// cannot hold, group sizes below 32) the weight is stored dense: F16 when
// every w is an fp16 value, else F32 -- exact, but larger and slower.
//
// Threading: plain functions, no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/io/safetensors.h"

namespace ember {

enum class HfQuantMethod { kGptq, kAwq, kCompressedTensors };

// What config.json's quantization_config says (validated).
struct HfQuantConfig {
  HfQuantMethod method = HfQuantMethod::kGptq;
  int bits = 4;
  int64_t group_size = 128;  // -1: one group per row (per channel)
  bool sym = true;
  bool desc_act = false;
  bool gptq_v2 = false;  // GPTQ zeros stored exactly (v1: stored zero - 1)
  std::string ct_format;  // compressed-tensors: "pack-quantized", "int-quantized", "naive-quantized"
  bool ct_dynamic_activations = false;  // W8A8: int8 per-token activations, dynamic
  std::string summary;  // one line for `ember info` ("gptq 4-bit group 128 sym ...")
};

// Reads quantization_config from config.json text (`name` in messages).
// No quantization_config: nullopt. Unsupported variants (3-bit, asymmetric
// 8-bit, AWQ versions other than GEMM, compressed-tensors float or static
// activation schemes, other quant_methods, ...) are errors naming the field
// and its value ("config.json: quantization_config.bits = 3 is not supported
// for gptq (supported: 4, 8)").
Result<std::optional<HfQuantConfig>> parse_hf_quant_config(const std::string& config_text, const std::string& name);

// One quantized linear, unpacked (see the contract above). Codes are row
// major [n_out][n_in]; zeros and scales [n_out][n_groups].
struct HfQuantMatrix {
  int64_t n_out = 0, n_in = 0;
  int bits = 4;
  int64_t n_groups = 0;
  std::vector<uint8_t> q;
  std::vector<int16_t> zero;
  std::vector<float> scale;  // exact f32 value of the stored scale
  std::vector<int32_t> g_idx;  // [n_in], each in [0, n_groups)
};

// w = s * (q - z) in f32, row major [n_out][n_in].
void hf_quant_dequantize_ref(const HfQuantMatrix& m, float* out);

// The layout repack_hf_quant picks for `m` (see the table above).
DType hf_quant_layout(const HfQuantMatrix& m);

// `m` in hf_quant_layout(m) as a [n_out, n_in] view named `name`; the buffer
// is appended to `owners`.
TensorView repack_hf_quant(const HfQuantMatrix& m, const std::string& name, std::vector<std::shared_ptr<void>>* owners);

// Unpacks the quantized linear `prefix` ("model.layers.0.self_attn.q_proj")
// of `set` per `cfg`; `used` receives the HF names of the tensors read.
Result<HfQuantMatrix> unpack_hf_quant(const HfQuantConfig& cfg, const SafetensorsSet& set, const std::string& prefix,
                                      std::set<std::string>* used);

// Every quantized linear of a checkpoint, repacked.
struct HfQuantWeights {
  std::map<std::string, TensorView> weights;  // by HF name ("<prefix>.weight")
  std::map<std::string, std::string> files;   // HF name -> file it came from (messages)
  std::set<std::string> consumed;             // HF tensors read (skip them elsewhere)
};

// Finds the quantized linears of `set` (GPTQ/AWQ "<prefix>.qweight",
// compressed-tensors "<prefix>.weight_packed", or an I8 "<prefix>.weight"
// with "<prefix>.weight_scale"), unpacks and repacks each. `cfg` null: an
// error if any quantized tensor is present (config.json lacks
// quantization_config). Only linears whose "<prefix>.weight" passes
// `wanted` are unpacked (the loader skips vision towers and the like).
// Buffers go to `owners`.
Result<HfQuantWeights> load_hf_quant_weights(const HfQuantConfig* cfg, const SafetensorsSet& set,
                                             const std::function<bool(const std::string&)>& wanted,
                                             std::vector<std::shared_ptr<void>>* owners);

}  // namespace ember
