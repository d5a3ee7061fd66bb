#include "router/router.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>

#include "http/server.h"

namespace pagoda::router {

namespace {

using nlohmann::json;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Instance {
  explicit Instance(std::string u) : url(std::move(u)) {}
  std::string url;
  std::atomic<int> inflight{0};
  std::atomic<double> down_until{0};
  std::atomic<int64_t> requests{0};
  std::atomic<int64_t> failures{0};
  std::mutex mu;
  std::deque<std::string> recent;  // decode instances: recent prompts (prefix affinity)
  bool up() const { return now_s() >= down_until.load(); }
};

size_t common_prefix(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// The text a request's prompt starts with: "prompt" (completions) or the
// messages' contents in order (chat).
std::string affinity_text(const json& body) {
  std::string t;
  if (auto p = body.find("prompt"); p != body.end() && p->is_string()) return p->get<std::string>();
  if (auto m = body.find("messages"); m != body.end() && m->is_array())
    for (const json& msg : *m)
      if (msg.is_object())
        if (auto c = msg.find("content"); c != msg.end() && c->is_string()) t += c->get<std::string>() + "\n";
  return t;
}

http::Response error_response(int status, const std::string& message, const char* code) {
  http::Response r;
  r.status = status;
  r.body = json{{"error", {{"message", message}, {"type", "server_error"}, {"param", nullptr}, {"code", code}}}}.dump();
  return r;
}

}  // namespace

struct Router::Impl {
  RouterConfig config;
  std::vector<std::unique_ptr<Instance>> prefill, decode;
  std::unique_ptr<http::HttpServer> http;
  std::atomic<uint64_t> turn{0};
  std::atomic<int64_t> requests{0}, errors{0}, client_disconnects{0};

  // Fewest in flight among the reachable ones not tried yet; round robin on ties.
  Instance* pick(std::vector<std::unique_ptr<Instance>>& pool, const std::vector<Instance*>& tried) {
    Instance* best = nullptr;
    const uint64_t start = turn.fetch_add(1);
    for (size_t k = 0; k < pool.size(); ++k) {
      Instance* c = pool[(start + k) % pool.size()].get();
      if (!c->up() || std::find(tried.begin(), tried.end(), c) != tried.end()) continue;
      if (!best || c->inflight.load() < best->inflight.load()) best = c;
    }
    return best;
  }
  // The decode instance whose recent prompts share the longest prefix with
  // this one (at least 32 bytes); else the least busy.
  Instance* pick_decode(const std::string& text, const std::vector<Instance*>& tried) {
    Instance* best = nullptr;
    size_t best_len = 31;
    for (auto& d : decode) {
      if (!d->up() || std::find(tried.begin(), tried.end(), d.get()) != tried.end()) continue;
      std::lock_guard<std::mutex> lock(d->mu);
      for (const std::string& r : d->recent) {
        const size_t len = common_prefix(r, text);
        if (len > best_len) {
          best_len = len;
          best = d.get();
        }
      }
    }
    return best ? best : pick(decode, tried);
  }
  void remember(Instance* d, const std::string& text) {
    std::lock_guard<std::mutex> lock(d->mu);
    d->recent.push_back(text.substr(0, 4096));
    if (d->recent.size() > 64) d->recent.pop_front();
  }
  void mark_down(Instance* i) {
    i->down_until = now_s() + config.down_for_s;
    ++i->failures;
  }

  void generate(const http::Request& req, http::Responder& res);
  void get_from_decode(const http::Request& req, http::Responder& res);
  void handle(const http::Request& req, http::Responder& res);
  std::string metrics() const;
};

void Router::Impl::generate(const http::Request& req, http::Responder& res) {
  ++requests;
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    ++errors;
    http::Response r = error_response(400, "the body is not a JSON object", "invalid_json");
    return void(res.send(r));
  }
  const std::string text = affinity_text(body);
  const bool stream = body.value("stream", false);
  std::vector<Instance*> tried_p, tried_d;
  for (int attempt = 0; attempt < 4; ++attempt) {
    Instance* p = pick(prefill, tried_p);
    Instance* d = pick_decode(text, tried_d);
    if (!p || !d) break;
    httplib::Client cli(d->url);
    cli.set_connection_timeout(2, 0);
    cli.set_read_timeout(static_cast<time_t>(config.request_timeout_s), 0);
    httplib::Request hr;
    hr.method = "POST";
    hr.path = req.path;
    hr.body = req.body;
    hr.set_header("Content-Type", "application/json");
    hr.set_header("X-Pagoda-Prefill", p->url);
    if (const std::string* auth = req.header("authorization")) hr.set_header("Authorization", *auth);
    int status = 0;
    std::string content_type, buffered;
    bool started = false, gone = false;
    hr.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      content_type = r.get_header_value("Content-Type");
      if (status == 200 && stream) {
        started = res.begin_stream(200, content_type);
        gone = !started;
      }
      return !gone;
    };
    hr.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (!started) {
        buffered.append(data, n);
        return true;
      }
      if (!res.write(std::string_view(data, n))) gone = true;
      return !gone;
    };
    httplib::Response hres;
    httplib::Error err = httplib::Error::Success;
    ++p->inflight;
    ++d->inflight;
    ++d->requests;
    const bool ok = cli.send(hr, hres, err);
    --p->inflight;
    --d->inflight;
    if (gone) {  // the client left: closing our side makes the decode instance abort
      ++client_disconnects;
      return;
    }
    if (started) {
      if (!ok) {  // the decode instance died mid-stream
        mark_down(d);
        ++errors;
        const json e = {
            {"error",
             {{"message", "the decode instance " + d->url + " failed mid-stream (" + httplib::to_string(err) + ")"},
              {"type", "server_error"},
              {"code", "decode_unavailable"}}}};
        res.write("data: " + e.dump() + "\n\n");
      }
      res.end_stream();
      if (ok) remember(d, text);
      return;
    }
    if (!ok) {
      mark_down(d);
      tried_d.push_back(d);
      if (err == httplib::Error::Connection) continue;  // nothing was sent: try another
      ++errors;
      return void(res.send(error_response(
          502, "the decode instance " + d->url + " failed (" + httplib::to_string(err) + ")", "decode_unavailable")));
    }
    if (status == 502 && buffered.find("prefill_unavailable") != std::string::npos) {
      mark_down(p);  // the decode instance could not reach or use it: another prefill instance
      tried_p.push_back(p);
      continue;
    }
    http::Response r;
    r.status = status;
    r.content_type = content_type.empty() ? "application/json" : content_type;
    r.body = std::move(buffered);
    if (status == 200) remember(d, text);
    res.send(r);
    return;
  }
  ++errors;
  res.send(error_response(503, "no prefill or decode instance is reachable", "no_instance"));
}

