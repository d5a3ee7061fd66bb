// fast_exp against libm, and SwiGLU against a double-precision reference.
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "kernels/fast_exp.h"

namespace pagoda::kernels {
namespace {

TEST(FastExp, RelativeErrorOverRange) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.3f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(fast_exp(x) - want) / want);
  }
  EXPECT_LT(worst, 5e-7);
}

TEST(FastExp, Limits) {
  EXPECT_EQ(fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(fast_exp(-1000.0f), 0.0f);
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isfinite(fast_exp(1000.0f)));
  EXPECT_GT(fast_exp(1000.0f), 1e38f);
}

TEST(Swiglu, MatchesDouble) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int64_t n : {1, 7, 16, 33, 1000}) {
    std::vector<float> g(n), u(n), out(n);
    for (auto& v : g) v = nd(rng);
    for (auto& v : u) v = nd(rng);
    g[0] = -120.0f;  // exp(-g) overflows: silu -> -0
    swiglu(g.data(), u.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double gd = g[i];
      const double want = gd / (1.0 + std::exp(-gd)) * u[i];
      EXPECT_NEAR(out[i], want, 1e-6 * (1 + std::fabs(want))) << i;
    }
  }
}

}  // namespace
TEST(Geglu, MatchesDoubleTanhGelu) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int64_t n : {1, 7, 16, 33, 1000}) {
    std::vector<float> g(n), u(n), out(n);
    for (auto& v : g) v = nd(rng);
    for (auto& v : u) v = nd(rng);
    g[0] = -60.0f;            // gelu -> -0
    if (n > 1) g[1] = 60.0f;  // gelu -> x
    geglu(g.data(), u.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double x = g[i];
      const double want = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
      EXPECT_NEAR(out[i], want, 1e-5 * (1 + std::fabs(want))) << i;
    }
  }
}

TEST(LayerNorm, MatchesDoubleReferenceInPlaceToo) {
  std::mt19937 rng(6);
  std::normal_distribution<float> nd(3.0f, 2.0f);  // an offset mean: the centring matters
  for (int64_t n : {1, 2, 7, 64, 129, 1000}) {
    std::vector<float> x(n), w(n), b(n), y(n);
    for (auto& v : x) v = nd(rng);
    for (auto& v : w) v = nd(rng);
    for (auto& v : b) v = nd(rng);
    double mean = 0, var = 0;
    for (float v : x) mean += v;
    mean /= static_cast<double>(n);
    for (float v : x) var += (v - mean) * (v - mean);
    var /= static_cast<double>(n);
    layer_norm(x.data(), w.data(), b.data(), y.data(), n, 1e-5f);
    for (int64_t i = 0; i < n; ++i) {
      const double want = (x[i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i];
      EXPECT_NEAR(y[i], want, 1e-5 * (1 + std::fabs(want))) << n << " " << i;
    }
    const std::vector<float> orig = x;
    layer_norm(x.data(), nullptr, nullptr, x.data(), n, 1e-5f);  // in place, no affine part
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(x[i], (orig[i] - mean) / std::sqrt(var + 1e-5), 1e-5 * (1 + std::fabs(x[i]))) << n << " " << i;
  }
}

TEST(SwigluOai, ClampsGateAndUp) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 6.0f);  // many values past the +-7 limits
  std::vector<float> g(257), u(257), out(257);
  for (auto& v : g) v = nd(rng);
  for (auto& v : u) v = nd(rng);
  g[0] = 50.0f, u[0] = -50.0f;  // both clamped: 7 * sigmoid(11.9) * (-6)
  swiglu_oai(g.data(), u.data(), out.data(), 257);
  for (size_t i = 0; i < g.size(); ++i) {
    const double gd = std::min<double>(g[i], 7.0);
    const double ud = std::clamp<double>(u[i], -7.0, 7.0);
    const double want = gd / (1.0 + std::exp(-1.702 * gd)) * (ud + 1.0);
    EXPECT_NEAR(out[i], want, 1e-5 * (1 + std::fabs(want))) << i;
  }
  EXPECT_NEAR(out[0], 7.0 / (1.0 + std::exp(-1.702 * 7.0)) * -6.0, 1e-4);
}

