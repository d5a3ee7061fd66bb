// `pagoda serve`: an OpenAI-compatible HTTP server over an AsyncEngine.
// Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
// GET /health, POST /tokenize, POST /detokenize, GET /metrics, and the chat
// page at GET / (no key needed to load it; it sends the key it is given).
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
  size_t max_body_bytes = 8 << 20;  // larger bodies get 413
  int num_http_threads = 64;        // connections served at once
  bool log_requests = false;
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
  // Stops accepting connections; listen() returns once handlers finish.
  void stop();
  // Non-fatal problems found at start-up (e.g. an unparsable model template).
  const std::string& warning() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::server
