// GPTQ over a whole model, layer by layer (the method of `ember quantize
// --method gptq`), on the shared calibration driver (layerwise.h): for each
// block l with GPTQ entries,
//   1. block l (as the file holds it: later blocks see the quantized earlier
//      ones) runs over the hidden states of every calibration window with a
//      HessianCollector: X^T X (double) of the inputs of its matrices (Q/K/V
//      share one, gate/up share one);
//   2. its GPTQ entries are quantized (gptq.h) with those Hessians;
//   3. the driver reloads block l, now quantized, and runs it again to give
//      the inputs of block l + 1,
// so only one block's Hessians and the hidden states [tokens, n_embd] are
// held. Entries of other methods are left to execute_quant_plan.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/forward_observer.h"
#include "model/io/model_file.h"
#include "transform/gptq.h"
#include "transform/quant_plan.h"

namespace ember {

// X^T X of the inputs of one block's matrices, by GGUF tensor name
// ("blk.L.attn_q.weight"; K and V share Q's, up shares gate's: calls with
// the same rows as the previous call join its matrix; a MoE layer's experts
// get one per expert of "blk.L.ffn_*_exps.weight"). Lower triangle and
// diagonal are accumulated in double; hessian() returns the full symmetric
// matrix. Each call's off-diagonal sums come from the f32 GEMM of
// kernels/train.h (f32 over the call's rows, as the reference GPTQ /
// SparseGPT accumulate H; deterministic for any thread count at a given ISA
// level), its diagonal from double sums of the rows.
class HessianCollector final : public ForwardObserver {
 public:
  HessianCollector(int layer, ThreadPool& pool) : layer_(layer), pool_(pool) {}
  void on_linear_input(int layer, LinearRole role, const float* x, int64_t ld, int64_t n_rows,
                       int64_t n_in) override;
  // A MoE layer's experts: one Hessian per expert of the 3-D tensor, from
  // the rows routed to it (up shares gate's).
  void on_expert_input(int layer, LinearRole role, int expert, int n_expert, const float* x, int64_t ld,
                       int64_t n_rows, int64_t n_in) override;
  // Null if no rows reached the tensor (expert >= 0: that expert of a 3-D
  // tensor).
  const std::vector<double>* hessian(const std::string& tensor, int expert = -1);
  int64_t tokens(const std::string& tensor, int expert = -1) const;

 private:
  struct Acc {
    int64_t n_in = 0, n_tok = 0;
    std::vector<double> h;  // [n_in, n_in]
    bool symmetric = false;
  };
  // Adds the rows to tensor key `name`'s X^T X (expert: which one, -1: none).
  void collect(const std::string& name, int expert, const float* x, int64_t ld, int64_t n_rows, int64_t n_in);
  static std::string key(const std::string& tensor, int expert) {
    return expert < 0 ? tensor : tensor + "#" + std::to_string(expert);
  }
  int layer_;
  ThreadPool& pool_;
  int last_expert_ = -1;
  std::map<std::string, std::shared_ptr<Acc>> by_tensor_;
  const float* last_x_ = nullptr;
  int64_t last_rows_ = 0;
  std::shared_ptr<Acc> last_;
};

struct GptqRunOptions {
  GptqOptions gptq;
  int chunk_size = 512;
  int32_t bos_id = -1;  // >= 0: replaces the first token of every chunk
  // After each block: (blocks done, blocks in all).
  std::function<void(int, int)> progress;
};

// Quantizes every entry of `plan` with method kGptq, as above, over the
// whole chunks of `tokens`. Returns `src` with those tensors replaced by
// their quantized payloads (owned by the result) and turns the entries into
// copies of them, so execute_quant_plan on the result finishes the others.
// Errors: no whole chunk, a GPTQ entry outside the blocks or of a type GPTQ
// cannot write, a matrix no calibration token reached.
Result<std::unique_ptr<ModelFile>> run_gptq(std::unique_ptr<ModelFile> src, QuantPlan* plan,
                                            const std::vector<int32_t>& tokens, const GptqRunOptions& o,
                                            ThreadPool& pool);

}  // namespace ember
