// Model type conversion: plan + round-to-nearest execution; see convert.h.
#include "transform/convert.h"

#include "transform/quantizer.h"

namespace ember {

Result<std::unique_ptr<ModelFile>> convert_model(std::unique_ptr<ModelFile> src, const ConvertOptions& opts,
                                                 ThreadPool& pool) {
  Result<QuantPlan> plan = plan_quantization(*src, opts);
  if (!plan) return plan.status();
  return convert_model(std::move(src), *plan, pool);
}

Result<std::unique_ptr<ModelFile>> convert_model(std::unique_ptr<ModelFile> src, const QuantPlan& plan,
                                                 ThreadPool& pool) {
  RtnQuantizer rtn;
  const QuantizerFor quantizer_for = [&](QuantMethod m) -> Quantizer* {
    return m == QuantMethod::kRtn ? &rtn : nullptr;
  };
  return execute_quant_plan(std::move(src), plan, quantizer_for, pool);
}

}  // namespace ember
