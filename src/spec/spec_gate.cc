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
  if (b.samples[0] < kMinSamples) return step % 4 != 0;  // plain samples first
  if (b.samples[1] < kMinSamples) return true;
  const bool faster = b.rate[1] >= b.rate[0] * (1.0 + kMinGain);
  return step % kProbeEvery == 0 ? !faster : faster;  // the losing arm now and then
}

void SpecGate::record(int32_t num_seqs, bool drafted, int64_t num_generated, double seconds) {
  if (seconds <= 0 || num_generated <= 0) return;
  Bucket& b = buckets_[bucket(num_seqs)];
  const int arm = drafted ? 1 : 0;
  const double r = static_cast<double>(num_generated) / seconds;
  // The first samples average evenly, later ones weigh 10%.
  const double w = std::max(0.1, 1.0 / (b.samples[arm] + 1));
  b.rate[arm] += w * (r - b.rate[arm]);
  ++b.samples[arm];
}

}  // namespace pagoda
