// `pagoda <command> [flags]`: dispatch to one subcommand.
#include <cstdio>
#include <cstring>
#include <exception>

#include "cli/commands.h"
#include "gguf/mapping_guard.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};

constexpr Command kCommands[] = {
    {"generate", pagoda::cli::cmd_generate, "generate text from a prompt"},
    {"tokenize", pagoda::cli::cmd_tokenize, "print the token ids of a text"},
    {"make-model", pagoda::cli::cmd_make_model, "write a random-weight GGUF model"},
    {"serve", pagoda::cli::cmd_serve, "OpenAI-compatible HTTP server"},
    {"router", pagoda::cli::cmd_router, "OpenAI endpoint in front of prefill/decode disaggregated instances"},
    {"perplexity", pagoda::cli::cmd_perplexity, "perplexity of a text file (llama.cpp method)"},
    {"logits", pagoda::cli::cmd_logits, "logits of every position of token ids (raw float32)"},
    {"spec", pagoda::cli::cmd_spec, "speculative decoding tools: build-datastore"},
    {"grammar", pagoda::cli::cmd_grammar, "print the GBNF of a JSON Schema, regex or choice list (structured output)"},
    {"quantize", pagoda::cli::cmd_quantize, "quantize a GGUF model (llama.cpp's mixes; RTN, imatrix, GPTQ)"},
    {"imatrix", pagoda::cli::cmd_imatrix, "collect an importance matrix from calibration text"},
    {"convert", pagoda::cli::cmd_convert, "convert a model: MHA -> GQA/MQA (--kv-heads N)"},
    {"bench", pagoda::cli::cmd_bench, "benchmarks: model (pp/tg tokens/s), throughput (offline serving)"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: pagoda <command> [options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
  std::fprintf(out, "\nRun 'pagoda <command> --help' for the options of one command.\n");
}

}  // namespace

int main(int argc, char** argv) {
  pagoda::gguf::install_mapping_guard();  // a model file truncated under us: a clear message, not SIGBUS
  if (argc < 2) {
    std::fprintf(stderr, "pagoda: error: no command given\n\n");
    usage(stderr);
    return 2;
  }
  if (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (!std::strcmp(argv[1], c.name)) {
      try {
        // Subcommands see argv[0] = "pagoda <name>" style: shift by one.
        return c.fn(argc - 1, argv + 1);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "pagoda %s: error: %s\n", c.name, e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "pagoda: error: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
