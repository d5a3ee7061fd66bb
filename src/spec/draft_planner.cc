#include "spec/draft_planner.h"

#include <algorithm>
#include <cmath>
#include <queue>

#include "core/check.h"

namespace pagoda {

StepCostModel::StepCostModel(std::vector<std::pair<int32_t, double>> points) : points_(std::move(points)) {
  PAGODA_CHECK(!points_.empty());
  std::sort(points_.begin(), points_.end());
  double floor = 0.0;
  for (auto& [n, t] : points_) {
    PAGODA_CHECK(n >= 1 && std::isfinite(t) && t >= 0.0);
    t = floor = std::max(floor, t);  // timing noise must not make more tokens cheaper
  }
}

void StepCostModel::set_attention(int32_t context, double per_seq_key, double per_token_key) {
  PAGODA_CHECK(context >= 0 && std::isfinite(per_seq_key) && std::isfinite(per_token_key) && per_seq_key >= 0.0 &&
               per_token_key >= 0.0);
  context_ = context;
  per_seq_key_ = per_seq_key;
  per_token_key_ = per_token_key;
}

void StepCostModel::observe(int32_t num_tokens, double seconds, const StepContext& ctx) {
  if (points_.empty() || !std::isfinite(seconds) || seconds < 0.0 || num_tokens < 1) return;
  constexpr double kDecay = 0.95;
  constexpr double kOrigin = 0.05;  // the origin's weight, relative to the steps'
  const double x = forward_seconds(num_tokens, ctx);
  sw_ = kDecay * sw_ + 1.0;
  sx_ = kDecay * sx_ + x;
  sxx_ = kDecay * sxx_ + x * x;
  sy_ = kDecay * sy_ + seconds;
  sxy_ = kDecay * sxy_ + x * seconds;
  const double w = sw_ * (1.0 + kOrigin);   // the origin adds weight, nothing to the other sums
  const double var = sxx_ * w - sx_ * sx_;  // > 0: the origin differs from every step
  const double scale = var > 0.0 ? (sxy_ * w - sx_ * sy_) / var : 1.0;
  scale_ = std::isfinite(scale) ? std::max(kMinScale, scale) : 1.0;
  offset_ = (sy_ - scale_ * sx_) / w;
}

double StepCostModel::forward_seconds(int32_t num_tokens) const {
  PAGODA_CHECK(!points_.empty());
  if (points_.size() == 1) return points_[0].second * std::max(1, num_tokens) / points_[0].first;
  if (num_tokens <= points_.front().first) return points_.front().second;
  size_t hi = 1;
  while (hi + 1 < points_.size() && points_[hi].first < num_tokens) ++hi;
  const auto [n0, t0] = points_[hi - 1];
  const auto [n1, t1] = points_[hi];
  if (n1 == n0) return t1;
  return t0 + (t1 - t0) * static_cast<double>(num_tokens - n0) / static_cast<double>(n1 - n0);
}

double StepCostModel::forward_seconds(int32_t num_tokens, const StepContext& ctx) const {
  const double f = forward_seconds(num_tokens);
  return std::max(0.1 * f, f + per_seq_key_ * ctx.seq_keys + per_token_key_ * ctx.token_keys);
}

double StepCostModel::seconds(int32_t num_tokens, const StepContext& ctx) const {
  // A negative offset (small steps relatively faster than large ones) never
  // brings a step below a tenth of its forward time.
  const double f = forward_seconds(num_tokens, ctx);
  return std::max(0.1 * f, scale_ * f + offset_);
}

AttentionFit fit_attention(const std::vector<std::pair<int32_t, double>>& base, int32_t base_context,
                           const std::vector<std::pair<int32_t, double>>& longer, int32_t longer_context) {
  AttentionFit fit;
  const double span = longer_context - base_context;
  if (!(span > 0)) return fit;
  // y = (longer - base) / span = per_seq_key + n * per_token_key.
  double k = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& point : longer) {
    const int32_t n = point.first;
    const auto it = std::find_if(base.begin(), base.end(), [n](const auto& p) { return p.first == n; });
    if (it == base.end()) continue;
    const double y = (point.second - it->second) / span;
    k += 1;
    sx += n;
    sy += y;
    sxx += static_cast<double>(n) * n;
    sxy += n * y;
  }
  if (k < 2 || k * sxx - sx * sx <= 0) return fit;
  double slope = (k * sxy - sx * sy) / (k * sxx - sx * sx);
  double intercept = (sy - slope * sx) / k;
  if (slope < 0) {  // more queries never read less: a per-sequence cost alone
    slope = 0;
    intercept = sy / k;
  } else if (intercept < 0) {  // a per-token cost alone, through the origin
    intercept = 0;
    slope = sxy / sxx;
  }
  fit.per_seq_key = std::max(0.0, intercept);
  fit.per_token_key = std::max(0.0, slope);
  return fit;
}

double estimate_acceptance(double num_accepted, double num_rejected, double prior) {
  constexpr double kPriorWeight = 2.0;
  const double a = (num_accepted + kPriorWeight * prior) / (num_accepted + num_rejected + kPriorWeight);
  return std::clamp(a, 0.0, 1.0);
}

double planned_gain(const DraftCandidate& c, int32_t k) {
  double sum = 0, g = c.acceptance;
  for (int32_t t = 0; t < std::min(k, c.max_drafts); ++t) {
    sum += c.node_gains.empty() ? g : c.node_gains[static_cast<size_t>(t)];
    g *= c.acceptance;
  }
  return sum;
}

