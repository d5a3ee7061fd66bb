// kernels::matmul on F32/F16/BF16 weights without a packed copy (the row
// layout read in place: quantization's calibration, a failed pack) on every
// ISA the host has: against the double-precision ref::vec_dot within the
// f32 summation bound, the same bits however the rows and tokens are split
// (threads, one row or one token at a time), and on the SIMD ISAs through
// the ISA's own kernel (not the scalar reference).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::kernels {
namespace {

using cpu::Isa;

struct Case {
  int64_t n_in, n_out, n_tokens;
};

class UnpackedMatmulTest : public ::testing::TestWithParam<DType> {
 protected:
  void TearDown() override { cpu::set_active_isa(cpu::best_isa()); }
};

TEST_P(UnpackedMatmulTest, EveryIsaMatchesReferenceAndIsTheSameHoweverSplit) {
  const DType type = GetParam();
  ThreadPool pool1(1), pool2(2);
  const int kind = cpu::wkind_of(type);
  const Case cases[] = {{1, 1, 1},   {15, 3, 2},  {16, 5, 4},   {17, 2, 5},  {33, 37, 9},
                        {64, 4, 17}, {100, 7, 3}, {1007, 9, 6}, {2048, 3, 1}};
  uint32_t seed = 91 + static_cast<uint32_t>(type);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_in=" << c.n_in << " n_out=" << c.n_out
                                      << " n_tokens=" << c.n_tokens);
    std::mt19937 rng(++seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const size_t rb = dtype_row_bytes(type, c.n_in);
    std::vector<uint8_t> w(rb * c.n_out);
    std::vector<float> row(c.n_in);
    for (int64_t r = 0; r < c.n_out; ++r) {
      for (float& v : row) v = nd(rng) * 0.05f;
      ref::quantize_row(type, row.data(), w.data() + r * rb, c.n_in);
    }
    const int64_t x_stride = c.n_in + 5;
    std::vector<float> x(x_stride * c.n_tokens, 1e30f);  // poisoned padding
    for (int64_t t = 0; t < c.n_tokens; ++t)
      for (int64_t i = 0; i < c.n_in; ++i) x[t * x_stride + i] = nd(rng);
    const int64_t y_stride = c.n_out + 2;
    const WeightView wv{type, w.data(), c.n_in, c.n_out};
    for (Isa isa : cpu::supported_isas()) {
      SCOPED_TRACE(cpu::isa_name(isa).data());
      cpu::set_active_isa(isa);
      std::vector<float> y(y_stride * c.n_tokens, -7.0f), y2 = y, y_one = y;
      matmul(wv, x.data(), x_stride, c.n_tokens, y.data(), y_stride, pool1);
      matmul(wv, x.data(), x_stride, c.n_tokens, y2.data(), y_stride, pool2);
      // Each row alone, then each token alone: other tile shapes, the same sums.
      for (int64_t r = 0; r < c.n_out; ++r) {
        const WeightView one{type, w.data() + r * rb, c.n_in, 1};
        matmul(one, x.data(), x_stride, c.n_tokens, y_one.data() + r, y_stride, pool1);
      }
      std::vector<float> y_tok(y_stride * c.n_tokens, -7.0f);
      for (int64_t t = 0; t < c.n_tokens; ++t)
        matmul(wv, x.data() + t * x_stride, x_stride, 1, y_tok.data() + t * y_stride, y_stride, pool1);
      for (int64_t t = 0; t < c.n_tokens; ++t) {
        for (int64_t r = 0; r < c.n_out; ++r) {
          const size_t at = static_cast<size_t>(t * y_stride + r);
          double abs_sum = 0;
          std::vector<float> deq(c.n_in);
          ref::dequantize_row(type, w.data() + r * rb, deq.data(), c.n_in);
          for (int64_t i = 0; i < c.n_in; ++i) abs_sum += std::fabs(static_cast<double>(deq[i]) * x[t * x_stride + i]);
          const double want = ref::vec_dot(type, w.data() + r * rb, x.data() + t * x_stride, c.n_in);
          ASSERT_LE(std::fabs(y[at] - want), c.n_in * 0x1p-24 * abs_sum + 1e-30) << "t=" << t << " r=" << r;
          ASSERT_EQ(y2[at], y[at]) << "two threads: t=" << t << " r=" << r;
          ASSERT_EQ(y_one[at], y[at]) << "one row at a time: t=" << t << " r=" << r;
          ASSERT_EQ(y_tok[at], y[at]) << "one token at a time: t=" << t << " r=" << r;
        }
        for (int64_t r = c.n_out; r < y_stride; ++r) ASSERT_EQ(y[t * y_stride + r], -7.0f) << "padding written";
      }
      // matmul ran this ISA's kernel over the row layout (the scalar
      // reference on the scalar ISA).
      const cpu::IsaKernels& k = cpu::kernels_for(isa);
      const cpu::RowsFn fn = isa == Isa::kScalar ? k.rows[kind] : k.unpacked[kind];
      ASSERT_NE(fn, nullptr);
      cpu::MatmulArgs a;
      a.w = w.data();
      a.row_bytes = rb;
      a.n_in = c.n_in;
      a.n_out = c.n_out;
      a.x = x.data();
      a.x_stride = x_stride;
      a.n_tokens = c.n_tokens;
      std::vector<float> y_fn(y_stride * c.n_tokens, -7.0f);
      a.y = y_fn.data();
      a.y_stride = y_stride;
      fn(a, 0, c.n_out);
      EXPECT_EQ(y_fn, y);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatDtypes, UnpackedMatmulTest, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace pagoda::kernels
