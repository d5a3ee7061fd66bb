// Reference dequantize/quantize for the 32-element block types Q4_0, Q4_1,
// Q5_0, Q5_1 and Q8_0. Quantizers follow GGML's *_ref quantizers exactly
// (same rounding, same use of the unrounded fp32 scale), so our files match
// what llama.cpp writes byte for byte.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/ref/blocks.h"
#include "kernels/ref/scale_search.h"

namespace pagoda::ref {
namespace {

// GGML converts with a C cast to int8/uint8 (truncation); values are in
// range for finite inputs. Clamp first so NaN/huge inputs stay defined.
int trunc_clamped(float v, int hi) {
  if (!(v > 0.0f)) return 0;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// Signed value with the largest magnitude (first one on ties), as GGML.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = FLT_MAX;
  *mx = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    *mn = std::min(*mn, x[j]);
    *mx = std::max(*mx, x[j]);
  }
}

uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

void store_u32(uint32_t v, uint8_t* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// 5-bit values of a Q5_0/Q5_1 block, 0..31.
void unpack5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  const uint32_t qh = load_u32(qh_bytes);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

void pack5(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
  }
  store_u32(qh, qh_bytes);
}

// Importance-weighted quantizers (imatrix): the scale (and min) minimizing
// sum_j w_j (x_j - x'_j)^2 over a small grid of candidates, each refined by
// weighted least squares, then every element rounded with the fp16 scale it
// is decoded with.

// Symmetric blocks x ~= d * L, L in [lo, hi]: the shared scale search, then
// every element rounded with the fp16 scale. Returns d; levels are L - lo.
float fit_symmetric_levels(const float* x, const float* w, int n, int lo, int hi, int* levels) {
  const float d = fit_symmetric(x, w, n, lo, hi);
  const float dh = fp16_to_fp32(fp32_to_fp16(d));
  const float id = dh != 0.0f ? 1.0f / dh : 0.0f;
  for (int j = 0; j < n; ++j) levels[j] = clamp_round(x[j] * id, lo, hi) - lo;
  return d;
}

// Affine blocks x ~= d * L + m, L in [0, nmax], d >= 0.
void fit_affine_weighted(const float* x, const float* w, int n, int nmax, float* d_out, float* m_out, int* levels) {
  float mn, mx;
  min_max(x, n, &mn, &mx);
  auto err_of = [&](float d, float m) {
    double e = 0;
    for (int j = 0; j < n; ++j) {
      const int l = d > 0 ? std::clamp(static_cast<int>(std::nearbyint((x[j] - m) / d)), 0, nmax) : 0;
      const double r = d * l + m - x[j];
      e += w[j] * r * r;
    }
    return e;
  };
  float best_d = (mx - mn) / static_cast<float>(nmax), best_m = mn;
  double best = err_of(best_d, best_m);
  if (mx > mn) {
    auto solve = [&](const int* l) {
      double sw = 0, sl = 0, sll = 0, sx = 0, slx = 0;
      for (int j = 0; j < n; ++j) {
        sw += w[j];
        sl += w[j] * l[j];
        sll += static_cast<double>(w[j]) * l[j] * l[j];
        sx += w[j] * x[j];
        slx += static_cast<double>(w[j]) * l[j] * x[j];
      }
      const double det = sw * sll - sl * sl;
      if (det <= 0) return;
      const double d = (sw * slx - sl * sx) / det, m = (sll * sx - sl * slx) / det;
      if (!(d > 0)) return;
      const double e = err_of(static_cast<float>(d), static_cast<float>(m));
      if (e < best) {
        best = e;
        best_d = static_cast<float>(d);
        best_m = static_cast<float>(m);
      }
    };
    int l[32];
    for (int k = -8; k <= 8; ++k) {
      const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / (mx - mn);
      for (int j = 0; j < n; ++j) l[j] = std::clamp(static_cast<int>(std::nearbyint((x[j] - mn) * iscale)), 0, nmax);
      solve(l);
    }
    for (int it = 0; it < 3; ++it) {
      for (int j = 0; j < n; ++j)
        l[j] = std::clamp(static_cast<int>(std::nearbyint((x[j] - best_m) / best_d)), 0, nmax);
      solve(l);
    }
  }
  const float d = fp16_to_fp32(fp32_to_fp16(best_d)), m = fp16_to_fp32(fp32_to_fp16(best_m));
  *d_out = best_d;
  *m_out = best_m;
  for (int j = 0; j < n; ++j)
    levels[j] = d > 0 ? std::clamp(static_cast<int>(std::nearbyint((x[j] - m) / d)), 0, nmax) : 0;
}

void quantize_weighted(const float* x, const float* w, BlockQ4_0* b) {
  int l[kQK4_0];
  b->d = fp32_to_fp16(fit_symmetric_levels(x, w, kQK4_0, -8, 7, l));
  set_levels(b, l);
}

void quantize_weighted(const float* x, const float* w, BlockQ5_0* b) {
  int l[kQK5_0];
  b->d = fp32_to_fp16(fit_symmetric_levels(x, w, kQK5_0, -16, 15, l));
  set_levels(b, l);
}

void quantize_weighted(const float* x, const float* w, BlockQ8_0* b) {
  int l[kQK8_0];
  b->d = fp32_to_fp16(fit_symmetric_levels(x, w, kQK8_0, -127, 127, l));
  for (int j = 0; j < kQK8_0; ++j) l[j] += 1;  // levels are stored value + 128
  set_levels(b, l);
}

// Q4_1 (nmax 15) and Q5_1 (nmax 31): x ~= d * L + m.
template <class Block, int kNmax>
void quantize_affine_weighted(const float* x, const float* w, Block* b) {
  int l[32];
  float d, m;
  fit_affine_weighted(x, w, 32, kNmax, &d, &m, l);
  b->d = fp32_to_fp16(d);
  b->m = fp32_to_fp16(m);
  set_levels(b, l);
}

void quantize_weighted(const float* x, const float* w, BlockQ4_1* b) {
  quantize_affine_weighted<BlockQ4_1, 15>(x, w, b);
}
void quantize_weighted(const float* x, const float* w, BlockQ5_1* b) {
  quantize_affine_weighted<BlockQ5_1, 31>(x, w, b);
}

}  // namespace

