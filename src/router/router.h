// `pagoda router`: the OpenAI endpoint in front of prefill/decode
// disaggregated instances (DistServe, Splitwise, Mooncake). For each
// completion or chat request it picks a prefill instance (fewest requests
// in flight) and a decode instance (the one whose recent prompts share the
// longest prefix with this one: its prefix cache likely holds it; else the
// least busy), then forwards the request to the decode instance with the
// header X-Pagoda-Prefill naming the prefill instance (which computes the
// prompt and hands its KV blocks to the decode instance:
// server/disaggregation.h) and relays the reply, streamed or whole.
//
// Failures: an instance that refuses connections is marked down for a
// while and others are tried (before anything was sent to the client);
// one that dies mid-reply ends that reply with a clear error (an SSE error
// event, or 502); the router itself keeps serving. A client that goes away
// closes the connection to the decode instance, which aborts the request.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace pagoda::router {

struct RouterConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                   // 0: any free port
  std::vector<std::string> prefill;  // http://host:port of each --role prefill instance
  std::vector<std::string> decode;   // ... and of each --role decode instance
  int num_http_threads = 64;
  double request_timeout_s = 600;  // a whole upstream reply
  double down_for_s = 2;           // how long an unreachable instance is skipped
};

class Router {
 public:
  static Result<std::unique_ptr<Router>> create(RouterConfig config);
  ~Router();
  Result<int> bind();
  bool listen();  // until stop()
  void stop();

 private:
  struct Impl;
  explicit Router(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::router
