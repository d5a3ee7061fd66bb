// GPTQ on random layers: it lowers the layer's output error against plain
// rounding on the same grid, matches a straightforward float64
// re-implementation, and its inverse factor is what the paper says.
#include "quant/gptq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/ref/quant_ref.h"
#include "quant/block_grid.h"

namespace pagoda::quant {
namespace {

struct Layer {
  int64_t rows, cols, n;
  std::vector<float> w;  // [rows][cols]
  std::vector<float> x;  // [n][cols], correlated columns (as real activations are)
  std::vector<double> h;
};

Layer random_layer(int64_t rows, int64_t cols, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  Layer l{rows, cols, n, {}, {}, {}};
  l.w.resize(static_cast<size_t>(rows * cols));
  for (float& v : l.w) v = g(rng) * 0.05f;
  // x = z * M with a few dominant directions and per-column scales (outlier channels).
  const int64_t k = 16;
  std::vector<float> m(static_cast<size_t>(k * cols)), scale(static_cast<size_t>(cols));
  for (float& v : m) v = g(rng);
  for (float& v : scale) v = rng() % 10 == 0 ? 5.0f : 1.0f;
  l.x.assign(static_cast<size_t>(n * cols), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    float z[k];
    for (float& v : z) v = g(rng);
    for (int64_t c = 0; c < cols; ++c) {
      float s = 0.3f * g(rng);
      for (int64_t j = 0; j < k; ++j) s += z[j] * m[j * cols + c];
      l.x[t * cols + c] = s * scale[c];
    }
  }
  l.h.assign(static_cast<size_t>(cols * cols), 0.0);
  ThreadPool pool(2);
  accumulate_hessian(l.x.data(), cols, n, cols, l.h.data(), pool);
  return l;
}

// ||X W^T - X Wq^T||^2 over the calibration rows.
double output_error(const Layer& l, const std::vector<float>& wq) {
  double e = 0;
  for (int64_t t = 0; t < l.n; ++t)
    for (int64_t r = 0; r < l.rows; ++r) {
      double d = 0;
      for (int64_t c = 0; c < l.cols; ++c)
        d += l.x[t * l.cols + c] * static_cast<double>(l.w[r * l.cols + c] - wq[r * l.cols + c]);
      e += d * d;
    }
  return e;
}

std::vector<float> rtn(const Layer& l, DType t) {
  std::vector<uint8_t> q(dtype_row_bytes(t, l.cols) * static_cast<size_t>(l.rows));
  std::vector<float> out(l.w.size());
  for (int64_t r = 0; r < l.rows; ++r) {
    ref::quantize_row(t, &l.w[r * l.cols], q.data() + r * dtype_row_bytes(t, l.cols), l.cols);
    ref::dequantize_row(t, q.data() + r * dtype_row_bytes(t, l.cols), &out[r * l.cols], l.cols);
  }
  return out;
}

std::vector<float> gptq(const Layer& l, DType t, const GptqOptions& opt, std::vector<uint8_t>* bytes = nullptr) {
  std::vector<float> w = l.w;
  std::vector<uint8_t> q(dtype_row_bytes(t, l.cols) * static_cast<size_t>(l.rows));
  ThreadPool pool(3);
  const Status s = gptq_quantize(t, w.data(), l.rows, l.cols, l.h, opt, q.data(), pool);
  EXPECT_TRUE(s.is_ok()) << s.message();
  // w holds exactly what the bytes decode to.
  std::vector<float> y(w.size());
  for (int64_t r = 0; r < l.rows; ++r)
    ref::dequantize_row(t, q.data() + r * dtype_row_bytes(t, l.cols), &y[r * l.cols], l.cols);
  EXPECT_EQ(y, w);
  if (bytes) *bytes = q;
  return w;
}

TEST(Gptq, LowersOutputErrorAgainstRoundToNearest) {
  const Layer l = random_layer(32, 256, 400, 7);
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                  DType::kQ3_K}) {
    const double e_rtn = output_error(l, rtn(l, t));
    const double e_gptq = output_error(l, gptq(l, t, {}));
    GptqOptions ao;
    ao.act_order = true;
    const double e_act = output_error(l, gptq(l, t, ao));
    EXPECT_LT(e_gptq, 0.8 * e_rtn) << dtype_name(t);
    EXPECT_LT(e_act, 0.8 * e_rtn) << dtype_name(t);
  }
}

