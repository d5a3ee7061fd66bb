#include "server/tool_calls.h"

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace pagoda::server {

using nlohmann::ordered_json;

namespace {

constexpr const char* kOpen = "<tool_call>";
constexpr const char* kClose = "</tool_call>";

const ordered_json* find(const ordered_json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// A string field, or "" when absent or of another type (messages reach here
// validated, but this must not throw on anything).
std::string text_of(const ordered_json& obj, const char* key) {
  if (!obj.is_object()) return "";
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool has_tool(const ordered_json& tools, const std::string& name) {
  for (const ordered_json& t : tools) {
    if (t["function"]["name"] == name) return true;
  }
  return false;
}

// The system text that asks a model whose template knows no tools to use
// them, in the syntax parse_tool_calls reads.
// Kept short: small models have small contexts.
std::string tools_system_text(const ordered_json& tools) {
  std::string s = "Tools you can call, one per line:";
  for (const ordered_json& t : tools) s += "\n" + t["function"].dump();
  s += "\nTo call one, write <tool_call>\n{\"name\": NAME, \"arguments\": {...}}\n</tool_call>";
  return s;
}

std::string call_text(const ordered_json& fn) {
  ordered_json call = {
      {"name", text_of(fn, "name")},
      {"arguments", fn.is_object() && fn.contains("arguments") ? fn["arguments"] : ordered_json::object()}};
  return std::string(kOpen) + "\n" + call.dump() + "\n" + kClose;
}

// A call's JSON object: {"name": "...", "arguments": {...}} ("parameters" too).
bool parse_call_json(const nlohmann::json& j, ParsedToolCall* out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  out->name = j["name"].get<std::string>();
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  if (!j.contains(key)) {
    out->arguments = "{}";
  } else if (j[key].is_string()) {
    out->arguments = j[key].get<std::string>();
  } else {
    out->arguments = j[key].dump();
  }
  return true;
}

bool parse_call(const std::string& body, ParsedToolCall* out) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  return !j.is_discarded() && parse_call_json(j, out);
}

// A whole answer in the Llama 3 (one object) or Mistral (an array of
// objects, or one) form.
bool parse_whole_answer(const std::string& text, std::vector<ParsedToolCall>* calls) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return false;
  std::vector<ParsedToolCall> found;
  for (const nlohmann::json& item : j.is_array() ? j : nlohmann::json::array({j})) {
    ParsedToolCall call;
    if (!parse_call_json(item, &call)) return false;
    found.push_back(std::move(call));
  }
  if (found.empty()) return false;
  calls->insert(calls->end(), found.begin(), found.end());
  return true;
}

// The longest suffix of s that is a proper prefix of `tag`.
size_t partial_tag(const std::string& s, const std::string& tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.compare(s.size() - n, n, tag, 0, n) == 0) return n;
  }
  return 0;
}

}  // namespace

ToolFormat tool_format_for_template(const std::string& source) {
  if (source.find("[TOOL_CALLS]") != std::string::npos) return ToolFormat::kMistral;
  if (source.find("<tool_call>") == std::string::npos && source.find("\"parameters\": ") != std::string::npos)
    return ToolFormat::kLlama3;
  return ToolFormat::kHermes;
}

