#include "spec/spec_gate.h"

#include <gtest/gtest.h>

#include <random>

namespace pagoda {
namespace {

// Steps of a simulated machine: rate(step, drafted) is an arm's tokens per
// second, with `sd` relative noise. Returns the fraction of steps (after the
// first 100) that carried drafts.
template <typename Rate>
double drafted_share_of(Rate rate, int32_t num_seqs, uint32_t seed, double sd) {
  SpecGate gate;
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(1.0, sd);
  int32_t drafted = 0, counted = 0;
  for (int step = 0; step < 1000; ++step) {
    const bool d = gate.allow(num_seqs);
    const double r = rate(step, d) * noise(rng);
    const int64_t tokens = d ? 2 * num_seqs : num_seqs;
    gate.record(num_seqs, d, tokens, static_cast<double>(tokens) / r);
    if (step >= 100) {
      ++counted;
      drafted += d ? 1 : 0;
    }
  }
  return static_cast<double>(drafted) / counted;
}

// Each arm at a fixed rate.
double drafted_share(double plain_rate, double drafted_rate, int32_t num_seqs, uint32_t seed, double sd = 0.1) {
  return drafted_share_of([&](int, bool d) { return d ? drafted_rate : plain_rate; }, num_seqs, seed, sd);
}

TEST(SpecGate, SpeculatesWhereItMeasuredFasterOnly) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    // Drafts 30% faster: speculation on, but for the probes.
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

// Steps on the slower arm among the first `steps` (noise sd 10%).
int32_t explored(double plain_rate, double drafted_rate, int steps, uint32_t seed) {
  SpecGate gate;
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(1.0, 0.1);
  int32_t slower = 0;
  for (int step = 0; step < steps; ++step) {
    const bool d = gate.allow(8);
    slower += d == (drafted_rate < plain_rate) ? 1 : 0;
    const double rate = (d ? drafted_rate : plain_rate) * noise(rng);
    gate.record(8, d, 8, 8 / rate);
  }
  return slower;
}

TEST(SpecGate, ExploresLittleWhereOneArmIsClearlyFaster) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    // kMinSamples / 2 steps on the slower arm to see it, then probes 32,
    // 64, 128 steps apart: 7 of 256 (sampling each arm to kMinSamples, one
    // plain step in four, and a probe every 32 steps made it 28 or 15).
    EXPECT_LE(explored(1000, 600, 256, seed), 8) << seed;
    EXPECT_LE(explored(1000, 1500, 256, seed), 8) << seed;
    // Over a long run the probes thin out to one in kMaxProbeEvery.
    EXPECT_LE(explored(1000, 600, 4096, seed), 8 + 4096 / SpecGate::kMaxProbeEvery) << seed;
  }
}

// Drafts lose for 2,000 steps (the probes are kMaxProbeEvery apart by
// then), then win (copy-heavy text arrives): the first probe that measures
// them ahead brings the next ones close, and the gate turns drafts on
// within a probe gap and a few rechecks; back the other way the drafted
// arm itself measures the loss.
TEST(SpecGate, FollowsAChangeOfWhichArmIsFaster) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    SpecGate gate;
    std::mt19937 rng(seed);
    std::normal_distribution<double> noise(1.0, 0.1);
    int on_after = -1, off_after = -1;
    for (int step = 0; step < 6000; ++step) {
      const int phase = step < 2000 ? 0 : step < 4000 ? 1 : 2;
      const double drafted_rate = phase == 1 ? 1500 : 700;
      const bool d = gate.allow(8);
      const double rate = (d ? drafted_rate : 1000) * noise(rng);
      gate.record(8, d, 8, 8 / rate);
      if (phase == 1 && on_after < 0 && gate.rate(8, true) >= gate.rate(8, false) * (1 + SpecGate::kMinGain))
        on_after = step - 2000;
      if (phase == 2 && off_after < 0 && gate.rate(8, true) < gate.rate(8, false)) off_after = step - 4000;
    }
    EXPECT_GE(on_after, 0) << seed;
    EXPECT_LE(on_after, SpecGate::kMaxProbeEvery + 8 * SpecGate::kRecheckEvery) << seed;
    EXPECT_GE(off_after, 0) << seed;
    EXPECT_LE(off_after, 24) << seed;  // ~10 drafted steps at 10% each
  }
}

// Steps slow down as the batch's contexts grow (here to a third over 1,000
// steps), for both arms alike, with 3% noise: the gate compares steps close
// in time, so an arm last sampled earlier, when steps were faster, does not
// win on that.
double drafted_share_drifting(double gain, uint32_t seed) {
  return drafted_share_of([&](int step, bool d) { return 1000.0 / (1.0 + step / 500.0) * (d ? 1.0 + gain : 1.0); }, 64,
                          seed, 0.03);
}

TEST(SpecGate, ComparesArmsCloseInTimeWhileStepsSlowDown) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    // Even, or 1% faster: off but for the probes and their rechecks
    // (comparing the arms' averages, drafts ran in 25-33% of these steps).
    EXPECT_LT(drafted_share_drifting(0.0, seed), 0.1) << seed;
    EXPECT_LT(drafted_share_drifting(0.01, seed), 0.1) << seed;
    // 8% faster: on (81-82% of the steps with the arms' averages).
    EXPECT_GT(drafted_share_drifting(0.08, seed), 0.95) << seed;
  }
}

TEST(SpecGate, BatchSizesAreJudgedApart) {
  SpecGate gate;
  // Batch 1: drafts double the rate; batch 16: they halve it.
  for (int step = 0; step < 400; ++step) {
    for (int32_t n : {1, 16}) {
      const bool d = gate.allow(n);
      const double rate = n == 1 ? (d ? 200.0 : 100.0) : (d ? 500.0 : 1000.0);
      gate.record(n, d, n, n / rate);
    }
  }
  EXPECT_GT(gate.rate(1, true), gate.rate(1, false));
  EXPECT_LT(gate.rate(16, true), gate.rate(16, false));
  EXPECT_GE(gate.samples(1, false), SpecGate::kMinSamples / 2);
  int32_t on1 = 0, on16 = 0;
  for (int step = 0; step < 64; ++step) {
    on1 += gate.allow(1) ? 1 : 0;
    on16 += gate.allow(16) ? 1 : 0;
  }
  EXPECT_GE(on1, 63);  // all but a probe of the losing arm (kMaxProbeEvery apart by now)
  EXPECT_LE(on16, 1);
  // 16 and 31 share a bucket; 15 is in the one before.
  EXPECT_EQ(gate.samples(31, true), gate.samples(16, true));
  EXPECT_EQ(gate.samples(15, true), 0);
}

}  // namespace
}  // namespace pagoda
