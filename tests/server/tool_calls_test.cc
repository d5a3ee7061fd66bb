// Tool calling: request parsing, message preparation for templates with and
// without tool support, the call grammar, and the parser of the model's
// <tool_call> blocks, whole and streamed in pieces split at every byte.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace pagoda::server {
namespace {

using nlohmann::ordered_json;

const char* kTools = R"([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1,
    "maximum": 7}}, "required": ["city"]}}}, {"type": "function", "function": {"name": "now"}}])";

ToolRequest parsed(const std::string& extra) {
  ToolRequest r;
  const auto body = ordered_json::parse(std::string(R"({"tools": )") + kTools + extra + "}");
  auto e = parse_tool_request(body, &r);
  EXPECT_FALSE(e) << (e ? e->message : "");
  return r;
}

TEST(ToolCalls, ParsesToolChoiceForms) {
  EXPECT_EQ(parsed("").choice, ToolRequest::Choice::kAuto);
  EXPECT_EQ(parsed(R"(, "tool_choice": "none")").choice, ToolRequest::Choice::kNone);
  EXPECT_FALSE(parsed(R"(, "tool_choice": "none")").active());
  EXPECT_EQ(parsed(R"(, "tool_choice": "required")").choice, ToolRequest::Choice::kRequired);
  const ToolRequest named = parsed(R"(, "tool_choice": {"type": "function", "function": {"name": "now"}})");
  EXPECT_EQ(named.choice, ToolRequest::Choice::kNamed);
  EXPECT_EQ(named.name, "now");
  EXPECT_FALSE(parsed(R"(, "parallel_tool_calls": false)").parallel);
  struct Case {
    const char* body;
    const char* message;
  } bad[] = {
      {R"({"tools": {}})", "must be an array"},
      {R"({"tools": [{"type": "function"}]})", "'tools[0]' must be"},
      {R"({"tools": [{"type": "function", "function": {"name": ""}}]})", "name' must be a non-empty string"},
      {R"({"tool_choice": "required"})", "needs 'tools'"},
      {R"({"tools": [], "tool_choice": "sometimes"})", "must be \"auto\""},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}],
           "tool_choice": {"type": "function", "function": {"name": "b"}}})",
       "not in 'tools'"},
  };
  for (const Case& c : bad) {
    ToolRequest r;
    auto e = parse_tool_request(ordered_json::parse(c.body), &r);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->http_status, 400);
    EXPECT_NE(e->message.find(c.message), std::string::npos) << e->message;
  }
}

TEST(ToolCalls, ParsesBlocksWholeAndStreamedAtEverySplit) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"now\", \"parameters\": {}}</tool_call>\n";
  std::string content;
  std::vector<ParsedToolCall> calls;
  parse_tool_calls(text, &content, &calls);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "weather");
  EXPECT_EQ(ordered_json::parse(calls[0].arguments), ordered_json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(calls[1].name, "now");
  EXPECT_EQ(content, "Let me check.\n");
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); b += 7) {
      ToolCallStreamParser p;
      std::string c;
      std::vector<ParsedToolCall> got;
      p.push(text.substr(0, a), &c, &got);
      p.push(text.substr(a, b - a), &c, &got);
      p.push(text.substr(b), &c, &got);
      p.finish(&c, &got);
      ASSERT_EQ(got.size(), 2u) << a << " " << b;
      EXPECT_EQ(c, content) << a << " " << b;
      EXPECT_EQ(got[1].name, "now");
    }
  }
  // Not a call: stays text. An unfinished block with whole JSON is a call.
  parse_tool_calls("a <tool_call>oops</tool_call> b <tool_", &content, &calls);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(content, "a <tool_call>oops</tool_call> b <tool_");
  parse_tool_calls("<tool_call>{\"name\": \"now\", \"arguments\": {}}", &content, &calls);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(content, "");
  const auto j = tool_calls_json(calls, "x");
  EXPECT_EQ(j[0]["type"], "function");
  EXPECT_EQ(j[0]["function"]["arguments"], "{}");
}

TEST(ToolCalls, GrammarForcesValidCalls) {
  for (const char* extra :
       {R"(, "tool_choice": "required")", R"(, "tool_choice": {"type": "function", "function": {"name": "weather"}})",
        R"(, "tool_choice": "required", "parallel_tool_calls": false)"}) {
    const ToolRequest r = parsed(extra);
    auto gbnf = tool_call_gbnf(r);
    ASSERT_TRUE(gbnf.is_ok()) << gbnf.status().message();
    auto g = grammar::compile_gbnf(*gbnf);
    ASSERT_TRUE(g.is_ok()) << g.status().message() << "\n" << *gbnf;
    auto ok = [&](const std::string& s) {
      grammar::Matcher m(*g);
      return m.accept_bytes(s) && m.is_complete();
    };
    const std::string weather =
        "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 3}}\n</tool_call>";
    const std::string now = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    EXPECT_TRUE(ok(weather)) << extra;
    EXPECT_EQ(ok(now), r.choice == ToolRequest::Choice::kRequired) << extra;
    EXPECT_EQ(ok(weather + "\n" + weather), r.parallel) << extra;
    EXPECT_FALSE(ok("<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"days\": 3}}\n</tool_call>"));  // city
    EXPECT_FALSE(
        ok("<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 9}}\n</tool_call>"));
    EXPECT_FALSE(ok("Sure! " + weather));
  }
}

