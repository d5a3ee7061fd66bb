// Structured output over HTTP on the bundled model: response_format
// json_schema / json_object on chat completions (whole and streamed),
// vLLM's guided_regex / guided_choice / guided_json and llama.cpp's GBNF
// `grammar` on completions, and 400s that say where a schema, regex or
// grammar is wrong.
#include <gtest/gtest.h>

#include "server_test_util.h"

namespace pagoda::server {
namespace {

using nlohmann::json;

// Checks written out, not std::regex or the schema validator (which uses it):
// instantiating std::regex in this binary makes the uninstrumented
// cpp-httplib client call instrumented copies of it, which TSan then
// reports as races inside httplib.
bool is_digits(const std::string& s, size_t from, size_t n) {
  if (s.size() < from + n) return false;
  for (size_t i = from; i < from + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

// YYYY-MM-DD with month 01-12 and a day starting 0-3 (the regex the test sends).
bool is_date_like(const std::string& s) {
  return s.size() == 10 && is_digits(s, 0, 4) && s[4] == '-' && is_digits(s, 5, 2) && s[7] == '-' &&
         is_digits(s, 8, 2) && s.substr(5, 2) >= "01" && s.substr(5, 2) <= "12" && s[8] <= '3';
}

// "day N of May|June" with N in 1..99 without a leading zero.
bool is_day_of(const std::string& s) {
  if (s.rfind("day ", 0) != 0) return false;
  size_t i = 4;
  if (i >= s.size() || s[i] < '1' || s[i] > '9') return false;
  ++i;
  if (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  const std::string rest = s.substr(i);
  return rest == " of May" || rest == " of June";
}

// Code points in UTF-8 text.
size_t num_chars(const std::string& s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// The chat test's schema: zeta a string of <= 12 characters, alpha 1..99,
// tags 1-3 of red/green/blue, nothing else.
bool valid_color(const json& v, std::string* why) {
  *why = v.dump();
  if (!v.is_object() || v.size() != 3) return false;
  if (!v.contains("zeta") || !v["zeta"].is_string() || num_chars(v["zeta"].get<std::string>()) > 12) return false;
  if (!v.contains("alpha") || !v["alpha"].is_number_integer() || v["alpha"] < 1 || v["alpha"] > 99) return false;
  if (!v.contains("tags") || !v["tags"].is_array() || v["tags"].empty() || v["tags"].size() > 3) return false;
  for (const json& t : v["tags"]) {
    if (t != "red" && t != "green" && t != "blue") return false;
  }
  return true;
}

testing::TestServerOptions bundled_model() {
  testing::TestServerOptions o;
  o.model = std::string(PAGODA_SOURCE_DIR) + "/models/pagoda-small.gguf";
  o.kv_bytes = 8 << 20;
  return o;
}

// Key order matters here (properties come out in the schema's order), so the
// schema is written as text.
const char* kSchema = R"({"type": "object", "properties": {
    "zeta": {"type": "string", "maxLength": 12},
    "alpha": {"type": "integer", "minimum": 1, "maximum": 99},
    "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3}},
  "required": ["zeta", "alpha", "tags"], "additionalProperties": false})";

std::string chat_body(const std::string& response_format, bool stream, int seed) {
  return R"({"messages": [{"role": "user", "content": "Describe a color."}], "temperature": 1, "seed": )" +
         std::to_string(seed) + R"(, "max_tokens": 120, "stream": )" + (stream ? "true" : "false") +
         R"(, "response_format": )" + response_format + "}";
}

TEST(StructuredOutputServer, ChatJsonSchemaWholeAndStreamed) {
  testing::TestServer server(bundled_model());
  auto c = server.client();
  const std::string rf = std::string(R"({"type": "json_schema", "json_schema": {"name": "color", "strict": true,
      "schema": )") + kSchema +
                         "}}";
  for (int seed = 0; seed < 4; ++seed) {
    auto r = testing::post_json(c, "/v1/chat/completions", chat_body(rf, false, seed));
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    const json body = testing::body_json(r);
    const std::string content = body["choices"][0]["message"]["content"];
    EXPECT_EQ(body["choices"][0]["finish_reason"], "stop") << content;
    json value;
    ASSERT_NO_THROW(value = json::parse(content)) << content;
    std::string why;
    EXPECT_TRUE(valid_color(value, &why)) << why << ": " << content;
    // The schema's property order, not alphabetical.
    EXPECT_LT(content.find("\"zeta\""), content.find("\"alpha\"")) << content;

    auto s = testing::post_json(c, "/v1/chat/completions", chat_body(rf, true, seed));
    ASSERT_TRUE(s && s->status == 200);
    bool done = false;
    std::string streamed;
    for (const json& ev : testing::sse_events(s->body, &done)) {
      for (const json& ch : ev["choices"]) {
        if (ch["delta"].contains("content")) streamed += ch["delta"]["content"].get<std::string>();
      }
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(streamed, content);  // same seed, same text
  }
  // A json_object answer is an object. Its strings have no length limit, so
  // the small model may run out of max_tokens inside one: only a finished
  // answer must parse.
  int finished = 0;
  for (int seed = 0; seed < 6; ++seed) {
    auto r = testing::post_json(c, "/v1/chat/completions", chat_body(R"({"type": "json_object"})", false, seed));
    ASSERT_TRUE(r && r->status == 200);
    const json choice = testing::body_json(r)["choices"][0];
    const std::string content = choice["message"]["content"];
    ASSERT_FALSE(content.empty());
    EXPECT_EQ(content[0], '{');
    if (choice["finish_reason"] != "stop") continue;
    ++finished;
    json value;
    ASSERT_NO_THROW(value = json::parse(content)) << content;
    EXPECT_TRUE(value.is_object());
  }
  EXPECT_GT(finished, 0);
  EXPECT_GT(testing::metric(testing::metrics_text(server), "pagoda:grammar_masks_total"), 0);
  EXPECT_TRUE(testing::wait_idle_and_free(server));
}

TEST(StructuredOutputServer, CompletionsGuidedFields) {
  testing::TestServer server(bundled_model());
  auto c = server.client();
  auto complete = [&](const std::string& field) {
    const std::string body = R"({"prompt": "The date was", "temperature": 1, "max_tokens": 60, "n": 3, )" + field + "}";
    auto r = testing::post_json(c, "/v1/completions", body);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    std::vector<std::string> texts;
    if (r && r->status == 200) {
      const json body = testing::body_json(r);  // alive for the whole loop
      for (const json& ch : body["choices"]) texts.push_back(ch["text"]);
    }
    return texts;
  };
  for (const std::string& t : complete(R"("guided_regex": "[0-9]{4}-(0[1-9]|1[0-2])-[0-3][0-9]")")) {
    EXPECT_TRUE(is_date_like(t)) << t;
  }
  for (const std::string& t : complete(R"("guided_choice": ["morning", "evening"])")) {
    EXPECT_TRUE(t == "morning" || t == "evening") << t;
  }
  for (const std::string& t :
       complete(R"("grammar": "root ::= \"day \" [1-9] [0-9]? \" of \" month\nmonth ::= \"May\" | \"June\"")")) {
    EXPECT_TRUE(is_day_of(t)) << t;
  }
  for (const std::string& t :
       complete(R"("guided_json": {"type": "array", "items": {"type": "boolean"}, "maxItems": 4})")) {
    json v;
    ASSERT_NO_THROW(v = json::parse(t)) << t;
    EXPECT_TRUE(v.is_array() && v.size() <= 4) << t;
  }
  EXPECT_TRUE(testing::wait_idle_and_free(server));
}

TEST(StructuredOutputServer, InvalidConstraintsAre400sThatSayWhere) {
  testing::TestServer server(bundled_model());
  auto c = server.client();
  struct Case {
    std::string field;
    const char* param;
    const char* message;
  } cases[] = {
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object",
          "properties": {"a": {"type": "array", "items": {"type": "strnig"}}}}}})",
       "response_format", "at #/properties/a/items/type: unknown type \"strnig\""},
      {R"("response_format": {"type": "xml"})", "response_format", "must be \"text\""},
      {R"("guided_regex": "(a")", "guided_regex", "regex: missing ')'"},
      {R"("grammar": "root ::= \"a\"\nitem ::= [b-")", "grammar", "line 2"},
      {R"("grammar": "root ::= undefined-rule")", "grammar", "never defined"},
      {R"("guided_choice": [])", "guided_choice", "non-empty array"},
      {R"("guided_json": "{not json")", "guided_json", "not valid JSON"},
      {R"("guided_regex": "a", "guided_choice": ["a"])", "guided_choice", "cannot be used together"},
  };
  for (const Case& k : cases) {
    const std::string body = R"({"prompt": "x", "max_tokens": 4, )" + k.field + "}";
    auto r = testing::post_json(c, "/v1/completions", body);
    ASSERT_TRUE(r) << k.field;
    EXPECT_EQ(r->status, 400) << k.field << " -> " << r->body;
    const json e = testing::body_json(r)["error"];
    EXPECT_EQ(e["param"], k.param) << r->body;
    EXPECT_NE(e["message"].get<std::string>().find(k.message), std::string::npos) << r->body;
  }
  EXPECT_TRUE(testing::wait_idle_and_free(server));
}

}  // namespace
}  // namespace pagoda::server

