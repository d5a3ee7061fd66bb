// What a client asks of the engine, and what it gets back each step.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "kv/kv_tiers.h"
#include "sample/sampler.h"
#include "sched/sequence.h"

namespace pagoda {

struct RequestSpec {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int32_t max_tokens = 16;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings (not included in the text)
  int32_t priority = 0;           // lower runs first under the priority policy
  // Latency targets in seconds (0: none): the --policy slo scheduler orders
  // and budgets by them, EngineConfig::slo_reject sheds what cannot make the
  // TTFT target, and requests meeting both count in the goodput.
  double slo_ttft_s = 0;
  double slo_tpot_s = 0;
  // Its own KV policy instead of the server's (Engine::resolve_kv_policy).
  std::optional<KvPolicyRequest> kv_policy;
  int32_t n = 1;  // parallel samples: forked after the prompt, sharing its blocks
  // Beam search (deterministic; sampling parameters are ignored): keeps
  // beam_width hypotheses by cumulative log-probability, forking and freeing
  // beams that share their history blocks; returns the n best (n <= width).
  bool use_beam_search = false;
  int32_t beam_width = 1;
  float length_penalty = 1.0f;  // score = cum_logprob / length^length_penalty
  // Structured output: every choice's text is a sentence of this grammar
  // (tokens it forbids are masked before sampling; an end token is allowed
  // once the text is complete). Null: unconstrained.
  std::shared_ptr<const grammar::Grammar> grammar;
  // Prefill/decode disaggregation (an engine with EngineConfig::kv_export):
  // the final output carries the prompt's whole KV blocks (kv_export).
  bool export_kv = false;
};

// Per-request latency figures, seconds on the engine clock.
struct RequestTiming {
  double arrival = 0;
  double first_scheduled = -1;
  double first_token = -1;
  double last_token = -1;
  double queue_time() const { return first_scheduled < 0 ? 0 : first_scheduled - arrival; }
  double ttft() const { return first_token < 0 ? 0 : first_token - arrival; }
};

struct RequestOutput {
  RequestId id;
  int32_t index = 0;              // which of the n choices
  bool request_finished = false;  // every choice has finished
  std::vector<int32_t> new_tokens;
  std::vector<SampleResult> samples;  // one per new token (logprobs)
  std::string text;                   // UTF-8-complete text delta, stop strings cut
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;  // set when finish_reason == kError
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  int32_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache
  RequestTiming timing;
  // RequestSpec::export_kv: the prompt's whole blocks, on the request's last output.
  std::shared_ptr<const KVBlockExport> kv_export;
};

}  // namespace pagoda
