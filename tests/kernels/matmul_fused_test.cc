// matmul_fused must equal one matmul per weight, for every dtype, with odd
// row counts so the split crosses weights at unaligned rows.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::kernels {
namespace {

class MatmulFused : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulFused, EqualsSeparateCalls) {
  const DType t = GetParam();
  const int64_t n_in = dtype_block_size(t) == 256 ? 512 : 96;
  const int64_t n_outs[] = {37, 5, 18};
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  std::vector<std::vector<uint8_t>> data(3);
  std::vector<WeightView> w(3);
  for (int i = 0; i < 3; ++i) {
    std::vector<float> f(n_in * n_outs[i]);
    for (auto& v : f) v = nd(rng);
    data[i].resize(dtype_row_bytes(t, n_in) * n_outs[i]);
    for (int64_t r = 0; r < n_outs[i]; ++r)
      ref::quantize_row(t, &f[r * n_in], data[i].data() + r * dtype_row_bytes(t, n_in), n_in);
    w[i] = {t, data[i].data(), n_in, n_outs[i]};
  }
  for (int64_t n_tokens : {1, 3, 9}) {
    std::vector<float> x(n_tokens * n_in);
    for (auto& v : x) v = nd(rng);
    ThreadPool pool(2);
    std::vector<std::vector<float>> sep(3), fused(3);
    for (int i = 0; i < 3; ++i) {
      sep[i].assign(n_tokens * n_outs[i], 0);
      fused[i].assign(n_tokens * n_outs[i], -1);
      matmul(w[i], x.data(), n_in, n_tokens, sep[i].data(), n_outs[i], pool);
    }
    const WeightView* ws[] = {&w[0], &w[1], &w[2]};
    float* ys[] = {fused[0].data(), fused[1].data(), fused[2].data()};
    const int64_t strides[] = {n_outs[0], n_outs[1], n_outs[2]};
    matmul_fused(ws, 3, x.data(), n_in, n_tokens, ys, strides, pool);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(sep[i], fused[i]) << "weight " << i << " tokens " << n_tokens;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulFused,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K,
                                           DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace pagoda::kernels
