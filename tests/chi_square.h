// The chi-square goodness-of-fit test the sampling tests use: observed
// counts against exact probabilities.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

namespace pagoda::testing_util {

// Chi-square statistic of counts against probabilities (bins with expected
// count < 5 pooled) and its critical value at alpha = 1e-4 (Wilson–Hilferty).
// A draw in a zero-probability bin makes the statistic infinite.
struct ChiSquare {
  double stat = 0;
  double critical = 0;
};
inline ChiSquare chi_square(const std::map<int64_t, int64_t>& counts, const std::map<int64_t, double>& probs,
                            int64_t n) {
  ChiSquare r;
  double pooled_expected = 0, pooled_count = 0;
  int df = -1;
  for (const auto& [k, c] : counts)
    if (!probs.count(k) || probs.at(k) <= 0) r.stat = INFINITY;
  for (const auto& [k, p] : probs) {
    const double e = p * static_cast<double>(n);
    const double c = counts.count(k) ? static_cast<double>(counts.at(k)) : 0.0;
    if (e < 5) {
      pooled_expected += e;
      pooled_count += c;
      continue;
    }
    r.stat += (c - e) * (c - e) / e;
    ++df;
  }
  if (pooled_expected > 0) {
    r.stat += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / std::max(pooled_expected, 1e-9);
    ++df;
  }
  df = std::max(df, 1);
  const double z = 3.719;  // upper 1e-4 quantile of N(0, 1)
  const double a = 2.0 / (9.0 * df);
  r.critical = df * std::pow(1 - a + z * std::sqrt(a), 3);
  return r;
}

}  // namespace pagoda::testing_util
