// Measures this machine's limits so kernel results can be put as a fraction
// of them: read-only sum and STREAM-like triad bandwidth, peak f32 FMA and
// int8 VNNI (vpdpbusd) throughput, with T threads (default 2). The arrays
// are 2 MiB-aligned and advised for transparent huge pages, like the
// repacked weights (kernels/packed.h), so the bandwidth is the one the
// kernels can reach rather than one limited by 4 KiB TLB misses.
//
//   machine_limits [threads] [MiB per array, default 512]
#include <immintrin.h>
#include <sys/mman.h>

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

// n floats set to v, in 2 MiB-aligned memory advised for huge pages.
float* huge_array(size_t n, float v) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (n * sizeof(float) + kHuge - 1) / kHuge * kHuge;
  void* p = nullptr;
  if (posix_memalign(&p, kHuge, bytes) != 0) {
    std::fprintf(stderr, "out of memory\n");
    std::exit(1);
  }
  madvise(p, bytes, MADV_HUGEPAGE);
  auto* f = static_cast<float*>(p);
  std::fill(f, f + n, v);
  return f;
}

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

// Sums n floats as 4 interleaved streams (quarters of the range), the way
// the GEMV kernels read 4 weight groups at once: one stream per core does
// not keep enough misses in flight to reach the DRAM limit.
__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  const size_t q = n / 4 / 16 * 16;
  const float* s[4] = {p, p + q, p + 2 * q, p + 3 * q};
  __m256 a[8];
  for (auto& v : a) v = _mm256_setzero_ps();
  for (size_t i = 0; i + 16 <= q; i += 16)
    for (int k = 0; k < 4; ++k) {
      a[2 * k] = _mm256_add_ps(a[2 * k], _mm256_loadu_ps(s[k] + i));
      a[2 * k + 1] = _mm256_add_ps(a[2 * k + 1], _mm256_loadu_ps(s[k] + i + 8));
    }
  float out[8], total = 0;
  for (auto& v : a) {
    _mm256_storeu_ps(out, v);
    for (float x : out) total += x;
  }
  return total;
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
  float* a = huge_array(n, 1.0f);
  float* b = huge_array(n, 2.0f);
  float* c = huge_array(n, 0.5f);
  std::printf("threads %d, arrays %zu MiB\n", threads, mib);

  volatile float sink = 0;
  const double t_sum = best_seconds(threads, 5, [&](int i, int nt) {
    const size_t chunk = n / nt;
    sink = sink + sum_avx2(b + i * chunk, chunk);
  });
  std::printf("read-only sum : %7.1f GB/s (4 streams per thread)\n", n * sizeof(float) / t_sum / 1e9);

  const double t_triad = best_seconds(threads, 5, [&](int i, int nt) {
    const size_t chunk = n / nt;
    triad_avx2(a + i * chunk, b + i * chunk, c + i * chunk, chunk);
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
