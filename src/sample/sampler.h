// Per-sequence sampler: logits processing and token selection with vLLM
// semantics.
//
// Processing order for one row of logits:
//   1. logit_bias (added; -inf bans a token)
//   2. penalties: repetition (prompt+output), then frequency/presence (output)
//   3. greedy (temperature < kGreedyTemperature): argmax, ties -> lowest id.
//      Otherwise: divide by temperature, keep the top_k best (exactly k; ties
//      at the boundary go to the lowest ids), then the smallest prefix (by
//      descending probability, ties by id) whose renormalised cumulative
//      probability is >= top_p (within kTopPTolerance), then drop tokens with
//      probability < min_p * max probability; sample from the renormalised
//      remainder.
//
// Logprobs (params.logprobs >= 0) are the log-softmax of the logits after
// steps 1-2 and BEFORE temperature and truncation (no top_k/top_p/min_p): they
// describe the model's (penalised) distribution, not the sampling one. With
// logprobs == -1, SampleResult::logprob is left 0 and no softmax over the
// vocabulary is computed for greedy requests.
//
// Degenerate rows: NaN logits are treated as -inf. If every token is -inf,
// the result is token 0 (the lowest id of an all-tied row), logprob -inf.
//
// Scratch buffers (candidates, penalty counts, logits copies) are
// thread_local and reused across calls and samplers, so a Sampler is only its
// parameters and RNG (memory stays O(threads x vocab), not O(sequences x
// vocab)), and once warm sampling allocates only SampleResult::top. A Sampler
// is not thread-safe; use one per sequence.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "sample/logits_processors.h"
#include "sample/sampling_params.h"

namespace pagoda {

// top_p keeps the prefix once its cumulative probability reaches top_p minus
// this, so float rounding cannot add a token at an exact boundary.
inline constexpr double kTopPTolerance = 1e-6;

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;           // chosen token; 0 when params.logprobs == -1
  std::vector<TokenLogprob> top;  // params.logprobs best, descending
};

class Sampler {
 public:
  // `params` must have passed params.validate(vocab_size) (checked: aborts
  // otherwise). The RNG is seeded from params.seed, or (unseeded) from a
  // process-wide random_device draw and a counter: distinct per sampler.
  Sampler(const SamplingParams& params, int32_t vocab_size);

  // logits: vocab_size floats, modified in place (pass a scratch copy).
  // prompt/output: the sequence's token history, for penalties.
  SampleResult sample(float* logits, std::span<const int32_t> prompt, std::span<const int32_t> output);

  // Exact verification of one proposed token (speculative decoding, the
  // rejection rule of Leviathan et al. / Chen et al.) for a deterministic
  // proposer (q one-hot on `draft`): processes the logits like sample();
  // accepts the draft with probability p(draft), otherwise draws from the
  // residual max(0, p - q) renormalised. Either way the returned token is
  // distributed exactly as sample()'s. Greedy consumes no randomness.
  // Logprobs as in sample().
  SampleResult verify_draft(float* logits, std::span<const int32_t> prompt, std::span<const int32_t> output,
                            int32_t draft, bool* accepted);
  // The same for a draft drawn from the distribution q (vocab_size
  // probabilities, e.g. a draft model's; empty: one-hot on `draft`): accepts
  // with probability min(1, p(draft) / q(draft)), otherwise draws from
  // norm(max(0, p - q)).
  SampleResult verify_draft(float* logits, std::span<const int32_t> prompt, std::span<const int32_t> output,
                            int32_t draft, std::span<const float> q, bool* accepted);

  // The exact distribution `sample` draws from for these logits (one-hot for
  // greedy), written to probs (resized to vocab_size, sums to 1). logits are
  // not modified. Consumes no randomness.
  void probabilities(const float* logits, std::span<const int32_t> prompt, std::span<const int32_t> output,
                     std::vector<float>& probs);

  // Uniform double in [0, 1) from this sampler's RNG (53 random bits; the
  // same on every platform for a given seed).
  double next_uniform();
  // Draws an index with probability proportional to weights (need not sum
  // to 1) with this sampler's RNG, e.g. from the residual distribution of a
  // rejection sampler. Weights that are not finite and > 0 count as 0.
  // Returns -1 if no weight is usable.
  int32_t sample_from_weights(std::span<const float> weights);

  const SamplingParams& params() const { return params_; }
  int32_t vocab_size() const { return vocab_size_; }

 private:
  void process_logits(float* logits, std::span<const int32_t> prompt, std::span<const int32_t> output);
  // Fills the thread's candidate list with the kept tokens and their weights
  // (one candidate of weight 1 for greedy); returns the total weight.
  double build_distribution(const float* logits);
  int32_t draw(double total);
  // The chosen token's logprob and the top alternatives, when requested.
  void fill_logprobs(const float* logits, SampleResult& result) const;

  SamplingParams params_;
  int32_t vocab_size_;
  std::mt19937_64 rng_;
};

// Convenience form of Sampler::probabilities for one-off use (allocates a
// Sampler; prefer a long-lived Sampler on hot paths).
void compute_probs(const SamplingParams& params, int32_t vocab_size, const float* logits,
                   std::span<const int32_t> prompt, std::span<const int32_t> output, std::vector<float>& out_probs);

}  // namespace pagoda
