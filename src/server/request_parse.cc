#include "server/request_parse.h"

#include <algorithm>
#include <limits>

namespace pagoda::server {

using nlohmann::json;

namespace {

MaybeError parse_stop(const FieldReader& r, RequestSpec* spec) {
  const json* v = r.find("stop");
  if (!v) return std::nullopt;
  if (v->is_string()) {
    if (v->get_ref<const std::string&>().size() > static_cast<size_t>(kMaxStopBytes))
      return bad_request("'stop' is longer than " + std::to_string(kMaxStopBytes) + " bytes", "stop");
    if (!v->get_ref<const std::string&>().empty()) spec->stop.push_back(v->get<std::string>());
    return std::nullopt;
  }
  if (!v->is_array()) return bad_request("'stop' must be a string or an array of strings", "stop");
  if (v->size() > static_cast<size_t>(kMaxStopStrings))
    return bad_request("'stop' has more than " + std::to_string(kMaxStopStrings) + " strings", "stop");
  size_t bytes = 0;
  for (const json& s : *v) {
    if (!s.is_string()) return bad_request("'stop' must be a string or an array of strings", "stop");
    bytes += s.get_ref<const std::string&>().size();
    if (!s.get_ref<const std::string&>().empty()) spec->stop.push_back(s.get<std::string>());
  }
  if (bytes > static_cast<size_t>(kMaxStopBytes))
    return bad_request("'stop' strings total more than " + std::to_string(kMaxStopBytes) + " bytes", "stop");
  return std::nullopt;
}

MaybeError parse_token_list(const json& v, const char* key, std::vector<int32_t>* out) {
  if (!v.is_array()) return bad_request(std::string("'") + key + "' must be an array of token ids", key);
  for (const json& t : v) {
    auto i = json_as_int(t);
    if (!i || *i < 0 || *i > std::numeric_limits<int32_t>::max())
      return bad_request(std::string("'") + key + "' must hold non-negative integer token ids", key);
    out->push_back(static_cast<int32_t>(*i));
  }
  return std::nullopt;
}

MaybeError parse_logit_bias(const FieldReader& r, SamplingParams* sp) {
  const json* v = r.find("logit_bias");
  if (!v) return std::nullopt;
  if (!v->is_object()) return bad_request("'logit_bias' must be an object of token id -> bias", "logit_bias");
  if (v->size() > static_cast<size_t>(kMaxLogitBias))
    return bad_request("'logit_bias' has more than " + std::to_string(kMaxLogitBias) + " entries", "logit_bias");
  for (const auto& [key, val] : v->items()) {
    size_t pos = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos != key.size() || id < 0 || id > std::numeric_limits<int32_t>::max())
      return bad_request("'logit_bias' key '" + key + "' is not a token id", "logit_bias");
    if (!val.is_number() || !(val.get<double>() >= -100.0 && val.get<double>() <= 100.0))
      return bad_request("'logit_bias' values must be numbers in [-100, 100]", "logit_bias");
    sp->logit_bias.emplace_back(static_cast<int32_t>(id), val.get<float>());
  }
  return std::nullopt;
}

// "kv_policy": "h2o", or {"type": "h2o", "budget": 512, "window": 64,
// "sinks": 4} (numbers it leaves out come from the server).
MaybeError parse_kv_policy(const FieldReader& r, RequestSpec* spec) {
  const json* v = r.find("kv_policy");
  if (!v) return std::nullopt;
  const std::string kWhat =
      "'kv_policy' must be \"full\", \"streaming\", \"snapkv\" or \"h2o\", or an object with such a \"type\"";
  const json* type = v;
  if (v->is_object()) {
    auto it = v->find("type");
    type = it == v->end() ? nullptr : &*it;
  }
  if (!type || !type->is_string()) return bad_request(kWhat, "kv_policy");
  const auto kind = parse_kv_policy_kind(type->get_ref<const std::string&>());
  if (!kind) return bad_request(kWhat, "kv_policy");
  KvPolicyRequest p{*kind, std::nullopt, std::nullopt, std::nullopt};
  if (v->is_object()) {
    const std::pair<const char*, std::optional<int32_t>*> fields[] = {
        {"sinks", &p.sinks}, {"window", &p.window}, {"budget", &p.budget}};
    for (const auto& [name, val] : v->items()) {
      const std::string& key = name;  // clang 14 cannot capture a structured binding
      if (key == "type") continue;
      auto f = std::find_if(std::begin(fields), std::end(fields), [&](const auto& f) { return key == f.first; });
      if (f == std::end(fields))
        return bad_request("'kv_policy' has an unknown field '" + key + "' (type, sinks, window, budget)", "kv_policy");
      const auto i = json_as_int(val);
      if (!i || *i < 0 || *i > (1 << 24))
        return bad_request("'kv_policy." + key + "' must be an integer in 0..16777216", "kv_policy");
      *f->second = static_cast<int32_t>(*i);
    }
  }
  spec->kv_policy = p;
  return std::nullopt;
}

// Fields accepted for compatibility but unused: only their types are checked.
MaybeError check_ignored_fields(const FieldReader& r) {
  static const std::pair<const char*, json::value_t> kIgnored[] = {
      {"user", json::value_t::string},
      {"suffix", json::value_t::string},
      {"response_format", json::value_t::object},
      {"tool_choice", json::value_t::string},
      {"parallel_tool_calls", json::value_t::boolean},
      {"service_tier", json::value_t::string},
      {"metadata", json::value_t::object},
      {"store", json::value_t::boolean},
  };
  for (const auto& [key, type] : kIgnored) {
    if (std::string(key) == "tool_choice" && r.find(key) && r.find(key)->is_object()) continue;
    if (auto e = r.expect_type(key, type)) return e;
  }
  return std::nullopt;
}

MaybeError parse_generation(const json& body, bool chat, GenerationParams* g) {
  if (!body.is_object()) return bad_request("the request body must be a JSON object");
  FieldReader r(body);
  SamplingParams& sp = g->base.sampling;
  int64_t max_tokens = -1;
  if (auto e = r.read_string("model", &g->model)) return e;
  if (auto e = r.read_int("max_tokens", 1, kMaxTokensLimit, &max_tokens)) return e;
  if (chat) {
    if (auto e = r.read_int("max_completion_tokens", 1, kMaxTokensLimit, &max_tokens)) return e;
  }
  if (max_tokens > 0) g->max_tokens = static_cast<int32_t>(max_tokens);
  if (auto e = r.read_int32("n", 1, kMaxChoices, &g->n)) return e;
  if (auto e = r.read_bool("stream", &g->stream)) return e;
  if (const json* so = r.find("stream_options")) {
    if (!so->is_object()) return bad_request("'stream_options' must be an object", "stream_options");
    if (auto e = FieldReader(*so).read_bool("include_usage", &g->include_usage)) return e;
  }
  if (auto e = r.read_float("temperature", 0.0, 1e4, &sp.temperature)) return e;
  if (auto e = r.read_float("top_p", 1e-9, 1.0, &sp.top_p)) return e;
  if (auto e = r.read_int32("top_k", -1, std::numeric_limits<int32_t>::max(), &sp.top_k)) return e;
  if (sp.top_k < 0) sp.top_k = 0;
  if (auto e = r.read_float("min_p", 0.0, 1.0, &sp.min_p)) return e;
  if (auto e = r.read_float("presence_penalty", -2.0, 2.0, &sp.presence_penalty)) return e;
  if (auto e = r.read_float("frequency_penalty", -2.0, 2.0, &sp.frequency_penalty)) return e;
  if (auto e = r.read_float("repetition_penalty", 1e-6, 1e4, &sp.repetition_penalty)) return e;
  int64_t seed = 0;
  if (r.find("seed")) {
    if (auto e = r.read_int("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed))
      return e;
    sp.seed = static_cast<uint64_t>(seed);
  }
  if (auto e = parse_logit_bias(r, &sp)) return e;
  if (auto e = parse_stop(r, &g->base)) return e;
  if (const json* ids = r.find("stop_token_ids")) {
    if (ids->is_array() && ids->size() > static_cast<size_t>(kMaxStopTokenIds))
      return bad_request("'stop_token_ids' has more than " + std::to_string(kMaxStopTokenIds) + " ids",
                         "stop_token_ids");
    if (auto e = parse_token_list(*ids, "stop_token_ids", &g->base.stop_token_ids)) return e;
  }
  if (auto e = r.read_bool("ignore_eos", &g->base.ignore_eos)) return e;
  if (auto e = r.read_int32("priority", -1000000, 1000000, &g->base.priority)) return e;
  if (const json* slo = r.find("slo")) {
    // {"ttft_ms": X, "tpot_ms": Y}: latency targets (the slo policy).
    if (!slo->is_object()) return bad_request("'slo' must be an object with ttft_ms and/or tpot_ms", "slo");
    FieldReader sr(*slo);
    float ttft = 0, tpot = 0;
    for (auto [key, out] : {std::pair<const char*, float*>{"ttft_ms", &ttft}, {"tpot_ms", &tpot}}) {
      if (auto e = sr.read_float(key, 0.0, 1e9, out)) return bad_request("'slo." + e->message.substr(1), "slo");
    }
    for (const auto& [key, val] : slo->items()) {
      if (key != "ttft_ms" && key != "tpot_ms")
        return bad_request("'slo' has an unknown field '" + key + "' (ttft_ms, tpot_ms)", "slo");
    }
    g->base.slo_ttft_s = ttft / 1e3;
    g->base.slo_tpot_s = tpot / 1e3;
  }
  if (auto e = parse_kv_policy(r, &g->base)) return e;
  if (auto e = r.read_bool("use_beam_search", &g->base.use_beam_search)) return e;
  if (auto e = r.read_float("length_penalty", -10.0, 10.0, &g->base.length_penalty)) return e;
  int64_t best_of = g->n;
  if (auto e = r.read_int("best_of", 1, kMaxChoices, &best_of)) return e;
  if (g->base.use_beam_search) {  // vLLM's legacy API: best_of is the beam width
    if (best_of < g->n || best_of > 64) return bad_request("beam search needs n <= best_of <= 64", "best_of");
    g->base.beam_width = static_cast<int32_t>(best_of);
  } else if (best_of != g->n) {
    ApiError e = bad_request("'best_of' different from 'n' is not supported", "best_of");
    e.http_status = 422;
    return e;
  }
  return check_ignored_fields(r);
}

MaybeError parse_prompt(const json* v, std::vector<PromptInput>* out) {
  if (!v) return bad_request("'prompt' is required", "prompt");
  if (v->is_string()) {
    out->push_back({false, v->get<std::string>(), {}});
    return std::nullopt;
  }
  if (!v->is_array() || v->empty())
    return bad_request("'prompt' must be a string, an array of strings, or (arrays of) token ids", "prompt");
  const json& first = v->front();
  if (first.is_number()) {  // one prompt of token ids
    PromptInput p{true, {}, {}};
    if (auto e = parse_token_list(*v, "prompt", &p.tokens)) return e;
    out->push_back(std::move(p));
    return std::nullopt;
  }
  for (const json& item : *v) {
    if (item.is_string()) {
      out->push_back({false, item.get<std::string>(), {}});
    } else if (item.is_array() && !item.empty()) {
      PromptInput p{true, {}, {}};
      if (auto e = parse_token_list(item, "prompt", &p.tokens)) return e;
      out->push_back(std::move(p));
    } else {
      return bad_request("'prompt' items must be strings or non-empty arrays of token ids", "prompt");
    }
  }
  return std::nullopt;
}

// Content as a string: a string, null (""), or an array of text parts.
MaybeError flatten_content(nlohmann::ordered_json& msg, size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) {
    msg["content"] = "";
    return std::nullopt;
  }
  if (it->is_string()) return std::nullopt;
  if (!it->is_array()) return bad_request("'" + where + "' must be a string or an array of content parts", where);
  std::string text;
  for (const auto& part : *it) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return bad_request("'" + where + "' parts must be objects with a 'type'", where);
    if (part["type"] != "text") {
      ApiError e = bad_request(
          "content part type '" + part["type"].get<std::string>() + "' is not supported by this model (text only)",
          where);
      e.http_status = 422;
      return e;
    }
    if (!part.contains("text") || !part["text"].is_string())
      return bad_request("'" + where + "' text parts need a string 'text'", where);
    text += part["text"].get<std::string>();
  }
  msg["content"] = text;
  return std::nullopt;
}

}  // namespace

