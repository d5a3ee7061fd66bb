// Front end of the CPU matmul: picks the ISA table, quantizes activations
// once per call into a reusable per-calling-thread workspace, and splits
// output rows across the pool.
#include "kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::kernels {
namespace {

using cpu::ActFormat;
using cpu::IsaKernels;

// Grows, never shrinks: no heap traffic once warmed up.
struct ActWorkspace {
  std::vector<int8_t> qs;
  std::vector<float> d, s;
  std::vector<int16_t> bsums;
  std::vector<float> d16, s16;
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

const IsaKernels& table() { return cpu::kernels_for(cpu::active_isa()); }

// Quantizes every token's activations; tokens split across the pool.
cpu::ActQ8 quantize_acts(ActFormat fmt, const float* x, int64_t x_stride, int64_t n_tokens,
                         int64_t n_in, bool pair_scales, ThreadPool& pool) {
  ActWorkspace& ws = workspace();
  const int64_t block = fmt == ActFormat::kQ8_K ? cpu::kActBlockK : cpu::kActBlock32;
  const int64_t nb = n_in / block;
  int8_t* qs = ActWorkspace::fit(ws.qs, static_cast<size_t>(n_tokens * n_in));
  float* d = ActWorkspace::fit(ws.d, static_cast<size_t>(n_tokens * nb));
  float* s = nullptr;
  int16_t* bsums = nullptr;
  if (fmt == ActFormat::kQ8_K) {
    bsums = ActWorkspace::fit(ws.bsums, static_cast<size_t>(n_tokens * (n_in / cpu::kActSumGroup)));
  } else {
    s = ActWorkspace::fit(ws.s, static_cast<size_t>(n_tokens * nb));
  }
  const int64_t stride16 = nb / 2 * 16;
  float* d16 = nullptr;
  float* s16 = nullptr;
  if (fmt == ActFormat::kQ8_32 && pair_scales && stride16 > 0) {
    d16 = ActWorkspace::fit(ws.d16, static_cast<size_t>(n_tokens * stride16));
    s16 = ActWorkspace::fit(ws.s16, static_cast<size_t>(n_tokens * stride16));
  }
  // One captured pointer keeps the std::function in its small buffer (no
  // heap allocation per call).
  struct Job {
    ActFormat fmt;
    const float* x;
    int64_t x_stride, n_in, nb, n_tokens;
    int8_t* qs;
    float *d, *s;
    int16_t* bsums;
    float *d16, *s16;
    int64_t stride16;
    void operator()(int64_t t0, int64_t t1) const {
      for (int64_t t = t0; t < t1; ++t) {
        if (fmt == ActFormat::kQ8_K) {
          cpu::quantize_act_q8_k(x + t * x_stride, n_in, qs + t * n_in, d + t * nb,
                                 bsums + t * (n_in / cpu::kActSumGroup));
        } else {
          cpu::quantize_act_q8_32(x + t * x_stride, n_in, qs + t * n_in, d + t * nb, s + t * nb);
          if (d16 != nullptr)
            cpu::expand_act_pairs(d + t * nb, s + t * nb, nb, d16 + t * stride16, s16 + t * stride16);
        }
      }
    }
  };
  const Job job{fmt, x, x_stride, n_in, nb, n_tokens, qs, d, s, bsums, d16, s16, stride16};
  if (n_tokens == 1 || pool.num_threads() == 1) {
    job(0, n_tokens);
  } else {
    pool.run([&job](int ti, int nt) {
      const int64_t chunk = (job.n_tokens + nt - 1) / nt;
      const int64_t t0 = std::min<int64_t>(job.n_tokens, ti * chunk);
      job(t0, std::min<int64_t>(job.n_tokens, t0 + chunk));
    });
  }
  return {qs, d, s, bsums, d16, s16};
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) { return table().dot_f32(a, b, n); }

void get_row(const WeightView& w, int64_t row, float* dst) {
  const auto* base = static_cast<const uint8_t*>(w.data) + row * w.row_bytes();
  ref::dequantize_row(w.type, base, dst, w.n_in);
}

void matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tokens, float* y,
            int64_t y_stride, ThreadPool& pool) {
  if (n_tokens <= 0 || w.n_out <= 0) return;
  const int kind = cpu::wkind_of(w.type);
  PAGODA_CHECK(kind >= 0 && "matmul: unsupported weight dtype");
  const auto fmt = cpu::act_format_of(static_cast<cpu::WKind>(kind));
  cpu::MatmulArgs args;
  args.w = static_cast<const uint8_t*>(w.data);
  args.row_bytes = w.row_bytes();
  args.n_in = w.n_in;
  args.x = x;
  args.x_stride = x_stride;
  args.n_tokens = n_tokens;
  args.y = y;
  args.y_stride = y_stride;
  const IsaKernels& k = table();
  if (fmt != ActFormat::kFloat)
    args.act = quantize_acts(fmt, x, x_stride, n_tokens, w.n_in, k.wants_pair_scales, pool);
  const cpu::RowsFn rows = k.rows[kind];
  const int64_t n_out = w.n_out;
  if (pool.num_threads() == 1 || n_out < 2) {
    rows(args, 0, n_out);
    return;
  }
  // Contiguous row ranges, multiples of 4 rows so prefill tiles stay whole.
  // One captured pointer: the std::function stays allocation-free.
  struct Split {
    const cpu::MatmulArgs* args;
    cpu::RowsFn rows;
    int64_t n_out;
  };
  const Split split{&args, rows, n_out};
  pool.run([&split](int ti, int nt) {
    const int64_t chunk = (split.n_out + nt - 1) / nt;
    const int64_t aligned = (chunk + 3) / 4 * 4;
    const int64_t r0 = std::min<int64_t>(split.n_out, ti * aligned);
    const int64_t r1 = std::min<int64_t>(split.n_out, r0 + aligned);
    if (r0 < r1) split.rows(*split.args, r0, r1);
  });
}

void matmul_fused(const WeightView* const* ws, int n_weights, const float* x, int64_t x_stride, int64_t n_tokens,
                  float* const* ys, const int64_t* y_strides, ThreadPool& pool) {
  constexpr int kMaxWeights = 4;
  bool same = n_weights <= kMaxWeights;
  for (int i = 1; i < n_weights && same; ++i)
    same = ws[i]->type == ws[0]->type && ws[i]->n_in == ws[0]->n_in;
  if (!same || n_tokens <= 0 || pool.num_threads() == 1) {
    for (int i = 0; i < n_weights; ++i) matmul(*ws[i], x, x_stride, n_tokens, ys[i], y_strides[i], pool);
    return;
  }
  const int kind = cpu::wkind_of(ws[0]->type);
  PAGODA_CHECK(kind >= 0 && "matmul: unsupported weight dtype");
  const auto fmt = cpu::act_format_of(static_cast<cpu::WKind>(kind));
  const IsaKernels& k = table();
  cpu::ActQ8 act{};
  if (fmt != ActFormat::kFloat) act = quantize_acts(fmt, x, x_stride, n_tokens, ws[0]->n_in, k.wants_pair_scales, pool);
  struct Fused {
    cpu::MatmulArgs args[kMaxWeights];
    int64_t begin[kMaxWeights + 1];  // row offsets of each weight in the concatenation
    int n;
    cpu::RowsFn rows;
  } f{};
  f.n = n_weights;
  f.rows = k.rows[kind];
  f.begin[0] = 0;
  for (int i = 0; i < n_weights; ++i) {
    cpu::MatmulArgs& a = f.args[i];
    a.w = static_cast<const uint8_t*>(ws[i]->data);
    a.row_bytes = ws[i]->row_bytes();
    a.n_in = ws[i]->n_in;
    a.x = x;
    a.x_stride = x_stride;
    a.n_tokens = n_tokens;
    a.y = ys[i];
    a.y_stride = y_strides[i];
    a.act = act;
    f.begin[i + 1] = f.begin[i] + ws[i]->n_out;
  }
  pool.run([&f](int ti, int nt) {
    const int64_t total = f.begin[f.n];
    const int64_t chunk = ((total + nt - 1) / nt + 3) / 4 * 4;
    const int64_t r0 = std::min<int64_t>(total, ti * chunk);
    const int64_t r1 = std::min<int64_t>(total, r0 + chunk);
    for (int i = 0; i < f.n; ++i) {
      const int64_t b = std::max(r0, f.begin[i]), e = std::min(r1, f.begin[i + 1]);
      if (b < e) f.rows(f.args[i], b - f.begin[i], e - f.begin[i]);
    }
  });
}

}  // namespace pagoda::kernels
