// Prefill/decode disaggregation end to end, in one process: a prefill
// instance, decode instances and `pagoda router` on loopback ports. Greedy
// outputs through the router equal a single server's, with 16 concurrent
// streaming requests of which some clients vanish mid-stream; no KV block
// leaks on either side; the decode instance really used the transferred
// blocks (tier hits); a lost decode instance is routed around and a lost
// prefill instance gives clear errors, never a hang; transfers between
// mismatched instances are refused.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "kv/kv_tiers.h"
#include "router/router.h"
#include "server_test_util.h"

namespace pagoda::server::testing {
namespace {

using nlohmann::json;

struct TestRouter {
  explicit TestRouter(std::vector<int> prefill_ports, std::vector<int> decode_ports) {
    router::RouterConfig rc;
    rc.port = 0;
    for (int p : prefill_ports) rc.prefill.push_back("http://127.0.0.1:" + std::to_string(p));
    for (int p : decode_ports) rc.decode.push_back("http://127.0.0.1:" + std::to_string(p));
    rc.down_for_s = 60;
    auto r = router::Router::create(rc);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    router = std::move(r).value();
    port = router->bind().value();
    thread = std::thread([this] { router->listen(); });
  }
  ~TestRouter() {
    router->stop();
    thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  }
  std::unique_ptr<router::Router> router;
  std::thread thread;
  int port = 0;
};

std::string prompt_of(int i) {
  // Shared beginnings (prefix affinity and caching), different endings.
  std::string p = i % 2 ? "The same long system prompt about foxes and hills and trees. " : "Once upon a time, ";
  for (int k = 0; k < 3 + i % 5; ++k) p += "line " + std::to_string(i * 7 + k) + " of the story. ";
  return p;
}

std::string body_of(int i, bool stream) {
  return json{
      {"prompt", prompt_of(i)}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}, {"stream", stream}}
      .dump();
}

std::string stream_text(const std::string& sse) {
  bool done = false;
  std::string text;
  for (const json& e : sse_events(sse, &done)) text += e["choices"][0]["text"].get<std::string>();
  return done ? text : "<unfinished>";
}

TEST(Disaggregation, RouterOutputsEqualASingleServerAndNothingLeaks) {
  std::vector<std::string> want(16);
  {
    TestServer single;
    auto c = single.client();
    for (int i = 0; i < 16; ++i) {
      auto r = post_json(c, "/v1/completions", body_of(i, false));
      ASSERT_EQ(r->status, 200) << r->body;
      want[i] = body_json(r)["choices"][0]["text"];
    }
  }
  TestServerOptions po, dopt;
  po.role = "prefill";
  dopt.role = "decode";
  TestServer prefill(po), decode(dopt);
  TestRouter router({prefill.port()}, {decode.port()});
  std::vector<std::string> got(16);
  std::vector<bool> vanished(16, false);
  std::mt19937 rng(3);
  for (int i = 0; i < 16; ++i) vanished[i] = rng() % 4 == 0;
  std::vector<std::thread> clients;
  for (int i = 0; i < 16; ++i)
    clients.emplace_back([&, i] {
      if (vanished[i]) {  // read the first event, then vanish
        const int fd = connect_raw(router.port);
        const std::string body = body_of(i, true);
        const std::string req =
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: " +
            std::to_string(body.size()) + "\r\n\r\n" + body;
        ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
        std::string seen;
        char buf[512];
        while (seen.find("data: ") == std::string::npos) {
          const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
          if (n <= 0) break;
          seen.append(buf, static_cast<size_t>(n));
        }
        ::close(fd);
        return;
      }
      auto c = router.client();
      std::string sse;
      httplib::Headers h;
      auto r = c.Post("/v1/completions", h, body_of(i, true), "application/json");
      if (r && r->status == 200) got[i] = stream_text(r->body);
    });
  for (auto& t : clients) t.join();
  for (int i = 0; i < 16; ++i)
    if (!vanished[i]) {
      EXPECT_EQ(got[i], want[i]) << "request " << i;
    }
  EXPECT_TRUE(wait_idle_and_free(prefill)) << metrics_text(prefill);
  EXPECT_TRUE(wait_idle_and_free(decode)) << metrics_text(decode);
  const std::string dm = metrics_text(decode);
  EXPECT_GT(metric(dm, "pagoda:kv_host_hits"), 0) << dm;  // the prompts' blocks came from the prefill instance
  auto c = router.client();
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("pagoda_router:requests_total 16"), std::string::npos) << m->body;
}

TEST(Disaggregation, LostInstancesGiveErrorsNotHangs) {
  TestServerOptions po, dopt;
  po.role = "prefill";
  dopt.role = "decode";
  auto prefill = std::make_unique<TestServer>(po);
  auto d1 = std::make_unique<TestServer>(dopt);
  TestServer d2(dopt);
  TestRouter router({prefill->port()}, {d1->port(), d2.port()});
  auto c = router.client();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post_json(c, "/v1/completions", body_of(i, false))->status, 200);
  d1.reset();  // a decode instance is lost: the router goes to the other one
  for (int i = 0; i < 6; ++i) {
    auto r = post_json(c, "/v1/completions", body_of(i, i % 2 == 0));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  prefill.reset();  // the only prefill instance is lost: clear errors, quickly
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    auto r = post_json(c, "/v1/completions", body_of(i, false));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503) << r->body;
    EXPECT_NE(r->body.find("no prefill or decode instance is reachable"), std::string::npos) << r->body;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  EXPECT_TRUE(wait_idle_and_free(d2)) << metrics_text(d2);
}

