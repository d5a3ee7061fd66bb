#include "quant/smoothquant.h"

#include <algorithm>
#include <cmath>

namespace pagoda::quant {

std::vector<float> smoothquant_scales(const AwqGroup& g, const std::vector<float>& act_max, float alpha) {
  const int64_t ns = g.num_scales();
  std::vector<float> amax(static_cast<size_t>(ns), 0.0f), wmax(static_cast<size_t>(ns), 0.0f);
  for (int64_t c = 0; c < g.cols; ++c) {
    const int64_t j = g.src(c);
    amax[j] = std::max(amax[j], std::fabs(act_max[c]));
  }
  for (size_t m = 0; m < g.mats.size(); ++m) {
    const float* w = g.mats[m];
    for (int64_t r = 0; r < g.rows[m]; ++r)
      for (int64_t c = 0; c < g.cols; ++c) {
        const int64_t j = g.src(c);
        wmax[j] = std::max(wmax[j], std::fabs(w[r * g.cols + c]));
      }
  }
  std::vector<float> s(static_cast<size_t>(ns), 1.0f);
  for (int64_t j = 0; j < ns; ++j) {
    if (!(amax[j] > 0) || !(wmax[j] > 0)) continue;
    const double v =
        std::pow(static_cast<double>(amax[j]), alpha) / std::pow(static_cast<double>(wmax[j]), 1.0 - alpha);
    s[j] = static_cast<float>(std::clamp(v, 1e-4, 1e4));
  }
  return s;
}

}  // namespace pagoda::quant
