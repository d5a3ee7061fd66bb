#include "kernels/ops.h"

#include <cmath>

#include "kernels/cpu/kernel_table.h"

namespace pagoda::kernels {

void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  cpu::active_kernels().rms_norm(x, weight, y, n, eps);
}

void rope(float* x, int32_t n_heads, int32_t head_dim, int32_t pos, const RopeParams& p) {
  const int32_t half = p.rot_dim / 2;
  for (int32_t i = 0; i < half; ++i) {
    double theta = pos * p.freq_scale * std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.rot_dim);
    if (p.freq_factors) theta /= p.freq_factors[i];
    const float c = static_cast<float>(std::cos(theta));
    const float s = static_cast<float>(std::sin(theta));
    for (int32_t h = 0; h < n_heads; ++h) {
      float* v = x + static_cast<int64_t>(h) * head_dim;
      const int32_t a = p.style == RopeStyle::kInterleaved ? 2 * i : i;
      const int32_t b = p.style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float g = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
    out[i] = g * up[i];
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  cpu::active_kernels().swiglu(gate, up, out, n);
}

void add_inplace(float* a, const float* b, int64_t n) { cpu::active_kernels().add(a, b, n); }

}  // namespace pagoda::kernels
