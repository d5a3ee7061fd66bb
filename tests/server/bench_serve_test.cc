// `pagoda bench serve`'s library (src/bench_client/) against the real server
// on a loopback port: every workload, metrics that add up, JSON output,
// goodput under SLOs, and clear errors for a bad URL, key or model.
#include "bench_client/bench_serve.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "server_test_util.h"

namespace pagoda::server::testing {
namespace {

using bench::BenchServeConfig;
using bench::RequestRecord;
using nlohmann::json;

BenchServeConfig base_config(const TestServer& s, uint64_t seed) {
  BenchServeConfig cfg;
  cfg.base_url = "http://127.0.0.1:" + std::to_string(s.port());
  cfg.workload.num_prompts = 10;
  cfg.workload.input_len = 12;
  cfg.workload.output_len = 6;
  cfg.workload.range_ratio = 0.5;
  cfg.workload.seed = seed;
  cfg.concurrency = 4;
  cfg.ignore_eos = true;
  cfg.timeout_s = 30;
  return cfg;
}

// Per-request invariants every successful run must satisfy.
void expect_sane(const bench::BenchServeResult& res) {
  int64_t out_tokens = 0;
  for (const RequestRecord& r : res.records) {
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_GT(r.ttft_s, 0);
    EXPECT_LE(r.ttft_s, r.e2e_s);
    EXPECT_EQ(r.output_tokens, r.max_tokens) << "ignore_eos runs every request to max_tokens";
    EXPECT_LE(r.itl_s.size() + 1, static_cast<size_t>(r.output_tokens));
    double itl_sum = 0;
    for (double x : r.itl_s) itl_sum += x;
    EXPECT_LE(r.ttft_s + itl_sum, r.e2e_s + 1e-9);
    EXPECT_GT(r.prompt_tokens, 0);
    EXPECT_GE(r.tpot_s(), 0);
    out_tokens += r.output_tokens;
  }
  const bench::BenchReport& rep = res.report;
  EXPECT_EQ(rep.completed, static_cast<int32_t>(res.records.size()));
  EXPECT_EQ(rep.failed, 0);
  EXPECT_EQ(rep.total_output_tokens, out_tokens);
  EXPECT_GT(rep.duration_s, 0);
  EXPECT_NEAR(rep.request_throughput, rep.completed / rep.duration_s, 1e-9);
  EXPECT_NEAR(rep.output_throughput, out_tokens / rep.duration_s, 1e-6);
  for (const bench::Percentiles& p : {rep.ttft, rep.tpot, rep.itl, rep.e2e}) {
    EXPECT_LE(p.p50, p.p90);
    EXPECT_LE(p.p90, p.p99);
    EXPECT_LE(p.p99, p.max);
    EXPECT_LE(p.mean, p.max);
    EXPECT_GT(p.mean, 0);
  }
  EXPECT_LE(rep.ttft.max, rep.e2e.max);
}

TEST(BenchServe, RandomCompletionsAllSucceedAndJsonIsWritten) {
  const uint64_t seed = 11;
  SCOPED_TRACE("seed " + std::to_string(seed));
  TestServer s;
  BenchServeConfig cfg = base_config(s, seed);
  auto res = bench::run_bench_serve(cfg);
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  EXPECT_EQ(res->model, "tiny");  // from GET /v1/models
  ASSERT_EQ(res->records.size(), 10u);
  expect_sane(*res);
  // range_ratio 0.5 around 6: lengths in [3, 9], and not all equal.
  int32_t lo = 1 << 30, hi = 0;
  for (const RequestRecord& r : res->records) lo = std::min(lo, r.max_tokens), hi = std::max(hi, r.max_tokens);
  EXPECT_GE(lo, 3);
  EXPECT_LE(hi, 9);
  EXPECT_LT(lo, hi);

  const auto path = std::filesystem::temp_directory_path() / ("pagoda_bench_" + std::to_string(::getpid()) + ".json");
  { std::ofstream(path) << bench::bench_json(cfg, *res).dump(2); }
  std::ifstream in(path);
  const json j = json::parse(in);
  std::filesystem::remove(path);
  EXPECT_EQ(j["config"]["dataset"], "random");
  EXPECT_EQ(j["metrics"]["completed"], 10);
  EXPECT_EQ(j["metrics"]["total_output_tokens"], res->report.total_output_tokens);
  ASSERT_EQ(j["requests"].size(), 10u);
  EXPECT_EQ(j["requests"][3]["output_tokens"], res->records[3].output_tokens);
  EXPECT_TRUE(j["metrics"]["ttft_ms"].contains("p99"));
  const std::string text = bench::format_report(res->report, "t");
  EXPECT_NE(text.find("Successful requests:"), std::string::npos) << text;
  EXPECT_NE(text.find("P99 TPOT (ms):"), std::string::npos) << text;
}

TEST(BenchServe, SharedPrefixChatWithPoissonArrivals) {
  TestServer s;
  BenchServeConfig cfg = base_config(s, 5);
  cfg.endpoint = bench::Endpoint::kChat;
  cfg.workload.dataset = bench::Dataset::kSharedPrefix;
  cfg.workload.prefix_len = 40;
  cfg.concurrency = 0;
  cfg.request_rate = 100;
  auto res = bench::run_bench_serve(cfg);
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  expect_sane(*res);
  for (const RequestRecord& r : res->records) EXPECT_GT(r.prompt_tokens, 40) << "the shared prefix is sent";
  // Poisson arrivals: requests start spread out, not all at once.
  EXPECT_GT(res->records.back().start_s - res->records.front().start_s, 0.01);
}

TEST(BenchServe, MultiTurnSendsTheHistory) {
  TestServer s;
  BenchServeConfig cfg = base_config(s, 9);
  cfg.endpoint = bench::Endpoint::kChat;
  cfg.workload.dataset = bench::Dataset::kMultiTurn;
  cfg.workload.num_prompts = 3;
  cfg.workload.turns = 3;
  auto res = bench::run_bench_serve(cfg);
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  ASSERT_EQ(res->records.size(), 9u);
  expect_sane(*res);
  for (size_t i = 0; i < res->records.size(); ++i) {
    const RequestRecord& r = res->records[i];
    EXPECT_EQ(r.conversation, static_cast<int32_t>(i / 3));
    EXPECT_EQ(r.turn, static_cast<int32_t>(i % 3));
    if (r.turn == 0) continue;
    const RequestRecord& prev = res->records[i - 1];
    // This turn's prompt holds the previous prompt and answer.
    EXPECT_GT(r.prompt_tokens, prev.prompt_tokens + prev.output_tokens / 2);
    EXPECT_GE(r.start_s, prev.start_s + prev.e2e_s - 1e-6) << "turns are sequential";
  }
}

TEST(BenchServe, MultiTurnNeedsChat) {
  BenchServeConfig cfg;
  cfg.workload.dataset = bench::Dataset::kMultiTurn;
  const Status st = bench::validate(cfg);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("--endpoint chat"), std::string::npos) << st.message();
}

TEST(BenchServe, GoodputFollowsTheSlo) {
  TestServer s;
  BenchServeConfig cfg = base_config(s, 3);
  cfg.slo.ttft_ms = 1e-6;  // impossible
  auto res = bench::run_bench_serve(cfg);
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  EXPECT_EQ(res->report.completed, 10);
  EXPECT_TRUE(res->report.has_slo);
  EXPECT_EQ(res->report.good_requests, 0);
  EXPECT_EQ(res->report.goodput, 0);

  // Recomputed on the same records: generous limits pass all, a TPOT limit
  // between the fastest and slowest request passes some.
  const double duration = res->report.duration_s;
  auto loose = bench::summarize(res->records, duration, bench::Slo{1e9, 1e9});
  EXPECT_EQ(loose.good_requests, 10);
  EXPECT_NEAR(loose.goodput, 10 / duration, 1e-9);
  std::vector<double> tpots;
  for (const RequestRecord& r : res->records) tpots.push_back(r.tpot_s() * 1000);
  std::sort(tpots.begin(), tpots.end());
  if (tpots.front() < tpots.back()) {
    auto mid = bench::summarize(res->records, duration, bench::Slo{0, tpots.front()});
    EXPECT_GE(mid.good_requests, 1);
    EXPECT_LT(mid.good_requests, 10);
  }
}

TEST(BenchServe, BadUrlKeyOrModelGiveClearErrors) {
  BenchServeConfig cfg;
  cfg.base_url = "127.0.0.1:8080";
  Status st = bench::validate(cfg);
  EXPECT_NE(st.message().find("http://host:port"), std::string::npos) << st.message();
  cfg.base_url = "ftp://127.0.0.1";
  EXPECT_FALSE(bench::run_bench_serve(cfg).is_ok());

  // Nothing listens on port 1.
  cfg.base_url = "http://127.0.0.1:1";
  auto res = bench::run_bench_serve(cfg);
  ASSERT_FALSE(res.is_ok());
  EXPECT_NE(res.status().message().find("cannot reach http://127.0.0.1:1/v1/models"), std::string::npos)
      << res.status().message();
  // With --model the run starts, and every request fails with the reason.
  cfg.model = "m";
  cfg.workload.num_prompts = 3;
  cfg.timeout_s = 5;
  res = bench::run_bench_serve(cfg);
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  EXPECT_EQ(res->report.failed, 3);
  EXPECT_EQ(res->report.completed, 0);
  EXPECT_NE(res->report.first_error.find("cannot reach"), std::string::npos) << res->report.first_error;

  TestServerOptions o;
  o.api_key = "sk-bench";
  TestServer s(o);
  BenchServeConfig good = base_config(s, 1);
  good.workload.num_prompts = 2;
  good.api_key = "wrong";
  res = bench::run_bench_serve(good);
  ASSERT_FALSE(res.is_ok());
  EXPECT_NE(res.status().message().find("HTTP 401"), std::string::npos) << res.status().message();
  good.api_key = "sk-bench";
  good.base_url += "/v1/";  // OpenAI-SDK style
  res = bench::run_bench_serve(good);
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  EXPECT_EQ(res->report.completed, 2);
  good.model = "not-served";
  res = bench::run_bench_serve(good);
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  EXPECT_EQ(res->report.failed, 2);
  EXPECT_NE(res->report.first_error.find("HTTP 404"), std::string::npos) << res->report.first_error;
}

TEST(BenchStats, PercentilesInterpolate) {
  const auto p = bench::percentiles_ms({0.004, 0.001, 0.003, 0.002});
  EXPECT_NEAR(p.mean, 2.5, 1e-9);
  EXPECT_NEAR(p.p50, 2.5, 1e-9);
  EXPECT_NEAR(p.p90, 3.7, 1e-9);
  EXPECT_NEAR(p.p99, 3.97, 1e-9);
  EXPECT_NEAR(p.max, 4.0, 1e-9);
  EXPECT_EQ(bench::percentiles_ms({}).p99, 0);
}

TEST(BenchStats, BaseUrlForms) {
  auto u = bench::parse_base_url("http://localhost:8000/v1/");
  ASSERT_TRUE(u.is_ok());
  EXPECT_EQ(u->scheme_host_port, "http://localhost:8000");
  EXPECT_EQ(u->path_prefix, "");
  u = bench::parse_base_url("https://example.com/proxy/v1");
  ASSERT_TRUE(u.is_ok());
  EXPECT_EQ(u->path_prefix, "/proxy");
  EXPECT_FALSE(bench::parse_base_url("http://").is_ok());
}

TEST(BenchWorkload, DeterministicAndWithinRange) {
  for (uint64_t seed : {1ull, 2ull, 77ull}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    bench::WorkloadConfig w;
    w.num_prompts = 37;
    w.input_len = 50;
    w.output_len = 7;
    w.range_ratio = 0.3;
    w.seed = seed;
    const auto a = bench::make_workload(w), b = bench::make_workload(w);
    ASSERT_EQ(a.size(), 37u);
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].turns.size(), 1u);
      EXPECT_EQ(a[i].turns[0].user, b[i].turns[0].user);
      const bench::Turn& t = a[i].turns[0];
      EXPECT_GE(t.input_words, 35);
      EXPECT_LE(t.input_words, 65);
      EXPECT_EQ(static_cast<int32_t>(std::count(t.user.begin(), t.user.end(), ' ')) + 1, t.input_words);
      EXPECT_GE(t.output_len, 4);
      EXPECT_LE(t.output_len, 10);
    }
    w.dataset = bench::Dataset::kSharedPrefix;
    w.prefix_len = 9;
    const auto c = bench::make_workload(w);
    EXPECT_EQ(c[0].system, c[36].system);
    EXPECT_EQ(static_cast<int32_t>(std::count(c[0].system.begin(), c[0].system.end(), ' ')) + 1, 9);
  }
}

}  // namespace
}  // namespace pagoda::server::testing
