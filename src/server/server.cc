// Server set-up, auth, error pages, and the small routes; generation routes
// are in completion_routes.cc.
#include "server/server.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>

#include "server/auth.h"
#include "server/chat_page.h"
#include "server/disaggregation.h"
#include "server/request_parse.h"
#include "server/server_state.h"

namespace pagoda::server {

using nlohmann::json;

std::string ServerState::new_response_id(const char* prefix) {
  static const uint64_t kSalt = std::random_device{}();
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s-%016llx%08llx", prefix, static_cast<unsigned long long>(kSalt),
                static_cast<unsigned long long>(next_response_id.fetch_add(1)));
  return buf;
}

MaybeError ServerState::check_model(const std::string& model) const {
  if (model.empty() || model == config.served_model_name) return std::nullopt;
  ApiError e = api_error_from_status(
      not_found("the model '" + model + "' does not exist; this server serves '" + config.served_model_name + "'"),
      "model");
  return e;
}

http::Response error_response(const ApiError& e) {
  http::Response r;
  r.status = e.http_status;
  r.body = dump_json(error_body(e));
  if (e.retry_after_s > 0) r.headers.push_back({"Retry-After", std::to_string(e.retry_after_s)});
  return r;
}

void send_json(http::Responder& res, const json& j, int status) {
  http::Response r;
  r.status = status;
  r.body = dump_json(j);
  res.send(r);
}

void send_error(http::Responder& res, const ApiError& e) { res.send(error_response(e)); }

