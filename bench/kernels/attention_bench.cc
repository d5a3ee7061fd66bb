// Paged attention micro-benchmarks: decode (1 query), a speculative
// verification (2 and 5 queries) and a prefill chunk (64 queries) over a
// TinyLlama-shaped cache (32 query heads, 4 KV heads, head_dim 64, block
// 16, shuffled block table) at several context lengths, f32, f16, q8_0 and
// q4_0 K/V, one thread per KV head range like the model. Reports K/V GB/s
// read by decode (every cached key and value once).
//
// Runs the ISA matmul picks (PAGODA_ISA overrides).
//
//   build/kernels_bench --benchmark_filter=attention
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/isa.h"

namespace pagoda::kernels {
namespace {

constexpr int32_t kHeads = 32, kKvHeads = 4, kHeadDim = 64, kBlock = 16;

struct Cache {
  std::vector<uint8_t> k, v;
  std::vector<BlockId> table;
  PagedKVView view{};
};

// ctx random keys and values in `dtype`, in shuffled blocks.
Cache make_cache(int32_t ctx, DType dtype) {
  Cache c;
  const int32_t blocks = (ctx + kBlock - 1) / kBlock;
  c.view = PagedKVView{nullptr, nullptr, kBlock, kKvHeads, kHeadDim, dtype};
  const size_t rows = static_cast<size_t>(blocks) * kBlock * kKvHeads;
  // 64 bytes of slack: the rows start on a cache line, as in the engine's
  // mapped KV storage.
  c.k.resize(rows * c.view.row_bytes() + 64);
  c.v.resize(rows * c.view.row_bytes() + 64);
  auto line = [](std::vector<uint8_t>& b) {
    return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(b.data()) + 63) & ~uintptr_t{63});
  };
  uint8_t* kp = line(c.k);
  uint8_t* vp = line(c.v);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(kHeadDim);
  for (size_t r = 0; r < rows; ++r)
    for (uint8_t* buf : {kp, vp}) {
      for (float& e : x) e = u(rng);
      store_kv_row(dtype, x.data(), kHeadDim, buf + r * c.view.row_bytes());
    }
  for (int32_t b = 0; b < blocks; ++b) c.table.push_back(BlockId{b});
  std::shuffle(c.table.begin(), c.table.end(), rng);
  c.view.k = kp;
  c.view.v = vp;
  return c;
}

void bm_attention(benchmark::State& state, int32_t ctx, int32_t n_q, DType dtype) {
  Cache c = make_cache(ctx, dtype);
  const int64_t row = static_cast<int64_t>(kHeads) * kHeadDim;
  std::vector<float> q(n_q * row, 0.1f), out(n_q * row);
  std::vector<int32_t> pos(n_q);
  std::iota(pos.begin(), pos.end(), ctx - n_q);
  std::vector<float> scratch(paged_attention_scratch_floats(n_q, kHeads, kHeadDim, kBlock));
  for (auto _ : state) {
    paged_attention(c.view, c.table.data(), ctx, q.data(), row, pos.data(), n_q, kHeads, 0.125f, out.data(), row, 0,
                    kKvHeads, scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())));
  const double kv_bytes = 2.0 * ctx * kKvHeads * c.view.row_bytes();
  state.counters["KV_GB/s"] = benchmark::Counter(kv_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

int register_all() {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0})
    for (int32_t ctx : {512, 2048, 8192}) {
      const std::string t(dtype_name(dtype));
      benchmark::RegisterBenchmark(("attention/decode/" + t + "/ctx" + std::to_string(ctx)).c_str(), bm_attention, ctx,
                                   1, dtype)
          ->Unit(benchmark::kMicrosecond);
      if (ctx <= 2048) {
        // 2 and 5 queries (16 and 40 rows at group 8): a speculative
        // verification's shape.
        for (int32_t n_q : {2, 5})
          benchmark::RegisterBenchmark(
              ("attention/verify" + std::to_string(n_q) + "/" + t + "/ctx" + std::to_string(ctx)).c_str(), bm_attention,
              ctx, n_q, dtype)
              ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("attention/prefill64/" + t + "/ctx" + std::to_string(ctx)).c_str(), bm_attention,
                                     ctx, 64, dtype)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  return 0;
}
const int kRegistered = register_all();

}  // namespace
}  // namespace pagoda::kernels
