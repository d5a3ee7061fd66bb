#include "engine/step_stats.h"

#include <algorithm>

namespace pagoda {

void StepStats::record_admission(const Sequence& seq) {
  stats_.num_prompt_tokens += seq.num_prompt_tokens;
  stats_.num_cached_prompt_tokens += seq.num_cached_tokens;
}

void StepStats::record_step(const SchedulerOutput& out, int64_t num_generated, double seconds, double kv_waste) {
  int64_t num_prompt = 0;
  bool verifies = false;
  for (const ScheduledSeq& s : out.scheduled) {
    verifies |= s.num_draft_tokens > 0;
    const int32_t first = s.seq->num_computed_tokens - s.num_new_tokens;
    num_prompt += std::max(0, std::min(s.seq->num_prompt_tokens, s.seq->num_computed_tokens) - first);
  }
  ++stats_.num_steps;
  stats_.max_running_seqs = std::max(stats_.max_running_seqs, static_cast<int32_t>(out.scheduled.size()));
  stats_.num_prompt_tokens_computed += num_prompt;
  stats_.num_decode_tokens_computed += out.num_batched_tokens - num_prompt;
  stats_.num_generated_tokens += num_generated;
  stats_.kv_waste_sum += kv_waste;
  (num_prompt * 2 > out.num_batched_tokens ? stats_.prefill_seconds : stats_.decode_seconds) += seconds;
  if (verifies) stats_.spec_verify_seconds += seconds;
}

}  // namespace pagoda