MaybeError parse_completion_request(const json& body, CompletionRequest* out) {
  if (auto e = parse_generation(body, false, &out->gen)) return e;
  FieldReader r(body);
  if (auto e = parse_prompt(r.find("prompt"), &out->prompts)) return e;
  if (auto e = r.read_bool("echo", &out->echo)) return e;
  if (auto e = r.read_int32("logprobs", 0, kMaxLogprobs, &out->logprobs)) return e;
  if (out->echo && out->logprobs >= 0) {
    ApiError e = bad_request("'echo' with 'logprobs' (prompt logprobs) is not supported", "echo");
    e.http_status = 422;
    return e;
  }
  out->gen.base.sampling.logprobs = out->logprobs;
  return std::nullopt;
}

MaybeError parse_chat_request(const json& body, ChatRequest* out) {
  if (auto e = parse_generation(body, true, &out->gen)) return e;
  FieldReader r(body);
  const json* msgs = r.find("messages");
  if (!msgs) return bad_request("'messages' is required", "messages");
  if (!msgs->is_array()) return bad_request("'messages' must be an array", "messages");
  if (msgs->empty()) return bad_request("'messages' must not be empty", "messages");
  out->messages = *msgs;
  for (size_t i = 0; i < out->messages.size(); ++i) {
    auto& m = out->messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad_request("'" + where + "' must be an object", where);
    if (!m.contains("role") || !m["role"].is_string())
      return bad_request("'" + where + ".role' must be a string", where + ".role");
    static const char* kRoles[] = {"system", "user", "assistant", "tool", "developer", "function"};
    bool known = false;
    for (const char* role : kRoles) known = known || m["role"] == role;
    if (!known)
      return bad_request("'" + where + ".role' '" + m["role"].get<std::string>() + "' is unknown", where + ".role");
    if (auto e = flatten_content(m, i)) return e;
  }
  if (const json* tools = r.find("tools")) {
    if (!tools->is_array()) return bad_request("'tools' must be an array", "tools");
    out->tools = *tools;
  }
  if (const json* kw = r.find("chat_template_kwargs")) {
    if (!kw->is_object()) return bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    out->template_kwargs = *kw;
  }
  if (auto e = r.read_bool("add_generation_prompt", &out->add_generation_prompt)) return e;
  if (auto e = r.read_bool("logprobs", &out->logprobs)) return e;
  if (auto e = r.read_int32("top_logprobs", 0, kMaxLogprobs, &out->top_logprobs)) return e;
  if (r.find("top_logprobs") && !out->logprobs)
    return bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  out->gen.base.sampling.logprobs = out->logprobs ? out->top_logprobs : -1;
  return std::nullopt;
}

