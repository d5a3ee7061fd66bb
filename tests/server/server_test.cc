// Integration tests: the real server on a loopback port, every endpoint,
// streaming, bad input with its status code, and auth.
#include <random>

#include "server_test_util.h"

namespace pagoda::server::testing {
namespace {

using nlohmann::json;

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new TestServer(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static TestServer* server_;
};
TestServer* ServerTest::server_ = nullptr;

TEST_F(ServerTest, HealthModelsMetrics) {
  auto c = server_->client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200);
  json j = body_json(m);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["max_model_len"], kTestCtx);
  auto met = c.Get("/metrics");
  ASSERT_TRUE(met);
  EXPECT_EQ(met->status, 200);
  for (const char* name : {"pagoda:num_requests_running", "pagoda:num_requests_waiting", "pagoda:num_requests_swapped",
                           "pagoda:kv_cache_usage_perc", "pagoda:prefix_cache_hit_rate", "pagoda:prompt_tokens_total",
                           "pagoda:generation_tokens_total", "pagoda:kv_cache_free_blocks"})
    EXPECT_GE(metric(met->body, name), 0) << name;
  EXPECT_GT(metric(met->body, "pagoda:kv_cache_bytes_per_token"), 0);
  EXPECT_EQ(metric(met->body, "pagoda:kv_evicted_tokens_total"), 0);  // the full cache evicts nothing
  for (const char* h : {"pagoda:time_to_first_token_seconds_bucket", "pagoda:time_per_output_token_seconds_bucket",
                        "pagoda:e2e_request_latency_seconds_bucket", "pagoda:request_queue_time_seconds_bucket"})
    EXPECT_NE(met->body.find(h), std::string::npos) << h;
}

TEST_F(ServerTest, CompletionGreedyIsDeterministicAndStreamsTheSameText) {
  auto c = server_->client();
  const std::string req = R"({"model":"tiny","prompt":"Hello there","max_tokens":12,"temperature":0,"ignore_eos":true)";
  auto a = post_json(c, "/v1/completions", req + "}");
  ASSERT_TRUE(a);
  ASSERT_EQ(a->status, 200) << a->body;
  json ja = body_json(a);
  EXPECT_EQ(ja["object"], "text_completion");
  EXPECT_EQ(ja["model"], "tiny");
  EXPECT_EQ(ja["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ja["usage"]["completion_tokens"], 12);
  EXPECT_GT(ja["usage"]["prompt_tokens"].get<int>(), 0);
  auto b = post_json(c, "/v1/completions", req + "}");
  EXPECT_EQ(body_json(b)["choices"][0]["text"], ja["choices"][0]["text"]);

  auto s = post_json(c, "/v1/completions", req + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200);
  EXPECT_NE(s->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  bool done = false;
  auto events = sse_events(s->body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i]["object"], "text_completion");
    EXPECT_TRUE(events[i]["usage"].is_null());
    EXPECT_EQ(events[i]["id"], events[0]["id"]);
    text += events[i]["choices"][0]["text"].get<std::string>();
    if (!events[i]["choices"][0]["finish_reason"].is_null()) finish = events[i]["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, ja["choices"][0]["text"]);
  EXPECT_EQ(finish, "length");
  EXPECT_TRUE(events.back()["choices"].empty());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 12);
}

// A request's own KV policy: streaming runs past the model's context (which
// the same request without it may not), in a window of the cache.
TEST_F(ServerTest, KvPolicyFieldStreamsPastTheContext) {
  auto c = server_->client();
  const std::string body =
      R"({"prompt":"Hello","temperature":0,"ignore_eos":true,"max_tokens":)" + std::to_string(kTestCtx + 200);
  auto refused = post_json(c, "/v1/completions", body + "}");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->body;
  auto r = post_json(c, "/v1/completions", body + R"(,"kv_policy":{"type":"streaming","sinks":4,"window":64}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(body_json(r)["usage"]["completion_tokens"], kTestCtx + 200);
  auto chat = post_json(
      c, "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"kv_policy":{"type":"h2o","budget":64}})");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 200) << chat->body;
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_GT(metric(m->body, "pagoda:kv_evicted_tokens_total"), 0) << m->body;
}

TEST_F(ServerTest, CompletionNEchoLogprobsAndTokenPrompts) {
  auto c = server_->client();
  auto r = post_json(c, "/v1/completions",
                     R"({"prompt":["ab","cd"],"n":2,"max_tokens":4,"seed":5,"ignore_eos":true,"echo":true})");
  ASSERT_EQ(r->status, 200) << r->body;
  json j = body_json(r);
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"].get<std::string>().substr(0, 2), i < 2 ? "ab" : "cd");
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], 16);
  auto lp = post_json(c, "/v1/completions", R"({"prompt":[1,2,3],"max_tokens":5,"logprobs":3,"ignore_eos":true})");
  ASSERT_EQ(lp->status, 200) << lp->body;
  json l = body_json(lp)["choices"][0]["logprobs"];
  ASSERT_EQ(l["tokens"].size(), 5u);
  ASSERT_EQ(l["top_logprobs"].size(), 5u);
  // A dict keyed by token text: tokens with the same text collapse.
  EXPECT_GE(l["top_logprobs"][0].size(), 1u);
  EXPECT_LE(l["top_logprobs"][0].size(), 3u);
  for (const auto& v : l["token_logprobs"]) EXPECT_LE(v.get<double>(), 0.0);
}

