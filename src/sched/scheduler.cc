#include "sched/scheduler.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace pagoda {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "";
}

Scheduler::Scheduler(const SchedulerConfig& config, KVCacheManager& kv) : config_(config), kv_(kv) {}

void Scheduler::add(Sequence* seq) {
  if (!seq->kv_policy) seq->kv_policy = config_.kv_policy;
  seq->status = SeqStatus::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::add_running(Sequence* seq) {
  if (!seq->kv_policy) seq->kv_policy = config_.kv_policy;
  seq->status = SeqStatus::kRunning;
  running_.push_back(seq);
}

int32_t Scheduler::num_waiting() const {
  return static_cast<int32_t>(
      std::count_if(waiting_.begin(), waiting_.end(), [](const Sequence* s) { return !s->swapped; }));
}

int32_t Scheduler::num_swapped() const { return static_cast<int32_t>(waiting_.size()) - num_waiting(); }

bool Scheduler::waits_before(const Sequence* a, const Sequence* b, double now) const {
  // Preempted sequences resume before new ones: they already hold progress.
  const bool pa = a->num_preemptions > 0 && a->status == SeqStatus::kPreempted;
  const bool pb = b->num_preemptions > 0 && b->status == SeqStatus::kPreempted;
  switch (config_.policy) {
    case SchedPolicy::kPriority:
      if (a->priority != b->priority) return a->priority < b->priority;
      break;
    case SchedPolicy::kSjf:
    case SchedPolicy::kLpm:
    case SchedPolicy::kSlo: {
      if (pa != pb) return pa;
      // Waited past the aging bound: first, in arrival order (no starvation).
      const bool aged_a = now - a->arrival_time > config_.sjf_aging_s;
      const bool aged_b = now - b->arrival_time > config_.sjf_aging_s;
      if (aged_a != aged_b) return aged_a;
      if (aged_a) break;
      if (config_.policy == SchedPolicy::kSlo) {
        // Requests that can still make their deadline before those that
        // cannot; among them the least slack first.
        const double sa = slack_s(a, now), sb = slack_s(b, now);
        if ((sa >= 0) != (sb >= 0)) return sa >= 0;
        if (sa >= 0 && sa != sb) return sa < sb;
      } else if (config_.policy == SchedPolicy::kSjf) {
        if (a->num_uncomputed_tokens() != b->num_uncomputed_tokens())
          return a->num_uncomputed_tokens() < b->num_uncomputed_tokens();
      } else if (a->sort_key != b->sort_key) {
        return a->sort_key > b->sort_key;  // more cached tokens first
      }
      break;
    }
    case SchedPolicy::kFcfs:
      if (pa != pb) return pa;
      break;
  }
  if (a->arrival_time != b->arrival_time) return a->arrival_time < b->arrival_time;
  return a->request_id < b->request_id;
}

double Scheduler::predicted_prefill_s(int64_t n) const {
  const int64_t steps = (n + config_.max_num_batched_tokens - 1) / config_.max_num_batched_tokens;
  return step_time_scale() * (static_cast<double>(steps) * config_.step_time.fixed_s +
                              config_.step_time.per_token_s * static_cast<double>(n));
}

void Scheduler::observe_step(int32_t num_tokens, double seconds) {
  const double predicted = config_.step_time.seconds(num_tokens);
  if (predicted <= 0 || num_tokens <= 0 || !(seconds > 0)) return;
  constexpr double kWeight = 0.05;
  step_time_scale_.store(std::clamp((1 - kWeight) * step_time_scale() + kWeight * (seconds / predicted), 0.5, 4.0),
                         std::memory_order_relaxed);
}

int64_t Scheduler::num_queued_prefill_tokens() const {
  int64_t n = 0;
  for (const Sequence* s : waiting_) n += s->num_uncomputed_tokens();
  for (const Sequence* s : running_) {
    if (s->num_uncomputed_tokens() > 1) n += s->num_uncomputed_tokens();
  }
  return n;
}

double Scheduler::slack_s(const Sequence* seq, double now) const {
  const double ttft = seq->slo_ttft_s > 0 ? seq->slo_ttft_s : config_.slo_default_ttft_s;
  return seq->arrival_time + ttft - now - predicted_prefill_s(seq);
}

int32_t Scheduler::tpot_budget(int32_t budget) const {
  double tpot = 0;
  int32_t num_decodes = 0;
  for (const Sequence* s : running_) {
    if (s->num_uncomputed_tokens() != 1) continue;
    ++num_decodes;
    if (s->slo_tpot_s > 0 && (tpot == 0 || s->slo_tpot_s < tpot)) tpot = s->slo_tpot_s;
  }
  const StepTimeEstimate& t = config_.step_time;
  if (tpot == 0 || t.per_token_s <= 0) return budget;
  // Sarathi-Serve: the most tokens a step may batch and still end in time
  // (5% headroom: the model's predictions are not exact).
  const double fits = (0.95 * tpot / step_time_scale() - t.fixed_s) / t.per_token_s;
  const auto cap = static_cast<int32_t>(std::clamp(fits, 0.0, static_cast<double>(budget)));
  return std::max(cap, std::min(num_decodes, budget));
}

Sequence* Scheduler::pick_victim() const {
  // The running sequence that would be scheduled last: lowest priority
  // (priority policy), otherwise the latest arrival.
  Sequence* victim = nullptr;
  for (Sequence* s : running_) {
    if (!victim) {
      victim = s;
      continue;
    }
    const bool later = config_.policy == SchedPolicy::kPriority && s->priority != victim->priority
                           ? s->priority > victim->priority
                           : (s->arrival_time != victim->arrival_time ? s->arrival_time > victim->arrival_time
                                                                      : victim->request_id < s->request_id);
    if (later) victim = s;
  }
  return victim;
}

void Scheduler::preempt(Sequence* seq, SchedulerOutput& out) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  seq->clear_drafts();
  bool swapped = false;
  if (config_.preempt_mode == PreemptMode::kSwap) {
    std::vector<BlockCopy> copies;
    if (kv_.swap_out(seq->seq_id, &copies)) {
      out.swap_out.insert(out.swap_out.end(), copies.begin(), copies.end());
      swapped = true;
    }
  }
  if (!swapped) {
    // Recompute (also the fallback when the host tier is full).
    kv_.free(seq->seq_id);
    seq->num_computed_tokens = 0;
    seq->num_evicted = 0;
    seq->num_draft_lag = 0;
    seq->kv_compressed = false;
  }
  seq->swapped = swapped;
  seq->status = SeqStatus::kPreempted;
  ++seq->num_preemptions;
  ++num_preemptions_;
  waiting_.push_back(seq);
  out.preempted.push_back(seq);
}

