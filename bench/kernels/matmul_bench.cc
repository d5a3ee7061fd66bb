// Matmul micro-benchmarks over the TinyLlama-1.1B linear-layer shapes, for
// every weight dtype, decode (1 token) and prefill (128 tokens), with the
// weights repacked as the model does (kernels/packed.h), on the ISA path
// matmul() picks (PAGODA_ISA overrides; the scalar ISA, or PAGODA_REPACK=0,
// runs the row-layout reference) and PAGODA_BENCH_THREADS threads (default
// 2). Reports weight GB/s (bytes of W read per call / time)
// and GFLOP/s (2 * n_in * n_out * n_tokens / time), and both as fractions
// of this machine's limits probed once at start-up with the same thread
// count (bench/machine_probe.h): "of_bw" = GB/s over the read bandwidth,
// "of_peak" = GFLOP/s over the int8 VNNI peak (integer kernels) or the f32
// FMA peak (F32/F16/BF16). (Google Benchmark prints rates with a "/s"
// suffix; these two are plain fractions.)
//
//   build-fast/kernels_bench --benchmark_filter='q4_0/2048x5632'
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/matmul.h"
#include "kernels/packed.h"
#include "kernels/ref/quant_ref.h"
#include "machine_probe.h"

namespace pagoda::kernels {
namespace {

int bench_threads() {
  const char* env = std::getenv("PAGODA_BENCH_THREADS");
  return env != nullptr ? std::max(1, std::atoi(env)) : 2;
}

ThreadPool& pool() {
  static ThreadPool p(bench_threads());
  return p;
}

struct Limits {
  double read_gbs = 0, fma_gflops = 0, vnni_gops = 0;
};

const Limits& limits() {
  static const Limits l = [] {
    Limits r;
    r.read_gbs = bench::probe_read_gbs(bench_threads(), 256);
    r.fma_gflops = bench::probe_fma_gflops(bench_threads(), 5'000'000);
    r.vnni_gops = bench::probe_vnni_gops(bench_threads(), 5'000'000);
    std::fprintf(stderr, "machine: read %.1f GB/s, f32 FMA %.1f GFLOP/s, int8 VNNI %.1f GOP/s (%d threads)\n",
                 r.read_gbs, r.fma_gflops, r.vnni_gops, bench_threads());
    return r;
  }();
  return l;
}

struct Matrix {
  std::vector<uint8_t> w;
  WeightView view;
  PackedWeights packed;
};

// Quantizes a few random rows and repeats them: the kernel streams the whole
// matrix either way, and K-quant quantization of 32000 rows would be slow.
// row_scaled: W8A8 (Q8_0 rows with one scale each, per-token activations).
std::unique_ptr<Matrix> make_matrix(DType type, int64_t n_in, int64_t n_out, bool row_scaled) {
  constexpr int kDistinct = 16;
  auto m = std::make_unique<Matrix>();
  const size_t rb = dtype_row_bytes(type, n_in);
  std::vector<uint8_t> seed_rows(rb * kDistinct);
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> row(n_in);
  for (int r = 0; r < kDistinct; ++r) {
    for (auto& v : row) v = nd(rng);
    if (row_scaled)
      ref::quantize_row_q8_0_shared_scale(row.data(), seed_rows.data() + r * rb, n_in);
    else
      ref::quantize_row(type, row.data(), seed_rows.data() + r * rb, n_in);
  }
  m->w.resize(rb * n_out);
  for (int64_t r = 0; r < n_out; ++r) std::copy_n(seed_rows.data() + (r % kDistinct) * rb, rb, m->w.data() + r * rb);
  m->view = WeightView{type, m->w.data(), n_in, n_out};
  m->view.row_scaled = row_scaled;
  return m;
}

void bm_matmul(benchmark::State& state, DType type, bool row_scaled, int64_t n_in, int64_t n_out, int64_t n_tokens) {
  const auto m = make_matrix(type, n_in, n_out, row_scaled);
  if (repack_enabled()) {
    WeightView* w = &m->view;
    m->packed.pack(&w, 1, pool());
  }
  std::vector<float> x(n_in * n_tokens), y(n_out * n_tokens);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  for (auto _ : state) {
    matmul(m->view, x.data(), n_in, n_tokens, y.data(), n_out, pool());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(m->view.row_bytes()) * n_out;
  const double flops = 2.0 * n_in * n_out * n_tokens;
  const Limits& lim = limits();
  const bool is_float = type == DType::kF32 || type == DType::kF16 || type == DType::kBF16;
  const double peak = is_float ? lim.fma_gflops : lim.vnni_gops;
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(n_tokens), benchmark::Counter::kIsIterationInvariantRate);
  if (lim.read_gbs > 0)
    state.counters["of_bw"] =
        benchmark::Counter(bytes / 1e9 / lim.read_gbs, benchmark::Counter::kIsIterationInvariantRate);
  if (peak > 0)
    state.counters["of_peak"] = benchmark::Counter(flops / 1e9 / peak, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())) + (m->view.packed ? " packed" : " rows") +
                 " t=" + std::to_string(bench_threads()));
}

struct Shape {
  int64_t n_in, n_out;
};
constexpr Shape kShapes[] = {{2048, 2048}, {2048, 256}, {2048, 5632}, {5632, 2048}, {2048, 32000}};
constexpr DType kTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,   DType::kQ4_0,
                            DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,   DType::kQ5_K,
                            DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL, DType::kIQ4_XS};

int register_all() {
  struct Kind {
    DType type;
    bool row_scaled;
    std::string name;
  };
  std::vector<Kind> kinds;
  for (DType type : kTypes) kinds.push_back({type, false, std::string(dtype_name(type))});
  kinds.push_back({DType::kQ8_0, true, "w8a8"});
  for (const Kind& k : kinds)
    for (int64_t n_tokens : {1, 128})
      for (Shape s : kShapes) {
        if (s.n_in % dtype_block_size(k.type) != 0) continue;
        const std::string name = std::string(n_tokens == 1 ? "decode/" : "prefill128/") + k.name + "/" +
                                 std::to_string(s.n_in) + "x" + std::to_string(s.n_out);
        benchmark::RegisterBenchmark(name.c_str(), bm_matmul, k.type, k.row_scaled, s.n_in, s.n_out, n_tokens)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
  // The bundled model's shapes (dim 256, feed-forward 640): small matrices
  // whose split over threads and register tiles leaves tails (issue 19);
  // 16, 32 and 48 rows: one 1-, 2- and 3-group tile (the cost per group of
  // each at 1 thread).
  constexpr Shape kSmall[] = {{256, 256}, {256, 512}, {256, 640}, {640, 256}, {256, 16}, {256, 32}, {256, 48}};
  for (DType type : {DType::kF32, DType::kQ8_0})
    for (int64_t n_tokens : {64, 512})
      for (Shape s : kSmall) {
        const std::string name = "small/prefill" + std::to_string(n_tokens) + "/" + std::string(dtype_name(type)) +
                                 "/" + std::to_string(s.n_in) + "x" + std::to_string(s.n_out);
        benchmark::RegisterBenchmark(name.c_str(), bm_matmul, type, false, s.n_in, s.n_out, n_tokens)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
  return 0;
}
const int kRegistered = register_all();

}  // namespace
}  // namespace pagoda::kernels

BENCHMARK_MAIN();