TEST_F(ServerTest, ChatCompletionAndStream) {
  auto c = server_->client();
  const std::string req =
      R"({"model":"tiny","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],
          "max_tokens":10,"temperature":0,"ignore_eos":true,"logprobs":true,"top_logprobs":2)";
  auto a = post_json(c, "/v1/chat/completions", req + "}");
  ASSERT_EQ(a->status, 200) << a->body;
  json ja = body_json(a);
  EXPECT_EQ(ja["object"], "chat.completion");
  EXPECT_EQ(ja["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(ja["choices"][0]["logprobs"]["content"].size(), 10u);
  EXPECT_EQ(ja["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  auto s = post_json(c, "/v1/chat/completions", req + R"(,"stream":true})");
  ASSERT_EQ(s->status, 200);
  bool done = false;
  auto ev = sse_events(s->body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (const auto& e : ev) {
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_FALSE(e.contains("usage"));
    if (e["choices"][0]["delta"].contains("content")) text += e["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(ev.back()["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(ev.back()["choices"][0]["delta"].empty());
  EXPECT_EQ(text, ja["choices"][0]["message"]["content"]);
}

TEST_F(ServerTest, TokenizeDetokenize) {
  auto c = server_->client();
  auto t = post_json(c, "/tokenize", R"({"prompt":"Hello world","return_token_strs":true})");
  ASSERT_EQ(t->status, 200) << t->body;
  json j = body_json(t);
  EXPECT_EQ(j["count"], j["tokens"].size());
  EXPECT_EQ(j["token_strs"].size(), j["tokens"].size());
  EXPECT_EQ(j["max_model_len"], kTestCtx);
  json tokens = j["tokens"];
  auto d = post_json(c, "/detokenize", json{{"tokens", tokens}}.dump());
  ASSERT_EQ(d->status, 200) << d->body;
  EXPECT_NE(body_json(d)["prompt"].get<std::string>().find("Hello world"), std::string::npos);
  auto m = post_json(c, "/tokenize", R"({"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(m->status, 200) << m->body;
  EXPECT_GT(body_json(m)["count"].get<int>(), 2);
  EXPECT_EQ(post_json(c, "/detokenize", R"({"tokens":[100000]})")->status, 400);
  EXPECT_EQ(post_json(c, "/tokenize", R"({"prompt":5})")->status, 400);
}

// Item 4: each bad input gets its status and an OpenAI-style error body.
TEST_F(ServerTest, BadInputStatusCodes) {
  auto c = server_->client();
  std::string long_prompt = "[";
  for (int i = 0; i < kTestCtx + 10; ++i) long_prompt += (i ? ",5" : "5");
  long_prompt += "]";
  struct Case {
    const char* path;
    std::string body;
    int status;
  };
  const Case cases[] = {
      {"/v1/completions", "{not json", 400},
      {"/v1/completions", "", 400},
      {"/v1/completions", "[1,2]", 400},
      {"/v1/completions", R"({"prompt":"x","max_tokens":"many"})", 400},
      {"/v1/completions", R"({"prompt":"x","max_tokens":-5})", 400},
      {"/v1/completions", R"({"prompt":"x","max_tokens":1000000000000})", 400},
      {"/v1/completions", R"({"prompt":"x","max_tokens":5000})", 400},  // past the context
      {"/v1/completions", R"({"prompt":"x","temperature":-1})", 400},
      {"/v1/completions", R"({"prompt":"x","temperature":NaN})", 400},
      {"/v1/completions", R"({"prompt":"x","n":0})", 400},
      {"/v1/completions", R"({"prompt":"x","stream_options":7})", 400},
      {"/v1/completions", R"({"prompt":"x","logit_bias":{"99999":1}})", 400},
      {"/v1/completions", R"({"prompt":[99999]})", 400},
      {"/v1/completions", R"({"prompt":)" + long_prompt + "}", 400},
      {"/v1/completions", "{\"prompt\":\"bad \xff\xfe utf8\"}", 400},
      {"/v1/completions", R"({"prompt":"x","model":"gpt-4"})", 404},
      {"/v1/chat/completions", R"({"messages":[]})", 400},
      {"/v1/chat/completions", R"({"messages":[{"role":"user"}],"temperature":[1]})", 400},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"model":"other"})", 404},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})", 422},
      {"/v1/completions", R"({"prompt":"x","kv_policy":"lru"})", 400},
      {"/v1/completions", R"({"prompt":"x","kv_policy":{"type":"h2o","window":8,"budget":8}})", 400},
      {"/v1/completions", R"({"prompt":"x","kv_policy":{"type":"streaming","window":16777216}})", 400},  // no room
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"kv_policy":{"type":"x"}})", 400},
      {"/v1/nope", "{}", 404},
      {"/v1/completions", std::string(2 << 20, ' '), 413},
  };
  for (const Case& cs : cases) {
    auto r = post_json(c, cs.path, cs.body);
    ASSERT_TRUE(r) << cs.body.substr(0, 80);
    EXPECT_EQ(r->status, cs.status) << cs.path << " " << cs.body.substr(0, 80) << " -> " << r->body;
    json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string()) << r->body;
    EXPECT_TRUE(j["error"]["type"].is_string()) << r->body;
    EXPECT_TRUE(j["error"].contains("param") && j["error"].contains("code")) << r->body;
  }
  EXPECT_EQ(c.Get("/no/such/route")->status, 404);
}

