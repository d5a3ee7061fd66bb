// Structured output in requests: OpenAI's response_format (json_object,
// json_schema), vLLM's guided_json / guided_regex / guided_choice /
// guided_grammar, and llama.cpp's grammar / json_schema fields, compiled to
// the grammar that constrains sampling (grammar/). Compiled grammars are
// cached by their source, so a schema sent again reuses its token masks.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "server/json_fields.h"

namespace pagoda::server {

struct StructuredOutputRequest {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kNone;
  std::string param;              // the request field it came from, for errors
  nlohmann::ordered_json schema;  // kJsonSchema, in the client's key order
  std::string text;               // kRegex: the regex; kGrammar: GBNF
  std::vector<std::string> choices;
};

// Reads the structured-output fields of a request body (parsed with key
// order kept). At most one may be set; a malformed one is a 400 naming it.
MaybeError parse_structured_output(const nlohmann::ordered_json& body, StructuredOutputRequest* out);

// A thread-safe LRU of compiled grammars by source text.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64) : capacity_(capacity) {}
  std::shared_ptr<const grammar::Grammar> find(const std::string& key);
  void put(const std::string& key, std::shared_ptr<const grammar::Grammar> g);

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const grammar::Grammar>>;
  std::mutex mu_;
  size_t capacity_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

// The grammar of a parsed request (null for kNone); an invalid schema,
// regex or grammar is a 400 that names the field and says where.
MaybeError compile_structured_output(const StructuredOutputRequest& req, GrammarCache& cache,
                                     std::shared_ptr<const grammar::Grammar>* out);

}  // namespace pagoda::server
