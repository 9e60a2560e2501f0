// ember: command-line entry point. Dispatches to subcommands.
#include <cstdio>
#include <cstring>

#include "cli/cmd_router.h"
#include "cli/common.h"
#include "core/cpu_features.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**, int);
  const char* help;
};

constexpr Command kCommands[] = {
    {"run", ember::cli::cmd_run, "generate text from a prompt"},
    {"serve", ember::cli::cmd_serve, "OpenAI-compatible HTTP server with a chat page"},
    {"router", ember::cli::cmd_router, "one OpenAI endpoint in front of data-parallel ember serve workers"},
    {"info", ember::cli::cmd_info, "describe a model file"},
    {"bench", ember::cli::cmd_bench, "measure prompt-processing and generation speed"},
    {"quantize", ember::cli::cmd_quantize, "write a model in another tensor type"},
    {"prune", ember::cli::cmd_prune, "remove weights, heads, FFN channels, layers or output tokens of a model"},
    {"tokenize", ember::cli::cmd_tokenize, "print the token ids of a text"},
    {"detokenize", ember::cli::cmd_detokenize, "print the text of token ids"},
    {"template", ember::cli::cmd_template, "render a chat with the model's template"},
    {"perplexity", ember::cli::cmd_perplexity, "perplexity of a text, KL divergence against saved logits"},
    {"gen-model", ember::cli::cmd_gen_model, "write a random-weight model of a real architecture and shape"},
    {"imatrix", ember::cli::cmd_imatrix, "importance matrix of a model over calibration text (llama.cpp format)"},
    {"eval", ember::cli::cmd_eval, "KL divergence, top-1 and perplexity of a model against a base on a text"},
    {"distill", ember::cli::cmd_distill, "train a smaller student to reproduce a teacher (knowledge distillation)"},
};

void print_usage(FILE* f) {
  std::fprintf(f, "usage: ember <command> [options]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(f, "  %-12s %s\n", c.name, c.help);
  std::fprintf(f, "\nRun 'ember <command> --help' for the options of a command.\nCPU: %s (using %s kernels)\n",
               ember::cpu_features_string().c_str(), ember::isa_name(ember::active_isa()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return ember::cli::kExitUsage;
  }
  if (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    print_usage(stdout);
    return 0;
  }
  for (const Command& c : kCommands)
    if (!std::strcmp(argv[1], c.name)) return c.fn(argc, argv, 2);
  std::fprintf(stderr, "ember: unknown command '%s'\n", argv[1]);
  print_usage(stderr);
  return ember::cli::kExitUsage;
}