// Random garbage never yields a 5xx and never takes the server down.
TEST_F(ServerTest, GarbageBodiesNeverCrash) {
  const uint32_t seed = 20240611;
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto c = server_->client();
  const std::vector<std::string> pieces = {"{",
                                           "}",
                                           "[",
                                           "]",
                                           "\"prompt\"",
                                           ":",
                                           ",",
                                           "\"messages\"",
                                           "1e400",
                                           "-1",
                                           "null",
                                           "true",
                                           "\"max_tokens\"",
                                           "\"n\"",
                                           "\"\\ud800\"",
                                           "0.5",
                                           "\"stream\"",
                                           "{\"role\":\"user\"}",
                                           "\xc3",
                                           "\"temperature\""};
  for (int i = 0; i < 150; ++i) {
    std::string body;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) body += pieces[rng() % pieces.size()];
    const char* path = (i % 2) ? "/v1/completions" : "/v1/chat/completions";
    auto r = post_json(c, path, body);
    ASSERT_TRUE(r) << body;
    EXPECT_TRUE(r->status == 200 || (r->status >= 400 && r->status < 500)) << body << " -> " << r->status;
  }
  EXPECT_EQ(c.Get("/health")->status, 200);
}

TEST(ServerAuth, ApiKeyGuardsV1Only) {
  TestServerOptions o;
  o.api_key = "sk-test";
  TestServer s(o);
  auto c = s.client();
  auto no_key = c.Get("/v1/models");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
  EXPECT_EQ(json::parse(no_key->body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(c.Get("/v1/models", {{"Authorization", "Bearer nope"}})->status, 401);
  EXPECT_EQ(post_json(c, "/v1/completions", R"({"prompt":"x"})")->status, 401);
  EXPECT_EQ(c.Get("/v1/models", {{"Authorization", "Bearer sk-test"}})->status, 200);
  auto ok = post_json(c, "/v1/completions", R"({"prompt":"x","max_tokens":2})", {{"Authorization", "Bearer sk-test"}});
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_EQ(c.Get("/metrics")->status, 200);
}

TEST(ServerTemplate, ChatTemplateOverride) {
  TestServerOptions o;
  o.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}";
  TestServer s(o);
  auto c = s.client();
  auto r = post_json(c, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})");
  EXPECT_EQ(r->status, 200) << r->body;
}

// --kv-disk-dir: a prompt served before a restart is served from the disk
// tier after it (kv_disk_hits in /metrics), with the same greedy text.
TEST(ServerKvTiers, DiskHitsAfterARestartInMetrics) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pagoda-server-kv-disk-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  TestServerOptions o;
  o.kv_disk_dir = dir.string();
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "the same long document line " + std::to_string(i) + ". ";
  const std::string req =
      R"({"model":"tiny","prompt":")" + prompt + R"(","max_tokens":6,"temperature":0,"ignore_eos":true})";
  std::string first;
  {
    TestServer s(o);
    auto c = s.client();
    auto r = post_json(c, "/v1/completions", req);
    ASSERT_EQ(r->status, 200) << r->body;
    first = body_json(r)["choices"][0]["text"];
    EXPECT_EQ(metric(metrics_text(s), "pagoda:kv_disk_hits"), 0);
  }
  TestServer s(o);
  auto c = s.client();
  auto r = post_json(c, "/v1/completions", req);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(body_json(r)["choices"][0]["text"], first);
  const std::string m = metrics_text(s);
  EXPECT_GT(metric(m, "pagoda:kv_disk_hits"), 10) << m;
  EXPECT_GT(metric(m, "pagoda:kv_disk_blocks"), 10);
  EXPECT_GT(metric(m, "pagoda:prefix_cache_hit_rate"), 0.5);
  EXPECT_EQ(metric(m, "pagoda:kv_disk_corrupt_total"), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::server::testing
