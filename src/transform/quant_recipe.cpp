// llama.cpp's named quantization mixes; see quant_recipe.h.
#include "transform/quant_recipe.h"

#include <algorithm>
#include <cctype>
#include <regex>

#include <fmt/format.h>

namespace ember {
namespace {

using R = QuantRecipe;

constexpr QuantRecipeInfo kRecipes[] = {
    {R::kQ4_0, "Q4_0", DType::kQ4_0, 2},      {R::kQ4_1, "Q4_1", DType::kQ4_1, 3},
    {R::kQ5_0, "Q5_0", DType::kQ5_0, 8},      {R::kQ5_1, "Q5_1", DType::kQ5_1, 9},
    {R::kQ8_0, "Q8_0", DType::kQ8_0, 7},      {R::kQ2_K, "Q2_K", DType::kQ2_K, 10},
    {R::kQ2_K_S, "Q2_K_S", DType::kQ2_K, 21}, {R::kQ3_K_S, "Q3_K_S", DType::kQ3_K, 11},
    {R::kQ3_K_M, "Q3_K_M", DType::kQ3_K, 12}, {R::kQ3_K_L, "Q3_K_L", DType::kQ3_K, 13},
    {R::kQ4_K_S, "Q4_K_S", DType::kQ4_K, 14}, {R::kQ4_K_M, "Q4_K_M", DType::kQ4_K, 15},
    {R::kQ5_K_S, "Q5_K_S", DType::kQ5_K, 16}, {R::kQ5_K_M, "Q5_K_M", DType::kQ5_K, 17},
    {R::kQ6_K, "Q6_K", DType::kQ6_K, 18},
};

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// llama.cpp's use_more_bits: the first and last eighth and every third layer between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

}  // namespace

std::optional<QuantRecipeInfo> find_quant_recipe(const std::string& name) {
  std::string n = upper(name);
  if (n == "Q3_K" || n == "Q4_K" || n == "Q5_K") n += "_M";  // llama-quantize's aliases
  for (const QuantRecipeInfo& r : kRecipes)
    if (n == r.name) return r;
  return std::nullopt;
}

std::vector<std::string> quant_recipe_names() {
  std::vector<std::string> v;
  for (const QuantRecipeInfo& r : kRecipes) v.push_back(r.name);
  return v;
}

DType quant_recipe_type(const QuantRecipeInfo& recipe, const QuantRecipeModel& m, TensorRole role, int index,
                        int64_t n_per_row) {
  const R f = recipe.recipe;
  DType t = recipe.base;
  const int n = m.n_layer, i = index;
  if (role == TensorRole::kOutput || (m.tied && role == TensorRole::kTokenEmbd)) {
    if (n_per_row % dtype_block_size(t) != 0) return DType::kQ8_0;
    return t == DType::kQ8_0 ? t : DType::kQ6_K;
  }
  if (role == TensorRole::kFfnDownExps || role == TensorRole::kFfnDownShexp) role = TensorRole::kFfnDown;
  const bool eight_experts = m.n_expert == 8;
  switch (role) {
    case TensorRole::kAttnK:
      return eight_experts ? DType::kQ8_0 : t;
    case TensorRole::kAttnV:
      if (f == R::kQ2_K) t = m.n_gqa >= 4 ? DType::kQ4_K : DType::kQ3_K;
      else if (f == R::kQ2_K_S && m.n_gqa >= 4) t = DType::kQ4_K;
      else if (f == R::kQ3_K_M) t = i < 2 ? DType::kQ5_K : DType::kQ4_K;
      else if (f == R::kQ3_K_L) t = DType::kQ5_K;
      else if ((f == R::kQ4_K_M || f == R::kQ5_K_M) && use_more_bits(i, n)) t = DType::kQ6_K;
      else if (f == R::kQ4_K_S && i < 4) t = DType::kQ5_K;
      if (m.is_70b && (t == DType::kQ3_K || t == DType::kQ4_K)) t = DType::kQ5_K;
      if (eight_experts) t = DType::kQ8_0;
      return t;
    case TensorRole::kFfnDown:
      if (f == R::kQ2_K) t = DType::kQ3_K;
      else if (f == R::kQ2_K_S) {
        if (i < n / 8) t = DType::kQ4_K;
      } else if (f == R::kQ3_K_M) t = i < n / 16 ? DType::kQ5_K : DType::kQ4_K;  // (not Falcon)
      else if (f == R::kQ3_K_L) t = DType::kQ5_K;
      else if (f == R::kQ4_K_M) {
        if (use_more_bits(i, n)) t = DType::kQ6_K;
      } else if (f == R::kQ5_K_M && use_more_bits(i, n)) t = DType::kQ6_K;
      else if (f == R::kQ4_K_S && i < n / 8) t = DType::kQ5_K;
      else if ((f == R::kQ4_0 || f == R::kQ5_0) && m.has_imatrix && i < n / 8)
        t = f == R::kQ4_0 ? DType::kQ4_1 : DType::kQ5_1;
      return t;
    case TensorRole::kAttnOutput:
      if (eight_experts) {
        if (f == R::kQ2_K || f == R::kQ3_K_S || f == R::kQ3_K_M || f == R::kQ4_K_S || f == R::kQ4_K_M) t = DType::kQ5_K;
        return t;
      }
      if (f == R::kQ2_K) t = DType::kQ3_K;
      else if (f == R::kQ3_K_M) t = DType::kQ4_K;
      else if (f == R::kQ3_K_L) t = DType::kQ5_K;
      return t;
    default: return t;
  }
}

Result<TensorTypeOverride> parse_tensor_type_override(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos) return Status::errorf("malformed tensor type '{}' (PATTERN=TYPE)", arg);
  if (eq == 0) return Status::errorf("tensor type '{}': missing tensor name", arg);
  TensorTypeOverride o;
  o.pattern = arg.substr(0, eq);
  std::transform(o.pattern.begin(), o.pattern.end(), o.pattern.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string type = arg.substr(eq + 1);
  if (type.empty()) return Status::errorf("tensor type '{}': missing quantization type", arg);
  if (!dtype_from_name(type, &o.type) || o.type == DType::kQ8_1 || o.type == DType::kQ8_K)
    return Status::errorf("tensor type '{}': invalid quantization type '{}'", arg, type);
  try {
    std::regex re(o.pattern);
  } catch (const std::regex_error& e) {
    return Status::errorf("tensor type '{}': invalid pattern: {}", arg, e.what());
  }
  return o;
}

}  // namespace ember
