// Adaptive speculation: how many draft tokens each sequence verifies in the
// next step. Verifying k drafts of a sequence whose drafts are accepted with
// probability a each yields 1 + a + a^2 + ... + a^k tokens in expectation
// (the chain stops at the first rejection; the target adds one token), and
// costs k more batched tokens. On a CPU a decode step is bound by reading the
// weights, so a few more tokens are almost free at batch 1 and cost their
// full share once the batch is compute-bound. The planner adds drafts, best
// expected gain first, while tokens per second of step time still rise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace pagoda {

// How far a step's attention reaches past the start-up profile's, whose
// tokens are one sequence's, after `context` cached tokens: a slice of n
// tokens after `start` cached ones adds start - context to seq_keys (the K/V
// its sequence streams once per step, however many queries read it) and n
// times that to token_keys (the scores and P·V each query computes). Shorter
// contexts count negative. A slice's growth within itself is the profile's.
struct StepContext {
  double seq_keys = 0;
  double token_keys = 0;
  void add(int32_t start, int32_t num_tokens, int32_t context) {
    seq_keys += start - context;
    add_drafts(start, num_tokens, context);
  }
  // Drafts of a sequence already in the step: its tokens' reach alone.
  void add_drafts(int32_t start, int32_t num_drafts, int32_t context) {
    token_keys += static_cast<double>(num_drafts) * (start - context);
  }
};

// Step time as a function of the number of batched tokens: piecewise linear
// through measured forward times (non-decreasing, extended along the last
// segment), plus attention past the profile's context (set_attention: per
// sequence and per token, by how far they reach; StepContext), plus what
// real steps add to a forward — scheduling, sampling every logits row —
// learned as a + b * tokens from observed steps.
//
// Why attention has its own terms: at a long context a decode step's time
// is mostly its sequences streaming their K/V, once per sequence whatever
// the number of queries, and a draft token adds only its own scores. The
// bundled model at context 1,800: 0.93 ms for one token against 0.26 ms at
// 64, a draft 0.17 ms more (bench/RESULTS.md, 2026-12-06 late). Priced as
// the profile's marginal times the steps' measured scale (3.5x), a draft was
// under-priced 2x at batch 1; by these terms it would be over-priced ~3x in
// a batch of 64 long sequences, whose scale comes from their K/V streams.
class StepCostModel {
 public:
  StepCostModel() = default;
  // (batched tokens, seconds) pairs; at least one, token counts >= 1.
  explicit StepCostModel(std::vector<std::pair<int32_t, double>> points);

  bool empty() const { return points_.empty(); }
  // The profile ran after `context` cached tokens; each key a step's
  // sequences stream past that costs per_seq_key seconds, each key a token
  // reads past it per_token_key (both >= 0; 0: no attention terms).
  void set_attention(int32_t context, double per_seq_key, double per_token_key);
  int32_t context() const { return context_; }
  double per_seq_key() const { return per_seq_key_; }
  double per_token_key() const { return per_token_key_; }
  // The profiled time plus attention: what a forward of this shape costs
  // before the observed scale and offset (never below a tenth of the
  // profile's).
  double forward_seconds(int32_t num_tokens, const StepContext& ctx) const;
  // A real step of num_tokens batched tokens took `seconds`. Real steps are
  // a least-squares line of the profiled forward time, seconds = scale *
  // forward + offset, over recent steps (each weighs 5% less with every new
  // one) and a point at the origin weighing 5% of them: while the steps'
  // sizes barely differ (a steady batch) the line goes through the origin —
  // the steps ran `scale` times their profile, and so will the drafts added
  // to them — and once they spread (a batch filling or draining) the data
  // sets both. A decode step of many sequences at long contexts costs more
  // than the profile's one sequence (attention, sampling, bookkeeping), for
  // its drafts too: an offset alone would price a draft at the profile's
  // marginal and plan too many. The scale is at least kMinScale.
  void observe(int32_t num_tokens, double seconds, const StepContext& ctx = {});
  double forward_seconds(int32_t num_tokens) const;
  double seconds(int32_t num_tokens, const StepContext& ctx = {}) const;
  const std::vector<std::pair<int32_t, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<int32_t, double>> points_;
  static constexpr double kMinScale = 0.5;
  // Decayed sums over observed steps of x = forward seconds and y = seconds:
  // weight, x, x^2, y, x * y.
  double sw_ = 0, sx_ = 0, sxx_ = 0, sy_ = 0, sxy_ = 0;
  double scale_ = 1.0, offset_ = 0.0;
  int32_t context_ = 0;
  double per_seq_key_ = 0, per_token_key_ = 0;
};

