#include "spec/spec_gate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace pagoda {
namespace {

// Steps of a simulated machine: each arm's tokens per second with `sd`
// relative noise. Returns the fraction of steps (after the first 100) that
// carried drafts.
// With `drift`, both arms slow down by that fraction over the 1000 steps
// (contexts grow); with `slow_every`, one step in that many runs 3x slower
// (fresh KV memory touched first).
double drafted_share(double plain_rate, double drafted_rate, int32_t num_seqs, uint32_t seed, double sd = 0.1,
                     double drift = 0, int slow_every = 0) {
  SpecGate gate;
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(1.0, sd);
  int32_t drafted = 0, counted = 0;
  for (int step = 0; step < 1000; ++step) {
    const bool d = gate.allow(num_seqs);
    double rate = (d ? drafted_rate : plain_rate) * noise(rng) * (1.0 - drift * step / 1000.0);
    if (slow_every > 0 && step % slow_every == slow_every - 1) rate /= 3;
    const int64_t tokens = d ? 2 * num_seqs : num_seqs;
    gate.record(step, num_seqs, d, tokens, static_cast<double>(tokens) / rate);
    if (step >= 100) {
      ++counted;
      drafted += d ? 1 : 0;
    }
  }
  return static_cast<double>(drafted) / counted;
}

TEST(SpecGate, SpeculatesWhereItMeasuredFasterOnly) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    // Drafts 30% faster: speculation on, but for one probe in kProbeEvery.
    EXPECT_GT(drafted_share(1000, 1300, 4, seed), 0.9) << seed;
    // Drafts 20% slower: off, but for the probes.
    EXPECT_LT(drafted_share(1000, 800, 16, seed), 0.1) << seed;
  }
}

TEST(SpecGate, DraftsMustMeasureAGainNotParity) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    // Drafts as fast as plain steps, or 1% faster: their costs outside the
    // measured steps make them a loss, so off but for the probes.
    EXPECT_LT(drafted_share(1000, 1000, 16, seed, 0.01), 0.1) << seed;
    EXPECT_LT(drafted_share(1000, 1010, 16, seed, 0.01), 0.1) << seed;
    // 6% faster: worth it.
    EXPECT_GT(drafted_share(1000, 1060, 16, seed, 0.01), 0.9) << seed;
  }
}

TEST(SpecGate, ContextDriftAndSlowStepsDoNotMislead) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    // Both arms 40% slower by the end, one step in 16 three times slower:
    // drafts 5% slower stay off, 20% faster stay on. A gate comparing the
    // rare arm's old samples with the frequent arm's new ones drafts at a
    // loss here. (A slow drafted step counts for its time, clamped to twice
    // a normal one's: at 15% faster the slow steps bring the measured gain
    // to ~6%, near the margin.)
    EXPECT_LT(drafted_share(1000, 950, 64, seed, 0.02, 0.4, 16), 0.1) << seed;
    EXPECT_GT(drafted_share(1000, 1200, 64, seed, 0.02, 0.4, 16), 0.9) << seed;
  }
}

TEST(SpecGate, LargeSlowTreesCountForTheirTime) {
  // Two drafted steps in three carry a small tree, 25% faster than plain
  // steps; the third a large one, 20% slower and four times as long. Per
  // step drafts mostly win; per second of the run they lose 5%.
  SpecGate gate;
  int64_t drafted_steps = 0, late_drafted = 0;
  for (int64_t step = 0; step < 2000; ++step) {
    const bool d = gate.allow(64);
    if (!d) {
      gate.record(step, 64, false, 64, 64 / 1000.0);
      continue;
    }
    const bool large = drafted_steps++ % 3 == 2;
    const int64_t tokens = large ? 256 : 80;
    gate.record(step, 64, true, tokens, tokens / (large ? 800.0 : 1250.0));
    if (step >= 1000) ++late_drafted;
  }
  EXPECT_LT(gate.gain(64), 1.0);
  EXPECT_LE(late_drafted, 1000 / SpecGate::kProbeEvery + 1);  // the probes only
}

TEST(SpecGate, BatchSizesAreJudgedApart) {
  SpecGate gate;
  EXPECT_FALSE(gate.measured_off(16));  // no verdict before any sample
  // Batch 1: drafts double the rate; batch 16: they halve it.
  int64_t step = 0;
  for (int i = 0; i < 400; ++i) {
    for (int32_t n : {1, 16}) {
      const bool d = gate.allow(n);
      const double rate = n == 1 ? (d ? 200.0 : 100.0) : (d ? 500.0 : 1000.0);
      gate.record(step++, n, d, n, n / rate);
    }
  }
  EXPECT_DOUBLE_EQ(gate.gain(1), 2.0);
  EXPECT_DOUBLE_EQ(gate.gain(16), 0.5);
  EXPECT_GE(gate.samples(1), SpecGate::kMinSamples);
  // Steps the gate does not sample (those that also prefill) follow it.
  EXPECT_FALSE(gate.measured_off(1));
  EXPECT_TRUE(gate.measured_off(16));
  int32_t on1 = 0, on16 = 0;
  for (int i = 0; i < 256; ++i) {
    on1 += gate.allow(1) ? 1 : 0;
    on16 += gate.allow(16) ? 1 : 0;
  }
  // All but the (rare by now) probes of the losing arm.
  EXPECT_GE(on1, 254);
  EXPECT_LT(on1, 256);
  EXPECT_LE(on16, 2);
  EXPECT_GT(on16, 0);
  // 16 and 31 share a bucket; 15 is in the one before.
  EXPECT_EQ(gate.samples(31), gate.samples(16));
  EXPECT_EQ(gate.samples(15), 0);
}

TEST(SpecGate, ProbesBackOffWhileTheyConfirmAndReturnOnAChange) {
  SpecGate gate;
  double drafted_rate = 2000;  // drafts twice as fast, later half
  std::vector<int64_t> probes;
  int32_t late_drafted = 0;
  for (int64_t step = 0; step < 3000; ++step) {
    if (step == 2000) drafted_rate = 500;
    const bool d = gate.allow(4);
    if (!d && gate.samples(4) >= SpecGate::kMinSamples && step < 2000) probes.push_back(step);
    if (step >= 2900) late_drafted += d ? 1 : 0;
    gate.record(step, 4, d, 4, 4 / (d ? drafted_rate : 1000.0));
  }
  // Plain probes among drafted steps, the first kProbeEvery steps after the
  // verdict, then at doubling intervals up to the cap.
  ASSERT_GE(probes.size(), 6u);
  for (size_t i = 1; i < probes.size(); ++i) {
    const int64_t want = std::min<int64_t>(SpecGate::kProbeEvery << i, SpecGate::kMaxProbeEvery);
    EXPECT_EQ(probes[i] - probes[i - 1], want) << i;
  }
  // Once drafts lose, the first probe that says so brings the probes back
  // often, and the gate turns drafts off.
  EXPECT_EQ(late_drafted, 0);
  EXPECT_TRUE(gate.measured_off(4));
}

}  // namespace
}  // namespace pagoda
