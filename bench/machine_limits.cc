// Measures this machine's limits so kernel results can be put as a fraction
// of them: read-only sum and STREAM-like triad bandwidth, peak f32 FMA and
// int8 VNNI (vpdpbusd) throughput, with T threads (default 2). The arrays
// are 2 MiB-aligned and advised for transparent huge pages, like the
// repacked weights (kernels/packed.h). Probes: bench/machine_probe.h.
//
//   machine_limits [threads] [MiB per array, default 512]
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "machine_probe.h"

using namespace pagoda::bench;

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const size_t mib = argc > 2 ? static_cast<size_t>(std::max(16, std::atoi(argv[2]))) : 512;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "machine_limits needs AVX2+FMA\n");
    return 1;
  }
  std::printf("threads %d, arrays %zu MiB\n", threads, mib);
  std::printf("read-only sum : %7.1f GB/s (4 streams per thread)\n", probe_read_gbs(threads, mib));

  const size_t n = mib * 1024 * 1024 / sizeof(float);
  float* a = huge_array(n, 1.0f);
  float* b = huge_array(n, 2.0f);
  float* c = huge_array(n, 0.5f);

  const double t_triad = best_seconds(threads, 5, [&](int i, int nt) {
    const size_t chunk = n / nt;
    triad_avx2(a + i * chunk, b + i * chunk, c + i * chunk, chunk);
  });
  std::printf("triad a=b+s*c : %7.1f GB/s (3 arrays counted; %.1f GB/s with write-allocate)\n",
              3.0 * n * sizeof(float) / t_triad / 1e9, 4.0 * n * sizeof(float) / t_triad / 1e9);

  const int64_t iters = 20'000'000;
  const bool has512 = __builtin_cpu_supports("avx512f");
  std::printf("f32 FMA peak  : %7.1f GFLOP/s (%s)\n", probe_fma_gflops(threads, iters), has512 ? "zmm" : "ymm");
  const double vnni = probe_vnni_gops(threads, iters);
  if (vnni > 0) {
    std::printf("int8 VNNI peak: %7.1f GOP/s (vpdpbusd zmm)\n", vnni);
    const double scaled = probe_vnni_block_scaled_gops(threads, iters / 8);
    std::printf("int8 VNNI, a float scale per 32: %7.1f GOP/s (%.0f%% of the peak; Q8_0/Q4_0 tiles' ceiling)\n", scaled,
                100.0 * scaled / vnni);
  } else {
    std::printf("int8 VNNI peak: n/a (no AVX512-VNNI)\n");
  }
  std::free(a);
  std::free(b);
  std::free(c);
  return 0;
}