TEST(Gptq, SameResultForEveryLazyBlockAndThreadCount) {
  const Layer l = random_layer(20, 256, 300, 8);
  std::vector<uint8_t> a, b;
  GptqOptions o1, o2;
  o1.lazy_block = 128;
  o2.lazy_block = 32;
  const std::vector<float> wa = gptq(l, DType::kQ4_0, o1, &a);
  const std::vector<float> wb = gptq(l, DType::kQ4_0, o2, &b);
  // Lazy batching reorders floating-point sums only.
  int differ = 0;
  for (size_t i = 0; i < wa.size(); ++i) differ += wa[i] != wb[i];
  EXPECT_LE(differ, static_cast<int>(wa.size() / 200));
}

// The algorithm as the paper writes it, in float64, one column at a time,
// each error applied to every later column immediately.
std::vector<float> gptq_reference(const Layer& l, DType t, double damp) {
  const int64_t n = l.cols;
  std::vector<double> h = l.h;
  std::vector<double> u;
  ThreadPool pool(1);
  EXPECT_TRUE(gptq_inverse_factor(h, n, damp, &u, pool).is_ok());
  const int bs = dtype_block_size(t);
  std::vector<float> out(l.w.size());
  for (int64_t r = 0; r < l.rows; ++r) {
    std::vector<double> w(l.w.begin() + r * n, l.w.begin() + (r + 1) * n);
    BlockGrid grid;
    std::vector<uint8_t> block(static_cast<size_t>(dtype_type_size(t)));
    for (int64_t i = 0; i < n; ++i) {
      if (i % bs == 0) {
        std::vector<float> vals(w.begin() + i, w.begin() + i + bs);
        ref::quantize_row(t, vals.data(), block.data(), bs);
        grid_of_block(t, block.data(), &grid);
      }
      const double q =
          grid.value(static_cast<int>(i % bs), grid.level(static_cast<int>(i % bs), static_cast<float>(w[i])));
      const double err = (w[i] - q) / u[i * n + i];
      for (int64_t j = i + 1; j < n; ++j) w[j] -= err * u[i * n + j];
      out[r * n + i] = static_cast<float>(q);
    }
  }
  return out;
}

TEST(Gptq, MatchesAFloat64ReImplementation) {
  const Layer l = random_layer(12, 128, 200, 9);
  for (DType t : {DType::kQ4_0, DType::kQ5_1, DType::kQ8_0}) {
    const std::vector<float> ours = gptq(l, t, {});
    const std::vector<float> ref = gptq_reference(l, t, 0.01);
    int differ = 0;
    for (size_t i = 0; i < ours.size(); ++i) differ += std::fabs(ours[i] - ref[i]) > 1e-5f * (1 + std::fabs(ref[i]));
    EXPECT_LE(differ, static_cast<int>(ours.size() / 100)) << dtype_name(t);
    EXPECT_NEAR(output_error(l, ours), output_error(l, ref), 0.02 * output_error(l, ref)) << dtype_name(t);
  }
}

