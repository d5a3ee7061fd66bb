#include "sample/logits_processors.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pagoda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool in_vocab(int32_t token, int32_t vocab_size) { return token >= 0 && token < vocab_size; }

// NaN compares false with everything; map it to -inf so orderings are total.
float clean(float logit) { return std::isnan(logit) ? -kInf : logit; }

// Strict "a ranks before b": larger logit, then lower id.
bool ranks_before(const TokenLogprob& a, const TokenLogprob& b) {
  return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
}

// Largest logit, ignoring NaN (-inf if none); eight independent lanes break
// the dependency chain of a single running max.
float max_logit_of(const float* logits, int32_t n) {
  constexpr int kLanes = 8;
  float acc[kLanes];
  for (float& a : acc) a = -kInf;
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] = logits[i + j] > acc[j] ? logits[i + j] : acc[j];
  }
  float m = -kInf;
  for (; i < n; ++i) m = logits[i] > m ? logits[i] : m;
  for (float a : acc) m = a > m ? a : m;
  return m;
}

void apply_repetition(float penalty, std::span<const int32_t> tokens, float* logits, int32_t vocab_size,
                      std::vector<int32_t>& seen) {
  for (int32_t t : tokens) {
    if (!in_vocab(t, vocab_size) || seen[t]) continue;
    seen[t] = 1;
    logits[t] = logits[t] > 0.0f ? logits[t] / penalty : logits[t] * penalty;
  }
}

void clear_marks(std::span<const int32_t> tokens, int32_t vocab_size, std::vector<int32_t>& seen) {
  for (int32_t t : tokens) {
    if (in_vocab(t, vocab_size)) seen[t] = 0;
  }
}

}  // namespace

void apply_logit_bias(std::span<const std::pair<int32_t, float>> bias, float* logits, int32_t vocab_size) {
  for (const auto& [token, value] : bias) {
    if (in_vocab(token, vocab_size)) logits[token] += value;
  }
}

void apply_penalties(const SamplingParams& params, std::span<const int32_t> prompt, std::span<const int32_t> output,
                     float* logits, int32_t vocab_size, std::vector<int32_t>& scratch) {
  if (!params.has_penalties()) return;
  if (scratch.size() < static_cast<size_t>(vocab_size)) scratch.resize(vocab_size, 0);

  if (params.repetition_penalty != 1.0f) {
    apply_repetition(params.repetition_penalty, prompt, logits, vocab_size, scratch);
    apply_repetition(params.repetition_penalty, output, logits, vocab_size, scratch);
    clear_marks(prompt, vocab_size, scratch);
    clear_marks(output, vocab_size, scratch);
  }
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    for (int32_t t : output) {
      if (in_vocab(t, vocab_size)) ++scratch[t];
    }
    // The first visit of each distinct token applies its penalty and zeroes
    // the count, which both dedups and restores the all-zero invariant.
    for (int32_t t : output) {
      if (!in_vocab(t, vocab_size) || scratch[t] == 0) continue;
      logits[t] -= params.frequency_penalty * static_cast<float>(scratch[t]) + params.presence_penalty;
      scratch[t] = 0;
    }
  }
}

int32_t argmax_logit(const float* logits, int32_t vocab_size) {
  int32_t best = -1;
  float best_logit = -kInf;
  for (int32_t i = 0; i < vocab_size; ++i) {
    if (logits[i] > best_logit) {  // strict: keeps the lowest id on ties; skips NaN
      best_logit = logits[i];
      best = i;
    }
  }
  return best;
}

float log_sum_exp(const float* logits, int32_t vocab_size) {
  const float max_logit = max_logit_of(logits, vocab_size);
  if (std::isinf(max_logit)) return max_logit;  // all -inf, or some +inf
  double sum = 0.0;
  for (int32_t i = 0; i < vocab_size; ++i) {
    sum += std::exp(clean(logits[i]) - max_logit);  // exp(-inf) == 0
  }
  return max_logit + static_cast<float>(std::log(sum));
}

float log_softmax_value(float logit, float lse) {
  logit = clean(logit);
  if (lse == -kInf || logit == -kInf) return -kInf;
  if (lse == kInf) return logit == kInf ? 0.0f : -kInf;
  return logit - lse;
}

void top_n_logprobs(const float* logits, int32_t vocab_size, int32_t n, float lse, std::vector<TokenLogprob>& out) {
  out.clear();
  n = std::min(n, vocab_size);
  if (n <= 0) return;
  // Bounded heap whose front is the worst kept token; most tokens are
  // rejected by one comparison with it, so this is ~one pass for small n.
  for (int32_t i = 0; i < vocab_size; ++i) {
    TokenLogprob cand{i, clean(logits[i])};
    if (static_cast<int32_t>(out.size()) < n) {
      out.push_back(cand);
      std::push_heap(out.begin(), out.end(), ranks_before);
    } else if (ranks_before(cand, out.front())) {
      std::pop_heap(out.begin(), out.end(), ranks_before);
      out.back() = cand;
      std::push_heap(out.begin(), out.end(), ranks_before);
    }
  }
  std::sort_heap(out.begin(), out.end(), ranks_before);
  for (TokenLogprob& t : out) t.logprob = log_softmax_value(t.logprob, lse);
}

}  // namespace pagoda
