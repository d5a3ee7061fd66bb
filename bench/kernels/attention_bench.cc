// Paged attention micro-benchmarks: decode (1 query) and a prefill chunk
// over a TinyLlama-shaped cache (32 query heads, 4 KV heads, head_dim 64,
// block 16, shuffled block table) at several context lengths, f32 and f16
// K/V, one thread per KV head range like the model. Reports K/V GB/s read
// by decode (every cached key and value once).
//
// Runs the ISA matmul picks (PAGODA_ISA overrides).
//
//   build/kernels_bench --benchmark_filter=attention
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kernels/attention.h"
#include "kernels/cpu/isa.h"

namespace pagoda::kernels {
namespace {

constexpr int32_t kHeads = 32, kKvHeads = 4, kHeadDim = 64, kBlock = 16;

struct Cache {
  std::vector<float> k, v;
  std::vector<uint16_t> k16, v16;
  std::vector<BlockId> table;
  PagedKVView view{};
};

Cache make_cache(int32_t ctx, bool f16) {
  Cache c;
  const int32_t blocks = (ctx + kBlock - 1) / kBlock;
  const size_t stride = static_cast<size_t>(kKvHeads) * kBlock * kHeadDim;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  c.k.resize(stride * blocks);
  c.v.resize(stride * blocks);
  for (auto& x : c.k) x = u(rng);
  for (auto& x : c.v) x = u(rng);
  for (int32_t b = 0; b < blocks; ++b) c.table.push_back(BlockId{b});
  std::shuffle(c.table.begin(), c.table.end(), rng);
  c.view = PagedKVView{c.k.data(), c.v.data(), kBlock, kKvHeads, kHeadDim, stride};
  if (f16) {
    for (float x : c.k) c.k16.push_back(fp32_to_fp16(x));
    for (float x : c.v) c.v16.push_back(fp32_to_fp16(x));
    c.view = PagedKVView{c.k16.data(), c.v16.data(), kBlock, kKvHeads, kHeadDim, stride, true};
  }
  return c;
}

void bm_attention(benchmark::State& state, int32_t ctx, int32_t n_q, bool f16) {
  Cache c = make_cache(ctx, f16);
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
  const double kv_bytes = 2.0 * ctx * kKvHeads * kHeadDim * (f16 ? 2 : 4);
  state.counters["KV_GB/s"] = benchmark::Counter(kv_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

int register_all() {
  for (bool f16 : {false, true})
    for (int32_t ctx : {512, 2048, 8192}) {
      const std::string t = f16 ? "f16" : "f32";
      benchmark::RegisterBenchmark(("attention/decode/" + t + "/ctx" + std::to_string(ctx)).c_str(), bm_attention, ctx,
                                   1, f16)
          ->Unit(benchmark::kMicrosecond);
      if (ctx <= 2048)
        benchmark::RegisterBenchmark(("attention/prefill64/" + t + "/ctx" + std::to_string(ctx)).c_str(), bm_attention,
                                     ctx, 64, f16)
            ->Unit(benchmark::kMicrosecond);
    }
  return 0;
}
const int kRegistered = register_all();

}  // namespace
}  // namespace pagoda::kernels
