#include "sample/logits_processors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace pagoda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(LogitsProcessorsTest, LogitBiasAddsAndRepeatsAccumulate) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  std::vector<std::pair<int32_t, float>> bias = {{0, 0.5f}, {2, -kInf}, {0, 0.25f}};
  apply_logit_bias(bias, logits.data(), 3);
  EXPECT_FLOAT_EQ(logits[0], 1.75f);
  EXPECT_FLOAT_EQ(logits[1], 2.0f);
  EXPECT_EQ(logits[2], -kInf);
}

TEST(LogitsProcessorsTest, RepetitionPenaltyFormula) {
  SamplingParams p;
  p.repetition_penalty = 1.5f;
  std::vector<float> logits = {3.0f, -3.0f, 0.0f, 6.0f, -1.0f};
  std::vector<int32_t> prompt = {0, 1, 0, 0};  // repeats penalise once
  std::vector<int32_t> output = {2, 1, 3};
  std::vector<int32_t> scratch;
  apply_penalties(p, prompt, output, logits.data(), 5, scratch);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);   // positive: divided
  EXPECT_FLOAT_EQ(logits[1], -4.5f);  // negative: multiplied
  EXPECT_FLOAT_EQ(logits[2], 0.0f);
  EXPECT_FLOAT_EQ(logits[3], 4.0f);
  EXPECT_FLOAT_EQ(logits[4], -1.0f);  // not in history
  EXPECT_TRUE(std::all_of(scratch.begin(), scratch.end(), [](int32_t v) { return v == 0; }));
}

TEST(LogitsProcessorsTest, PresenceAndFrequencyOnlyOverOutput) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = -0.25f;
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<int32_t> prompt = {0, 0, 0};
  std::vector<int32_t> output = {1, 2, 2, 2, 1, 2};
  std::vector<int32_t> scratch(4, 0);
  apply_penalties(p, prompt, output, logits.data(), 4, scratch);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);                        // prompt only
  EXPECT_FLOAT_EQ(logits[1], 1.0f - (-0.25f * 2 + 0.5f));  // count 2
  EXPECT_FLOAT_EQ(logits[2], 1.0f - (-0.25f * 4 + 0.5f));  // count 4
  EXPECT_FLOAT_EQ(logits[3], 1.0f);
  EXPECT_EQ(scratch, std::vector<int32_t>(4, 0));
  // Out-of-range ids in a history are ignored, not fatal.
  std::vector<int32_t> bad = {-1, 7, 3};
  apply_penalties(p, bad, bad, logits.data(), 4, scratch);
  EXPECT_FLOAT_EQ(logits[3], 1.0f - (-0.25f + 0.5f));
}

TEST(LogitsProcessorsTest, ArgmaxTiesAndDegenerateRows) {
  std::vector<float> a = {1.0f, 5.0f, kNaN, 5.0f, 2.0f};
  EXPECT_EQ(argmax_logit(a.data(), 5), 1);
  std::vector<float> b = {kNaN, -kInf, -kInf};
  EXPECT_EQ(argmax_logit(b.data(), 3), -1);
  std::vector<float> c = {-kInf, -1e30f};
  EXPECT_EQ(argmax_logit(c.data(), 2), 1);
}

TEST(LogitsProcessorsTest, LogSumExpMatchesDoubleReference) {
  const uint32_t seed = 1234;
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-30.0f, 30.0f);
  for (int32_t n : {1, 2, 17, 4099}) {
    std::vector<float> logits(n);
    for (float& l : logits) l = dist(rng);
    double m = *std::max_element(logits.begin(), logits.end()), s = 0;
    for (float l : logits) s += std::exp(double(l) - m);
    EXPECT_NEAR(log_sum_exp(logits.data(), n), m + std::log(s), 1e-4) << "n=" << n;
  }
  std::vector<float> banned = {-kInf, kNaN};
  EXPECT_EQ(log_sum_exp(banned.data(), 2), -kInf);
  EXPECT_EQ(log_softmax_value(-kInf, -kInf), -kInf);
  std::vector<float> with_nan = {0.0f, kNaN, 0.0f};
  EXPECT_NEAR(log_sum_exp(with_nan.data(), 3), std::log(2.0), 1e-6);
  EXPECT_EQ(log_softmax_value(kNaN, 0.0f), -kInf);
  EXPECT_EQ(log_softmax_value(kInf, kInf), 0.0f);
  EXPECT_EQ(log_softmax_value(3.0f, kInf), -kInf);
}

TEST(LogitsProcessorsTest, TopNSortedDescendingWithIdTieBreak) {
  const uint32_t seed = 99;
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-5, 5);  // many ties
  const int32_t n = 1001;
  std::vector<float> logits(n);
  for (float& l : logits) l = static_cast<float>(dist(rng));
  const float lse = log_sum_exp(logits.data(), n);
  std::vector<int32_t> order(n);
  for (int32_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<TokenLogprob> top;
  for (int32_t k : {1, 5, 20, n, n + 5}) {
    top_n_logprobs(logits.data(), n, k, lse, top);
    ASSERT_EQ(static_cast<int32_t>(top.size()), std::min(k, n));
    for (size_t i = 0; i < top.size(); ++i) {
      EXPECT_EQ(top[i].token, order[i]) << "k=" << k << " i=" << i;
      EXPECT_FLOAT_EQ(top[i].logprob, logits[order[i]] - lse);
      if (i > 0) {
        EXPECT_GE(top[i - 1].logprob, top[i].logprob);
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