// A decode instance killed (SIGKILL) while streams run on it: those
// streams end with an error event, the others finish, and later requests
// go to the surviving instance.
TEST(Disaggregation, DecodeInstanceKilledMidStream) {
  if (::access(PAGODA_BINARY, X_OK) != 0)
    GTEST_SKIP() << PAGODA_BINARY << " is not built (the TSan job builds tests only)";
  const std::string model = std::string(PAGODA_SOURCE_DIR) + "/models/pagoda-small.gguf";
  TestServerOptions po, dopt;
  po.role = "prefill";
  po.model = dopt.model = model;
  po.kv_bytes = dopt.kv_bytes = 64 << 20;
  dopt.role = "decode";
  TestServer prefill(po), survivor(dopt);
  const int port = 21000 + static_cast<int>(::getpid() % 20000);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl(PAGODA_BINARY, PAGODA_BINARY, "serve", "-m", model.c_str(), "--role", "decode", "-t", "1", "--port",
            std::to_string(port).c_str(), "--kv-cache-mem", "64", "--block-size", "4",  // the TestServers' layout
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  struct Reap {  // the child never outlives a failed assertion
    pid_t pid;
    ~Reap() {
      if (::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
  } reap{pid};
  bool up = false;
  for (int i = 0; i < 300 && !up; ++i) {
    httplib::Client h("127.0.0.1", port);
    auto r = h.Get("/health");
    up = r && r->status == 200;
    if (!up) ::usleep(100 * 1000);
  }
  ASSERT_TRUE(up);
  TestRouter router({prefill.port()}, {port, survivor.port()});
  constexpr int kStreams = 6;
  std::atomic<int> started{0};
  std::vector<std::string> bodies(kStreams);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i)
    clients.emplace_back([&, i] {
      auto c = router.client();
      bool counted = false;
      const std::string body = json{
          {"prompt", "Story number " + std::to_string(i) + ": once upon a time"},
          {"max_tokens", 1500},
          {"ignore_eos", true},
          {"stream", true}}.dump();
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = body;
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [&, i](const char* data, size_t n, uint64_t, uint64_t) {
        bodies[i].append(data, n);
        if (!counted && bodies[i].find("data: ") != std::string::npos) {
          counted = true;
          ++started;
        }
        return true;
      };
      httplib::Response res;
      httplib::Error err = httplib::Error::Success;
      c.send(req, res, err);
    });
  for (int i = 0; i < 1500 && started.load() < kStreams; ++i) ::usleep(20 * 1000);
  EXPECT_EQ(started.load(), kStreams);
  ::kill(pid, SIGKILL);
  for (auto& t : clients) t.join();
  int errored = 0, finished = 0;
  for (const std::string& b : bodies) {
    if (b.find("decode_unavailable") != std::string::npos) ++errored;
    if (b.find("data: [DONE]") != std::string::npos) ++finished;
  }
  EXPECT_GT(errored, 0) << "no stream ran on the killed instance";
  EXPECT_GT(finished, 0) << "no stream ran on the surviving instance";
  EXPECT_EQ(errored + finished, kStreams);
  auto c = router.client();
  for (int i = 0; i < 3; ++i) {
    auto r = post_json(c, "/v1/completions", body_of(i, false));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  EXPECT_TRUE(wait_idle_and_free(survivor)) << metrics_text(survivor);
  EXPECT_TRUE(wait_idle_and_free(prefill)) << metrics_text(prefill);
}

TEST(Disaggregation, MismatchedOrMalformedTransfersAreRefused) {
  TestServerOptions plain, dopt;
  dopt.role = "decode";
  TestServer not_prefill(plain), decode(dopt);
  auto c = decode.client();
  // The named instance is no prefill instance: 502 with its reason.
  auto r = post_json(c, "/v1/completions", body_of(1, false),
                     {{"X-Pagoda-Prefill", "http://127.0.0.1:" + std::to_string(not_prefill.port())}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502) << r->body;
  EXPECT_NE(r->body.find("not --role prefill"), std::string::npos) << r->body;
  // Nobody listens there.
  r = post_json(c, "/v1/completions", body_of(1, false), {{"X-Pagoda-Prefill", "http://127.0.0.1:1"}});
  EXPECT_EQ(r->status, 502) << r->body;
  EXPECT_NE(r->body.find("unreachable"), std::string::npos) << r->body;
  // The header on an instance without --role decode.
  auto pc = not_prefill.client();
  r = post_json(pc, "/v1/completions", body_of(1, false), {{"X-Pagoda-Prefill", "http://127.0.0.1:1"}});
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_TRUE(wait_idle_and_free(decode));
  // The wire format rejects what does not add up.
  KVBlockExport e;
  e.block_size = 4;
  e.payload_bytes = 8;
  e.blocks.push_back({BlockKey{1, 2}, {1, 2, 3, 4}, std::vector<uint8_t>(8, 7)});
  const std::string bytes = encode_kv_export(e);
  auto back = decode_kv_export(bytes);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->blocks[0].payload, e.blocks[0].payload);
  for (size_t cut = 0; cut < bytes.size(); ++cut) EXPECT_FALSE(decode_kv_export(bytes.substr(0, cut)).is_ok());
  EXPECT_FALSE(decode_kv_export(bytes + "x").is_ok());
}

}  // namespace
}  // namespace pagoda::server::testing
