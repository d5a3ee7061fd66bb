// Round-trip quality, vec_dot and exactness tests for the scalar reference
// quantizers (kernels/ref/quant_ref.h). Bit-layout tests live in
// quant_ref_layout_test.cc.
#include "kernels/ref/quant_ref.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/ref/blocks.h"

namespace pagoda::ref {
namespace {

struct Budget {
  DType type;
  double max_rel_rms;    // whole row, Gaussian data
  double max_block_err;  // per block: max |err| / max |x| of that block
};

// Thresholds sit a little above the measured values (see the "[ measured ]"
// log lines). Per-block bounds follow from the formats: Q4_0 clamps the side
// opposite the signed max at q=15, so its worst error is d = amax/8; Q4_1
// rounds to (max-min)/15/2 <= amax/15; Q5_0 amax/16; Q5_1 amax/31; Q8_0
// amax/254; each plus fp16 rounding of d. The K-quant quantizers minimize RMS
// error per sub-block, so their per-element bounds are looser.
const Budget kBudgets[] = {
    {DType::kF32, 0.0, 0.0},        {DType::kF16, 0.0003, 0.0005}, {DType::kBF16, 0.0025, 0.0040},
    {DType::kQ8_0, 0.0075, 0.0045}, {DType::kQ4_0, 0.095, 0.1265}, {DType::kQ4_1, 0.088, 0.0700},
    {DType::kQ5_0, 0.055, 0.0635},  {DType::kQ5_1, 0.043, 0.0340}, {DType::kQ4_K, 0.080, 0.0950},
    {DType::kQ5_K, 0.040, 0.0560},  {DType::kQ6_K, 0.019, 0.0200}, {DType::kQ2_K, 0.300, 0.35},
};

std::vector<float> gaussian(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = dist(rng);
  return x;
}

std::vector<float> round_trip(DType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<unsigned char> q(dtype_row_bytes(t, n) + 1);  // +1: odd address below
  quantize_row(t, x.data(), q.data() + 1, n);
  std::vector<float> y(x.size());
  dequantize_row(t, q.data() + 1, y.data(), n);
  return y;
}

double rel_rms(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
    den += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(num / den);
}

class QuantRefTest : public ::testing::TestWithParam<Budget> {};

TEST_P(QuantRefTest, GaussianRoundTripWithinBudget) {
  const Budget b = GetParam();
  const int bs = dtype_block_size(b.type) == 1 ? 32 : dtype_block_size(b.type);
  const uint32_t seed = 1234 + static_cast<uint32_t>(b.type);
  double worst_rel = 0, worst_block = 0, long_rel = 0;
  for (int64_t num_blocks : {1, 3, 7, 41}) {
    const int64_t n = num_blocks * bs;
    SCOPED_TRACE(::testing::Message() << dtype_name(b.type) << " n=" << n << " seed=" << seed);
    const auto x = gaussian(n, seed + static_cast<uint32_t>(num_blocks), 0.02f);
    const auto y = round_trip(b.type, x);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(y[i])) << "element " << i;
    const double rel = rel_rms(x, y);
    worst_rel = std::max(worst_rel, rel);
    long_rel = rel;  // the last (longest) row: the most stable estimate
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      double amax = 0, emax = 0;
      int64_t at = 0;
      for (int64_t i = blk * bs; i < (blk + 1) * bs; ++i) {
        amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
        const double e = std::fabs(static_cast<double>(y[i]) - x[i]);
        if (e > emax) emax = e, at = i;
      }
      worst_block = std::max(worst_block, emax / amax);
      EXPECT_LE(emax, b.max_block_err * amax)
          << "block " << blk << " worst element " << at << " x=" << x[at] << " y=" << y[at];
    }
    EXPECT_LE(rel, b.max_rel_rms);
  }
  std::printf(
      "[ measured ] %-5s rel_rms: %d-block row %.5f, worst row %.5f; "
      "block max_err/amax %.5f\n",
      std::string(dtype_name(b.type)).c_str(), 41, long_rel, worst_rel, worst_block);
}

TEST_P(QuantRefTest, ZeroAndConstantRows) {
  const Budget b = GetParam();
  const int64_t n = dtype_block_size(b.type) == 1 ? 5 : 2 * dtype_block_size(b.type);
  const std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
  for (float y : round_trip(b.type, zeros)) ASSERT_EQ(y, 0.0f);
  for (float c : {0.75f, -3.0f}) {
    const std::vector<float> x(static_cast<size_t>(n), c);
    const auto y = round_trip(b.type, x);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(y[i], c, std::fabs(c) * b.max_block_err + 1e-6) << dtype_name(b.type) << " c=" << c;
  }
}

TEST_P(QuantRefTest, OutliersAndTinyValuesStayFinite) {
  const Budget b = GetParam();
  const int64_t n = 2 * (dtype_block_size(b.type) == 1 ? 32 : dtype_block_size(b.type));
  auto x = gaussian(n, 3, 0.01f);
  x[5] = 300.0f;                                       // one outlier in the first block
  for (int64_t i = n / 2; i < n; ++i) x[i] *= 1e-30f;  // below fp16 range
  const auto y = round_trip(b.type, x);
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(y[i])) << dtype_name(b.type) << " " << i;
  EXPECT_NEAR(y[5], 300.0f, 300.0f * b.max_block_err) << dtype_name(b.type);
  for (int64_t i = n / 2; i < n; ++i) ASSERT_LE(std::fabs(y[i]), 1e-25f) << dtype_name(b.type) << " " << i;
}

