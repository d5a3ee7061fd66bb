// Structured-output flags shared by generate and bench throughput:
// --grammar FILE (GBNF), --json-schema FILE, --json (any object),
// --regex RE, --choice A,B,C.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "core/status.h"
#include "grammar/grammar.h"

namespace pagoda::cli {

struct GrammarOptions {
  std::string grammar_file;
  std::string json_schema_file;
  bool json = false;
  std::string regex;
  std::string choices;  // comma-separated
};

// json_flag: the any-object flag's name ("--json"; bench throughput, whose
// --json means JSON output, passes "--json-object").
void add_grammar_options(CLI::App& app, GrammarOptions* opts, const char* json_flag = "--json");
// The GBNF text of the flags ("" when none is set); an error names the flag.
Result<std::string> grammar_text(const GrammarOptions& opts);
// The compiled grammar (null when no flag is set).
Result<std::shared_ptr<const grammar::Grammar>> grammar_from_options(const GrammarOptions& opts);

}  // namespace pagoda::cli