MaybeError parse_tool_request(const ordered_json& body, ToolRequest* out) {
  *out = ToolRequest{};
  if (const ordered_json* tools = find(body, "tools")) {
    if (!tools->is_array()) return bad_request("'tools' must be an array", "tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      const ordered_json& t = (*tools)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || text_of(t, "type") != "function" || !t.contains("function") || !t["function"].is_object())
        return bad_request("'" + where + "' must be {\"type\": \"function\", \"function\": {...}}", "tools");
      const ordered_json& fn = t["function"];
      if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty())
        return bad_request("'" + where + ".function.name' must be a non-empty string", "tools");
      if (fn.contains("parameters") && !fn["parameters"].is_object() && !fn["parameters"].is_null())
        return bad_request("'" + where + ".function.parameters' must be a JSON Schema object", "tools");
    }
    out->tools = *tools;
  }
  if (const ordered_json* p = find(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) return bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    out->parallel = p->get<bool>();
  }
  const ordered_json* c = find(body, "tool_choice");
  if (!c) return std::nullopt;
  const char* kWhat =
      "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": "
      "...}}";
  if (c->is_string()) {
    const std::string s = c->get<std::string>();
    if (s == "auto") {
      out->choice = ToolRequest::Choice::kAuto;
    } else if (s == "none") {
      out->choice = ToolRequest::Choice::kNone;
    } else if (s == "required") {
      out->choice = ToolRequest::Choice::kRequired;
    } else {
      return bad_request(kWhat, "tool_choice");
    }
  } else if (c->is_object() && text_of(*c, "type") == "function" && c->contains("function") &&
             (*c)["function"].is_object() && (*c)["function"].contains("name") &&
             (*c)["function"]["name"].is_string()) {
    out->choice = ToolRequest::Choice::kNamed;
    out->name = (*c)["function"]["name"].get<std::string>();
    if (!has_tool(out->tools, out->name))
      return bad_request("'tool_choice' names '" + out->name + "', which is not in 'tools'", "tool_choice");
  } else {
    return bad_request(kWhat, "tool_choice");
  }
  if (out->choice == ToolRequest::Choice::kRequired && out->tools.empty())
    return bad_request("'tool_choice' \"required\" needs 'tools'", "tool_choice");
  return std::nullopt;
}

ordered_json prepare_tool_messages(const ordered_json& messages, const ToolRequest& req, bool template_renders_tools,
                                   ordered_json* template_tools) {
  *template_tools = ordered_json();
  ordered_json out = ordered_json::array();
  for (ordered_json m : messages) {
    // Arguments arrive as JSON text (OpenAI); templates write objects.
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
      for (ordered_json& call : m["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        ordered_json& fn = call["function"];
        if (fn.contains("arguments") && fn["arguments"].is_string()) {
          auto args = ordered_json::parse(fn["arguments"].get<std::string>(), nullptr, false);
          if (!args.is_discarded()) fn["arguments"] = std::move(args);
        }
      }
    }
    out.push_back(std::move(m));
  }
  const bool use_tools = !req.tools.empty() && req.choice != ToolRequest::Choice::kNone;
  if (template_renders_tools) {
    if (use_tools) *template_tools = req.tools;
    return out;
  }
  // The template knows no tools: write them, the calls and their results as
  // text in the syntax the model is asked to use.
  for (ordered_json& m : out) {
    if (!m.is_object()) continue;
    const std::string role = text_of(m, "role");
    if (role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array()) {
      std::string text = text_of(m, "content");
      for (const ordered_json& call : m["tool_calls"]) {
        if (call.is_object() && call.contains("function"))
          text += (text.empty() ? "" : "\n") + call_text(call["function"]);
      }
      m["content"] = text;
      m.erase("tool_calls");
    } else if (role == "tool") {
      m["content"] = "<tool_response>\n" + text_of(m, "content") + "\n</tool_response>";
    }
  }
  if (use_tools) {
    const std::string sys = tools_system_text(req.tools);
    if (!out.empty() && text_of(out[0], "role") == "system") {
      out[0]["content"] = text_of(out[0], "content") + "\n\n" + sys;
    } else {
      out.insert(out.begin(), ordered_json{{"role", "system"}, {"content", sys}});
    }
  }
  return out;
}

Result<std::string> tool_call_gbnf(const ToolRequest& req) {
  ordered_json branches = ordered_json::array();
  for (const ordered_json& t : req.tools) {
    const ordered_json& fn = t["function"];
    const std::string name = fn["name"].get<std::string>();
    if (req.choice == ToolRequest::Choice::kNamed && name != req.name) continue;
    ordered_json params =
        fn.contains("parameters") && fn["parameters"].is_object() ? fn["parameters"] : ordered_json{{"type", "object"}};
    const char* args = req.format == ToolFormat::kLlama3 ? "parameters" : "arguments";
    branches.push_back({{"type", "object"},
                        {"properties", {{"name", {{"const", name}}}, {args, params}}},
                        {"required", {"name", args}},
                        {"additionalProperties", false}});
  }
  const ordered_json schema = branches.size() == 1 ? branches[0] : ordered_json{{"anyOf", branches}};
  auto call = grammar::json_schema_to_gbnf(schema, "tool-call");
  if (!call) return invalid_argument("tools: " + call.status().message());
  std::string g;
  switch (req.format) {
    case ToolFormat::kHermes:
      g = "root ::= tool-call-block";
      if (req.parallel) g += " ( \"\\n\" tool-call-block )*";
      g += "\ntool-call-block ::= " + grammar::gbnf_literal(std::string(kOpen) + "\n") + " tool-call " +
           grammar::gbnf_literal(std::string("\n") + kClose) + "\n";
      break;
    case ToolFormat::kLlama3:  // one call per answer
      g = "root ::= tool-call\n";
      break;
    case ToolFormat::kMistral:
      g = std::string("root ::= \"[\" tool-call") + (req.parallel ? " ( \", \" tool-call )*" : "") + " \"]\"\n";
      break;
  }
  return g + *call;
}