TEST(Gptq, SharedFactorGivesTheSameBytes) {
  // Weights reading the same inputs (q/k/v) share one factor: used for
  // several weights in any order, it is not changed by a use, and each
  // weight gets the bytes and values of GPTQ from H itself (and, in file
  // order, stays within the float64 re-implementation's tolerance).
  const Layer a = random_layer(24, 256, 300, 11);
  Layer b = random_layer(40, 256, 1, 12);
  b.h = a.h;
  ThreadPool pool(2);
  for (bool act_order : {false, true}) {
    GptqOptions opt;
    opt.act_order = act_order;
    opt.lazy_block = 32;
    GptqFactor f;
    ASSERT_TRUE(gptq_factor(a.h, a.cols, opt, &f, pool).is_ok());
    const GptqFactor before = f;
    for (const Layer* l : {static_cast<const Layer*>(&b), &a, static_cast<const Layer*>(&b)})
      for (DType t : {DType::kQ4_0, DType::kQ4_K}) {
        std::vector<uint8_t> want_bytes;
        const std::vector<float> want = gptq(*l, t, opt, &want_bytes);
        std::vector<float> w = l->w;
        std::vector<uint8_t> q(want_bytes.size());
        ASSERT_TRUE(gptq_quantize(t, w.data(), l->rows, f, opt, q.data(), pool).is_ok());
        EXPECT_EQ(q, want_bytes) << dtype_name(t) << " act_order " << act_order;
        EXPECT_EQ(w, want);
        if (!act_order && t == DType::kQ4_0) {
          const std::vector<float> ref = gptq_reference(*l, t, opt.damp);
          int differ = 0;
          for (size_t i = 0; i < w.size(); ++i) differ += std::fabs(w[i] - ref[i]) > 1e-5f * (1 + std::fabs(ref[i]));
          EXPECT_LE(differ, static_cast<int>(w.size() / 100));
        }
      }
    EXPECT_EQ(f.perm, before.perm);
    EXPECT_EQ(f.u, before.u);
  }
  GptqFactor none;
  std::vector<float> w = a.w;
  std::vector<uint8_t> q(dtype_row_bytes(DType::kQ4_0, a.cols) * a.rows);
  EXPECT_FALSE(gptq_quantize(DType::kQ4_0, w.data(), a.rows, none, {}, q.data(), pool).is_ok());
}

TEST(Gptq, InverseFactorIsTheCholeskyOfTheInverse) {
  const Layer l = random_layer(1, 64, 200, 10);
  std::vector<double> h = l.h, u;
  ThreadPool pool(2);
  ASSERT_TRUE(gptq_inverse_factor(h, 64, 0.01, &u, pool).is_ok());
  double mean = 0;
  for (int i = 0; i < 64; ++i) mean += l.h[i * 64 + i];
  mean /= 64;
  // (U^T U) (H + damp I) = I.
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) {
      double s = 0;
      for (int k = 0; k < 64; ++k) {
        double hinv_ik = 0;
        for (int m = 0; m <= std::min(i, k); ++m) hinv_ik += u[m * 64 + i] * u[m * 64 + k];
        s += hinv_ik * (l.h[k * 64 + j] + (k == j ? 0.01 * mean : 0.0));
      }
      ASSERT_NEAR(s, i == j ? 1.0 : 0.0, 1e-6) << i << "," << j;
    }
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < i; ++j) ASSERT_EQ(u[i * 64 + j], 0.0);
}

TEST(Gptq, DeadColumnsAndBadInput) {
  Layer l = random_layer(8, 64, 100, 11);
  // Column 5 never active: H's row and column are 0.
  for (int64_t i = 0; i < 64; ++i) l.h[5 * 64 + i] = l.h[i * 64 + 5] = 0;
  const std::vector<float> w = gptq(l, DType::kQ8_0, {});
  // ... rounds to its grid, no error feedback reaching it.
  for (int64_t r = 0; r < 8; ++r) EXPECT_NEAR(w[r * 64 + 5], l.w[r * 64 + 5], 2e-3f);
  std::vector<float> ww = l.w;
  std::vector<uint8_t> q(1024);
  ThreadPool pool(1);
  EXPECT_FALSE(gptq_quantize(DType::kF16, ww.data(), 8, 64, l.h, {}, q.data(), pool).is_ok());
  EXPECT_FALSE(gptq_quantize(DType::kQ4_K, ww.data(), 8, 64, l.h, {}, q.data(), pool).is_ok());  // 64 % 256
  std::vector<double> nan_h(64 * 64, std::nan(""));
  EXPECT_FALSE(gptq_quantize(DType::kQ8_0, ww.data(), 8, 64, nan_h, {}, q.data(), pool).is_ok());
}

}  // namespace
}  // namespace pagoda::quant
