// W8A8 matmul (SmoothQuant's layout): Q8_0 rows whose blocks share one
// scale, run against per-token int8 activations with one int32 dot per row
// (kernels/cpu/kernel_table.h, WKind::kQ8_0R).
//  * Detection: q8_0_rows_share_scale accepts exactly such rows.
//  * Every ISA gives bit-identical results to the scalar integer reference
//    (the same per-token quantization, the same exact integer dot, the same
//    two float multiplies), and stays within the activation-rounding bound
//    of the exact double dot: |err| <= 1.001 * max|x| / 254 * sum|w| plus
//    the f32 rounding of the dot and scales.
//  * The int32 accumulators wrap in the AVX-512 offset form; a row of the
//    longest supported length at full scale must still come out exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/packed.h"
#include "kernels/ref/blocks.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::kernels {
namespace {

using cpu::Isa;

struct Case {
  int64_t n_in, n_out, n_tokens;
  std::vector<uint8_t> w;
  std::vector<float> w_deq, x;
};

Case make_case(int64_t n_in, int64_t n_out, int64_t n_tokens, uint32_t seed) {
  Case c{n_in, n_out, n_tokens, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  const size_t rb = dtype_row_bytes(DType::kQ8_0, n_in);
  c.w.resize(rb * n_out);
  c.w_deq.resize(n_in * n_out);
  std::vector<float> row(n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    const float scale = 0.01f * static_cast<float>(1 + r % 5);
    for (auto& v : row) v = nd(rng) * scale;
    ref::quantize_row_q8_0_shared_scale(row.data(), c.w.data() + r * rb, n_in);
    ref::dequantize_row(DType::kQ8_0, c.w.data() + r * rb, c.w_deq.data() + r * n_in, n_in);
  }
  c.x.resize(n_in * n_tokens);
  for (int64_t i = 0; i < n_in * n_tokens; ++i) c.x[i] = nd(rng) * (i % 13 == 0 ? 4.0f : 1.0f);
  return c;
}

std::vector<float> run(const Case& c, ThreadPool& pool, bool row_scaled = true) {
  WeightView w{DType::kQ8_0, c.w.data(), c.n_in, c.n_out};
  w.row_scaled = row_scaled;
  PackedWeights packed;
  WeightView* pw = &w;
  packed.pack(&pw, 1, pool);
  EXPECT_EQ(w.packed != nullptr, cpu::active_isa() != Isa::kScalar);
  std::vector<float> y(c.n_out * c.n_tokens, -1.0f);
  matmul(w, c.x.data(), c.n_in, c.n_tokens, y.data(), c.n_out, pool);
  return y;
}

class W8A8Test : public ::testing::Test {
 protected:
  void TearDown() override { cpu::set_active_isa(cpu::best_isa()); }
};

TEST_F(W8A8Test, QuantizerSharesOneScalePerRowAndDetectionSeesIt) {
  const Case c = make_case(32 * 9, 21, 1, 5);
  WeightView w{DType::kQ8_0, c.w.data(), c.n_in, c.n_out};
  EXPECT_TRUE(q8_0_rows_share_scale(w));
  // Round trip: |w - deq| <= d / 2 with d = fp16(max|w_row| / 127).
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  std::vector<float> row(256), deq(256);
  std::vector<uint8_t> q(dtype_row_bytes(DType::kQ8_0, 256));
  for (auto& v : row) v = nd(rng);
  row[17] = 9.0f;  // an outlier sets the row scale
  ref::quantize_row_q8_0_shared_scale(row.data(), q.data(), 256);
  ref::dequantize_row(DType::kQ8_0, q.data(), deq.data(), 256);
  const float d = fp16_to_fp32(fp32_to_fp16(9.0f / 127.0f));
  for (int i = 0; i < 256; ++i) EXPECT_LE(std::fabs(row[i] - deq[i]), 0.5f * d * 1.0001f) << i;
  // An ordinary Q8_0 row has its own scale per block.
  std::vector<uint8_t> plain(q.size());
  ref::quantize_row(DType::kQ8_0, row.data(), plain.data(), 256);
  WeightView p{DType::kQ8_0, plain.data(), 256, 1};
  EXPECT_FALSE(q8_0_rows_share_scale(p));
  // One differing row is enough to refuse the whole matrix.
  std::vector<uint8_t> mixed = c.w;
  mixed[5 * dtype_row_bytes(DType::kQ8_0, c.n_in) + 3 * 34] ^= 1;
  WeightView m{DType::kQ8_0, mixed.data(), c.n_in, c.n_out};
  EXPECT_FALSE(q8_0_rows_share_scale(m));
  // Other types and over-long rows are never W8A8.
  WeightView f{DType::kF32, c.w.data(), 8, 1};
  EXPECT_FALSE(q8_0_rows_share_scale(f));
  std::vector<uint8_t> longrow(dtype_row_bytes(DType::kQ8_0, cpu::kMaxRowScaledIn + 32), 0);
  WeightView l{DType::kQ8_0, longrow.data(), cpu::kMaxRowScaledIn + 32, 1};
  EXPECT_FALSE(q8_0_rows_share_scale(l));
}

TEST_F(W8A8Test, EveryIsaBitIdenticalToScalarAndWithinBound) {
  const uint32_t seed = 424242;
  std::printf("[ seed ] %u\n", seed);
  std::mt19937 rng(seed);
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  double worst = 0;
  for (int k = 0; k < 30; ++k) {
    const int64_t n_in = 32 * (1 + static_cast<int64_t>(rng() % 40));
    const int64_t n_out = 1 + static_cast<int64_t>(rng() % 70);
    const int64_t n_tokens = 1 + static_cast<int64_t>(rng() % 21);
    ThreadPool& pool = pools[rng() % 3];
    const uint32_t cs = static_cast<uint32_t>(rng());
    SCOPED_TRACE(::testing::Message() << "n_in=" << n_in << " n_out=" << n_out << " n_tokens=" << n_tokens
                                      << " threads=" << pool.num_threads() << " seed=" << cs);
    const Case c = make_case(n_in, n_out, n_tokens, cs);
    cpu::set_active_isa(Isa::kScalar);
    const std::vector<float> y_scalar = run(c, pool);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* x = c.x.data() + t * n_in;
      double amax = 0;
      for (int64_t i = 0; i < n_in; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
      for (int64_t r = 0; r < n_out; ++r) {
        const float* w = c.w_deq.data() + r * n_in;
        double want = 0, wsum = 0, abs_sum = 0;
        for (int64_t i = 0; i < n_in; ++i) {
          want += static_cast<double>(w[i]) * x[i];
          wsum += std::fabs(w[i]);
          abs_sum += std::fabs(static_cast<double>(w[i]) * x[i]);
        }
        const double tol = 1.001 * amax / 254.0 * wsum + 4e-7 * abs_sum + 1e-30;
        const double err = std::fabs(y_scalar[t * n_out + r] - want);
        worst = std::max(worst, err / tol);
        ASSERT_LE(err, tol) << "t=" << t << " r=" << r;
      }
    }
    for (Isa isa : cpu::supported_isas()) {
      SCOPED_TRACE(cpu::isa_name(isa).data());
      cpu::set_active_isa(isa);
      const std::vector<float> y = run(c, pool);
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], y_scalar[i]) << "output " << i;
    }
  }
  std::printf("[ measured ] W8A8 max err/tol vs exact dot %.3f\n", worst);
}

