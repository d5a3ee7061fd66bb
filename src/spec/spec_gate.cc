#include "spec/spec_gate.h"

#include <algorithm>
#include <cmath>

namespace pagoda {

int32_t SpecGate::bucket(int32_t num_seqs) {
  int32_t b = 0;
  for (int32_t n = std::max(1, num_seqs); n > 1; n >>= 1) ++b;
  return std::min<int32_t>(b, 11);
}

double SpecGate::ratio(const Bucket& b) {
  if (b.pairs > 0) return std::exp(b.log_ratio);
  return b.rate[0] > 0 && b.rate[1] > 0 ? b.rate[1] / b.rate[0] : 1.0;
}

// The paired log ratio's standard error: its EW variance over the pairs it
// averages (at most 1 / kPairWeight - ish of them).
double SpecGate::ratio_error(const Bucket& b) {
  const double n = std::min<double>(b.pairs, 2.0 / kPairWeight - 1.0);
  return n > 1 ? std::sqrt(b.log_var / n) : 0.0;
}

bool SpecGate::allow(int32_t num_seqs) {
  Bucket& b = buckets_[bucket(num_seqs)];
  const int64_t step = b.steps++;
  const bool sampled = b.samples[0] >= kMinSamples / 2 && b.samples[1] >= kMinSamples / 2;
  // Log ratios, the measured one taken its standard error towards parity.
  const double lr = std::log(ratio(b)), err = ratio_error(b);
  const bool clear = sampled && std::abs(lr) - err >= std::log1p(kClearMargin);
  if (!clear) {
    if (b.samples[0] < kMinSamples / 2) return step % 2 != 0;  // both arms at first
    if (b.samples[0] < kMinSamples) return step % 4 != 0;
    if (b.samples[1] < kMinSamples) return true;
  }
  const bool faster = lr - err >= std::log1p(kMinGain);
  if (b.verdict != (faster ? 1 : 0)) {  // a new verdict: probe soon
    b.verdict = faster ? 1 : 0;
    b.probe_gap = kProbeEvery;
    b.next_probe = step + kProbeEvery;
  }
  if (step < b.next_probe) return faster;
  b.probe_gap = std::min(2 * b.probe_gap, kMaxProbeEvery);  // the verdict stood: probe less often
  b.next_probe = step + b.probe_gap;
  return !faster;  // the losing arm, now and then
}

void SpecGate::record(int32_t num_seqs, bool drafted, double num_tokens, double seconds) {
  if (seconds <= 0 || !(num_tokens > 0)) return;
  Bucket& b = buckets_[bucket(num_seqs)];
  const int arm = drafted ? 1 : 0;
  const double r = num_tokens / seconds;
  // Paired with the other arm's latest step if that was close in time.
  const int other = 1 - arm;
  const bool paired = b.last_step[other] >= 0 && b.steps - b.last_step[other] <= kPairWindow;
  const double drafted_over_plain = paired
                                        ? (drafted ? r / b.last_rate[other] : b.last_rate[other] / r)
                                        : (b.rate[other] > 0 ? (drafted ? r / b.rate[other] : b.rate[other] / r) : 1.0);
  if (b.verdict >= 0 && arm != b.verdict) {
    // The losing arm measured ahead of the winner: look again soon.
    if (drafted ? drafted_over_plain >= 1.0 + kMinGain : drafted_over_plain < 1.0 + kMinGain) {
      b.probe_gap = kRecheckEvery;
      b.next_probe = std::min(b.next_probe, b.steps + kRecheckEvery);
    }
  }
  if (paired) {
    const double wp = std::max(kPairWeight, 1.0 / (b.pairs + 1));
    const double diff = std::log(drafted_over_plain) - b.log_ratio;
    b.log_ratio += wp * diff;
    b.log_var = (1.0 - wp) * (b.log_var + wp * diff * diff);
    ++b.pairs;
  }
  b.last_rate[arm] = r;
  b.last_step[arm] = b.steps;
  // The first samples average evenly, later ones weigh 10%.
  const double w = std::max(0.1, 1.0 / (b.samples[arm] + 1));
  b.rate[arm] += w * (r - b.rate[arm]);
  ++b.samples[arm];
}

}  // namespace pagoda
