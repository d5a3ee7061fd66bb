#include "sample/sampling_params.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace pagoda {
namespace {

std::string fmt(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
  return buf;
}

Status bad(const std::string& field, const std::string& value, const std::string& rule) {
  return invalid_argument(field + " must be " + rule + ", got " + value);
}

}  // namespace

Status SamplingParams::validate(int32_t vocab_size) const {
  if (vocab_size <= 0) {
    return invalid_argument("vocab_size must be positive, got " + std::to_string(vocab_size));
  }
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return bad("temperature", fmt(temperature), "a finite number >= 0 (0 means greedy)");
  }
  if (top_k < -1) {
    return bad("top_k", std::to_string(top_k), ">= 1, or 0 / -1 to disable");
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return bad("top_p", fmt(top_p), "in (0, 1]");
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return bad("min_p", fmt(min_p), "in [0, 1]");
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f) {
    return bad("repetition_penalty", fmt(repetition_penalty), "a finite number > 0 (1 disables)");
  }
  if (!(std::fabs(presence_penalty) <= kMaxAbsPresencePenalty)) {
    return bad("presence_penalty", fmt(presence_penalty), "in [-2, 2]");
  }
  if (!(std::fabs(frequency_penalty) <= kMaxAbsFrequencyPenalty)) {
    return bad("frequency_penalty", fmt(frequency_penalty), "in [-2, 2]");
  }
  if (logprobs < -1 || logprobs > kMaxLogprobs) {
    return bad("logprobs", std::to_string(logprobs), "in [0, " + std::to_string(kMaxLogprobs) + "], or -1 for none");
  }
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || token >= vocab_size) {
      return invalid_argument("logit_bias token id " + std::to_string(token) + " is out of range [0, " +
                              std::to_string(vocab_size) + ")");
    }
    if (std::isnan(bias) || bias == INFINITY) {
      return invalid_argument("logit_bias for token " + std::to_string(token) +
                              " must be finite or -inf (to ban it), got " + fmt(bias));
    }
  }
  return Status::ok();
}

}  // namespace pagoda
