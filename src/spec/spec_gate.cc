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

double SpecGate::window_gain(const Bucket& b) {
  double sum = 0, weight = 0;
  for (int32_t i = 0; i < std::min(b.num_gains, kWindow); ++i) {
    const Gain& g = b.gains[static_cast<size_t>(i)];
    sum += g.weight * g.gain;
    weight += g.weight;
  }
  return weight > 0 ? sum / weight : 0;
}

double SpecGate::gain(int32_t num_seqs) const { return window_gain(buckets_[bucket(num_seqs)]); }

bool SpecGate::measured_off(int32_t num_seqs) const {
  const Bucket& b = buckets_[bucket(num_seqs)];
  return b.num_gains >= kMinSamples && window_gain(b) < 1.0 + kMinGain;
}

bool SpecGate::allow(int32_t num_seqs) {
  Bucket& b = buckets_[bucket(num_seqs)];
  if (b.num_gains < kMinSamples) {
    // Exploring: the arm the last recorded step did not run, plain first,
    // until kMinSamples / 2 drafted steps wait for their gains.
    if (b.pending_drafted >= kMinSamples / 2 || b.num_records == 0) return false;
    return !b.records[static_cast<size_t>((b.num_records - 1) % kRecords)].drafted;
  }
  const bool faster = window_gain(b) >= 1.0 + kMinGain;
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
  double other_tokens = 0, other_seconds = 0;
  for (int64_t i = std::max<int64_t>(0, b.num_records - kRecords); i < b.num_records; ++i) {
    const Record& o = b.records[static_cast<size_t>(i % kRecords)];
    const int64_t d = o.step > r.step ? o.step - r.step : r.step - o.step;
    if (d > kReach) continue;
    if (o.drafted == r.drafted) {
      ++num_same;
    } else {
      ++num_other_all;
      if (d > 1) {
        other[num_other++] = o.rate;
        other_tokens += o.rate * o.seconds;
        other_seconds += o.seconds;
      }
    }
  }
  // Only a step of the arm the gate ran less around it is judged (each
  // probe once, not every step beside it); alternating steps both count.
  if (num_other < kMinRefs || num_same > num_other_all + 1) return;
  // Plain steps are alike: their median rate, which one odd step does not
  // move. Drafted steps are not (a large tree's step is slower than a
  // small one's): their tokens over their time.
  const double ref = r.drafted ? median(std::span<double>(other.data(), num_other)) : other_tokens / other_seconds;
  // Weighed by the plain tokens the step's time is worth: the window's gain
  // is then drafted tokens over the time plain steps would have taken for
  // them (a large tree's slow step counts for its time, not as one step).
  const double g = std::clamp(r.drafted ? r.rate / ref : ref / r.rate, kMinClamp, kMaxClamp);
  const double tokens = r.rate * r.seconds;
  b.gains[static_cast<size_t>(b.num_gains % kWindow)] = {g, r.drafted ? tokens / g : tokens};
  ++b.num_gains;
  // A probe that disagrees with the verdict: probe often again.
  if (b.num_gains > kMinSamples && (g >= 1.0 + kMinGain) != b.faster) b.probe_every = kProbeEvery;
}

void SpecGate::record(int64_t step, int32_t num_seqs, bool drafted, int64_t num_generated, double seconds) {
  if (seconds <= 0 || num_generated <= 0) return;
  Bucket& b = buckets_[bucket(num_seqs)];
  b.records[static_cast<size_t>(b.num_records % kRecords)] = {step, static_cast<double>(num_generated) / seconds,
                                                              seconds, drafted};
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
