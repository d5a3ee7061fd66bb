// `pagoda bench serve`: a load generator for any OpenAI-compatible server.
// Workers (one thread and one keep-alive connection each) send streamed
// requests at a fixed concurrency and/or on a Poisson arrival schedule, time
// every chunk, and summarize TTFT / TPOT / ITL / E2E, throughput and goodput.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_client/bench_stats.h"
#include "bench_client/stream_client.h"
#include "bench_client/workload.h"
#include "core/status.h"

namespace pagoda::bench {

constexpr int32_t kMaxConcurrency = 256;

struct BenchServeConfig {
  std::string base_url = "http://127.0.0.1:8080";
  std::string api_key;
  std::string model;  // "": the first id from GET /v1/models
  Endpoint endpoint = Endpoint::kCompletions;
  WorkloadConfig workload;
  int32_t concurrency = 0;  // requests in flight at most; 0: min(conversations, kMaxConcurrency)
  double request_rate = std::numeric_limits<double>::infinity();  // Poisson arrivals per s
  bool ignore_eos = false;                                        // adds "ignore_eos": true (vLLM, llama.cpp, pagoda)
  Slo slo;
  double timeout_s = 600;  // per request
  bool progress = false;   // a progress bar on stderr
};

struct BenchServeResult {
  std::string model;
  BenchReport report;
  std::vector<RequestRecord> records;  // in (conversation, turn) order
};

// Checks the configuration (clear messages for bad flags).
Status validate(const BenchServeConfig& cfg);

// Runs the benchmark. Fails only when it cannot start (bad URL, no model);
// failed requests are counted in the report.
Result<BenchServeResult> run_bench_serve(const BenchServeConfig& cfg);

// Configuration, report and per-request records, for --json.
nlohmann::json bench_json(const BenchServeConfig& cfg, const BenchServeResult& result);

}  // namespace pagoda::bench
