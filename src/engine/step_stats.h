// Engine counters: tokens computed and generated, time split between
// prefill- and decode-dominated steps, KV waste and prefix-cache hits.
#pragma once

#include <cstdint>

#include "sched/scheduler.h"

namespace pagoda {

struct EngineStats {
  int64_t num_steps = 0;
  int64_t num_prompt_tokens_computed = 0;
  int64_t num_decode_tokens_computed = 0;
  int64_t num_generated_tokens = 0;
  int64_t num_finished = 0;
  int32_t max_running_seqs = 0;  // most sequences one step ran
  double prefill_seconds = 0;    // steps whose batch was mostly prompt tokens
  double decode_seconds = 0;
  // Where steps' time goes: the forward pass (ModelRunner::execute), and
  // sampling / verifying with proposing and planning the next drafts. The
  // rest of a step is scheduling, a draft model's passes and bookkeeping.
  double execute_seconds = 0;
  double sample_seconds = 0;
  double kv_waste_sum = 0;               // summed over steps, for the mean
  int64_t num_prompt_tokens = 0;         // of requests admitted so far
  int64_t num_cached_prompt_tokens = 0;  // of those, served by the prefix cache
  // Speculative decoding: verification steps, drafts verified and accepted.
  int64_t num_spec_verify_steps = 0;
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_draft_tokens = 0;
  int64_t num_spec_rejections = 0;  // verification steps whose accepted run a refused draft ended
  int64_t num_spec_proposals = 0;   // drafts asked of the proposer (one sequence, one step)
  double spec_draft_seconds = 0;    // spent proposing drafts
  double spec_verify_seconds = 0;   // steps that verified at least one draft
  // Requests with latency targets that finished, and those that met both
  // (TTFT and mean time per output token): goodput's numerator.
  int64_t num_slo_requests = 0;
  int64_t num_slo_met = 0;
  // Structured output: token masks computed and the time they took.
  int64_t num_grammar_masks = 0;
  double grammar_mask_seconds = 0;
  double spec_acceptance_rate() const {
    return num_draft_tokens ? static_cast<double>(num_accepted_draft_tokens) / num_draft_tokens : 0.0;
  }
  // Tokens emitted per verification step: accepted drafts plus the target's own.
  double spec_mean_accepted_len() const {
    return num_spec_verify_steps
               ? static_cast<double>(num_accepted_draft_tokens + num_spec_verify_steps) / num_spec_verify_steps
               : 0.0;
  }
  double prefix_cache_hit_rate() const {
    return num_prompt_tokens ? static_cast<double>(num_cached_prompt_tokens) / num_prompt_tokens : 0.0;
  }
};

class StepStats {
 public:
  // A request's first scheduling (its prompt and cached-prefix sizes).
  void record_admission(const Sequence& seq);
  // A finished step: `out` after Scheduler::on_step_done.
  void record_step(const SchedulerOutput& out, int64_t num_generated, double seconds, double kv_waste);
  void record_finished_request() { ++stats_.num_finished; }
  void record_slo(bool met) {
    ++stats_.num_slo_requests;
    if (met) ++stats_.num_slo_met;
  }
  void record_draft_seconds(double seconds) { stats_.spec_draft_seconds += seconds; }
  void record_phases(double execute_seconds, double sample_seconds) {
    stats_.execute_seconds += execute_seconds;
    stats_.sample_seconds += sample_seconds;
  }
  void record_proposal() { ++stats_.num_spec_proposals; }
  void record_grammar_mask(double seconds) {
    ++stats_.num_grammar_masks;
    stats_.grammar_mask_seconds += seconds;
  }
  void record_verification(int32_t num_drafts, int32_t num_accepted, bool rejected) {
    ++stats_.num_spec_verify_steps;
    stats_.num_draft_tokens += num_drafts;
    stats_.num_accepted_draft_tokens += num_accepted;
    if (rejected) ++stats_.num_spec_rejections;
  }
  const EngineStats& stats() const { return stats_; }

 private:
  EngineStats stats_;
};

}  // namespace pagoda
