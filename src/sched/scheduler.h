// The step scheduler (Orca iteration-level batching, Sarathi-Serve chunked
// prefill, vLLM V1 token budget): each step hands out a token budget to
// running sequences first (decodes before partial prefills, so a long prompt
// never stalls them), then to waiting ones, and preempts when KV blocks run
// out.
#pragma once

#include <algorithm>
#include <atomic>
#include <deque>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "sched/kv_policy.h"
#include "sched/sequence.h"

namespace pagoda {

enum class SchedPolicy {
  kFcfs,      // arrival order
  kPriority,  // lower `priority` first, then arrival
  kSjf,       // shortest remaining prompt first, FCFS once waited > aging bound
  kLpm,       // longest cached prefix first (SGLang), FCFS once waited > aging bound
  kSlo,       // least slack to the TTFT deadline first, budget sized by TPOT targets
};

// Predicted seconds of a step that computes n tokens: fixed + per_token * n
// (measured at start-up by the engine for the SLO policy).
struct StepTimeEstimate {
  double fixed_s = 0;
  double per_token_s = 0;
  double seconds(int64_t num_tokens) const { return fixed_s + per_token_s * static_cast<double>(num_tokens); }
};

enum class PreemptMode {
  kRecompute,  // drop the K/V, re-prefill prompt + output later
  kSwap,       // copy the blocks to the host tier and back
};

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 2048;  // token budget per step
  int32_t max_num_seqs = 256;             // running sequences at once
  SchedPolicy policy = SchedPolicy::kFcfs;
  double sjf_aging_s = 10.0;  // SJF/LPM/SLO: waiting longer than this goes first
  // SLO policy: the step-time model and the TTFT deadline given to requests
  // without one (they are ordered with the others, never starved).
  StepTimeEstimate step_time;
  double slo_default_ttft_s = 5.0;
  PreemptMode preempt_mode = PreemptMode::kRecompute;
  // The KV policy of sequences that do not bring their own (the server's).
  KvPolicy kv_policy;
};

struct ScheduledSeq {
  Sequence* seq = nullptr;
  // Compute positions [num_computed, num_computed + num_new_tokens); the
  // last num_draft_tokens of them are the sequence's draft tokens.
  int32_t num_new_tokens = 0;
  // Trailing positions of this slice whose logits are wanted: 1 when the
  // step reaches the end of the known tokens (sample the next one), 0 for a
  // prefill chunk that does not.
  int32_t num_logits = 0;
  int32_t num_draft_tokens = 0;  // drafts to verify: num_logits = 1 + num_draft_tokens
  // RoPE position of cache position p: p + rope_offset (the tokens evicted
  // before it under SnapKV; 0 when eviction shifts positions, StreamingLLM).
  int32_t rope_offset = 0;
  // SnapKV / H2O: compress the sequence's cache to this many tokens per KV
  // head after this slice (0: no).
  int32_t compress_to = 0;
  bool accumulate_scores = false;  // H2O: add this slice's attention to the rows' scores
  // With compress_to: the recent (H2O) or observation (SnapKV) window, and
  // SnapKV's pooling width.
  int32_t kv_window = 0, kv_pool = 1;
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> scheduled;
  std::vector<Sequence*> preempted;
  // Streaming eviction, run first (on the blocks as the previous step left
  // them): copies of shared blocks to shift, then the key re-rotations.
  std::vector<BlockCopy> evict_cow;
  std::vector<KeyShift> key_shifts;
  std::vector<BlockCopy> swap_out;      // device -> host copies to run before the step
  std::vector<BlockCopy> swap_in;       // host -> device copies to run before the step
  std::vector<BlockCopy> cow;           // device block copies (copy-on-write), after swaps
  std::vector<StateCopy> state_copies;  // recurrent states restored by prefix hits, before the forward
  int32_t num_batched_tokens = 0;
  bool empty() const { return scheduled.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KVCacheManager& kv);

  void add(Sequence* seq);
  // A sequence forked from a running one (parallel sampling): already holds
  // its blocks and joins the running set directly.
  void add_running(Sequence* seq);
  // `now` is the engine clock in seconds (for SJF aging).
  SchedulerOutput schedule(double now = 0);
  // After the step ran: advances num_computed_tokens of every scheduled seq
  // over its known tokens (drafts are not known tokens yet).
  void on_step_done(const SchedulerOutput& out);
  // Verification accepted the first num_accepted drafts of a running
  // sequence, now appended to its tokens: their K/V, written this step,
  // counts as computed. Then rolls back the rest: blocks wholly past the
  // computed tokens are freed and nothing of them reaches the prefix cache.
  void accept_drafts(Sequence* seq, int32_t num_accepted);
  // Removes a sequence from the queues and frees its KV blocks.
  void finish(Sequence* seq, FinishReason reason);

