// The row-interleaved (packed) kernels against the row-layout kernels of the
// same ISA: every packable dtype, awkward row counts (partial last group,
// rows past packed_rows), token counts that hit every register-tile tail,
// 1-3 threads, and matmul_fused with weights starting at unaligned rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/pack.h"
#include "kernels/matmul.h"
#include "kernels/packed.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::kernels {
namespace {

struct Weights {
  std::vector<uint8_t> data;
  std::vector<float> deq;  // dequantized, [n_out][n_in]
  WeightView view;
};

Weights make_weights(DType t, int64_t n_in, int64_t n_out, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  Weights w;
  const size_t rb = dtype_row_bytes(t, n_in);
  w.data.resize(rb * n_out);
  w.deq.resize(n_in * n_out);
  std::vector<float> f(n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    for (auto& v : f) v = nd(rng);
    ref::quantize_row(t, f.data(), w.data.data() + r * rb, n_in);
    ref::dequantize_row(t, w.data.data() + r * rb, &w.deq[r * n_in], n_in);
  }
  w.view = {t, w.data.data(), n_in, n_out};
  return w;
}

// The ISAs with packed kernels that this host runs.
std::vector<cpu::Isa> packed_isas() {
  std::vector<cpu::Isa> r;
  for (cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512})
    if (cpu::isa_supported(isa)) r.push_back(isa);
  return r;
}

// Runs each test body once per packed ISA (packing and both matmuls on it).
class PackedMatmul : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (packed_isas().empty()) GTEST_SKIP() << "no AVX2 / AVX-512 on this host";
    saved_ = cpu::active_isa();
  }
  void TearDown() override {
    if (!packed_isas().empty()) cpu::set_active_isa(saved_);
  }
  template <class Fn>
  void for_each_isa(Fn fn) {
    for (cpu::Isa isa : packed_isas()) {
      SCOPED_TRACE(std::string("isa ") + std::string(cpu::isa_name(isa)));
      cpu::set_active_isa(isa);
      fn();
    }
  }
  cpu::Isa saved_ = cpu::Isa::kScalar;
};

// |packed - rows| within float-rounding distance of sum |w x|.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& scale,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(got[i] - want[i]), 2e-5f * scale[i] + 1e-6f) << what << " at " << i;
}

void matches_row_kernels(DType t) {
  const int64_t block = dtype_block_size(t);
  const bool quant = block > 1;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const std::vector<int64_t> n_ins = block == 256 ? std::vector<int64_t>{256, 768}
                                     : quant      ? std::vector<int64_t>{32, 96, 352}
                                                  : std::vector<int64_t>{1, 17, 64, 130};
  for (int64_t n_in : n_ins)
    for (int64_t n_out : {16, 37, 80, 163}) {
      Weights w = make_weights(t, n_in, n_out, rng);
      WeightView packed = w.view;
      PackedWeights store;
      ThreadPool pool1(1);
      WeightView* pw = &packed;
      ASSERT_GT(store.pack(&pw, 1, pool1), 0u);
      ASSERT_EQ(packed.packed_rows, n_out / 16 * 16);
      for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 12, 13, 17, 30}) {
        std::vector<float> x(n_tokens * n_in);
        for (auto& v : x) v = nd(rng);
        std::vector<float> scale(n_tokens * n_out);
        for (int64_t tk = 0; tk < n_tokens; ++tk)
          for (int64_t r = 0; r < n_out; ++r) {
            double s = 0;
            for (int64_t k = 0; k < n_in; ++k) s += std::fabs(w.deq[r * n_in + k] * x[tk * n_in + k]);
            scale[tk * n_out + r] = static_cast<float>(s);
          }
        std::vector<float> want(n_tokens * n_out);
        matmul(w.view, x.data(), n_in, n_tokens, want.data(), n_out, pool1);
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          std::vector<float> got(n_tokens * n_out, -7.0f);
          matmul(packed, x.data(), n_in, n_tokens, got.data(), n_out, pool);
          expect_close(got, want, scale,
                       "n_in " + std::to_string(n_in) + " n_out " + std::to_string(n_out) + " tokens " +
                           std::to_string(n_tokens) + " threads " + std::to_string(threads));
        }
      }
    }
}

