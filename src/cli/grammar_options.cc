#include "cli/grammar_options.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_util.h"
#include "grammar/json_schema.h"

namespace pagoda::cli {

void add_grammar_options(CLI::App& app, GrammarOptions* o, const char* json_flag) {
  auto* g = app.add_option("--grammar", o->grammar_file, "constrain the output to a GBNF grammar file (llama.cpp's)");
  auto* s = app.add_option("--json-schema", o->json_schema_file, "constrain the output to a JSON Schema file");
  auto* j = app.add_flag(json_flag, o->json, "constrain the output to a JSON object");
  auto* r = app.add_option("--regex", o->regex, "constrain the output to match a regular expression");
  auto* c = app.add_option("--choice", o->choices, "constrain the output to one of comma-separated strings");
  for (auto* a : {g, s, j, r, c}) {
    for (auto* b : {g, s, j, r, c}) {
      if (a != b) a->excludes(b);
    }
  }
}

Result<std::string> grammar_text(const GrammarOptions& o) {
  if (!o.grammar_file.empty()) {
    std::string text;
    if (!read_text_file(o.grammar_file, &text)) return invalid_argument("--grammar: cannot read " + o.grammar_file);
    return text;
  }
  if (!o.json_schema_file.empty()) {
    std::string text;
    if (!read_text_file(o.json_schema_file, &text))
      return invalid_argument("--json-schema: cannot read " + o.json_schema_file);
    nlohmann::ordered_json schema;
    try {
      schema = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::ordered_json::exception& e) {
      return invalid_argument("--json-schema: " + o.json_schema_file + " is not JSON: " + e.what());
    }
    auto gbnf = grammar::json_schema_to_gbnf(schema);
    if (!gbnf) return invalid_argument("--json-schema: " + gbnf.status().message());
    return gbnf;
  }
  if (o.json) return grammar::json_object_gbnf();
  if (!o.regex.empty()) {
    auto gbnf = grammar::regex_gbnf(o.regex);
    if (!gbnf) return invalid_argument("--regex: " + gbnf.status().message());
    return gbnf;
  }
  if (!o.choices.empty()) {
    std::vector<std::string> list;
    std::stringstream ss(o.choices);
    for (std::string item; std::getline(ss, item, ',');) list.push_back(item);
    return grammar::choice_to_gbnf(list);
  }
  return std::string();
}

Result<std::shared_ptr<const grammar::Grammar>> grammar_from_options(const GrammarOptions& o) {
  auto text = grammar_text(o);
  if (!text) return text.status();
  if (text->empty()) return std::shared_ptr<const grammar::Grammar>();
  auto g = grammar::compile_gbnf(*text);
  if (!g) return g.status();
  return std::move(g).value();
}

}  // namespace pagoda::cli