// The attention terms from profiled forward times after the profile's
// context (`base`, as StepCostModel's points) and after a longer one
// (`longer`: the same token counts after `longer_context` cached tokens):
// least squares of the differences over the sizes both have, as
// per_seq_key + n * per_token_key seconds per key. Both clamped at 0; both
// 0 where fewer than two sizes match or the contexts do not differ.
struct AttentionFit {
  double per_seq_key = 0, per_token_key = 0;
};
AttentionFit fit_attention(const std::vector<std::pair<int32_t, double>>& base, int32_t base_context,
                           const std::vector<std::pair<int32_t, double>>& longer, int32_t longer_context);

// One sequence's verification record. Both counts fade while its drafts are
// planned away, so its estimate drifts back to the engine-wide rate and the
// sequence is tried again after some 20-40 steps.
struct AcceptanceCounts {
  double num_accepted = 0;  // drafts accepted
  double num_rejected = 0;  // verifications that rejected a draft
  // rejected: the accepted run stopped at a draft the target refused (a
  // chain shorter than its drafts; for a tree, a path that ended where the
  // tree went on). A run that used up its drafts (a leaf) is not a rejection:
  // a tree's side branches are alternatives, not failures.
  void record(int32_t num_accepted_drafts, bool rejected) {
    num_accepted += num_accepted_drafts;
    if (rejected) num_rejected += 1;
  }
  void fade() {
    constexpr double kFade = 0.95;
    num_accepted *= kFade;
    num_rejected *= kFade;
  }
  // The drafts to verify when the planner chose `planned` of at most
  // `max_drafts`. Only where drafts accepted half as often as perfect ones
  // would pay (`could_pay`: a batch small enough that verifying is nearly
  // free) is a sequence probed: one never verified at once, since a planner
  // misled by the prior or its first steps (page faults, a busy neighbour)
  // would otherwise keep it from ever drafting, with no record to fade back
  // from; one planned away until its counts faded below 20% (~30 steps) with
  // two drafts, since the engine-wide prior may be stale and text changes (a
  // free continuation settling into a pattern the proposer predicts). Two
  // drafts once in 30 steps cost under 2% of such a step even when rejected;
  // in a compute-bound batch every probe costs its full share (and
  // sequences admitted together fade together), so there it never probes.
  // Where drafts could win much (probe_scale), the engine passes a higher
  // probe_below: a record is probed before it faded that far.
  static constexpr double kProbeBelow = 0.2;
  static constexpr int32_t kProbeDrafts = 2;
  int32_t probed(int32_t planned, int32_t max_drafts, bool could_pay, double probe_below = kProbeBelow) const {
    const double seen = num_accepted + num_rejected;
    if (planned > 0 || seen >= probe_below || !could_pay) return planned;
    return std::min(kProbeDrafts, max_drafts);
  }
};

// How often planned-away sequences are probed follows what drafts could win:
// `could_gain` is the rate gain (tokens per second over the plain step's,
// minus 1) of drafts accepted half as often as perfect ones
// (plan_draft_lengths' rate_gain). Up to kProbeGainRef a record is probed
// once it faded below kProbeBelow and probes share kShare of step time, as
// before; above it both grow in proportion, up to kMaxProbeScale times. At
// batch 1 Medusa's drafts, when accepted, make steps 2.7x as productive; a
// rejected first tree then kept it from drafting for ~60 steps (its record
// fading to 0.2, one probe per ~35 steps of budget), a quarter of a
// 256-token answer at a third of the speed (bench/RESULTS.md, 2026-12-06).
constexpr double kProbeGainRef = 0.2;
constexpr double kMaxProbeScale = 5.0;
inline double probe_scale(double could_gain) { return std::clamp(could_gain / kProbeGainRef, 1.0, kMaxProbeScale); }

// Per-token acceptance of a sequence's drafts from its verifications:
// accepted drafts and verifications that ended in a rejection (the MLE of a
// geometric run length), pulled towards `prior` with the weight of two
// observations so a new sequence starts from the engine-wide rate.
double estimate_acceptance(double num_accepted, double num_rejected, double prior);
// The same plus one standard deviation of the estimate (an upper confidence
// bound): a sequence with few verifications is given the benefit of the
// doubt and tried, one that keeps failing stops being tried, and once its
// counts fade (while untried) it is tried again.
double optimistic_acceptance(double num_accepted, double num_rejected, double prior);