// Only the first packed_rows rows come from the packed copy.
void partial_packed_rows(DType t) {
  const int64_t n_in = dtype_block_size(t) == 256 ? 256 : 64, n_out = 64;
  std::mt19937 rng(9);
  Weights w = make_weights(t, n_in, n_out, rng);
  WeightView packed = w.view;
  PackedWeights store;
  ThreadPool pool(2);
  WeightView* pw = &packed;
  store.pack(&pw, 1, pool);
  packed.packed_rows = 32;  // rows 32.. must come from the row layout
  std::vector<float> x(5 * n_in);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  std::vector<float> want(5 * n_out), got(5 * n_out);
  matmul(w.view, x.data(), n_in, 5, want.data(), n_out, pool);
  matmul(packed, x.data(), n_in, 5, got.data(), n_out, pool);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-3f * (1 + std::fabs(want[i])));
}

void fused_unaligned_offsets(DType t) {
  const int64_t n_in = dtype_block_size(t) == 256 ? 512 : 96;
  const int64_t n_outs[] = {37, 20, 48};
  std::mt19937 rng(11);
  std::vector<Weights> w;
  for (int64_t n : n_outs) w.push_back(make_weights(t, n_in, n, rng));
  std::vector<WeightView> pv;
  for (auto& x : w) pv.push_back(x.view);
  PackedWeights store;
  ThreadPool pool(2);
  WeightView* pws[] = {&pv[0], &pv[1], &pv[2]};
  store.pack(pws, 3, pool);
  std::normal_distribution<float> nd;
  for (int64_t n_tokens : {1, 6}) {
    std::vector<float> x(n_tokens * n_in);
    for (auto& v : x) v = nd(rng);
    std::vector<std::vector<float>> want(3), got(3);
    for (int i = 0; i < 3; ++i) {
      want[i].resize(n_tokens * n_outs[i]);
      got[i].assign(n_tokens * n_outs[i], -3.0f);
      matmul(w[i].view, x.data(), n_in, n_tokens, want[i].data(), n_outs[i], pool);
    }
    const WeightView* ws[] = {&pv[0], &pv[1], &pv[2]};
    float* ys[] = {got[0].data(), got[1].data(), got[2].data()};
    const int64_t strides[] = {n_outs[0], n_outs[1], n_outs[2]};
    matmul_fused(ws, 3, x.data(), n_in, n_tokens, ys, strides, pool);
    for (int i = 0; i < 3; ++i)
      for (size_t j = 0; j < got[i].size(); ++j)
        EXPECT_NEAR(got[i][j], want[i][j], 1e-3f * (1 + std::fabs(want[i][j]))) << i << " " << j;
  }
}

TEST_P(PackedMatmul, MatchesRowKernels) { for_each_isa([&] { matches_row_kernels(GetParam()); }); }
TEST_P(PackedMatmul, PartialPackedRows) { for_each_isa([&] { partial_packed_rows(GetParam()); }); }
TEST_P(PackedMatmul, FusedUnalignedOffsets) { for_each_isa([&] { fused_unaligned_offsets(GetParam()); }); }

INSTANTIATE_TEST_SUITE_P(Types, PackedMatmul,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K,
                                           DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Matrices with fewer than 16 rows, or rows that are not whole blocks of
// the activation format, are left alone.
TEST(PackedWeights, SkipsUnpackable) {
  std::mt19937 rng(1);
  Weights few = make_weights(DType::kQ4_0, 64, 15, rng);
  Weights f32 = make_weights(DType::kF32, 48, 32, rng);
  PackedWeights store;
  ThreadPool pool(1);
  WeightView* pw = &few.view;
  EXPECT_EQ(store.pack(&pw, 1, pool), 0u);
  EXPECT_EQ(few.view.packed, nullptr);
  pw = &f32.view;
  EXPECT_GT(store.pack(&pw, 1, pool), 0u);
  EXPECT_EQ(f32.view.packed_rows, 32);
}

}  // namespace
}  // namespace pagoda::kernels