void parse_tool_calls(const std::string& text, std::string* content, std::vector<ParsedToolCall>* calls,
                      ToolFormat format) {
  ToolCallStreamParser p(format);
  content->clear();
  calls->clear();
  p.push(text, content, calls);
  p.finish(content, calls);
}

std::string tool_call_id(const std::string& seed, size_t index) {
  static const char* kAlnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  uint64_t h = 1469598103934665603ull;
  for (const char ch : seed) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  h = (h ^ index) * 1099511628211ull;
  std::string id;
  for (int i = 0; i < 9; ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    id += kAlnum[(h >> 33) % 62];
  }
  return id;
}

nlohmann::json tool_calls_json(const std::vector<ParsedToolCall>& calls, const std::string& seed) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    out.push_back({{"id", tool_call_id(seed, i)},
                   {"type", "function"},
                   {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
  }
  return out;
}

void ToolCallStreamParser::push_whole(const std::string& delta, std::string* content) {
  if (decided_) {
    content->append(delta);
    return;
  }
  pending_ += delta;
  const size_t first = pending_.find_first_not_of(" \n\t");
  if (first == std::string::npos) return;
  const char opener = format_ == ToolFormat::kLlama3 ? '{' : '[';
  if (pending_[first] == opener || (format_ == ToolFormat::kMistral && pending_[first] == '{')) return;  // held whole
  decided_ = true;
  content->append(pending_);
  pending_.clear();
}

void ToolCallStreamParser::push(const std::string& delta, std::string* content, std::vector<ParsedToolCall>* calls) {
  if (format_ != ToolFormat::kHermes) {
    push_whole(delta, content);
    return;
  }
  pending_ += delta;
  while (true) {
    if (after_call_) {
      // Blank text between or after calls is not content.
      const size_t text = pending_.find_first_not_of(" \n");
      if (text == std::string::npos) {
        pending_.clear();
        return;
      }
      pending_.erase(0, text);
      after_call_ = false;
    }
    if (!in_block_) {
      const size_t open = pending_.find(kOpen);
      if (open == std::string::npos) {
        // Keep back only what could still become "<tool_call>".
        const size_t keep = partial_tag(pending_, kOpen);
        content->append(pending_, 0, pending_.size() - keep);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
      content->append(pending_, 0, open);
      pending_.erase(0, open + std::string(kOpen).size());
      in_block_ = true;
    }
    const size_t close = pending_.find(kClose);
    if (close == std::string::npos) return;
    ParsedToolCall call;
    const std::string body = pending_.substr(0, close);
    if (parse_call(body, &call)) {
      calls->push_back(std::move(call));
      ++num_calls_;
      pending_.erase(0, close + std::string(kClose).size());
      after_call_ = true;
    } else {
      content->append(kOpen).append(pending_, 0, close + std::string(kClose).size());
      pending_.erase(0, close + std::string(kClose).size());
    }
    in_block_ = false;
  }
}

void ToolCallStreamParser::finish(std::string* content, std::vector<ParsedToolCall>* calls) {
  if (format_ != ToolFormat::kHermes) {
    const size_t before = calls->size();
    if (!decided_ && parse_whole_answer(pending_, calls)) {
      num_calls_ += static_cast<int>(calls->size() - before);
    } else {
      content->append(pending_);
    }
    pending_.clear();
    return;
  }
  if (in_block_) {
    // An unfinished block: a call if its JSON is whole, else text.
    ParsedToolCall call;
    if (parse_call(pending_, &call)) {
      calls->push_back(std::move(call));
      ++num_calls_;
    } else {
      content->append(kOpen).append(pending_);
    }
  } else {
    content->append(pending_);
  }
  pending_.clear();
  in_block_ = false;
}

}  // namespace pagoda::server