namespace pagoda::server {
namespace {

// One small tool, to keep the prompts short (several tools and the
// grammar's choice among them are covered by tool_calls_test.cc).
const char* kWeatherTool = R"([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1,
    "maximum": 7}}, "required": ["city", "days"]}}}])";

// One call per answer (parallel calls are covered by tool_calls_test.cc).
json tool_body(const std::string& messages, const std::string& choice, bool stream, int seed) {
  return json::parse(R"({"messages": )" + messages + R"(, "tools": )" + kWeatherTool + R"(, "tool_choice": )" + choice +
                     R"(, "temperature": 1, "seed": )" + std::to_string(seed) + R"(, "stream": )" +
                     (stream ? "true" : "false") + R"(, "parallel_tool_calls": false})");
}

// The tool_calls of a streamed answer, put back together from the deltas.
json streamed_calls(const std::string& body, std::string* finish) {
  bool done = false;
  json calls = json::array();
  for (const json& ev : testing::sse_events(body, &done)) {
    for (const json& ch : ev["choices"]) {
      if (ch["finish_reason"].is_string()) *finish = ch["finish_reason"];
      if (!ch["delta"].contains("tool_calls")) continue;
      for (const json& d : ch["delta"]["tool_calls"]) {
        const size_t i = d["index"].get<size_t>();
        if (calls.size() <= i)
          calls.push_back({{"id", d["id"]}, {"type", "function"}, {"function", {{"name", ""}, {"arguments", ""}}}});
        calls[i]["function"]["name"] =
            calls[i]["function"]["name"].get<std::string>() + d["function"].value("name", "");
        calls[i]["function"]["arguments"] =
            calls[i]["function"]["arguments"].get<std::string>() + d["function"].value("arguments", "");
      }
    }
  }
  EXPECT_TRUE(done);
  return calls;
}

