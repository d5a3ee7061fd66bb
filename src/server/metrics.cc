#include "server/metrics.h"

#include <cstdio>

namespace pagoda::server {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

void header(std::string* out, const std::string& name, const char* type, const char* help) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string* out, const std::string& name, const std::string& labels, double v) {
  *out += name + "{" + labels + "} " + num(v) + "\n";
}

const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                             0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kTokenBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                           0.15,  0.2,    0.3,   0.4,  0.5,   0.75, 1.0,   2.5};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& labels, std::string* out) const {
  int64_t cum = 0;
  const std::string sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    *out += name + "_bucket{" + labels + sep + "le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  *out += name + "_sum{" + labels + "} " + num(sum_) + "\n";
  *out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_("model_name=\"" + model_name + "\""),
      ttft_(kLatencyBuckets),
      tpot_(kTokenBuckets),
      e2e_(kLatencyBuckets),
      queue_(kLatencyBuckets) {}

void ServerMetrics::on_request_finished(const RequestOutput& last) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += last.num_prompt_tokens;
  generation_tokens_ += last.num_output_tokens;
  ++finished_by_reason_[std::string(finish_reason_name(last.finish_reason))];
  const RequestTiming& t = last.timing;
  if (t.first_scheduled >= 0) queue_.observe(t.queue_time());
  if (t.first_token >= 0) {
    ttft_.observe(t.ttft());
    if (t.last_token >= 0) e2e_.observe(t.last_token - t.arrival);
    if (last.num_output_tokens > 1 && t.last_token > t.first_token)
      tpot_.observe((t.last_token - t.first_token) / (last.num_output_tokens - 1));
  }
}

void ServerMetrics::on_http_response(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_by_status_[status];
}

void ServerMetrics::on_client_disconnect() {
  std::lock_guard<std::mutex> lock(mu_);
  ++client_disconnects_;
}