// All weights +127 (or -127 on odd rows) and all activations at the token's
// maximum: every product is 127 * 127, the dot is 16129 * n_in, just under
// 2^31 at the longest supported row. The AVX-512 form accumulates (q + 128)
// * x, which passes 2^31 on the way: wrapping must cancel exactly.
TEST_F(W8A8Test, LongestRowAtFullScaleIsExact) {
  const int64_t n_in = cpu::kMaxRowScaledIn, n_out = 17, n_tokens = 3;
  Case c{n_in, n_out, n_tokens, {}, {}, {}};
  const size_t rb = dtype_row_bytes(DType::kQ8_0, n_in);
  c.w.resize(rb * n_out);
  std::vector<float> row(n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    std::fill(row.begin(), row.end(), r % 2 ? -1.0f : 1.0f);
    ref::quantize_row_q8_0_shared_scale(row.data(), c.w.data() + r * rb, n_in);
  }
  c.x.assign(n_in * n_tokens, 0.5f);
  ThreadPool pool(2);
  const float dw = fp16_to_fp32(fp32_to_fp16(1.0f / 127.0f));
  const float dx = 0.5f / 127.0f;
  const float want = dw * dx * static_cast<float>(int64_t{127} * 127 * n_in);
  for (Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa).data());
    cpu::set_active_isa(isa);
    const std::vector<float> y = run(c, pool);
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t r = 0; r < n_out; ++r) ASSERT_EQ(y[t * n_out + r], r % 2 ? -want : want) << t << "," << r;
  }
}

// matmul_fused over a W8A8 weight and an ordinary Q8_0 one (different
// activation formats) falls back to separate calls with the right kernels.
TEST_F(W8A8Test, FusedMixOfRowScaledAndPlainQ8) {
  const Case a = make_case(256, 40, 5, 1);
  Case b = make_case(256, 24, 5, 2);
  std::vector<float> row(256);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int64_t r = 0; r < b.n_out; ++r) {  // b as ordinary per-block Q8_0
    for (auto& v : row) v = nd(rng);
    ref::quantize_row(DType::kQ8_0, row.data(), b.w.data() + r * 272, 256);
  }
  ThreadPool pool(2);
  for (Isa isa : cpu::supported_isas()) {
    cpu::set_active_isa(isa);
    const std::vector<float> ya = run(a, pool, true), yb = run(b, pool, false);
    WeightView wa{DType::kQ8_0, a.w.data(), 256, a.n_out}, wb{DType::kQ8_0, b.w.data(), 256, b.n_out};
    wa.row_scaled = true;
    PackedWeights packed;
    WeightView* ws[] = {&wa, &wb};
    packed.pack(ws, 2, pool);
    std::vector<float> fa(a.n_out * 5), fb(b.n_out * 5);
    const WeightView* cws[] = {&wa, &wb};
    float* ys[] = {fa.data(), fb.data()};
    const int64_t strides[] = {a.n_out, b.n_out};
    matmul_fused(cws, 2, a.x.data(), 256, 5, ys, strides, pool);
    EXPECT_EQ(fa, ya) << cpu::isa_name(isa);
    // b's reference runs on b.x; rerun it on a.x to compare.
    Case b2 = b;
    b2.x = a.x;
    EXPECT_EQ(fb, run(b2, pool, false)) << cpu::isa_name(isa);
  }
}

}  // namespace
}  // namespace pagoda::kernels
