// An in-process `pagoda serve` on a random loopback port over a tiny random
// model, plus small HTTP helpers for the integration tests.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "../engine/engine_test_util.h"
#include "engine/async_engine.h"
#include "server/server.h"

namespace pagoda::server::testing {

constexpr int64_t kTestCtx = 1024;

struct TestServerOptions {
  int64_t kv_bytes = 1 << 20;
  int32_t max_queue = 0;
  int32_t max_num_seqs = 64;
  std::string api_key;
  size_t max_body_bytes = 1 << 20;
  std::string chat_template;
  std::string model;        // "": the tiny random model
  std::string kv_disk_dir;  // a disk KV tier (--kv-disk-dir); "": none
  std::string role;         // "prefill" / "decode" (prefill/decode disaggregation); "": neither
};

class TestServer {
 public:
  explicit TestServer(const TestServerOptions& o = {}) {
    std::signal(SIGPIPE, SIG_IGN);
    SchedulerConfig sched;
    sched.max_num_seqs = o.max_num_seqs;
    const std::string model = o.model.empty() ? pagoda::testing_util::tiny_model_path("tiny", kTestCtx) : o.model;
    std::unique_ptr<Engine> engine;
    if (o.kv_disk_dir.empty() && o.role.empty()) {
      engine = pagoda::testing_util::make_engine(model, o.kv_bytes, 4, sched);
    } else {
      EngineConfig cfg;
      cfg.num_threads = 1;
      cfg.kv_cache_bytes = o.kv_bytes;
      cfg.block_size = 4;
      cfg.sched = sched;
      cfg.kv_disk_dir = o.kv_disk_dir;
      cfg.kv_export = o.role == "prefill";
      if (o.role == "decode") cfg.kv_host_tier_bytes = 64 << 20;
      auto e = Engine::create(model, cfg);
      EXPECT_TRUE(e.is_ok()) << e.status().message();
      engine = std::move(e).value();
    }
    engine_ = std::make_unique<AsyncEngine>(std::move(engine), o.max_queue);
    ServerConfig c;
    c.host = "127.0.0.1";
    c.port = 0;
    c.api_key = o.api_key;
    c.served_model_name = "tiny";
    c.max_body_bytes = o.max_body_bytes;
    c.chat_template = o.chat_template;
    c.role = o.role;
    auto s = Server::create(*engine_, c);
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    server_ = std::move(s).value();
    auto port = server_->bind();
    EXPECT_TRUE(port.is_ok()) << port.status().message();
    port_ = port.value();
    thread_ = std::thread([this] { server_->listen(); });
  }
  ~TestServer() {
    server_->begin_shutdown();
    engine_->shutdown();
    server_->stop();
    thread_.join();
  }
  int port() const { return port_; }
  AsyncEngine& engine() { return *engine_; }
  httplib::Client client(int timeout_s = 30) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(timeout_s, 0);
    return c;
  }

 private:
  std::unique_ptr<AsyncEngine> engine_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
  int port_ = 0;
};

inline httplib::Result post_json(httplib::Client& c, const std::string& path, const std::string& body,
                                 const httplib::Headers& headers = {}) {
  return c.Post(path.c_str(), headers, body, "application/json");
}

inline nlohmann::json body_json(const httplib::Result& r) { return nlohmann::json::parse(r->body); }

// The JSON payloads of an SSE body, and whether it ended with [DONE].
inline std::vector<nlohmann::json> sse_events(const std::string& body, bool* done) {
  std::vector<nlohmann::json> out;
  *done = false;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind("data: ", 0) != 0) continue;  // comments
    const std::string data = ev.substr(6);
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    out.push_back(nlohmann::json::parse(data));
  }
  return out;
}

// The value of one metric line `name{...} value` in /metrics text.
inline double metric(const std::string& text, const std::string& name) {
  const size_t p = text.find("\n" + name + "{");
  if (p == std::string::npos) return -1;
  const size_t brace = text.find("} ", p);
  return std::stod(text.substr(brace + 2, text.find('\n', brace) - brace - 2));
}

inline std::string metrics_text(const TestServer& s) {
  auto c = s.client();
  auto r = c.Get("/metrics");
  return r ? r->body : std::string();
}

// Waits until the engine is idle with every KV block free; false on timeout.
inline bool wait_idle_and_free(const TestServer& s, int timeout_ms = 10000) {
  for (int waited = 0; waited < timeout_ms; waited += 20) {
    const std::string m = metrics_text(s);
    if (metric(m, "pagoda:num_requests_running") == 0 && metric(m, "pagoda:num_requests_waiting") == 0 &&
        metric(m, "pagoda:kv_cache_free_blocks") == metric(m, "pagoda:kv_cache_total_blocks"))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A raw TCP connection (for clients that vanish mid-stream).
inline int connect_raw(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline int64_t rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

}  // namespace pagoda::server::testing
