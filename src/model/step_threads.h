// Whether a small model's step runs on the calling thread alone or on the
// step's pool, chosen from the measured times of both (LlamaModel::forward).
//
// Handing microsecond-sized jobs to a second thread can cost more than it
// saves (a draft model's 64-token prefill 5-10% slower on the pool on a quiet
// Zen 5) or save a fifth (on a shared Zen 3 VM whose second vCPU is busy at
// times: the pool's threads claim work as they free up, so the slowed one
// does less, while a step alone waits for whichever vCPU it got). Which
// holds depends on the machine, the model and the moment (bench/RESULTS.md,
// 2026-12-07 (18:40-19:40 UTC)), so each size class of step (a power of two
// of multiply-adds) keeps a moving average (over ~16 steps) of its chosen
// way's time per multiply-add and now and then runs a trial of kTrialSteps
// steps the other way: the other way takes over if its trial's mean is
// kMargin faster. Trials come after kMinGap steps of the class at first, half
// as often each time the other way loses (down to one per kMaxGap steps), and
// at once (after kMinGap) when the chosen way's average rises kMargin above
// the other's last trial: a change of load is noticed within ~15 steps, a
// clear loser runs ~0.8% of the steps, and with per-step times scattered by
// a 30% standard deviation and the ways 10% apart the swapping costs 0.5% of
// the time (tests/model/step_threads_test.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace pagoda {

class StepThreadChooser {
 public:
  enum Way : int { kAlone = 0, kPool = 1 };
  static constexpr int32_t kMinGap = 16;
  static constexpr int32_t kMaxGap = 1024;
  static constexpr int32_t kTrialSteps = 8;
  static constexpr double kMargin = 0.03;

  // The way to run a step of `macs` multiply-adds. A class's first step is
  // not timed (buffers sized for it, cold caches) and runs `prior`, or the
  // choice of the nearest class within a factor of 4 that has compared both
  // ways; its second step runs that way too and its third the other (one
  // step each: a benchmark of 20 steps of one size, `pagoda bench model`,
  // then runs the slower way once).
  Way choose(int64_t macs, Way prior);
  // A step of `macs` ran `way` in `seconds`.
  void record(int64_t macs, Way way, double seconds);

  // The class's current choice (for tests).
  Way best(int64_t macs) const { return classes_[static_cast<size_t>(class_of(macs))].best; }

 private:
  struct SizeClass {
    double per_mac[2] = {0, 0};  // seconds per multiply-add
    int32_t samples[2] = {0, 0};
    bool seen = false;  // its first step ran
    Way best = kAlone;
    int32_t trial_left = 0;  // steps of the running trial of other(best) still to run
    int32_t trial_done = 0;  // steps of it that ran
    int32_t since = 0;       // steps of `best` since the last trial
    int32_t gap = kMinGap;   // steps of `best` between trials
  };
  static int class_of(int64_t macs);
  static bool compared(const SizeClass& c) { return c.samples[kAlone] > 0 && c.samples[kPool] > 0; }

  std::array<SizeClass, 64> classes_{};
};

}  // namespace pagoda
