#include "quant/awq.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ref/quant_ref.h"

namespace pagoda::quant {
namespace {

// s = mean_abs^alpha per scale, normalized so that max * min = 1 (as the
// reference implementation), floored away from 0.
std::vector<float> scales_for(const AwqGroup& g, const std::vector<float>& mean_abs, double alpha) {
  const int64_t ns = g.num_scales();
  std::vector<double> m(static_cast<size_t>(ns), 0.0), cnt(static_cast<size_t>(ns), 0.0);
  for (int64_t c = 0; c < g.cols; ++c) {
    m[g.src(c)] += mean_abs[c];
    cnt[g.src(c)] += 1;
  }
  std::vector<float> s(static_cast<size_t>(ns));
  double lo = std::numeric_limits<double>::max(), hi = 0;
  for (int64_t k = 0; k < ns; ++k) {
    const double v = std::pow(std::max(m[k] / std::max(cnt[k], 1.0), 1e-4), alpha);
    s[k] = static_cast<float>(v);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const double norm = std::sqrt(lo * hi);
  for (float& v : s) v = static_cast<float>(std::max(v / norm, 1e-4));
  return s;
}

}  // namespace

std::vector<float> awq_search(const AwqGroup& g, const std::vector<double>& h, const std::vector<float>& mean_abs,
                              const AwqOptions& opt, ThreadPool& pool, double* alpha_out) {
  const int64_t n = g.cols;
  const int grid = std::max(opt.grid, 1);
  std::vector<double> errors(static_cast<size_t>(grid + 1), 0.0);
  pool.parallel_for(grid + 1, [&](int64_t a0, int64_t a1) {
    std::vector<float> w(static_cast<size_t>(n)), q(static_cast<size_t>(n));
    std::vector<double> d(static_cast<size_t>(n));
    std::vector<uint8_t> bytes;
    for (int64_t a = a0; a < a1; ++a) {
      const std::vector<float> s = scales_for(g, mean_abs, static_cast<double>(a) / grid);
      double err = 0;
      for (size_t m = 0; m < g.mats.size(); ++m) {
        const int64_t rows = g.rows[m];
        const int64_t take = std::min(rows, opt.max_rows);
        bytes.resize(dtype_row_bytes(g.types[m], n));
        for (int64_t k = 0; k < take; ++k) {
          const int64_t r = k * rows / take;  // evenly spaced rows
          const float* wr = g.mats[m] + r * n;
          for (int64_t c = 0; c < n; ++c) w[c] = wr[c] * s[g.src(c)];
          ref::quantize_row(g.types[m], w.data(), bytes.data(), n);
          ref::dequantize_row(g.types[m], bytes.data(), q.data(), n);
          for (int64_t c = 0; c < n; ++c) d[c] = static_cast<double>(wr[c]) - q[c] / s[g.src(c)];
          // d^T H d
          for (int64_t i = 0; i < n; ++i) {
            if (d[i] == 0) continue;
            const double* hi = &h[i * n];
            double t = 0;
            for (int64_t j = 0; j < n; ++j) t += hi[j] * d[j];
            err += d[i] * t;
          }
        }
      }
      errors[a] = err;
    }
  });
  const auto best = std::min_element(errors.begin(), errors.end()) - errors.begin();  // first minimum: smallest alpha
  if (alpha_out) *alpha_out = static_cast<double>(best) / grid;
  return scales_for(g, mean_abs, static_cast<double>(best) / grid);
}

void awq_fold(const AwqGroup& g, const std::vector<float>& s) {
  for (size_t m = 0; m < g.mats.size(); ++m)
    for (int64_t r = 0; r < g.rows[m]; ++r) {
      float* wr = g.mats[m] + r * g.cols;
      for (int64_t c = 0; c < g.cols; ++c) wr[c] *= s[g.src(c)];
    }
  for (int64_t k = 0; k < g.num_scales(); ++k) {
    if (g.norm) g.norm[k] /= s[k];
    if (g.prev)
      for (int64_t c = 0; c < g.prev_cols; ++c) g.prev[k * g.prev_cols + c] /= s[k];
    if (g.prev_bias) g.prev_bias[k] /= s[k];
  }
}

}  // namespace pagoda::quant
