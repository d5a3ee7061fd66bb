#include "sample/sampler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace pagoda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// top_p orders the best candidates in chunks of this size, growing 4x.
constexpr size_t kTopPFirstChunk = 256;
// top_k up to this selects with a bounded heap instead of nth_element.
constexpr int32_t kHeapTopK = 128;

// Per-thread scratch shared by all samplers on the thread (see sampler.h).
struct Scratch {
  std::vector<int32_t> penalty_counts;  // all-zero between calls
  std::vector<float> logits;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

struct Candidate {
  float logit;
  float weight;  // exp((logit - max) / temperature), unnormalised
  int32_t token;
};

// Strict total order: larger logit first, then lower id.
bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
}

std::vector<Candidate>& candidate_buffer() {
  thread_local std::vector<Candidate> v;
  return v;
}

// Appends every token with logit > -inf (NaN excluded), keeping only the
// top_k best when top_k > 0; returns the largest logit (-inf if none).
float collect_top_k(const float* logits, int32_t vocab_size, int32_t top_k, std::vector<Candidate>& cands) {
  float max_logit = -kInf;
  for (int32_t i = 0; i < vocab_size; ++i) {
    const float l = logits[i];
    if (l > -kInf) {
      cands.push_back({l, 0.0f, i});
      max_logit = std::max(max_logit, l);
    }
  }
  const size_t k = static_cast<size_t>(top_k);
  if (top_k > 0 && k < cands.size()) {
    std::nth_element(cands.begin(), cands.begin() + k, cands.end(), ranks_before);
    cands.resize(k);  // the maximum is always among the kept
  }
  return max_logit;
}

// Same result as collect_top_k for small k, in about one pass and without a
// vocabulary-sized buffer: a bounded heap whose front is the worst kept.
float collect_top_k_by_heap(const float* logits, int32_t vocab_size, int32_t top_k, std::vector<Candidate>& cands) {
  const size_t k = static_cast<size_t>(top_k);
  for (int32_t i = 0; i < vocab_size; ++i) {
    const Candidate c{logits[i], 0.0f, i};
    if (!(c.logit > -kInf)) continue;
    if (cands.size() < k) {
      cands.push_back(c);
      std::push_heap(cands.begin(), cands.end(), ranks_before);
    } else if (ranks_before(c, cands.front())) {
      std::pop_heap(cands.begin(), cands.end(), ranks_before);
      cands.back() = c;
      std::push_heap(cands.begin(), cands.end(), ranks_before);
    }
  }
  float max_logit = -kInf;
  for (const Candidate& c : cands) max_logit = std::max(max_logit, c.logit);
  return max_logit;
}

// Keeps the smallest prefix in rank order whose weight reaches top_p of the
// total; returns the kept weight. Orders the candidates in growing chunks
// (nth_element, then sort the chunk) so peaked distributions never pay for a
// full sort.
double apply_top_p(float top_p, double total, std::vector<Candidate>& cands) {
  const double target = (static_cast<double>(top_p) - kTopPTolerance) * total;
  double cum = 0.0;
  size_t begin = 0;
  size_t chunk = kTopPFirstChunk;
  while (begin < cands.size()) {
    const size_t end = std::min(cands.size(), begin + chunk);
    const auto first = cands.begin() + begin, last = cands.begin() + end;
    if (end < cands.size()) std::nth_element(first, last, cands.end(), ranks_before);
    std::sort(first, last, ranks_before);
    for (size_t i = begin; i < end; ++i) {
      cum += cands[i].weight;
      if (cum >= target) {
        cands.resize(i + 1);
        return cum;
      }
    }
    begin = end;
    chunk *= 4;
  }
  return cum;
}

