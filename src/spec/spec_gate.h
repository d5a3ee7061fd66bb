// A measured check on adaptive speculation: per batch size (decoding
// sequences, in powers of two), the tokens per second that pure-decode steps
// achieved with drafts (their tokens as the planner expected them, see
// record()) and without, and a gate that turns speculation off for a batch
// size where drafted steps measured slower — whatever the cost model
// predicted. The planner's model is right on
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
// The arms are compared in pairs of steps close in time (a drafted step and
// a plain one at most kPairWindow steps apart): a step's rate falls as the
// batch's contexts grow, so an arm last sampled earlier looks faster than it
// is now, and comparing the two arms' averages flipped the verdict back and
// forth where drafts were about even (64 sequences, bench/RESULTS.md,
// 2026-12-06). The verdict follows the average log ratio of such pairs,
// taken one standard error towards parity (a lucky run of pairs does not
// turn drafts on where they are about even).
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
  static constexpr int32_t kPairWindow = 4;     // steps apart a drafted and a plain step may be to compare
  static constexpr double kPairWeight = 0.1;    // a new pair's weight in the average, once there are 10

  // Whether the next pure-decode step of num_seqs sequences may carry drafts.
  bool allow(int32_t num_seqs);
  // A finished pure-decode step: num_seqs sequences, with drafts or not,
  // num_tokens tokens in `seconds`. The engine counts a drafted step's
  // tokens as the planner expected them (one per sequence plus its drafts'
  // planned gains, times GainCalibration's scale), not as accepted: the gate
  // checks what drafts cost, the calibration and each sequence's record
  // what they bring. Counted as accepted, the first drafts of a copy-heavy
  // prompt at batch 1 (rejected: the model does not copy at once) turned
  // drafts off for ~30 steps at a time, twice in a 256-token answer, where
  // the planner had stopped drafting by itself and would have tried again
  // (n-gram 1.61x vs 2.05x, bench/RESULTS.md, 2026-12-06 10:40).
  void record(int32_t num_seqs, bool drafted, double num_tokens, double seconds);
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
    double last_rate[2] = {0, 0};  // each arm's latest step
    int64_t last_step[2] = {-1, -1};
    double log_ratio = 0;  // EWMA of log(drafted / plain) over pairs
    double log_var = 0;    // and its EW variance
    int32_t pairs = 0;
  };
  static int32_t bucket(int32_t num_seqs);
  // Drafted over plain tokens per second as the verdict sees it: the
  // average of paired steps' ratios (the arms' rates until a pair was seen;
  // 1 before any sample).
  static double ratio(const Bucket& b);
  static double ratio_error(const Bucket& b);
  std::array<Bucket, 12> buckets_;
};

}  // namespace pagoda
