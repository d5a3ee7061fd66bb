// The `pagoda` subcommands. Each returns the process exit code; bad input
// prints a clear message to stderr and returns non-zero, never crashes.
#pragma once

namespace pagoda::cli {

int cmd_generate(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_make_model(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_logits(int argc, char** argv);
int cmd_spec(int argc, char** argv);
int cmd_grammar(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_imatrix(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_router(int argc, char** argv);
// `pagoda bench serve` (argv[0] is "serve").
int bench_serve(int argc, char** argv);
int bench_mpi(int argc, char** argv);

}  // namespace pagoda::cli
