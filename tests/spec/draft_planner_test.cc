#include "spec/draft_planner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace pagoda {
namespace {

DraftCandidate chain(double acceptance, int32_t max_drafts) { return {acceptance, max_drafts, {}, 0}; }

// Useful tokens of a plan: the base batch's, plus a + ... + a^k per sequence.
double expected_tokens(std::span<const DraftCandidate> c, const std::vector<int32_t>& k, int32_t base) {
  double e = base;
  for (size_t i = 0; i < c.size(); ++i)
    for (int32_t j = 1; j <= k[i]; ++j) e += std::pow(c[i].acceptance, j);
  return e;
}

double rate(const StepCostModel& cost, int32_t base, std::span<const DraftCandidate> c, const std::vector<int32_t>& k) {
  int32_t n = base;
  for (int32_t x : k) n += x;
  return expected_tokens(c, k, base) / cost.seconds(n);
}

TEST(StepCostModel, InterpolatesAndStaysMonotone) {
  const StepCostModel m({{1, 1.0}, {4, 2.5}, {2, 0.8}, {8, 4.5}});  // the 2-token point is noise below 1
  EXPECT_DOUBLE_EQ(m.seconds(1), 1.0);
  EXPECT_DOUBLE_EQ(m.seconds(2), 1.0);  // raised to the 1-token time
  EXPECT_DOUBLE_EQ(m.seconds(3), 1.75);
  EXPECT_DOUBLE_EQ(m.seconds(6), 3.5);
  EXPECT_DOUBLE_EQ(m.seconds(12), 6.5);  // the last segment, extended
  EXPECT_DOUBLE_EQ(m.seconds(0), 1.0);
  const StepCostModel one({{4, 2.0}});
  EXPECT_DOUBLE_EQ(one.seconds(8), 4.0);
}

TEST(StepCostModel, ScalesTheProfileToRealSteps) {
  const std::vector<std::pair<int32_t, double>> forward = {{1, 1.0}, {2, 1.5}, {4, 2.0}};
  // A steady batch: every step one size, 1.5x its profile. The steps'
  // sizes say nothing of what more tokens cost; the profile scaled says
  // they cost 1.5x what it measured (an offset alone would say 1x).
  StepCostModel steady(forward);
  for (int i = 0; i < 50; ++i) steady.observe(1, 1.5);
  EXPECT_NEAR(steady.seconds(1), 1.5, 1e-9);
  EXPECT_NEAR(steady.seconds(4), 3.0, 1e-9);
  EXPECT_DOUBLE_EQ(steady.forward_seconds(4), 2.0);

  // Steps of two sizes at 1.5x their profile plus 0.2 s: the line follows
  // them (the origin's small weight pulls it by ~1%).
  StepCostModel spread(forward);
  for (int i = 0; i < 100; ++i) {
    const int32_t n = i % 2 ? 1 : 4;
    spread.observe(n, 1.5 * spread.forward_seconds(n) + 0.2);
  }
  EXPECT_NEAR(spread.seconds(2), 1.5 * 1.5 + 0.2, 0.03);
  EXPECT_NEAR(spread.seconds(8), 1.5 * 3.0 + 0.2, 0.06);  // the forward's last segment, extended

  // Larger steps ran relatively faster: the scale stops at 0.5, steps stay
  // monotone and finite.
  StepCostModel faster(forward);
  for (int i = 0; i < 100; ++i) faster.observe(i % 2 ? 1 : 4, 1.0);
  for (int32_t n = 1; n < 8; ++n) EXPECT_LT(faster.seconds(n), faster.seconds(n + 1));
  EXPECT_NEAR(faster.seconds(8) - faster.seconds(4), 0.5 * (3.0 - 2.0), 1e-9);
  faster.observe(2, std::nan(""));
  EXPECT_TRUE(std::isfinite(faster.seconds(2)));
}

// Attention past the profile's context: per key a sequence streams and per
// key each of its tokens reads; the observed scale stays 1 where real steps
// are what the terms say, so a draft at a long context is priced at its own
// scores, not at the step's K/V stream.
TEST(StepCostModel, PricesAttentionPastTheProfilesContext) {
  const std::vector<std::pair<int32_t, double>> forward = {{1, 1.0e-3}, {2, 1.1e-3}, {8, 1.5e-3}};
  StepCostModel m(forward);
  m.set_attention(64, 300e-9, 75e-9);
  EXPECT_EQ(m.context(), 64);
  StepContext ctx;
  ctx.add(1800, 1, 64);  // one decode token at context 1,800
  EXPECT_DOUBLE_EQ(ctx.seq_keys, 1736);
  EXPECT_DOUBLE_EQ(ctx.token_keys, 1736);
  const double one = 1.0e-3 + 1736 * (300e-9 + 75e-9);
  EXPECT_NEAR(m.seconds(1, ctx), one, 1e-12);
  for (int i = 0; i < 50; ++i) m.observe(1, one, ctx);  // a steady batch of one
  StepContext drafted;
  drafted.add(1800, 3, 64);  // the token and two drafts
  EXPECT_NEAR(m.seconds(3, drafted), 1.1e-3 + 0.4e-3 / 6 + 1736 * (300e-9 + 3 * 75e-9), 1e-9);
  // Without the terms the same steps scale the profile (1.65x): the two
  // drafts are priced at two thirds of what they cost.
  StepCostModel blind(forward);
  for (int i = 0; i < 50; ++i) blind.observe(1, one);
  EXPECT_LT(blind.seconds(3) - blind.seconds(1), 0.7 * (m.seconds(3, drafted) - m.seconds(1, ctx)));

  // Shorter contexts than the profile's count less, never below a tenth of
  // the profile.
  StepContext short_ctx;
  short_ctx.add(0, 8, 64);
  EXPECT_DOUBLE_EQ(short_ctx.token_keys, -512);
  EXPECT_NEAR(StepCostModel(forward).seconds(8, short_ctx), 1.5e-3, 1e-15);  // no terms: the profile
  StepCostModel steep(forward);
  steep.set_attention(64, 0, 1e-4);
  EXPECT_DOUBLE_EQ(steep.seconds(8, short_ctx), 0.1 * 1.5e-3);
}

TEST(FitAttention, RecoversPerSequenceAndPerTokenCosts) {
  const std::vector<std::pair<int32_t, double>> base = {{1, 1e-3}, {2, 1.1e-3}, {4, 1.2e-3}, {8, 1.6e-3}, {16, 3e-3}};
  const auto longer = [&](double per_seq, double per_token, int32_t span) {
    std::vector<std::pair<int32_t, double>> l;
    for (const auto& [n, t] : base)
      if (n == 1 || n == 4 || n == 8 || n == 16) l.push_back({n, t + span * (per_seq + n * per_token)});
    return l;
  };
  AttentionFit f = fit_attention(base, 64, longer(300e-9, 75e-9, 960), 1024);
  EXPECT_NEAR(f.per_seq_key, 300e-9, 1e-15);
  EXPECT_NEAR(f.per_token_key, 75e-9, 1e-15);
  // Noise that makes more queries cheaper: a per-sequence cost alone, the mean.
  auto l = longer(300e-9, 0, 960);
  l.back().second -= 1e-4;
  f = fit_attention(base, 64, l, 1024);
  EXPECT_EQ(f.per_token_key, 0);
  EXPECT_GT(f.per_seq_key, 250e-9);
  // A negative intercept: a per-token cost through the origin.
  f = fit_attention(base, 64, longer(-100e-9, 100e-9, 960), 1024);
  EXPECT_EQ(f.per_seq_key, 0);
  EXPECT_GT(f.per_token_key, 90e-9);
  // Nothing to fit: no context between them, or one size in common.
  f = fit_attention(base, 64, longer(300e-9, 75e-9, 0), 64);
  EXPECT_EQ(f.per_seq_key + f.per_token_key, 0);
  f = fit_attention(base, 64, {{1, 2e-3}, {3, 3e-3}}, 1024);
  EXPECT_EQ(f.per_seq_key + f.per_token_key, 0);
}

TEST(EstimateAcceptance, StartsAtThePriorAndFollowsTheData) {
  EXPECT_DOUBLE_EQ(estimate_acceptance(0, 0, 0.6), 0.6);
  EXPECT_NEAR(estimate_acceptance(900, 100, 0.2), 0.9, 0.01);
  EXPECT_NEAR(estimate_acceptance(0, 50, 0.9), 0.0, 0.04);
}

TEST(AcceptanceCounts, RecordsAndFades) {
  AcceptanceCounts a;
  a.record(4, false);  // all accepted: no rejection
  a.record(1, true);
  EXPECT_DOUBLE_EQ(a.num_accepted, 5.0);
  EXPECT_DOUBLE_EQ(a.num_rejected, 1.0);
  const double before = optimistic_acceptance(0, 3, 0.5);
  AcceptanceCounts failing{0, 3};
  for (int i = 0; i < 40; ++i) failing.fade();
  EXPECT_LT(failing.num_rejected, 0.5);
  EXPECT_GT(optimistic_acceptance(failing.num_accepted, failing.num_rejected, 0.5), before + 0.2);
}

TEST(AcceptanceCounts, ProbesNeverVerifiedAndLongPlannedAwaySequences) {
  AcceptanceCounts fresh;
  EXPECT_EQ(fresh.probed(0, 8, true), 2) << "a sequence never verified is tried once when drafts could pay";
  EXPECT_EQ(fresh.probed(0, 1, true), 1);
  EXPECT_EQ(fresh.probed(0, 8, false), 0) << "not where even perfect drafts cost more than they bring";
  EXPECT_EQ(fresh.probed(5, 8, false), 5) << "a planned length is kept";
  AcceptanceCounts failing{0, 1};  // one rejection, then planned away
  EXPECT_EQ(failing.probed(0, 8, true), 0) << "a recent rejection: not probed";
  int steps = 0;
  while (failing.probed(0, 8, true) == 0 && steps < 1000) {
    failing.fade();
    ++steps;
  }
  EXPECT_EQ(failing.probed(0, 8, true), 2);
  EXPECT_EQ(failing.probed(0, 8, false), 0) << "faded, but in a batch where drafts cannot pay";
  EXPECT_GT(steps, 20);
  EXPECT_LT(steps, 40);
}

TEST(AcceptanceCounts, ProbesSoonerWhereDraftsCouldWinMore) {
  EXPECT_EQ(probe_scale(0.0), 1.0);
  EXPECT_EQ(probe_scale(kProbeGainRef), 1.0);
  EXPECT_DOUBLE_EQ(probe_scale(2 * kProbeGainRef), 2.0);
  EXPECT_EQ(probe_scale(100.0), kMaxProbeScale);
  // Three rejections (a story's first trees), then planned away: probed
  // after ~50 steps where drafts could win 20%, ~20 where they could
  // double the step's tokens per second.
  auto steps_to_probe = [](double probe_below) {
    AcceptanceCounts a{0, 3};
    int steps = 0;
    while (a.probed(0, 8, true, probe_below) == 0 && steps < 1000) {
      a.fade();
      ++steps;
    }
    return steps;
  };
  const int slow = steps_to_probe(AcceptanceCounts::kProbeBelow * probe_scale(0.2));
  const int fast = steps_to_probe(AcceptanceCounts::kProbeBelow * probe_scale(1.0));
  EXPECT_GT(slow, 45);
  EXPECT_LT(fast, 25);
  EXPECT_GT(fast, 15) << "a rejection still keeps a sequence from drafting for a while";
}

TEST(ProbeBudget, ProbesSpendAtMostTheirShareOfStepTime) {
  ProbeBudget budget;
  EXPECT_FALSE(budget.spend(1e-6)) << "no credit before a step ran";
  // Steps of 10 ms; a probe of 1 ms wanted at every one of them.
  double spent = 0, ran = 0;
  int32_t probes = 0;
  for (int step = 0; step < 2000; ++step) {
    budget.earn(0.010);
    ran += 0.010;
    if (budget.spend(0.001)) {
      spent += 0.001;
      ++probes;
    }
  }
  EXPECT_LE(spent, ProbeBudget::kShare * ran + 1e-9);
  EXPECT_GE(spent, 0.9 * ProbeBudget::kShare * ran) << "the share is used, not starved";
  EXPECT_NEAR(probes, 200, 2);
  // Credit stops at kMaxSteps steps' worth: no burst after a quiet stretch.
  for (int step = 0; step < 1000; ++step) budget.earn(0.010);
  EXPECT_NEAR(budget.credit(), ProbeBudget::kShare * ProbeBudget::kMaxSteps * 0.010, 1e-9);
  EXPECT_FALSE(budget.spend(budget.credit() * 1.01));
  EXPECT_TRUE(budget.spend(budget.credit()));
  // Where drafts could win more, probes may spend a larger share.
  ProbeBudget wide;
  spent = 0;
  for (int step = 0; step < 2000; ++step) {
    wide.earn(0.010, 3.0);
    if (wide.spend(0.001)) spent += 0.001;
  }
  EXPECT_LE(spent, 3 * ProbeBudget::kShare * 20.0 + 1e-9);
  EXPECT_GE(spent, 0.9 * 3 * ProbeBudget::kShare * 20.0);
  // Probes that cost next to nothing (batch 1) are never held back.
  ProbeBudget cheap;
  for (int step = 0; step < 100; ++step) {
    cheap.earn(0.002);
    EXPECT_TRUE(cheap.spend(0.00001)) << step;
  }
}

TEST(OptimisticAcceptance, TriesTheUnknownAndConvergesOnTheKnown) {
  EXPECT_GT(optimistic_acceptance(0, 0, 0.5), 0.75);  // no data: tried
  EXPECT_LT(optimistic_acceptance(0, 4, 0.5), 0.35);  // four straight rejections: not any more
  EXPECT_NEAR(optimistic_acceptance(800, 200, 0.5), 0.8, 0.02);
  EXPECT_GT(optimistic_acceptance(0, 4 * 0.1, 0.5), 0.65);  // faded counts: tried again
  for (double a = 0; a < 50; a += 7)
    for (double r = 0; r < 50; r += 5) EXPECT_GE(optimistic_acceptance(a, r, 0.4), estimate_acceptance(a, r, 0.4));
}

TEST(PlanDraftLengths, GainScaleTakesBackOptimism) {
  // One decode token; a second verified token costs half a step more. At
  // acceptance 0.6 the draft pays ((1 + 0.6) / 1.5 > 1 / 1); when
  // verification accepts half of what was planned it does not.
  const StepCostModel cost({{1, 1.0}, {2, 1.5}});
  const std::vector<DraftCandidate> c = {chain(0.6, 1)};
  double gain = -1;
  EXPECT_EQ(plan_draft_lengths(cost, 1, c, nullptr, 0.0, 1, 1.0, &gain), std::vector<int32_t>{1});
  EXPECT_DOUBLE_EQ(gain, 1.6 / 1.5 - 1.0) << "the plan's tokens per second over the plain step's";
  EXPECT_EQ(plan_draft_lengths(cost, 1, c, nullptr, 0.0, 1, 0.5, &gain), std::vector<int32_t>{0});
  EXPECT_EQ(gain, 0.0);
}

TEST(PlannedGain, SumsTheChainOrTheTreesNodes) {
  EXPECT_DOUBLE_EQ(planned_gain(chain(0.5, 4), 3), 0.5 + 0.25 + 0.125);
  EXPECT_DOUBLE_EQ(planned_gain(chain(0.5, 2), 5), 0.75);  // at most max_drafts
  EXPECT_DOUBLE_EQ(planned_gain(chain(0.5, 4), 0), 0.0);
  const std::vector<double> nodes = {0.9, 0.4, 0.3};
  EXPECT_DOUBLE_EQ(planned_gain({0.5, 3, nodes}, 2), 1.3);
}

TEST(GainCalibration, RatioOfAcceptedToPlannedClamped) {
  GainCalibration g;
  EXPECT_EQ(g.scale(), 1.0);
  g.record(2.0, 1);
  EXPECT_EQ(g.scale(), 1.0);  // too few planned drafts to judge
  for (int i = 0; i < 200; ++i) g.record(2.0, 1);
  EXPECT_NEAR(g.scale(), 0.5, 1e-9);
  for (int i = 0; i < 1000; ++i) g.record(2.0, 0);  // recent verifications dominate
  EXPECT_EQ(g.scale(), 0.25);
  for (int i = 0; i < 1000; ++i) g.record(1.0, 3);
  EXPECT_EQ(g.scale(), 1.25);
}

TEST(PlanDraftLengths, FreeVerificationTakesEveryDraft) {
  const StepCostModel flat({{1, 1e-3}, {512, 1e-3}});
  const std::vector<DraftCandidate> c = {chain(0.9, 5), chain(0.1, 3), chain(0.0, 4), chain(0.5, 0)};
  EXPECT_EQ(plan_draft_lengths(flat, 4, c), (std::vector<int32_t>{5, 3, 0, 0}));
}

TEST(PlanDraftLengths, ComputeBoundVerificationTakesNone) {
  const StepCostModel linear({{1, 1e-3}, {512, 512e-3}});  // every token costs the same
  const std::vector<DraftCandidate> c = {chain(0.95, 8), chain(0.7, 8)};
  EXPECT_EQ(plan_draft_lengths(linear, 2, c), (std::vector<int32_t>{0, 0}));
}

TEST(PlanDraftLengths, ADraftModelsForwardsCount) {
  // Free verification; each draft pass costs the draft model one forward.
  const StepCostModel flat({{1, 10e-3}, {512, 10e-3}});
  const std::vector<DraftCandidate> one = {chain(0.8, 8)};
  // A free draft model changes nothing: every draft is taken.
  const StepCostModel free_draft({{1, 0.0}, {512, 0.0}});
  EXPECT_EQ(plan_draft_lengths(flat, 1, one, &free_draft), (std::vector<int32_t>{8}));
  // A draft forward at 40% of the target's: 1 + 0.8 + ... + 0.8^k tokens
  // over 10 ms + 4 ms per draft pass (k of them) is best at k = 2 (2.44
  // tokens in 18 ms; k = 3: 2.95 in 22).
  const StepCostModel slow_draft({{1, 4e-3}, {512, 4e-3}});
  EXPECT_EQ(plan_draft_lengths(flat, 1, one, &slow_draft), (std::vector<int32_t>{2}));
  // As costly as the target: no draft pays for its forward.
  const StepCostModel same({{1, 10e-3}, {512, 10e-3}});
  EXPECT_EQ(plan_draft_lengths(flat, 1, one, &same), (std::vector<int32_t>{0}));
  // Batched sequences share a pass: two sequences draft as deep as one.
  const std::vector<DraftCandidate> two = {chain(0.8, 8), chain(0.8, 8)};
  EXPECT_EQ(plan_draft_lengths(flat, 2, two, &slow_draft), (std::vector<int32_t>{2, 2}));
}

TEST(PlanDraftLengths, ADraftModelsCatchUpCounts) {
  // Free verification; the draft model's forward costs 1 ms per row.
  const StepCostModel flat({{1, 10e-3}, {512, 10e-3}});
  const StepCostModel per_row({{1, 1e-3}, {512, 512e-3}});
  // Caught up: k drafts at acceptance 0.5 give 2 - 0.5^k tokens in 10 + k
  // ms, best at k = 2 (1.75 in 12).
  const std::vector<DraftCandidate> fresh = {{0.5, 8, {}, 0}};
  EXPECT_EQ(plan_draft_lengths(flat, 1, fresh, &per_row), (std::vector<int32_t>{2}));
  // 4 rows behind: the first pass costs 5 ms, so it drafts deeper to pay
  // the catch-up back (1.875 tokens in 17 ms beat 1.75 in 16).
  const std::vector<DraftCandidate> behind = {{0.5, 8, {}, 4}};
  EXPECT_EQ(plan_draft_lengths(flat, 1, behind, &per_row), (std::vector<int32_t>{3}));
  // 64 rows behind (a new request's prompt): under 2 tokens for 75+ ms lose
  // to 1 token in 10.
  const std::vector<DraftCandidate> prompt = {{0.5, 8, {}, 64}};
  EXPECT_EQ(plan_draft_lengths(flat, 1, prompt, &per_row), (std::vector<int32_t>{0}));
  // Without a draft model nothing is caught up: the lag is not counted.
  EXPECT_EQ(plan_draft_lengths(flat, 1, prompt), (std::vector<int32_t>{8}));
}

TEST(PlanDraftLengths, APerSequenceDraftingCostCounts) {
  // Free verification; Medusa's heads cost each drafting sequence once.
  const StepCostModel flat({{1, 10e-3}, {512, 10e-3}});
  const std::vector<DraftCandidate> one = {chain(0.5, 8)};
  EXPECT_EQ(plan_draft_lengths(flat, 1, one, nullptr, 0.0), (std::vector<int32_t>{8}));
  // 2 ms: ~2 tokens in 12 ms beat 1 in 10.
  EXPECT_EQ(plan_draft_lengths(flat, 1, one, nullptr, 2e-3), (std::vector<int32_t>{8}));
  // 20 ms: ~2 tokens in 30 ms lose to 1 in 10.
  EXPECT_EQ(plan_draft_lengths(flat, 1, one, nullptr, 20e-3), (std::vector<int32_t>{0}));
  // Paid per sequence: two sequences at 2 ms each draw ~4 tokens in 14 ms
  // (vs 2 in 10); at 8 ms each, 4 in 26 and 3 in 18 both lose.
  const std::vector<DraftCandidate> two = {chain(0.5, 8), chain(0.5, 8)};
  EXPECT_EQ(plan_draft_lengths(flat, 2, two, nullptr, 2e-3), (std::vector<int32_t>{8, 8}));
  EXPECT_EQ(plan_draft_lengths(flat, 2, two, nullptr, 8e-3), (std::vector<int32_t>{0, 0}));
  // Paid per head (a Medusa tree of n nodes runs heads_run(n, 4) =
  // min(n + 1, 4) heads): at 2.5 ms a head, 1.5 tokens in 15 ms and 1.75 in
  // 17.5 only tie 1 in 10 and 8 drafts' ~2 in 20 lose: no draft. Counting
  // min(n, 4) heads (one fewer) would take 1.5 in 12.5.
  EXPECT_EQ(plan_draft_lengths(flat, 1, one, nullptr, 2.5e-3, 4), (std::vector<int32_t>{0}));
  // At 1.5 ms: heads beyond the 4th cost nothing more, so past 3 drafts only
  // verification counts and 8 drafts' ~2 tokens in 16 ms win.
  EXPECT_EQ(plan_draft_lengths(flat, 1, one, nullptr, 1.5e-3, 4), (std::vector<int32_t>{8}));
}

TEST(PlanDraftLengths, HeadsRunOneBeyondTheTreeDepth) {
  EXPECT_EQ(heads_run(0, 4), 0);
  EXPECT_EQ(heads_run(1, 4), 2);
  EXPECT_EQ(heads_run(3, 4), 4);
  EXPECT_EQ(heads_run(9, 4), 4);
  // One pass: a cost per drafting sequence.
  EXPECT_EQ(heads_run(1, 1), 1);
  EXPECT_EQ(heads_run(5, 1), 1);
  EXPECT_EQ(heads_run(2, 0), 1);
}

TEST(PlanDraftLengths, SpeculationShrinksAsTheBatchGrows) {
  // Memory-bound up to ~16 tokens, then linear: a CPU's decode step.
  const StepCostModel cpu({{1, 10e-3}, {16, 12e-3}, {64, 40e-3}, {256, 160e-3}});
  double prev = 1e9;
  for (int32_t b : {1, 2, 4, 8, 16, 32, 64}) {
    const std::vector<DraftCandidate> c(static_cast<size_t>(b), chain(0.6, 8));
    int32_t total = 0;
    for (int32_t k : plan_draft_lengths(cpu, b, c)) total += k;
    const double per_seq = static_cast<double>(total) / b;
    EXPECT_LE(per_seq, prev) << "batch " << b;
    prev = per_seq;
    if (b == 1) {
      EXPECT_GE(total, 3) << "batch 1 speculates";
    }
    if (b >= 32) {
      EXPECT_EQ(total, 0) << "batch " << b << " is compute-bound";
    }
  }
}

TEST(PlanDraftLengths, MatchesExhaustiveSearchOnRandomCases) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 3);
    std::vector<DraftCandidate> c(static_cast<size_t>(n));
    for (auto& x : c) x = chain(u(rng) < 0.2 ? 0.0 : u(rng), static_cast<int32_t>(rng() % 4));
    std::vector<std::pair<int32_t, double>> pts;
    double t = 1.0 + u(rng);
    for (int32_t tok = 1; tok <= 16; tok += 1 + static_cast<int32_t>(rng() % 3)) {
      pts.push_back({tok, t});
      t += u(rng) < 0.5 ? 0.0 : u(rng);  // flat stretches and jumps
    }
    const StepCostModel cost(pts);
    const int32_t base = n + static_cast<int32_t>(rng() % 3);
    const std::vector<int32_t> k = plan_draft_lengths(cost, base, c);
    for (size_t i = 0; i < c.size(); ++i) ASSERT_TRUE(k[i] >= 0 && k[i] <= c[i].max_drafts);
    // Every assignment of draft lengths, exhaustively.
    double best = 0.0;
    std::vector<int32_t> cur(c.size(), 0);
    std::function<void(size_t)> walk = [&](size_t i) {
      if (i == c.size()) {
        best = std::max(best, rate(cost, base, c, cur));
        return;
      }
      for (cur[i] = 0; cur[i] <= c[i].max_drafts; ++cur[i]) walk(i + 1);
    };
    walk(0);
    EXPECT_NEAR(rate(cost, base, c, k), best, best * 1e-6) << "trial " << trial;
  }
}

