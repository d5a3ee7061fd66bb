#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <vector>

namespace pagoda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const std::vector<int32_t> kNoTokens;

SamplingParams seeded(uint64_t seed = 42) {
  SamplingParams p;
  p.seed = seed;
  return p;
}

std::vector<double> softmax(const std::vector<double>& x) {
  double m = *std::max_element(x.begin(), x.end()), s = 0;
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) s += out[i] = std::exp(x[i] - m);
  for (double& v : out) v /= s;
  return out;
}

std::vector<float> probs_of(const SamplingParams& p, const std::vector<float>& logits,
                            const std::vector<int32_t>& prompt = kNoTokens,
                            const std::vector<int32_t>& output = kNoTokens) {
  std::vector<float> probs;
  compute_probs(p, static_cast<int32_t>(logits.size()), logits.data(), prompt, output, probs);
  return probs;
}

// Draws n samples; returns per-token counts.
std::vector<int> histogram(Sampler& s, const std::vector<float>& logits, int n,
                           const std::vector<int32_t>& prompt = kNoTokens,
                           const std::vector<int32_t>& output = kNoTokens) {
  std::vector<int> counts(logits.size(), 0);
  std::vector<float> copy;
  for (int i = 0; i < n; ++i) {
    copy = logits;
    ++counts.at(s.sample(copy.data(), prompt, output).token);
  }
  return counts;
}

// Each count within 5 binomial standard deviations of n * p (plus 1 for
// discreteness); zero-probability tokens must never appear.
void expect_matches(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  ASSERT_EQ(counts.size(), probs.size());
  for (size_t i = 0; i < probs.size(); ++i) {
    const double mean = n * probs[i];
    const double sigma = std::sqrt(n * probs[i] * (1.0 - probs[i]));
    if (probs[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
    } else {
      EXPECT_NEAR(counts[i], mean, 5.0 * sigma + 1.0) << "token " << i;
    }
  }
}

void expect_probs(const std::vector<float>& got, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "token " << i;
}

TEST(SamplerTest, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p = seeded();
  p.temperature = 0.0f;
  p.top_k = 2;
  p.top_p = 0.1f;
  Sampler s(p, 6);
  std::vector<float> logits = {0.1f, 2.5f, -1.0f, 2.5f, 2.0f, 0.0f};
  for (int i = 0; i < 10; ++i) {
    std::vector<float> copy = logits;
    SampleResult r = s.sample(copy.data(), kNoTokens, kNoTokens);
    EXPECT_EQ(r.token, 1);
    EXPECT_TRUE(r.top.empty());
  }
  expect_probs(probs_of(p, logits), {0, 1, 0, 0, 0, 0});
}

TEST(SamplerTest, GreedyAppliesPenaltiesAndBias) {
  SamplingParams p = seeded();
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  p.logit_bias = {{2, -kInf}};
  Sampler s(p, 4);
  std::vector<float> logits = {3.0f, 2.0f, 10.0f, 1.0f};
  std::vector<int32_t> prompt = {0};  // 3 / 2 = 1.5 < 2
  EXPECT_EQ(s.sample(logits.data(), prompt, kNoTokens).token, 1);
}

TEST(SamplerTest, TemperatureMatchesAnalyticSoftmax) {
  const std::vector<float> logits = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f};
  for (float t : {1.0f, 0.7f, 2.5f}) {
    SCOPED_TRACE(t);
    SamplingParams p = seeded(7);
    p.temperature = t;
    Sampler s(p, 5);
    std::vector<double> scaled;
    for (float l : logits) scaled.push_back(l / t);
    const std::vector<double> want = softmax(scaled);
    expect_probs(probs_of(p, logits), want);
    const int n = 20000;
    expect_matches(histogram(s, logits, n), want, n);
  }
}

TEST(SamplerTest, TemperatureDistributionsAreDistinguishable) {
  // Guards the statistical test above: T=0.7 draws must fail against T=2.5.
  const std::vector<float> logits = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f};
  SamplingParams p = seeded(7);
  p.temperature = 0.7f;
  Sampler s(p, 5);
  std::vector<double> wrong;
  for (float l : logits) wrong.push_back(l / 2.5);
  wrong = softmax(wrong);
  const std::vector<int> counts = histogram(s, logits, 20000);
  const double sigma = std::sqrt(20000 * wrong[3] * (1 - wrong[3]));
  EXPECT_GT(std::fabs(counts[3] - 20000 * wrong[3]), 5 * sigma);
}

