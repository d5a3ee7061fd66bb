#include "bench_client/bench_stats.h"

#include <algorithm>
#include <cstdio>

namespace pagoda::bench {

using nlohmann::json;

Percentiles percentiles_ms(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return 1000.0 * (v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo)));
  };
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = 1000.0 * sum / static_cast<double>(v.size());
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  p.max = 1000.0 * v.back();
  return p;
}

bool meets_slo(const RequestRecord& r, const Slo& slo) {
  if (!r.ok) return false;
  if (slo.ttft_ms > 0 && r.ttft_s * 1000.0 > slo.ttft_ms) return false;
  if (slo.tpot_ms > 0 && r.tpot_s() * 1000.0 > slo.tpot_ms) return false;
  return true;
}

BenchReport summarize(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo) {
  BenchReport r;
  r.num_requests = static_cast<int32_t>(records.size());
  r.duration_s = duration_s;
  r.has_slo = slo.any();
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestRecord& rec : records) {
    if (!rec.ok) {
      ++r.failed;
      if (r.first_error.empty()) r.first_error = rec.error;
      continue;
    }
    ++r.completed;
    r.total_input_tokens += rec.prompt_tokens >= 0 ? rec.prompt_tokens : rec.input_words;
    r.total_output_tokens += rec.output_tokens;
    ttft.push_back(rec.ttft_s);
    if (rec.output_tokens > 1) tpot.push_back(rec.tpot_s());
    itl.insert(itl.end(), rec.itl_s.begin(), rec.itl_s.end());
    e2e.push_back(rec.e2e_s);
    if (r.has_slo && meets_slo(rec, slo)) ++r.good_requests;
  }
  r.ttft = percentiles_ms(std::move(ttft));
  r.tpot = percentiles_ms(std::move(tpot));
  r.itl = percentiles_ms(std::move(itl));
  r.e2e = percentiles_ms(std::move(e2e));
  if (duration_s > 0) {
    r.request_throughput = r.completed / duration_s;
    r.output_throughput = static_cast<double>(r.total_output_tokens) / duration_s;
    r.total_token_throughput = static_cast<double>(r.total_input_tokens + r.total_output_tokens) / duration_s;
    r.goodput = r.good_requests / duration_s;
  }
  return r;
}

namespace {

void line(std::string* out, const char* name, double v, const char* fmt = "%.2f") {
  char value[64], buf[160];
  std::snprintf(value, sizeof(value), fmt, v);
  std::snprintf(buf, sizeof(buf), "%-40s %12s\n", name, value);
  *out += buf;
}

void section(std::string* out, const char* title, const char* unit, const Percentiles& p) {
  char head[96];
  std::snprintf(head, sizeof(head), "%s", title);
  std::string t = std::string("-") + head;
  while (t.size() < 53) t = "-" + t + "-";
  *out += t.substr(0, 53) + "\n";
  const std::pair<const char*, double> rows[] = {{"Mean", p.mean}, {"P50", p.p50}, {"P90", p.p90}, {"P99", p.p99}};
  for (const auto& [label, v] : rows) line(out, (std::string(label) + " " + unit + ":").c_str(), v);
}

json percentiles_json(const Percentiles& p) {
  return {{"mean", p.mean}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"max", p.max}};
}

}  // namespace

std::string format_report(const BenchReport& r, const std::string& title) {
  std::string out;
  std::string t = " " + title + " ";
  while (t.size() < 53) t = "=" + t + "=";
  out += t.substr(0, 53) + "\n";
  line(&out, "Successful requests:", r.completed, "%.0f");
  line(&out, "Failed requests:", r.failed, "%.0f");
  line(&out, "Benchmark duration (s):", r.duration_s);
  line(&out, "Total input tokens:", static_cast<double>(r.total_input_tokens), "%.0f");
  line(&out, "Total generated tokens:", static_cast<double>(r.total_output_tokens), "%.0f");
  line(&out, "Request throughput (req/s):", r.request_throughput);
  if (r.has_slo) line(&out, "Request goodput (req/s):", r.goodput);
  line(&out, "Output token throughput (tok/s):", r.output_throughput);
  line(&out, "Total token throughput (tok/s):", r.total_token_throughput);
  section(&out, "Time to First Token", "TTFT (ms)", r.ttft);
  section(&out, "Time per Output Token (excl. 1st token)", "TPOT (ms)", r.tpot);
  section(&out, "Inter-token Latency", "ITL (ms)", r.itl);
  section(&out, "End-to-end Latency", "E2EL (ms)", r.e2e);
  out += std::string(53, '=') + "\n";
  if (!r.first_error.empty()) out += "First error: " + r.first_error + "\n";
  return out;
}

json report_json(const BenchReport& r) {
  json j = {{"num_requests", r.num_requests},
            {"completed", r.completed},
            {"failed", r.failed},
            {"duration_s", r.duration_s},
            {"total_input_tokens", r.total_input_tokens},
            {"total_output_tokens", r.total_output_tokens},
            {"request_throughput", r.request_throughput},
            {"output_throughput", r.output_throughput},
            {"total_token_throughput", r.total_token_throughput},
            {"ttft_ms", percentiles_json(r.ttft)},
            {"tpot_ms", percentiles_json(r.tpot)},
            {"itl_ms", percentiles_json(r.itl)},
            {"e2el_ms", percentiles_json(r.e2e)}};
  if (!r.first_error.empty()) j["first_error"] = r.first_error;
  if (r.has_slo) {
    j["good_requests"] = r.good_requests;
    j["goodput"] = r.goodput;
  }
  return j;
}

json records_json(const std::vector<RequestRecord>& records) {
  json out = json::array();
  for (const RequestRecord& r : records) {
    json itl = json::array();
    for (double s : r.itl_s) itl.push_back(s * 1000.0);
    json j = {{"conversation", r.conversation},
              {"turn", r.turn},
              {"ok", r.ok},
              {"start_s", r.start_s},
              {"ttft_ms", r.ttft_s * 1000.0},
              {"tpot_ms", r.tpot_s() * 1000.0},
              {"e2el_ms", r.e2e_s * 1000.0},
              {"itl_ms", std::move(itl)},
              {"prompt_tokens", r.prompt_tokens},
              {"output_tokens", r.output_tokens},
              {"max_tokens", r.max_tokens},
              {"input_words", r.input_words},
              {"text", r.text}};
    if (!r.ok) j["error"] = r.error;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace pagoda::bench
