// Per-request sampling parameters (vLLM / OpenAI semantics) and their
// validation. Validate once when a request arrives; the Sampler assumes valid
// parameters.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/status.h"

namespace pagoda {

// Temperatures below this are treated as greedy (argmax), as in vLLM:
// dividing logits by a tiny temperature only amplifies rounding noise.
inline constexpr float kGreedyTemperature = 1e-5f;
// Most top-n logprobs a request may ask for (vLLM's default max_logprobs and
// OpenAI's top_logprobs limit).
inline constexpr int32_t kMaxLogprobs = 20;
inline constexpr float kMaxAbsPresencePenalty = 2.0f;
inline constexpr float kMaxAbsFrequencyPenalty = 2.0f;

struct SamplingParams {
  float temperature = 1.0f;         // < kGreedyTemperature (e.g. 0) => greedy
  int32_t top_k = 0;                // <= 0 disabled; > vocab behaves as vocab
  float top_p = 1.0f;               // (0, 1]; 1 disables
  float min_p = 0.0f;               // [0, 1]; 0 disables
  float repetition_penalty = 1.0f;  // > 0; over prompt+output tokens (HF/vLLM)
  float presence_penalty = 0.0f;    // [-2, 2]; over output tokens (OpenAI)
  float frequency_penalty = 0.0f;   // [-2, 2]; over output tokens (OpenAI)
  std::optional<uint64_t> seed;     // same seed => same samples
  int32_t logprobs = -1;            // -1 none; 0 chosen only; n > 0 also top-n
  // (token, bias) added to the logits. -inf bans a token; repeated tokens add.
  std::vector<std::pair<int32_t, float>> logit_bias;

  bool is_greedy() const { return temperature < kGreedyTemperature; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }

  // Ok, or kInvalidArgument naming the offending field and its value.
  Status validate(int32_t vocab_size) const;
};

}  // namespace pagoda
