// Whether a small model's step runs on the calling thread alone or on the
// step's pool, chosen from the measured times of both (LlamaModel::forward).
//
// Handing microsecond-sized jobs to a second thread can cost more than it
// saves (a draft model's 64-token prefill 5-10% slower on the pool on a quiet
// Zen 5) or save a third (on a shared Zen 3 VM whose second vCPU is busy at
// times: the pool's threads claim work as they free up, so the slowed one
// does less, while a step alone waits for whichever vCPU it got; at 2
// threads the draft's prefill ran 1.0-1.5x faster on the pool, its decode
// 0.8-1.4x: bench/RESULTS.md, 2026-12-07 (18:40 UTC)). Which holds depends on
// the machine and the moment, so each size class of step (a power of two of
// multiply-adds) keeps a running estimate of both ways' time per
// multiply-add and takes the lower; the other way runs again now and then,
// half as often each time it still loses (from every 16th to every 256th
// step of its class), so a change of load is noticed and a loser costs
// little.
#pragma once

#include <array>
#include <cstdint>

namespace pagoda {

class StepThreadChooser {
 public:
  enum Way : int { kAlone = 0, kPool = 1 };
  // Re-tries of the losing way: after this many steps of its class at first,
  // doubling while it keeps losing, up to kMaxGap.
  static constexpr int32_t kMinGap = 16;
  static constexpr int32_t kMaxGap = 256;
  // Steps of each way a class times before it compares them: its first
  // step (not timed) and the next run `prior`, then kWarmUp the other way.
  // One each: a benchmark of 20 steps of one size (`pagoda bench model`)
  // runs the slower way once (with 3, its median moved by ~5%).
  static constexpr int32_t kWarmUp = 1;

  // The way to run a step of `macs` multiply-adds; `prior`: the first guess
  // for its size class when no class within a factor of 4 has compared both
  // ways (otherwise the nearest such class's choice is).
  Way choose(int64_t macs, Way prior);
  // A step of `macs` ran `way` in `seconds`.
  void record(int64_t macs, Way way, double seconds);

  // The current choice of the class of `macs` once warmed up (for tests).
  Way best(int64_t macs) const { return classes_[class_of(macs)].best; }

 private:
  struct SizeClass {
    double per_mac[2] = {0, 0};  // seconds per multiply-add, running estimate
    int32_t samples[2] = {0, 0};
    bool seen = false;               // its first step ran
    bool stale[2] = {false, false};  // the next sample replaces the estimate
    Way best = kAlone;
    int32_t until_retry = kMinGap;  // steps of `best` before the other way's turn
    int32_t gap = kMinGap;
  };
  static int class_of(int64_t macs);

  std::array<SizeClass, 64> classes_{};
};

}  // namespace pagoda
