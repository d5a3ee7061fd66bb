// `pagoda tokenize`: print the token ids of a text (works on vocab-only GGUF).
#include <iostream>
#include <iterator>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {

int cmd_tokenize(int argc, char** argv) {
  CLI::App app("Print the token ids of a text", "tokenize");
  std::string model, prompt;
  bool from_stdin = false, ids = false, no_bos = false, parse_special = false;
  app.add_option("-m,--model", model, "GGUF file (model or vocabulary only)")->required();
  auto* p = app.add_option("-p,--prompt", prompt, "text to tokenize");
  auto* s = app.add_flag("--stdin", from_stdin, "read the text from standard input");
  p->excludes(s);
  app.add_flag("--ids", ids, "print only the ids, space separated");
  app.add_flag("--no-bos", no_bos, "do not add the BOS token");
  app.add_flag("--parse-special", parse_special, "match special-token text as special tokens");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (!from_stdin && p->count() == 0) {
    std::fprintf(stderr, "pagoda tokenize: error: give -p TEXT or --stdin\n");
    return 2;
  }
  if (from_stdin) prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());

  auto file = gguf::GGUFFile::open(model);
  if (!file) {
    std::fprintf(stderr, "pagoda tokenize: error: %s\n", file.status().message().c_str());
    return 1;
  }
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok) {
    std::fprintf(stderr, "pagoda tokenize: error: %s\n", tok.status().message().c_str());
    return 1;
  }
  const auto tokens = (*tok)->encode(prompt, !no_bos, parse_special);
  std::string line;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (ids) {
      line += (i ? " " : "") + std::to_string(tokens[i]);
    } else {
      line += std::to_string(tokens[i]) + " '" + (*tok)->token_to_piece(tokens[i]) + "'\n";
    }
  }
  std::cout << line << (ids ? "\n" : "");
  return 0;
}

}  // namespace pagoda::cli
