#include "server/response_format.h"

namespace pagoda::server {

using nlohmann::json;

json finish_reason_json(FinishReason r) {
  if (r == FinishReason::kNone) return nullptr;
  return std::string(finish_reason_name(r));
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json completion_logprobs(const std::vector<SampleResult>& samples, const PieceFn& piece, int32_t num_top,
                         size_t offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const SampleResult& s : samples) {
    const std::string p = piece(s.token);
    tokens.push_back(p);
    lps.push_back(s.logprob);
    offsets.push_back(offset);
    offset += p.size();
    if (num_top > 0) {
      json top = json::object();
      for (const auto& t : s.top) top[piece(t.token)] = t.logprob;
      tops.push_back(std::move(top));
    }
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", num_top > 0 ? tops : json(nullptr)},
          {"text_offset", offsets}};
}

static json token_entry(const std::string& p, float logprob) {
  json bytes = json::array();
  for (unsigned char c : p) bytes.push_back(static_cast<int>(c));
  return {{"token", p}, {"logprob", logprob}, {"bytes", bytes}};
}

json chat_logprobs(const std::vector<SampleResult>& samples, const PieceFn& piece) {
  json content = json::array();
  for (const SampleResult& s : samples) {
    json e = token_entry(piece(s.token), s.logprob);
    json top = json::array();
    for (const auto& t : s.top) top.push_back(token_entry(piece(t.token), t.logprob));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", content}};
}

json completion_response(const ResponseMeta& m, const std::vector<ChoiceResult>& choices, const Usage& usage,
                         const PieceFn& piece, int32_t logprobs) {
  json cs = json::array();
  for (const ChoiceResult& c : choices) {
    cs.push_back({{"index", c.index},
                  {"text", c.text},
                  {"logprobs", logprobs >= 0 ? completion_logprobs(c.samples, piece, logprobs, 0) : json(nullptr)},
                  {"finish_reason", finish_reason_json(c.finish_reason)}});
  }
  return {{"id", m.id},    {"object", "text_completion"}, {"created", m.created}, {"model", m.model},
          {"choices", cs}, {"usage", usage_json(usage)}};
}

json chat_response(const ResponseMeta& m, const std::vector<ChoiceResult>& choices, const Usage& usage,
                   const PieceFn& piece, bool logprobs) {
  json cs = json::array();
  for (const ChoiceResult& c : choices) {
    json message = {{"role", "assistant"}, {"content", c.text}};
    json reason = finish_reason_json(c.finish_reason);
    if (c.tool_calls.is_array() && !c.tool_calls.empty()) {
      if (c.text.empty()) message["content"] = nullptr;
      message["tool_calls"] = c.tool_calls;
      reason = "tool_calls";
    }
    cs.push_back({{"index", c.index},
                  {"message", std::move(message)},
                  {"logprobs", logprobs ? chat_logprobs(c.samples, piece) : json(nullptr)},
                  {"finish_reason", std::move(reason)}});
  }
  return {{"id", m.id},    {"object", "chat.completion"}, {"created", m.created}, {"model", m.model},
          {"choices", cs}, {"usage", usage_json(usage)}};
}

json completion_chunk(const ResponseMeta& m, int32_t index, const std::string& text, json logprobs, FinishReason reason,
                      bool with_usage) {
  json j = {{"id", m.id},
            {"object", "text_completion"},
            {"created", m.created},
            {"model", m.model},
            {"choices", json::array({{{"index", index},
                                      {"text", text},
                                      {"logprobs", std::move(logprobs)},
                                      {"finish_reason", finish_reason_json(reason)}}})}};
  if (with_usage) j["usage"] = nullptr;
  return j;
}

json chat_chunk(const ResponseMeta& m, int32_t index, json delta, json logprobs, FinishReason reason, bool with_usage) {
  json j = {{"id", m.id},
            {"object", "chat.completion.chunk"},
            {"created", m.created},
            {"model", m.model},
            {"choices", json::array({{{"index", index},
                                      {"delta", std::move(delta)},
                                      {"logprobs", std::move(logprobs)},
                                      {"finish_reason", finish_reason_json(reason)}}})}};
  if (with_usage) j["usage"] = nullptr;
  return j;
}

json usage_chunk(const ResponseMeta& m, const char* object, const Usage& usage) {
  return {{"id", m.id},       {"object", object},         {"created", m.created},
          {"model", m.model}, {"choices", json::array()}, {"usage", usage_json(usage)}};
}

}  // namespace pagoda::server
