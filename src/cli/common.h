// Shared helpers for CLI subcommands: default model lookup and loading.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "model/model.h"
#include "transform/imatrix.h"
#include "tokenizer/tokenizer.h"

namespace ember::cli {

// The default model: $EMBER_MODEL, else models/gemma-3-270m-q4_k_m.gguf
// next to the working directory or the ember binary (../models).
std::string default_model_path();

// Resolves `-m` (empty: default) and checks the file exists; on failure
// prints a clear message and returns an empty string.
std::string resolve_model_path(const ArgParser& p, const std::string& m);

// The whole content of a file ("-": standard input); error: cannot read it.
Result<std::string> read_all(const std::string& path);

// A size such as "1073741824", "512M", "2G", "1.5GiB" in bytes; false if malformed.
bool parse_bytes(const std::string& s, size_t* out);
// "512" or "128,256,512" -> {128, 256, 512}, each in [lo, hi]; the error
// names the flag (`name`).
Status parse_int_list(const std::string& name, const std::string& text, int lo, int hi, std::vector<int>* out);
// "235.2 MiB" / "1.25 GiB".
std::string human_bytes(double bytes);

// A model and its tokenizer, loaded from `-m` (empty: the default model).
struct LoadedModel {
  std::string path;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};
// Load-time choices on the command line (run, serve, bench, perplexity):
// --detect-sparsity stores the Q8_0 / Q4_0 block matrices of a dense file
// that are sparse enough (at least 10% fewer bytes: an exact 2:4 matrix, a
// pruned dense export) in the sparse formats in memory
// (transform/sparse_store.h); a line on stderr says what it stored.
struct LoadFlags {
  bool detect_sparsity = false;
  // Keep the file's weight layout (a device backend uploads it as it is):
  // no CPU interleaving (prepare_for_cpu). Set by --device, not a flag.
  bool file_layout = false;
  void add_to(ArgParser& p);
};
// Model::load, with the LoadFlags applied to the file first. Error: also
// --detect-sparsity with tensor parallelism.
Result<std::unique_ptr<Model>> load_model(const std::string& path, const ModelShard& shard, const LoadFlags& flags);
// On failure prints a clear message (usage error) and returns false. The
// model's weights are interleaved for the CPU kernels (prepare_for_cpu)
// unless flags.file_layout.
// `shard`: the part a rank of a parallel job holds (model/shard.h).
bool load_model_and_tokenizer(const ArgParser& p, const std::string& m, LoadedModel* out,
                              const ModelShard& shard = {}, const LoadFlags& flags = {});
// Model::interleave_weights on every core, unless EMBER_REPACK=0 (the plain
// rows, for A/B measurements; results are bit-identical either way), then
// Model::build_activation_columns (a file with activation-sparsity
// thresholds).
void prepare_for_cpu(Model& model);

// Calibration text (cmd_imatrix.cpp): data/calibration.txt next to the
// working directory or the ember binary (../data).
std::string default_calibration_path();

// Subcommand entry points (argv[first] is the first argument after the name).
int cmd_info(int argc, char** argv, int first);
int cmd_run(int argc, char** argv, int first);
int cmd_serve(int argc, char** argv, int first);
int cmd_bench(int argc, char** argv, int first);
int cmd_bench_serve(int argc, char** argv, int first);  // `ember bench serve`
int cmd_quantize(int argc, char** argv, int first);
int cmd_prune(int argc, char** argv, int first);
int cmd_tokenize(int argc, char** argv, int first);
int cmd_detokenize(int argc, char** argv, int first);
int cmd_template(int argc, char** argv, int first);
int cmd_perplexity(int argc, char** argv, int first);
int cmd_gen_model(int argc, char** argv, int first);
int cmd_imatrix(int argc, char** argv, int first);
int cmd_eval(int argc, char** argv, int first);
int cmd_distill(int argc, char** argv, int first);

}  // namespace ember::cli
