#include "model/step_threads.h"

#include <algorithm>
#include <bit>

namespace pagoda {

namespace {

StepThreadChooser::Way other(StepThreadChooser::Way w) {
  return w == StepThreadChooser::kAlone ? StepThreadChooser::kPool : StepThreadChooser::kAlone;
}

// A sample more than this many times the estimate counts as this many: a
// step the OS interrupted for a whole timeslice says little about the way.
constexpr double kMaxJump = 2.0;

}  // namespace

int StepThreadChooser::class_of(int64_t macs) {
  return macs <= 1 ? 0 : std::bit_width(static_cast<uint64_t>(macs - 1));
}

StepThreadChooser::Way StepThreadChooser::choose(int64_t macs, Way prior) {
  const int k = class_of(macs);
  SizeClass& c = classes_[static_cast<size_t>(k)];
  if (!c.seen) {
    // A neighbor class knows better than `prior` (a decode step's class
    // moves up as its context grows).
    c.best = prior;
    for (const int nk : {k - 1, k + 1, k - 2, k + 2}) {
      if (nk < 0 || nk >= static_cast<int>(classes_.size())) continue;
      if (const SizeClass& nc = classes_[static_cast<size_t>(nk)]; compared(nc)) {
        c.best = nc.best;
        break;
      }
    }
    return c.best;
  }
  if (c.samples[c.best] == 0) return c.best;
  if (c.samples[other(c.best)] == 0 || c.trial_left > 0) return other(c.best);
  return c.best;
}

void StepThreadChooser::record(int64_t macs, Way way, double seconds) {
  SizeClass& c = classes_[static_cast<size_t>(class_of(macs))];
  if (!c.seen) {
    c.seen = true;
    return;
  }
  double x = seconds / static_cast<double>(std::max<int64_t>(macs, 1));
  double& est = c.per_mac[way];
  if (c.samples[way] > 0) x = std::min(x, kMaxJump * est);
  const Way loser = other(c.best);
  if (way == loser) {
    // A trial step (or the warm-up's one step): the trial's mean replaces
    // the estimate, which is up to kMaxGap steps old.
    const bool warm_up = c.samples[way] == 0;
    est = c.trial_done == 0 ? x : est + (x - est) / (c.trial_done + 1);
    ++c.samples[way];
    ++c.trial_done;
    if (!warm_up && --c.trial_left > 0) return;
    // Warm-up: the lower wins; a trial must beat the chosen way by kMargin.
    const double needed = warm_up ? 1.0 : 1.0 - kMargin;
    const bool won = est < needed * c.per_mac[c.best];
    if (won) c.best = way;
    c.gap = won || warm_up ? kMinGap : std::min(2 * c.gap, kMaxGap);
    c.trial_left = c.trial_done = c.since = 0;
    return;
  }
  // The chosen way: a moving average over ~16 steps (one step of a tiny
  // model is timed +-30% apart on a shared VM).
  est = c.samples[way] == 0 ? x : est + (x - est) / 16;
  ++c.samples[way];
  if (!compared(c)) return;
  ++c.since;
  const bool slowed = c.since >= kMinGap && est > (1.0 + kMargin) * c.per_mac[loser];
  if (c.since >= c.gap || slowed) c.trial_left = kTrialSteps;
}

}  // namespace pagoda
