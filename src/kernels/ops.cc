#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/kernel_table.h"

namespace pagoda::kernels {

void rms_norm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  cpu::active_kernels().rms_norm(x, weight, y, n, eps);
}

void ssm_step(float* s, int64_t rows, int64_t n, const float* x, const float* b, const float* c, float dt, float decay,
              float d, float* y) {
  cpu::active_kernels().ssm_step(s, rows, n, x, b, c, dt, decay, d, y);
}

void deltanet_step(float* s, int64_t dk, int64_t dv, const float* q, const float* k, const float* v, float g,
                   float beta, float scale, float* o, float* tmp) {
  cpu::active_kernels().deltanet_step(s, dk, dv, q, k, v, g, beta, scale, o, tmp);
}

void set_yarn(RopeParams& p, int32_t n_ctx_orig, float ext_factor, float beta_fast, float beta_slow,
              float attn_factor) {
  // The pair index at which a frequency turns `rotations` times over the
  // original context.
  auto corr_dim = [&](float rotations) {
    return p.rot_dim * std::log(n_ctx_orig / (rotations * 2 * static_cast<float>(M_PI))) / (2 * std::log(p.freq_base));
  };
  p.ext_factor = ext_factor;
  p.mscale = attn_factor;
  if (ext_factor == 0) return;
  p.yarn_low = std::max(0.0f, std::floor(corr_dim(beta_fast)));
  p.yarn_high = std::min(static_cast<float>(p.rot_dim - 1), std::ceil(corr_dim(beta_slow)));
  if (p.freq_scale < 1.0f) p.mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
}

namespace {

// Pair i's angle at `pos` from its frequency base^(-2i / rot_dim).
inline void rope_pair(int32_t pos, int32_t i, double freq, const RopeParams& p, float* cs) {
  double extrap = pos * freq;
  if (p.freq_factors) extrap /= p.freq_factors[i];
  double theta = extrap * p.freq_scale;
  if (p.ext_factor != 0) {
    const double y = (i - p.yarn_low) / std::max(0.001, static_cast<double>(p.yarn_high - p.yarn_low));
    const double mix = (1 - std::clamp(y, 0.0, 1.0)) * p.ext_factor;
    theta = theta * (1 - mix) + extrap * mix;
  }
  cs[2 * i] = static_cast<float>(std::cos(theta)) * p.mscale;
  cs[2 * i + 1] = static_cast<float>(std::sin(theta)) * p.mscale;
}

inline double rope_freq(int32_t i, const RopeParams& p) {
  return std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.rot_dim);
}

}  // namespace

void rope_angles(int32_t pos, const RopeParams& p, float* cs) {
  const int32_t half = p.rot_dim / 2;
  for (int32_t i = 0; i < half; ++i) rope_pair(pos, i, rope_freq(i, p), p, cs);
}

void rope_angles(const int32_t* positions, int64_t n, const RopeParams& p, float* cs) {
  const int32_t half = p.rot_dim / 2;
  double small[512];
  std::vector<double> big;
  double* freq = small;
  if (half > 512) {
    big.resize(static_cast<size_t>(half));
    freq = big.data();
  }
  for (int32_t i = 0; i < half; ++i) freq[i] = rope_freq(i, p);
  for (int64_t t = 0; t < n; ++t)
    for (int32_t i = 0; i < half; ++i) rope_pair(positions[t], i, freq[i], p, cs + t * p.rot_dim);
}

void rope_apply(float* x, int32_t n_heads, int32_t head_dim, const float* cs, const RopeParams& p) {
  const int32_t half = p.rot_dim / 2;
  for (int32_t h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    if (p.style == RopeStyle::kInterleaved) {
      for (int32_t i = 0; i < half; ++i) {
        const float c = cs[2 * i], s = cs[2 * i + 1], x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
      }
    } else {
      for (int32_t i = 0; i < half; ++i) {
        const float c = cs[2 * i], s = cs[2 * i + 1], x0 = v[i], x1 = v[i + half];
        v[i] = x0 * c - x1 * s;
        v[i + half] = x0 * s + x1 * c;
      }
    }
  }
}

void rope(float* x, int32_t n_heads, int32_t head_dim, int32_t pos, const RopeParams& p) {
  float cs[1024];  // rot_dim <= head_dim; heads wider than 1024 take the heap
  std::vector<float> big;
  float* angles = cs;
  if (p.rot_dim > 1024) {
    big.resize(static_cast<size_t>(p.rot_dim));
    angles = big.data();
  }
  rope_angles(pos, p, angles);
  rope_apply(x, n_heads, head_dim, angles, p);
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float g = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
    out[i] = g * up[i];
  }
}

void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t n, float eps) {
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const auto mu = static_cast<float>(mean);
  const auto inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) {
    const float v = (x[i] - mu) * inv;
    y[i] = (weight ? v * weight[i] : v) + (bias ? bias[i] : 0.0f);
  }
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kLimit = 7.0f, kAlpha = 1.702f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kLimit);
    const float u = std::clamp(up[i], -kLimit, kLimit);
    out[i] = g / (1.0f + std::exp(-kAlpha * g)) * (u + 1.0f);
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  cpu::active_kernels().swiglu(gate, up, out, n);
}

void add_inplace(float* a, const float* b, int64_t n) { cpu::active_kernels().add(a, b, n); }

}  // namespace pagoda::kernels
