// `pagoda serve`: an OpenAI-compatible HTTP server over an AsyncEngine.
// Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
// GET /health, POST /tokenize, POST /detokenize, GET /metrics, and the chat
// page at GET / (no key needed to load it; it sends the key it is given).
// With an API key set, every route but /health, / (and /metrics unless
// metrics_require_key) needs it. The HTTP layer is http/server.h.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/async_engine.h"

namespace pagoda::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (see Server::bind)
  std::string api_key;              // "": no auth
  std::string served_model_name;    // the only accepted "model"
  std::string chat_template;        // template source; "": the model's, else ChatML
  size_t max_body_bytes = 8 << 20;  // larger bodies get 413 (any transfer encoding)
  int num_http_threads = 64;        // requests handled at once (slow clients hold none)
  double request_timeout_s = 30;    // to receive a whole request head + body; also per reply write
  double idle_timeout_s = 30;       // keep-alive connection without a request
  int max_connections = 4096;
  int max_connections_per_client = 512;  // per remote address
  double shutdown_grace_s = 10;          // after stop(), running handlers' time before their sockets are cut
  bool metrics_require_key = false;      // /metrics needs the API key too
  bool log_requests = false;
  // Latency targets of requests whose body sets no "slo" (0: none).
  double slo_ttft_ms = 0;
  double slo_tpot_ms = 0;
  // Prefill/decode disaggregation (server/disaggregation.h): "prefill"
  // serves /internal/prefill, "decode" honours X-Pagoda-Prefill; "": neither.
  std::string role;
};

class Server {
 public:
  // The engine must outlive the server. Fails when --chat-template cannot
  // be parsed (a model template that cannot be parsed only fails chat calls).
  static Result<std::unique_ptr<Server>> create(AsyncEngine& engine, ServerConfig config);
  ~Server();

  // Binds host:port (port 0 picks a free one); returns the bound port.
  Result<int> bind();
  // Serves until stop(); returns false if the server failed.
  bool listen();
  // New requests get 503 and /health reports unavailable.
  void begin_shutdown();
  // Stops accepting connections and closes idle ones; listen() returns once
  // handlers finish, at most shutdown_grace_s later (then their sockets are cut).
  void stop();
  // Non-fatal problems found at start-up (e.g. an unparsable model template).
  const std::string& warning() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::server
