#include "sample/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace pagoda {
namespace {

constexpr int32_t kVocab = 100;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Expects validation to fail with a message mentioning `field`.
void expect_rejected(const SamplingParams& p, const std::string& field) {
  Status st = p.validate(kVocab);
  ASSERT_FALSE(st.is_ok()) << "expected " << field << " to be rejected";
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
}

TEST(SamplingParamsTest, DefaultsAndTypicalValuesAreValid) {
  SamplingParams p;
  EXPECT_TRUE(p.validate(kVocab).is_ok());
  EXPECT_FALSE(p.is_greedy());
  EXPECT_FALSE(p.has_penalties());
  p.temperature = 0.0f;
  p.top_k = -1;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.repetition_penalty = 1.3f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.logprobs = kMaxLogprobs;
  p.logit_bias = {{0, -kInf}, {kVocab - 1, 100.0f}, {5, -3.5f}};
  EXPECT_TRUE(p.validate(kVocab).is_ok()) << p.validate(kVocab).message();
  EXPECT_TRUE(p.is_greedy());
  EXPECT_TRUE(p.has_penalties());
  p.top_k = 1000;  // larger than the vocabulary: behaves as disabled
  EXPECT_TRUE(p.validate(kVocab).is_ok());
}

TEST(SamplingParamsTest, RejectsBadTemperature) {
  for (float t : {kNaN, -0.1f, -kInf, kInf}) {
    SamplingParams p;
    p.temperature = t;
    expect_rejected(p, "temperature");
  }
}

TEST(SamplingParamsTest, RejectsBadTopK) {
  SamplingParams p;
  p.top_k = -2;
  expect_rejected(p, "top_k");
  p.top_k = 0;
  EXPECT_TRUE(p.validate(kVocab).is_ok());
}

TEST(SamplingParamsTest, RejectsBadTopP) {
  for (float v : {0.0f, -0.5f, 1.0001f, kNaN, kInf}) {
    SamplingParams p;
    p.top_p = v;
    expect_rejected(p, "top_p");
  }
  SamplingParams p;
  p.top_p = 1e-6f;
  EXPECT_TRUE(p.validate(kVocab).is_ok());
}

TEST(SamplingParamsTest, RejectsBadMinP) {
  for (float v : {-0.01f, 1.01f, kNaN}) {
    SamplingParams p;
    p.min_p = v;
    expect_rejected(p, "min_p");
  }
}

TEST(SamplingParamsTest, RejectsBadPenalties) {
  for (float v : {0.0f, -1.0f, kNaN, kInf}) {
    SamplingParams p;
    p.repetition_penalty = v;
    expect_rejected(p, "repetition_penalty");
  }
  for (float v : {2.01f, -2.01f, kNaN}) {
    SamplingParams p;
    p.presence_penalty = v;
    expect_rejected(p, "presence_penalty");
    SamplingParams q;
    q.frequency_penalty = v;
    expect_rejected(q, "frequency_penalty");
  }
}

TEST(SamplingParamsTest, RejectsBadLogprobs) {
  SamplingParams p;
  p.logprobs = -2;
  expect_rejected(p, "logprobs");
  p.logprobs = kMaxLogprobs + 1;
  expect_rejected(p, "logprobs");
}

TEST(SamplingParamsTest, RejectsBadLogitBias) {
  SamplingParams p;
  p.logit_bias = {{3, 1.0f}, {kVocab, 1.0f}};
  expect_rejected(p, "logit_bias token id 100");
  p.logit_bias = {{-1, 1.0f}};
  expect_rejected(p, "logit_bias token id -1");
  p.logit_bias = {{3, kNaN}};
  expect_rejected(p, "logit_bias");
  p.logit_bias = {{3, kInf}};
  expect_rejected(p, "logit_bias");
}

TEST(SamplingParamsTest, RejectsBadVocabSize) {
  SamplingParams p;
  EXPECT_FALSE(p.validate(0).is_ok());
  p.logit_bias = {{5, 1.0f}};
  EXPECT_FALSE(p.validate(5).is_ok());
  EXPECT_TRUE(p.validate(6).is_ok());
}

}  // namespace
}  // namespace pagoda
