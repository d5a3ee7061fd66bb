// Every ISA path of kernels::matmul the host supports (the weights packed on
// that ISA, as the model does), for every weight dtype, against (a) the
// double-precision scalar reference ref::vec_dot and (b) the scalar path,
// which for quantized weights is the integer reference of the same algorithm
// (same activation quantization, integer block dots).
//
// Tolerances:
//  * float weights vs ref: f32 summation, |err| <= n_in * 2^-24 * sum|w_i x_i|
//    (worst-case recursive-summation bound) + 1e-30.
//  * quantized weights vs ref: activations are rounded to d/2 with
//    d = max|x_block|/127, so |err| <= sum_b (max|x_b| / 254) * sum_{i in b}|w_i|
//    (times 1.001 for the rounding of 1/d) plus the f32 summation term above.
//  * SIMD vs scalar path, quantized: identical integer block dots, only the
//    float combination order differs: (n_blocks + 16) * 2^-22 * sum|w_i x_i|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/packed.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::kernels {
namespace {

using cpu::Isa;

constexpr double kU = 1.0 / (1 << 24);

struct Shape {
  int64_t n_in, n_out, n_tokens;
};

struct Problem {
  DType type;
  Shape shape;
  std::vector<uint8_t> w;
  std::vector<float> w_deq;  // dequantized rows
  std::vector<float> x;      // n_tokens rows, stride n_in + 3
  int64_t x_stride;
};

Problem make_problem(DType type, Shape s, uint32_t seed) {
  Problem p{type, s, {}, {}, {}, s.n_in + 3};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t rb = dtype_row_bytes(type, s.n_in);
  p.w.resize(rb * s.n_out);
  p.w_deq.resize(s.n_in * s.n_out);
  std::vector<float> row(s.n_in);
  for (int64_t r = 0; r < s.n_out; ++r) {
    for (auto& v : row) v = nd(rng) * 0.05f;
    ref::quantize_row(type, row.data(), p.w.data() + r * rb, s.n_in);
    ref::dequantize_row(type, p.w.data() + r * rb, p.w_deq.data() + r * s.n_in, s.n_in);
  }
  p.x.assign(p.x_stride * s.n_tokens, 1e30f);  // poison the padding
  for (int64_t t = 0; t < s.n_tokens; ++t)
    for (int64_t i = 0; i < s.n_in; ++i) p.x[t * p.x_stride + i] = nd(rng) * (i % 7 == 0 ? 3.0f : 1.0f);
  return p;
}

// matmul on the active ISA with the weights packed for it (no copy on the
// scalar ISA).
std::vector<float> run_matmul(const Problem& p, ThreadPool& pool, int64_t y_stride) {
  std::vector<float> y(y_stride * p.shape.n_tokens, -12345.0f);
  WeightView w{p.type, p.w.data(), p.shape.n_in, p.shape.n_out};
  PackedWeights packed;
  WeightView* pw = &w;
  packed.pack(&pw, 1, pool);
  EXPECT_EQ(w.packed != nullptr, cpu::active_isa() != Isa::kScalar);
  matmul(w, p.x.data(), p.x_stride, p.shape.n_tokens, y.data(), y_stride, pool);
  return y;
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// Bound on |matmul - exact| for output (t, r), see the file comment.
double ref_tolerance(const Problem& p, int64_t t, int64_t r) {
  const int64_t n = p.shape.n_in;
  const float* x = p.x.data() + t * p.x_stride;
  const float* w = p.w_deq.data() + r * n;
  double abs_sum = 0;
  for (int64_t i = 0; i < n; ++i) abs_sum += std::fabs(static_cast<double>(w[i]) * x[i]);
  double tol = n * kU * abs_sum + 1e-30;
  if (is_float(p.type)) return tol;
  const auto kind = static_cast<cpu::WKind>(cpu::wkind_of(p.type));
  const int64_t blk = cpu::act_format_of(kind) == cpu::ActFormat::kQ8_K ? cpu::kActBlockK : cpu::kActBlock32;
  for (int64_t b = 0; b < n / blk; ++b) {
    double amax = 0, wsum = 0;
    for (int64_t i = b * blk; i < (b + 1) * blk; ++i) {
      amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
      wsum += std::fabs(w[i]);
    }
    tol += 1.001 * amax / 254.0 * wsum;
  }
  return tol;
}

double same_algo_tolerance(const Problem& p, int64_t t, int64_t r) {
  const int64_t n = p.shape.n_in;
  double abs_sum = 0;
  for (int64_t i = 0; i < n; ++i)
    abs_sum += std::fabs(static_cast<double>(p.w_deq[r * n + i]) * p.x[t * p.x_stride + i]);
  return (n / 32 + 16) * 4 * kU * abs_sum + 1e-30;
}

struct Worst {
  double err = 0, tol = 1;
  int64_t t = 0, r = 0;
  double got = 0, want = 0;
  void add(double got_v, double want_v, double tol_v, int64_t tt, int64_t rr) {
    const double e = std::fabs(got_v - want_v);
    if (!(e / tol_v <= err / tol)) *this = {e, tol_v, tt, rr, got_v, want_v};
  }
  bool ok() const { return err <= tol; }
};

std::string describe(const char* what, const Worst& w) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: worst at token %lld row %lld: got %.9g want %.9g err %.3g tol %.3g", what,
                static_cast<long long>(w.t), static_cast<long long>(w.r), w.got, w.want, w.err, w.tol);
  return buf;
}

