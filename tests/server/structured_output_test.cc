// Structured output over HTTP on the bundled model: response_format
// json_schema / json_object on chat completions (whole and streamed),
// vLLM's guided_regex / guided_choice / guided_json and llama.cpp's GBNF
// `grammar` on completions, and 400s that say where a schema, regex or
// grammar is wrong.
#include <gtest/gtest.h>

#include <regex>

#include "../grammar/schema_validator.h"
#include "server_test_util.h"

namespace pagoda::server {
namespace {

using nlohmann::json;

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
  const json schema = json::parse(kSchema);
  for (int seed = 0; seed < 4; ++seed) {
    auto r = testing::post_json(c, "/v1/chat/completions", chat_body(rf, false, seed));
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    const json body = testing::body_json(r);
    const std::string content = body["choices"][0]["message"]["content"];
    EXPECT_EQ(body["choices"][0]["finish_reason"], "stop") << content;
    json value;
    ASSERT_NO_THROW(value = json::parse(content)) << content;
    std::string why;
    EXPECT_TRUE(test::validate_json(schema, value, &why)) << why << ": " << content;
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
      for (const json& ch : testing::body_json(r)["choices"]) texts.push_back(ch["text"]);
    }
    return texts;
  };
  for (const std::string& t : complete(R"("guided_regex": "[0-9]{4}-(0[1-9]|1[0-2])-[0-3][0-9]")")) {
    EXPECT_TRUE(std::regex_match(t, std::regex("[0-9]{4}-(0[1-9]|1[0-2])-[0-3][0-9]"))) << t;
  }
  for (const std::string& t : complete(R"("guided_choice": ["morning", "evening"])")) {
    EXPECT_TRUE(t == "morning" || t == "evening") << t;
  }
  for (const std::string& t :
       complete(R"("grammar": "root ::= \"day \" [1-9] [0-9]? \" of \" month\nmonth ::= \"May\" | \"June\"")")) {
    EXPECT_TRUE(std::regex_match(t, std::regex("day [1-9][0-9]? of (May|June)"))) << t;
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