TEST(SamplerTest, TopKKeepsExactlyKWithIdTieBreak) {
  SamplingParams p = seeded();
  p.top_k = 2;
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 3.0f, 0.0f};
  expect_probs(probs_of(p, logits), {0, 0.5, 0.5, 0, 0});
  p.top_k = 1;
  expect_probs(probs_of(p, logits), {0, 1, 0, 0, 0});
  p.top_k = 100;  // larger than the vocabulary
  const std::vector<double> all = softmax({1, 3, 3, 3, 0});
  expect_probs(probs_of(p, logits), all);
}

TEST(SamplerTest, TopKNeverSamplesOutside) {
  const uint32_t seed = 2024;
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  const int32_t vocab = 1237;
  std::vector<float> logits(vocab);
  for (float& l : logits) l = dist(rng);
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  SamplingParams p = seeded(seed);
  p.top_k = 3;
  p.temperature = 5.0f;  // flattens the distribution so all k get drawn
  Sampler s(p, vocab);
  const std::vector<int> counts = histogram(s, logits, 3000);
  std::set<int32_t> drawn;
  for (int32_t i = 0; i < vocab; ++i) {
    if (counts[i] > 0) drawn.insert(i);
  }
  EXPECT_EQ(drawn, (std::set<int32_t>{order[0], order[1], order[2]}));
}

TEST(SamplerTest, TopPKeepsSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.25, 0.125, 0.125 (shuffled ids).
  const std::vector<float> logits = {std::log(0.125f), std::log(0.5f), std::log(0.125f), std::log(0.25f)};
  SamplingParams p = seeded();
  p.top_p = 0.75f;  // exactly reached by {1, 3}
  expect_probs(probs_of(p, logits), {0, 2.0 / 3, 0, 1.0 / 3});
  p.top_p = 0.76f;  // needs one of the 0.125 tokens: the lower id (0)
  expect_probs(probs_of(p, logits), {1.0 / 7, 4.0 / 7, 0, 2.0 / 7});
  p.top_p = 0.5f;
  expect_probs(probs_of(p, logits), {0, 1, 0, 0});
  p.top_p = 0.49f;
  expect_probs(probs_of(p, logits), {0, 1, 0, 0});
  p.top_p = 0.51f;
  expect_probs(probs_of(p, logits), {0, 2.0 / 3, 0, 1.0 / 3});
  p.top_p = 1.0f;
  expect_probs(probs_of(p, logits), {0.125, 0.5, 0.125, 0.25});
  // Uniform: exact multiples of 1/4.
  const std::vector<float> flat = {0, 0, 0, 0};
  p.top_p = 0.5f;
  expect_probs(probs_of(p, flat), {0.5, 0.5, 0, 0});
  p.top_p = 0.5001f;
  expect_probs(probs_of(p, flat), {1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
}

TEST(SamplerTest, TopPAppliesAfterTemperatureAndTopK) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  SamplingParams p = seeded();
  p.temperature = 0.5f;  // scaled logits 4, 2, 0, -2
  p.top_p = 0.87f;
  // Renormalised over the top 2: 0.881 >= 0.87, so one token is enough
  // (over the full vocabulary it would be 0.865 < 0.87).
  p.top_k = 2;
  expect_probs(probs_of(p, logits), {1, 0, 0, 0});
  // Over the top 3: 0.8668 < 0.87, so two tokens, renormalised.
  p.top_k = 3;
  const std::vector<double> two = softmax({4, 2});
  expect_probs(probs_of(p, logits), {two[0], two[1], 0, 0});
  // Without the temperature the top-2 mass split is 0.731 / 0.269.
  p.temperature = 1.0f;
  const std::vector<double> t1 = softmax({2, 1});
  expect_probs(probs_of(p, logits), {t1[0], t1[1], 0, 0});
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfMax) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)};
  SamplingParams p = seeded();
  p.min_p = 0.3f;  // threshold 0.15
  expect_probs(probs_of(p, logits), {2.0 / 3, 1.0 / 3, 0, 0});
  p.min_p = 0.24f;  // threshold 0.12: all kept
  expect_probs(probs_of(p, logits), {0.5, 0.25, 0.125, 0.125});
  p.min_p = 0.6f;
  expect_probs(probs_of(p, logits), {1, 0, 0, 0});
  // min_p is relative to the temperature-scaled distribution.
  p.min_p = 0.3f;
  p.temperature = 2.0f;  // probs ∝ 1, 0.707, 0.5, 0.5: all >= 0.3
  const std::vector<double> want = softmax({0, std::log(0.5) / 2, std::log(0.25) / 2, std::log(0.25) / 2});
  expect_probs(probs_of(p, logits), want);
}

