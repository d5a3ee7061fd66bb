// Front end of the CPU matmul: picks the ISA table, quantizes activations
// once per call into a reusable per-calling-thread workspace, and splits
// output rows across the pool.
#include "kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/pack.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::kernels {
namespace {

using cpu::ActFormat;
using cpu::IsaKernels;

// Grows, never shrinks: no heap traffic once warmed up.
struct ActWorkspace {
  std::vector<int8_t> qs;
  std::vector<float> d, s;
  std::vector<int32_t> qsum;
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
  int32_t* qsum = nullptr;
  int16_t* bsums = nullptr;
  if (fmt == ActFormat::kQ8_K) {
    bsums = ActWorkspace::fit(ws.bsums, static_cast<size_t>(n_tokens * (n_in / cpu::kActSumGroup)));
  } else {
    s = ActWorkspace::fit(ws.s, static_cast<size_t>(n_tokens * nb));
    qsum = ActWorkspace::fit(ws.qsum, static_cast<size_t>(n_tokens * nb));
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
    int32_t* qsum;
    int16_t* bsums;
    float *d16, *s16;
    int64_t stride16;
    void operator()(int64_t t0, int64_t t1) const {
      for (int64_t t = t0; t < t1; ++t) {
        if (fmt == ActFormat::kQ8_K) {
          cpu::quantize_act_q8_k(x + t * x_stride, n_in, qs + t * n_in, d + t * nb,
                                 bsums + t * (n_in / cpu::kActSumGroup));
        } else {
          cpu::quantize_act_q8_32(x + t * x_stride, n_in, qs + t * n_in, d + t * nb, s + t * nb, qsum + t * nb);
          if (d16 != nullptr)
            cpu::expand_act_pairs(d + t * nb, s + t * nb, nb, d16 + t * stride16, s16 + t * stride16);
        }
      }
    }
  };
  const Job job{fmt, x, x_stride, n_in, nb, n_tokens, qs, d, s, qsum, bsums, d16, s16, stride16};
  if (n_tokens == 1 || pool.num_threads() == 1) {
    job(0, n_tokens);
  } else {
    pool.run([&job](int ti, int nt) {
      const int64_t chunk = (job.n_tokens + nt - 1) / nt;
      const int64_t t0 = std::min<int64_t>(job.n_tokens, ti * chunk);
      job(t0, std::min<int64_t>(job.n_tokens, t0 + chunk));
    });
  }
  return {qs, d, s, bsums, d16, s16, qsum};
}

// Binds w (and its packed copy when the active table has a kernel for it).
cpu::MatmulArgs make_args(const WeightView& w, const IsaKernels& k, int kind) {
  cpu::MatmulArgs a;
  a.w = static_cast<const uint8_t*>(w.data);
  a.row_bytes = w.row_bytes();
  a.n_in = w.n_in;
  if (w.packed != nullptr && w.packed_rows > 0 && k.packed[kind] != nullptr) {
    a.wp = static_cast<const uint8_t*>(w.packed);
    a.group_bytes = cpu::packed_group_bytes(static_cast<cpu::WKind>(kind), w.n_in);
  }
  return a;
}

// Whether every row of w goes to the packed kernel (row splits are
// multiples of 16): then the row-layout tiles' lane-wise activation scales
// (ActQ8::d16 / s16) are not needed.
bool all_rows_packed(const WeightView& w, const IsaKernels& k, int kind) {
  return w.packed != nullptr && k.packed[kind] != nullptr && w.packed_rows == w.n_out &&
         w.n_out % cpu::kPackRows == 0;
}

// Rows [r0, r1): whole packed groups through the packed kernel, the rest
// (unaligned edges, rows past packed_rows) through the row kernel.
void run_rows(const IsaKernels& k, int kind, const cpu::MatmulArgs& a, int64_t packed_rows, int64_t r0,
              int64_t r1) {
  if (a.wp != nullptr) {
    constexpr int64_t G = cpu::kPackRows;
    const int64_t p0 = (r0 + G - 1) / G * G;
    const int64_t p1 = std::min(r1, packed_rows) / G * G;
    if (p0 < p1) {
      if (r0 < p0) k.rows[kind](a, r0, p0);
      k.packed[kind](a, p0, p1);
      if (p1 < r1) k.rows[kind](a, p1, r1);
      return;
    }
  }
  k.rows[kind](a, r0, r1);
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
  const IsaKernels& k = table();
  cpu::MatmulArgs args = make_args(w, k, kind);
  args.x = x;
  args.x_stride = x_stride;
  args.n_tokens = n_tokens;
  args.y = y;
  args.y_stride = y_stride;
  if (fmt != ActFormat::kFloat)
    args.act = quantize_acts(fmt, x, x_stride, n_tokens, w.n_in,
                             k.wants_pair_scales && !all_rows_packed(w, k, kind), pool);
  const int64_t n_out = w.n_out;
  if (pool.num_threads() == 1 || n_out < 2) {
    run_rows(k, kind, args, w.packed_rows, 0, n_out);
    return;
  }
  // Contiguous row ranges, multiples of 16 rows so packed groups and prefill
  // tiles stay whole. One captured pointer: the std::function stays
  // allocation-free.
  struct Split {
    const cpu::MatmulArgs* args;
    const IsaKernels* k;
    int kind;
    int64_t n_out, packed_rows;
  };
  const Split split{&args, &k, kind, n_out, w.packed_rows};
  pool.run([&split](int ti, int nt) {
    const int64_t chunk = (split.n_out + nt - 1) / nt;
    const int64_t aligned = (chunk + 15) / 16 * 16;
    const int64_t r0 = std::min<int64_t>(split.n_out, ti * aligned);
    const int64_t r1 = std::min<int64_t>(split.n_out, r0 + aligned);
    if (r0 < r1) run_rows(*split.k, split.kind, *split.args, split.packed_rows, r0, r1);
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
  // Weight offsets in the concatenation stay multiples of 16 when every
  // weight is fully packed (all_rows_packed requires n_out % 16 == 0).
  bool pair_scales = false;
  for (int i = 0; i < n_weights; ++i) pair_scales = pair_scales || !all_rows_packed(*ws[i], k, kind);
  if (fmt != ActFormat::kFloat)
    act = quantize_acts(fmt, x, x_stride, n_tokens, ws[0]->n_in, k.wants_pair_scales && pair_scales, pool);
  struct Fused {
    cpu::MatmulArgs args[kMaxWeights];
    int64_t packed_rows[kMaxWeights];
    int64_t begin[kMaxWeights + 1];  // row offsets of each weight in the concatenation
    int n;
    int kind;
    const IsaKernels* k;
  } f{};
  f.n = n_weights;
  f.kind = kind;
  f.k = &k;
  f.begin[0] = 0;
  for (int i = 0; i < n_weights; ++i) {
    cpu::MatmulArgs& a = f.args[i];
    a = make_args(*ws[i], k, kind);
    f.packed_rows[i] = ws[i]->packed_rows;
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
    const int64_t chunk = ((total + nt - 1) / nt + 15) / 16 * 16;
    const int64_t r0 = std::min<int64_t>(total, ti * chunk);
    const int64_t r1 = std::min<int64_t>(total, r0 + chunk);
    for (int i = 0; i < f.n; ++i) {
      const int64_t b = std::max(r0, f.begin[i]), e = std::min(r1, f.begin[i + 1]);
      if (b < e) run_rows(*f.k, f.kind, f.args[i], f.packed_rows[i], b - f.begin[i], e - f.begin[i]);
    }
  });
}

}  // namespace pagoda::kernels
