// HeadProjection: an F32/F16 output matrix is read through a Q8_0 copy
// whose logits stay within Q8_0's rounding of the exact ones (and agree on
// the top token); quantized matrices, and rows that are not whole Q8_0
// blocks, are used as they are (bit-identical logits).
#include "spec/head_projection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda {
namespace {

struct Matrix {
  std::vector<uint8_t> bytes;
  kernels::WeightView view;
};

Matrix random_matrix(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 0.5f);
  Matrix m;
  m.view.type = type;
  m.view.n_in = cols;
  m.view.n_out = rows;
  m.bytes.resize(m.view.row_bytes() * static_cast<size_t>(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& x : row) x = nd(rng);
    ref::quantize_row(type, row.data(), &m.bytes[m.view.row_bytes() * static_cast<size_t>(r)], cols);
  }
  m.view.data = m.bytes.data();
  return m;
}

// Exact logits in double from the matrix's own values.
std::vector<double> exact(const Matrix& m, const std::vector<float>& h, int32_t rows) {
  const int64_t V = m.view.n_out, H = m.view.n_in;
  std::vector<double> out(static_cast<size_t>(rows * V));
  for (int32_t i = 0; i < rows; ++i)
    for (int64_t v = 0; v < V; ++v)
      out[static_cast<size_t>(i * V + v)] =
          ref::vec_dot(m.view.type, static_cast<const uint8_t*>(m.view.data) + v * m.view.row_bytes(),
                       &h[static_cast<size_t>(i * H)], H);
  return out;
}

TEST(HeadProjection, WideMatricesUseAQ8CopyCloseToTheExactLogits) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(dtype_name(type)));
    const int64_t V = 301, H = 96;
    const int32_t rows = 3;
    const Matrix m = random_matrix(type, V, H, rng);
    const HeadProjection p(m.view, pool);
    EXPECT_TRUE(p.quantized());
    EXPECT_EQ(p.weight().type, DType::kQ8_0);
    std::vector<float> h(static_cast<size_t>(rows * H));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& x : h) x = nd(rng);
    std::vector<float> got(static_cast<size_t>(rows * V));
    p.project(h.data(), rows, got.data(), pool);
    const std::vector<double> want = exact(m, h, rows);
    double scale = 0, err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::abs(want[i]));
      err = std::max(err, std::abs(got[i] - want[i]));
    }
    EXPECT_LT(err / scale, 0.03) << "Q8_0 weights and activations round by well under 3%";
    EXPECT_GT(err / scale, 1e-6) << "the copy should show its rounding";
    for (int32_t i = 0; i < rows; ++i) {
      const auto row = want.begin() + i * V;
      const auto best = std::max_element(row, row + V) - row;
      const float* g = &got[static_cast<size_t>(i * V)];
      EXPECT_GT(g[best], want[static_cast<size_t>(i * V + best)] - 0.03 * scale) << "row " << i;
    }
  }
}

TEST(HeadProjection, QuantizedOrOddMatricesAreUsedAsTheyAre) {
  std::mt19937 rng(6);
  ThreadPool pool(2);
  struct Case {
    DType type;
    int64_t cols;
  };
  for (const Case c : {Case{DType::kQ8_0, 64}, Case{DType::kQ4_0, 96}, Case{DType::kF32, 40}}) {
    SCOPED_TRACE(std::string(dtype_name(c.type)));
    const Matrix m = random_matrix(c.type, 77, c.cols, rng);
    const HeadProjection p(m.view, pool);
    EXPECT_FALSE(p.quantized());
    EXPECT_EQ(p.weight().data, m.view.data);
    std::vector<float> h(static_cast<size_t>(2 * c.cols), 0.25f), got(2 * 77), want(2 * 77);
    p.project(h.data(), 2, got.data(), pool);
    kernels::matmul(m.view, h.data(), c.cols, 2, want.data(), 77, pool);
    EXPECT_EQ(got, want);
  }
}

}  // namespace
}  // namespace pagoda
