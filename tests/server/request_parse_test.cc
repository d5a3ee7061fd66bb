// Unit tests of the pure request parsing: OpenAI JSON -> engine specs.
#include "server/request_parse.h"

#include <gtest/gtest.h>

#include <cmath>

namespace pagoda::server {
namespace {

using nlohmann::json;

MaybeError parse_c(const std::string& text, CompletionRequest* out) {
  return parse_completion_request(json::parse(text), out);
}

TEST(RequestParse, CompletionDefaultsAndFields) {
  CompletionRequest r;
  ASSERT_FALSE(parse_c(R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,
      "min_p":0.1,"n":3,"stop":["a","","bb"],"seed":11,"logprobs":2,"presence_penalty":-1.5,
      "frequency_penalty":0.5,"logit_bias":{"5":-100,"7":3.5},"stream":true,
      "stream_options":{"include_usage":true},"echo":false,"user":"x"})",
                       &r));
  EXPECT_EQ(r.gen.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "hi");
  EXPECT_EQ(*r.gen.max_tokens, 7);
  EXPECT_EQ(r.gen.n, 3);
  EXPECT_TRUE(r.gen.stream);
  EXPECT_TRUE(r.gen.include_usage);
  const SamplingParams& sp = r.gen.base.sampling;
  EXPECT_FLOAT_EQ(sp.temperature, 0.5f);
  EXPECT_EQ(sp.top_k, 40);
  EXPECT_EQ(sp.logprobs, 2);
  EXPECT_EQ(*sp.seed, 11u);
  ASSERT_EQ(sp.logit_bias.size(), 2u);
  EXPECT_EQ(r.gen.base.stop, (std::vector<std::string>{"a", "bb"}));  // empty stop strings dropped

  CompletionRequest d;
  ASSERT_FALSE(parse_c(R"({"prompt":"x"})", &d));
  EXPECT_FALSE(d.gen.max_tokens.has_value());
  EXPECT_EQ(d.gen.base.sampling.logprobs, -1);
  EXPECT_EQ(d.gen.n, 1);
}

TEST(RequestParse, KvPolicyField) {
  CompletionRequest a, b, c;
  ASSERT_FALSE(parse_c(R"({"prompt":"x","kv_policy":"streaming"})", &a));
  ASSERT_TRUE(a.gen.base.kv_policy.has_value());
  EXPECT_EQ(a.gen.base.kv_policy->kind, KvPolicyKind::kStreaming);
  EXPECT_FALSE(a.gen.base.kv_policy->window || a.gen.base.kv_policy->sinks || a.gen.base.kv_policy->budget);
  ASSERT_FALSE(parse_c(R"({"prompt":"x","kv_policy":{"type":"h2o","budget":256,"window":32,"sinks":0}})", &b));
  EXPECT_EQ(b.gen.base.kv_policy->kind, KvPolicyKind::kH2o);
  EXPECT_EQ(*b.gen.base.kv_policy->budget, 256);
  EXPECT_EQ(*b.gen.base.kv_policy->window, 32);
  EXPECT_EQ(*b.gen.base.kv_policy->sinks, 0);
  ASSERT_FALSE(parse_c(R"({"prompt":"x"})", &c));
  EXPECT_FALSE(c.gen.base.kv_policy.has_value());  // the server's
}