class MatmulIsaTest : public ::testing::TestWithParam<DType> {
 protected:
  void TearDown() override { cpu::set_active_isa(cpu::best_isa()); }
};

std::vector<Shape> shapes_for(DType type) {
  const int64_t bs = dtype_block_size(type);
  const int64_t blk = bs == 1 ? 32 : bs;
  std::vector<Shape> out;
  for (int64_t n_in : {blk, blk * 11}) {
    for (int64_t n_out : {int64_t{1}, int64_t{37}}) {
      for (int64_t n_tokens : {int64_t{1}, int64_t{3}, int64_t{17}}) out.push_back({n_in, n_out, n_tokens});
    }
  }
  // An even number of blocks with several tokens and rows: the two-row
  // prefill tiles (pairs of blocks, pairs of rows) run only on such shapes.
  out.push_back({blk * 12, 38, 6});
  if (bs == 1) {  // float rows need not be a multiple of a vector
    out.push_back({19, 5, 2});
    out.push_back({1000 + 7, 9, 5});
  }
  return out;
}

TEST_P(MatmulIsaTest, EveryIsaMatchesReference) {
  const DType type = GetParam();
  ThreadPool pool1(1), pool2(2);
  uint32_t seed = 1234 + static_cast<uint32_t>(type) * 101;
  double worst_ref = 0, worst_same = 0;  // err / tol, logged to show the bounds are not vacuous
  for (const Shape& s : shapes_for(type)) {
    ++seed;
    SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_in=" << s.n_in << " n_out=" << s.n_out
                                      << " n_tokens=" << s.n_tokens << " seed=" << seed);
    const Problem p = make_problem(type, s, seed);
    const int64_t y_stride = s.n_out + 2;
    cpu::set_active_isa(Isa::kScalar);
    const std::vector<float> y_scalar = run_matmul(p, pool1, y_stride);
    for (Isa isa : cpu::supported_isas()) {
      SCOPED_TRACE(cpu::isa_name(isa).data());
      cpu::set_active_isa(isa);
      ThreadPool& pool = (seed % 2 == 0) ? pool1 : pool2;
      const std::vector<float> y = run_matmul(p, pool, y_stride);
      Worst vs_ref, vs_scalar;
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        for (int64_t r = 0; r < s.n_out; ++r) {
          const double want = ref::vec_dot(p.type, p.w.data() + r * dtype_row_bytes(p.type, s.n_in),
                                           p.x.data() + t * p.x_stride, s.n_in);
          const double got = y[t * y_stride + r];
          vs_ref.add(got, want, ref_tolerance(p, t, r), t, r);
          if (!is_float(p.type)) vs_scalar.add(got, y_scalar[t * y_stride + r], same_algo_tolerance(p, t, r), t, r);
        }
        for (int64_t r = s.n_out; r < y_stride; ++r) ASSERT_EQ(y[t * y_stride + r], -12345.0f) << "padding written";
      }
      worst_ref = std::max(worst_ref, vs_ref.err / vs_ref.tol);
      worst_same = std::max(worst_same, vs_scalar.err / vs_scalar.tol);
      EXPECT_TRUE(vs_ref.ok()) << describe("vs ref::vec_dot", vs_ref);
      EXPECT_TRUE(vs_scalar.ok()) << describe("vs scalar integer path", vs_scalar);
    }
  }
  std::printf("[ measured ] %s: max err/tol vs ref %.3f, vs scalar path %.3f\n", dtype_name(type).data(), worst_ref,
              worst_same);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, MatmulIsaTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K,
                                           DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL, DType::kIQ4_XS),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Random awkward shapes (any number of blocks, row counts that are not
// multiples of 16, 1..20 tokens, 1..3 threads) on every ISA against the
// scalar path (quantized: the same integer algorithm) and the reference.
TEST(MatmulIsa, RandomShapesEveryIsa) {
  constexpr DType kTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                              DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K,
                              DType::kQ6_K, DType::kQ2_K, DType::kQ3_K};
  const uint32_t seed = 20240613;
  std::printf("[ seed ] %u\n", seed);
  std::mt19937 rng(seed);
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  for (int c = 0; c < 40; ++c) {
    const DType type = kTypes[rng() % std::size(kTypes)];
    const int64_t bs = dtype_block_size(type);
    const int64_t n_in = bs == 1 ? 1 + rng() % 300 : bs * (1 + rng() % (bs == 256 ? 4 : 12));
    const Shape s{n_in, 1 + static_cast<int64_t>(rng() % 90), 1 + static_cast<int64_t>(rng() % 20)};
    ThreadPool& pool = pools[rng() % 3];
    const uint32_t case_seed = static_cast<uint32_t>(rng());
    SCOPED_TRACE(::testing::Message() << "case " << c << ": " << dtype_name(type) << " n_in=" << s.n_in
                                      << " n_out=" << s.n_out << " n_tokens=" << s.n_tokens
                                      << " threads=" << pool.num_threads() << " seed=" << case_seed);
    const Problem p = make_problem(type, s, case_seed);
    const int64_t y_stride = s.n_out + 1;
    cpu::set_active_isa(Isa::kScalar);
    const std::vector<float> y_scalar = run_matmul(p, pool, y_stride);
    for (Isa isa : cpu::supported_isas()) {
      SCOPED_TRACE(cpu::isa_name(isa).data());
      cpu::set_active_isa(isa);
      const std::vector<float> y = run_matmul(p, pool, y_stride);
      Worst vs;
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        for (int64_t r = 0; r < s.n_out; ++r) {
          const double tol = is_float(type) ? 2 * ref_tolerance(p, t, r) : same_algo_tolerance(p, t, r);
          vs.add(y[t * y_stride + r], y_scalar[t * y_stride + r], tol, t, r);
        }
        ASSERT_EQ(y[t * y_stride + s.n_out], -12345.0f) << "padding written";
      }
      EXPECT_TRUE(vs.ok()) << describe("vs scalar path", vs);
    }
  }
  cpu::set_active_isa(cpu::best_isa());
}

