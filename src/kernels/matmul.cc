// Front end of the CPU matmul: picks the kernel (the active ISA's packed
// kernel when the weight has a packed copy, else the scalar row-layout
// reference), quantizes activations once per call into a reusable
// per-calling-thread workspace, and splits output rows across the pool in
// whole groups of 16.
#include "kernels/matmul.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/check.h"
#include "core/fp16.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/pack.h"
#include "kernels/packed.h"
#include "kernels/ref/blocks.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::kernels {
namespace {

using cpu::ActFormat;
using cpu::IsaKernels;
using cpu::kPackRows;

// Grows, never shrinks: no heap traffic once warmed up.
struct ActWorkspace {
  std::vector<int8_t> qs;
  std::vector<float> d, s;
  std::vector<int32_t> qsum;
  std::vector<int16_t> bsums;
  std::vector<uint16_t> bf16;
  template <class T>
  static T* fit(std::vector<T>& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};

ActWorkspace& workspace() {
  thread_local ActWorkspace ws;
  return ws;
}

// Quantizes every token's activations with the ISA's quantizer (the same
// bits on every ISA); tokens split across the pool.
cpu::ActQ8 quantize_acts(const IsaKernels& k, ActFormat fmt, const float* x, int64_t x_stride, int64_t n_tokens,
                         int64_t n_in, ThreadPool& pool) {
  ActWorkspace& ws = workspace();
  const int64_t nb =
      fmt == ActFormat::kQ8_Row ? 1 : n_in / (fmt == ActFormat::kQ8_K ? cpu::kActBlockK : cpu::kActBlock32);
  cpu::ActQ8 act;
  int8_t* qs = ActWorkspace::fit(ws.qs, static_cast<size_t>(n_tokens * n_in));
  float* d = ActWorkspace::fit(ws.d, static_cast<size_t>(n_tokens * nb));
  float* s = nullptr;
  int32_t* qsum = nullptr;
  int16_t* bsums = nullptr;
  if (fmt == ActFormat::kQ8_K) {
    bsums = ActWorkspace::fit(ws.bsums, static_cast<size_t>(n_tokens * (n_in / cpu::kActSumGroup)));
  } else if (fmt == ActFormat::kQ8_Row) {
    qsum = ActWorkspace::fit(ws.qsum, static_cast<size_t>(n_tokens));
  } else {
    s = ActWorkspace::fit(ws.s, static_cast<size_t>(n_tokens * nb));
    qsum = ActWorkspace::fit(ws.qsum, static_cast<size_t>(n_tokens * nb));
  }
  auto rows = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (fmt == ActFormat::kQ8_K) {
        k.quantize_q8_k(x + t * x_stride, n_in, qs + t * n_in, d + t * nb, bsums + t * (n_in / cpu::kActSumGroup));
      } else if (fmt == ActFormat::kQ8_Row) {
        k.quantize_q8_row(x + t * x_stride, n_in, qs + t * n_in, d + t, qsum + t);
      } else {
        k.quantize_q8_32(x + t * x_stride, n_in, qs + t * n_in, d + t * nb, s + t * nb, qsum + t * nb);
      }
    }
  };
  pool.parallel_for(n_tokens, 1, rows);
  act.qs = qs;
  act.d = d;
  act.s = s;
  act.bsums = bsums;
  act.qsum = qsum;
  return act;
}

// BF16 activations (ActFormat::kBF16): every token rounded to nearest even,
// padded to whole pairs.
cpu::ActQ8 bf16_acts(const float* x, int64_t x_stride, int64_t n_tokens, int64_t n_in, ThreadPool& pool) {
  const int64_t stride = (n_in + 1) / 2 * 2;
  uint16_t* out = ActWorkspace::fit(workspace().bf16, static_cast<size_t>(n_tokens * stride));
  pool.parallel_for(n_tokens, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      uint16_t* o = out + t * stride;
      for (int64_t i = 0; i < n_in; ++i) o[i] = fp32_to_bf16(x[t * x_stride + i]);
      if (stride > n_in) o[n_in] = 0;
    }
  });
  cpu::ActQ8 act;
  act.bf16 = out;
  act.bf16_stride = stride;
  return act;
}