void expect_valid_calls(const json& calls, const std::string& only = "") {
  ASSERT_TRUE(calls.is_array());
  ASSERT_FALSE(calls.empty());
  for (const json& c : calls) {
    EXPECT_EQ(c["type"], "function");
    EXPECT_TRUE(c["id"].is_string());
    const std::string name = c["function"]["name"];
    if (!only.empty()) {
      EXPECT_EQ(name, only);
    }
    json args;
    ASSERT_NO_THROW(args = json::parse(c["function"]["arguments"].get<std::string>())) << c.dump();
    ASSERT_EQ(name, "weather");
    // {"city": a string of <= 12 characters, "days": 1..7}, both required.
    EXPECT_TRUE(args.is_object() && args.size() == 2) << c.dump();
    EXPECT_TRUE(args.contains("city") && args["city"].is_string() && num_chars(args["city"].get<std::string>()) <= 12)
        << c.dump();
    EXPECT_TRUE(args.contains("days") && args["days"].is_number_integer() && args["days"] >= 1 && args["days"] <= 7)
        << c.dump();
  }
}

TEST(ToolCallServer, RequiredAndNamedCallsParseAndValidateWholeAndStreamed) {
  testing::TestServer server(bundled_model());
  auto c = server.client();
  const std::string msgs = R"([{"role": "user", "content": "Weather in Rome?"}])";
  for (int seed = 0; seed < 3; ++seed) {
    for (const std::string& choice :
         {std::string(R"("required")"), std::string(R"({"type": "function", "function": {"name": "weather"}})")}) {
      const std::string only = choice[0] == '{' ? "weather" : "";
      auto r = testing::post_json(c, "/v1/chat/completions", tool_body(msgs, choice, false, seed).dump());
      ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
      const json ch = testing::body_json(r)["choices"][0];
      EXPECT_EQ(ch["finish_reason"], "tool_calls") << ch.dump();
      EXPECT_TRUE(ch["message"]["content"].is_null()) << ch.dump();
      expect_valid_calls(ch["message"]["tool_calls"], only);

      auto s = testing::post_json(c, "/v1/chat/completions", tool_body(msgs, choice, true, seed).dump());
      ASSERT_TRUE(s && s->status == 200);
      std::string finish;
      const json calls = streamed_calls(s->body, &finish);
      EXPECT_EQ(finish, "tool_calls");
      expect_valid_calls(calls, only);
      ASSERT_EQ(calls.size(), ch["message"]["tool_calls"].size());  // same seed, same calls
      for (size_t i = 0; i < calls.size(); ++i)
        EXPECT_EQ(calls[i]["function"], ch["message"]["tool_calls"][i]["function"]);
    }
  }
  EXPECT_TRUE(testing::wait_idle_and_free(server));
}

