// fast_exp against libm, and SwiGLU against a double-precision reference.
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
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

}  // namespace pagoda::kernels
