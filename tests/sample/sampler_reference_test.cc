// Compares Sampler::probabilities (nth_element, partial sorts, in-place
// penalties) against a naive full-sort reference on random rows of awkward
// sizes, including vocabularies as large as real models'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sample/sampler.h"

namespace pagoda {
namespace {

std::vector<double> reference_probs(const SamplingParams& p, std::vector<float> logits,
                                    const std::vector<int32_t>& prompt, const std::vector<int32_t>& output) {
  const int32_t n = static_cast<int32_t>(logits.size());
  for (const auto& [t, b] : p.logit_bias) logits[t] += b;
  std::set<int32_t> seen(prompt.begin(), prompt.end());
  seen.insert(output.begin(), output.end());
  for (int32_t t : seen) {
    float& l = logits[t];
    l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
  }
  std::map<int32_t, int> counts;
  for (int32_t t : output) ++counts[t];
  for (const auto& [t, c] : counts) logits[t] -= p.frequency_penalty * c + p.presence_penalty;

  std::vector<double> probs(n, 0.0);
  std::vector<int32_t> order;
  for (int32_t i = 0; i < n; ++i) {
    if (logits[i] > -INFINITY) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (order.empty()) {  // everything banned: documented fallback to token 0
    probs[0] = 1.0;
    return probs;
  }
  if (p.is_greedy()) {
    probs[order[0]] = 1.0;
    return probs;
  }
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < order.size()) order.resize(p.top_k);
  const float max_logit = logits[order[0]];
  const float inv_t = 1.0f / p.temperature;
  std::vector<float> w;
  double total = 0;
  for (int32_t t : order) total += w.emplace_back(std::exp((logits[t] - max_logit) * inv_t));
  size_t keep = order.size();
  double cum = 0;
  for (size_t i = 0; i < order.size() && p.top_p < 1.0f; ++i) {
    cum += w[i];
    if (cum >= (p.top_p - kTopPTolerance) * total) {
      keep = i + 1;
      break;
    }
  }
  double kept_total = 0;
  for (size_t i = 0; i < keep; ++i) {
    if (w[i] >= p.min_p) kept_total += w[i];
  }
  for (size_t i = 0; i < keep; ++i) {
    if (w[i] >= p.min_p) probs[order[i]] = w[i] / kept_total;
  }
  return probs;
}

struct Case {
  const char* name;
  float temperature, top_p, min_p, spread;
  int32_t top_k;
  bool penalties;
};

TEST(SamplerReferenceTest, ProbabilitiesMatchNaiveReference) {
  const Case cases[] = {
      {"plain", 1.0f, 1.0f, 0.0f, 3.0f, 0, false},       {"greedy", 0.0f, 1.0f, 0.0f, 3.0f, 0, true},
      {"top_k", 0.7f, 1.0f, 0.0f, 3.0f, 40, false},      {"top_p", 1.3f, 0.9f, 0.0f, 3.0f, 0, true},
      {"flat_top_p", 1.0f, 0.95f, 0.0f, 0.1f, 0, false},  // keeps > 256 tokens
      {"all", 0.9f, 0.8f, 0.02f, 2.0f, 1000, true},      {"min_p", 1.0f, 1.0f, 0.1f, 1.0f, -1, true},
      {"quantized", 1.0f, 0.7f, 0.0f, 2.0f, 50, false},  // many exact ties
  };
  const uint32_t seed = 31337;
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  for (int32_t vocab : {1, 7, 300, 32003, 151936}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(testing::Message() << "vocab=" << vocab << " case=" << c.name);
      std::normal_distribution<float> dist(0.0f, c.spread);
      std::vector<float> logits(vocab);
      for (float& l : logits) {
        l = dist(rng);
        if (std::string(c.name) == "quantized") l = std::round(l);
      }
      std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
      std::vector<int32_t> prompt(20), output(15);
      for (int32_t& t : prompt) t = tok(rng);
      for (int32_t& t : output) t = tok(rng);
      SamplingParams p;
      p.seed = seed;
      p.temperature = c.temperature;
      p.top_k = c.top_k;
      p.top_p = c.top_p;
      p.min_p = c.min_p;
      if (c.penalties) {
        p.repetition_penalty = 1.3f;
        p.presence_penalty = 0.4f;
        p.frequency_penalty = -0.2f;
        p.logit_bias = {{tok(rng), 2.0f}, {tok(rng), -INFINITY}, {vocab - 1, -1.5f}};
      }
      ASSERT_TRUE(p.validate(vocab).is_ok());
      const std::vector<double> want = reference_probs(p, logits, prompt, output);
      Sampler s(p, vocab);
      std::vector<float> got;
      s.probabilities(logits.data(), prompt, output, got);
      ASSERT_EQ(got.size(), want.size());
      int32_t kept = 0, worst = 0;
      double worst_err = 0.0;
      for (int32_t i = 0; i < vocab; ++i) {
        kept += want[i] > 0;
        if (std::fabs(got[i] - want[i]) > worst_err) {
          worst_err = std::fabs(got[i] - want[i]);
          worst = i;
        }
        ASSERT_EQ(got[i] > 0, want[i] > 0) << "token " << i << " kept differently";
      }
      EXPECT_LT(worst_err, 1e-6) << "worst token " << worst;
      if (std::string(c.name) == "flat_top_p" && vocab > 1000) {
        EXPECT_GT(kept, 256);
      }
      // sample() draws only tokens the distribution keeps.
      for (int i = 0; i < 5; ++i) {
        std::vector<float> copy = logits;
        const int32_t t = s.sample(copy.data(), prompt, output).token;
        ASSERT_GT(want[t], 0.0) << "sampled token " << t;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
