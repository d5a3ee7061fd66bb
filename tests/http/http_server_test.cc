// The HTTP layer in process, over real loopback sockets: pipelining, slow
// clients, deadlines, connection caps, limits, disconnects and shutdown.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "../build_kind.h"
#include "http/server.h"
#include "raw_socket.h"

namespace pagoda::http {
namespace {

using pagoda::testing_util::kTimeScale;
using testing_util::Clock;
using testing_util::connect_to;
using testing_util::read_until;
using testing_util::seconds_since;
using testing_util::send_all;

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

class TestHttpServer {
 public:
  explicit TestHttpServer(ServerOptions o, Handler h, QuickPredicate q = nullptr) {
    std::signal(SIGPIPE, SIG_IGN);
    o.host = "127.0.0.1";
    o.port = 0;
    server_ = std::make_unique<HttpServer>(o, std::move(h), std::move(q), [](int status, const std::string& msg) {
      Response r;
      r.status = status;
      r.content_type = "text/plain";
      r.body = msg;
      return r;
    });
    auto port = server_->bind();
    EXPECT_TRUE(port.is_ok());
    port_ = port.value();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~TestHttpServer() { stop_and_join(); }
  double stop_and_join() {
    const auto t = Clock::now();
    if (thread_.joinable()) {
      server_->stop();
      thread_.join();
    }
    return seconds_since(t);
  }
  int port() const { return port_; }
  HttpServer& server() { return *server_; }

 private:
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
};

Handler echo_path() {
  return [](const Request& req, Responder& res) {
    Response r;
    r.content_type = "text/plain";
    r.body = req.path + "|" + req.body;
    res.send(r);
  };
}

TEST(HttpServer, PipelinedRequestsAnsweredInOrder) {
  TestHttpServer s({}, echo_path());
  const int fd = connect_to(s.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd,
                       "GET /one HTTP/1.1\r\nHost: x\r\n\r\n"
                       "POST /two HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                       "GET /three HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  bool eof = false;
  const std::string got = read_until(
      fd, [](const std::string&) { return false; }, 5000, &eof);
  EXPECT_TRUE(eof);  // closed after the third (Connection: close)
  EXPECT_EQ(count(got, "HTTP/1.1 200"), 3u) << got;
  const size_t a = got.find("/one|"), b = got.find("/two|abc"), c = got.find("/three|");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(c, std::string::npos);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  ::close(fd);
}

TEST(HttpServer, SlowClientsHoldNoWorker) {
  ServerOptions o;
  o.num_threads = 1;  // one worker: a slow client holding it would stall everyone
  TestHttpServer s(o, echo_path());
  std::vector<int> slow;
  for (int i = 0; i < 50; ++i) {
    const int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab"));
    slow.push_back(fd);
  }
  double worst = 0;
  for (int i = 0; i < 10; ++i) {
    const auto t = Clock::now();
    const int fd = connect_to(s.port());
    ASSERT_TRUE(send_all(fd, "GET /control HTTP/1.1\r\nHost: x\r\n\r\n"));
    const std::string got = read_until(
        fd, [](const std::string& b) { return b.find("/control|") != std::string::npos; }, 5000);
    EXPECT_NE(got.find("200"), std::string::npos);
    worst = std::max(worst, seconds_since(t));
    ::close(fd);
    for (int f : slow) send_all(f, "x");
  }
  EXPECT_LT(worst, 1.0 * kTimeScale);
  for (int f : slow) ::close(f);
}

TEST(HttpServer, WholeRequestDeadline) {
  ServerOptions o;
  o.request_timeout_ms = 300;
  TestHttpServer s(o, echo_path());
  const int fd = connect_to(s.port());
  const auto t = Clock::now();
  // One header byte every 50 ms: each byte is "progress", the request never completes.
  bool eof = false;
  std::string got;
  send_all(fd, "GET /drip HTTP/1.1\r\n");
  while (seconds_since(t) < 3 && !eof) {
    send_all(fd, "X");
    got += read_until(
        fd, [](const std::string& b) { return !b.empty(); }, 50, &eof);
  }
  EXPECT_LT(seconds_since(t), 1.5 * kTimeScale);
  EXPECT_NE(got.find("408"), std::string::npos) << got;
  EXPECT_EQ(s.server().stats().timed_out_requests, 1);
  ::close(fd);
}

TEST(HttpServer, ConnectionCaps) {
  ServerOptions o;
  o.max_connections_per_client = 3;
  o.max_connections = 5;
  TestHttpServer s(o, echo_path());
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) fds.push_back(connect_to(s.port()));
  const int extra = connect_to(s.port());
  const std::string refused = read_until(
      extra, [](const std::string&) { return false; }, 2000);
  EXPECT_NE(refused.find("429"), std::string::npos) << refused;
  ::close(extra);
  // Another address (127.0.0.2 is loopback too) is still served...
  for (int i = 0; i < 2; ++i) fds.push_back(connect_to(s.port(), "127.0.0.2"));
  ASSERT_TRUE(send_all(fds.back(), "GET /other HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(read_until(
                fds.back(), [](const std::string& b) { return b.find("/other|") != std::string::npos; }, 2000)
                .find("200"),
            std::string::npos);
  // ...until the total cap.
  const int over = connect_to(s.port(), "127.0.0.3");
  EXPECT_NE(read_until(
                over, [](const std::string&) { return false; }, 2000)
                .find("503"),
            std::string::npos);
  ::close(over);
  for (int f : fds) ::close(f);
  EXPECT_GE(s.server().stats().refused_connections, 2);
}

TEST(HttpServer, ChunkedBodyLimitEnforcedWhileReading) {
  ServerOptions o;
  o.limits.max_body_bytes = 1 << 20;
  TestHttpServer s(o, echo_path());
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk = "10000\r\n" + std::string(0x10000, 'a') + "\r\n";  // 64 KiB chunks
  size_t sent = 0;
  std::string got;
  // Keep sending (as a client uploading 1 GiB would) until the server answers.
  for (int i = 0; i < 16384 && got.empty(); ++i) {
    if (!send_all(fd, chunk)) break;
    sent += 0x10000;
    got = read_until(
        fd, [](const std::string& b) { return !b.empty(); }, 1);
  }
  got += read_until(
      fd, [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; }, 3000);
  EXPECT_NE(got.find("413"), std::string::npos) << got.substr(0, 200);
  EXPECT_LT(sent, static_cast<size_t>(32) << 20);  // refused long before 1 GiB
  ::close(fd);
}

TEST(HttpServer, ExpectContinueAndHead) {
  TestHttpServer s({}, echo_path());
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"));
  const std::string cont = read_until(
      fd, [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; }, 2000);
  EXPECT_EQ(cont.rfind("HTTP/1.1 100 Continue", 0), 0u) << cont;
  ASSERT_TRUE(send_all(fd, "hi"));
  EXPECT_NE(read_until(
                fd, [](const std::string& b) { return b.find("/e|hi") != std::string::npos; }, 2000)
                .find("/e|hi"),
            std::string::npos);
  ASSERT_TRUE(send_all(fd, "HEAD /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  bool eof = false;
  const std::string head = read_until(
      fd, [](const std::string&) { return false; }, 2000, &eof);
  EXPECT_NE(head.find("Content-Length: 3"), std::string::npos) << head;  // "/h|"
  EXPECT_EQ(head.find("/h|"), std::string::npos);
  ::close(fd);
}

TEST(HttpServer, HandlerSeesClientGone) {
  std::atomic<int> saw_gone{0};
  TestHttpServer s({}, [&](const Request&, Responder& res) {
    const auto t = Clock::now();
    while (seconds_since(t) < 5) {
      if (res.client_gone()) {
        saw_gone = 1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    res.send(Response{});
  });
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t = Clock::now();
  ::close(fd);
  while (!saw_gone && seconds_since(t) < 3) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(saw_gone);
  EXPECT_LT(seconds_since(t), 1.0 * kTimeScale);
}

TEST(HttpServer, StopIsBoundedWhateverClientsDo) {
  ServerOptions o;
  o.shutdown_grace_ms = 300;
  o.write_timeout_ms = 60000;  // only the grace period can end the stuck writer
  std::atomic<bool> streaming{false};
  auto s = std::make_unique<TestHttpServer>(o, [&](const Request&, Responder& res) {
    res.begin_stream(200, "text/plain");
    streaming = true;
    const std::string block(1 << 16, 'z');
    while (res.write(block)) {
    }
  });
  // A client that never reads its stream, and one dripping a request head.
  const int reader = connect_to(s->port());
  ASSERT_TRUE(send_all(reader, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  const int dripper = connect_to(s->port());
  send_all(dripper, "GET /drip HTTP/1.1\r\nX: ");
  while (!streaming) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the socket buffers fill up
  const double took = s->stop_and_join();
  EXPECT_LT(took, 3.0 * kTimeScale);
  EXPECT_GE(took, 0.25);  // the grace period was given
  ::close(reader);
  ::close(dripper);
}

TEST(HttpServer, QuickRoutesRunOnTheLoopWhileWorkersAreBusy) {
  ServerOptions o;
  o.num_threads = 1;
  std::atomic<bool> release{false};
  TestHttpServer s(
      o,
      [&](const Request& req, Responder& res) {
        if (req.path == "/block")
          while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        Response r;
        r.body = req.path;
        res.send(r);
      },
      [](const Request& req) { return req.path == "/health"; });
  const int busy = connect_to(s.port());
  ASSERT_TRUE(send_all(busy, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(read_until(
                fd, [](const std::string& b) { return b.find("/health") != std::string::npos; }, 1000)
                .find("/health"),
            std::string::npos);
  release = true;
  EXPECT_NE(read_until(
                busy, [](const std::string& b) { return b.find("/block") != std::string::npos; }, 2000)
                .find("/block"),
            std::string::npos);
  ::close(fd);
  ::close(busy);
}

}  // namespace
}  // namespace pagoda::http
