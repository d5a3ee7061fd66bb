// The grid view of every block type, set_levels, and importance-weighted
// rounding (imatrix) against plain rounding.
#include "quant/block_grid.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/ref/quant_ref.h"

namespace pagoda::quant {
namespace {

const DType kTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                        DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ3_K};

std::vector<float> random_values(int n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng) * (rng() % 7 == 0 ? 4.0f : 1.0f);  // some outliers
  return v;
}

TEST(BlockGrid, DecodesLikeTheBlockAndSetLevelsRoundTrips) {
  std::mt19937 rng(1);
  for (DType t : kTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const int n = dtype_block_size(t);
    for (int iter = 0; iter < 20; ++iter) {
      const std::vector<float> x = random_values(n, rng);
      std::vector<uint8_t> block(static_cast<size_t>(dtype_type_size(t)));
      ref::quantize_row(t, x.data(), block.data(), n);
      BlockGrid g;
      grid_of_block(t, block.data(), &g);
      ASSERT_EQ(g.n, n);
      // Random levels written into the block decode to the grid's values.
      std::vector<int> levels(static_cast<size_t>(n));
      for (int& l : levels) l = static_cast<int>(rng() % static_cast<unsigned>(g.qmax + 1));
      set_block_levels(t, block.data(), levels.data());
      std::vector<float> y(static_cast<size_t>(n));
      ref::dequantize_row(t, block.data(), y.data(), n);
      for (int e = 0; e < n; ++e) {
        const float v = g.value(e, levels[e]);
        ASSERT_NEAR(y[e], v, 1e-5f * (1 + std::fabs(v))) << e;
        // level() rounds a grid value back to its level (when the scale is not 0).
        if (g.a[e] != 0) {
          ASSERT_EQ(g.level(e, y[e]), levels[e]) << e;
        }
      }
    }
  }
}

// sum_j w_j (x_j - q_j)^2 of one row quantized to t.
double weighted_error(DType t, const std::vector<float>& x, const std::vector<float>& w, const float* importance) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(dtype_row_bytes(t, n));
  ref::quantize_row(t, x.data(), q.data(), n, importance);
  std::vector<float> y(x.size());
  ref::dequantize_row(t, q.data(), y.data(), n);
  double e = 0;
  for (size_t j = 0; j < x.size(); ++j) e += w[j] * (x[j] - y[j]) * (x[j] - y[j]);
  return e;
}

TEST(WeightedQuantization, LowersTheImportanceWeightedError) {
  std::mt19937 rng(2);
  std::exponential_distribution<float> heavy(1.0f);
  std::vector<DType> types(std::begin(kTypes), std::end(kTypes));
  types.push_back(DType::kIQ4_NL);  // no linear grid, but importance-weighted rounding
  types.push_back(DType::kIQ4_XS);
  for (DType t : types) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    double plain = 0, weighted = 0;
    for (int row = 0; row < 16; ++row) {
      const std::vector<float> x = random_values(1024, rng);
      std::vector<float> imp(x.size());
      for (float& v : imp) v = heavy(rng) * heavy(rng);  // a few columns matter most
      plain += weighted_error(t, x, imp, nullptr);
      weighted += weighted_error(t, x, imp, imp.data());
    }
    EXPECT_LT(weighted, 0.97 * plain);
  }
}

TEST(WeightedQuantization, HandlesZeroAndConstantBlocks) {
  for (DType t : kTypes) {
    const int n = dtype_block_size(t);
    for (float c : {0.0f, 0.5f, -3.0f}) {
      std::vector<float> x(static_cast<size_t>(n), c), imp(static_cast<size_t>(n), 1.0f), y(static_cast<size_t>(n));
      std::vector<uint8_t> q(static_cast<size_t>(dtype_type_size(t)));
      ref::quantize_row(t, x.data(), q.data(), n, imp.data());
      ref::dequantize_row(t, q.data(), y.data(), n);
      for (int e = 0; e < n; ++e) ASSERT_NEAR(y[e], c, 0.02f * std::fabs(c) + 1e-6f) << dtype_name(t) << " " << c;
    }
  }
}

}  // namespace
}  // namespace pagoda::quant