// The AVX-512 prefill tiles of the 32-element integer kinds come in two
// shapes (cpu::int8_tiles: 2 groups x 6 tokens, 3 x 4); both must give the
// same bits (each output adds its blocks in the same order) and stay within
// the reference's bound, on shapes that run full tiles, the 3-shape's pairs
// and single groups, partial token tiles and (from 16 tokens) the expanded
// copy of the nibble kinds.
TEST(MatmulIsa, Int8TileShapesGiveTheSameBits) {
  if (!cpu::isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 VNNI on this host";
  const cpu::Int8Tiles host_shape = cpu::int8_tiles();
  cpu::set_active_isa(Isa::kAvx512);
  ThreadPool pool1(1), pool2(2);
  uint32_t seed = 777;
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL}) {
    for (const Shape& s : {Shape{32 * 7, 117, 19}, Shape{32 * 12, 160, 17}, Shape{32 * 5, 80, 6}, Shape{32, 37, 9}}) {
      ++seed;
      SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_in=" << s.n_in << " n_out=" << s.n_out
                                        << " n_tokens=" << s.n_tokens << " seed=" << seed);
      const Problem p = make_problem(type, s, seed);
      const int64_t y_stride = s.n_out + 1;
      ThreadPool& pool = seed % 2 == 0 ? pool1 : pool2;
      cpu::set_int8_tiles(cpu::Int8Tiles::k2x6);
      const std::vector<float> y26 = run_matmul(p, pool, y_stride);
      cpu::set_int8_tiles(cpu::Int8Tiles::k3x4);
      const std::vector<float> y34 = run_matmul(p, pool, y_stride);
      Worst vs_ref;
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        for (int64_t r = 0; r < s.n_out; ++r) {
          ASSERT_EQ(y34[t * y_stride + r], y26[t * y_stride + r]) << "token " << t << " row " << r;
          const double want = ref::vec_dot(p.type, p.w.data() + r * dtype_row_bytes(p.type, s.n_in),
                                           p.x.data() + t * p.x_stride, s.n_in);
          vs_ref.add(y34[t * y_stride + r], want, ref_tolerance(p, t, r), t, r);
        }
        ASSERT_EQ(y34[t * y_stride + s.n_out], -12345.0f) << "padding written";
      }
      EXPECT_TRUE(vs_ref.ok()) << describe("3 x 4 vs ref::vec_dot", vs_ref);
    }
  }
  cpu::set_int8_tiles(host_shape);
  cpu::set_active_isa(cpu::best_isa());
}

