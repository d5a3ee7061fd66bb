#include "spec/spec_gate.h"

#include <gtest/gtest.h>

#include <random>

namespace pagoda {
namespace {

// Steps of a simulated machine: each arm's tokens per second with `sd`
// relative noise. Returns the fraction of steps (after the first 100) that
// carried drafts.
double drafted_share(double plain_rate, double drafted_rate, int32_t num_seqs, uint32_t seed, double sd = 0.1) {
  SpecGate gate;
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(1.0, sd);
  int32_t drafted = 0, counted = 0;
  for (int step = 0; step < 1000; ++step) {
    const bool d = gate.allow(num_seqs);
    const double rate = (d ? drafted_rate : plain_rate) * noise(rng);
    const int64_t tokens = d ? 2 * num_seqs : num_seqs;
    gate.record(num_seqs, d, tokens, static_cast<double>(tokens) / rate);
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
  EXPECT_GE(gate.samples(1, false), SpecGate::kMinSamples);
  int32_t on1 = 0, on16 = 0;
  for (int step = 0; step < 64; ++step) {
    on1 += gate.allow(1) ? 1 : 0;
    on16 += gate.allow(16) ? 1 : 0;
  }
  EXPECT_EQ(on1, 62);  // all but the two probes of the losing arm
  EXPECT_EQ(on16, 2);
  // 16 and 31 share a bucket; 15 is in the one before.
  EXPECT_EQ(gate.samples(31, true), gate.samples(16, true));
  EXPECT_EQ(gate.samples(15, true), 0);
}

}  // namespace
}  // namespace pagoda