// Unseeded samplers: a process-wide random base (random_device, read once)
// plus a counter, through splitmix64's finalizer, so every sampler gets its
// own seed. A random_device per sampler cost ~9 us (opening it), a few
// percent of a small model's whole prefill.
uint64_t initial_seed(const SamplingParams& p) {
  if (p.seed) return *p.seed;
  static const uint64_t base = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  static std::atomic<uint64_t> counter{0};
  uint64_t z = base + (counter.fetch_add(1, std::memory_order_relaxed) + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size)
    : params_(params), vocab_size_(vocab_size), rng_(initial_seed(params)) {
  PAGODA_CHECK(params_.validate(vocab_size_).is_ok());
}

void Sampler::process_logits(float* logits, std::span<const int32_t> prompt, std::span<const int32_t> output) {
  apply_logit_bias(params_.logit_bias, logits, vocab_size_);
  apply_penalties(params_, prompt, output, logits, vocab_size_, scratch().penalty_counts);
}

double Sampler::build_distribution(const float* logits) {
  std::vector<Candidate>& cands = candidate_buffer();
  cands.clear();
  if (params_.is_greedy()) {
    int32_t best = argmax_logit(logits, vocab_size_);
    cands.push_back({best < 0 ? -kInf : logits[best], 1.0f, std::max(best, 0)});
    return 1.0;
  }

  const float max_logit = params_.top_k > 0 && params_.top_k <= kHeapTopK
                              ? collect_top_k_by_heap(logits, vocab_size_, params_.top_k, cands)
                              : collect_top_k(logits, vocab_size_, params_.top_k, cands);
  if (cands.empty()) {  // everything banned
    cands.push_back({-kInf, 1.0f, 0});
    return 1.0;
  }

  const float inv_temp = 1.0f / params_.temperature;
  double total = 0.0;
  if (max_logit == kInf) {  // overflowed logits: uniform over the +inf ones
    for (Candidate& c : cands) total += c.weight = c.logit == kInf ? 1.0f : 0.0f;
  } else {
    for (Candidate& c : cands) total += c.weight = std::exp((c.logit - max_logit) * inv_temp);
  }

  if (params_.top_p < 1.0f) total = apply_top_p(params_.top_p, total, cands);
  if (params_.min_p > 0.0f) {
    // The best candidate has weight exactly 1, so the threshold is min_p.
    const float threshold = params_.min_p;
    std::erase_if(cands, [&](const Candidate& c) { return c.weight < threshold; });
    total = 0.0;
    for (const Candidate& c : cands) total += c.weight;
  }
  return total;
}

int32_t Sampler::draw(double total) {
  const std::vector<Candidate>& cands = candidate_buffer();
  if (params_.is_greedy()) return cands.front().token;  // no randomness consumed
  const double u = next_uniform() * total;
  double cum = 0.0;
  for (const Candidate& c : cands) {
    cum += c.weight;
    if (u < cum) return c.token;
  }
  // Rounding put u past the last step: take the last token with weight.
  for (auto it = cands.rbegin(); it != cands.rend(); ++it) {
    if (it->weight > 0.0f) return it->token;
  }
  return cands.front().token;
}

void Sampler::fill_logprobs(const float* logits, SampleResult& result) const {
  if (params_.logprobs < 0) return;
  const float lse = log_sum_exp(logits, vocab_size_);
  result.logprob = log_softmax_value(logits[result.token], lse);
  if (params_.logprobs > 0) top_n_logprobs(logits, vocab_size_, params_.logprobs, lse, result.top);
}

SampleResult Sampler::sample(float* logits, std::span<const int32_t> prompt, std::span<const int32_t> output) {
  process_logits(logits, prompt, output);
  const double total = build_distribution(logits);
  SampleResult result;
  result.token = draw(total);
  fill_logprobs(logits, result);
  return result;
}

SampleResult Sampler::verify_draft(float* logits, std::span<const int32_t> prompt, std::span<const int32_t> output,
                                   int32_t draft, bool* accepted) {
  return verify_draft(logits, prompt, output, draft, {}, accepted);
}

SampleResult Sampler::verify_draft(float* logits, std::span<const int32_t> prompt, std::span<const int32_t> output,
                                   int32_t draft, std::span<const float> q, bool* accepted) {
  PAGODA_CHECK(q.empty() || static_cast<int32_t>(q.size()) == vocab_size_);
  process_logits(logits, prompt, output);
  const double total = build_distribution(logits);
  const std::vector<Candidate>& cands = candidate_buffer();
  SampleResult result;
  if (params_.is_greedy()) {
    // p is one-hot on the argmax: accept iff the draft is it (no randomness).
    result.token = cands.front().token;
    *accepted = result.token == draft;
  } else {
    double w_draft = 0.0;
    for (const Candidate& c : cands) w_draft += c.token == draft ? c.weight : 0.0;
    // Accept with probability min(1, p(draft) / q(draft)); q one-hot when
    // not given. The draft was drawn from q, so q(draft) > 0.
    const double q_draft = q.empty() ? 1.0 : static_cast<double>(q[static_cast<size_t>(draft)]);
    PAGODA_CHECK(q_draft > 0.0);
    *accepted = next_uniform() * q_draft * total < w_draft;
    if (*accepted) {
      result.token = draft;
    } else {
      // Residual norm(max(0, p - q)), over p's support (it is 0 elsewhere).
      auto residual = [&](const Candidate& c) {
        const double qc = q.empty() ? (c.token == draft ? 1.0 : 0.0) : static_cast<double>(q[c.token]);
        return std::max(0.0, static_cast<double>(c.weight) / total - qc);
      };
      double rest = 0.0;
      for (const Candidate& c : cands) rest += residual(c);
      result.token = -1;
      if (rest > 0.0) {
        const double u = next_uniform() * rest;
        double cum = 0.0;
        for (const Candidate& c : cands) {
          const double r = residual(c);
          if (r <= 0.0) continue;
          cum += r;
          result.token = c.token;  // the last usable one if rounding puts u past the end
          if (u < cum) break;
        }
      } else {
        // p <= q everywhere means p == q up to rounding, so a rejection had
        // probability ~0: draw from p itself.
        result.token = draw(total);
      }
      PAGODA_CHECK(result.token >= 0);
    }
  }
  fill_logprobs(logits, result);
  return result;
}

void Sampler::probabilities(const float* logits, std::span<const int32_t> prompt, std::span<const int32_t> output,
                            std::vector<float>& probs) {
  std::vector<float>& copy = scratch().logits;
  copy.assign(logits, logits + vocab_size_);
  process_logits(copy.data(), prompt, output);
  const double total = build_distribution(copy.data());
  probs.assign(vocab_size_, 0.0f);
  for (const Candidate& c : candidate_buffer()) {
    probs[c.token] = static_cast<float>(c.weight / total);
  }
}

double Sampler::next_uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample_from_weights(std::span<const float> weights) {
  auto usable = [](float w) { return w > 0.0f && w < kInf; };  // skips NaN too
  double total = 0.0;
  for (float w : weights) total += usable(w) ? w : 0.0f;
  if (!(total > 0.0)) return -1;
  const double u = next_uniform() * total;
  double cum = 0.0;
  int32_t last_usable = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!usable(weights[i])) continue;
    cum += weights[i];
    last_usable = static_cast<int32_t>(i);
    if (u < cum) return last_usable;
  }
  return last_usable;
}

void compute_probs(const SamplingParams& params, int32_t vocab_size, const float* logits,
                   std::span<const int32_t> prompt, std::span<const int32_t> output, std::vector<float>& out_probs) {
  SamplingParams seeded = params;
  seeded.seed = 0;  // no randomness is used; skip random_device
  Sampler(seeded, vocab_size).probabilities(logits, prompt, output, out_probs);
}

}  // namespace pagoda