TEST(ToolCalls, MessagesForTemplatesWithAndWithoutTools) {
  const ToolRequest r = parsed("");
  const auto msgs = ordered_json::parse(R"([
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "cold"}])");
  ordered_json tmpl_tools;
  // A template that renders tools gets them, and arguments as objects.
  auto a = prepare_tool_messages(msgs, r, true, &tmpl_tools);
  EXPECT_EQ(tmpl_tools, r.tools);
  EXPECT_EQ(a[1]["tool_calls"][0]["function"]["arguments"]["city"], "Oslo");
  // One that does not: a system message lists them; calls and results are text.
  auto b = prepare_tool_messages(msgs, r, false, &tmpl_tools);
  EXPECT_TRUE(tmpl_tools.is_null());
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0]["role"], "system");
  EXPECT_NE(b[0]["content"].get<std::string>().find("\"name\":\"weather\""), std::string::npos);
  EXPECT_NE(
      b[2]["content"].get<std::string>().find("<tool_call>\n{\"name\":\"weather\",\"arguments\":{\"city\":\"Oslo\"}}"),
      std::string::npos);
  EXPECT_FALSE(b[2].contains("tool_calls"));
  EXPECT_EQ(b[3]["content"], "<tool_response>\ncold\n</tool_response>");
  // tool_choice none: no tools in the prompt.
  auto c = prepare_tool_messages(msgs, parsed(R"(, "tool_choice": "none")"), false, &tmpl_tools);
  EXPECT_EQ(c.size(), 3u);
}

}  // namespace
}  // namespace pagoda::server

#include <fstream>
#include <sstream>

#include "../shared_files.h"
#include "server/chat_renderer.h"

namespace pagoda::server {
namespace {

// Real chat templates (../shared/templates): each is detected as its tool
// format, renders a conversation with tools, a call and its result, and the
// call as the template itself writes it parses back into the same call.
struct TemplateCase {
  const char* file;
  ToolFormat format;
  const char* start;  // where the template's written call begins
  const char* end;    // and what follows it
  const char* bos;
  const char* eos;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ToolCalls, RealTemplatesRoundTripTheirOwnCallSyntax) {
  const TemplateCase cases[] = {
      {"templates/Qwen-Qwen2.5-7B-Instruct.jinja", ToolFormat::kHermes, "<tool_call>", "<|im_end|>", "", "<|im_end|>"},
      {"templates/meta-llama-Llama-3.1-8B-Instruct.jinja", ToolFormat::kLlama3, "{\"name\": \"weather\"", "<|eot_id|>",
       "<|begin_of_text|>", "<|eot_id|>"},
      {"templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolFormat::kMistral, "[TOOL_CALLS]", "</s>", "<s>",
       "</s>"},
  };
  for (const TemplateCase& c : cases) {
    PAGODA_SKIP_WITHOUT_SHARED(c.file);
    const std::string source = read_file(testing_util::shared_path(c.file));
    EXPECT_EQ(tool_format_for_template(source), c.format) << c.file;
    auto r = ChatRenderer::create(source, c.bos, c.eos);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_TRUE((*r)->renders_tools());
    ToolRequest req = parsed("");
    req.format = c.format;
    // The id a response of ours would give the call (Mistral's template
    // insists on 9 letters and digits).
    const std::string id = tool_call_id("chatcmpl-1_0", 0);
    const auto msgs = ordered_json::parse(R"([{"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": ")" +
                                          id + R"(", "type": "function",
          "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\", \"days\": 2}"}}]},
        {"role": "tool", "tool_call_id": ")" +
                                          id + R"(", "content": "cold"}])");
    ordered_json tmpl_tools;
    const ordered_json prepared = prepare_tool_messages(msgs, req, true, &tmpl_tools);
    auto prompt = (*r)->render(prepared, true, tmpl_tools, ordered_json::object());
    ASSERT_TRUE(prompt.is_ok()) << c.file << ": " << prompt.status().message();
    EXPECT_NE(prompt->find("weather"), std::string::npos) << *prompt;
    const size_t a = prompt->find(c.start, prompt->find("Weather in Oslo?"));
    ASSERT_NE(a, std::string::npos) << c.file << "\n" << *prompt;
    const size_t b = prompt->find(c.end, a);
    ASSERT_NE(b, std::string::npos) << c.file;
    // The control token [TOOL_CALLS] is not in the text a model's answer decodes to.
    std::string written = prompt->substr(a, b - a);
    if (c.format == ToolFormat::kMistral) written = written.substr(std::string("[TOOL_CALLS]").size());
    std::string content;
    std::vector<ParsedToolCall> calls;
    parse_tool_calls(written, &content, &calls, c.format);
    ASSERT_EQ(calls.size(), 1u) << c.file << ": " << written;
    EXPECT_EQ(calls[0].name, "weather");
    EXPECT_EQ(nlohmann::json::parse(calls[0].arguments), nlohmann::json::parse(R"({"city": "Oslo", "days": 2})"));
    // And the grammar for a forced call generates that syntax.
    req.choice = ToolRequest::Choice::kRequired;
    req.parallel = false;
    auto gbnf = tool_call_gbnf(req);
    ASSERT_TRUE(gbnf.is_ok());
    auto g = grammar::compile_gbnf(*gbnf);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    grammar::Matcher m(*g);
    std::string sentence = written;
    while (!sentence.empty() && (sentence.back() == '\n' || sentence.back() == ' ')) sentence.pop_back();
    if (c.format == ToolFormat::kMistral) {
      // Mistral's template adds the call's id; a generated call has none.
      sentence = R"([{"name": "weather", "arguments": {"city": "Oslo", "days": 2}}])";
    }
    EXPECT_TRUE(m.accept_bytes(sentence) && m.is_complete()) << c.file << ": " << sentence;
  }
}

}  // namespace
}  // namespace pagoda::server