TEST(ToolCallServer, ResultsGoBackInAndAutoAnswers) {
  testing::TestServer server(bundled_model());
  auto c = server.client();
  // Round 1: a forced call.
  auto r1 = testing::post_json(
      c, "/v1/chat/completions",
      tool_body(R"([{"role": "user", "content": "Weather in Oslo?"}])", R"("required")", false, 1).dump());
  ASSERT_TRUE(r1 && r1->status == 200) << (r1 ? r1->body : "no response");
  const json msg = testing::body_json(r1)["choices"][0]["message"];
  ASSERT_TRUE(msg["tool_calls"].is_array());
  // Round 2: the call and its result go back in; with auto the model may
  // answer or call again, and the response says which consistently.
  json messages = json::array({{{"role", "user"}, {"content", "Weather in Oslo?"}}, msg});
  messages.push_back({{"role", "tool"}, {"tool_call_id", msg["tool_calls"][0]["id"]}, {"content", "cold, 2 C"}});
  for (int seed = 0; seed < 4; ++seed) {
    auto r2 =
        testing::post_json(c, "/v1/chat/completions", tool_body(messages.dump(), R"("auto")", false, seed).dump());
    ASSERT_TRUE(r2 && r2->status == 200) << (r2 ? r2->body : "no response");
    const json ch = testing::body_json(r2)["choices"][0];
    if (ch["message"].contains("tool_calls")) {
      EXPECT_EQ(ch["finish_reason"], "tool_calls");
      for (const json& call : ch["message"]["tool_calls"]) EXPECT_TRUE(call["function"]["arguments"].is_string());
    } else {
      EXPECT_TRUE(ch["message"]["content"].is_string());
      EXPECT_NE(ch["finish_reason"], "tool_calls");
    }
  }
  // A forced call with response_format is refused.
  json bad = tool_body(R"([{"role": "user", "content": "x"}])", R"("required")", false, 1);
  bad["response_format"] = {{"type", "json_object"}};
  auto r3 = testing::post_json(c, "/v1/chat/completions", bad.dump());
  ASSERT_TRUE(r3);
  EXPECT_EQ(r3->status, 400);
  EXPECT_EQ(testing::body_json(r3)["error"]["param"], "tool_choice");
  EXPECT_TRUE(testing::wait_idle_and_free(server));
}

}  // namespace
}  // namespace pagoda::server
