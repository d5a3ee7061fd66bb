// Timing a short piece of work for a cost model (speculation's step times):
// the fastest of at least three runs and 20 ms of runs, after a warm-up run.
// Small steps are noisy and a shared machine only ever adds time, so the
// minimum is the estimate.
#pragma once

#include <algorithm>
#include <chrono>

namespace pagoda {

template <typename Fn>
double fastest_run_seconds(Fn&& run) {
  double best = 0.0, spent = 0.0;
  for (int i = 0; i < 4 || (spent < 0.02 && i < 64); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i == 0) continue;  // warm-up
    best = i == 1 ? s : std::min(best, s);
    spent += s;
  }
  return best;
}

}  // namespace pagoda
