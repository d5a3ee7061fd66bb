// Measures this machine's limits so kernel results can be put as a fraction
// of them: read-only sum and STREAM-like triad bandwidth, peak f32 FMA and
// int8 VNNI (vpdpbusd) throughput, with T threads (default 2).
//
//   machine_limits [threads] [MiB per array, default 512]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

template <class Fn>
double best_seconds(int threads, int reps, Fn fn) {  // fn(thread, nthreads)
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    std::vector<std::thread> ts;
    const auto t0 = Clock::now();
    for (int i = 0; i < threads; ++i) ts.emplace_back(fn, i, threads);
    for (auto& t : ts) t.join();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

__attribute__((target("avx2,fma"))) void triad_avx2(float* a, const float* b, const float* c, size_t n) {
  const __m256 s = _mm256_set1_ps(3.0f);
  for (size_t i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(a + i, _mm256_fmadd_ps(s, _mm256_loadu_ps(c + i), _mm256_loadu_ps(b + i)));
}

constexpr int kAcc = 12;

// Returns FLOPs done: kAcc chains x 16 lanes x 2 x iters.
__attribute__((target("avx512f"))) double fma_peak_avx512(int64_t iters) {
  __m512 acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k));
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_fmadd_ps(acc[k], m, a);
  float sink = 0;
  for (int k = 0; k < kAcc; ++k) sink += _mm512_reduce_add_ps(acc[k]);
  if (sink == 12345.0f) std::puts("");
  return 2.0 * 16 * kAcc * static_cast<double>(iters);
}

__attribute__((target("avx2,fma"))) double fma_peak_avx2(int64_t iters) {
  __m256 acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm256_set1_ps(static_cast<float>(k));
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm256_fmadd_ps(acc[k], m, a);
  float out[8], sink = 0;
  for (int k = 0; k < kAcc; ++k) {
    _mm256_storeu_ps(out, acc[k]);
    sink += out[0];
  }
  if (sink == 12345.0f) std::puts("");
  return 2.0 * 8 * kAcc * static_cast<double>(iters);
}

// int8 ops: kAcc chains x 64 u8*s8 products x 2 (mul + add) x iters.
__attribute__((target("avx512f,avx512vnni"))) double vnni_peak(int64_t iters) {
  __m512i acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_set1_epi32(k);
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], u, s);
  int sink = 0;
  for (int k = 0; k < kAcc; ++k) sink += _mm512_reduce_add_epi32(acc[k]);
  if (sink == 12345) std::puts("");
  return 2.0 * 64 * kAcc * static_cast<double>(iters);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const size_t mib = argc > 2 ? static_cast<size_t>(std::max(16, std::atoi(argv[2]))) : 512;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "machine_limits needs AVX2+FMA\n");
    return 1;
  }
  const size_t n = mib * 1024 * 1024 / sizeof(float);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.5f);
  std::printf("threads %d, arrays %zu MiB\n", threads, mib);

  volatile float sink = 0;
  const double t_sum = best_seconds(threads, 5, [&](int i, int nt) {
    const size_t chunk = n / nt;
    sink = sink + sum_avx2(b.data() + i * chunk, chunk);
  });
  std::printf("read-only sum : %7.1f GB/s\n", n * sizeof(float) / t_sum / 1e9);

  const double t_triad = best_seconds(threads, 5, [&](int i, int nt) {
    const size_t chunk = n / nt;
    triad_avx2(a.data() + i * chunk, b.data() + i * chunk, c.data() + i * chunk, chunk);
  });
  std::printf("triad a=b+s*c : %7.1f GB/s (3 arrays counted; %.1f GB/s with write-allocate)\n",
              3.0 * n * sizeof(float) / t_triad / 1e9, 4.0 * n * sizeof(float) / t_triad / 1e9);

  const int64_t iters = 20'000'000;
  const bool has512 = __builtin_cpu_supports("avx512f");
  double flops = 0;
  const double t_fma = best_seconds(threads, 3, [&](int, int) {
    const double f = has512 ? fma_peak_avx512(iters) : fma_peak_avx2(iters);
    if (f > 0) flops = f;
  });
  std::printf("f32 FMA peak  : %7.1f GFLOP/s (%s)\n", flops * threads / t_fma / 1e9, has512 ? "zmm" : "ymm");

  if (has512 && __builtin_cpu_supports("avx512vnni")) {
    double ops = 0;
    const double t_vnni = best_seconds(threads, 3, [&](int, int) { ops = vnni_peak(iters); });
    std::printf("int8 VNNI peak: %7.1f GOP/s (vpdpbusd zmm)\n", ops * threads / t_vnni / 1e9);
  } else {
    std::printf("int8 VNNI peak: n/a (no AVX512-VNNI)\n");
  }
  return 0;
}