std::string ServerMetrics::render(const EngineSnapshot& s, const http::ServerStats& http) const {
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v) {
    header(&out, std::string("pagoda:") + name, "gauge", help);
    sample(&out, std::string("pagoda:") + name, labels_, v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    header(&out, std::string("pagoda:") + name, "counter", help);
    sample(&out, std::string("pagoda:") + name, labels_, v);
  };
  gauge("num_requests_running", "Requests running on the engine.", s.num_running);
  gauge("num_requests_waiting", "Requests waiting to be scheduled.", s.num_waiting);
  gauge("num_requests_swapped", "Requests preempted to the host swap tier.", s.num_swapped);
  gauge("kv_cache_usage_perc", "KV cache usage (1 = full).", s.kv_usage);
  gauge("kv_cache_total_blocks", "KV cache blocks in the pool (sliding-window models: pages of one layer group).",
        s.num_kv_blocks);
  gauge("kv_cache_bytes_per_token", "K and V bytes one token takes in the cache, all layers (--kv-cache-dtype).",
        s.kv_bytes_per_token);
  gauge("kv_cache_free_blocks", "KV cache blocks an allocation can get now (free plus evictable prefix-cache blocks).",
        s.num_available_kv_blocks);
  gauge("prefix_cache_hit_rate", "Prompt tokens served by the prefix cache / prompt tokens computed.",
        s.stats.prefix_cache_hit_rate());
  gauge("prefix_cache_blocks", "KV blocks held by the prefix cache (free blocks include the evictable ones).",
        s.num_cached_blocks);
  counter("prefix_cache_evictions_total", "Blocks evicted from the prefix cache.",
          static_cast<double>(s.num_cache_evictions));
  if (s.kv_tiers) {
    const KVTierStats& t = s.kv_tier;
    counter("kv_disk_hits", "KV blocks loaded back from the disk tier (--kv-disk-dir) instead of recomputed.",
            static_cast<double>(t.disk_hits));
    counter("kv_host_hits", "KV blocks loaded back from the host-memory tier (--kv-host-size).",
            static_cast<double>(t.host_hits));
    counter("kv_tier_spills_total", "Blocks evicted from the prefix cache and kept in a KV tier.",
            static_cast<double>(t.spills));
    counter("kv_disk_corrupt_total", "Disk-tier files rejected as damaged (size, header or checksum) and deleted.",
            static_cast<double>(t.disk_corrupt));
    gauge("kv_disk_blocks", "KV blocks held by the disk tier.", static_cast<double>(t.disk_blocks));
    gauge("kv_disk_bytes", "Bytes of the disk tier's files.", static_cast<double>(t.disk_bytes));
    gauge("kv_host_tier_blocks", "KV blocks held by the host-memory tier.", static_cast<double>(t.host_blocks));
  }
  counter("num_preemptions_total", "Preemptions since start.", static_cast<double>(s.num_preemptions));
  counter("kv_evicted_tokens_total",
          "Cached tokens the KV policy dropped (--kv-policy streaming, snapkv, h2o), per sequence, since start.",
          static_cast<double>(s.num_evicted_tokens));
  counter("engine_steps_total", "Engine steps since start.", static_cast<double>(s.stats.num_steps));
  counter("spec_decode_num_draft_tokens_total", "Draft tokens verified (speculative decoding).",
          static_cast<double>(s.stats.num_draft_tokens));
  counter("spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
          static_cast<double>(s.stats.num_accepted_draft_tokens));
  counter("spec_decode_num_verify_steps_total", "Sequence steps that verified drafts.",
          static_cast<double>(s.stats.num_spec_verify_steps));
  counter("spec_decode_num_proposals_total",
          "Sequence steps drafts were proposed for (auto speculation proposes none where it holds them back).",
          static_cast<double>(s.stats.num_spec_proposals));
  counter("spec_decode_draft_seconds_total", "Seconds spent proposing drafts.", s.stats.spec_draft_seconds);
  counter("slo_requests_total", "Finished requests that had latency targets (slo).",
          static_cast<double>(s.stats.num_slo_requests));
  counter("slo_met_total", "Of those, requests that met both their TTFT and TPOT targets (goodput's numerator).",
          static_cast<double>(s.stats.num_slo_met));
  const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  gauge("goodput_requests_per_second",
        "Requests that met both latency targets per second since start (DistServe's goodput).",
        uptime > 0 ? static_cast<double>(s.stats.num_slo_met) / uptime : 0.0);
  counter("grammar_masks_total", "Token masks computed for structured output.",
          static_cast<double>(s.stats.num_grammar_masks));
  counter("grammar_mask_seconds_total", "Seconds spent computing structured-output token masks.",
          s.stats.grammar_mask_seconds);
  counter("spec_decode_verify_seconds_total", "Seconds of engine steps that verified drafts.",
          s.stats.spec_verify_seconds);
  gauge("spec_decode_acceptance_rate", "Accepted / verified draft tokens.", s.stats.spec_acceptance_rate());
  gauge("spec_decode_mean_accepted_len", "Tokens emitted per verification step (accepted drafts + 1).",
        s.stats.spec_mean_accepted_len());
  gauge("http_open_connections", "Open HTTP connections.", static_cast<double>(http.open_connections));
  counter("http_refused_connections_total", "Connections refused over a connection cap.",
          static_cast<double>(http.refused_connections));
  counter("http_request_timeouts_total", "Requests not received before their deadline (408).",
          static_cast<double>(http.timed_out_requests));
  std::lock_guard<std::mutex> lock(mu_);
  counter("client_disconnects_total", "Replies abandoned because the client left (requests aborted).",
          static_cast<double>(client_disconnects_));
  counter("prompt_tokens_total", "Prompt tokens of finished requests.", static_cast<double>(prompt_tokens_));
  counter("generation_tokens_total", "Generated tokens of finished requests.", static_cast<double>(generation_tokens_));
  header(&out, "pagoda:request_success_total", "counter", "Finished requests by finish reason.");
  for (const char* r : {"stop", "length", "abort", "error"}) {
    auto it = finished_by_reason_.find(r);
    sample(&out, "pagoda:request_success_total", labels_ + ",finished_reason=\"" + r + "\"",
           it == finished_by_reason_.end() ? 0.0 : static_cast<double>(it->second));
  }
  header(&out, "pagoda:http_responses_total", "counter", "HTTP responses by status code.");
  for (const auto& [status, n] : http_by_status_)
    sample(&out, "pagoda:http_responses_total", labels_ + ",status=\"" + std::to_string(status) + "\"",
           static_cast<double>(n));
  struct H {
    const char* name;
    const char* help;
    const Histogram& h;
  };
  for (const H& h : {H{"time_to_first_token_seconds", "Time to first token.", ttft_},
                     H{"time_per_output_token_seconds", "Time per output token after the first.", tpot_},
                     H{"e2e_request_latency_seconds", "Arrival to last token.", e2e_},
                     H{"request_queue_time_seconds", "Arrival to first scheduled.", queue_}}) {
    const std::string name = std::string("pagoda:") + h.name;
    header(&out, name, "histogram", h.help);
    h.h.render(name, labels_, &out);
  }
  return out;
}

}  // namespace pagoda::server
