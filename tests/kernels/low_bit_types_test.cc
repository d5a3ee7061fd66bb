// Q3_K and IQ4_NL: the reference round trip within stated bounds, the
// scale packing (the packed kernels of all three: matmul_isa_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/ref/blocks.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda {
namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = g(rng);
  return v;
}

double rel_rms_error(DType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(dtype_row_bytes(t, n));
  std::vector<float> y(x.size());
  ref::quantize_row(t, x.data(), q.data(), n);
  ref::dequantize_row(t, q.data(), y.data(), n);
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += x[i] * x[i];
  }
  return std::sqrt(num / den);
}

TEST(LowBitTypes, RoundTripErrorBounds) {
  // Gaussian data: uniform rounding noise of a 3-bit (8-level) grid over
  // about +-2.5 sigma of 16 elements is ~0.2 sigma; of IQ4_NL's 16 levels ~0.1.
  const std::vector<float> x = gaussian(256 * 64, 1);
  const double e3 = rel_rms_error(DType::kQ3_K, x), e4 = rel_rms_error(DType::kIQ4_NL, x);
  EXPECT_LT(e3, 0.22);
  EXPECT_LT(e4, 0.12);
  EXPECT_LT(e4, rel_rms_error(DType::kQ4_0, x));  // IQ4_NL's non-linear grid beats Q4_0 on Gaussians
  EXPECT_LT(rel_rms_error(DType::kIQ4_XS, x), 0.12);
  EXPECT_GT(e3, rel_rms_error(DType::kQ4_K, x));  // fewer bits, more error
  // Awkward values: zeros, a constant, huge outliers, NaN-free output.
  std::vector<float> odd(256, 0.0f);
  odd[3] = 1e4f;
  odd[200] = -3.0f;
  for (DType t : {DType::kQ3_K, DType::kIQ4_NL, DType::kIQ4_XS}) {
    std::vector<uint8_t> q(dtype_row_bytes(t, 256));
    std::vector<float> y(256);
    ref::quantize_row(t, odd.data(), q.data(), 256);
    ref::dequantize_row(t, q.data(), y.data(), 256);
    for (float v : y) ASSERT_TRUE(std::isfinite(v));
    EXPECT_NEAR(y[3], 1e4f, 1e4f * 0.02f) << dtype_name(t);
    // Zero: exact in Q3_K; IQ4_NL's table has no 0, its nearest is 1 * d.
    EXPECT_LE(std::fabs(y[0]), t == DType::kQ3_K ? 0.0f : 1e4f / 120) << dtype_name(t);
  }
}

TEST(LowBitTypes, Q3KScalesAndLevelsRoundTrip) {
  std::mt19937 rng(2);
  for (int iter = 0; iter < 50; ++iter) {
    ref::BlockQ3_K b{};
    int8_t sc[16], back[16];
    for (int8_t& s : sc) s = static_cast<int8_t>(static_cast<int>(rng() % 64) - 32);
    ref::set_scales_q3_k(&b, sc);
    ref::get_scales_q3_k(b, back);
    ASSERT_EQ(std::memcmp(sc, back, sizeof(sc)), 0);
    int levels[256];
    for (int& l : levels) l = static_cast<int>(rng() % 8);
    ref::set_levels(&b, levels);
    b.d = 0x3C00;  // 1.0
    float y[256];
    ref::dequantize_block(b, y);
    for (int e = 0; e < 256; ++e) ASSERT_EQ(y[e], static_cast<float>(sc[e / 16] * (levels[e] - 4))) << e;
  }
}

}  // namespace
}  // namespace pagoda