// A step of sequences at long contexts: most of its time is their K/V
// streams, which drafts share, so drafts are cheap next to it. Steps as the
// attention terms say, observed steadily (no drafts yet): with the terms,
// the plan is the best one under the true step times; scaling the profile
// by the observed steps instead prices drafts at the K/V streams' share and
// plans none, a quarter slower than the best plan.
TEST(PlanDraftLengths, LongContextsPriceDraftsByWhatTheyRead) {
  // The bundled model's profile after 64 cached tokens (ms), and its
  // attention terms (bench/RESULTS.md, 2026-12-06 late), in seconds.
  const std::vector<std::pair<int32_t, double>> profile = {{1, 0.264e-3}, {2, 0.30e-3},  {4, 0.356e-3}, {8, 0.54e-3},
                                                           {16, 0.99e-3}, {32, 1.83e-3}, {64, 3.65e-3}, {128, 7.2e-3}};
  const int32_t b = 16, context = 1000;
  StepCostModel truth(profile);
  truth.set_attention(64, 310e-9, 75e-9);
  StepContext base;
  for (int32_t i = 0; i < b; ++i) base.add(context, 1, 64);
  StepCostModel aware = truth, blind(profile);
  for (int i = 0; i < 50; ++i) {
    aware.observe(b, truth.seconds(b, base), base);
    blind.observe(b, truth.seconds(b, base));
  }
  const std::vector<DraftCandidate> c(static_cast<size_t>(b), {0.7, 8, {}, 0, context});
  const auto true_rate = [&](const std::vector<int32_t>& k) {
    StepContext ctx = base;
    int32_t n = b;
    for (int32_t x : k) {
      n += x;
      ctx.token_keys += static_cast<double>(x) * (context - 64);
    }
    return expected_tokens(c, k, b) / truth.seconds(n, ctx);
  };
  // The best plan: d drafts spread evenly (the candidates are alike).
  double best = 0;
  for (int32_t d = 0; d <= 8 * b; ++d) {
    std::vector<int32_t> k(static_cast<size_t>(b), d / b);
    for (int32_t i = 0; i < d % b; ++i) ++k[static_cast<size_t>(i)];
    best = std::max(best, true_rate(k));
  }
  const std::vector<int32_t> k_aware = plan_draft_lengths(aware, b, c, nullptr, 0, 1, 1.0, nullptr, base);
  const std::vector<int32_t> k_blind = plan_draft_lengths(blind, b, c);
  EXPECT_NEAR(true_rate(k_aware), best, best * 1e-9);
  EXPECT_GT(best, 1.3 * true_rate(std::vector<int32_t>(static_cast<size_t>(b), 0)));
  EXPECT_LT(true_rate(k_blind), 0.8 * best);
}

