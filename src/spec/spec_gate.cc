#include "spec/spec_gate.h"

#include <algorithm>

namespace pagoda {

int32_t SpecGate::bucket(int32_t num_seqs) {
  int32_t b = 0;
  for (int32_t n = std::max(1, num_seqs); n > 1; n >>= 1) ++b;
  return std::min<int32_t>(b, 11);
}

bool SpecGate::allow(int32_t num_seqs) {
  Bucket& b = buckets_[bucket(num_seqs)];
  const int64_t step = b.steps++;
  const bool sampled = b.samples[0] >= kMinSamples / 2 && b.samples[1] >= kMinSamples / 2;
  const bool clear =
      sampled && (b.rate[1] >= b.rate[0] * (1.0 + kClearMargin) || b.rate[1] * (1.0 + kClearMargin) <= b.rate[0]);
  if (!clear) {
    if (b.samples[0] < kMinSamples / 2) return step % 2 != 0;  // both arms at first
    if (b.samples[0] < kMinSamples) return step % 4 != 0;
    if (b.samples[1] < kMinSamples) return true;
  }
  const bool faster = b.rate[1] >= b.rate[0] * (1.0 + kMinGain);
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

void SpecGate::record(int32_t num_seqs, bool drafted, int64_t num_generated, double seconds) {
  if (seconds <= 0 || num_generated <= 0) return;
  Bucket& b = buckets_[bucket(num_seqs)];
  const int arm = drafted ? 1 : 0;
  const double r = static_cast<double>(num_generated) / seconds;
  if (b.verdict >= 0 && arm != b.verdict) {
    // The losing arm measured ahead of the winner's rate: look again soon.
    const double win = b.rate[b.verdict];
    if (drafted ? r >= win * (1.0 + kMinGain) : r * (1.0 + kMinGain) > win) {
      b.probe_gap = kRecheckEvery;
      b.next_probe = std::min(b.next_probe, b.steps + kRecheckEvery);
    }
  }
  // The first samples average evenly, later ones weigh 10%.
  const double w = std::max(0.1, 1.0 / (b.samples[arm] + 1));
  b.rate[arm] += w * (r - b.rate[arm]);
  ++b.samples[arm];
}

}  // namespace pagoda
