// Timing a short piece of work for a cost model (speculation's step times):
// the fastest of at least three runs and 5 ms of runs (at most 63), after a
// warm-up run. Small steps are noisy and a shared machine only ever adds
// time, so the minimum is the estimate. The budget is start-up time: the
// target's and the draft's profiles time ~40 sizes, and at 20 ms each
// `--spec draft` started 0.65 s later than `--spec none` on the bundled
// model, which on a shared VM also made its first seconds run ~3% slower
// (bench/RESULTS.md, 2026-12-07 12:08-13:32 UTC); at 5 ms, 0.27 s later.
#pragma once

#include <algorithm>
#include <chrono>

namespace pagoda {

template <typename Fn>
double fastest_run_seconds(Fn&& run) {
  double best = 0.0, spent = 0.0;
  for (int i = 0; i < 4 || (spent < 0.005 && i < 64); ++i) {
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