cpu::ActQ8 prepare_acts(const IsaKernels& k, ActFormat fmt, const float* x, int64_t x_stride, int64_t n_tokens,
                        int64_t n_in, ThreadPool& pool) {
  if (fmt == ActFormat::kFloat) return {};
  if (fmt == ActFormat::kBF16) return bf16_acts(x, x_stride, n_tokens, n_in, pool);
  return quantize_acts(k, fmt, x, x_stride, n_tokens, n_in, pool);
}

// Below this many multiply-adds a matmul runs on the calling thread: waking
// and joining the pool costs more than a second thread saves (a decode step
// of a small draft model is made of such matmuls).
std::atomic<int64_t> g_min_parallel_macs{96 * 1024};

bool run_inline(ThreadPool& pool, int64_t rows, int64_t n_in, int64_t n_tokens) {
  return pool.num_threads() == 1 || rows * n_in * n_tokens < g_min_parallel_macs.load(std::memory_order_relaxed);
}

// The kernel for w's rows and the arguments it reads (everything but the
// activations and outputs).
struct Bound {
  cpu::RowsFn fn = nullptr;
  cpu::MatmulArgs args;
};

// Decode prefetches matrices from this size (decode_prefetch_on()).
constexpr int64_t kPrefetchMatrixBytes = int64_t{2} << 20;

// Whether the float tiles (F32/F16/BF16) prefetch in decode on this CPU.
// On Ice Lake the prefetch took TinyLlama F16 decode at 2 threads from 12.5
// to 14.5 tok/s; on Zen 5 (AMD family 26) it costs 9-14% at 1 and 2
// threads (2 threads, alternating processes: 26.9 vs 23.6 and 24.3 vs 21.3
// tok/s without / with; bench/RESULTS.md 2026-12-07), its hardware
// prefetchers keeping up alone. The quantized tiles keep theirs there
// (Q4_0 and Q4_K_M decode 20-27% faster with it).
bool float_tiles_prefetch() {
  static const bool on = !cpu::host_is_amd_family_at_least(0x1a);
  return on;
}

bool is_float_tile(int kind) {
  const auto k = static_cast<cpu::WKind>(kind);
  return k == cpu::WKind::kF32 || k == cpu::WKind::kF16 || k == cpu::WKind::kBF16;
}

// Rows per work chunk the threads claim (ThreadPool::parallel_chunks): up
// to kChunksPerThread chunks per thread so a thread slowed by its vCPU's
// neighbours hands work to the others instead of holding the join, but
// none under kMinChunkMacs multiply-adds (each claim moves a cache line
// between cores: a tiny model's decode matmuls stay one chunk per thread);
// each a whole number of the kernel's tiles (no single-group tails).
// Prefill matmuls under kSplitEvenMacs get one chunk per thread instead:
// there the tile rounding made uneven counts (the bundled model's 256-row
// matrices at 64 tokens: chunks of 6, 6 and 4 groups, one thread idle a
// third of the time), while a 3-group kernel (which has 2-group tiles too)
// runs any range of 2 or more groups in 3s and 2s.
constexpr int64_t kChunksPerThread = 12;
constexpr int64_t kMinChunkMacs = 1 << 20;
constexpr int64_t kSplitEvenMacs = 16 << 20;
int64_t chunk_rows(const IsaKernels& k, int kind, int64_t rows, int64_t n_in, int64_t n_tokens, int threads) {
  const int8_t* tg = k.packed_tile_groups[kind];
  const int64_t tile = std::max<int64_t>(1, n_tokens > 1 ? tg[0] : tg[1]);
  const int64_t macs = rows * n_in * n_tokens;
  if (n_tokens > 1 && macs < kSplitEvenMacs) {
    const int64_t groups = (rows + kPackRows - 1) / kPackRows;
    int64_t per = (groups + threads - 1) / threads;
    if (tile == 3) {
      per = std::max<int64_t>(per, 2);
      while (per < groups && groups % per == 1) ++per;  // no last chunk of one group
    } else {
      per = (per + tile - 1) / tile * tile;
    }
    return per * kPackRows;
  }
  const int64_t chunks = std::clamp<int64_t>(macs / kMinChunkMacs, threads, threads * kChunksPerThread);
  const int64_t want = (rows + chunks - 1) / chunks;
  return std::max<int64_t>(1, (want + tile * kPackRows - 1) / (tile * kPackRows)) * tile * kPackRows;
}

