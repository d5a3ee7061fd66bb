// Probes of this machine's limits shared by machine_limits and
// kernels_bench (so kernel results can be put as a fraction of them): read
// bandwidth on huge-page arrays with 4 streams per thread, peak f32 FMA and
// int8 VNNI (vpdpbusd) throughput. Header-only, x86-64 with AVX2+FMA.
#pragma once

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

namespace pagoda::bench {

using Clock = std::chrono::steady_clock;

// n floats set to v, in 2 MiB-aligned memory advised for huge pages.
inline float* huge_array(size_t n, float v) {
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
inline double best_seconds(int threads, int reps, Fn fn) {  // fn(thread, nthreads)
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
__attribute__((target("avx2"))) inline float sum_avx2(const float* p, size_t n) {
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

__attribute__((target("avx2,fma"))) inline void triad_avx2(float* a, const float* b, const float* c, size_t n) {
  const __m256 s = _mm256_set1_ps(3.0f);
  for (size_t i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(a + i, _mm256_fmadd_ps(s, _mm256_loadu_ps(c + i), _mm256_loadu_ps(b + i)));
}

inline constexpr int kAcc = 12;

// Returns FLOPs done: kAcc chains x 16 lanes x 2 x iters.
__attribute__((target("avx512f"))) inline double fma_peak_avx512(int64_t iters) {
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

__attribute__((target("avx2,fma"))) inline double fma_peak_avx2(int64_t iters) {
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

// One dot on each of 12 chains a0..a11 (named variables, so they stay in
// registers), a_k += u (u8) . s (s8), as one asm block: with
// _mm512_dpbusd_epi32 GCC copied each accumulator around its dot (two
// register moves per dot, which held the probe to ~2/3 of the machine's
// rate on Ice Lake); the packed tiles use asm too (cpu/simd_avx512.h).
#define PAGODA_DOTS12()                                                                                                \
  asm("vpdpbusd %13, %12, %0\n\tvpdpbusd %13, %12, %1\n\tvpdpbusd %13, %12, %2\n\t"                                    \
      "vpdpbusd %13, %12, %3\n\tvpdpbusd %13, %12, %4\n\tvpdpbusd %13, %12, %5\n\t"                                    \
      "vpdpbusd %13, %12, %6\n\tvpdpbusd %13, %12, %7\n\tvpdpbusd %13, %12, %8\n\t"                                    \
      "vpdpbusd %13, %12, %9\n\tvpdpbusd %13, %12, %10\n\tvpdpbusd %13, %12, %11"                                      \
      : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), \
        "+v"(a11)                                                                                                      \
      : "v"(u), "v"(s))

// int8 ops: kAcc chains x 64 u8*s8 products x 2 (mul + add) x iters.
__attribute__((target("avx512f,avx512vnni"))) inline double vnni_peak(int64_t iters) {
  static_assert(kAcc == 12, "PAGODA_DOTS12 names 12 chains");
  __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3),
          a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7),
          a8 = _mm512_set1_epi32(8), a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10),
          a11 = _mm512_set1_epi32(11);
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) PAGODA_DOTS12();
  const __m512i sum =
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                        _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7))),
                       _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
  if (_mm512_reduce_add_epi32(sum) == 12345) std::puts("");
  return 2.0 * 64 * kAcc * static_cast<double>(iters);
}

