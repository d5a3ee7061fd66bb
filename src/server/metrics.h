// Prometheus text exposition for /metrics, with vLLM-like metric names under
// the "pagoda:" prefix: engine gauges from an EngineSnapshot, token counters
// and latency histograms from finished requests.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "http/server.h"

namespace pagoda::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Appends the _bucket/_sum/_count lines (labels: e.g. model_name="m").
  void render(const std::string& name, const std::string& labels, std::string* out) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  int64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);
  // The last output of a request (finished == true): tokens, reason, timings.
  void on_request_finished(const RequestOutput& last);
  void on_http_response(int status);
  // A client left before its reply was complete (its requests were aborted).
  void on_client_disconnect();
  std::string render(const EngineSnapshot& snap, const http::ServerStats& http = {}) const;

 private:
  std::string labels_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  int64_t client_disconnects_ = 0;
  std::map<std::string, int64_t> finished_by_reason_;
  std::map<int, int64_t> http_by_status_;
  Histogram ttft_, tpot_, e2e_, queue_;
};

}  // namespace pagoda::server
