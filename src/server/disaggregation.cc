#include "server/disaggregation.h"

#include <httplib.h>

#include <string>

#include "server/server_state.h"

namespace pagoda::server {

namespace {

ApiError bad_gateway(const std::string& message) {
  ApiError e;
  e.http_status = 502;
  e.type = "server_error";
  e.code = "prefill_unavailable";
  e.message = message;
  return e;
}

}  // namespace

void handle_internal_prefill(ServerState& st, const http::Request& req, http::Responder& res) {
  if (st.config.role != "prefill")
    return send_error(res, api_error_from_status(Status(StatusCode::kNotFound, "this instance is not --role prefill")));
  nlohmann::json body;
  if (auto e = parse_json_body(req, &body)) return send_error(res, *e);
  const auto it = body.find("prompt_tokens");
  if (it == body.end() || !it->is_array() || it->empty())
    return send_error(res, bad_request("'prompt_tokens' must be a non-empty array of token ids", "prompt_tokens"));
  RequestSpec spec;
  for (const auto& t : *it) {
    if (!t.is_number_integer()) return send_error(res, bad_request("token ids must be integers", "prompt_tokens"));
    const int64_t v = t.get<int64_t>();
    if (v < 0 || v > INT32_MAX) return send_error(res, bad_request("token id out of range", "prompt_tokens"));
    spec.prompt.push_back(static_cast<int32_t>(v));
  }
  spec.max_tokens = 1;  // the prompt's K/V is what the decode instance wants
  spec.ignore_eos = true;
  spec.sampling.temperature = 0;
  spec.export_kv = true;
  auto stream = st.engine.submit(std::move(spec));
  if (!stream.is_ok()) return send_error(res, api_error_from_status(stream.status()));
  std::shared_ptr<const KVBlockExport> blocks;
  std::string error;
  for (;;) {
    bool timed_out = false;
    auto out = stream.value()->next_for(100, &timed_out);
    if (timed_out) {
      if (res.client_gone()) {
        st.engine.abort(stream.value()->id());
        return;
      }
      continue;
    }
    if (!out) break;
    if (out->finish_reason == FinishReason::kError) error = out->error;
    if (out->kv_export) blocks = out->kv_export;
  }
  if (!blocks)
    return send_error(res,
                      api_error_from_status(Status(StatusCode::kInternal, error.empty() ? "no KV blocks" : error)));
  http::Response r;
  r.content_type = "application/octet-stream";
  r.body = encode_kv_export(*blocks);
  res.send(r);
}

MaybeError prefill_remotely(ServerState& st, const http::Request& req, const std::vector<RequestSpec>& specs) {
  const std::string* url = req.header(kPrefillHeader);
  if (!url) return std::nullopt;
  if (st.config.role != "decode")
    return bad_request(std::string(kPrefillHeader) + " is for instances started with --role decode");
  httplib::Client cli(*url);
  if (!cli.is_valid()) return bad_request("bad prefill instance address '" + *url + "'");
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(600, 0);
  for (const RequestSpec& spec : specs) {
    const nlohmann::json body = {{"prompt_tokens", spec.prompt}};
    auto r = cli.Post("/internal/prefill", body.dump(), "application/json");
    if (!r)
      return bad_gateway("the prefill instance " + *url + " is unreachable (" + httplib::to_string(r.error()) + ")");
    if (r->status != 200)
      return bad_gateway("the prefill instance " + *url + " failed (HTTP " + std::to_string(r->status) +
                         "): " + r->body.substr(0, 300));
    auto blocks = decode_kv_export(r->body);
    if (!blocks.is_ok()) return bad_gateway(blocks.status().message());
    const Status imported = st.engine.import_kv(std::make_shared<const KVBlockExport>(std::move(blocks).value()));
    if (!imported.is_ok()) return bad_gateway("cannot use the prefill instance's blocks: " + imported.message());
  }
  return std::nullopt;
}

}  // namespace pagoda::server
