// POST /v1/completions and POST /v1/chat/completions: parse, tokenize, run
// the choices on the engine, and answer as one JSON body or as SSE chunks.
#include <ctime>

#include "server/disaggregation.h"
#include "server/generation.h"
#include "server/request_parse.h"
#include "server/response_format.h"
#include "server/server_state.h"
#include "server/sse.h"
#include "server/tool_calls.h"

namespace pagoda::server {

using nlohmann::json;

namespace {

constexpr size_t kMaxChoicesPerRequest = 256;

// Everything a streaming response needs after the handler returns.
struct Job {
  ServerState* st = nullptr;
  bool chat = false;
  ResponseMeta meta;
  GenerationParams gen;
  int32_t logprobs = -1;          // completions: top-n; chat: >= 0 when logprobs
  std::vector<std::string> echo;  // completions: per-choice prefix
  Usage usage;                    // prompt tokens filled in before submit
  Streams streams;
  std::vector<ChoiceResult> streamed;              // chat streams: each choice's text and ids so far
  ToolRequest tools;                               // chat: tool calls are parsed out when tools.active()
  std::vector<ToolCallStreamParser> tool_parsers;  // chat streams with tools: one per choice
};

// Trailing blanks before a tool call are not content.
std::string trim_right(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

PieceFn piece_fn(const ServerState& st) {
  const Tokenizer* tok = &st.engine.tokenizer();
  return [tok](int32_t id) { return tok->token_to_piece(id, true); };
}

bool refuse_if_shutting_down(ServerState& st, http::Responder& res) {
  if (!st.shutting_down) return false;
  send_error(res, api_error_from_status(Status(StatusCode::kUnavailable, "the server is shutting down")));
  return true;
}

// Adds the engine request of one prompt (its n choices) to the job.
MaybeError add_prompt(Job& job, std::vector<RequestSpec>& specs, const std::vector<int32_t>& tokens,
                      int32_t default_max_tokens, const std::string& echo) {
  // The server's latency targets for requests that set none.
  RequestSpec& base = job.gen.base;
  if (base.slo_ttft_s == 0) base.slo_ttft_s = job.st->config.slo_ttft_ms / 1e3;
  if (base.slo_tpot_s == 0) base.slo_tpot_s = job.st->config.slo_tpot_ms / 1e3;
  auto policy = job.st->engine.resolve_kv_policy(job.gen.base.kv_policy);
  if (!policy.is_ok()) return api_error_from_status(policy.status(), "kv_policy");
  // Streaming runs past the context: max_tokens is not capped by it.
  auto s = make_prompt_spec(job.gen, tokens, default_max_tokens, job.st->engine.max_model_len(), policy->streaming());
  if (!s.is_ok()) return api_error_from_status(s.status(), job.chat ? "messages" : "prompt");
  for (int32_t k = 0; k < s->n; ++k) job.echo.push_back(echo);
  specs.push_back(std::move(s).value());
  job.usage.prompt_tokens += static_cast<int64_t>(tokens.size());
  return std::nullopt;
}

// Structured output: the grammar of the request's response_format / guided_*
// / grammar field, on every choice of the job.
MaybeError attach_grammar(ServerState& st, const json& body, const http::Request& req, Job& job) {
  static const char* kKeys[] = {"response_format", "guided_json", "guided_regex", "guided_choice",
                                "guided_grammar",  "grammar",     "json_schema"};
  bool any = false;
  for (const char* k : kKeys) any = any || body.contains(k);
  if (!any) return std::nullopt;
  StructuredOutputRequest so;
  // Schemas keep the client's key order: properties are generated in it.
  if (auto e = parse_structured_output(nlohmann::ordered_json::parse(req.body), &so)) return e;
  return compile_structured_output(so, st.grammars, &job.gen.base.grammar);
}

void respond_whole(Job& job, http::Responder& res) {
  // A client that left gets its requests aborted instead of served.
  auto collected = collect_choices(job.st->engine, job.streams, job.st->metrics, [&res] { return !res.client_gone(); });
  if (!collected) {
    job.st->metrics.on_client_disconnect();
    return;
  }
  std::vector<ChoiceResult>& choices = *collected;
  for (ChoiceResult& c : choices) {
    if (c.finish_reason == FinishReason::kError)
      return send_error(res, api_error_from_status(internal_error("generation failed: " + c.error)));
    if (c.finish_reason == FinishReason::kAbort)
      return send_error(res, api_error_from_status(Status(StatusCode::kUnavailable,
                                                          "the request was aborted "
                                                          "(the server is shutting down)")));
    c.text = job.echo[static_cast<size_t>(c.index)] + c.text;
    job.usage.completion_tokens += c.num_output_tokens;
    if (job.chat) job.st->answers.remember(job.st->engine.tokenizer(), c.text, c.token_ids);
    if (job.chat && job.tools.active()) {
      std::string content;
      std::vector<ParsedToolCall> calls;
      parse_tool_calls(c.text, &content, &calls, job.tools.format);
      if (!calls.empty()) {
        c.text = trim_right(content);
        c.tool_calls = tool_calls_json(calls, job.meta.id + "_" + std::to_string(c.index));
      }
    }
  }
  for (const ChoiceStream& s : job.streams)  // the n choices of one prompt share its cached tokens
    job.usage.cached_tokens += choices[static_cast<size_t>(s.first_index)].num_cached_tokens;
  const PieceFn piece = piece_fn(*job.st);
  send_json(res, job.chat ? chat_response(job.meta, choices, job.usage, piece, job.logprobs >= 0)
                          : completion_response(job.meta, choices, job.usage, piece, job.logprobs));
}

// The whole SSE stream, written as chunks on this handler's thread.
bool stream_body(Job& job, http::Responder& res) {
  auto write = [&res](const std::string& s) { return res.write(s); };
  const bool with_usage = job.gen.include_usage;
  const PieceFn piece = piece_fn(*job.st);
  const auto total = static_cast<size_t>(num_choices(job.streams));
  std::vector<size_t> offsets(total, 0);
  job.streamed.assign(total, ChoiceResult{});
  job.tool_parsers.assign(total, ToolCallStreamParser(job.tools.format));
  std::vector<bool> starts_stream(total, false);  // the n choices of one prompt share its cached tokens
  for (const ChoiceStream& s : job.streams) starts_stream[static_cast<size_t>(s.first_index)] = true;
  for (size_t i = 0; i < total; ++i) {
    const auto idx = static_cast<int32_t>(i);
    bool ok = true;
    if (job.chat) {
      ok = write(sse_event(chat_chunk(job.meta, idx, {{"role", "assistant"}, {"content", ""}}, nullptr,
                                      FinishReason::kNone, with_usage)));
    } else if (!job.echo[i].empty()) {
      ok = write(sse_event(completion_chunk(job.meta, idx, job.echo[i], nullptr, FinishReason::kNone, with_usage)));
      offsets[i] = job.echo[i].size();
    }
    if (!ok) {
      abort_choices(job.st->engine, job.streams, std::vector<bool>(job.streams.size(), false), job.st->metrics);
      return false;
    }
  }
  StreamCallbacks cb;
  cb.on_output = [&](int32_t idx, const RequestOutput& o) {
    if (o.finished) job.usage.completion_tokens += o.num_output_tokens;
    if (o.finished && starts_stream[static_cast<size_t>(idx)]) job.usage.cached_tokens += o.num_cached_tokens;
    const bool has_logprobs = job.logprobs >= 0 && !o.samples.empty();
    if (job.chat) {
      ChoiceResult& so_far = job.streamed[static_cast<size_t>(idx)];
      so_far.text += o.text;
      so_far.token_ids.insert(so_far.token_ids.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.finished && (o.finish_reason == FinishReason::kStop || o.finish_reason == FinishReason::kLength))
        job.st->answers.remember(job.st->engine.tokenizer(), so_far.text, so_far.token_ids);
      std::string content = o.text;
      std::vector<ParsedToolCall> calls;
      ToolCallStreamParser* parser = job.tools.active() ? &job.tool_parsers[static_cast<size_t>(idx)] : nullptr;
      const int first_call = parser ? parser->num_calls() : 0;
      if (parser) {
        content.clear();
        parser->push(o.text, &content, &calls);
        if (o.finished) parser->finish(&content, &calls);
      }
      if (!content.empty() || has_logprobs) {
        json lp = has_logprobs ? chat_logprobs(o.samples, piece) : json(nullptr);
        if (!write(sse_event(chat_chunk(job.meta, idx, {{"content", content}}, lp, FinishReason::kNone, with_usage))))
          return false;
      }
      for (size_t k = 0; k < calls.size(); ++k) {
        // OpenAI's delta: the call's index among this choice's calls, its id,
        // name and arguments (here in one piece).
        json call = tool_calls_json({calls[k]}, job.meta.id + "_" + std::to_string(idx))[0];
        const int index = first_call + static_cast<int>(k);
        call["id"] = tool_call_id(job.meta.id + "_" + std::to_string(idx), static_cast<size_t>(index));
        call["index"] = index;
        if (!write(sse_event(chat_chunk(job.meta, idx, {{"tool_calls", json::array({call})}}, nullptr,
                                        FinishReason::kNone, with_usage))))
          return false;
      }
      if (!o.finished) return true;
      json last = chat_chunk(job.meta, idx, json::object(), nullptr, o.finish_reason, with_usage);
      if (parser && parser->num_calls() > 0) last["choices"][0]["finish_reason"] = "tool_calls";
      return write(sse_event(last));
    }
    if (o.text.empty() && !has_logprobs && !o.finished) return true;
    size_t& off = offsets[static_cast<size_t>(idx)];
    json lp = job.logprobs >= 0 ? completion_logprobs(o.samples, piece, job.logprobs, off) : json(nullptr);
    off += o.text.size();
    return write(sse_event(completion_chunk(job.meta, idx, o.text, lp, o.finish_reason, with_usage)));
  };
  cb.on_idle = [&]() { return !res.client_gone() && write(sse_comment("keep-alive")); };
  if (!stream_choices(job.st->engine, job.streams, job.st->metrics, cb)) return false;
  if (with_usage &&
      !write(sse_event(usage_chunk(job.meta, job.chat ? "chat.completion.chunk" : "text_completion", job.usage))))
    return false;
  if (!write(sse_done())) return false;
  return res.end_stream();
}

void run_job(Job& job, std::vector<RequestSpec> specs, http::Responder& res) {
  auto streams = submit_choices(job.st->engine, std::move(specs));
  if (!streams.is_ok())
    return send_error(res, api_error_from_status(streams.status(), job.chat ? "messages" : "prompt"));
  job.streams = std::move(streams).value();
  job.meta.created = std::time(nullptr);
  if (!job.gen.stream) return respond_whole(job, res);
  const std::vector<http::Header> headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  if (!res.begin_stream(200, "text/event-stream", headers)) {
    abort_choices(job.st->engine, job.streams, std::vector<bool>(job.streams.size(), false), job.st->metrics);
    job.st->metrics.on_client_disconnect();
    return;
  }
  if (!stream_body(job, res)) job.st->metrics.on_client_disconnect();
}

}  // namespace

void handle_completions(ServerState& st, const http::Request& req, http::Responder& res) {
  if (refuse_if_shutting_down(st, res)) return;
  json body;
  if (auto e = parse_json_body(req, &body)) return send_error(res, *e);
  CompletionRequest cr;
  if (auto e = parse_completion_request(body, &cr)) return send_error(res, *e);
  if (auto e = st.check_model(cr.gen.model)) return send_error(res, *e);
  auto job = std::make_unique<Job>();
  job->st = &st;
  job->gen = cr.gen;
  job->logprobs = cr.logprobs;
  job->meta = {st.new_response_id("cmpl"), 0, st.config.served_model_name};
  if (auto e = attach_grammar(st, body, req, *job)) return send_error(res, *e);
  if (cr.prompts.size() * static_cast<size_t>(cr.gen.n) > kMaxChoicesPerRequest)
    return send_error(
        res, bad_request(
                 "too many choices in one request (prompts x n > " + std::to_string(kMaxChoicesPerRequest) + ")", "n"));
  const Tokenizer& tok = st.engine.tokenizer();
  std::vector<RequestSpec> specs;
  for (const PromptInput& p : cr.prompts) {
    std::vector<int32_t> tokens = p.is_tokens ? p.tokens : tok.encode(p.text, true, true);
    if (tokens.empty()) return send_error(res, bad_request("the prompt is empty", "prompt"));
    const std::string echo = !cr.echo ? "" : p.is_tokens ? tok.decode(p.tokens) : p.text;
    if (auto e = add_prompt(*job, specs, tokens, 16, echo)) return send_error(res, *e);
  }
  if (auto e = prefill_remotely(st, req, specs)) return send_error(res, *e);
  run_job(*job, std::move(specs), res);
}

void handle_chat_completions(ServerState& st, const http::Request& req, http::Responder& res) {
  if (refuse_if_shutting_down(st, res)) return;
  json body;
  if (auto e = parse_json_body(req, &body)) return send_error(res, *e);
  ChatRequest cr;
  if (auto e = parse_chat_request(body, &cr)) return send_error(res, *e);
  if (auto e = st.check_model(cr.gen.model)) return send_error(res, *e);
  if (!st.chat) return send_error(res, api_error_from_status(Status(StatusCode::kUnimplemented, st.chat_error)));
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(req.body);
  restore_key_order(ordered, &cr);
  auto job = std::make_unique<Job>();
  job->st = &st;
  job->chat = true;
  job->gen = cr.gen;
  job->logprobs = cr.logprobs ? cr.top_logprobs : -1;
  job->meta = {st.new_response_id("chatcmpl"), 0, st.config.served_model_name};
  if (auto e = attach_grammar(st, body, req, *job)) return send_error(res, *e);
  if (auto e = parse_tool_request(ordered, &job->tools)) return send_error(res, *e);
  job->tools.format = st.chat->tool_format();
  const bool forced =
      job->tools.choice == ToolRequest::Choice::kRequired || job->tools.choice == ToolRequest::Choice::kNamed;
  if (forced) {
    // tool_choice required / named: the answer is calls whose arguments
    // follow the functions' schemas.
    if (job->gen.base.grammar)
      return send_error(res, bad_request("'tool_choice' required or a named function cannot be combined with "
                                         "response_format or guided decoding",
                                         "tool_choice"));
    StructuredOutputRequest so;
    so.kind = StructuredOutputRequest::Kind::kGrammar;
    so.param = "tools";
    auto gbnf = tool_call_gbnf(job->tools);
    if (!gbnf.is_ok()) return send_error(res, bad_request(gbnf.status().message(), "tools"));
    so.text = *gbnf;
    if (auto e = compile_structured_output(so, st.grammars, &job->gen.base.grammar)) return send_error(res, *e);
  }
  nlohmann::ordered_json template_tools;
  cr.messages = prepare_tool_messages(cr.messages, job->tools, st.chat->renders_tools(), &template_tools);
  // The history's answers keep the token ids they were generated as, so the
  // prefix cache serves the whole conversation so far (server/answer_tokens.h).
  auto encoded = encode_chat(
      st.engine.tokenizer(), cr.messages,
      [&](const nlohmann::ordered_json& messages) {
        return st.chat->render(messages, cr.add_generation_prompt, template_tools, cr.template_kwargs);
      },
      st.answers);
  if (!encoded.is_ok()) return send_error(res, api_error_from_status(encoded.status(), "messages"));
  const std::vector<int32_t>& tokens = *encoded;
  if (tokens.empty()) return send_error(res, bad_request("the rendered chat prompt is empty", "messages"));
  std::vector<RequestSpec> specs;
  if (auto e = add_prompt(*job, specs, tokens, 0, "")) return send_error(res, *e);
  if (auto e = prefill_remotely(st, req, specs)) return send_error(res, *e);
  run_job(*job, std::move(specs), res);
}

}  // namespace pagoda::server
