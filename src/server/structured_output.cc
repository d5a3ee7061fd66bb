#include "server/structured_output.h"

#include "grammar/json_schema.h"

namespace pagoda::server {

using nlohmann::ordered_json;
using Kind = StructuredOutputRequest::Kind;

namespace {

// The fields, in the order they are looked for; only one may be set.
constexpr const char* kFields[] = {"response_format", "guided_json", "guided_regex", "guided_choice",
                                   "guided_grammar",  "grammar",     "json_schema"};

const ordered_json* find(const ordered_json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

MaybeError parse_response_format(const ordered_json& v, StructuredOutputRequest* out) {
  const char* kParam = "response_format";
  if (!v.is_object()) return bad_request("'response_format' must be an object", kParam);
  const auto type = v.find("type");
  if (type == v.end() || !type->is_string())
    return bad_request("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"", kParam);
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    out->kind = Kind::kJsonObject;
    return std::nullopt;
  }
  if (t != "json_schema")
    return bad_request("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", not \"" + t + "\"",
                       kParam);
  const auto js = v.find("json_schema");
  if (js == v.end() || !js->is_object())
    return bad_request("'response_format.json_schema' must be an object with a \"schema\"", kParam);
  const auto schema = js->find("schema");
  // OpenAI requires a name; a missing schema means "any JSON".
  out->kind = Kind::kJsonSchema;
  out->schema = schema == js->end() ? ordered_json(true) : *schema;
  return std::nullopt;
}

}  // namespace

MaybeError parse_structured_output(const ordered_json& body, StructuredOutputRequest* out) {
  *out = StructuredOutputRequest{};
  if (!body.is_object()) return std::nullopt;
  const char* set = nullptr;
  for (const char* key : kFields) {
    const ordered_json* v = find(body, key);
    if (!v) continue;
    if (std::string(key) == "response_format" && v->is_object() && v->contains("type") && (*v)["type"] == "text")
      continue;
    if (set)
      return bad_request(std::string("'") + key + "' and '" + set + "' cannot be used together: choose one", key);
    set = key;
    out->param = key;
    const std::string k = key;
    if (k == "response_format") {
      if (auto e = parse_response_format(*v, out)) return e;
    } else if (k == "guided_json" || k == "json_schema") {
      // vLLM also takes the schema as a JSON string.
      if (v->is_string()) {
        try {
          out->schema = ordered_json::parse(v->get_ref<const std::string&>());
        } catch (const ordered_json::exception&) {
          return bad_request("'" + k + "' is a string that is not valid JSON", key);
        }
      } else if (v->is_object() || v->is_boolean()) {
        out->schema = *v;
      } else {
        return bad_request("'" + k + "' must be a JSON Schema (an object)", key);
      }
      out->kind = Kind::kJsonSchema;
    } else if (k == "guided_choice") {
      if (!v->is_array() || v->empty()) return bad_request("'guided_choice' must be a non-empty array of strings", key);
      for (const ordered_json& c : *v) {
        if (!c.is_string()) return bad_request("'guided_choice' must be a non-empty array of strings", key);
        out->choices.push_back(c.get<std::string>());
      }
      out->kind = Kind::kChoice;
    } else {
      if (!v->is_string()) return bad_request("'" + k + "' must be a string", key);
      out->text = v->get<std::string>();
      out->kind = k == "guided_regex" ? Kind::kRegex : Kind::kGrammar;
    }
  }
  return std::nullopt;
}

std::shared_ptr<const grammar::Grammar> GrammarCache::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void GrammarCache::put(const std::string& key, std::shared_ptr<const grammar::Grammar> g) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key)) return;
  lru_.emplace_front(key, std::move(g));
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

MaybeError compile_structured_output(const StructuredOutputRequest& req, GrammarCache& cache,
                                     std::shared_ptr<const grammar::Grammar>* out) {
  out->reset();
  Result<std::string> gbnf = std::string();
  switch (req.kind) {
    case Kind::kNone: return std::nullopt;
    case Kind::kJsonObject: gbnf = grammar::json_object_gbnf(); break;
    case Kind::kJsonSchema: gbnf = grammar::json_schema_to_gbnf(req.schema); break;
    case Kind::kRegex: gbnf = grammar::regex_gbnf(req.text); break;
    case Kind::kChoice: gbnf = grammar::choice_to_gbnf(req.choices); break;
    case Kind::kGrammar: gbnf = req.text; break;
  }
  if (!gbnf.is_ok()) return bad_request(gbnf.status().message(), req.param);
  if (auto hit = cache.find(*gbnf)) {
    *out = std::move(hit);
    return std::nullopt;
  }
  auto g = grammar::compile_gbnf(*gbnf);
  if (!g.is_ok()) {
    // A generated grammar that fails to compile is our bug, but the client
    // still learns which field caused it.
    return bad_request(g.status().message(), req.param);
  }
  cache.put(*gbnf, *g);
  *out = std::move(g).value();
  return std::nullopt;
}

}  // namespace pagoda::server
