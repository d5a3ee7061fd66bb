#include "engine/async_engine.h"

#include <chrono>

namespace pagoda {

void RequestStream::push(RequestOutput out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = out.request_finished;
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
}

std::optional<RequestOutput> RequestStream::next() {
  bool timed_out = false;
  return next_for(-1, &timed_out);
}

std::optional<RequestOutput> RequestStream::next_for(int timeout_ms, bool* timed_out) {
  std::unique_lock<std::mutex> lock(mu_);
  *timed_out = false;
  auto ready = [&] { return !queue_.empty() || done_; };
  if (timeout_ms < 0) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready)) {
    *timed_out = true;
    return std::nullopt;
  }
  if (queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

AsyncEngine::AsyncEngine(std::unique_ptr<Engine> engine, int32_t max_queue)
    : engine_(std::move(engine)), max_queue_(max_queue) {
  // What holds before the first step (read by /metrics at once).
  snapshot_.num_kv_blocks = engine_->kv_manager().num_blocks();
  snapshot_.num_available_kv_blocks = engine_->kv_manager().num_available_blocks();
  snapshot_.kv_bytes_per_token = engine_->kv_bytes_per_token();
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() { shutdown(); }

Result<std::shared_ptr<RequestStream>> AsyncEngine::submit(RequestSpec spec) {
  PAGODA_RETURN_IF_ERROR(engine_->validate(spec));  // reads only immutable config
  const RequestId id{next_id_.fetch_add(1)};
  auto stream = std::make_shared<RequestStream>(id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status(StatusCode::kUnavailable, "the server is shutting down");
    const int64_t queued = static_cast<int64_t>(pending_.size()) + snapshot_.num_waiting;
    if (max_queue_ > 0 && queued >= max_queue_)
      return resource_exhausted("the request queue is full (" + std::to_string(max_queue_) + " waiting)");
    if (engine_->slo_reject() && spec.slo_ttft_s > 0) {
      // Behind the engine's queue (as of its last step) and what is pending.
      int64_t ahead = snapshot_.num_queued_prefill_tokens + static_cast<int64_t>(spec.prompt.size());
      for (const auto& p : pending_) ahead += static_cast<int64_t>(p.second.prompt.size());
      PAGODA_RETURN_IF_ERROR(check_slo_admission(spec.slo_ttft_s, engine_->predicted_prefill_s(ahead)));
    }
    pending_.emplace_back(id, std::move(spec));
    streams_.emplace(id, stream);
  }
  cv_.notify_all();
  return stream;
}

void AsyncEngine::abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
  }
  cv_.notify_all();
}

EngineSnapshot AsyncEngine::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

Status AsyncEngine::import_kv(std::shared_ptr<const KVBlockExport> blocks) {
  PAGODA_RETURN_IF_ERROR(engine_->check_kv_import(*blocks));  // reads only configuration
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status(StatusCode::kUnavailable, "the server is shutting down");
    imports_.push_back(std::move(blocks));
  }
  cv_.notify_all();
  return Status::ok();
}

void AsyncEngine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AsyncEngine::loop() {
  auto end_stream = [](const std::shared_ptr<RequestStream>& s, FinishReason reason, std::string error) {
    RequestOutput o;
    o.id = s->id();
    o.finished = true;
    o.request_finished = true;
    o.finish_reason = reason;
    o.error = std::move(error);
    s->push(std::move(o));
  };
  for (;;) {
    std::vector<std::pair<RequestId, RequestSpec>> pending;
    std::vector<RequestId> aborts;
    std::vector<std::shared_ptr<const KVBlockExport>> imports;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !pending_.empty() || !aborts_.empty() || !imports_.empty() || engine_->has_unfinished();
      });
      pending.swap(pending_);
      aborts.swap(aborts_);
      imports.swap(imports_);
      stopping = stop_;
    }
    // Blocks first: a request submitted after its import finds them.
    for (const auto& e : imports) engine_->import_kv(*e);
    for (auto& [id, spec] : pending) {
      auto added = engine_->add_request(std::move(spec), id);
      if (!added.is_ok()) {
        std::shared_ptr<RequestStream> s;
        {
          std::lock_guard<std::mutex> lock(mu_);
          s = streams_[id];
          streams_.erase(id);
        }
        end_stream(s, FinishReason::kError, added.status().message());
      }
    }
    std::map<RequestId, std::shared_ptr<RequestStream>> to_end;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping) {
        to_end.swap(streams_);
      } else {
        for (RequestId id : aborts) {
          auto it = streams_.find(id);
          if (it == streams_.end()) continue;
          to_end.insert(*it);
          streams_.erase(it);
        }
      }
    }
    for (auto& [id, s] : to_end) {
      engine_->abort(id);
      end_stream(s, FinishReason::kAbort, "");
    }
    if (stopping) return;

    std::vector<RequestOutput> outs = engine_->has_unfinished() ? engine_->step() : std::vector<RequestOutput>{};
    // The snapshot is built outside the lock: submit() and snapshot() never
    // wait for the engine's bookkeeping, only for the copy.
    EngineSnapshot snap;
    const Scheduler& sch = engine_->scheduler();
    const KVCacheManager& kv = engine_->kv_manager();
    snap.num_running = sch.num_running();
    snap.num_waiting = sch.num_waiting();
    snap.num_swapped = sch.num_swapped();
    snap.num_kv_blocks = kv.num_blocks();
    snap.num_available_kv_blocks = kv.num_available_blocks();
    snap.kv_bytes_per_token = engine_->kv_bytes_per_token();
    snap.kv_usage = kv.utilization();
    snap.kv_waste = kv.kv_waste();
    snap.num_preemptions = sch.num_preemptions();
    snap.num_evicted_tokens = sch.num_evicted_tokens();
    snap.num_queued_prefill_tokens = sch.num_queued_prefill_tokens();
    if (const PrefixCache* pc = kv.prefix_cache()) {
      snap.num_cached_blocks = pc->num_cached_blocks();
      snap.num_cache_evictions = pc->num_evictions();
    }
    snap.stats = engine_->stats();
    snap.kv_tiers = kv.tiers() != nullptr;
    snap.kv_tier = engine_->kv_tier_stats();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& o : outs) {
      auto it = streams_.find(o.id);
      if (it == streams_.end()) continue;
      const bool finished = o.request_finished;
      it->second->push(std::move(o));
      if (finished) streams_.erase(it);
    }
    snapshot_ = snap;
  }
}

}  // namespace pagoda
