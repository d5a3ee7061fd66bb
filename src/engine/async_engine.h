// The engine thread: runs Engine::step in a loop and hands each request's
// outputs to a per-request stream. submit/abort/stats are thread-safe; the
// server and `pagoda generate` talk to the engine only through this class.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace pagoda {

// The consumer side of one request: outputs in order, then end of stream.
class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }
  // Blocks until the next output; nullopt once the stream is finished and
  // drained (the last output has request_finished == true).
  std::optional<RequestOutput> next();
  // Like next() but gives up after timeout_ms (returns nullopt and sets
  // *timed_out). Lets a server poll for client disconnects.
  std::optional<RequestOutput> next_for(int timeout_ms, bool* timed_out);

  void push(RequestOutput out);  // engine thread

 private:
  RequestId id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool done_ = false;
};

struct EngineSnapshot {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int32_t num_swapped = 0;
  int32_t num_kv_blocks = 0;
  int32_t num_available_kv_blocks = 0;
  double kv_bytes_per_token = 0;  // K + V of every layer (--kv-cache-dtype)
  double kv_usage = 0;            // used blocks / total
  double kv_waste = 0;
  int64_t num_preemptions = 0;
  int64_t num_evicted_tokens = 0;  // dropped by the KV policy
  int32_t num_cached_blocks = 0;   // blocks held by the prefix cache
  int64_t num_cache_evictions = 0;
  int64_t num_queued_prefill_tokens = 0;  // prompt tokens still to compute (SLO admission)
  bool kv_tiers = false;                  // --kv-disk-dir / --kv-host-size
  KVTierStats kv_tier;
  EngineStats stats;
};

class AsyncEngine {
 public:
  // Starts the engine thread. max_queue bounds requests waiting to be
  // scheduled (admission control); 0 = unbounded.
  AsyncEngine(std::unique_ptr<Engine> engine, int32_t max_queue = 0);
  ~AsyncEngine();  // stops the thread; open streams end with kAbort

  // Validates and queues; the error is returned here (never through the
  // stream). kResourceExhausted when the queue is full.
  Result<std::shared_ptr<RequestStream>> submit(RequestSpec spec);
  void abort(RequestId id);
  // Prefill/decode disaggregation, decode side: KV blocks another instance
  // computed, checked here (same model and layout) and handed to the
  // engine thread before any request submitted after this call.
  Status import_kv(std::shared_ptr<const KVBlockExport> blocks);
  // Whether the engine hands out prompts' KV blocks (--role prefill).
  bool exports_kv() const { return engine_->exports_kv(); }
  EngineSnapshot snapshot() const;
  void shutdown();  // stop accepting, abort everything, join

  // Immutable after construction: safe to read from any thread.
  const Tokenizer& tokenizer() const { return engine_->tokenizer(); }
  const ModelConfig& model_config() const { return engine_->model_config(); }
  int32_t max_model_len() const { return engine_->max_model_len(); }
  Result<KvPolicy> resolve_kv_policy(const std::optional<KvPolicyRequest>& request) const {
    return engine_->resolve_kv_policy(request);
  }

 private:
  void loop();

  std::unique_ptr<Engine> engine_;
  int32_t max_queue_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<RequestId, RequestSpec>> pending_;
  std::vector<RequestId> aborts_;
  std::vector<std::shared_ptr<const KVBlockExport>> imports_;
  std::map<RequestId, std::shared_ptr<RequestStream>> streams_;
  EngineSnapshot snapshot_;
  std::atomic<int64_t> next_id_{0};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pagoda