// Drafts of sequences at different contexts read different amounts: a
// draft of a short sequence goes first; on random cases the plan is within
// 2% of the best assignment of draft lengths (it is exact where contexts
// are alike: MatchesExhaustiveSearchOnRandomCases).
TEST(PlanDraftLengths, ShortContextsDraftFirst) {
  const std::vector<std::pair<int32_t, double>> profile = {{1, 1e-3}, {4, 1.1e-3}, {8, 1.3e-3}, {16, 2e-3}};
  StepCostModel cost(profile);
  cost.set_attention(64, 100e-9, 200e-9);
  const std::vector<DraftCandidate> two = {{0.6, 4, {}, 0, 4000}, {0.6, 4, {}, 0, 100}};
  StepContext base;
  base.add(4000, 1, 64);
  base.add(100, 1, 64);
  const std::vector<int32_t> k = plan_draft_lengths(cost, 2, two, nullptr, 0, 1, 1.0, nullptr, base);
  EXPECT_GT(k[1], k[0]);
  EXPECT_GT(k[1], 0);

  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  double worst = 1.0;
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 3);
    std::vector<DraftCandidate> c(static_cast<size_t>(n));
    StepContext ctx;
    for (auto& x : c) {
      x = {u(rng), static_cast<int32_t>(rng() % 5), {}, 0, static_cast<int32_t>(rng() % 4000)};
      ctx.add(x.context, 1, 64);
    }
    StepCostModel m(profile);
    m.set_attention(64, 300e-9 * u(rng), 300e-9 * u(rng));
    const std::vector<int32_t> k = plan_draft_lengths(m, n, c, nullptr, 0, 1, 1.0, nullptr, ctx);
    const auto rate_of = [&](const std::vector<int32_t>& plan) {
      StepContext s = ctx;
      int32_t tokens = n;
      for (size_t i = 0; i < c.size(); ++i) {
        tokens += plan[i];
        s.token_keys += static_cast<double>(plan[i]) * (c[i].context - 64);
      }
      return expected_tokens(c, plan, n) / m.seconds(tokens, s);
    };
    double best = 0.0;
    std::vector<int32_t> cur(c.size(), 0);
    std::function<void(size_t)> walk = [&](size_t i) {
      if (i == c.size()) {
        best = std::max(best, rate_of(cur));
        return;
      }
      for (cur[i] = 0; cur[i] <= c[i].max_drafts; ++cur[i]) walk(i + 1);
    };
    walk(0);
    worst = std::min(worst, rate_of(k) / best);
  }
  EXPECT_GT(worst, 0.98);
}

// A tree's nodes are priced by their own gains, not as a chain: with the
// same per-depth acceptance, a tree whose later nodes are rarely accepted
// gets fewer drafts than a chain.
TEST(PlanDraftLengths, TreesUseTheirNodeGains) {
  const StepCostModel cost({{1, 1.0}, {2, 1.05}, {4, 1.15}, {8, 1.4}, {16, 2.0}});
  const std::vector<double> flat = {0.8, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05};
  std::vector<DraftCandidate> tree = {chain(0.8, 8)};
  tree[0].node_gains = flat;
  const auto k_tree = plan_draft_lengths(cost, 1, tree);
  const auto k_chain = plan_draft_lengths(cost, 1, std::vector<DraftCandidate>{chain(0.8, 8)});
  EXPECT_EQ(k_tree[0], 1);
  EXPECT_GT(k_chain[0], 2);
  const std::vector<double> none(8, 0.0);
  tree[0].node_gains = none;
  EXPECT_EQ(plan_draft_lengths(cost, 1, tree)[0], 0);
}

}  // namespace
}  // namespace pagoda
