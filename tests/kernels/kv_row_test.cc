// KV cache rows (kernels::store_kv_row / load_kv_row): sizes, and the
// round-trip error of the quantized formats on random rows of awkward head
// dims, against the bounds of their rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/attention.h"

namespace pagoda::kernels {
namespace {

TEST(KvRow, Sizes) {
  EXPECT_EQ(kv_row_bytes(DType::kF32, 64), 256u);
  EXPECT_EQ(kv_row_bytes(DType::kF16, 64), 128u);
  EXPECT_EQ(kv_row_bytes(DType::kQ8_0, 64), 68u);  // 1/3.76 of f32
  EXPECT_EQ(kv_row_bytes(DType::kQ4_0, 64), 36u);  // 1/7.1
  EXPECT_EQ(kv_row_bytes(DType::kQ8_0, 128), 136u);
  EXPECT_EQ(kv_row_bytes(DType::kQ4_0, 80), 54u);  // 3 blocks, the last one padded
  EXPECT_EQ(kv_row_bytes(DType::kQ8_0, 1), 34u);
  EXPECT_TRUE(is_kv_dtype(DType::kQ4_0));
  EXPECT_FALSE(is_kv_dtype(DType::kQ4_K));
}

// Per block of 32: q8's step is amax/127 (error <= half a step), q4's is
// amax/8 with the block's signed extreme at -8, so the far side of the range
// (up to +7 steps) may clip by one step. Plus the f16 scale's rounding.
void check_round_trip(DType dt, double max_err_in_amax, double rms_err_in_amax) {
  std::mt19937 rng(42);
  double worst = 0, sum_sq = 0;
  int64_t count = 0;
  for (int32_t hd : {1, 7, 31, 32, 33, 64, 80, 100, 128, 256}) {
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> x(hd), y(hd, -1.0f);
      // Mostly normal values with occasional outliers, as in real keys.
      std::normal_distribution<float> n(0.0f, trial % 3 == 0 ? 10.0f : 1.0f);
      for (float& e : x) e = n(rng) * (rng() % 17 == 0 ? 8.0f : 1.0f);
      std::vector<uint8_t> row(kv_row_bytes(dt, hd));
      store_kv_row(dt, x.data(), hd, row.data());
      load_kv_row(dt, row.data(), hd, y.data());
      for (int32_t b = 0; b < hd; b += 32) {
        const int32_t e = std::min(hd, b + 32);
        float amax = 0;
        for (int32_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(x[i]));
        for (int32_t i = b; i < e; ++i) {
          const double err = std::fabs(static_cast<double>(y[i]) - x[i]) / amax;
          ASSERT_LE(err, max_err_in_amax) << "hd " << hd << " i " << i << ": " << x[i] << " -> " << y[i];
          worst = std::max(worst, err);
          sum_sq += err * err;
          ++count;
        }
      }
    }
  }
  const double rms = std::sqrt(sum_sq / count);
  std::printf("%s: max error %.4f, rms %.4f of the block's max |x|\n", dtype_name(dt).data(), worst, rms);
  EXPECT_LE(rms, rms_err_in_amax);
  EXPECT_GT(worst, 0.0);  // it is lossy: the comparison can see an error
}

TEST(KvRow, Q8RoundTripWithinHalfAStep) { check_round_trip(DType::kQ8_0, 0.5 / 127 * 1.01 + 1e-3, 0.0026); }
TEST(KvRow, Q4RoundTripWithinOneStep) { check_round_trip(DType::kQ4_0, 1.0 / 8 * 1.01, 0.04); }

TEST(KvRow, F16AndF32RoundTrip) {
  std::vector<float> x = {1.0f / 3, -2.5f, 1e-3f, 65000.0f, 0.0f}, y(5);
  std::vector<uint8_t> row(kv_row_bytes(DType::kF32, 5));
  store_kv_row(DType::kF32, x.data(), 5, row.data());
  load_kv_row(DType::kF32, row.data(), 5, y.data());
  EXPECT_EQ(x, y);
  store_kv_row(DType::kF16, x.data(), 5, row.data());
  load_kv_row(DType::kF16, row.data(), 5, y.data());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(y[i], fp16_to_fp32(fp32_to_fp16(x[i])));
}

}  // namespace
}  // namespace pagoda::kernels