TEST(RequestParse, PromptForms) {
  CompletionRequest a, b, c;
  ASSERT_FALSE(parse_c(R"({"prompt":[1,2,3]})", &a));
  ASSERT_EQ(a.prompts.size(), 1u);
  EXPECT_TRUE(a.prompts[0].is_tokens);
  EXPECT_EQ(a.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_FALSE(parse_c(R"({"prompt":["x","y"]})", &b));
  EXPECT_EQ(b.prompts.size(), 2u);
  ASSERT_FALSE(parse_c(R"({"prompt":[[1],[2,3]]})", &c));
  ASSERT_EQ(c.prompts.size(), 2u);
  EXPECT_EQ(c.prompts[1].tokens.size(), 2u);
}

// Every bad value is a 400 naming the field (or 422 for unsupported ones).
TEST(RequestParse, BadValues) {
  struct Case {
    const char* body;
    int status;
    const char* param;
  };
  const Case cases[] = {
      {R"({"prompt":"x","max_tokens":-1})", 400, "max_tokens"},
      {R"({"prompt":"x","max_tokens":0})", 400, "max_tokens"},
      {R"({"prompt":"x","max_tokens":1e300})", 400, "max_tokens"},
      {R"({"prompt":"x","max_tokens":99999999999999999999})", 400, "max_tokens"},
      {R"({"prompt":"x","max_tokens":"16"})", 400, "max_tokens"},
      {R"({"prompt":"x","max_tokens":1.5})", 400, "max_tokens"},
      {R"({"prompt":"x","temperature":-0.1})", 400, "temperature"},
      {R"({"prompt":"x","temperature":1e300})", 400, "temperature"},
      {R"({"prompt":"x","temperature":"hot"})", 400, "temperature"},
      {R"({"prompt":"x","top_p":0})", 400, "top_p"},
      {R"({"prompt":"x","n":0})", 400, "n"},
      {R"({"prompt":"x","n":100000})", 400, "n"},
      {R"({"prompt":"x","stream":"yes"})", 400, "stream"},
      {R"({"prompt":"x","stop":5})", 400, "stop"},
      {R"({"prompt":"x","stop":["a",1]})", 400, "stop"},
      {R"({"prompt":"x","logit_bias":{"abc":1}})", 400, "logit_bias"},
      {R"({"prompt":"x","logit_bias":{"3":1000}})", 400, "logit_bias"},
      {R"({"prompt":"x","presence_penalty":3})", 400, "presence_penalty"},
      {R"({"prompt":"x","logprobs":21})", 400, "logprobs"},
      {R"({"prompt":"x","user":42})", 400, "user"},
      {R"({"prompt":"x","model":7})", 400, "model"},
      {R"({"prompt":"x","seed":"s"})", 400, "seed"},
      {R"({"prompt":[-1]})", 400, "prompt"},
      {R"({"prompt":[]})", 400, "prompt"},
      {R"({"prompt":[[]]})", 400, "prompt"},
      {R"({"prompt":{"a":1}})", 400, "prompt"},
      {R"({"max_tokens":3})", 400, "prompt"},
      {R"({"prompt":"x","best_of":3})", 422, "best_of"},
      {R"({"prompt":"x","echo":true,"logprobs":1})", 422, "echo"},
      {R"({"prompt":"x","kv_policy":"lru"})", 400, "kv_policy"},
      {R"({"prompt":"x","kv_policy":7})", 400, "kv_policy"},
      {R"({"prompt":"x","kv_policy":{"budget":8}})", 400, "kv_policy"},
      {R"({"prompt":"x","kv_policy":{"type":"h2o","bogus":1}})", 400, "kv_policy"},
      {R"({"prompt":"x","kv_policy":{"type":"h2o","budget":-3}})", 400, "kv_policy"},
      {R"({"prompt":"x","kv_policy":{"type":"h2o","window":"8"}})", 400, "kv_policy"},
  };
  for (const Case& c : cases) {
    CompletionRequest r;
    auto e = parse_c(c.body, &r);
    ASSERT_TRUE(e.has_value()) << c.body;
    EXPECT_EQ(e->http_status, c.status) << c.body;
    EXPECT_EQ(e->param, c.param) << c.body << ": " << e->message;
    EXPECT_FALSE(e->message.empty());
  }
  CompletionRequest r;
  auto e = parse_completion_request(json::array({1, 2}), &r);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->http_status, 400);
}