MaybeError parse_json_body(const http::Request& req, json* out) {
  if (auto e = check_json_depth(req.body)) return e;
  try {
    *out = json::parse(req.body);
  } catch (const json::parse_error& e) {
    return bad_request(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!out->is_object()) return bad_request("the request body must be a JSON object");
  return std::nullopt;
}

namespace {

using RouteFn = std::function<void(const http::Request&, http::Responder&)>;

// Every handler runs inside this: library exceptions never escape (a reply
// already started cannot be replaced; the connection is then closed).
void run_guarded(const RouteFn& fn, const http::Request& req, http::Responder& res) {
  try {
    fn(req, res);
  } catch (const json::exception& e) {
    send_error(res, bad_request(std::string("invalid request: ") + e.what()));
  } catch (const std::exception& e) {
    send_error(res, api_error_from_status(internal_error(e.what())));
  } catch (...) {
    send_error(res, api_error_from_status(internal_error("unknown error")));
  }
}

void handle_tokenize(ServerState& st, const http::Request& req, http::Responder& res) {
  json body;
  if (auto e = parse_json_body(req, &body)) return send_error(res, *e);
  FieldReader r(body);
  std::string model;
  bool return_strs = false;
  if (auto e = r.read_string("model", &model)) return send_error(res, *e);
  if (auto e = st.check_model(model)) return send_error(res, *e);
  if (auto e = r.read_bool("return_token_strs", &return_strs)) return send_error(res, *e);
  std::string text;
  bool add_special = true;
  if (r.find("messages")) {
    ChatRequest chat;
    json chat_body = {{"messages", body["messages"]}};
    if (auto e = parse_chat_request(chat_body, &chat)) return send_error(res, *e);
    if (auto e = r.read_bool("add_generation_prompt", &chat.add_generation_prompt)) return send_error(res, *e);
    if (!st.chat) return send_error(res, api_error_from_status(Status(StatusCode::kUnimplemented, st.chat_error)));
    auto rendered =
        st.chat->render(chat.messages, chat.add_generation_prompt, nullptr, nlohmann::ordered_json::object());
    if (!rendered.is_ok()) return send_error(res, api_error_from_status(rendered.status(), "messages"));
    text = std::move(rendered).value();
    add_special = false;
  } else {
    if (!r.find("prompt")) return send_error(res, bad_request("'prompt' or 'messages' is required", "prompt"));
    if (auto e = r.read_string("prompt", &text)) return send_error(res, *e);
  }
  if (auto e = r.read_bool("add_special_tokens", &add_special)) return send_error(res, *e);
  const Tokenizer& tok = st.engine.tokenizer();
  const std::vector<int32_t> ids = tok.encode(text, add_special, true);
  json out = {{"count", ids.size()}, {"max_model_len", st.engine.max_model_len()}, {"tokens", ids}};
  if (return_strs) {
    json strs = json::array();
    for (int32_t id : ids) strs.push_back(std::string(tok.token_text(id)));
    out["token_strs"] = std::move(strs);
  }
  send_json(res, out);
}

void handle_detokenize(ServerState& st, const http::Request& req, http::Responder& res) {
  json body;
  if (auto e = parse_json_body(req, &body)) return send_error(res, *e);
  FieldReader r(body);
  std::string model;
  if (auto e = r.read_string("model", &model)) return send_error(res, *e);
  if (auto e = st.check_model(model)) return send_error(res, *e);
  const json* toks = r.find("tokens");
  if (!toks || !toks->is_array())
    return send_error(res, bad_request("'tokens' must be an array of token ids", "tokens"));
  const Tokenizer& tok = st.engine.tokenizer();
  std::vector<int32_t> ids;
  for (const json& t : *toks) {
    auto id = json_as_int(t);
    if (!id || *id < 0 || *id >= tok.vocab_size())
      return send_error(res, bad_request("'tokens' holds an id outside the vocabulary (size " +
                                             std::to_string(tok.vocab_size()) + ")",
                                         "tokens"));
    ids.push_back(static_cast<int32_t>(*id));
  }
  send_json(res, {{"prompt", tok.decode(ids)}});
}

void handle_models(ServerState& st, http::Responder& res) {
  static const int64_t kCreated = std::time(nullptr);
  json model = {{"id", st.config.served_model_name},
                {"object", "model"},
                {"created", kCreated},
                {"owned_by", "pagoda"},
                {"root", st.config.served_model_name},
                {"max_model_len", st.engine.max_model_len()}};
  send_json(res, {{"object", "list"}, {"data", json::array({model})}});
}

struct Route {
  const char* method;
  const char* path;
  bool quick;  // cheap and non-blocking: answered on the event loop
  bool auth;   // needs the API key when one is set
  RouteFn fn;
};

ApiError http_error(int status, const std::string& message) {
  ApiError e;
  e.http_status = status;
  e.message = message;
  if (status == 404) e.type = "not_found_error";
  if (status == 429 || status == 503) e.retry_after_s = 1;
  return e;
}

}  // namespace

struct Server::Impl {
  Impl(AsyncEngine& e, ServerConfig c) : state(e, std::move(c)) {}
  ServerState state;
  std::vector<Route> routes;
  std::unique_ptr<http::HttpServer> http;
  std::string warning;

  // The route for a path; *method_ok false when the path exists for another method.
  const Route* find(const http::Request& req, bool* method_ok) const {
    const Route* other = nullptr;
    for (const Route& r : routes) {
      if (req.path != r.path) continue;
      if (req.method == r.method || (req.method == "HEAD" && std::string_view(r.method) == "GET")) {
        *method_ok = true;
        return &r;
      }
      other = &r;
    }
    *method_ok = false;
    return other;
  }
  bool authorized_for(const Route& r, const http::Request& req) const {
    if (!r.auth) return true;
    const std::string* h = req.header("authorization");
    return authorized(state.config.api_key, h ? *h : "");
  }
  bool quick(const http::Request& req) const {
    bool method_ok = false;
    const Route* r = find(req, &method_ok);
    return !r || !method_ok || r->quick || !authorized_for(*r, req);
  }
  void handle(const http::Request& req, http::Responder& res) {
    bool method_ok = false;
    const Route* r = find(req, &method_ok);
    if (!r) {
      send_error(res, http_error(404, "no such route: " + req.path));
    } else if (!method_ok) {
      send_error(res, http_error(405, "method " + req.method + " is not allowed on " + req.path));
    } else if (!authorized_for(*r, req)) {
      ApiError e = http_error(401, "invalid or missing API key (send 'Authorization: Bearer <key>')");
      e.code = "invalid_api_key";
      send_error(res, e);
    } else {
      run_guarded(r->fn, req, res);
    }
    const int status = res.responded() ? res.status() : 0;
    state.metrics.on_http_response(status);
    if (state.config.log_requests) std::fprintf(stderr, "%s %s -> %d\n", req.method.c_str(), req.path.c_str(), status);
  }
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;
const std::string& Server::warning() const { return impl_->warning; }

Result<std::unique_ptr<Server>> Server::create(AsyncEngine& engine, ServerConfig config) {
  auto impl = std::make_unique<Impl>(engine, std::move(config));
  ServerState& st = impl->state;
  const Tokenizer& tok = engine.tokenizer();
  const std::string bos(tok.token_text(tok.bos_id())), eos(tok.token_text(tok.eos_id()));
  const bool explicit_template = !st.config.chat_template.empty();
  const std::string source = explicit_template ? st.config.chat_template : tok.chat_template();
  auto chat = ChatRenderer::create(source, bos, eos);
  if (chat.is_ok()) {
    st.chat = chat.value();
  } else if (explicit_template) {
    return Status(StatusCode::kInvalidArgument, "--chat-template: " + chat.status().message());
  } else {
    st.chat_error =
        "the model's chat template is not supported (" + chat.status().message() + "); pass --chat-template FILE";
    impl->warning = st.chat_error;
  }

  Impl* self = impl.get();
  const bool metrics_auth = st.config.metrics_require_key;
  self->routes = {
      {"GET", "/", true, false,
       [](const http::Request&, http::Responder& res) {
         http::Response r;
         r.content_type = "text/html; charset=utf-8";
         r.body = std::string(chat_page_html());
         res.send(r);
       }},
      {"GET", "/health", true, false,
       [&st](const http::Request&, http::Responder& res) {
         if (st.shutting_down)
           return send_error(res, api_error_from_status(Status(StatusCode::kUnavailable, "shutting down")));
         send_json(res, {{"status", "ok"}});
       }},
      {"GET", "/metrics", true, metrics_auth,
       [self](const http::Request&, http::Responder& res) {
         http::Response r;
         r.content_type = "text/plain; version=0.0.4; charset=utf-8";
         r.body = self->state.metrics.render(self->state.engine.snapshot(), self->http->stats());
         res.send(r);
       }},
      {"GET", "/v1/models", true, true, [&st](const http::Request&, http::Responder& res) { handle_models(st, res); }},
      {"POST", "/tokenize", false, true,
       [&st](const http::Request& q, http::Responder& r) { handle_tokenize(st, q, r); }},
      {"POST", "/detokenize", false, true,
       [&st](const http::Request& q, http::Responder& r) { handle_detokenize(st, q, r); }},
      {"POST", "/v1/completions", false, true,
       [&st](const http::Request& q, http::Responder& r) { handle_completions(st, q, r); }},
      {"POST", "/v1/chat/completions", false, true,
       [&st](const http::Request& q, http::Responder& r) { handle_chat_completions(st, q, r); }},
      {"POST", "/internal/prefill", false, true,
       [&st](const http::Request& q, http::Responder& r) { handle_internal_prefill(st, q, r); }},
  };

  const ServerConfig& c = st.config;
  http::ServerOptions o;
  o.host = c.host;
  o.port = c.port;
  o.num_threads = std::max(1, c.num_http_threads);
  o.limits.max_body_bytes = c.max_body_bytes;
  o.request_timeout_ms = static_cast<int>(c.request_timeout_s * 1000);
  o.idle_timeout_ms = static_cast<int>(c.idle_timeout_s * 1000);
  o.write_timeout_ms = static_cast<int>(c.request_timeout_s * 1000);
  o.max_connections = c.max_connections;
  o.max_connections_per_client = c.max_connections_per_client;
  o.shutdown_grace_ms = static_cast<int>(c.shutdown_grace_s * 1000);
  self->http = std::make_unique<http::HttpServer>(
      o, [self](const http::Request& q, http::Responder& r) { self->handle(q, r); },
      [self](const http::Request& q) { return self->quick(q); },
      [self](int status, const std::string& message) {
        self->state.metrics.on_http_response(status);
        return error_response(http_error(status, message));
      });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Result<int> Server::bind() { return impl_->http->bind(); }

bool Server::listen() { return impl_->http->run(); }

void Server::begin_shutdown() { impl_->state.shutting_down = true; }

void Server::stop() {
  impl_->state.shutting_down = true;
  impl_->http->stop();
}

}  // namespace pagoda::server
