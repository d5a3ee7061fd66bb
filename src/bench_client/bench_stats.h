// Aggregate metrics of a `pagoda bench serve` run: latency percentiles,
// throughput, goodput under SLOs, and the JSON / text reports.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_client/stream_client.h"

namespace pagoda::bench {

struct Percentiles {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // milliseconds
};

// Linear interpolation between closest ranks (numpy's default); zeros if empty.
Percentiles percentiles_ms(std::vector<double> seconds);

struct Slo {
  double ttft_ms = 0;  // 0: no limit
  double tpot_ms = 0;
  bool any() const { return ttft_ms > 0 || tpot_ms > 0; }
};

// Successful and within every given SLO limit.
bool meets_slo(const RequestRecord& r, const Slo& slo);

struct BenchReport {
  int32_t num_requests = 0;
  int32_t completed = 0;
  int32_t failed = 0;
  std::string first_error;
  double duration_s = 0;
  int64_t total_input_tokens = 0;  // usage.prompt_tokens, else the word count
  int64_t total_output_tokens = 0;
  double request_throughput = 0;  // completed requests / s
  double output_throughput = 0;   // output tokens / s
  double total_token_throughput = 0;
  Percentiles ttft, tpot, itl, e2e;
  bool has_slo = false;
  int32_t good_requests = 0;
  double goodput = 0;  // good requests / s
};

BenchReport summarize(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo);

// The report as a human-readable table (vLLM's layout).
std::string format_report(const BenchReport& r, const std::string& title);

nlohmann::json report_json(const BenchReport& r);
nlohmann::json records_json(const std::vector<RequestRecord>& records);

}  // namespace pagoda::bench
