// Helpers shared by the subcommands: CLI11 parsing with clear errors, and
// the default model location.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace pagoda::cli {

// Parses argv; on error or --help prints and returns the exit code to use
// (0 for --help), otherwise returns -1 to continue.
int parse_or_exit(CLI::App& app, int argc, char** argv);

// models/pagoda-small.gguf next to the binary's source tree or the cwd.
std::string default_model_path();

}  // namespace pagoda::cli