int32_t Scheduler::admit(Sequence* seq, int32_t budget, SchedulerOutput& out) {
  // Predicates first: nothing is mutated unless the whole admission fits.
  if (seq->swapped) {
    const int32_t num_new = cap_new(seq, std::min(seq->num_uncomputed_tokens(), budget));
    const int32_t total = seq->num_cache_tokens() + num_new;
    if (!kv_.can_swap_in(seq->seq_id, total)) return 0;
    std::vector<BlockCopy> copies;
    PAGODA_CHECK(kv_.swap_in(seq->seq_id, &copies));
    out.swap_in.insert(out.swap_in.end(), copies.begin(), copies.end());
    seq->swapped = false;
    PAGODA_CHECK(kv_.allocate_for_write(seq->seq_id, seq->num_cache_tokens(), total, &out.cow));
    return num_new;
  }
  PAGODA_CHECK(seq->num_computed_tokens == 0 && !kv_.contains(seq->seq_id));
  // A prompt SnapKV will compress rewrites its blocks, and H2O rewrites
  // every sequence's blocks and needs its own scores: they neither share
  // cached blocks nor offer their own.
  const KvPolicy& p = *seq->kv_policy;
  const bool compressing = p.h2o() || (p.snapkv() && seq->num_tokens() > p.budget);
  // Blocks the KV tiers hold beyond the cached prefix come back into the
  // prefix cache first (their bytes arrive before the forward).
  if (!compressing) kv_.restore_prefix(seq->tokens);
  // Cached prefix tokens cost no budget: only uncached ones are counted.
  const int32_t cached = compressing ? 0 : kv_.num_cached_prefix_tokens(seq->tokens);
  const int32_t num_new = cap_new(seq, std::min(seq->num_tokens() - cached, budget));
  if (!kv_.can_admit(compressing ? std::span<const int32_t>() : seq->tokens, cached + num_new)) return 0;
  if (!compressing) PAGODA_CHECK(kv_.acquire_cached_prefix(seq->seq_id, seq->tokens) == cached);
  kv_.take_state_copies(&out.state_copies);
  seq->num_computed_tokens = cached;
  seq->num_cached_tokens = std::min(cached, seq->num_prompt_tokens);
  PAGODA_CHECK(kv_.allocate_for_write(seq->seq_id, cached, cached + num_new, &out.cow));
  if (compressing) kv_.set_uncacheable(seq->seq_id);
  return num_new;
}

