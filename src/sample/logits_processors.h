// Building blocks of the sampler that act on one row of logits: logit bias,
// repetition/presence/frequency penalties, argmax and log-softmax helpers.
// All treat NaN logits like -inf (never chosen) and skip out-of-range token
// ids in histories (a bad id is the caller's bug, not worth aborting a batch).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "sample/sampling_params.h"

namespace pagoda {

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// logits[token] += bias for each entry (repeated tokens add up).
void apply_logit_bias(std::span<const std::pair<int32_t, float>> bias, float* logits, int32_t vocab_size);

// Applies, in this order (as vLLM does):
//   repetition: each distinct token of prompt+output:
//               logit > 0 ? logit / repetition_penalty : logit * repetition_penalty
//   frequency/presence: each distinct token of output seen c times:
//               logit -= frequency_penalty * c + presence_penalty
// `scratch` must hold vocab_size zeros (or be empty: it is then sized); it is
// left all-zero, so one buffer serves any number of calls in O(history).
void apply_penalties(const SamplingParams& params, std::span<const int32_t> prompt, std::span<const int32_t> output,
                     float* logits, int32_t vocab_size, std::vector<int32_t>& scratch);

// Index of the largest logit, lowest id on ties; -1 if no logit is > -inf.
int32_t argmax_logit(const float* logits, int32_t vocab_size);

// log(sum(exp(logits))) ignoring NaN; -inf if all are -inf, +inf if any is.
float log_sum_exp(const float* logits, int32_t vocab_size);

// log-softmax value of `logit` given log_sum_exp of the row, never NaN:
// -inf for a -inf/NaN logit or an all -inf row; with +inf logits in the row,
// 0 for a +inf logit and -inf for the rest.
float log_softmax_value(float logit, float lse);

// The n best tokens by logit (descending, lowest id first on ties) with their
// log-softmax values; n is clamped to vocab_size. Reuses `out`'s storage.
void top_n_logprobs(const float* logits, int32_t vocab_size, int32_t n, float lse, std::vector<TokenLogprob>& out);

}  // namespace pagoda