TEST(RequestParse, Chat) {
  ChatRequest r;
  ASSERT_FALSE(parse_chat_request(json::parse(R"({"messages":[{"role":"system","content":"s"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":null}],"max_completion_tokens":5,"logprobs":true,"top_logprobs":3})"),
                                  &r));
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_EQ(*r.gen.max_tokens, 5);
  EXPECT_EQ(r.gen.base.sampling.logprobs, 3);

  struct Case {
    const char* body;
    int status;
  };
  const Case bad[] = {
      {R"({"messages":[]})", 400},
      {R"({})", 400},
      {R"({"messages":"hi"})", 400},
      {R"({"messages":[{"content":"x"}]})", 400},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", 400},
      {R"({"messages":[{"role":"user","content":5}]})", 400},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", 422},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", 400},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":50})", 400},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":{}})", 400},
  };
  for (const Case& c : bad) {
    ChatRequest q;
    auto e = parse_chat_request(json::parse(c.body), &q);
    ASSERT_TRUE(e.has_value()) << c.body;
    EXPECT_EQ(e->http_status, c.status) << c.body;
  }
}

TEST(RequestParse, PromptSpec) {
  GenerationParams g;
  g.n = 3;
  g.base.sampling.seed = 100;
  g.base.stop = {"a", "bb"};
  auto spec = make_prompt_spec(g, {1, 2, 3}, 16, 64);
  ASSERT_TRUE(spec.is_ok());
  EXPECT_EQ(spec->n, 3);  // one engine request for all n choices (one copy of prompt and stops)
  EXPECT_EQ(spec->prompt.size(), 3u);
  EXPECT_EQ(spec->max_tokens, 16);
  EXPECT_EQ(*spec->sampling.seed, 100u);  // the engine seeds choice k with seed + k
  EXPECT_EQ(spec->stop.size(), 2u);
  // Default max tokens <= 0: the rest of the context, capped by it.
  auto rest = make_prompt_spec(GenerationParams{}, std::vector<int32_t>(10, 1), 0, 64);
  ASSERT_TRUE(rest.is_ok());
  EXPECT_EQ(rest->max_tokens, 54);
  auto capped = make_prompt_spec(GenerationParams{}, std::vector<int32_t>(60, 1), 16, 64);
  ASSERT_TRUE(capped.is_ok());
  EXPECT_EQ(capped->max_tokens, 4);
  // Explicit max_tokens past the context, and prompts that fill it: out of range.
  GenerationParams big;
  big.max_tokens = 60;
  auto over = make_prompt_spec(big, std::vector<int32_t>(10, 1), 16, 64);
  ASSERT_FALSE(over.is_ok());
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(make_prompt_spec(GenerationParams{}, std::vector<int32_t>(64, 1), 16, 64).is_ok());
  // n x max_tokens is capped per request.
  GenerationParams wide;
  wide.n = 128;
  wide.max_tokens = static_cast<int32_t>(kMaxTokensPerRequest / 64);
  auto too_wide = make_prompt_spec(wide, {1}, 16, 1 << 24);
  ASSERT_FALSE(too_wide.is_ok());
  EXPECT_NE(too_wide.status().message().find("n x max_tokens"), std::string::npos);
  // No seed: none invented.
  auto unseeded = make_prompt_spec(GenerationParams{}, {1}, 4, 64);
  EXPECT_FALSE(unseeded->sampling.seed.has_value());
}

