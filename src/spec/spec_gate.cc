#include "spec/spec_gate.h"

#include <algorithm>
#include <cstddef>
#include <span>

namespace pagoda {

namespace {

// The median of v (changes its order); 0 for none.
double median(std::span<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  return 0.5 * (*mid + *std::max_element(v.begin(), mid));
}

}  // namespace

int32_t SpecGate::bucket(int32_t num_seqs) {
  int32_t b = 0;
  for (int32_t n = std::max(1, num_seqs); n > 1; n >>= 1) ++b;
  return std::min<int32_t>(b, 11);
}

double SpecGate::median_gain(const Bucket& b) {
  std::array<double, kWindow> g = b.gains;
  return median(std::span<double>(g.data(), static_cast<size_t>(std::min(b.num_gains, kWindow))));
}

double SpecGate::gain(int32_t num_seqs) const { return median_gain(buckets_[bucket(num_seqs)]); }

bool SpecGate::measured_off(int32_t num_seqs) const {
  const Bucket& b = buckets_[bucket(num_seqs)];
  return b.num_gains >= kMinSamples && median_gain(b) < 1.0 + kMinGain;
}

bool SpecGate::allow(int32_t num_seqs) {
  Bucket& b = buckets_[bucket(num_seqs)];
  if (b.num_gains < kMinSamples) {
    // Exploring: the arm the last recorded step did not run, plain first,
    // until kMinSamples / 2 drafted steps wait for their gains.
    if (b.pending_drafted >= kMinSamples / 2 || b.num_records == 0) return false;
    return !b.records[static_cast<size_t>((b.num_records - 1) % kRecords)].drafted;
  }
  const bool faster = median_gain(b) >= 1.0 + kMinGain;
  if (faster != b.faster) {
    b.faster = faster;
    b.probe_every = kProbeEvery;
    b.since_probe = 0;
  }
  if (++b.since_probe < b.probe_every) return faster;
  // The losing arm, at intervals that double while it keeps losing.
  b.since_probe = 0;
  b.probe_every = std::min(2 * b.probe_every, kMaxProbeEvery);
  return !faster;
}

void SpecGate::judge(Bucket& b, const Record& r) {
  // The other arm's steps around r, its immediate neighbours left out.
  std::array<double, kRecords> other{};
  size_t num_other = 0, num_same = 0, num_other_all = 0;
  for (int64_t i = std::max<int64_t>(0, b.num_records - kRecords); i < b.num_records; ++i) {
    const Record& o = b.records[static_cast<size_t>(i % kRecords)];
    const int64_t d = o.step > r.step ? o.step - r.step : r.step - o.step;
    if (d > kReach) continue;
    if (o.drafted == r.drafted) {
      ++num_same;
    } else {
      ++num_other_all;
      if (d > 1) other[num_other++] = o.rate;
    }
  }
  // Only a step of the arm the gate ran less around it is judged (each
  // probe once, not every step beside it); alternating steps both count.
  if (num_other < kMinRefs || num_same > num_other_all + 1) return;
  const double ref = median(std::span<double>(other.data(), num_other));
  const double g = r.drafted ? r.rate / ref : ref / r.rate;
  b.gains[static_cast<size_t>(b.num_gains % kWindow)] = g;
  ++b.num_gains;
  // A probe that disagrees with the verdict: probe often again.
  if (b.num_gains > kMinSamples && (g >= 1.0 + kMinGain) != b.faster) b.probe_every = kProbeEvery;
}

void SpecGate::record(int64_t step, int32_t num_seqs, bool drafted, int64_t num_generated, double seconds) {
  if (seconds <= 0 || num_generated <= 0) return;
  Bucket& b = buckets_[bucket(num_seqs)];
  b.records[static_cast<size_t>(b.num_records % kRecords)] = {step, static_cast<double>(num_generated) / seconds,
                                                              drafted};
  ++b.num_records;
  if (drafted) ++b.pending_drafted;
  // A step is judged once the steps kReach after it are in (or could have
  // been: the ring holds kRecords).
  while (b.num_judged < b.num_records) {
    const Record& r = b.records[static_cast<size_t>(b.num_judged % kRecords)];
    if (step - r.step <= kReach && b.num_records - b.num_judged < kRecords / 2) break;
    judge(b, r);
    if (r.drafted) --b.pending_drafted;
    ++b.num_judged;
  }
}

}  // namespace pagoda
