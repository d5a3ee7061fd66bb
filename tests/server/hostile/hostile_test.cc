// The hostile-client suite: a real `pagoda serve` process attacked the way
// an untrusted network would (issue: server hardening). Each test bounds its
// own time; together they take well under a minute.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../../build_kind.h"
#include "../../engine/engine_test_util.h"
#include "serve_process.h"

namespace pagoda::hostile {
namespace {

using nlohmann::json;
using pagoda::testing_util::kSanitized;
using pagoda::testing_util::kTimeScale;

const std::string& model() {
  static const std::string path = pagoda::testing_util::tiny_model_path("tiny", 1024);
  return path;
}

std::string deep(int depth) {
  return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']');
}

TEST(Hostile, DeepNestingOnEveryRouteIsA400) {
  ServeProcess srv(model(), {});
  const std::string d = deep(65000);  // ~130 KB
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/v1/completions", R"({"prompt":)" + d + "}"},
      {"/v1/completions", R"({"prompt":"x","logit_bias":{"1":)" + d + "}}"},
      {"/v1/chat/completions", R"({"messages":)" + d + "}"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"tools":)" + d + "}"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"a":)" + d + "}}"},
      {"/tokenize", R"({"messages":)" + d + "}"},
      {"/detokenize", R"({"tokens":)" + d + "}"},
      {"/v1/completions", d},
  };
  for (const auto& [path, body] : cases) {
    const Reply r = request(srv.port(), "POST", path, body);
    EXPECT_EQ(r.status, 400) << path << " " << r.body.substr(0, 200);
    EXPECT_NE(r.body.find("nests deeper"), std::string::npos) << path << " " << r.body.substr(0, 200);
  }
  EXPECT_EQ(request(srv.port(), "GET", "/health").status, 200);
  EXPECT_TRUE(srv.running());
}