TEST(RequestParse, PromptSpecUnderStreamingHasNoContextLimit) {
  // --kv-policy streaming: prompt and output may pass the context.
  GenerationParams g;
  g.max_tokens = 5000;
  auto far = make_prompt_spec(g, std::vector<int32_t>(100, 1), 16, 64, true);
  ASSERT_TRUE(far.is_ok()) << far.status().message();
  EXPECT_EQ(far->max_tokens, 5000);
  // Without max_tokens: the rest of the context, at least the default or 16.
  auto dflt = make_prompt_spec(GenerationParams{}, std::vector<int32_t>(100, 1), 0, 64, true);
  ASSERT_TRUE(dflt.is_ok());
  EXPECT_EQ(dflt->max_tokens, 16);
  auto rest = make_prompt_spec(GenerationParams{}, std::vector<int32_t>(10, 1), 0, 64, true);
  EXPECT_EQ(rest->max_tokens, 54);
  // The per-request cap still holds.
  GenerationParams wide;
  wide.n = 128;
  wide.max_tokens = static_cast<int32_t>(kMaxTokensPerRequest / 64);
  EXPECT_FALSE(make_prompt_spec(wide, {1}, 16, 64, true).is_ok());
}

TEST(RequestParse, AmplificationCaps) {
  struct Case {
    json body;
    const char* param;
  };
  const std::string long_stop(kMaxStopBytes + 1, 'x');
  json many_stops = json::array();
  for (int i = 0; i < 16; ++i) many_stops.push_back(std::string(kMaxStopBytes / 8, 'y'));
  json many_ids = json::array();
  for (int i = 0; i <= kMaxStopTokenIds; ++i) many_ids.push_back(i);
  json many_bias = json::object();
  for (int i = 0; i <= kMaxLogitBias; ++i) many_bias[std::to_string(i)] = 1;
  const std::vector<Case> cases = {
      {{{"prompt", "a"}, {"stop", long_stop}}, "stop"},
      {{{"prompt", "a"}, {"stop", many_stops}}, "stop"},
      {{{"prompt", "a"}, {"stop_token_ids", many_ids}}, "stop_token_ids"},
      {{{"prompt", "a"}, {"logit_bias", many_bias}}, "logit_bias"},
  };
  for (const Case& c : cases) {
    CompletionRequest r;
    auto e = parse_completion_request(c.body, &r);
    ASSERT_TRUE(e.has_value()) << c.param;
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->param, c.param);
  }
}

TEST(JsonDepth, RefusesDeepNestingWithoutParsing) {
  EXPECT_FALSE(check_json_depth("{\"a\": [[1], {\"b\": 2}]}").has_value());
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_FALSE(check_json_depth(ok).has_value());
  const std::string deep = std::string(65000, '[') + std::string(65000, ']');
  auto e = check_json_depth(deep);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->http_status, 400);
  // Brackets inside strings (with escaped quotes) do not count.
  const std::string in_string = "{\"s\": \"\\\"" + std::string(1000, '[') + "\"}";
  EXPECT_FALSE(check_json_depth(in_string).has_value());
  const std::string mixed = "{\"a\":" + std::string(40, '[') + "{\"b\":" + std::string(40, '[');
  EXPECT_TRUE(check_json_depth(mixed).has_value());
}

}  // namespace
}  // namespace pagoda::server

namespace pagoda::server {
namespace {

TEST(RequestParse, SloTargets) {
  CompletionRequest r;
  ASSERT_FALSE(parse_completion_request(
      nlohmann::json::parse(R"({"prompt": "x", "slo": {"ttft_ms": 250, "tpot_ms": 40}})"), &r));
  EXPECT_DOUBLE_EQ(r.gen.base.slo_ttft_s, 0.25);
  EXPECT_NEAR(r.gen.base.slo_tpot_s, 0.04, 1e-9);
  for (const char* bad :
       {R"({"prompt": "x", "slo": 5})", R"({"prompt": "x", "slo": {"ttft_ms": -1}})",
        R"({"prompt": "x", "slo": {"ttft": 100}})", R"({"prompt": "x", "slo": {"tpot_ms": "fast"}})"}) {
    CompletionRequest b;
    auto e = parse_completion_request(nlohmann::json::parse(bad), &b);
    ASSERT_TRUE(e) << bad;
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->param, "slo") << bad;
    EXPECT_NE(e->message.find("slo"), std::string::npos) << e->message;
  }
}

}  // namespace
}  // namespace pagoda::server