void GainCalibration::record(double planned, int32_t accepted) {
  constexpr double kDecay = 0.99;
  planned_ = kDecay * planned_ + planned;
  accepted_ = kDecay * accepted_ + accepted;
}

double GainCalibration::scale() const {
  constexpr double kMinPlanned = 8.0;  // expected drafts before the ratio means anything
  if (planned_ < kMinPlanned) return 1.0;
  return std::clamp(accepted_ / planned_, 0.25, 1.25);
}

double optimistic_acceptance(double num_accepted, double num_rejected, double prior) {
  const double mean = estimate_acceptance(num_accepted, num_rejected, prior);
  const double n = num_accepted + num_rejected + 3.0;  // observations + prior weight + 1
  return std::min(1.0, mean + std::sqrt(mean * (1.0 - mean) / n));
}

std::vector<int32_t> plan_draft_lengths(const StepCostModel& cost, int32_t num_base_tokens,
                                        std::span<const DraftCandidate> candidates, const StepCostModel* draft_cost,
                                        double first_draft_seconds, int32_t costly_drafts, double gain_scale,
                                        double* rate_gain, const StepContext& base_context) {
  // Each candidate's marginal gains a, a^2, ... (or its tree's node gains)
  // fall, so taking the d best
  // gains over all candidates maximizes the expected tokens for d drafts.
  // Order every draft by gain, then pick the d with the best tokens per
  // second (the step time need not be convex: tile sizes make steps).
  // Where drafts read different contexts, their attention makes some
  // dearer: ordered by gain per price (a token's marginal step time plus
  // its attention), the same order where all read alike.
  const int32_t num_tokens = std::max(1, num_base_tokens);
  const double unit = std::max(cost.seconds(num_tokens + 1, base_context) - cost.seconds(num_tokens, base_context),
                               1e-3 * cost.seconds(num_tokens, base_context));
  std::vector<double> price(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i)
    price[i] = std::max(0.1 * unit, unit + cost.per_token_key() * (candidates[i].context - cost.context()));
  struct Draft {
    double priority, gain;
    size_t i;
    bool operator<(const Draft& o) const { return priority < o.priority || (priority == o.priority && i < o.i); }
  };
  std::priority_queue<Draft> next;
  std::vector<int32_t> taken(candidates.size(), 0);
  int32_t max_drafts = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    PAGODA_CHECK(candidates[i].acceptance >= 0.0 && candidates[i].acceptance <= 1.0);
    PAGODA_CHECK(candidates[i].node_gains.empty() ||
                 candidates[i].node_gains.size() >= static_cast<size_t>(candidates[i].max_drafts));
    const double first = candidates[i].node_gains.empty() ? candidates[i].acceptance : candidates[i].node_gains[0];
    if (candidates[i].max_drafts > 0 && first > 0.0) next.push({first / price[i], first, i});
    max_drafts = std::max(max_drafts, candidates[i].max_drafts);
  }
  std::vector<size_t> order;
  // With a draft model, draft number t of a sequence adds that sequence to
  // draft pass t - 1 (one batched forward per pass).
  std::vector<int32_t> pass_size(static_cast<size_t>(max_drafts) + 1, 0);
  double draft_seconds = 0.0;
  double expected = num_tokens;
  StepContext ctx = base_context;
  const double base_rate = expected / cost.seconds(num_tokens, ctx);
  double best_rate = base_rate;
  size_t best_d = 0;
  while (!next.empty()) {
    const Draft top = next.top();
    next.pop();
    const double gain = top.gain;
    const size_t i = top.i;
    order.push_back(i);
    expected += gain * gain_scale;
    const int32_t t = ++taken[i];
    if (t < candidates[i].max_drafts) {
      const auto& g = candidates[i].node_gains;
      const double next_gain = g.empty() ? gain * candidates[i].acceptance : g[static_cast<size_t>(t)];
      next.push({next_gain / price[i], next_gain, i});
    }
    draft_seconds += first_draft_seconds * (heads_run(t, costly_drafts) - heads_run(t - 1, costly_drafts));
    if (draft_cost) {
      int32_t& n = pass_size[static_cast<size_t>(t - 1)];
      const int32_t rows = t == 1 ? 1 + std::max(0, candidates[i].catch_up) : 1;
      draft_seconds += draft_cost->seconds(n + rows) - (n > 0 ? draft_cost->seconds(n) : 0.0);
      n += rows;
    }
    ctx.add_drafts(candidates[i].context, 1, cost.context());
    const double rate = expected / (cost.seconds(num_tokens + static_cast<int32_t>(order.size()), ctx) + draft_seconds);
    if (rate > best_rate * (1.0 + 1e-9)) {
      best_rate = rate;
      best_d = order.size();
    }
  }
  std::vector<int32_t> k(candidates.size(), 0);
  for (size_t d = 0; d < best_d; ++d) ++k[order[d]];
  if (rate_gain) *rate_gain = best_d > 0 && base_rate > 0 ? best_rate / base_rate - 1.0 : 0.0;
  return k;
}

void ProbeBudget::earn(double seconds, double scale) {
  if (!(seconds > 0)) return;
  const double share = kShare * std::clamp(scale, 1.0, kMaxProbeScale);
  // The cap follows the step time (a slow start-up step must not leave a
  // burst of credit behind).
  cap_ = cap_ == 0 ? share * kMaxSteps * seconds : 0.9 * cap_ + 0.1 * share * kMaxSteps * seconds;
  credit_ = std::min(credit_ + share * seconds, cap_);
}

bool ProbeBudget::spend(double seconds) {
  if (seconds > credit_) return false;
  credit_ -= std::max(0.0, seconds);
  return true;
}

}  // namespace pagoda