TEST(SamplerTest, PenaltiesAndBiasMatchHandCalculation) {
  SamplingParams p = seeded();
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.logit_bias = {{0, 1.0f}, {1, 1.0f}};
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f};
  const std::vector<int32_t> prompt = {0};
  const std::vector<int32_t> output = {1, 3, 3};
  // token 0: (2 + 1) / 2 = 1.5              (bias before the penalty)
  // token 1: (-1 + 1) = 0 -> 0 * 2 = 0 -> 0 - 0.25 - 0.5 = -0.75
  // token 2: 0.5                            (not in the history)
  // token 3: 3 / 2 = 1.5 -> 1.5 - 0.25 * 2 - 0.5 = 0.5
  const std::vector<double> want = softmax({1.5, -0.75, 0.5, 0.5});
  expect_probs(probs_of(p, logits, prompt, output), want);
  // The sampler's own logprobs report the same processed distribution.
  p.logprobs = 0;
  Sampler s(p, 4);
  std::vector<float> copy = logits;
  SampleResult r = s.sample(copy.data(), prompt, output);
  EXPECT_NEAR(r.logprob, std::log(want[r.token]), 1e-5);
}

TEST(SamplerTest, NegativeInfinityBiasBansToken) {
  SamplingParams p = seeded(3);
  p.logit_bias = {{1, -kInf}};
  const std::vector<float> logits = {0.0f, 10.0f, 0.0f};
  expect_probs(probs_of(p, logits), {0.5, 0, 0.5});
  Sampler s(p, 3);
  EXPECT_EQ(histogram(s, logits, 2000)[1], 0);
  p.temperature = 0.0f;
  Sampler g(p, 3);
  std::vector<float> copy = logits;
  EXPECT_EQ(g.sample(copy.data(), kNoTokens, kNoTokens).token, 0);
}

TEST(SamplerTest, AllBannedFallsBackToTokenZero) {
  SamplingParams p = seeded();
  p.logit_bias = {{0, -kInf}, {1, -kInf}};
  p.logprobs = 1;
  for (float t : {1.0f, 0.0f}) {
    p.temperature = t;
    Sampler s(p, 2);
    std::vector<float> logits = {1.0f, 2.0f};
    SampleResult r = s.sample(logits.data(), kNoTokens, kNoTokens);
    EXPECT_EQ(r.token, 0);
    EXPECT_EQ(r.logprob, -kInf);
    expect_probs(probs_of(p, {1.0f, 2.0f}), {1, 0});
  }
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDiffers) {
  const std::vector<float> logits = {0.1f, 0.0f, 0.2f, -0.1f, 0.05f};
  auto draws = [&](const SamplingParams& p) {
    Sampler s(p, 5);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 100; ++i) {
      std::vector<float> copy = logits;
      tokens.push_back(s.sample(copy.data(), kNoTokens, tokens).token);
    }
    return tokens;
  };
  auto run = [&](std::optional<uint64_t> seed) {
    SamplingParams p;
    p.seed = seed;
    p.top_p = 0.95f;
    return draws(p);
  };
  EXPECT_EQ(run(11), run(11));
  EXPECT_NE(run(11), run(12));
  // Unseeded samplers (one process-wide random_device draw plus a counter)
  // draw valid tokens, and two of them different sequences.
  const std::vector<int32_t> a = run(std::nullopt);
  for (int32_t t : a) EXPECT_TRUE(t >= 0 && t < 5);
  EXPECT_NE(a, run(std::nullopt));
}