void set_levels(BlockQ4_0* b, const int* levels) {
  for (int j = 0; j < kQK4_0 / 2; ++j)
    b->qs[j] = static_cast<uint8_t>((levels[j] & 0xF) | ((levels[j + kQK4_0 / 2] & 0xF) << 4));
}

void set_levels(BlockQ4_1* b, const int* levels) {
  for (int j = 0; j < kQK4_1 / 2; ++j)
    b->qs[j] = static_cast<uint8_t>((levels[j] & 0xF) | ((levels[j + kQK4_1 / 2] & 0xF) << 4));
}

void set_levels(BlockQ5_0* b, const int* levels) { pack5(levels, b->qs, b->qh); }
void set_levels(BlockQ5_1* b, const int* levels) { pack5(levels, b->qs, b->qh); }

void set_levels(BlockQ8_0* b, const int* levels) {
  for (int j = 0; j < kQK8_0; ++j) b->qs[j] = static_cast<int8_t>((levels[j] & 0xFF) - 128);
}

void dequantize_block(const BlockQ4_0& b, float* dst) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    dst[j] = static_cast<float>((b.qs[j] & 0xF) - 8) * d;
    dst[j + kQK4_0 / 2] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
  }
}

void dequantize_block(const BlockQ4_1& b, float* dst) {
  const float d = fp16_to_fp32(b.d);
  const float m = fp16_to_fp32(b.m);
  for (int j = 0; j < kQK4_1 / 2; ++j) {
    dst[j] = static_cast<float>(b.qs[j] & 0xF) * d + m;
    dst[j + kQK4_1 / 2] = static_cast<float>(b.qs[j] >> 4) * d + m;
  }
}

