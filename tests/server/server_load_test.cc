// Faults and load: client disconnect aborts (KV blocks freed), queue
// overflow gets 429 + Retry-After, and 200 requests at concurrency 32 all
// succeed without leaking KV blocks or memory.
#include <atomic>
#include <random>

#include "../build_kind.h"
#include "server_test_util.h"

namespace pagoda::server::testing {
namespace {

using nlohmann::json;

// RSS says nothing about leaks under ASan (freed memory waits in quarantine)
// or TSan; ASan's leak checker covers them there.
constexpr bool kRssMeansLeaks = !testing_util::kSanitized;

TEST(ServerFaults, ClientDisconnectMidStreamAbortsRequest) {
  TestServer s;
  const int fd = connect_raw(s.port());
  ASSERT_GE(fd, 0);
  const std::string body = R"({"prompt":"Once upon a time","max_tokens":1000,"ignore_eos":true,"stream":true})";
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  while (got.find("data: ") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);  // vanish mid-stream
  ASSERT_TRUE(wait_idle_and_free(s)) << metrics_text(s);
  const std::string m = metrics_text(s);
  // The request ended by abort, not by running to its length.
  EXPECT_NE(m.find("finished_reason=\"abort\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("finished_reason=\"length\"} 0\n"), std::string::npos) << m;
}

TEST(ServerFaults, FullQueueGets429WithRetryAfter) {
  TestServerOptions o;
  o.max_queue = 1;
  o.max_num_seqs = 1;
  TestServer s(o);
  std::atomic<int> ok{0}, too_many{0}, other{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto c = s.client();
      auto r = post_json(c, "/v1/completions", R"({"prompt":"queue me","max_tokens":300,"ignore_eos":true})");
      if (r && r->status == 200) {
        ++ok;
      } else if (r && r->status == 429 && !r->get_header_value("Retry-After").empty() &&
                 json::parse(r->body)["error"]["type"] == "rate_limit_error") {
        ++too_many;
      } else {
        ++other;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(ok.load(), 1);
  EXPECT_GE(too_many.load(), 1);
  EXPECT_EQ(other.load(), 0);
  EXPECT_TRUE(wait_idle_and_free(s));
}

// One round: `total` requests over `concurrency` client threads, a mix of
// completions / chat, streamed or not. Returns the number that succeeded.
int run_round(const TestServer& s, int total, int concurrency, uint32_t seed) {
  std::atomic<int> next{0}, good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(seed + static_cast<uint32_t>(t));
      auto c = s.client(60);
      for (int i = next++; i < total; i = next++) {
        const bool chat = rng() % 2, stream = rng() % 2;
        const int max_tokens = 4 + static_cast<int>(rng() % 12);
        json body = {{"max_tokens", max_tokens}, {"stream", stream}, {"temperature", 0.7}, {"seed", i}};
        if (chat) {
          body["messages"] = json::array({{{"role", "user"}, {"content", "question " + std::to_string(i)}}});
        } else {
          body["prompt"] = "prompt number " + std::to_string(i);
        }
        auto r = post_json(c, chat ? "/v1/chat/completions" : "/v1/completions", body.dump());
        if (!r || r->status != 200) {
          std::printf("request %d (chat %d stream %d) failed: %s\n", i, int(chat), int(stream),
                      r ? (std::to_string(r->status) + " " + r->body).c_str() : httplib::to_string(r.error()).c_str());
          continue;
        }
        if (stream) {
          bool done = false;
          sse_events(r->body, &done);
          if (!done) {
            std::printf("request %d: stream without [DONE]: %s\n", i, r->body.substr(0, 300).c_str());
            continue;
          }
        }
        ++good;
      }
    });
  }
  for (auto& t : threads) t.join();
  return good.load();
}

TEST(ServerLoad, TwoHundredRequestsAtConcurrency32NoLeaks) {
  TestServerOptions o;
  o.kv_bytes = 2 << 20;
  TestServer s(o);
  const uint32_t seed = 777;
  SCOPED_TRACE("seed " + std::to_string(seed));
  EXPECT_EQ(run_round(s, 200, 32, seed), 200);
  ASSERT_TRUE(wait_idle_and_free(s));
  const int64_t rss1 = rss_kib();
  EXPECT_EQ(run_round(s, 200, 32, seed + 1000), 200);
  ASSERT_TRUE(wait_idle_and_free(s));
  const int64_t rss2 = rss_kib();
  std::printf("RSS after round 1: %lld KiB, after round 2: %lld KiB\n", static_cast<long long>(rss1),
              static_cast<long long>(rss2));
  if (kRssMeansLeaks) {
    EXPECT_LT(rss2 - rss1, 16 * 1024) << "RSS grew by more than 16 MiB between identical rounds";
  }
  const std::string m = metrics_text(s);
  EXPECT_GE(metric(m, "pagoda:generation_tokens_total"), 400 * 4);
}

}  // namespace
}  // namespace pagoda::server::testing