// PAGODA_REPACK=0 (kernels/packed.h): every matmul runs the scalar reference.
bool reference_only() {
  static const bool reference = !repack_enabled();
  return reference;
}

Bound bind(const WeightView& w, const IsaKernels& k, int kind) {
  Bound b;
  b.args.w = static_cast<const uint8_t*>(w.data);
  b.args.row_bytes = w.row_bytes();
  b.args.n_in = w.n_in;
  b.args.n_out = w.n_out;
  if (w.packed != nullptr && k.packed[kind] != nullptr) {
    b.fn = k.packed[kind];
    b.args.wp = static_cast<const uint8_t*>(w.packed);
    b.args.group_bytes = cpu::packed_group_bytes(static_cast<cpu::WKind>(kind), w.n_in);
    b.args.prefetch = decode_prefetch_on() && (!is_float_tile(kind) || float_tiles_prefetch()) &&
                      static_cast<int64_t>(b.args.group_bytes) * ((w.n_out + cpu::kPackRows - 1) / cpu::kPackRows) >=
                          kPrefetchMatrixBytes;
  } else if (k.unpacked[kind] != nullptr && !reference_only()) {
    b.fn = k.unpacked[kind];  // no packed copy (weights read in place): SIMD over the file layout
  } else {
    b.fn = cpu::kernels_scalar().rows[kind];  // the reference
  }
  return b;
}

}  // namespace

void set_min_parallel_macs(int64_t macs) { g_min_parallel_macs.store(macs, std::memory_order_relaxed); }

namespace {
std::atomic<int64_t> g_weight_bytes{0};
int64_t last_level_cache_bytes() {
  static const int64_t bytes = [] {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    const long c = l3 > 0 ? l3 : l2;
    return c > 0 ? static_cast<int64_t>(c) : int64_t{32} << 20;
  }();
  return bytes;
}
}  // namespace

void note_weight_bytes(int64_t bytes) { g_weight_bytes.fetch_add(bytes, std::memory_order_relaxed); }
bool decode_prefetch_on() { return g_weight_bytes.load(std::memory_order_relaxed) > last_level_cache_bytes(); }

float dot_f32(const float* a, const float* b, int64_t n) { return cpu::active_kernels().dot_f32(a, b, n); }

bool q8_0_rows_share_scale(const WeightView& w) {
  if (w.type != DType::kQ8_0 || w.n_in > cpu::kMaxRowScaledIn || w.n_in % 32 != 0 || w.data == nullptr) return false;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const size_t rb = w.row_bytes();
  const int64_t nb = w.n_in / 32;
  for (int64_t r = 0; r < w.n_out; ++r) {
    const uint8_t* row = base + r * rb;
    for (int64_t b = 1; b < nb; ++b)
      if (std::memcmp(row, row + b * sizeof(ref::BlockQ8_0), 2) != 0) return false;
  }
  return true;
}

void get_row(const WeightView& w, int64_t row, float* dst) {
  const auto* base = static_cast<const uint8_t*>(w.data) + row * w.row_bytes();
  ref::dequantize_row(w.type, base, dst, w.n_in);
}

void matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride,
            ThreadPool& pool) {
  if (n_tokens <= 0 || w.n_out <= 0) return;
  const int kind = cpu::wkind_of(w.type, w.row_scaled, w.bf16_dot);
  PAGODA_CHECK(kind >= 0 && "matmul: unsupported weight dtype");
  const auto fmt = cpu::act_format_of(static_cast<cpu::WKind>(kind));
  const IsaKernels& k = cpu::active_kernels();
  Bound b = bind(w, k, kind);
  b.args.x = x;
  b.args.x_stride = x_stride;
  b.args.n_tokens = n_tokens;
  b.args.y = y;
  b.args.y_stride = y_stride;
  b.args.act = prepare_acts(k, fmt, x, x_stride, n_tokens, w.n_in, pool);
  if (run_inline(pool, w.n_out, w.n_in, n_tokens)) {
    b.fn(b.args, 0, w.n_out);
    return;
  }
  // Whole groups of 16 rows per chunk; only the last chunk ends inside one.
  pool.parallel_chunks(w.n_out, chunk_rows(k, kind, w.n_out, w.n_in, n_tokens, pool.num_threads()),
                       [&b](int64_t r0, int64_t r1) { b.fn(b.args, r0, r1); });
}

void matmul_fused(const WeightView* const* ws, int n_weights, const float* x, int64_t x_stride, int64_t n_tokens,
                  float* const* ys, const int64_t* y_strides, ThreadPool& pool) {
  constexpr int kMaxWeights = 4;
  bool same = n_weights <= kMaxWeights;
  for (int i = 1; i < n_weights && same; ++i)
    same = ws[i]->type == ws[0]->type && ws[i]->row_scaled == ws[0]->row_scaled && ws[i]->bf16_dot == ws[0]->bf16_dot &&
           ws[i]->n_in == ws[0]->n_in;
  if (!same || n_tokens <= 0 || pool.num_threads() == 1) {
    for (int i = 0; i < n_weights; ++i) matmul(*ws[i], x, x_stride, n_tokens, ys[i], y_strides[i], pool);
    return;
  }
  const int kind = cpu::wkind_of(ws[0]->type, ws[0]->row_scaled, ws[0]->bf16_dot);
  PAGODA_CHECK(kind >= 0 && "matmul: unsupported weight dtype");
  const auto fmt = cpu::act_format_of(static_cast<cpu::WKind>(kind));
  const IsaKernels& k = cpu::active_kernels();
  const cpu::ActQ8 act = prepare_acts(k, fmt, x, x_stride, n_tokens, ws[0]->n_in, pool);
  // The weights' rows concatenated, each weight starting at a multiple of
  // 16 so a 16-aligned split never cuts one of its groups.
  Bound bound[kMaxWeights];
  int64_t begin[kMaxWeights + 1];
  begin[0] = 0;
  for (int i = 0; i < n_weights; ++i) {
    bound[i] = bind(*ws[i], k, kind);
    cpu::MatmulArgs& a = bound[i].args;
    a.x = x;
    a.x_stride = x_stride;
    a.n_tokens = n_tokens;
    a.y = ys[i];
    a.y_stride = y_strides[i];
    a.act = act;
    begin[i + 1] = begin[i] + (ws[i]->n_out + kPackRows - 1) / kPackRows * kPackRows;
  }
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int i = 0; i < n_weights; ++i) {
      const int64_t b = std::max(r0, begin[i]), e = std::min(r1, begin[i] + ws[i]->n_out);
      if (b < e) bound[i].fn(bound[i].args, b - begin[i], e - begin[i]);
    }
  };
  if (run_inline(pool, begin[n_weights], ws[0]->n_in, n_tokens)) {
    rows(0, begin[n_weights]);
    return;
  }
  pool.parallel_chunks(begin[n_weights],
                       chunk_rows(k, kind, begin[n_weights], ws[0]->n_in, n_tokens, pool.num_threads()), rows);
}

}  // namespace pagoda::kernels
