#include "model/step_threads.h"

#include <algorithm>
#include <bit>

namespace pagoda {

namespace {

StepThreadChooser::Way other(StepThreadChooser::Way w) {
  return w == StepThreadChooser::kAlone ? StepThreadChooser::kPool : StepThreadChooser::kAlone;
}

// A sample more than this many times the estimate counts as this many: a
// step the OS interrupted for a whole timeslice says nothing about the way.
constexpr double kMaxJump = 2.0;

}  // namespace

int StepThreadChooser::class_of(int64_t macs) {
  return macs <= 1 ? 0 : std::bit_width(static_cast<uint64_t>(macs - 1));
}

StepThreadChooser::Way StepThreadChooser::choose(int64_t macs, Way prior) {
  const int k = class_of(macs);
  SizeClass& c = classes_[static_cast<size_t>(k)];
  if (!c.seen) {  // the class's first step (cold: not timed)
    // A neighbor class that has compared both ways knows better than
    // `prior` (a decode step's class moves up as its context grows).
    c.best = prior;
    for (const int nk : {k - 1, k + 1, k - 2, k + 2}) {
      if (nk < 0 || nk >= static_cast<int>(classes_.size())) continue;
      const SizeClass& nc = classes_[static_cast<size_t>(nk)];
      if (nc.samples[kAlone] >= kWarmUp && nc.samples[kPool] >= kWarmUp) {
        c.best = nc.best;
        break;
      }
    }
  }
  if (!c.seen || c.samples[c.best] < kWarmUp) return c.best;
  if (c.samples[other(c.best)] < kWarmUp) return other(c.best);
  return c.until_retry <= 0 ? other(c.best) : c.best;
}

void StepThreadChooser::record(int64_t macs, Way way, double seconds) {
  SizeClass& c = classes_[static_cast<size_t>(class_of(macs))];
  if (!c.seen) {  // first touches of buffers sized for this step, cold caches
    c.seen = true;
    return;
  }
  const double x = seconds / static_cast<double>(std::max<int64_t>(macs, 1));
  double& est = c.per_mac[way];
  int32_t& n = c.samples[way];
  const bool warm = c.samples[kAlone] >= kWarmUp && c.samples[kPool] >= kWarmUp;
  if (n == 0) {
    est = x;
  } else if (c.stale[way]) {
    // The way's first step since it lost: its estimate is up to kMaxGap
    // steps old, so the fresh time replaces it. A lucky sample that flips
    // the choice is undone within a few steps by the running estimate.
    est = std::min(x, kMaxJump * est);
  } else {
    // Running mean during warm-up, then a moving average over ~4 steps.
    const double alpha = n < kWarmUp ? 1.0 / (n + 1) : 0.25;
    est += alpha * (std::min(x, kMaxJump * est) - est);
  }
  c.stale[way] = false;
  ++n;
  if (c.samples[kAlone] < kWarmUp || c.samples[kPool] < kWarmUp) return;
  const Way faster = c.per_mac[kPool] < c.per_mac[kAlone] ? kPool : kAlone;
  if (!warm || way != c.best) {
    // The class just warmed up, or the losing way had its re-try: next
    // re-try soon if it won (the load changed), later if it lost again.
    c.gap = !warm || faster == way ? kMinGap : std::min(2 * c.gap, kMaxGap);
  } else {
    --c.until_retry;  // at 0, choose() gives the other way its re-try
    if (faster == c.best) return;
    c.gap = kMinGap;  // the chosen way slowed down below the other's estimate
  }
  c.best = faster;
  c.stale[other(faster)] = true;
  c.until_retry = c.gap;
}

}  // namespace pagoda