void restore_key_order(const nlohmann::ordered_json& body, ChatRequest* r) {
  const auto& msgs = body.at("messages");
  for (size_t i = 0; i < r->messages.size() && i < msgs.size(); ++i) {
    nlohmann::ordered_json m = msgs[i];
    m["content"] = r->messages[i]["content"];
    r->messages[i] = std::move(m);
  }
  if (r->tools.is_array()) r->tools = body.at("tools");
  if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object())
    r->template_kwargs = body["chat_template_kwargs"];
}

Result<RequestSpec> make_prompt_spec(const GenerationParams& p, const std::vector<int32_t>& prompt,
                                     int32_t default_max_tokens, int32_t max_model_len, bool unbounded) {
  const auto prompt_len = static_cast<int64_t>(prompt.size());
  int64_t max_tokens = 0;
  if (unbounded) {
    max_tokens = p.max_tokens ? *p.max_tokens : std::max<int64_t>({max_model_len - prompt_len, default_max_tokens, 16});
  } else {
    if (prompt_len >= max_model_len)
      return out_of_range("the prompt has " + std::to_string(prompt_len) +
                          " tokens but the model's context length is " + std::to_string(max_model_len));
    const int64_t room = max_model_len - prompt_len;
    max_tokens = p.max_tokens ? *p.max_tokens : (default_max_tokens > 0 ? default_max_tokens : room);
    if (!p.max_tokens) max_tokens = std::min(max_tokens, room);
    if (prompt_len + max_tokens > max_model_len)
      return out_of_range("this model's maximum context length is " + std::to_string(max_model_len) + " tokens, but " +
                          std::to_string(prompt_len) + " prompt tokens and " + std::to_string(max_tokens) +
                          " max_tokens were requested");
  }
  if (max_tokens * p.n > kMaxTokensPerRequest)
    return out_of_range("n x max_tokens = " + std::to_string(max_tokens * p.n) + " exceeds the limit of " +
                        std::to_string(kMaxTokensPerRequest) + " tokens per request; lower n or max_tokens");
  RequestSpec s = p.base;
  s.prompt = prompt;
  s.n = p.n;  // choice k is seeded with seed + k by the engine
  s.max_tokens = static_cast<int32_t>(max_tokens);
  return s;
}

}  // namespace pagoda::server
