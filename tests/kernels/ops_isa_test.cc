// The layer ops and activation quantizers (kernels/cpu/ops_inl.h) on every
// ISA the host supports, at random lengths (tails of every size), against
// double-precision references; the quantizers bit for bit against a scalar
// statement of the algorithm, since every matmul path relies on identical
// activations.
//
// Tolerances: rms_norm sums n squares in float (|err| <= n * 2^-24 of the
// sum), then a sqrt, a division and two products: (n + 8) * 2^-24 relative.
// swiglu: fast_exp's 2e-7 relative error plus four roundings, 1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/ops.h"

namespace pagoda::kernels {
namespace {

using cpu::Isa;

constexpr double kU = 1.0 / (1 << 24);

class OpsIsa : public ::testing::Test {
 protected:
  void TearDown() override { cpu::set_active_isa(cpu::best_isa()); }
};

std::vector<float> random_vec(std::mt19937& rng, int64_t n, float sigma) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

TEST_F(OpsIsa, RmsNormEveryIsa) {
  std::mt19937 rng(101);
  for (int c = 0; c < 60; ++c) {
    const int64_t n = c < 20 ? c + 1 : 1 + rng() % 3000;
    const auto x = random_vec(rng, n, 2.0f);
    const auto w = random_vec(rng, n, 1.0f);
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
    for (Isa isa : cpu::supported_isas()) {
      cpu::set_active_isa(isa);
      std::vector<float> y(n + 1, -3.0f);
      rms_norm(x.data(), w.data(), y.data(), n, 1e-5f);
      std::vector<float> inplace = x;
      rms_norm(inplace.data(), w.data(), inplace.data(), n, 1e-5f);
      for (int64_t i = 0; i < n; ++i) {
        const double want = x[i] * inv * w[i];
        ASSERT_NEAR(y[i], want, (n + 8) * kU * std::fabs(want) + 1e-30)
            << cpu::isa_name(isa) << " n=" << n << " i=" << i;
        ASSERT_EQ(inplace[i], y[i]) << cpu::isa_name(isa) << " n=" << n << " i=" << i;
      }
      ASSERT_EQ(y[n], -3.0f) << cpu::isa_name(isa) << " wrote past n=" << n;
    }
  }
}

TEST_F(OpsIsa, SwigluAndAddEveryIsa) {
  std::mt19937 rng(202);
  for (int c = 0; c < 60; ++c) {
    const int64_t n = c < 20 ? c + 1 : 1 + rng() % 3000;
    auto g = random_vec(rng, n, 4.0f);
    const auto u = random_vec(rng, n, 4.0f);
    g[0] = c % 2 ? -120.0f : 100.0f;  // exp(-g) overflows / underflows
    for (Isa isa : cpu::supported_isas()) {
      cpu::set_active_isa(isa);
      std::vector<float> out(n + 1, -3.0f);
      swiglu(g.data(), u.data(), out.data(), n);
      std::vector<float> sum = g;
      sum.push_back(-3.0f);
      add_inplace(sum.data(), u.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double gd = g[i];
        const double want = gd / (1.0 + std::exp(-gd)) * u[i];
        ASSERT_NEAR(out[i], want, 1e-6 * (1 + std::fabs(want))) << cpu::isa_name(isa) << " n=" << n << " i=" << i;
        ASSERT_EQ(sum[i], g[i] + u[i]) << cpu::isa_name(isa) << " n=" << n << " i=" << i;
      }
      ASSERT_EQ(out[n], -3.0f) << cpu::isa_name(isa);
      ASSERT_EQ(sum[n], -3.0f) << cpu::isa_name(isa);
    }
  }
}

// The quantization every path must reproduce exactly: d = max|x| / 127,
// q = round-to-nearest-even(clamp(x * (127 / max|x|), -127, 127)).
float quantize_block_ref(const float* x, int n, int8_t* q) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d > 0 ? 127.0f / amax : 0.0f;
  for (int i = 0; i < n; ++i)
    q[i] = static_cast<int8_t>(std::nearbyint(std::min(127.0f, std::max(-127.0f, x[i] * id))));
  return d;
}

TEST_F(OpsIsa, ActivationQuantizersAreBitExactOnEveryIsa) {
  std::mt19937 rng(303);
  for (int c = 0; c < 30; ++c) {
    const int64_t n = 256 * (1 + rng() % 6);
    auto x = random_vec(rng, n, c % 3 == 0 ? 1e-3f : 3.0f);
    std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block: d = 0
    x[70] = 1e4f;                                     // one large outlier
    // Ties: x * id lands exactly on k + 0.5 when max|x| = 127 and x = k + 0.5.
    x[96] = 127.0f;
    x[97] = 2.5f;
    x[98] = -3.5f;
    std::vector<int8_t> q_ref(n);
    std::vector<float> d_ref(n / 32);
    std::vector<int32_t> sum_ref(n / 32);
    for (int64_t b = 0; b < n / 32; ++b) {
      d_ref[b] = quantize_block_ref(&x[32 * b], 32, &q_ref[32 * b]);
      for (int i = 0; i < 32; ++i) sum_ref[b] += q_ref[32 * b + i];
    }
    std::vector<int8_t> qk_ref(n);
    std::vector<float> dk_ref(n / 256);
    for (int64_t b = 0; b < n / 256; ++b) dk_ref[b] = quantize_block_ref(&x[256 * b], 256, &qk_ref[256 * b]);
    for (Isa isa : cpu::supported_isas()) {
      SCOPED_TRACE(::testing::Message() << cpu::isa_name(isa) << " case " << c << " n=" << n);
      const cpu::IsaKernels& k = cpu::kernels_for(isa);
      std::vector<int8_t> q(n);
      std::vector<float> d(n / 32), s(n / 32);
      std::vector<int32_t> qsum(n / 32);
      k.quantize_q8_32(x.data(), n, q.data(), d.data(), s.data(), qsum.data());
      ASSERT_EQ(q, q_ref);
      ASSERT_EQ(0, std::memcmp(d.data(), d_ref.data(), d.size() * sizeof(float)));
      ASSERT_EQ(qsum, sum_ref);
      for (size_t b = 0; b < d.size(); ++b) ASSERT_EQ(s[b], d_ref[b] * static_cast<float>(sum_ref[b]));
      std::vector<int16_t> bsums(n / 16);
      k.quantize_q8_k(x.data(), n, q.data(), d.data(), bsums.data());
      ASSERT_EQ(q, qk_ref);
      ASSERT_EQ(0, std::memcmp(d.data(), dk_ref.data(), n / 256 * sizeof(float)));
      for (int64_t g = 0; g < n / 16; ++g) {
        int32_t want = 0;
        for (int i = 0; i < 16; ++i) want += qk_ref[16 * g + i];
        ASSERT_EQ(bsums[g], want) << "group " << g;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::kernels