int32_t Scheduler::cap_new(const Sequence* seq, int32_t n) const {
  const KvPolicy& p = *seq->kv_policy;
  if (p.streaming()) return std::min(n, p.window);
  if (p.h2o()) return std::min(n, p.budget);
  if (p.snapkv() && !seq->kv_compressed) {
    const int32_t left = seq->num_prompt_tokens - seq->num_computed_tokens;  // prompt tokens still to compute
    if (left > n && left - n < p.window && left > p.window)
      return left - p.window;  // the last chunk holds the whole observation window
  }
  return n;
}

bool Scheduler::compresses(const Sequence* seq, int32_t num_new) const {
  const KvPolicy& p = *seq->kv_policy;
  if (p.h2o()) return seq->num_cache_tokens() + num_new >= p.budget + kv_.block_size();
  // SnapKV: only the slice that completes the prompt (a short prompt's
  // decode never compresses).
  return p.snapkv() && !seq->kv_compressed && seq->num_computed_tokens < seq->num_prompt_tokens &&
         seq->num_computed_tokens + num_new >= seq->num_prompt_tokens && seq->num_cache_tokens() + num_new > p.budget;
}

ScheduledSeq Scheduler::slice(Sequence* seq, int32_t num_new, int32_t num_logits, int32_t num_draft) const {
  const KvPolicy& p = *seq->kv_policy;
  ScheduledSeq s{seq, num_new, num_logits, num_draft};
  s.rope_offset = p.streaming() ? 0 : seq->num_evicted;
  if (compresses(seq, num_new - num_draft)) {
    s.compress_to = p.budget;
    s.kv_window = p.window;
    s.kv_pool = p.snapkv() ? p.pool : 1;
  }
  s.accumulate_scores = p.h2o();
  return s;
}

void Scheduler::evict_streaming(Sequence* seq, SchedulerOutput& out) {
  const KvPolicy& p = *seq->kv_policy;
  if (!p.streaming()) return;
  const int32_t bs = kv_.block_size();
  const int32_t sink_blocks = p.sink_blocks(bs);
  while (seq->num_cache_tokens() - sink_blocks * bs - bs >= p.window) {
    if (!kv_.evict_block(seq->seq_id, sink_blocks, &out.evict_cow, &out.key_shifts)) return;
    seq->num_evicted += bs;
    num_evicted_tokens_ += bs;
  }
}

