// A request's sequence as the scheduler sees it: its tokens, how many of them
// have K/V in the cache, and its lifecycle state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "sched/kv_policy.h"

namespace pagoda {

enum class SeqStatus { kWaiting, kRunning, kPreempted, kFinished };

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };

std::string_view finish_reason_name(FinishReason r);  // "stop", "length", ...

struct Sequence {
  RequestId request_id;
  int32_t index = 0;  // choice index within its request (n > 1)
  SeqId seq_id;
  std::vector<int32_t> tokens;  // prompt followed by output
  // Proposed continuation (speculative decoding) for positions num_tokens()
  // onward: scheduled after the last token as extra positions to verify,
  // never part of `tokens` until accepted.
  std::vector<int32_t> draft_tokens;
  // When the drafts form a tree (lookahead): draft i's parent, an earlier
  // draft or -1 for the last token; empty for a chain. Draft i sits at cache
  // position num_cache_tokens() + i and at RoPE position (that of the last
  // token) + its depth, and sees only its ancestors (tree attention).
  std::vector<int32_t> draft_parents;
  // Draft model (spec/draft_model.h): the last cache positions whose K/V the
  // draft model has not computed yet, caught up when the sequence drafts.
  int32_t num_draft_lag = 0;
  int32_t num_prompt_tokens = 0;
  int32_t num_computed_tokens = 0;  // tokens whose K/V was computed (and is cached, unless evicted)
  // Computed tokens dropped from the middle by StreamingLLM eviction: token
  // i >= sinks + num_evicted sits at cache position i - num_evicted (its
  // RoPE position too); the KV manager's table holds cache positions.
  int32_t num_evicted = 0;
  // Its KV policy; the scheduler's default when unset at add().
  std::optional<KvPolicy> kv_policy;
  bool kv_compressed = false;    // SnapKV compressed its prompt (once per computation)
  int32_t max_total_tokens = 0;  // prompt + max output tokens, capped by the context
  int32_t priority = 0;          // lower value runs first (vLLM convention)
  double arrival_time = 0;
  // Latency targets (seconds; 0: none): the first token by arrival_time +
  // ttft_s, then one token every tpot_s (SchedPolicy::kSlo).
  double slo_ttft_s = 0;
  double slo_tpot_s = 0;
  SeqStatus status = SeqStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t num_preemptions = 0;
  bool swapped = false;           // preempted with its K/V in the host tier
  int32_t num_cached_tokens = 0;  // prompt tokens served by the prefix cache (last admission)
  int32_t sort_key = 0;           // scratch for the scheduler's policy ordering

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  int32_t num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
  // Tokens with K/V in the cache (the KV manager's positions).
  int32_t num_cache_tokens() const { return num_computed_tokens - num_evicted; }
  bool is_finished() const { return status == SeqStatus::kFinished; }
  // Keeps the first n drafts (a prefix of a tree is a tree: parents come first).
  void resize_drafts(size_t n) {
    draft_tokens.resize(n);
    if (!draft_parents.empty()) draft_parents.resize(n);
  }
  void clear_drafts() { resize_drafts(0); }
};

}  // namespace pagoda