void Router::Impl::get_from_decode(const http::Request& req, http::Responder& res) {
  std::vector<Instance*> tried;
  while (Instance* d = pick(decode, tried)) {
    httplib::Client cli(d->url);
    cli.set_connection_timeout(2, 0);
    httplib::Headers h;
    if (const std::string* auth = req.header("authorization")) h.emplace("Authorization", *auth);
    if (auto r = cli.Get(req.path, h)) {
      http::Response out;
      out.status = r->status;
      out.content_type = r->get_header_value("Content-Type");
      out.body = r->body;
      return void(res.send(out));
    }
    mark_down(d);
    tried.push_back(d);
  }
  res.send(error_response(503, "no decode instance is reachable", "no_instance"));
}

std::string Router::Impl::metrics() const {
  std::string out;
  auto line = [&out](const std::string& name, const std::string& labels, double v) {
    out += "pagoda_router:" + name + (labels.empty() ? "" : "{" + labels + "}") + " " + std::to_string(v) + "\n";
  };
  line("requests_total", "", static_cast<double>(requests.load()));
  line("errors_total", "", static_cast<double>(errors.load()));
  line("client_disconnects_total", "", static_cast<double>(client_disconnects.load()));
  for (const auto* pool : {&prefill, &decode})
    for (const auto& i : *pool) {
      const std::string l =
          std::string("role=\"") + (pool == &prefill ? "prefill" : "decode") + "\",url=\"" + i->url + "\"";
      line("instance_up", l, i->up() ? 1 : 0);
      line("instance_inflight", l, i->inflight.load());
      line("instance_requests_total", l, static_cast<double>(i->requests.load()));
      line("instance_failures_total", l, static_cast<double>(i->failures.load()));
    }
  return out;
}

void Router::Impl::handle(const http::Request& req, http::Responder& res) {
  if (req.method == "POST" && (req.path == "/v1/completions" || req.path == "/v1/chat/completions"))
    return generate(req, res);
  if (req.method == "GET" && req.path == "/v1/models") return get_from_decode(req, res);
  if (req.method == "GET" && req.path == "/health") {
    http::Response r;
    r.body = json{{"status", "ok"}}.dump();
    return void(res.send(r));
  }
  if (req.method == "GET" && req.path == "/metrics") {
    http::Response r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics();
    return void(res.send(r));
  }
  res.send(error_response(404, "no such route: " + req.path, "not_found"));
}

Router::Router(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Router::~Router() = default;

Result<std::unique_ptr<Router>> Router::create(RouterConfig config) {
  if (config.prefill.empty() || config.decode.empty())
    return invalid_argument("the router needs at least one --prefill and one --decode instance");
  auto impl = std::make_unique<Impl>();
  for (const std::string& u : config.prefill) {
    if (!httplib::Client(u).is_valid()) return invalid_argument("bad instance address '" + u + "'");
    impl->prefill.push_back(std::make_unique<Instance>(u));
  }
  for (const std::string& u : config.decode) {
    if (!httplib::Client(u).is_valid()) return invalid_argument("bad instance address '" + u + "'");
    impl->decode.push_back(std::make_unique<Instance>(u));
  }
  http::ServerOptions o;
  o.host = config.host;
  o.port = config.port;
  o.num_threads = std::max(1, config.num_http_threads);
  o.write_timeout_ms = static_cast<int>(config.request_timeout_s * 1000);
  impl->config = std::move(config);
  Impl* self = impl.get();
  impl->http = std::make_unique<http::HttpServer>(
      o, [self](const http::Request& q, http::Responder& r) { self->handle(q, r); },
      [](const http::Request& q) { return q.path == "/health" || q.path == "/metrics"; },
      [](int status, const std::string& message) { return error_response(status, message, "http_error"); });
  return std::unique_ptr<Router>(new Router(std::move(impl)));
}

Result<int> Router::bind() { return impl_->http->bind(); }
bool Router::listen() { return impl_->http->run(); }
void Router::stop() { impl_->http->stop(); }

}  // namespace pagoda::router
