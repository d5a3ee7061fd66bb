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

// Mamba-2's and the gated delta rule's steps (the recurrent mixers'
// inner loops): a few chained tokens on awkward shapes, every ISA against a
// double-precision statement of the recurrence. Tolerance: the state and
// outputs are sums of at most n products of O(1) terms per token, so
// 4 n 2^-24 of the row's magnitude per token, with margin.
TEST_F(OpsIsa, RecurrentStepsEveryIsa) {
  std::mt19937 rng(303);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int c = 0; c < 40; ++c) {
    const int64_t rows = 1 + rng() % 70, n = 1 + rng() % 150, tokens = 1 + rng() % 4;
    const auto s0 = random_vec(rng, rows * n, 1.0f);
    // Mamba-2: s[p] = decay s[p] + x[p] dt b; y[p] = s[p] . c + d x[p].
    std::vector<std::vector<float>> xs, bs, cs;
    std::vector<float> dts, decays;
    for (int64_t t = 0; t < tokens; ++t) {
      xs.push_back(random_vec(rng, rows, 1.0f));
      bs.push_back(random_vec(rng, n, 1.0f));
      cs.push_back(random_vec(rng, n, 1.0f));
      dts.push_back(unit(rng));
      decays.push_back(unit(rng));
    }
    const float d = 0.5f;
    std::vector<double> ws(s0.begin(), s0.end());
    std::vector<std::vector<double>> wy(tokens, std::vector<double>(rows));
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t p = 0; p < rows; ++p) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) {
          double& v = ws[p * n + j];
          v = decays[t] * v + static_cast<double>(xs[t][p]) * dts[t] * bs[t][j];
          acc += v * cs[t][j];
        }
        wy[t][p] = acc + d * xs[t][p];
      }
    const double tol = 4.0 * (n + 4) * kU * 4.0 * tokens;
    for (Isa isa : cpu::supported_isas()) {
      cpu::set_active_isa(isa);
      std::vector<float> st = s0;
      std::vector<float> y(rows + 1, -3.0f);
      for (int64_t t = 0; t < tokens; ++t) {
        ssm_step(st.data(), rows, n, xs[t].data(), bs[t].data(), cs[t].data(), dts[t], decays[t], d, y.data());
        for (int64_t p = 0; p < rows; ++p)
          ASSERT_NEAR(y[p], wy[t][p], tol * (1 + std::sqrt(static_cast<double>(n)) * 4))
              << cpu::isa_name(isa) << " rows=" << rows << " n=" << n << " t=" << t << " p=" << p;
        ASSERT_EQ(y[rows], -3.0f) << cpu::isa_name(isa) << " wrote past rows=" << rows;
      }
      for (int64_t i = 0; i < rows * n; ++i) ASSERT_NEAR(st[i], ws[i], tol * 4) << cpu::isa_name(isa) << " state " << i;
    }
    // Gated delta rule on a [dk][dv] = [rows][n] state.
    const int64_t dk = rows, dv = n;
    std::vector<std::vector<float>> qs, ks, vs;
    std::vector<float> gs, betas;
    for (int64_t t = 0; t < tokens; ++t) {
      auto k = random_vec(rng, dk, 1.0f);
      double norm = 0;
      for (float v : k) norm += static_cast<double>(v) * v;
      for (float& v : k) v = static_cast<float>(v / std::sqrt(norm));  // L2-normed, as the model's
      ks.push_back(k);
      qs.push_back(random_vec(rng, dk, 1.0f));
      vs.push_back(random_vec(rng, dv, 1.0f));
      gs.push_back(unit(rng));
      betas.push_back(unit(rng));
    }
    const float scale = 0.25f;
    std::vector<double> ds(s0.begin(), s0.end());
    std::vector<std::vector<double>> wo(tokens, std::vector<double>(dv));
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<double> kv(dv, 0.0);
      for (double& v : ds) v *= gs[t];
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t j = 0; j < dv; ++j) kv[j] += ks[t][i] * ds[i * dv + j];
      for (int64_t j = 0; j < dv; ++j) kv[j] = (vs[t][j] - kv[j]) * betas[t];
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t j = 0; j < dv; ++j) {
          ds[i * dv + j] += ks[t][i] * kv[j];
          wo[t][j] += static_cast<double>(qs[t][i]) * scale * ds[i * dv + j];
        }
    }
    const double dtol = 8.0 * (dk + 4) * kU * tokens * (1 + std::sqrt(static_cast<double>(dk)) * 4);
    for (Isa isa : cpu::supported_isas()) {
      cpu::set_active_isa(isa);
      std::vector<float> st = s0, tmp(dv), o(dv + 1, -3.0f);
      for (int64_t t = 0; t < tokens; ++t) {
        deltanet_step(st.data(), dk, dv, qs[t].data(), ks[t].data(), vs[t].data(), gs[t], betas[t], scale, o.data(),
                      tmp.data());
        for (int64_t j = 0; j < dv; ++j)
          ASSERT_NEAR(o[j], wo[t][j], dtol) << cpu::isa_name(isa) << " dk=" << dk << " dv=" << dv << " t=" << t;
        ASSERT_EQ(o[dv], -3.0f) << cpu::isa_name(isa) << " wrote past dv=" << dv;
      }
      for (int64_t i = 0; i < dk * dv; ++i) ASSERT_NEAR(st[i], ds[i], dtol) << cpu::isa_name(isa) << " state " << i;
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
