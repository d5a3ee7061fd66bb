#include "bench_client/bench_serve.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

namespace pagoda::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Start offsets (s) of each conversation: a Poisson process of `rate` per
// second, or all zero when the rate is infinite.
std::vector<double> arrival_times(size_t n, double rate, uint64_t seed) {
  std::vector<double> out(n, 0.0);
  if (!std::isfinite(rate)) return out;
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (double& a : out) {
    a = t;
    t += gap(rng);
  }
  return out;
}

// "[#######       ]  41/200 requests  12.3 s  failed 0" redrawn on stderr.
class ProgressBar {
 public:
  ProgressBar(bool enabled, int32_t total, const std::atomic<int32_t>& done, const std::atomic<int32_t>& failed)
      : total_(total), done_(done), failed_(failed), start_(Clock::now()) {
    if (enabled && total > 0) thread_ = std::thread([this] { loop(); });
  }
  ~ProgressBar() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    draw();
    std::fputc('\n', stderr);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_; })) draw();
  }
  void draw() const {
    constexpr int kWidth = 30;
    const int32_t done = done_.load();
    const int filled = static_cast<int>(static_cast<int64_t>(kWidth) * done / total_);
    const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
    std::fprintf(stderr, "\r[%s%s] %d/%d requests  %.1f s  failed %d", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, ' ').c_str(), done, total_, secs, failed_.load());
    std::fflush(stderr);
  }

  int32_t total_;
  const std::atomic<int32_t>& done_;
  const std::atomic<int32_t>& failed_;
  Clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

struct RunContext {
  const BenchServeConfig& cfg;
  ClientOptions client;
  std::string model;
  Clock::time_point start;
  std::atomic<int32_t> done{0};
  std::atomic<int32_t> failed{0};
};

// Sends one conversation's turns in order; `recs` has one slot per turn.
void run_conversation(RunContext& ctx, httplib::Client& http, const Conversation& conv, int32_t index,
                      RequestRecord* recs) {
  const bool chat = ctx.cfg.endpoint == Endpoint::kChat;
  json messages = json::array();
  if (chat && !conv.system.empty()) messages.push_back({{"role", "system"}, {"content", conv.system}});
  int32_t history_words = 0;
  const std::string* failed_turn = nullptr;
  for (size_t t = 0; t < conv.turns.size(); ++t) {
    const Turn& turn = conv.turns[t];
    RequestRecord& rec = recs[t];
    rec.conversation = index;
    rec.turn = static_cast<int32_t>(t);
    rec.input_words = history_words + turn.input_words;
    rec.max_tokens = turn.output_len;
    if (failed_turn) {
      rec.error = "not sent: an earlier turn of this conversation failed (" + *failed_turn + ")";
    } else {
      StreamRequest req;
      req.endpoint = ctx.cfg.endpoint;
      req.model = ctx.model;
      req.max_tokens = turn.output_len;
      req.ignore_eos = ctx.cfg.ignore_eos;
      if (chat) {
        messages.push_back({{"role", "user"}, {"content", turn.user}});
        req.messages = messages;
      } else {
        req.prompt = conv.system.empty() ? turn.user : conv.system + "\n\n" + turn.user;
      }
      run_stream_request(http, ctx.client, req, ctx.start, &rec);
      if (!rec.ok) failed_turn = &rec.error;
      if (chat) messages.push_back({{"role", "assistant"}, {"content", rec.text}});
      history_words = rec.input_words + rec.output_tokens;
    }
    if (!rec.ok) ++ctx.failed;
    ++ctx.done;
  }
}

}  // namespace

Status validate(const BenchServeConfig& cfg) {
  auto bad = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, m); };
  const WorkloadConfig& w = cfg.workload;
  if (w.num_prompts < 1) return bad("--num-prompts must be at least 1");
  if (w.input_len < 1 || w.output_len < 1) return bad("--input-len and --output-len must be at least 1");
  if (!(w.range_ratio >= 0 && w.range_ratio < 1)) return bad("--range-ratio must be in [0, 1)");
  if (w.prefix_len < 0) return bad("--prefix-len must not be negative");
  if (w.turns < 1) return bad("--turns must be at least 1");
  if (cfg.concurrency < 0 || cfg.concurrency > kMaxConcurrency)
    return bad("--concurrency must be between 1 and " + std::to_string(kMaxConcurrency));
  if (!(cfg.request_rate > 0)) return bad("--request-rate must be positive (or inf)");
  if (w.dataset == Dataset::kMultiTurn && cfg.endpoint != Endpoint::kChat)
    return bad("--dataset multi-turn needs --endpoint chat");
  if (!(cfg.slo.ttft_ms >= 0) || !(cfg.slo.tpot_ms >= 0)) return bad("SLO limits must not be negative");
  if (!(cfg.timeout_s > 0)) return bad("--timeout must be positive");
  return parse_base_url(cfg.base_url).status();
}

