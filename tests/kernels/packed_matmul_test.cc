// The row-interleaved (packed) kernels of every SIMD ISA the host runs
// against the scalar row-layout reference (the same weights unpacked):
// every packable dtype, awkward row counts (fewer than 16 rows, a padded
// last group; 4 and 5 groups, which the 3-group kernels run in pairs),
// token counts that hit every register-tile tail, 1-3 threads,
// outputs past n_out left untouched, and matmul_fused with weights whose
// row counts are not multiples of 16.
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

// |packed - scalar| within float-rounding distance of sum |w x| (the same
// quantized activations and integer block dots; the float sums differ in
// order only).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& scale,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(got[i] - want[i]), 2e-5f * scale[i] + 1e-6f) << what << " at " << i;
}

// sum_k |w[r][k] x[t][k]| for every token and row: the error scale.
std::vector<float> abs_dot_scale(const Weights& w, const std::vector<float>& x, int64_t n_in, int64_t n_out,
                                 int64_t n_tokens) {
  std::vector<float> scale(n_tokens * n_out);
  for (int64_t tk = 0; tk < n_tokens; ++tk)
    for (int64_t r = 0; r < n_out; ++r) {
      double s = 0;
      for (int64_t k = 0; k < n_in; ++k) s += std::fabs(w.deq[r * n_in + k] * x[tk * n_in + k]);
      scale[tk * n_out + r] = static_cast<float>(s);
    }
  return scale;
}

// A random matrix and its packed copy (packed on one thread).
struct PackedMatrix {
  PackedMatrix(DType t, int64_t n_in, int64_t n_out, std::mt19937& rng)
      : w(make_weights(t, n_in, n_out, rng)), packed(w.view) {
    ThreadPool pool(1);
    WeightView* pw = &packed;
    packed_bytes = store.pack(&pw, 1, pool);
  }
  Weights w;
  WeightView packed;
  PackedWeights store;
  size_t packed_bytes = 0;
};

void matches_scalar_reference(DType t) {
  const int64_t block = dtype_block_size(t);
  const bool quant = block > 1;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const std::vector<int64_t> n_ins = block == 256 ? std::vector<int64_t>{256, 768}
                                     : quant      ? std::vector<int64_t>{32, 96, 352}
                                                  : std::vector<int64_t>{1, 17, 64, 130};
  for (int64_t n_in : n_ins)
    for (int64_t n_out : {1, 5, 16, 37, 64, 80, 163}) {  // 64, 80: 2-group tiles of the 3-group kernels
      const PackedMatrix m(t, n_in, n_out, rng);
      const Weights& w = m.w;
      const WeightView& packed = m.packed;
      ASSERT_GT(m.packed_bytes, 0u);
      ASSERT_NE(packed.packed, nullptr);
      ThreadPool pool1(1);
      for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 12, 13, 17, 30}) {
        std::vector<float> x(n_tokens * n_in);
        for (auto& v : x) v = nd(rng);
        const std::vector<float> scale = abs_dot_scale(w, x, n_in, n_out, n_tokens);
        std::vector<float> want(n_tokens * n_out);
        matmul(w.view, x.data(), n_in, n_tokens, want.data(), n_out, pool1);
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          const int64_t y_stride = n_out + 5;  // the padding must stay untouched
          std::vector<float> y(n_tokens * y_stride, -7.0f), got(n_tokens * n_out);
          matmul(packed, x.data(), n_in, n_tokens, y.data(), y_stride, pool);
          const std::string what = "n_in " + std::to_string(n_in) + " n_out " + std::to_string(n_out) + " tokens " +
                                   std::to_string(n_tokens) + " threads " + std::to_string(threads);
          for (int64_t tk = 0; tk < n_tokens; ++tk) {
            std::copy_n(&y[tk * y_stride], n_out, &got[tk * n_out]);
            for (int64_t r = n_out; r < y_stride; ++r) ASSERT_EQ(y[tk * y_stride + r], -7.0f) << what;
          }
          expect_close(got, want, scale, what);
        }
      }
    }
}