  // Changes the token budget of later steps (e.g. token by token once a
  // streamed evaluation has filled its cache).
  void set_max_num_batched_tokens(int32_t n) { config_.max_num_batched_tokens = n; }
  void set_step_time(StepTimeEstimate t) { config_.step_time = t; }
  // SLO policy: a step of num_tokens batched tokens took `seconds` (from
  // its start to the next step's, what a decode's TPOT sees). The ratio to
  // the step-time model, averaged over recent steps (each weighs 5% less
  // with every new one, clamped to [0.5, 4]), scales the model's
  // predictions: a machine slower than at start-up (a noisy neighbour)
  // gets smaller TPOT budgets and longer predicted prefills.
  void observe_step(int32_t num_tokens, double seconds);
  double step_time_scale() const { return step_time_scale_.load(std::memory_order_relaxed); }

  // SLO policy: predicted seconds until seq's first token if it ran alone
  // from now (its uncomputed tokens in budget-sized steps).
  double predicted_prefill_s(const Sequence* seq) const { return predicted_prefill_s(seq->num_uncomputed_tokens()); }
  // Prompt tokens still to compute: waiting sequences and unfinished
  // prefills (what a new request queues behind).
  int64_t num_queued_prefill_tokens() const;
  // Seconds to compute `num_tokens` prompt tokens in budget-sized steps
  // (the step-time model and its observed scale; safe from any thread).
  double predicted_prefill_s(int64_t num_tokens) const;

  int32_t num_waiting() const;
  int32_t num_swapped() const;
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Cached tokens the KV policies dropped (StreamingLLM, SnapKV, H2O; per
  // sequence, not per head), since start.
  int64_t num_evicted_tokens() const { return num_evicted_tokens_; }
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  const SchedulerConfig& config() const { return config_; }

 private:
  // True if a orders before b in the waiting queue under the policy.
  bool waits_before(const Sequence* a, const Sequence* b, double now) const;
  Sequence* pick_victim() const;
  // SLO policy: how long before its TTFT deadline seq's prefill would end.
  double slack_s(const Sequence* seq, double now) const;
  // SLO policy: the step's token budget that keeps every running decode
  // with a TPOT target within it (at least one token per decode).
  int32_t tpot_budget(int32_t budget) const;
  // Written by the engine thread, read by predicted_prefill_s, which
  // AsyncEngine::submit calls from request threads (--slo-reject).
  std::atomic<double> step_time_scale_{1.0};
  void preempt(Sequence* seq, SchedulerOutput& out);
  // Admits a waiting sequence within `budget` tokens when its blocks fit:
  // swaps it in, or shares its cached prefix and allocates the rest. Returns
  // the tokens to compute this step; 0 (and no change) when it does not fit.
  int32_t admit(Sequence* seq, int32_t budget, SchedulerOutput& out);
  // Streaming: drops the oldest non-sink blocks while the window keeps at
  // least `window` tokens without them (out.evict_cow, out.key_shifts).
  void evict_streaming(Sequence* seq, SchedulerOutput& out);
  // Tokens a step may compute for a sequence: n, at most `window` when
  // streaming and `budget` under H2O; under SnapKV a prompt chunk leaves
  // either nothing or at least the observation window for the last chunk.
  int32_t cap_new(const Sequence* seq, int32_t n) const;
  // The scheduled slice of `num_new` tokens (cache positions from
  // num_cache_tokens()), with its RoPE offset and SnapKV compression.
  ScheduledSeq slice(Sequence* seq, int32_t num_new, int32_t num_logits, int32_t num_draft = 0) const;
  // Whether a slice of num_new tokens compresses the cache: SnapKV when it
  // ends the sequence's prompt and leaves more than the budget, H2O when the
  // cache reaches budget + a block (then the whole table is written: every
  // shared block is copied first).
  bool compresses(const Sequence* seq, int32_t num_new) const;

  SchedulerConfig config_;
  KVCacheManager& kv_;
  std::vector<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  int64_t num_preemptions_ = 0;
  int64_t num_evicted_tokens_ = 0;
};

}  // namespace pagoda