TEST(MatmulIsa, DotF32EveryIsa) {
  std::mt19937 rng(77);
  std::normal_distribution<float> nd;
  for (int64_t n : {0, 1, 15, 16, 63, 64, 1001}) {
    std::vector<float> a(n), b(n);
    for (auto& v : a) v = nd(rng);
    for (auto& v : b) v = nd(rng);
    double want = 0, abs_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      want += static_cast<double>(a[i]) * b[i];
      abs_sum += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    for (Isa isa : cpu::supported_isas()) {
      cpu::set_active_isa(isa);
      EXPECT_NEAR(dot_f32(a.data(), b.data(), n), want, n * kU * abs_sum + 1e-30) << cpu::isa_name(isa) << " n=" << n;
    }
  }
  cpu::set_active_isa(cpu::best_isa());
}

// PAGODA_ISA's parsing (isa_from_env), and every supported ISA's table is
// complete and its own: a kernel left unregistered, or an ISA silently
// served by another's table, fails here.
TEST(MatmulIsa, DispatchHonorsRequestAndTablesAreComplete) {
  const Isa best = cpu::best_isa();
  EXPECT_EQ(cpu::isa_from_env(nullptr), best);
  EXPECT_EQ(cpu::isa_from_env(""), best);
  EXPECT_EQ(cpu::isa_from_env("neon"), best);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    EXPECT_EQ(cpu::isa_from_env(cpu::isa_name(isa).data()), cpu::isa_supported(isa) ? isa : best);
  const auto isas = cpu::supported_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::kScalar);
  EXPECT_EQ(isas.back(), best);
  const cpu::IsaKernels& scalar = cpu::kernels_for(Isa::kScalar);
  for (Isa isa : isas) {
    SCOPED_TRACE(cpu::isa_name(isa).data());
    cpu::set_active_isa(isa);
    EXPECT_EQ(cpu::active_isa(), isa);
    const cpu::IsaKernels& k = cpu::active_kernels();
    EXPECT_EQ(&k, &cpu::kernels_for(isa));
    EXPECT_TRUE(k.attention && k.dot_f32 && k.rms_norm && k.swiglu && k.add && k.quantize_q8_32 && k.quantize_q8_k);
    for (int kind = 0; kind < cpu::kNumWKinds; ++kind) {
      if (isa == Isa::kScalar) {
        EXPECT_NE(k.rows[kind], nullptr) << "kind " << kind;
        EXPECT_EQ(k.packed[kind], nullptr) << "kind " << kind;
      } else if (kind == static_cast<int>(cpu::WKind::kF16D) || kind == static_cast<int>(cpu::WKind::kBF16D)) {
        // The BF16 dot path is AVX-512 BF16's only (vdpbf16ps); elsewhere
        // the reference runs.
        EXPECT_EQ(k.packed[kind] != nullptr, isa == Isa::kAvx512 && cpu::host_has_bf16_dot()) << "kind " << kind;
      } else {
        EXPECT_NE(k.packed[kind], nullptr) << "kind " << kind;
      }
    }
    if (isa != Isa::kScalar) {
      EXPECT_NE(&k, &scalar);
      EXPECT_NE(k.attention, scalar.attention);
      EXPECT_NE(k.quantize_q8_32, scalar.quantize_q8_32);
    }
  }
  cpu::set_active_isa(best);
  std::printf("[ isa ] supported:");
  for (Isa isa : isas) std::printf(" %s", cpu::isa_name(isa).data());
  std::printf(" (best %s)\n", cpu::isa_name(best).data());
}

#if defined(__x86_64__) && defined(__GNUC__)
// The AVX-512 table runs wherever F/BW/VL/DQ/VNNI are (Ice Lake, Cascade
// Lake): AVX-512 BF16 is asked for by --bf16-dot's kernels only. (It was
// required for the whole table once, and such hosts ran AVX2.)
TEST(MatmulIsa, Avx512NeedsVnniNotBf16) {
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vnni");
  EXPECT_EQ(cpu::isa_supported(Isa::kAvx512), avx512);
  EXPECT_EQ(cpu::host_has_bf16_dot(), avx512 && __builtin_cpu_supports("avx512bf16"));
  if (!avx512) GTEST_SKIP() << "no AVX-512 VNNI on this host";
  EXPECT_EQ(cpu::best_isa(), Isa::kAvx512);
}
#endif

}  // namespace
}  // namespace pagoda::kernels