struct DraftCandidate {
  double acceptance = 0.0;  // estimated per-token acceptance, in [0, 1]
  int32_t max_drafts = 0;   // drafts available (proposed and within limits)
  // A tree's per-node gains (Proposer::node_gains), at least max_drafts of them;
  // empty: a chain, whose draft j adds acceptance^j.
  std::span<const double> node_gains;
  // With a draft model: the catch-up rows this sequence's first draft is
  // charged in the first pass. The draft must compute the tokens it has not
  // seen since the sequence last drafted (Sequence::num_draft_lag; a new
  // request's whole prompt); the engine charges that lag spread over the
  // next steps, or whole where a probe may be the only draft.
  int32_t catch_up = 0;
  // The cached tokens before the sequence's drafts: each draft reads that
  // far (StepCostModel's per_token_key past its context).
  int32_t context = 0;
};

// Draft lengths, one per candidate (each in 0..max_drafts), maximizing
// useful tokens per second of step time. num_base_tokens: the batched tokens
// of the step without any draft (one per decoding sequence, plus prefill
// chunks), each of them useful work; a draft adds its expected acceptance.
// So when every token costs the same (compute-bound), no draft is worth it.
// With draft_cost (a draft model's forward time by batched tokens), the
// drafting counts too: one batched forward per draft position, over the
// sequences drafting that deep, the first pass carrying each drafting
// sequence's catch-up rows as well. first_draft_seconds: the cost of one of
// the `costly_drafts` per-sequence passes a sequence's drafts run, n drafts
// running heads_run(n, costly_drafts) of them (Medusa: its heads; the nodes
// beyond come from the same heads' logits; with 1, a cost per drafting
// sequence).
//
// gain_scale multiplies every draft's expected gain (GainCalibration: the
// engine's measured accepted / predicted, correcting the estimates' bias).
// rate_gain, if given, receives the plan's expected tokens per second over
// the step's without drafts, minus 1 (0: no draft planned). base_context:
// the step without drafts (its sequences' StepContext); each draft adds its
// candidate's context as a token's.
std::vector<int32_t> plan_draft_lengths(const StepCostModel& cost, int32_t num_base_tokens,
                                        std::span<const DraftCandidate> candidates,
                                        const StepCostModel* draft_cost = nullptr, double first_draft_seconds = 0.0,
                                        int32_t costly_drafts = 1, double gain_scale = 1.0, double* rate_gain = nullptr,
                                        const StepContext& base_context = {});

// The per-sequence passes n drafts run out of num_passes: none without a
// draft, else one beyond their depth, at most all of them (Medusa: a tree of
// n nodes is at most n deep; MedusaProposer::fill_trees runs one head more
// for the calibration alone).
inline int32_t heads_run(int32_t num_drafts, int32_t num_passes) {
  return num_drafts <= 0 ? 0 : std::min(num_drafts + 1, std::max(1, num_passes));
}

// The expected gain of a candidate's first k drafts, as plan_draft_lengths
// counts it (before gain_scale).
double planned_gain(const DraftCandidate& candidate, int32_t k);

// What probing may spend: probes (drafts the planner did not choose, made to
// refresh a sequence's record, AcceptanceCounts::probed) draw on a credit
// that grows by kShare of every step's seconds, up to kMaxSteps steps'
// worth; a probe is made only when the credit covers its marginal step
// time. At batch 1 a probe costs next to nothing and the credit never
// binds; in a batch of 64 sequences that fade together, a probe of every
// sequence each ~30 steps took ~3% of the run where drafts did not pay
// (bench/RESULTS.md, 2026-12-05) — now at most kShare.
class ProbeBudget {
 public:
  static constexpr double kShare = 0.01;
  static constexpr double kMaxSteps = 50;

  // A step of `seconds` ran; probes may spend `scale` x kShare of it
  // (probe_scale).
  void earn(double seconds, double scale = 1.0);
  // Takes `seconds` of credit if there is that much.
  bool spend(double seconds);
  double credit() const { return credit_; }

 private:
  double credit_ = 0;
  double cap_ = 0;  // kShare x kMaxSteps x a recent step's seconds
};

// How the planner's expected gains compare with what verification accepts:
// every verification records the gain its drafts were planned with and the
// drafts accepted; scale() is accepted / planned over recent verifications
// (each weighs 1% less with every new one), 1 until a few drafts were seen,
// clamped to [0.25, 1.25]. The per-sequence estimates are optimistic on
// purpose (an untried sequence gets tried); the scale takes that optimism
// back out of the engine-wide sum, so marginal drafts that do not pay stop.
class GainCalibration {
 public:
  void record(double planned, int32_t accepted);
  double scale() const;

 private:
  double planned_ = 0, accepted_ = 0;
};

}  // namespace pagoda
