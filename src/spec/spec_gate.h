// A measured check on adaptive speculation: per batch size (decoding
// sequences, in powers of two), how much faster pure-decode steps with
// drafts ran than those without, and a gate that turns speculation off for
// a batch size where drafts did not measure faster — whatever the cost
// model and the acceptance estimates predicted. The planner's model is right
// on average and wrong where what a step costs is not what the start-up
// profile measured (many one-token sequences at many contexts): the gate
// keeps "auto" from ever staying slower than no speculation.
//
// The gain is measured around each step of the arm the gate ran less: its
// tokens per second over the other arm's within kReach steps (both sides;
// the steps right beside it left out): the median rate of plain steps, the
// tokens over the time of drafted ones (a large tree's step is slower than
// a small one's). Rates drift with the contexts' length (a step at 190
// tokens of context is slower than one at 70), so a drafted step compared
// with plain ones from many steps before would be credited with their
// shorter contexts; steps that first touch fresh KV memory, or meet another
// process, run 2-3x slower now and then (one in 16 at 64 sequences,
// bench/RESULTS.md 2026-12-05), and probes come more often right after a
// slow step (the probe budget is a share of step time), so one neighbour is
// no reference. The verdict is the mean of the last kWindow gains, each
// clamped to [kMinClamp, kMaxClamp] and weighed by the plain tokens its
// step's time is worth: drafted tokens over the time plain steps would have
// taken, what throughput is made of (by the median of per-step gains, many
// small trees that win outvoted the few large ones that lost more).
//
// Drafts must measure kMinGain faster, not merely as fast: what a drafting
// step costs beyond its own time is not in these rates (proposing and
// planning for every sequence, and sequences that stop finishing together,
// so the prompts after them are prefilled beside decodes instead of in one
// batch). A batch size starts by alternating the arms until it has
// kMinSamples gains (kMinSamples / 2 drafted steps; each alternating step is
// judged); later the losing arm runs now and then, so a change (longer
// contexts, other text) is noticed: after kProbeEvery steps, then at
// intervals that double up to kMaxProbeEvery while the probes confirm the
// verdict (each drafted probe of a batch size where drafts lose costs
// twice a step or more, and sets its sequences out of step), and back to
// kProbeEvery when one does not.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace pagoda {

class SpecGate {
 public:
  static constexpr int32_t kMinSamples = 8;
  static constexpr int32_t kWindow = 16;
  static constexpr int32_t kProbeEvery = 32;      // the losing arm's first probe interval,
  static constexpr int32_t kMaxProbeEvery = 256;  // doubled up to this while it keeps losing
  static constexpr double kMinGain = 0.03;        // drafted steps must measure 3% faster
  static constexpr int64_t kReach = 8;            // a step is compared with the other arm's within 8 steps
  static constexpr double kMinClamp = 0.5;        // gains count within [0.5, 2]: a step
  static constexpr double kMaxClamp = 2.0;        // 3x slower for other reasons moves little
  static constexpr size_t kMinRefs = 3;           // at least 3 of them

  // Whether the next pure-decode step of num_seqs sequences may carry drafts.
  bool allow(int32_t num_seqs);
  // Whether drafts have measured a loss at this batch size (a verdict, not a
  // sample: for steps the gate does not measure, such as those that also
  // prefill).
  bool measured_off(int32_t num_seqs) const;
  // A finished pure-decode step, the engine's step number `step`: num_seqs
  // sequences, with drafts or not, num_generated tokens in `seconds`.
  void record(int64_t step, int32_t num_seqs, bool drafted, int64_t num_generated, double seconds);
  // The measured gain of a batch size (drafted over plain tokens per
  // second; 0 before any) and how many gains it has seen.
  double gain(int32_t num_seqs) const;
  int32_t samples(int32_t num_seqs) const { return buckets_[bucket(num_seqs)].num_gains; }

 private:
  static constexpr int64_t kRecords = 4 * kReach;  // a ring of the last steps, those to judge among them
  struct Record {
    int64_t step = 0;
    double rate = 0;  // tokens per second
    double seconds = 0;
    bool drafted = false;
  };
  struct Gain {
    double gain = 0;
    double weight = 0;  // the plain tokens the judged step's time is worth
  };
  struct Bucket {
    std::array<Gain, kWindow> gains{};  // a ring: the last kWindow gains
    int32_t num_gains = 0;              // all seen
    std::array<Record, kRecords> records{};
    int64_t num_records = 0;
    int64_t num_judged = 0;       // records judged (or passed over) so far
    int32_t pending_drafted = 0;  // drafted records not judged yet
    bool faster = false;          // the verdict at the last allow()
    int32_t probe_every = kProbeEvery;
    int32_t since_probe = 0;
  };
  static int32_t bucket(int32_t num_seqs);
  static double window_gain(const Bucket& b);
  static void judge(Bucket& b, const Record& r);
  std::array<Bucket, 12> buckets_;
};

}  // namespace pagoda