void dequantize_block(const BlockQ5_0& b, float* dst) {
  const float d = fp16_to_fp32(b.d);
  int q[kQK5_0];
  unpack5(b.qs, b.qh, q);
  for (int j = 0; j < kQK5_0; ++j) dst[j] = static_cast<float>(q[j] - 16) * d;
}

void dequantize_block(const BlockQ5_1& b, float* dst) {
  const float d = fp16_to_fp32(b.d);
  const float m = fp16_to_fp32(b.m);
  int q[kQK5_1];
  unpack5(b.qs, b.qh, q);
  for (int j = 0; j < kQK5_1; ++j) dst[j] = static_cast<float>(q[j]) * d + m;
}

void dequantize_block(const BlockQ8_0& b, float* dst) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < kQK8_0; ++j) dst[j] = static_cast<float>(b.qs[j]) * d;
}

void quantize_block(const float* src, const float* w, BlockQ4_0* b) {
  if (w) {
    quantize_weighted(src, w, b);
    return;
  }
  const float d = signed_absmax(src, kQK4_0) / -8;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = fp32_to_fp16(d);
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    const int lo = trunc_clamped(src[j] * id + 8.5f, 15);
    const int hi = trunc_clamped(src[j + kQK4_0 / 2] * id + 8.5f, 15);
    b->qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void quantize_block(const float* src, const float* w, BlockQ4_1* b) {
  if (w) {
    quantize_weighted(src, w, b);
    return;
  }
  float mn, mx;
  min_max(src, kQK4_1, &mn, &mx);
  const float d = (mx - mn) / 15;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = fp32_to_fp16(d);
  b->m = fp32_to_fp16(mn);
  for (int j = 0; j < kQK4_1 / 2; ++j) {
    const int lo = trunc_clamped((src[j] - mn) * id + 0.5f, 15);
    const int hi = trunc_clamped((src[j + kQK4_1 / 2] - mn) * id + 0.5f, 15);
    b->qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void quantize_block(const float* src, const float* w, BlockQ5_0* b) {
  if (w) {
    quantize_weighted(src, w, b);
    return;
  }
  const float d = signed_absmax(src, kQK5_0) / -16;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = fp32_to_fp16(d);
  int q[kQK5_0];
  for (int j = 0; j < kQK5_0; ++j) q[j] = trunc_clamped(src[j] * id + 16.5f, 31);
  pack5(q, b->qs, b->qh);
}

void quantize_block(const float* src, const float* w, BlockQ5_1* b) {
  if (w) {
    quantize_weighted(src, w, b);
    return;
  }
  float mn, mx;
  min_max(src, kQK5_1, &mn, &mx);
  const float d = (mx - mn) / 31;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = fp32_to_fp16(d);
  b->m = fp32_to_fp16(mn);
  int q[kQK5_1];
  for (int j = 0; j < kQK5_1; ++j) q[j] = trunc_clamped((src[j] - mn) * id + 0.5f, 31);
  pack5(q, b->qs, b->qh);
}

void quantize_block(const float* src, const float* w, BlockQ8_0* b) {
  if (w) {
    quantize_weighted(src, w, b);
    return;
  }
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(src[j]));
  const float d = amax / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = fp32_to_fp16(d);
  for (int j = 0; j < kQK8_0; ++j) {
    const float v = std::round(src[j] * id);
    b->qs[j] = std::isnan(v) ? 0 : static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
  }
}

void quantize_row_q8_0_shared_scale(const float* src, void* dst, int64_t n) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(src[i]));
  const uint16_t d16 = fp32_to_fp16(amax / 127.0f);
  const float d = fp16_to_fp32(d16);
  const float id = d > 0 ? 1.0f / d : 0.0f;
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    BlockQ8_0& blk = blocks[b];
    blk.d = d16;
    for (int j = 0; j < kQK8_0; ++j) {
      const float q = std::nearbyint(src[b * kQK8_0 + j] * id);
      blk.qs[j] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
}

}  // namespace pagoda::ref
