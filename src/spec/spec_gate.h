// A measured check on adaptive speculation: per batch size (decoding
// sequences, in powers of two), the tokens per second that pure-decode steps
// achieved with drafts and without, and a gate that turns speculation off
// for a batch size where it measured slower — whatever the cost model and
// the acceptance estimates predicted. The planner's model is right on
// average and wrong where what a step costs is not what the start-up
// profile measured (many one-token sequences at many contexts): the gate
// keeps "auto" from ever staying slower than no speculation. Drafts must
// measure kMinGain faster, not merely as fast: what a drafting step costs
// beyond its own time is not in these rates (proposing and planning for
// every sequence, and sequences that stop finishing together, so the
// prompts after them are prefilled beside decodes instead of in one batch),
// and a few percent of the run went there wherever drafts were only even
// (bench/RESULTS.md, 2026-12-05). It samples both arms, alternately until
// each has kMinSamples / 2, then one plain step in four until each has
// kMinSamples; where one arm is kClearMargin ahead at kMinSamples / 2 the
// verdict is taken then (exploring the losing arm is what the gate costs).
// Later a probe runs the losing arm now and then, so a change (longer
// contexts, other text) is noticed: kProbeEvery steps after a verdict, then
// twice as far apart each time, up to kMaxProbeEvery; a probe that measures
// the losing arm ahead brings the next one to kRecheckEvery steps.
#pragma once

#include <array>
#include <cstdint>

namespace pagoda {

class SpecGate {
 public:
  static constexpr int32_t kMinSamples = 8;
  static constexpr int32_t kProbeEvery = 32;
  static constexpr int32_t kMaxProbeEvery = 256;
  static constexpr int32_t kRecheckEvery = 4;
  static constexpr double kMinGain = 0.03;      // drafted steps must measure 3% faster
  static constexpr double kClearMargin = 0.15;  // an arm this far ahead wins on kMinSamples / 2 samples

  // Whether the next pure-decode step of num_seqs sequences may carry drafts.
  bool allow(int32_t num_seqs);
  // A finished pure-decode step: num_seqs sequences, with drafts or not,
  // num_generated tokens in `seconds`.
  void record(int32_t num_seqs, bool drafted, int64_t num_generated, double seconds);
  // The measured tokens per second of a batch size's arm (0: no sample yet).
  double rate(int32_t num_seqs, bool drafted) const { return buckets_[bucket(num_seqs)].rate[drafted ? 1 : 0]; }
  int32_t samples(int32_t num_seqs, bool drafted) const { return buckets_[bucket(num_seqs)].samples[drafted ? 1 : 0]; }

 private:
  struct Bucket {
    double rate[2] = {0, 0};  // EWMA of tokens per second: [plain, drafted]
    int32_t samples[2] = {0, 0};
    int64_t steps = 0;
    int8_t verdict = -1;  // -1: sampling; 0: plain steps; 1: drafts
    int32_t probe_gap = kProbeEvery;
    int64_t next_probe = 0;
  };
  static int32_t bucket(int32_t num_seqs);
  std::array<Bucket, 12> buckets_;
};

}  // namespace pagoda
