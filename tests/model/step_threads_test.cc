#include "model/step_threads.h"

#include <gtest/gtest.h>

#include <array>
#include <functional>

namespace pagoda {
namespace {

using Way = StepThreadChooser::Way;

// Runs `steps` steps of `macs` multiply-adds through `c`, a step taking
// cost(way, i) seconds per multiply-add; returns how many ran each way.
std::array<int, 2> simulate(StepThreadChooser& c, int64_t macs, int first, int steps,
                            const std::function<double(Way, int)>& cost, Way prior = StepThreadChooser::kAlone) {
  std::array<int, 2> n{0, 0};
  for (int i = first; i < first + steps; ++i) {
    const Way w = c.choose(macs, prior);
    ++n[w];
    c.record(macs, w, cost(w, i) * static_cast<double>(macs));
  }
  return n;
}

TEST(StepThreadChooser, SettlesOnTheFasterWayAndRetriesTheOtherRarely) {
  for (const Way fast : {StepThreadChooser::kAlone, StepThreadChooser::kPool}) {
    StepThreadChooser c;
    const auto cost = [fast](Way w, int) { return w == fast ? 1e-9 : 1.3e-9; };
    const Way slow = fast == StepThreadChooser::kAlone ? StepThreadChooser::kPool : StepThreadChooser::kAlone;
    const auto n = simulate(c, 1 << 20, 0, 2000, cost, slow);
    EXPECT_EQ(c.best(1 << 20), fast);
    // The prior's cold step and timed step, then trials after 16, 32, ...,
    // 1024 steps: 6 of them in 2000 steps.
    EXPECT_LE(n[slow], 2 + 6 * StepThreadChooser::kTrialSteps) << "the slower way ran " << n[slow] << " of 2000 steps";
    EXPECT_GE(n[slow], 2 + 5 * StepThreadChooser::kTrialSteps) << "the slower way was not re-tried";
  }
}

TEST(StepThreadChooser, StartsFromThePriorAndDoesNotTimeAClassFirstStep) {
  StepThreadChooser c;
  const int64_t macs = 1000;
  ASSERT_EQ(c.choose(macs, StepThreadChooser::kPool), StepThreadChooser::kPool);
  c.record(macs, StepThreadChooser::kPool, 1.0);  // cold: buffers sized, caches filled
  ASSERT_EQ(c.choose(macs, StepThreadChooser::kPool), StepThreadChooser::kPool);
  c.record(macs, StepThreadChooser::kPool, 1e-6);
  ASSERT_EQ(c.choose(macs, StepThreadChooser::kPool), StepThreadChooser::kAlone);
  c.record(macs, StepThreadChooser::kAlone, 2e-6);
  EXPECT_EQ(c.best(macs), StepThreadChooser::kPool);
  EXPECT_EQ(c.choose(macs, StepThreadChooser::kPool), StepThreadChooser::kPool);
  // A class far from any compared one starts from its own prior; one next
  // to a compared class starts from that class's choice.
  EXPECT_EQ(c.choose(100 * macs, StepThreadChooser::kAlone), StepThreadChooser::kAlone);
  EXPECT_EQ(c.choose(2 * macs, StepThreadChooser::kAlone), StepThreadChooser::kPool);
}

TEST(StepThreadChooser, FollowsAChangeOfLoad) {
  StepThreadChooser c;
  // The pool is faster for 1000 steps, then 2x slower (a busy second CPU),
  // then faster again.
  const auto cost = [](Way w, int i) {
    if (w == StepThreadChooser::kAlone) return 1e-9;
    return i < 1000 || i >= 2000 ? 0.7e-9 : 2e-9;
  };
  simulate(c, 5000, 0, 1000, cost);
  EXPECT_EQ(c.best(5000), StepThreadChooser::kPool);
  // The chosen way's own moving average notices its slow-down within a few
  // steps and calls a trial.
  const auto slow = simulate(c, 5000, 1000, 20, cost);
  EXPECT_LE(slow[StepThreadChooser::kPool], 8);
  simulate(c, 5000, 1020, 980, cost);
  EXPECT_EQ(c.best(5000), StepThreadChooser::kAlone);
  // The loser's trials (at most kMaxGap steps apart) notice its recovery.
  const auto back = simulate(c, 5000, 2000, 1200, cost);
  EXPECT_EQ(c.best(5000), StepThreadChooser::kPool);
  EXPECT_GE(back[StepThreadChooser::kPool], 1200 - StepThreadChooser::kMaxGap - 2 * StepThreadChooser::kMinGap);
}

TEST(StepThreadChooser, SizeClassesChooseApart) {
  StepThreadChooser c;
  // Small steps: the pool's hand-over dominates; large ones: it halves the time.
  const auto cost_for = [](int64_t macs) {
    return [macs](Way w, int) {
      const double alone = 1e-9 * static_cast<double>(macs);
      const double t = w == StepThreadChooser::kAlone ? alone : alone / 2 + 20e-6;
      return t / static_cast<double>(macs);
    };
  };
  for (int round = 0; round < 50; ++round) {
    simulate(c, 4000, round * 10, 10, cost_for(4000));
    simulate(c, 4000000, round * 10, 10, cost_for(4000000));
  }
  EXPECT_EQ(c.best(4000), StepThreadChooser::kAlone);
  EXPECT_EQ(c.best(4000000), StepThreadChooser::kPool);
}

TEST(StepThreadChooser, NoisyTimesCostLittle) {
  StepThreadChooser c;
  // The pool 10% slower on average; each step's time off by up to +-52%
  // (a standard deviation of 30%: a tiny model's decode on a shared VM).
  uint32_t state = 12345;
  const auto noise = [&state] {
    state = state * 1664525u + 1013904223u;
    return 0.48 + 1.04 * static_cast<double>(state >> 8) / static_cast<double>(1u << 24);
  };
  const auto cost = [&noise](Way w, int) { return (w == StepThreadChooser::kAlone ? 1e-9 : 1.1e-9) * noise(); };
  const auto n = simulate(c, 1 << 18, 0, 5000, cost);
  // Steps on the pool cost 10% more: all of them together at most 0.75% of
  // the time (0.5% here; 0.9% without kMargin, 3.2% with a moving average over 4 steps).
  EXPECT_LE(0.1 * n[StepThreadChooser::kPool], 0.0075 * 5000) << n[StepThreadChooser::kPool] << " of 5000 on the pool";
}

TEST(StepThreadChooser, AnInterruptedStepDoesNotFlipTheChoice) {
  StepThreadChooser c;
  // The pool 1.5x faster; every 100th of its steps loses a whole timeslice.
  const auto cost = [](Way w, int i) {
    if (w == StepThreadChooser::kAlone) return 1.5e-9;
    return i % 100 == 99 ? 50e-9 : 1e-9;
  };
  const auto n = simulate(c, 1 << 16, 0, 3000, cost);
  EXPECT_GE(n[StepThreadChooser::kPool], 2900) << "alone ran " << n[StepThreadChooser::kAlone] << " steps";
}

}  // namespace
}  // namespace pagoda
