// `pagoda grammar`: prints the GBNF a structured-output constraint compiles
// from (a JSON Schema, a regex, choices) after checking that it compiles —
// the text generate --grammar and the server's `grammar` field accept.
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/grammar_options.h"

namespace pagoda::cli {

int cmd_grammar(int argc, char** argv) {
  CLI::App app("Print (and check) the GBNF grammar of a JSON Schema, regex, choice list or grammar file", "grammar");
  GrammarOptions opts;
  add_grammar_options(app, &opts);
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto text = grammar_text(opts);
  if (!text) return fail("grammar", text.status().message());
  if (text->empty()) return fail("grammar", "give one of --grammar, --json-schema, --json, --regex, --choice");
  auto g = grammar::compile_gbnf(*text);
  if (!g) return fail("grammar", g.status().message());
  std::fwrite(text->data(), 1, text->size(), stdout);
  std::fprintf(stderr, "pagoda grammar: %zu rules compiled\n", (*g)->num_rules());
  return 0;
}

}  // namespace pagoda::cli
