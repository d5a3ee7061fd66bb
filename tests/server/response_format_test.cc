// Unit tests of response formatting, SSE framing, errors, auth and metrics.
#include "server/response_format.h"

#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/sse.h"

namespace pagoda::server {
namespace {

using nlohmann::json;

std::string piece(int32_t id) { return id == 9 ? std::string("\xe2\x82") : "t" + std::to_string(id); }

SampleResult sample(int32_t token, float lp, std::vector<TokenLogprob> top = {}) {
  SampleResult s;
  s.token = token;
  s.logprob = lp;
  s.top = std::move(top);
  return s;
}

TEST(ResponseFormat, CompletionResponse) {
  ResponseMeta m{"cmpl-1", 123, "tiny"};
  ChoiceResult c;
  c.index = 0;
  c.text = "t1t22";
  c.samples = {sample(1, -0.5f, {{1, -0.5f}, {3, -1.0f}}), sample(22, -0.25f, {{22, -0.25f}, {4, -2.0f}})};
  c.finish_reason = FinishReason::kLength;
  json j = completion_response(m, {c}, Usage{5, 2}, piece, 2);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["created"], 123);
  EXPECT_EQ(j["choices"][0]["text"], "t1t22");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({"t1", "t22"}));
  EXPECT_EQ(lp["text_offset"], json::array({0, 2}));
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -0.25f);
  EXPECT_FLOAT_EQ(lp["top_logprobs"][0]["t3"].get<float>(), -1.0f);
  // logprobs not asked: null.
  EXPECT_TRUE(completion_response(m, {c}, Usage{}, piece, -1)["choices"][0]["logprobs"].is_null());
}

TEST(ResponseFormat, ChatResponseAndLogprobBytes) {
  ResponseMeta m{"chatcmpl-1", 1, "tiny"};
  ChoiceResult c;
  c.text = "hey";
  c.samples = {sample(9, -0.1f, {{9, -0.1f}})};
  c.finish_reason = FinishReason::kStop;
  json j = chat_response(m, {c}, Usage{3, 1}, piece, true);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hey");
  const json& tok = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(tok["bytes"], json::array({0xe2, 0x82}));
  EXPECT_EQ(tok["top_logprobs"].size(), 1u);
  // A partial UTF-8 piece must still serialize (as U+FFFD), never throw.
  const std::string wire = dump_json(j);
  EXPECT_NE(wire.find("\xef\xbf\xbd"), std::string::npos);
}

TEST(ResponseFormat, StreamChunks) {
  ResponseMeta m{"chatcmpl-2", 5, "tiny"};
  json first = chat_chunk(m, 1, {{"role", "assistant"}, {"content", ""}}, nullptr, FinishReason::kNone, true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["index"], 1);
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(first.contains("usage") && first["usage"].is_null());
  json last = chat_chunk(m, 0, json::object(), nullptr, FinishReason::kStop, false);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(last.contains("usage"));
  json u = usage_chunk(m, "chat.completion.chunk", Usage{4, 6});
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["completion_tokens"], 6);
  json c = completion_chunk(m, 0, "abc", nullptr, FinishReason::kNone, false);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "abc");
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(ApiErrors, StatusMapping) {
  EXPECT_EQ(http_status_for(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(http_status_for(StatusCode::kOutOfRange), 400);
  EXPECT_EQ(http_status_for(StatusCode::kNotFound), 404);
  EXPECT_EQ(http_status_for(StatusCode::kUnimplemented), 422);
  EXPECT_EQ(http_status_for(StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(http_status_for(StatusCode::kUnavailable), 503);
  EXPECT_EQ(http_status_for(StatusCode::kInternal), 500);
  ApiError full = api_error_from_status(resource_exhausted("queue full"));
  EXPECT_EQ(full.http_status, 429);
  EXPECT_GT(full.retry_after_s, 0);
  json body = error_body(api_error_from_status(out_of_range("too long"), "prompt"));
  EXPECT_EQ(body["error"]["message"], "too long");
  EXPECT_EQ(body["error"]["param"], "prompt");
  EXPECT_EQ(body["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(error_body(bad_request("x"))["error"]["param"].is_null());
}

TEST(Auth, BearerCheck) {
  EXPECT_TRUE(authorized("", ""));
  EXPECT_TRUE(authorized("", "Bearer whatever"));
  EXPECT_TRUE(authorized("sk-1", "Bearer sk-1"));
  EXPECT_FALSE(authorized("sk-1", "Bearer sk-2"));
  EXPECT_FALSE(authorized("sk-1", "Bearer sk-1x"));
  EXPECT_FALSE(authorized("sk-1", "Bearer sk-"));
  EXPECT_FALSE(authorized("sk-1", "sk-1"));
  EXPECT_FALSE(authorized("sk-1", ""));
}

TEST(Metrics, HistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  for (double v : {0.05, 0.5, 0.7, 3.0}) h.observe(v);
  std::string out;
  h.render("x", "m=\"a\"", &out);
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"0.10000000000000001\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"1\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_count{m=\"a\"} 4\n"), std::string::npos) << out;
}

TEST(Metrics, RenderCountsFinishedRequests) {
  ServerMetrics m("tiny");
  RequestOutput o;
  o.finished = true;
  o.finish_reason = FinishReason::kLength;
  o.num_prompt_tokens = 7;
  o.num_output_tokens = 5;
  o.timing = {1.0, 1.5, 2.0, 3.0};
  m.on_request_finished(o);
  EngineSnapshot s;
  s.num_running = 2;
  s.num_kv_blocks = 10;
  s.num_available_kv_blocks = 8;
  const std::string text = m.render(s);
  for (const char* line :
       {"pagoda:num_requests_running{model_name=\"tiny\"} 2\n", "pagoda:kv_cache_free_blocks{model_name=\"tiny\"} 8\n",
        "pagoda:prompt_tokens_total{model_name=\"tiny\"} 7\n",
        "pagoda:generation_tokens_total{model_name=\"tiny\"} 5\n",
        "pagoda:time_to_first_token_seconds_sum{model_name=\"tiny\"} 1\n",
        "pagoda:time_per_output_token_seconds_sum{model_name=\"tiny\"} 0.25\n",
        "pagoda:request_queue_time_seconds_sum{model_name=\"tiny\"} 0.5\n",
        "pagoda:e2e_request_latency_seconds_count{model_name=\"tiny\"} 1\n",
        "# TYPE pagoda:e2e_request_latency_seconds histogram\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace pagoda::server
