// Server set-up, auth, error pages, and the small routes; generation routes
// are in completion_routes.cc.
#include "server/server.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>

#include "server/auth.h"
#include "server/chat_page.h"
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

void send_json(httplib::Response& res, const json& j, int status) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  send_json(res, error_body(e), e.http_status);
}

MaybeError parse_json_body(const httplib::Request& req, json* out) {
  try {
    *out = json::parse(req.body);
  } catch (const json::parse_error& e) {
    return bad_request(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!out->is_object()) return bad_request("the request body must be a JSON object");
  return std::nullopt;
}

namespace {

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

// Every handler runs inside this: library exceptions never escape.
Handler guarded(Handler fn) {
  return [fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
    try {
      fn(req, res);
    } catch (const json::exception& e) {
      send_error(res, bad_request(std::string("invalid request: ") + e.what()));
    } catch (const std::exception& e) {
      send_error(res, api_error_from_status(internal_error(e.what())));
    } catch (...) {
      send_error(res, api_error_from_status(internal_error("unknown error")));
    }
  };
}

void handle_tokenize(ServerState& st, const httplib::Request& req, httplib::Response& res) {
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

void handle_detokenize(ServerState& st, const httplib::Request& req, httplib::Response& res) {
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

void handle_models(ServerState& st, httplib::Response& res) {
  static const int64_t kCreated = std::time(nullptr);
  json model = {{"id", st.config.served_model_name},
                {"object", "model"},
                {"created", kCreated},
                {"owned_by", "pagoda"},
                {"root", st.config.served_model_name},
                {"max_model_len", st.engine.max_model_len()}};
  send_json(res, {{"object", "list"}, {"data", json::array({model})}});
}

const char* default_error_message(int status) {
  switch (status) {
    case 404: return "no such route";
    case 405: return "method not allowed";
    case 413: return "the request body is too large";
    case 400: return "bad request";
    default: return "request failed";
  }
}

// cpp-httplib 0.11 listens with a backlog of 5, so a burst of connections
// (32 clients at once) overflows the accept queue and some are dropped. Find
// our listening socket and raise its backlog (listen() again only updates it).
void widen_listen_backlog(int port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int bound = -1;
    if (addr.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) bound = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (bound == port) ::listen(fd, SOMAXCONN);
  }
  closedir(dir);
}

}  // namespace

struct Server::Impl {
  Impl(AsyncEngine& e, ServerConfig c) : state(e, std::move(c)) {}
  ServerState state;
  httplib::Server http;
  std::string warning;
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

  httplib::Server& http = impl->http;
  const int threads = std::max(1, st.config.num_http_threads);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_payload_max_length(st.config.max_body_bytes);
  http.set_pre_routing_handler([&st](const httplib::Request& req, httplib::Response& res) {
    if (route_needs_auth(req.path) && !authorized(st.config.api_key, req.get_header_value("Authorization"))) {
      ApiError e;
      e.http_status = 401;
      e.message = "invalid or missing API key (send 'Authorization: Bearer <key>')";
      e.code = "invalid_api_key";
      send_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.http_status = res.status;
    e.message = default_error_message(res.status);
    if (res.status == 404) e.type = "not_found_error";
    send_error(res, e);
  });
  http.set_logger([&st](const httplib::Request& req, const httplib::Response& res) {
    st.metrics.on_http_response(res.status);
    if (st.config.log_requests) std::fprintf(stderr, "%s %s -> %d\n", req.method.c_str(), req.path.c_str(), res.status);
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(chat_page_html()), "text/html; charset=utf-8");
  });
  http.Get("/health", guarded([&st](const httplib::Request&, httplib::Response& res) {
             if (st.shutting_down)
               return send_error(res, api_error_from_status(Status(StatusCode::kUnavailable, "shutting down")));
             send_json(res, {{"status", "ok"}});
           }));
  http.Get("/metrics", guarded([&st](const httplib::Request&, httplib::Response& res) {
             res.set_content(st.metrics.render(st.engine.snapshot()), "text/plain; version=0.0.4; charset=utf-8");
           }));
  http.Get("/v1/models", guarded([&st](const httplib::Request&, httplib::Response& res) { handle_models(st, res); }));
  http.Post("/tokenize",
            guarded([&st](const httplib::Request& q, httplib::Response& r) { handle_tokenize(st, q, r); }));
  http.Post("/detokenize",
            guarded([&st](const httplib::Request& q, httplib::Response& r) { handle_detokenize(st, q, r); }));
  http.Post("/v1/completions",
            guarded([&st](const httplib::Request& q, httplib::Response& r) { handle_completions(st, q, r); }));
  http.Post("/v1/chat/completions",
            guarded([&st](const httplib::Request& q, httplib::Response& r) { handle_chat_completions(st, q, r); }));
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Result<int> Server::bind() {
  const ServerConfig& c = impl_->state.config;
  if (c.port == 0) {
    const int port = impl_->http.bind_to_any_port(c.host);
    if (port <= 0) return Status(StatusCode::kUnavailable, "cannot bind to " + c.host);
    widen_listen_backlog(port);
    return port;
  }
  if (!impl_->http.bind_to_port(c.host, c.port))
    return Status(StatusCode::kUnavailable,
                  "cannot bind to " + c.host + ":" + std::to_string(c.port) + " (in use, or a bad address)");
  widen_listen_backlog(c.port);
  return c.port;
}

bool Server::listen() { return impl_->http.listen_after_bind(); }

void Server::begin_shutdown() { impl_->state.shutting_down = true; }

void Server::stop() {
  impl_->state.shutting_down = true;
  impl_->http.stop();
}

}  // namespace pagoda::server
