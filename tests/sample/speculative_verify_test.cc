// Sampler::verify_draft is the exact rejection rule of speculative decoding:
// whatever the draft, the emitted token must be distributed exactly as
// sample() would draw it. Chi-square tests over 20,000+ draws per case, at
// temperature 1.0 and with top-p 0.9 and penalties, for single tokens and for
// the joint distribution of the first 3 tokens of a verified chain. The same
// tests reject a broken verifier that resamples from p instead of the
// residual after a rejection (showing they have the power to fail).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "../chi_square.h"
#include "sample/sampler.h"

namespace pagoda {
namespace {

constexpr int32_t kVocab = 6;

using testing_util::chi_square;
using testing_util::ChiSquare;

std::vector<float> random_logits(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 1.5f);
  std::vector<float> l(kVocab);
  for (auto& x : l) x = nd(rng);
  return l;
}

using Verifier = std::function<int32_t(Sampler&, const std::vector<float>&, std::span<const int32_t>,
                                       std::span<const int32_t>, int32_t)>;

int32_t exact_verify(Sampler& s, const std::vector<float>& logits, std::span<const int32_t> prompt,
                     std::span<const int32_t> output, int32_t draft) {
  std::vector<float> row = logits;
  bool accepted = false;
  return s.verify_draft(row.data(), prompt, output, draft, &accepted).token;
}

// Wrong on purpose: after a rejection, draws from p instead of the residual.
int32_t broken_verify(Sampler& s, const std::vector<float>& logits, std::span<const int32_t> prompt,
                      std::span<const int32_t> output, int32_t draft) {
  std::vector<float> row = logits;
  bool accepted = false;
  const int32_t t = s.verify_draft(row.data(), prompt, output, draft, &accepted).token;
  if (accepted) return t;
  row = logits;
  return s.sample(row.data(), prompt, output).token;
}

struct Params {
  const char* name;
  SamplingParams sp;
};

std::vector<Params> params_cases() {
  std::vector<Params> v;
  SamplingParams t1;
  t1.temperature = 1.0f;
  t1.seed = 5;
  v.push_back({"temp1", t1});
  SamplingParams tp = t1;
  tp.top_p = 0.9f;
  v.push_back({"top_p_0.9", tp});
  SamplingParams pen = t1;
  pen.temperature = 0.8f;
  pen.repetition_penalty = 1.3f;
  pen.presence_penalty = 0.5f;
  v.push_back({"penalties", pen});
  return v;
}

ChiSquare single_token_test(const Verifier& verify, const SamplingParams& sp, int32_t draft, uint32_t seed) {
  const std::vector<float> logits = random_logits(seed);
  const std::vector<int32_t> prompt = {1, 2}, output = {2, 4};
  Sampler s(sp, kVocab);
  std::vector<float> p;
  s.probabilities(logits.data(), prompt, output, p);
  std::map<int64_t, double> probs;
  for (int32_t i = 0; i < kVocab; ++i) probs[i] = p[i];
  const int64_t n = 20000;
  std::map<int64_t, int64_t> counts;
  for (int64_t i = 0; i < n; ++i) ++counts[verify(s, logits, prompt, output, draft)];
  return chi_square(counts, probs, n);
}

TEST(SpeculativeVerify, SingleTokenMatchesTargetDistribution) {
  for (const Params& pc : params_cases())
    for (int32_t draft = 0; draft < kVocab; ++draft) {
      const ChiSquare r = single_token_test(exact_verify, pc.sp, draft, 3);
      EXPECT_LT(r.stat, r.critical) << pc.name << " draft " << draft;
    }
}

TEST(SpeculativeVerify, BrokenResidualIsDetected) {
  // The draft with the largest probability makes the difference largest;
  // under every parameter set the broken verifier must fail the test.
  for (const Params& pc : params_cases()) {
    Sampler s(pc.sp, kVocab);
    const std::vector<float> logits = random_logits(3);
    std::vector<float> p;
    const std::vector<int32_t> prompt = {1, 2}, output = {2, 4};
    s.probabilities(logits.data(), prompt, output, p);
    const auto draft = static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
    const ChiSquare r = single_token_test(broken_verify, pc.sp, draft, 3);
    EXPECT_GT(r.stat, r.critical) << pc.name;
  }
}

TEST(SpeculativeVerify, GreedyAcceptsExactlyTheArgmax) {
  SamplingParams g;
  g.temperature = 0;
  Sampler s(g, kVocab);
  const std::vector<float> logits = random_logits(9);
  const auto best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  for (int32_t d = 0; d < kVocab; ++d) {
    std::vector<float> row = logits;
    bool accepted = false;
    EXPECT_EQ(s.verify_draft(row.data(), {}, {}, d, &accepted).token, best);
    EXPECT_EQ(accepted, d == best);
  }
}

// A toy target: logits are a deterministic function of the context, and a
// deterministic proposer that is right about half the time.
std::vector<float> target_logits(const std::vector<int32_t>& ctx) {
  uint32_t h = 2166136261u;
  for (int32_t t : ctx) h = (h ^ static_cast<uint32_t>(t)) * 16777619u;
  return random_logits(h);
}
std::vector<int32_t> propose3(const std::vector<int32_t>& ctx) {
  std::vector<int32_t> d;
  for (int i = 0; i < 3; ++i) d.push_back(static_cast<int32_t>((ctx.back() * 3 + i + ctx.size()) % kVocab));
  return d;
}

// One verification step as the engine runs it (speculative_decoding.cc):
// verify drafts in order, stop at the first rejection, else add a bonus.
std::vector<int32_t> first3(Sampler& s, const std::vector<int32_t>& prompt, const Verifier& verify) {
  std::vector<int32_t> ctx = prompt;
  std::vector<int32_t> out;
  while (out.size() < 3) {
    const std::vector<int32_t> drafts = propose3(ctx);
    for (size_t i = 0; i <= drafts.size() && out.size() < 3; ++i) {
      const std::span<const int32_t> pr(prompt), op(out);
      int32_t t;
      if (i < drafts.size()) {
        t = verify(s, target_logits(ctx), pr, op, drafts[i]);
      } else {
        std::vector<float> row = target_logits(ctx);
        t = s.sample(row.data(), pr, op).token;
      }
      out.push_back(t);
      ctx.push_back(t);
      if (i < drafts.size() && t != drafts[i]) break;
    }
  }
  return out;
}

// Exact joint probability of the first 3 tokens sampled without
// speculation after `prompt`, keyed (t0 * kVocab + t1) * kVocab + t2.
std::map<int64_t, double> exact_first3(Sampler& s, const std::vector<int32_t>& prompt) {
  std::map<int64_t, double> probs;
  std::vector<float> p0, p1, p2;
  for (int32_t a = 0; a < kVocab; ++a) {
    s.probabilities(target_logits(prompt).data(), prompt, {}, p0);
    for (int32_t b = 0; b < kVocab; ++b) {
      std::vector<int32_t> ca = prompt, oa = {a};
      ca.push_back(a);
      s.probabilities(target_logits(ca).data(), prompt, oa, p1);
      for (int32_t c = 0; c < kVocab; ++c) {
        std::vector<int32_t> cb = ca, ob = {a, b};
        cb.push_back(b);
        s.probabilities(target_logits(cb).data(), prompt, ob, p2);
        probs[(a * kVocab + b) * kVocab + c] = static_cast<double>(p0[a]) * p1[b] * p2[c];
      }
    }
  }
  return probs;
}

ChiSquare chain_test(const Verifier& verify, const SamplingParams& sp) {
  const std::vector<int32_t> prompt = {3, 1};
  Sampler s(sp, kVocab);
  const std::map<int64_t, double> probs = exact_first3(s, prompt);
  const int64_t n = 30000;
  std::map<int64_t, int64_t> counts;
  for (int64_t i = 0; i < n; ++i) {
    const auto t = first3(s, prompt, verify);
    ++counts[(t[0] * kVocab + t[1]) * kVocab + t[2]];
  }
  return chi_square(counts, probs, n);
}

TEST(SpeculativeVerify, FirstThreeTokensOfAChainMatchTarget) {
  for (const Params& pc : params_cases()) {
    const ChiSquare r = chain_test(exact_verify, pc.sp);
    EXPECT_LT(r.stat, r.critical) << pc.name;
  }
}

TEST(SpeculativeVerify, FirstThreeTokensDetectBrokenResidual) {
  for (const Params& pc : params_cases()) {
    const ChiSquare r = chain_test(broken_verify, pc.sp);
    EXPECT_GT(r.stat, r.critical) << pc.name;
  }
}

// A stochastic proposer, as a draft model is: its own distribution q over the
// vocabulary (a function of the context, different from the target's) and
// drafts drawn from it.
std::vector<float> draft_probs(const std::vector<int32_t>& ctx) {
  uint32_t h = 40503u;
  for (int32_t t : ctx) h = (h ^ static_cast<uint32_t>(t)) * 2654435761u;
  std::vector<float> q = random_logits(h);
  float total = 0;
  for (float& x : q) total += x = std::exp(x);
  for (float& x : q) x /= total;
  return q;
}

using QVerifier = std::function<int32_t(Sampler&, const std::vector<float>&, std::span<const int32_t>,
                                        std::span<const int32_t>, int32_t, const std::vector<float>&, bool*)>;

int32_t exact_verify_q(Sampler& s, const std::vector<float>& logits, std::span<const int32_t> prompt,
                       std::span<const int32_t> output, int32_t draft, const std::vector<float>& q, bool* accepted) {
  std::vector<float> row = logits;
  return s.verify_draft(row.data(), prompt, output, draft, q, accepted).token;
}

// Wrong on purpose: after a rejection, draws from p instead of max(0, p - q).
int32_t broken_verify_q(Sampler& s, const std::vector<float>& logits, std::span<const int32_t> prompt,
                        std::span<const int32_t> output, int32_t draft, const std::vector<float>& q, bool* accepted) {
  std::vector<float> row = logits;
  const int32_t t = s.verify_draft(row.data(), prompt, output, draft, q, accepted).token;
  if (*accepted) return t;
  row = logits;
  return s.sample(row.data(), prompt, output).token;
}

ChiSquare single_token_q_test(const QVerifier& verify, const SamplingParams& sp) {
  const std::vector<float> logits = random_logits(3);
  const std::vector<int32_t> prompt = {1, 2}, output = {2, 4};
  const std::vector<float> q = draft_probs(prompt);
  Sampler s(sp, kVocab);
  SamplingParams dp;
  dp.temperature = 1.0f;
  dp.seed = 77;
  Sampler d(dp, kVocab);
  std::vector<float> p;
  s.probabilities(logits.data(), prompt, output, p);
  std::map<int64_t, double> probs;
  for (int32_t i = 0; i < kVocab; ++i) probs[i] = p[i];
  const int64_t n = 20000;
  std::map<int64_t, int64_t> counts;
  for (int64_t i = 0; i < n; ++i) {
    bool accepted = false;
    ++counts[verify(s, logits, prompt, output, d.sample_from_weights(q), q, &accepted)];
  }
  return chi_square(counts, probs, n);
}

TEST(SpeculativeVerify, DraftDistributionSingleTokenMatchesTarget) {
  for (const Params& pc : params_cases()) {
    const ChiSquare r = single_token_q_test(exact_verify_q, pc.sp);
    EXPECT_LT(r.stat, r.critical) << pc.name;
    const ChiSquare broken = single_token_q_test(broken_verify_q, pc.sp);
    EXPECT_GT(broken.stat, broken.critical) << pc.name << ": the test cannot tell a broken residual";
  }
}

// Three drafts drawn from q one after another (the draft model's chain),
// verified in order as speculative_decoding.cc does.
std::vector<int32_t> first3_q(Sampler& s, Sampler& d, const std::vector<int32_t>& prompt, const QVerifier& verify) {
  std::vector<int32_t> ctx = prompt;
  std::vector<int32_t> out;
  while (out.size() < 3) {
    std::vector<int32_t> drafts, dctx = ctx;
    std::vector<std::vector<float>> qs;
    for (int i = 0; i < 3; ++i) {
      qs.push_back(draft_probs(dctx));
      drafts.push_back(d.sample_from_weights(qs.back()));
      dctx.push_back(drafts.back());
    }
    for (size_t i = 0; i <= drafts.size() && out.size() < 3; ++i) {
      const std::span<const int32_t> pr(prompt), op(out);
      bool accepted = false;
      int32_t t;
      if (i < drafts.size()) {
        t = verify(s, target_logits(ctx), pr, op, drafts[i], qs[i], &accepted);
      } else {
        std::vector<float> row = target_logits(ctx);
        t = s.sample(row.data(), pr, op).token;
      }
      out.push_back(t);
      ctx.push_back(t);
      if (i < drafts.size() && !accepted) break;
    }
  }
  return out;
}

ChiSquare chain_q_test(const QVerifier& verify, const SamplingParams& sp) {
  const std::vector<int32_t> prompt = {3, 1};
  Sampler s(sp, kVocab);
  SamplingParams dp;
  dp.temperature = 1.0f;
  dp.seed = 78;
  Sampler d(dp, kVocab);
  const std::map<int64_t, double> probs = exact_first3(s, prompt);
  const int64_t n = 30000;
  std::map<int64_t, int64_t> counts;
  for (int64_t i = 0; i < n; ++i) {
    const auto t = first3_q(s, d, prompt, verify);
    ++counts[(t[0] * kVocab + t[1]) * kVocab + t[2]];
  }
  return chi_square(counts, probs, n);
}

TEST(SpeculativeVerify, DraftDistributionChainMatchesTarget) {
  for (const Params& pc : params_cases()) {
    const ChiSquare r = chain_q_test(exact_verify_q, pc.sp);
    EXPECT_LT(r.stat, r.critical) << pc.name;
    const ChiSquare broken = chain_q_test(broken_verify_q, pc.sp);
    EXPECT_GT(broken.stat, broken.critical) << pc.name << ": the test cannot tell a broken residual";
  }
}

}  // namespace
}  // namespace pagoda