// The same 12 chains, each ending a 32-element block every 8 dots the way
// a Q8_0 / Q4_0 tile does (kernels/cpu/packed_tiles_inl.h): the block's
// int32 sum converted to float and added times its scale product, dw * dx
// (convert, multiply, FMA: three more vector ops per 8 dots, on the ports the
// dots use). Returns the int8 ops done, as vnni_peak counts them: the rate
// such a tile reaches at best.
__attribute__((target("avx512f,avx512vnni"))) inline double vnni_block_scaled(int64_t iters) {
  static_assert(kAcc == 12, "PAGODA_DOTS12 names 12 chains");
  __m512i a0 = _mm512_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0,
          a10 = a0, a11 = a0;
  __m512 f0 = _mm512_setzero_ps(), f1 = f0, f2 = f0, f3 = f0, f4 = f0, f5 = f0, f6 = f0, f7 = f0, f8 = f0, f9 = f0,
         f10 = f0, f11 = f0;
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  __m512 dw = _mm512_set1_ps(1e-3f);
  // One activation scale per chain (a tile's chains are rows x tokens: 12
  // different products dw * dx per block).
  static const float dx[kAcc] = {0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 1.0f, 1.1f, 1.2f, 1.3f, 1.4f, 1.5f, 1.6f};
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 8; ++j) PAGODA_DOTS12();
    asm volatile("" : "+v"(dw));  // a new block: its scales are not the last block's
#define PAGODA_BLOCK_END(k) \
  f##k = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, a##k), _mm512_mul_ps(dw, _mm512_set1_ps(dx[k])), f##k)
    PAGODA_BLOCK_END(0);
    PAGODA_BLOCK_END(1);
    PAGODA_BLOCK_END(2);
    PAGODA_BLOCK_END(3);
    PAGODA_BLOCK_END(4);
    PAGODA_BLOCK_END(5);
    PAGODA_BLOCK_END(6);
    PAGODA_BLOCK_END(7);
    PAGODA_BLOCK_END(8);
    PAGODA_BLOCK_END(9);
    PAGODA_BLOCK_END(10);
    PAGODA_BLOCK_END(11);
#undef PAGODA_BLOCK_END
  }
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(f0, f1), _mm512_add_ps(f2, f3)),
                                                 _mm512_add_ps(_mm512_add_ps(f4, f5), _mm512_add_ps(f6, f7))),
                                   _mm512_add_ps(_mm512_add_ps(f8, f9), _mm512_add_ps(f10, f11)));
  alignas(64) float out[16];
  _mm512_store_ps(out, sum);
  if (out[0] == 12345.0f) std::puts("");
  return 2.0 * 64 * kAcc * 8 * static_cast<double>(iters);
}

// Read-only GB/s of `threads` threads summing `mib` MiB (best of 5).
inline double probe_read_gbs(int threads, size_t mib) {
  const size_t n = mib * 1024 * 1024 / sizeof(float);
  float* b = huge_array(n, 2.0f);
  volatile float sink = 0;
  const double t = best_seconds(threads, 5, [&](int i, int nt) {
    const size_t chunk = n / nt;
    sink = sink + sum_avx2(b + i * chunk, chunk);
  });
  std::free(b);
  return n * sizeof(float) / t / 1e9;
}

// Peak f32 FMA GFLOP/s over `threads` threads (zmm when AVX-512F, else ymm).
inline double probe_fma_gflops(int threads, int64_t iters) {
  const bool has512 = __builtin_cpu_supports("avx512f");
  double flops = 0;
  const double t = best_seconds(threads, 3, [&](int, int) {
    const double f = has512 ? fma_peak_avx512(iters) : fma_peak_avx2(iters);
    if (f > 0) flops = f;
  });
  return flops * threads / t / 1e9;
}

// Peak int8 vpdpbusd GOP/s over `threads` threads; 0 without AVX512-VNNI.
inline double probe_vnni_gops(int threads, int64_t iters) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vnni")) return 0;
  double ops = 0;
  const double t = best_seconds(threads, 3, [&](int, int) { ops = vnni_peak(iters); });
  return ops * threads / t / 1e9;
}

// vnni_block_scaled's GOP/s over `threads` threads; 0 without AVX512-VNNI.
inline double probe_vnni_block_scaled_gops(int threads, int64_t iters) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vnni")) return 0;
  double ops = 0;
  const double t = best_seconds(threads, 3, [&](int, int) { ops = vnni_block_scaled(iters); });
  return ops * threads / t / 1e9;
}

}  // namespace pagoda::bench