TEST(SamplerTest, LogprobsArePreTemperatureLogSoftmax) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 0.5f, 3.0f, 2.0f};
  SamplingParams p = seeded(5);
  p.temperature = 0.3f;
  p.top_k = 2;
  p.logprobs = 3;
  Sampler s(p, 6);
  const std::vector<double> sm = softmax({1, 3, -2, 0.5, 3, 2});
  for (int i = 0; i < 20; ++i) {
    std::vector<float> copy = logits;
    SampleResult r = s.sample(copy.data(), kNoTokens, kNoTokens);
    ASSERT_TRUE(r.token == 1 || r.token == 4);
    EXPECT_NEAR(r.logprob, std::log(sm[r.token]), 1e-5);
    ASSERT_EQ(r.top.size(), 3u);
    EXPECT_EQ(r.top[0].token, 1);
    EXPECT_EQ(r.top[1].token, 4);
    EXPECT_EQ(r.top[2].token, 5);
    for (const TokenLogprob& t : r.top) EXPECT_NEAR(t.logprob, std::log(sm[t.token]), 1e-5);
  }
  // logprobs == -1: nothing computed.
  p.logprobs = -1;
  Sampler q(p, 6);
  std::vector<float> copy = logits;
  SampleResult r = q.sample(copy.data(), kNoTokens, kNoTokens);
  EXPECT_EQ(r.logprob, 0.0f);
  EXPECT_TRUE(r.top.empty());
}

TEST(SamplerTest, GreedyLogprobs) {
  SamplingParams p = seeded();
  p.temperature = 0.0f;
  p.logprobs = 2;
  Sampler s(p, 3);
  std::vector<float> logits = {0.0f, 1.0f, 2.0f};
  SampleResult r = s.sample(logits.data(), kNoTokens, kNoTokens);
  const std::vector<double> sm = softmax({0, 1, 2});
  EXPECT_EQ(r.token, 2);
  EXPECT_NEAR(r.logprob, std::log(sm[2]), 1e-6);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[1].token, 1);
  EXPECT_NEAR(r.top[1].logprob, std::log(sm[1]), 1e-6);
}

TEST(SamplerTest, SamplesFollowComputedProbsWithAllProcessors) {
  const std::vector<float> logits = {1.2f, 0.3f, 2.0f, -0.5f, 1.9f, 0.0f, 1.0f, 0.7f, -3.0f, 1.5f};
  const std::vector<int32_t> prompt = {2, 2, 7};
  const std::vector<int32_t> output = {4, 9, 4};
  SamplingParams p = seeded(77);
  p.temperature = 0.8f;
  p.top_k = 6;
  p.top_p = 0.9f;
  p.min_p = 0.1f;
  p.repetition_penalty = 1.2f;
  p.presence_penalty = 0.3f;
  p.frequency_penalty = 0.1f;
  p.logit_bias = {{0, 0.4f}, {5, -kInf}};
  Sampler s(p, 10);
  std::vector<float> probs;
  s.probabilities(logits.data(), prompt, output, probs);
  EXPECT_NEAR(std::accumulate(probs.begin(), probs.end(), 0.0), 1.0, 1e-6);
  int kept = 0;
  for (float v : probs) kept += v > 0;
  EXPECT_GE(kept, 2);  // the test is meaningless on a one-hot distribution
  EXPECT_LE(kept, 6);
  const int n = 20000;
  expect_matches(histogram(s, logits, n, prompt, output), std::vector<double>(probs.begin(), probs.end()), n);
}

TEST(SamplerTest, SampleFromWeights) {
  SamplingParams p = seeded(9);
  Sampler s(p, 4);
  std::vector<float> w = {0.0f, 3.0f, 0.0f, 1.0f};
  std::vector<int> counts(4, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts.at(s.sample_from_weights(w));
  expect_matches(counts, {0, 0.75, 0, 0.25}, n);
  EXPECT_EQ(s.sample_from_weights(std::vector<float>{0.0f, 0.0f}), -1);
  const std::vector<float> odd = {-5.0f, NAN, 2.0f, kInf};
  for (int i = 0; i < 100; ++i) ASSERT_EQ(s.sample_from_weights(odd), 2);
  for (int i = 0; i < 1000; ++i) {
    const double u = s.next_uniform();
    ASSERT_TRUE(u >= 0.0 && u < 1.0);
  }
}

}  // namespace
}  // namespace pagoda