TEST_P(QuantRefTest, VecDotEqualsDequantizedSum) {
  const Budget b = GetParam();
  const int bs = dtype_block_size(b.type);
  const uint32_t seed = 99 + static_cast<uint32_t>(b.type);
  SCOPED_TRACE(::testing::Message() << dtype_name(b.type) << " seed=" << seed);
  for (int64_t num_blocks : {1, 5}) {
    const int64_t n = num_blocks * (bs == 1 ? 67 : bs);
    const auto w = gaussian(n, seed);
    const auto x = gaussian(n, seed + 1, 3.0f);
    std::vector<unsigned char> q(dtype_row_bytes(b.type, n));
    quantize_row(b.type, w.data(), q.data(), n);
    std::vector<float> wd(static_cast<size_t>(n));
    dequantize_row(b.type, q.data(), wd.data(), n);
    double expect = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      expect += static_cast<double>(wd[i]) * x[i];
      mag += std::fabs(static_cast<double>(wd[i]) * x[i]);
    }
    const double got = vec_dot(b.type, q.data(), x.data(), n);
    EXPECT_NEAR(got, expect, 1e-9 * mag) << "n=" << n;
    // And it approximates the unquantized dot within the type's budget.
    double exact = 0;
    for (int64_t i = 0; i < n; ++i) exact += static_cast<double>(w[i]) * x[i];
    EXPECT_NEAR(got, exact, 4 * b.max_rel_rms * mag + 1e-6) << "n=" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantRefTest, ::testing::ValuesIn(kBudgets),
                         [](const auto& info) { return std::string(dtype_name(info.param.type)); });

TEST(QuantRef, Q8_0RepresentableValuesAreExact) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> qdist(-127, 127);
  const float scales[] = {0.001f, 0.3f, 1.0f, 17.5f};
  const int64_t n = 32 * 4;
  std::vector<float> x(n);
  for (int blk = 0; blk < 4; ++blk) {
    const float d = fp16_to_fp32(fp32_to_fp16(scales[blk]));
    for (int j = 0; j < 32; ++j) x[blk * 32 + j] = d * static_cast<float>(qdist(rng));
    x[blk * 32 + (blk * 5) % 32] = d * (blk % 2 ? -127.0f : 127.0f);  // pin amax
  }
  const auto y = round_trip(DType::kQ8_0, x);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], x[i]) << "element " << i;
}

TEST(QuantRef, Q4_0RepresentableValuesAreExactAndMatchGgmlBytes) {
  // amax element -4 => d = max / -8 = 0.5; every x is d * (q - 8).
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.5f * static_cast<float>(j % 16 - 8);
  BlockQ4_0 b;
  quantize_row(DType::kQ4_0, x.data(), &b, 32);
  EXPECT_EQ(b.d, 0x3800);  // fp16 0.5
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], j | (j << 4)) << j;
  const auto y = round_trip(DType::kQ4_0, x);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

TEST(QuantRef, F16AndBf16MatchScalarConversions) {
  const auto x = gaussian(37, 5, 100.0f);
  std::vector<uint16_t> h(37), bf(37);
  quantize_row(DType::kF16, x.data(), h.data(), 37);
  quantize_row(DType::kBF16, x.data(), bf.data(), 37);
  std::vector<float> yh(37), yb(37);
  dequantize_row(DType::kF16, h.data(), yh.data(), 37);
  dequantize_row(DType::kBF16, bf.data(), yb.data(), 37);
  for (int i = 0; i < 37; ++i) {
    EXPECT_EQ(h[i], fp32_to_fp16(x[i]));
    EXPECT_EQ(bf[i], fp32_to_bf16(x[i]));
    EXPECT_EQ(yh[i], fp16_to_fp32(h[i]));
    EXPECT_EQ(yb[i], bf16_to_fp32(bf[i]));
  }
}

TEST(QuantRef, RowBytesMatchBlockStructs) {
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_0, 64), 2 * sizeof(BlockQ4_0));
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_1, 64), 2 * sizeof(BlockQ4_1));
  EXPECT_EQ(dtype_row_bytes(DType::kQ5_0, 64), 2 * sizeof(BlockQ5_0));
  EXPECT_EQ(dtype_row_bytes(DType::kQ5_1, 64), 2 * sizeof(BlockQ5_1));
  EXPECT_EQ(dtype_row_bytes(DType::kQ8_0, 64), 2 * sizeof(BlockQ8_0));
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_K, 512), 2 * sizeof(BlockQ4_K));
  EXPECT_EQ(dtype_row_bytes(DType::kQ5_K, 512), 2 * sizeof(BlockQ5_K));
  EXPECT_EQ(dtype_row_bytes(DType::kQ6_K, 512), 2 * sizeof(BlockQ6_K));
}

}  // namespace
}  // namespace pagoda::ref