// The angle pair i of one head turns by at position pos, and the pair's
// length after rotating the unit vector (1, 0).
std::pair<double, double> rope_angle(const RopeParams& p, int32_t pos, int32_t i) {
  std::vector<float> x(p.rot_dim, 0.0f);
  x[i] = 1.0f;  // half-split style: pair (i, i + rot_dim / 2)
  rope(x.data(), 1, p.rot_dim, pos, p);
  return {std::atan2(x[i + p.rot_dim / 2], x[i]), std::hypot(x[i], x[i + p.rot_dim / 2])};
}

// The batched angles (frequencies once per call) are the per-token ones,
// bit for bit: plain, with llama3 frequency factors, and with YaRN; one pair
// count past the stack table too.
TEST(Rope, BatchedAnglesMatchPerTokenBits) {
  std::mt19937 rng(11);
  for (int32_t rot_dim : {2, 24, 128, 1030}) {
    std::vector<float> factors(static_cast<size_t>(rot_dim / 2));
    for (auto& f : factors) f = std::uniform_real_distribution<float>(1.0f, 8.0f)(rng);
    for (int variant = 0; variant < 3; ++variant) {
      RopeParams p;
      p.rot_dim = rot_dim;
      p.freq_base = 500000.0f;
      if (variant == 1) p.freq_factors = factors.data();
      if (variant == 2) {
        p.freq_scale = 0.25f;
        set_yarn(p, 8192, 1.0f, 32.0f, 1.0f, 1.0f);
      }
      std::vector<int32_t> pos(37);
      for (auto& v : pos) v = std::uniform_int_distribution<int32_t>(0, 100000)(rng);
      std::vector<float> batched(pos.size() * rot_dim), one(rot_dim);
      rope_angles(pos.data(), static_cast<int64_t>(pos.size()), p, batched.data());
      for (size_t t = 0; t < pos.size(); ++t) {
        rope_angles(pos[t], p, one.data());
        for (int32_t i = 0; i < rot_dim; ++i)
          ASSERT_EQ(batched[t * rot_dim + i], one[i]) << rot_dim << " " << variant << " " << t << " " << i;
      }
    }
  }
}

TEST(Rope, YarnBlendsExtrapolatedAndInterpolatedAngles) {
  RopeParams p;
  p.style = RopeStyle::kHalfSplit;
  p.rot_dim = 64;
  p.freq_base = 10000.0f;
  p.freq_scale = 1.0f / 32;
  set_yarn(p, 4096, 1.0f, 32.0f, 1.0f, 1.0f);
  // corr_dim(b) = 64 ln(4096 / (2 pi b)) / (2 ln 1e4): 10.47 for b = 32, 22.51 for b = 1.
  EXPECT_EQ(p.yarn_low, 10.0f);
  EXPECT_EQ(p.yarn_high, 23.0f);
  const double mscale = 1 + 0.1 * std::log(32.0);
  const int32_t pos = 3;
  for (int32_t i = 0; i < 32; ++i) {
    const double extrap = pos * std::pow(10000.0, -2.0 * i / 64);
    const double ramp = 1 - std::clamp((i - 10.0) / 13.0, 0.0, 1.0);
    const double want = extrap / 32 * (1 - ramp) + extrap * ramp;  // up to pair 10 unscaled, from 23 scaled
    auto [angle, len] = rope_angle(p, pos, i);
    EXPECT_NEAR(angle, std::remainder(want, 2 * M_PI), 1e-5) << i;
    EXPECT_NEAR(len, mscale, 1e-5) << i;
  }
  // Without the extrapolation blend it is linear scaling, and unit length.
  RopeParams linear = p;
  linear.ext_factor = 0;
  linear.mscale = 1;
  for (int32_t i : {0, 9, 31}) {
    auto [angle, len] = rope_angle(linear, pos, i);
    EXPECT_NEAR(angle, std::remainder(pos * std::pow(10000.0, -2.0 * i / 64) / 32, 2 * M_PI), 1e-5) << i;
    EXPECT_NEAR(len, 1.0, 1e-6);
  }
}

}  // namespace pagoda::kernels