void fused_unaligned_offsets(DType t) {
  const int64_t n_in = dtype_block_size(t) == 256 ? 512 : 96;
  const int64_t n_outs[] = {37, 5, 48};
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

// Rows long enough that a prefill sweeps several cache-sized chunks of
// groups (the nibble formats expand each chunk before sweeping it: every
// chunk must be expanded from its own groups and stored at its own rows).
void long_rows_cross_chunks(DType t) {
  const int64_t n_in = 4096, n_out = 163;  // 11 groups of 16, 2 KiB+ each
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  const PackedMatrix m(t, n_in, n_out, rng);
  const Weights& w = m.w;
  ASSERT_GT(m.packed_bytes, 0u);
  ThreadPool pool1(1);
  for (int64_t n_tokens : {15, 16, 31}) {
    std::vector<float> x(n_tokens * n_in);
    for (auto& v : x) v = nd(rng);
    std::vector<float> want(n_tokens * n_out);
    const std::vector<float> scale = abs_dot_scale(w, x, n_in, n_out, n_tokens);
    matmul(w.view, x.data(), n_in, n_tokens, want.data(), n_out, pool1);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      std::vector<float> got(n_tokens * n_out, -7.0f);
      matmul(m.packed, x.data(), n_in, n_tokens, got.data(), n_out, pool);
      expect_close(got, want, scale, "tokens " + std::to_string(n_tokens) + " threads " + std::to_string(threads));
    }
  }
}

TEST_P(PackedMatmul, MatchesScalarReference) {
  for_each_isa([&] { matches_scalar_reference(GetParam()); });
}
TEST_P(PackedMatmul, LongRowsCrossChunks) {
  if (dtype_block_size(GetParam()) == 1) GTEST_SKIP() << "float rows: covered above";
  for_each_isa([&] { long_rows_cross_chunks(GetParam()); });
}
// Decode with the prefetches on (weights beyond the last-level cache,
// matrices of 2 MiB and more): the same outputs as the reference.
void decode_prefetch_matches(DType t) {
  const int64_t n_in = 4096, n_out = 1024;  // >= 2 MiB for every packable type
  std::mt19937 rng(23);
  std::normal_distribution<float> nd;
  const PackedMatrix m(t, n_in, n_out, rng);
  const Weights& w = m.w;
  ASSERT_GT(m.packed_bytes, 0u);
  ThreadPool pool1(1);
  std::vector<float> x(n_in);
  for (auto& v : x) v = nd(rng);
  std::vector<float> want(n_out), got(n_out);
  matmul(w.view, x.data(), n_in, 1, want.data(), n_out, pool1);
  ThreadPool pool(2);
  matmul(m.packed, x.data(), n_in, 1, got.data(), n_out, pool);
  expect_close(got, want, abs_dot_scale(w, x, n_in, n_out, 1), "decode with prefetch");
}

TEST_P(PackedMatmul, DecodePrefetchKeepsResults) {
  note_weight_bytes(int64_t{1} << 50);  // more than any cache: on for the rest of this process
  ASSERT_TRUE(decode_prefetch_on());
  for_each_isa([&] { decode_prefetch_matches(GetParam()); });
}
TEST_P(PackedMatmul, FusedUnalignedOffsets) {
  for_each_isa([&] { fused_unaligned_offsets(GetParam()); });
}

INSTANTIATE_TEST_SUITE_P(Types, PackedMatmul,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K,
                                           DType::kQ6_K, DType::kQ3_K, DType::kQ2_K, DType::kIQ4_NL, DType::kIQ4_XS),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Every matrix is packed on a SIMD ISA (fewer than 16 rows, any row
// length for floats), none on the scalar ISA (it reads the row layout).
TEST(PackedWeights, PacksEveryMatrixOnSimdIsas) {
  std::mt19937 rng(1);
  const cpu::Isa saved = cpu::active_isa();
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa).data());
    cpu::set_active_isa(isa);
    Weights few = make_weights(DType::kQ4_0, 64, 15, rng);
    Weights f32 = make_weights(DType::kF32, 47, 33, rng);
    PackedWeights store;
    ThreadPool pool(1);
    WeightView* pw[] = {&few.view, &f32.view};
    const size_t bytes = store.pack(pw, 2, pool);
    const bool simd = isa != cpu::Isa::kScalar;
    EXPECT_EQ(bytes > 0, simd);
    EXPECT_EQ(few.view.packed != nullptr, simd);
    EXPECT_EQ(f32.view.packed != nullptr, simd);
    EXPECT_EQ(bytes, store.bytes());
    if (simd) {  // one group of 15 rows + 1 padding, three of 33 rows + 15
      EXPECT_GE(bytes,
                cpu::packed_group_bytes(cpu::WKind::kQ4_0, 64) + 3 * cpu::packed_group_bytes(cpu::WKind::kF32, 47));
    }
  }
  cpu::set_active_isa(saved);
}

}  // namespace
}  // namespace pagoda::kernels