SchedulerOutput Scheduler::schedule(double now) {
  SchedulerOutput out;
  int32_t budget = config_.max_num_batched_tokens;
  if (config_.policy == SchedPolicy::kSlo) budget = tpot_budget(budget);
  const int32_t step_budget = budget;
  // 0. Streaming eviction first, before any block changes hands this step.
  for (Sequence* seq : running_) evict_streaming(seq, out);

  // 1. Running sequences: decodes first, then unfinished prefills, each group
  //    in policy order. Preempt the lowest-ranked running sequence on OOM.
  std::vector<Sequence*> order = running_;
  std::stable_sort(order.begin(), order.end(), [&](const Sequence* a, const Sequence* b) {
    const bool da = a->num_uncomputed_tokens() == 1, db = b->num_uncomputed_tokens() == 1;
    if (da != db) return da;
    return waits_before(a, b, now);
  });
  // SLO: running prefills compete with waiting requests by slack (step 2)
  // instead of going first: a long prompt with a loose deadline pauses while
  // tight ones start.
  const bool slo = config_.policy == SchedPolicy::kSlo;
  std::vector<Sequence*> slo_prefills;
  for (Sequence* seq : order) {
    if (budget <= 0) break;
    if (seq->status != SeqStatus::kRunning) continue;  // preempted earlier in this loop
    if (slo && seq->num_uncomputed_tokens() > 1) {
      slo_prefills.push_back(seq);
      continue;
    }
    int32_t num_new = cap_new(seq, std::min(seq->num_uncomputed_tokens(), budget));
    if (num_new <= 0) continue;
    // Drafts ride along a decode as extra positions while budget and blocks
    // allow; they are dropped (never anyone preempted) when they do not fit.
    int32_t num_draft = 0;
    if (seq->num_uncomputed_tokens() == 1 && !seq->kv_policy->streaming()) {
      num_draft = std::min<int32_t>(static_cast<int32_t>(seq->draft_tokens.size()), budget - num_new);
      if (!kv_.can_write(seq->seq_id, seq->num_cache_tokens(), seq->num_cache_tokens() + num_new + num_draft))
        num_draft = 0;
    }
    seq->resize_drafts(num_draft);
    num_new += num_draft;
    // Cache positions written: a compressing slice rewrites the whole table.
    const int32_t end = seq->num_cache_tokens() + num_new;
    const int32_t begin = compresses(seq, num_new - num_draft) ? 0 : seq->num_cache_tokens();
    while (seq->status == SeqStatus::kRunning && !kv_.can_write(seq->seq_id, begin, end)) {
      Sequence* victim = pick_victim();
      // Never preempt what this step already scheduled; then give up on seq.
      const bool victim_scheduled = std::any_of(out.scheduled.begin(), out.scheduled.end(),
                                                [&](const ScheduledSeq& s) { return s.seq == victim; });
      preempt(victim_scheduled ? seq : victim, out);
    }
    if (seq->status != SeqStatus::kRunning) continue;
    PAGODA_CHECK(kv_.allocate_for_write(seq->seq_id, begin, end, &out.cow));
    const bool reaches_end = seq->num_computed_tokens + num_new - num_draft == seq->num_tokens();
    out.scheduled.push_back(slice(seq, num_new, reaches_end ? 1 + num_draft : 0, num_draft));
    budget -= num_new;
  }

  // 2. Waiting sequences in policy order while budget, seats and blocks last.
  if (out.preempted.empty()) {
    if (config_.policy == SchedPolicy::kLpm)
      for (Sequence* s : waiting_) s->sort_key = kv_.num_cached_prefix_tokens(s->tokens);
    std::stable_sort(waiting_.begin(), waiting_.end(),
                     [&](const Sequence* a, const Sequence* b) { return waits_before(a, b, now); });
    if (slo) {
      // Paused prefills first where they rank first; they already hold
      // blocks, so one that cannot write now waits for the next step.
      for (Sequence* seq : slo_prefills) {
        if (budget <= 0) break;
        const bool ahead = waiting_.empty() || waits_before(seq, waiting_.front(), now);
        if (!ahead) continue;
        const int32_t num_new = cap_new(seq, std::min(seq->num_uncomputed_tokens(), budget));
        const int32_t begin = seq->num_cache_tokens(), end = begin + num_new;
        if (num_new <= 0 || compresses(seq, num_new) || !kv_.can_write(seq->seq_id, begin, end)) continue;
        PAGODA_CHECK(kv_.allocate_for_write(seq->seq_id, begin, end, &out.cow));
        out.scheduled.push_back(slice(seq, num_new, seq->num_computed_tokens + num_new == seq->num_tokens() ? 1 : 0));
        budget -= num_new;
      }
    }
    size_t taken = 0;
    for (; taken < waiting_.size() && budget > 0 && static_cast<int32_t>(running_.size()) < config_.max_num_seqs;
         ++taken) {
      Sequence* seq = waiting_[taken];
      const int32_t num_new = admit(seq, budget, out);
      if (num_new == 0) break;  // head-of-line: keeps the order fair
      seq->status = SeqStatus::kRunning;
      running_.push_back(seq);
      out.scheduled.push_back(slice(seq, num_new, seq->num_computed_tokens + num_new == seq->num_tokens() ? 1 : 0));
      budget -= num_new;
    }
    waiting_.erase(waiting_.begin(), waiting_.begin() + taken);
  }
  if (slo) {
    // Paused prefills that ranked after the waiting queue: what budget is left.
    for (Sequence* seq : slo_prefills) {
      if (budget <= 0) break;
      const bool done =
          std::any_of(out.scheduled.begin(), out.scheduled.end(), [&](const ScheduledSeq& s) { return s.seq == seq; });
      if (done || seq->status != SeqStatus::kRunning) continue;
      const int32_t num_new = cap_new(seq, std::min(seq->num_uncomputed_tokens(), budget));
      const int32_t begin = seq->num_cache_tokens(), end = begin + num_new;
      if (num_new <= 0 || compresses(seq, num_new) || !kv_.can_write(seq->seq_id, begin, end)) continue;
      PAGODA_CHECK(kv_.allocate_for_write(seq->seq_id, begin, end, &out.cow));
      out.scheduled.push_back(slice(seq, num_new, seq->num_computed_tokens + num_new == seq->num_tokens() ? 1 : 0));
      budget -= num_new;
    }
  }
  out.num_batched_tokens = step_budget - budget;
  return out;
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const auto& s : out.scheduled) {
    s.seq->num_computed_tokens += s.num_new_tokens - s.num_draft_tokens;
    if (s.compress_to > 0) {
      // The model kept compress_to tokens per KV head in the first slots.
      num_evicted_tokens_ += s.seq->num_cache_tokens() - s.compress_to;
      s.seq->num_evicted += s.seq->num_cache_tokens() - s.compress_to;
      s.seq->kv_compressed = true;
      kv_.set_uncacheable(s.seq->seq_id);  // its rows no longer sit at their tokens' places
      kv_.truncate(s.seq->seq_id, s.compress_to);
    }
    kv_.set_num_tokens(s.seq->seq_id, s.seq->num_cache_tokens());
    kv_.cache_computed(s.seq->seq_id, s.seq->tokens, s.seq->num_computed_tokens);
    kv_.release_window(s.seq->seq_id, s.seq->num_computed_tokens);  // drafts sit past it: safe before accepting
  }
}

void Scheduler::accept_drafts(Sequence* seq, int32_t num_accepted) {
  PAGODA_CHECK(seq->status == SeqStatus::kRunning && num_accepted >= 0);
  seq->num_computed_tokens += num_accepted;
  PAGODA_CHECK(seq->num_computed_tokens <= seq->num_tokens());
  kv_.truncate(seq->seq_id, seq->num_cache_tokens());
  kv_.set_num_tokens(seq->seq_id, seq->num_cache_tokens());
  kv_.cache_computed(seq->seq_id, seq->tokens, seq->num_computed_tokens);
  kv_.release_window(seq->seq_id, seq->num_computed_tokens);
}

void Scheduler::finish(Sequence* seq, FinishReason reason) {
  seq->status = SeqStatus::kFinished;
  seq->finish_reason = reason;
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  kv_.cache_finished(seq->seq_id, seq->tokens);
  kv_.free(seq->seq_id);
}

}  // namespace pagoda
