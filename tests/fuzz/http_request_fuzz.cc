// libFuzzer target: whole HTTP request bytes (possibly several pipelined
// requests) go through what the server does with them before the engine:
// the incremental HTTP/1.1 parser (src/http/request_parser.cc), fed in the
// pieces the first input byte picks, then for a POST to a JSON route the
// body checks of the handlers (nesting depth, JSON parse, completion / chat
// request parsing, the engine spec). Never a crash, leak, hang or uncaught
// exception; every parser outcome is checked against its limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "http/request_parser.h"
#include "server/json_fields.h"
#include "server/request_parse.h"

namespace {

using nlohmann::json;
using pagoda::http::ParseLimits;
using pagoda::http::Request;
using pagoda::http::RequestParser;

void check(bool ok) {
  if (!ok) std::abort();
}

constexpr size_t kMaxBody = 4096;

void handle_body(const Request& req) {
  if (req.method != "POST") return;
  const bool completion = req.path == "/v1/completions", chat = req.path == "/v1/chat/completions";
  if (!completion && !chat && req.path != "/tokenize") return;
  if (auto e = pagoda::server::check_json_depth(req.body)) {
    check(e->http_status == 400 && !e->message.empty());
    return;
  }
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) return;
  if (completion) {
    pagoda::server::CompletionRequest r;
    if (auto e = pagoda::server::parse_completion_request(body, &r)) {
      check(e->http_status == 400 || e->http_status == 422);
      return;
    }
    auto spec = pagoda::server::make_prompt_spec(r.gen, {1, 2, 3}, 16, 64);
    if (spec.is_ok()) check(spec->n == r.gen.n && spec->max_tokens >= 1);
  } else if (chat) {
    pagoda::server::ChatRequest r;
    if (auto e = pagoda::server::parse_chat_request(body, &r)) check(e->http_status == 400 || e->http_status == 422);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;  // how the bytes arrive
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  ParseLimits limits;
  limits.max_body_bytes = kMaxBody;
  limits.max_head_bytes = 2048;
  limits.max_headers = 32;
  RequestParser parser(limits);
  std::string buffer;
  size_t sent = 0;
  int requests = 0;
  while (true) {
    const size_t n = std::min(piece, input.size() - sent);
    buffer.append(input.substr(sent, n));
    sent += n;
    size_t used = 0;
    const auto state = parser.feed(buffer, &used);
    check(used <= buffer.size());
    buffer.erase(0, used);
    if (state == RequestParser::State::kError) {
      check(parser.error_status() >= 400 && parser.error_status() < 600 && !parser.error_message().empty());
      return 0;
    }
    if (state == RequestParser::State::kDone) {
      const Request req = parser.take_request();
      check(!req.method.empty() && !req.path.empty() && req.body.size() <= kMaxBody);
      check(!req.chunked || req.header("content-length") == nullptr);
      handle_body(req);
      parser.reset();
      if (++requests > 64) return 0;
      continue;  // pipelined: the rest of the buffer is the next request
    }
    if (sent == input.size()) return 0;  // incomplete request: the server waits (until its deadline)
  }
}
