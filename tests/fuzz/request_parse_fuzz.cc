// libFuzzer target: an HTTP request body goes through what the completion
// routes do before the engine (src/server/completion_routes.cc): JSON parse,
// parse_completion_request / parse_chat_request (never throw; an error is a
// 400/422 with a message), restore_key_order, make_prompt_spec, and the chat
// messages through the fallback (ChatML) template. Never a crash, leak, hang
// or uncaught exception; what an accepted request promises is checked.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/chat_renderer.h"
#include "server/request_parse.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"

namespace {

using nlohmann::json;
using pagoda::server::ApiError;
using pagoda::server::GenerationParams;

void check(bool ok) {
  if (!ok) std::abort();
}

void check_error(const ApiError& e) {
  check(!e.message.empty());
  check(e.http_status == 400 || e.http_status == 422);
}

void check_generation(const GenerationParams& g) {
  check(g.n >= 1 && g.n <= pagoda::server::kMaxChoices);
  if (g.max_tokens) check(*g.max_tokens >= 1 && *g.max_tokens <= pagoda::server::kMaxTokensLimit);
  check(g.base.stop.size() <= static_cast<size_t>(pagoda::server::kMaxStopStrings));
  for (const std::string& s : g.base.stop) check(!s.empty());
  // The specs the routes make for a short prompt in a small context.
  const std::vector<int32_t> prompt = {1, 2, 3};
  constexpr int32_t kMaxModelLen = 64;
  auto spec = pagoda::server::make_prompt_spec(g, prompt, 16, kMaxModelLen);
  if (!spec.is_ok()) {
    check(!spec.status().message().empty());
    return;
  }
  check(spec->n == g.n);
  check(spec->prompt == prompt);
  check(spec->max_tokens >= 1 && static_cast<int64_t>(prompt.size()) + spec->max_tokens <= kMaxModelLen);
  check(static_cast<int64_t>(spec->max_tokens) * spec->n <= pagoda::server::kMaxTokensPerRequest);
}

const pagoda::server::ChatRenderer& renderer() {
  static const auto r = [] {
    auto created = pagoda::server::ChatRenderer::create("", "<s>", "</s>");
    check(created.is_ok());
    return std::move(created).value();
  }();
  return *r;
}

}  // namespace

// Structured output and tool fields: a 400 with a message, or a grammar.
void check_constraints(const std::string& text) {
  const auto body = nlohmann::ordered_json::parse(text);
  static pagoda::server::GrammarCache cache(4);
  pagoda::server::StructuredOutputRequest so;
  if (auto e = pagoda::server::parse_structured_output(body, &so)) {
    check_error(*e);
  } else {
    std::shared_ptr<const pagoda::grammar::Grammar> g;
    if (auto e = pagoda::server::compile_structured_output(so, cache, &g)) check_error(*e);
  }
  pagoda::server::ToolRequest tools;
  if (auto e = pagoda::server::parse_tool_request(body, &tools)) {
    check_error(*e);
    return;
  }
  if (tools.choice == pagoda::server::ToolRequest::Choice::kRequired ||
      tools.choice == pagoda::server::ToolRequest::Choice::kNamed) {
    auto gbnf = pagoda::server::tool_call_gbnf(tools);
    if (gbnf.is_ok()) {
      auto g = pagoda::grammar::compile_gbnf(*gbnf);
      if (!g.is_ok()) check(!g.status().message().empty());
    } else {
      check(!gbnf.status().message().empty());
    }
  }
  nlohmann::ordered_json tmpl_tools;
  if (body.contains("messages") && body["messages"].is_array())
    check(pagoda::server::prepare_tool_messages(body["messages"], tools, false, &tmpl_tools).is_array());
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // parse_json_body: invalid JSON and non-objects are rejected before parsing.
  const json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) return 0;
  check_constraints(text);

  pagoda::server::CompletionRequest completion;
  if (auto e = pagoda::server::parse_completion_request(body, &completion)) {
    check_error(*e);
  } else {
    check(!completion.prompts.empty());
    for (const auto& p : completion.prompts) check(p.is_tokens ? !p.tokens.empty() : true);
    check_generation(completion.gen);
  }

  pagoda::server::ChatRequest chat;
  if (auto e = pagoda::server::parse_chat_request(body, &chat)) {
    check_error(*e);
    return 0;
  }
  check(chat.messages.is_array() && !chat.messages.empty());
  for (const auto& m : chat.messages) {
    check(m.is_object() && m.contains("role") && m.at("role").is_string());
    check(m.contains("content") && m.at("content").is_string());
  }
  check_generation(chat.gen);
  pagoda::server::restore_key_order(nlohmann::ordered_json::parse(text), &chat);
  check(chat.messages.is_array());
  auto prompt = renderer().render(chat.messages, chat.add_generation_prompt, chat.tools, chat.template_kwargs);
  if (!prompt.is_ok()) check(!prompt.status().message().empty());
  return 0;
}