Result<BenchServeResult> run_bench_serve(const BenchServeConfig& cfg) {
  PAGODA_RETURN_IF_ERROR(validate(cfg));
  PAGODA_ASSIGN_OR_RETURN(BaseUrl url, parse_base_url(cfg.base_url));
  RunContext ctx{cfg, ClientOptions{url, cfg.api_key, cfg.timeout_s}, cfg.model, {}};
  if (!make_client(ctx.client)->is_valid())
    return Status(StatusCode::kInvalidArgument, "invalid --base-url " + cfg.base_url);
  if (ctx.model.empty()) {
    PAGODA_ASSIGN_OR_RETURN(ctx.model, fetch_first_model(ctx.client));
  }

  const std::vector<Conversation> convs = make_workload(cfg.workload);
  std::vector<size_t> first_record(convs.size() + 1, 0);
  for (size_t i = 0; i < convs.size(); ++i) first_record[i + 1] = first_record[i] + convs[i].turns.size();
  BenchServeResult result;
  result.model = ctx.model;
  result.records.resize(first_record.back());
  const std::vector<double> arrivals = arrival_times(convs.size(), cfg.request_rate, cfg.workload.seed);
  const int32_t max_workers = std::min<int32_t>(static_cast<int32_t>(convs.size()), kMaxConcurrency);
  const int32_t workers = cfg.concurrency > 0 ? std::min(cfg.concurrency, max_workers) : max_workers;

  std::atomic<size_t> next{0};
  ctx.start = Clock::now();
  {
    ProgressBar bar(cfg.progress && isatty(STDERR_FILENO), static_cast<int32_t>(result.records.size()), ctx.done,
                    ctx.failed);
    std::vector<std::thread> threads;
    threads.reserve(workers);
    for (int32_t w = 0; w < workers; ++w) {
      threads.emplace_back([&] {
        auto http = make_client(ctx.client);
        for (size_t i = next++; i < convs.size(); i = next++) {
          std::this_thread::sleep_until(
              ctx.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
          run_conversation(ctx, *http, convs[i], static_cast<int32_t>(i), &result.records[first_record[i]]);
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  const double duration = std::chrono::duration<double>(Clock::now() - ctx.start).count();
  result.report = summarize(result.records, duration, cfg.slo);
  return result;
}

json bench_json(const BenchServeConfig& cfg, const BenchServeResult& result) {
  const WorkloadConfig& w = cfg.workload;
  const char* dataset = w.dataset == Dataset::kRandom         ? "random"
                        : w.dataset == Dataset::kSharedPrefix ? "shared-prefix"
                                                              : "multi-turn";
  json config = {{"base_url", cfg.base_url},
                 {"model", result.model},
                 {"endpoint", cfg.endpoint == Endpoint::kChat ? "chat" : "completions"},
                 {"dataset", dataset},
                 {"num_prompts", w.num_prompts},
                 {"input_len", w.input_len},
                 {"output_len", w.output_len},
                 {"range_ratio", w.range_ratio},
                 {"concurrency", cfg.concurrency},
                 {"request_rate", std::isfinite(cfg.request_rate) ? json(cfg.request_rate) : json("inf")},
                 {"ignore_eos", cfg.ignore_eos},
                 {"seed", w.seed}};
  if (w.dataset == Dataset::kSharedPrefix) config["prefix_len"] = w.prefix_len;
  if (w.dataset == Dataset::kMultiTurn) config["turns"] = w.turns;
  if (cfg.slo.ttft_ms > 0) config["slo_ttft_ms"] = cfg.slo.ttft_ms;
  if (cfg.slo.tpot_ms > 0) config["slo_tpot_ms"] = cfg.slo.tpot_ms;
  return {{"config", std::move(config)},
          {"metrics", report_json(result.report)},
          {"requests", records_json(result.records)}};
}

}  // namespace pagoda::bench