TEST(Hostile, SlowlorisAndIdleFloodsDoNotStarveOthers) {
  // 200 slow + 300 idle connections; fewer where the descriptor limit is low
  // (the server keeps a margin below it and caps one address at half).
  const int64_t fds = raise_fd_limit();
  const double f = std::min(1.0, static_cast<double>(fds - 200) / 1100.0);
  ASSERT_GT(f, 0.05) << "descriptor limit " << fds << " too low for this test";
  const int num_slow = static_cast<int>(200 * f), num_idle = static_cast<int>(300 * f);
  RecordProperty("slow_connections", std::to_string(num_slow));
  RecordProperty("idle_connections", std::to_string(num_idle));
  ServeProcess srv(model(), {});
  std::vector<int> slow, idle;
  for (int i = 0; i < num_slow; ++i) {
    const int fd = connect_to(srv.port());
    ASSERT_GE(fd, 0);
    send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: t\r\n");
    slow.push_back(fd);
  }
  for (int i = 0; i < num_idle; ++i) {
    const int fd = connect_to(srv.port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  // Control requests while the slow clients drip one header byte each round.
  std::vector<double> latencies;
  const std::string completion = R"({"prompt":"hello","max_tokens":4})";
  for (int i = 0; i < 100; ++i) {
    if (i % 3 == 0)
      for (int fd : slow) send_all(fd, "X");
    const auto t = Clock::now();
    // From another loopback address: the attackers' per-address cap is not the controls'.
    const Reply r = i % 4 == 3 ? request(srv.port(), "POST", "/v1/completions", completion, "", 5000, "127.0.0.2")
                               : request(srv.port(), "GET", i % 2 ? "/health" : "/metrics", "", "", 5000, "127.0.0.2");
    latencies.push_back(seconds_since(t));
    EXPECT_EQ(r.status, 200) << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::sort(latencies.begin(), latencies.end());
  const double p99 = latencies[(latencies.size() - 1) * 99 / 100];  // the 99th of 100
  RecordProperty("control_p99_ms", std::to_string(static_cast<int>(p99 * 1000)));
  EXPECT_LT(p99, 1.0 * kTimeScale);
  EXPECT_GE(metric(srv.port(), "http_open_connections"), num_slow + num_idle);
  for (int fd : slow) ::close(fd);
  for (int fd : idle) ::close(fd);
}

TEST(Hostile, AmplificationIsCappedAndMemoryComesBack) {
  ServeProcess srv(model(), {"--http-threads", "8"});
  // Warm up with the same shape but a small body, so the baseline includes
  // the KV blocks and buffers that 128 choices touch anyway.
  json warm = {{"prompt", "hi"}, {"n", 128}, {"max_tokens", 4}};
  ASSERT_EQ(request(srv.port(), "POST", "/v1/completions", warm.dump()).status, 200);
  const int64_t rss0 = srv.status_kb("VmRSS:");
  // The reported attack: n=128 with 16 stop strings of 400 KB (6.4 MB).
  json attack = {{"prompt", "hi"}, {"n", 128}, {"max_tokens", 4}};
  attack["stop"] = std::vector<std::string>(16, std::string(400 << 10, 's'));
  Reply r = request(srv.port(), "POST", "/v1/completions", attack.dump());
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 200);
  json ids = {{"prompt", "hi"}, {"n", 64}, {"max_tokens", 4}};
  ids["stop_token_ids"] = std::vector<int>(1500000, 5);
  r = request(srv.port(), "POST", "/v1/completions", ids.dump());
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 200);
  // The largest accepted shape: n=128, 16 KiB of stops, a ~6 MB body; three at once.
  json big = {{"prompt", "hi"}, {"n", 128}, {"max_tokens", 4}, {"user", std::string(6 << 20, 'u')}};
  big["stop"] = std::vector<std::string>(16, std::string(1 << 10, 's'));
  const std::string body = big.dump();
  std::vector<std::thread> ts;
  std::vector<int> statuses(3, 0);
  for (int i = 0; i < 3; ++i)
    ts.emplace_back(
        [&, i] { statuses[static_cast<size_t>(i)] = request(srv.port(), "POST", "/v1/completions", body).status; });
  int64_t peak = 0;
  for (int i = 0; i < 100 && peak >= 0; ++i) {
    peak = std::max(peak, srv.status_kb("VmRSS:"));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& t : ts) t.join();
  for (int s : statuses) EXPECT_EQ(s, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int64_t rss1 = srv.status_kb("VmRSS:");
  RecordProperty("rss_before_kb", std::to_string(rss0));
  RecordProperty("rss_peak_kb", std::to_string(peak));
  RecordProperty("rss_after_kb", std::to_string(rss1));
  if (kSanitized) GTEST_SKIP() << "RSS is not meaningful under a sanitizer (shadow memory, ASan's quarantine)";
  EXPECT_LT(peak - rss0, 400 << 10) << "peak RSS grew by " << (peak - rss0) / 1024 << " MiB";
  EXPECT_LT(rss1 - rss0, 64 << 10) << "RSS kept " << (rss1 - rss0) / 1024 << " MiB after the requests";
}

TEST(Hostile, ChunkedAndMixedLengthBodies) {
  ServeProcess srv(model(), {});
  const int64_t rss0 = srv.status_kb("VmRSS:");
  // 1 GiB chunked upload: refused (413) while reading, nothing buffered whole.
  const int fd = connect_to(srv.port());
  send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string chunk = "100000\r\n" + std::string(1 << 20, 'a') + "\r\n";
  std::string got;
  size_t sent = 0;
  for (int i = 0; i < 1024 && got.empty(); ++i) {
    if (!send_all(fd, chunk)) break;
    sent += chunk.size();
    got = read_until(
        fd, [](const std::string& b) { return !b.empty(); }, 1);
  }
  got += read_until(fd, whole_response, 3000);
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got.substr(0, 100);
  EXPECT_LT(sent, size_t{64} << 20);
  if (!kSanitized) {
    EXPECT_LT(srv.status_kb("VmRSS:") - rss0, 64 << 10);
  }
  // Content-Length and chunked together; conflicting lengths.
  for (const std::string& raw :
       {std::string(
            "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
            "0\r\n\r\n"),
        std::string("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}")}) {
    const int c = connect_to(srv.port());
    send_all(c, raw);
    const std::string reply = read_until(c, whole_response, 3000);
    EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply.substr(0, 200);
    ::close(c);
  }
  EXPECT_EQ(request(srv.port(), "GET", "/health").status, 200);
}

TEST(Hostile, DisconnectedNonStreamingRequestsStop) {
  ServeProcess srv(model(), {});
  const double aborted0 = metric(srv.port(), "request_success_total", "abort");
  // 16 choices of up to the context each: far more than the time the
  // requests need to arrive (a fast machine finished n = 4 before its client left).
  const json req = {{"prompt", "hello"}, {"n", 16}, {"max_tokens", 1000}, {"ignore_eos", true}};
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    const int fd = connect_to(srv.port());
    const std::string body = req.dump();
    send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body);
    fds.push_back(fd);
  }
  // Close as soon as all four run, forked (none can have finished yet).
  const auto t0 = Clock::now();
  while (seconds_since(t0) < 5 * kTimeScale && metric(srv.port(), "num_requests_running") < 4 * 16)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (int fd : fds) ::close(fd);
  const auto t = Clock::now();
  double running = 1;
  while (seconds_since(t) < 5 * kTimeScale && (running = metric(srv.port(), "num_requests_running")) > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(running, 0);
  RecordProperty("abort_seconds", std::to_string(seconds_since(t)));
  EXPECT_LT(seconds_since(t), 1.0 * kTimeScale);
  EXPECT_EQ(metric(srv.port(), "request_success_total", "abort") - aborted0, 4);
  EXPECT_EQ(metric(srv.port(), "client_disconnects_total"), 4);
  // Nothing generated for nobody afterwards: the step counter stands still.
  const double steps = metric(srv.port(), "engine_steps_total");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(metric(srv.port(), "engine_steps_total"), steps);
  EXPECT_LT(metric(srv.port(), "generation_tokens_total"), 4 * 16 * 1000);
}

TEST(Hostile, ShutdownIsBoundedWithDrippingAndNonReadingClients) {
  ServeProcess srv(model(), {"--shutdown-grace-s", "2"});
  const int drip = connect_to(srv.port());
  send_all(drip, "POST /v1/completions HTTP/1.1\r\nHost: t\r\n");
  // A stream whose client never reads.
  const json req = {{"prompt", "hello"}, {"n", 8}, {"max_tokens", 1000}, {"ignore_eos", true}, {"stream", true}};
  const std::string body = req.dump();
  const int lazy = connect_to(srv.port());
  const int small = 4096;
  ::setsockopt(lazy, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  send_all(lazy, "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\n\r\n" + body);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (int i = 0; i < 3; ++i) send_all(drip, "X");
  const auto t = Clock::now();
  ::kill(srv.pid(), SIGTERM);
  const auto status = srv.wait_exit(8 * kTimeScale);
  ASSERT_TRUE(status.has_value()) << "still running after SIGTERM";
  RecordProperty("exit_seconds", std::to_string(seconds_since(t)));
  EXPECT_LT(seconds_since(t), 4.0 * kTimeScale);
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  ::close(drip);
  ::close(lazy);
}

TEST(Hostile, KeepAliveRequestsAreNotDelayed) {
  ServeProcess srv(model(), {});
  const int fd = connect_to(srv.port());
  std::vector<double> ms;
  for (int i = 0; i < 21; ++i) {
    const auto t = Clock::now();
    ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
    const std::string got = read_until(fd, whole_response, 3000);
    ASSERT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
    if (i > 0) ms.push_back(seconds_since(t) * 1000);
  }
  std::sort(ms.begin(), ms.end());
  RecordProperty("keepalive_median_ms", std::to_string(ms[ms.size() / 2]));
  EXPECT_LT(ms[ms.size() / 2], 5.0 * kTimeScale);  // Nagle + delayed ACK would be ~40 ms
  // The same over one keep-alive connection for a POST with a body.
  const std::string body = R"({"prompt":"hi"})";
  const std::string post =
      "POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  std::vector<double> post_ms;
  for (int i = 0; i < 11; ++i) {
    const auto t = Clock::now();
    ASSERT_TRUE(send_all(fd, post));
    ASSERT_EQ(read_until(fd, whole_response, 3000).rfind("HTTP/1.1 200", 0), 0u);
    if (i > 0) post_ms.push_back(seconds_since(t) * 1000);
  }
  std::sort(post_ms.begin(), post_ms.end());
  EXPECT_LT(post_ms[post_ms.size() / 2], 20.0 * kTimeScale);
  ::close(fd);
}

TEST(Hostile, PipelinedRequestsAreAllAnswered) {
  ServeProcess srv(model(), {});
  const int fd = connect_to(srv.port());
  const std::string body = R"({"prompt":"hi"})";
  const std::string tok =
      "POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n" + tok +
                               "GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n" + tok +
                               "GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  bool eof = false;
  const std::string got = read_until(
      fd, [](const std::string&) { return false; }, 5000, &eof);
  EXPECT_TRUE(eof);
  size_t n = 0;
  for (size_t p = got.find("HTTP/1.1 200"); p != std::string::npos; p = got.find("HTTP/1.1 200", p + 1)) ++n;
  EXPECT_EQ(n, 5u) << got;
  ::close(fd);
}

TEST(Hostile, KeyProtectsEveryRouteButHealth) {
  ServeProcess srv(model(), {"--api-key", "sk-test"});
  EXPECT_EQ(request(srv.port(), "GET", "/health").status, 200);
  EXPECT_EQ(request(srv.port(), "POST", "/tokenize", R"({"prompt":"x"})").status, 401);
  EXPECT_EQ(request(srv.port(), "POST", "/detokenize", R"({"tokens":[1]})").status, 401);
  EXPECT_EQ(request(srv.port(), "GET", "/v1/models").status, 401);
  EXPECT_EQ(request(srv.port(), "POST", "/tokenize", R"({"prompt":"x"})", "Authorization: Bearer sk-test\r\n").status,
            200);
  EXPECT_EQ(request(srv.port(), "GET", "/metrics").status, 200);
  ServeProcess locked(model(), {"--api-key", "sk-test", "--metrics-require-key"});
  EXPECT_EQ(request(locked.port(), "GET", "/metrics").status, 401);
  EXPECT_EQ(request(locked.port(), "GET", "/metrics", "", "Authorization: Bearer sk-test\r\n").status, 200);
}

TEST(Hostile, BadModelPathsFailCleanly) {
  const auto dir = std::filesystem::temp_directory_path() / ("pagoda_hostile_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "fifo.gguf").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string half = (dir / "half.gguf").string();
  std::filesystem::copy_file(model(), half);
  std::filesystem::resize_file(half, std::filesystem::file_size(half) / 2);
  const std::string noperm = (dir / "noperm.gguf").string();
  std::filesystem::copy_file(model(), noperm);
  ::chmod(noperm.c_str(), 0);
  struct Case {
    std::string path;
    std::string message;
  };
  std::vector<Case> cases = {{fifo, "not a regular file"},
                             {dir.string(), "Is a directory"},
                             {half, half},
                             {(dir / "missing.gguf").string(), "No such file"}};
  if (::geteuid() != 0) cases.push_back({noperm, "Permission denied"});  // root reads anything
  for (const Case& c : cases) {
    ServeProcess srv(c.path, {}, /*expect_listen=*/false);
    const auto status = srv.wait_exit(10);
    ASSERT_TRUE(status.has_value()) << c.path << " hangs";
    EXPECT_TRUE(WIFEXITED(*status)) << c.path;
    EXPECT_NE(WEXITSTATUS(*status), 0) << c.path;
    EXPECT_NE(srv.stderr_text().find(c.message), std::string::npos) << srv.stderr_text();
  }
  std::filesystem::remove_all(dir);
}

TEST(Hostile, ModelFileTruncatedWhileServingExitsWithAMessage) {
  const auto path = std::filesystem::temp_directory_path() / ("pagoda_trunc_" + std::to_string(::getpid()) + ".gguf");
  std::filesystem::copy_file(model(), path, std::filesystem::copy_options::overwrite_existing);
  ServeProcess srv(path.string(), {});
  ASSERT_EQ(request(srv.port(), "POST", "/v1/completions", R"({"prompt":"hi","max_tokens":2})").status, 200);
  std::filesystem::resize_file(path, 4096);
  // The next read of a dropped page faults; the guard turns that into a clean exit.
  for (int i = 0; i < 20 && srv.running(); ++i)
    request(srv.port(), "POST", "/v1/completions", R"({"prompt":"hello again","max_tokens":8})", "", 2000);
  const auto status = srv.wait_exit(10);
  std::filesystem::remove(path);
  if (!status.has_value()) GTEST_SKIP() << "no page of the file was touched after truncation (all weights copied)";
  EXPECT_TRUE(WIFEXITED(*status)) << "killed by signal " << (WIFSIGNALED(*status) ? WTERMSIG(*status) : 0);
  EXPECT_EQ(WEXITSTATUS(*status), 70);
  EXPECT_NE(srv.stderr_text().find("truncated or replaced while in use"), std::string::npos) << srv.stderr_text();
}

}  // namespace
}  // namespace pagoda::hostile
