// The opt-in BF16 dot-product path (--bf16-dot, WKind::kF16D / kBF16D):
// on every ISA the host runs, F16 and BF16 weights of awkward shapes (odd
// n_in, fewer than 16 rows, a padded last group), every token count up to
// past a register tile, 1-3 threads, against (a) the scalar reference, which
// rounds weights and activations to BF16 and adds in vdpbf16ps's order —
// near bit-exact — and (b) the float matmul, within BF16's rounding. Off, a
// weight takes the ordinary path bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/packed.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::kernels {
namespace {

struct Case {
  std::vector<uint8_t> data;
  std::vector<float> w;  // the weights as stored, [n_out][n_in]
  WeightView view;
};

Case make(DType t, int64_t n_in, int64_t n_out, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  Case c;
  c.data.resize(dtype_row_bytes(t, n_in) * n_out);
  c.w.resize(n_in * n_out);
  for (int64_t i = 0; i < n_in * n_out; ++i) {
    const float v = nd(rng);
    uint16_t h = t == DType::kF16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
    std::memcpy(&c.data[2 * i], &h, 2);
    c.w[i] = t == DType::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
  }
  c.view = {t, c.data.data(), n_in, n_out};
  return c;
}

float round_bf16(float v) { return bf16_to_fp32(fp32_to_bf16(v)); }

TEST(Bf16Dot, MatchesItsReferenceAndTheFloatMatmulOnEveryIsa) {
  std::mt19937 rng(5);
  const cpu::Isa saved = cpu::active_isa();
  const int64_t shapes[][2] = {{47, 15}, {64, 16}, {33, 17}, {256, 40}, {301, 3}, {2, 33}};
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa).data());
    cpu::set_active_isa(isa);
    for (DType t : {DType::kF16, DType::kBF16}) {
      for (const auto& s : shapes) {
        const int64_t n_in = s[0], n_out = s[1];
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(n_in) + "x" + std::to_string(n_out));
        Case c = make(t, n_in, n_out, rng);
        WeightView dot = c.view;
        dot.bf16_dot = true;
        PackedWeights store;
        ThreadPool pack_pool(1);
        WeightView* pw[] = {&dot};
        store.pack(pw, 1, pack_pool);
        // AVX-512 BF16 has the packed kernel; elsewhere the reference runs.
        EXPECT_EQ(dot.packed != nullptr, isa == cpu::Isa::kAvx512 && cpu::host_has_bf16_dot());
        WeightView ref = c.view;  // unpacked: the scalar reference
        ref.bf16_dot = true;
        for (int64_t n_tok : {1, 2, 5, 8, 9, 17}) {
          std::normal_distribution<float> nd;
          std::vector<float> x(n_tok * n_in);
          for (auto& v : x) v = nd(rng);
          for (int threads : {1, 3}) {
            ThreadPool pool(threads);
            std::vector<float> y(n_tok * (n_out + 1), -7.0f), yr(n_tok * n_out);
            matmul(dot, x.data(), n_in, n_tok, y.data(), n_out + 1, pool);
            matmul(ref, x.data(), n_in, n_tok, yr.data(), n_out, pool);
            for (int64_t tk = 0; tk < n_tok; ++tk) {
              EXPECT_EQ(y[tk * (n_out + 1) + n_out], -7.0f);  // past n_out: untouched
              for (int64_t r = 0; r < n_out; ++r) {
                double exact = 0, mag = 0, rounded = 0;
                for (int64_t k = 0; k < n_in; ++k) {
                  const float wv = c.w[r * n_in + k], xv = x[tk * n_in + k];
                  exact += static_cast<double>(wv) * xv;
                  rounded += static_cast<double>(round_bf16(wv)) * round_bf16(xv);
                  mag += std::fabs(static_cast<double>(wv) * xv);
                }
                const float got = y[tk * (n_out + 1) + r];
                // Same products, fp32 sums: a few ulps of the magnitude.
                EXPECT_NEAR(got, yr[tk * n_out + r], 1e-6 * mag + 1e-6) << "row " << r << " token " << tk;
                EXPECT_NEAR(got, rounded, 1e-6 * mag + 1e-6);
                // BF16 keeps 8 significant bits: each product within 2^-7.
                EXPECT_NEAR(got, exact, std::ldexp(mag, -7) + 1e-6);
              }
            }
          }
        }
      }
    }
  }
  cpu::set_active_isa(saved);
}

TEST(Bf16Dot, FusedWeightsMatchSeparateOnes) {
  std::mt19937 rng(9);
  Case a = make(DType::kF16, 96, 40, rng), b = make(DType::kF16, 96, 7, rng);
  a.view.bf16_dot = b.view.bf16_dot = true;
  PackedWeights store;
  ThreadPool pool(2);
  WeightView* pw[] = {&a.view, &b.view};
  store.pack(pw, 2, pool);
  std::vector<float> x(5 * 96);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  std::vector<float> ya(5 * 40), yb(5 * 7), fa(5 * 40), fb(5 * 7);
  matmul(a.view, x.data(), 96, 5, ya.data(), 40, pool);
  matmul(b.view, x.data(), 96, 5, yb.data(), 7, pool);
  const WeightView* ws[] = {&a.view, &b.view};
  float* ys[] = {fa.data(), fb.data()};
  const int64_t strides[] = {40, 7};
  matmul_fused(ws, 2, x.data(), 96, 5, ys, strides, pool);
  EXPECT_EQ(ya, fa);
  EXPECT_EQ(yb, fb);
}

TEST(Bf16Dot, OnlyF16AndBf16WeightsHaveTheKind) {
  EXPECT_EQ(cpu::wkind_of(DType::kF16, false, true), static_cast<int>(cpu::WKind::kF16D));
  EXPECT_EQ(cpu::wkind_of(DType::kBF16, false, true), static_cast<int>(cpu::WKind::kBF16D));
  EXPECT_EQ(cpu::wkind_of(DType::kQ8_0, false, true), -1);
  EXPECT_EQ(cpu::wkind_of(DType::kF16, false, false), static_cast<int>(cpu::WKind::kF16));
}

}  // namespace
}  // namespace pagoda::kernels
