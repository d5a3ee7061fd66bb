// Reference dequantize/quantize for the K-quants Q2_K, Q4_K, Q5_K and Q6_K
// (256-element super-blocks). Dequantization is bit-exact with GGML. The
// quantizers are our own: a per-sub-block least-squares search over a few
// candidate scales, then the sub-block scales quantized against the
// super-block scale, then every element re-rounded with the scales it will
// actually be decoded with.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/fp16.h"
#include "kernels/ref/blocks.h"
#include "kernels/ref/scale_search.h"

namespace pagoda::ref {
namespace {

constexpr int kSubK4 = 32;  // Q4_K/Q5_K sub-block
constexpr int kSubK6 = 16;  // Q6_K sub-block

// Affine sub-block fit x ~= s * L - m with L in [0, nmax], s >= 0, m >= 0
// (GGML's K-quant min is subtracted and non-negative). Returns squared error.
struct AffineFit {
  float s = 0, m = 0, err = 0;
};

// w: per-element weights of the squared error (importance); null means 1.
float wt(const float* w, int i) { return w ? w[i] : 1.0f; }

float affine_error(const float* x, const float* w, int n, int nmax, float s, float m) {
  float err = 0;
  const float is = s > 0 ? 1.0f / s : 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_round((x[i] + m) * is, 0, nmax);
    const float e = s * static_cast<float>(l) - m - x[i];
    err += wt(w, i) * e * e;
  }
  return err;
}

// Weighted sums of a sub-block that do not depend on the levels.
struct XSums {
  double sw = 0, sx = 0, sxx = 0;
};

// The levels of one candidate, round((x - lo) * iscale) clamped to
// [0, nmax], with their weighted sums sum w L, sum w L^2, sum w L x, in
// 8-lane vectors (GCC/clang vector types; n is a multiple of 8: the
// 32-element sub-blocks). w: n weights.
struct LSums {
  double sl = 0, sll = 0, slx = 0;
};

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// The one hot loop of the K-quant search: built twice, picked at load time
// (an ifunc), so AVX2 hosts run it 8 lanes wide.
__attribute__((target_clones("avx2", "default")))
#endif
LSums level_sums(const float* x, const float* w, int n, int nmax, float lo, float iscale) {
  typedef float V8 __attribute__((vector_size(32)));
  typedef int I8 __attribute__((vector_size(32)));
  V8 sl = {}, sll = {}, slx = {};
  const float top = static_cast<float>(nmax);
  for (int i = 0; i < n; i += 8) {
    V8 xv, wv;
    std::memcpy(&xv, x + i, sizeof(xv));
    std::memcpy(&wv, w + i, sizeof(wv));
    V8 v = (xv - lo) * iscale;
    v = v > 0.0f ? v : 0.0f;  // NaN -> 0
    v = v < top ? v : top;
    const V8 l = __builtin_convertvector(__builtin_convertvector(v + 0.5f, I8), V8);
    const V8 wl = wv * l;
    sl += wl;
    sll += wl * l;
    slx += wl * xv;
  }
  LSums r;
  for (int k = 0; k < 8; ++k) {
    r.sl += sl[k];
    r.sll += sll[k];
    r.slx += slx[k];
  }
  return r;
}

// Weighted least-squares (s, m) for a candidate's levels, and its error
// sum w (s L - m - x)^2 in closed form from the sums (the levels as given,
// not re-rounded: as llama.cpp's search). False if degenerate.
bool solve_affine(const LSums& ls, const XSums& xs, float* s, float* m, float* err) {
  const double sl = ls.sl, sll = ls.sll, slx = ls.slx;
  const double det = xs.sw * sll - sl * sl;
  if (sll <= 0 || det <= 0) return false;
  double ss = (xs.sw * slx - sl * xs.sx) / det;
  double b = (sll * xs.sx - sl * slx) / det;  // offset: x ~= ss * L + b
  if (b > 0) {
    b = 0;
    ss = slx / sll;
  }
  if (!(ss > 0)) return false;
  *s = static_cast<float>(ss);
  *m = static_cast<float>(-b);
  const double e = ss * ss * sll + 2 * ss * b * sl + b * b * xs.sw - 2 * ss * slx - 2 * b * xs.sx + xs.sxx;
  *err = static_cast<float>(std::max(e, 0.0));
  return true;
}

AffineFit fit_affine(const float* x, const float* w, int n, int nmax) {
  float mn = 0, mx = x[0];
  XSums xs;
  for (int i = 0; i < n; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
    xs.sw += wt(w, i);
    xs.sx += static_cast<double>(wt(w, i)) * x[i];
    xs.sxx += static_cast<double>(wt(w, i)) * x[i] * x[i];
  }
  AffineFit best;
  best.m = -mn;
  if (!(mx > mn)) {
    best.err = affine_error(x, w, n, nmax, 0, best.m);
    return best;
  }
  best.s = (mx - mn) / static_cast<float>(nmax);
  best.err = affine_error(x, w, n, nmax, best.s, best.m);
  float ones[kSubK4];
  if (!w) std::fill(ones, ones + n, 1.0f);
  auto try_levels = [&](float lo, float iscale) {
    float fs, fm, err;
    if (!solve_affine(level_sums(x, w ? w : ones, n, nmax, lo, iscale), xs, &fs, &fm, &err)) return;
    if (err < best.err) best = {fs, fm, err};
  };
  for (int k = -8; k <= 8; ++k) try_levels(mn, (static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / (mx - mn));
  for (int iter = 0; iter < 3; ++iter) try_levels(-best.m, 1.0f / best.s);  // Lloyd-style refinement
  return best;
}

// Quantizes 8 sub-block (scale, min) pairs to 6 bits against fp16 d/dmin.
void quantize_scales_k4(const AffineFit* fits, uint16_t* d_out, uint16_t* dmin_out, uint8_t* sc, uint8_t* m) {
  float max_s = 0, max_m = 0;
  for (int j = 0; j < 8; ++j) {
    max_s = std::max(max_s, fits[j].s);
    max_m = std::max(max_m, fits[j].m);
  }
  *d_out = fp32_to_fp16(max_s / 63);
  *dmin_out = fp32_to_fp16(max_m / 63);
  const float d = fp16_to_fp32(*d_out);
  const float dmin = fp16_to_fp32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0 ? clamp_round(fits[j].s / d, 0, 63) : 0);
    m[j] = static_cast<uint8_t>(dmin > 0 ? clamp_round(fits[j].m / dmin, 0, 63) : 0);
  }
}

// Levels 0..nmax for a whole Q4_K/Q5_K super-block, given its encoded scales.
void levels_k4(const float* src, uint16_t d_h, uint16_t dmin_h, const uint8_t* sc, const uint8_t* m, int nmax,
               int* levels) {
  const float d = fp16_to_fp32(d_h);
  const float dmin = fp16_to_fp32(dmin_h);
  for (int j = 0; j < 8; ++j) {
    const float d1 = d * sc[j];
    const float m1 = dmin * m[j];
    const float id1 = d1 > 0 ? 1.0f / d1 : 0.0f;
    for (int i = 0; i < kSubK4; ++i) {
      const int e = j * kSubK4 + i;
      levels[e] = clamp_round((src[e] + m1) * id1, 0, nmax);
    }
  }
}

void encode_k4(const float* src, const float* w, int nmax, uint16_t* d, uint16_t* dmin, uint8_t* scales, int* levels) {
  AffineFit fits[8];
  for (int j = 0; j < 8; ++j) fits[j] = fit_affine(src + j * kSubK4, w ? w + j * kSubK4 : nullptr, kSubK4, nmax);
  uint8_t sc[8], m[8];
  quantize_scales_k4(fits, d, dmin, sc, m);
  pack_scale_min_k4(sc, m, scales);
  levels_k4(src, *d, *dmin, sc, m, nmax, levels);
}

// Symmetric sub-block fit x ~= s * L, L in [-32, 31]. Returns s (any sign).
// sum w x L and sum w L^2 for the levels L = round(iscale * x) clamped to
// [-32, 31] of a 16-element sub-block; vectorized like level_sums.
inline std::pair<double, double> symmetric6_sums(const float* x, const float* w, float iscale) {
  // GCC/clang vector types: 8 lanes, two vectors per 16-element sub-block
  // (SSE pairs on the baseline build, one ymm each in the AVX2 clone).
  typedef float V8 __attribute__((vector_size(32)));
  typedef int I8 __attribute__((vector_size(32)));
  V8 pxl = {}, pll = {};
  for (int i = 0; i < kSubK6; i += 8) {
    V8 xv, wv;
    std::memcpy(&xv, x + i, sizeof(xv));
    std::memcpy(&wv, w + i, sizeof(wv));
    V8 v = iscale * xv + 32.0f;  // level + 32, in [0, 63]
    v = v > 0.0f ? v : 0.0f;     // NaN -> 0
    v = v < 63.0f ? v : 63.0f;
    const V8 l = __builtin_convertvector(__builtin_convertvector(v + 0.5f, I8), V8) - 32.0f;
    const V8 wl = wv * l;
    pxl += wl * xv;
    pll += wl * l;
  }
  double sxl = 0, sll = 0;
  for (int k = 0; k < 8; ++k) {
    sxl += pxl[k];
    sll += pll[k];
  }
  return {sxl, sll};
}

// Built twice like level_sums (the candidate loop inlines symmetric6_sums).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
float fit_symmetric6(const float* x, const float* w) {
  float ones[kSubK6];
  if (!w) std::fill(ones, ones + kSubK6, 1.0f);
  float amax = 0, max = 0;
  for (int i = 0; i < kSubK6; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0) return 0;
  const float best_s = max / -32;
  double best_sxl = 0, best_sll = 0;
  // max maps to about -32 (the level with more room) or +31.
  for (int sign = -1; sign <= 1; sign += 2) {
    for (int k = -6; k <= 6; ++k) {
      const float top = sign < 0 ? 32.0f : 31.0f;
      const float iscale = static_cast<float>(sign) * (top + 0.15f * static_cast<float>(k)) / max;
      const auto [sxl, sll] = symmetric6_sums(x, w ? w : ones, iscale);
      if (sll <= 0) continue;
      // The error is sxx - sxl^2 / sll: the largest sxl^2 / sll wins,
      // compared without dividing.
      if (best_sll == 0 || sxl * sxl * best_sll > best_sxl * best_sxl * sll) {
        best_sxl = sxl;
        best_sll = sll;
      }
    }
  }
  return best_sll > 0 ? static_cast<float>(best_sxl / best_sll) : best_s;
}

}  // namespace

void pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t* q) {
  std::memset(q, 0, kKScaleBytes);
  for (int j = 0; j < 4; ++j) {
    q[j] = sc[j] & 63;
    q[j + 4] = m[j] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    q[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
    q[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
    q[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
  }
}

void dequantize_block(const BlockQ4_K& b, float* dst) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  const uint8_t* q = b.qs;
  for (int chunk = 0; chunk < 4; ++chunk, q += 32, dst += 64) {
    uint8_t sc, m;
    get_scale_min_k4(2 * chunk, b.scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    get_scale_min_k4(2 * chunk + 1, b.scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) dst[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) dst[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

void dequantize_block(const BlockQ5_K& b, float* dst) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  const uint8_t* q = b.qs;
  for (int chunk = 0; chunk < 4; ++chunk, q += 32, dst += 64) {
    const uint8_t u1 = static_cast<uint8_t>(1u << (2 * chunk));
    const uint8_t u2 = static_cast<uint8_t>(2u << (2 * chunk));
    uint8_t sc, m;
    get_scale_min_k4(2 * chunk, b.scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    get_scale_min_k4(2 * chunk + 1, b.scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) {
      const int lo = (q[l] & 0xF) + ((b.qh[l] & u1) ? 16 : 0);
      const int hi = (q[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0);
      dst[l] = d1 * static_cast<float>(lo) - m1;
      dst[l + 32] = d2 * static_cast<float>(hi) - m2;
    }
  }
}

void dequantize_block(const BlockQ6_K& b, float* dst) {
  const float d = fp16_to_fp32(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      dst[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      dst[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      dst[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      dst[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

void set_levels(BlockQ4_K* b, const int* levels) {
  for (int chunk = 0; chunk < 4; ++chunk) {
    const int* l = levels + 64 * chunk;
    for (int i = 0; i < 32; ++i) b->qs[32 * chunk + i] = static_cast<uint8_t>((l[i] & 0xF) | ((l[i + 32] & 0xF) << 4));
  }
}

void set_levels(BlockQ5_K* b, const int* levels) {
  std::memset(b->qh, 0, sizeof(b->qh));
  for (int chunk = 0; chunk < 4; ++chunk) {
    const int* l = levels + 64 * chunk;
    for (int i = 0; i < 32; ++i) {
      b->qs[32 * chunk + i] = static_cast<uint8_t>((l[i] & 0xF) | ((l[i + 32] & 0xF) << 4));
      b->qh[i] |=
          static_cast<uint8_t>((((l[i] >> 4) & 1) << (2 * chunk)) | (((l[i + 32] >> 4) & 1) << (2 * chunk + 1)));
    }
  }
}

void set_levels(BlockQ6_K* b, const int* levels) {
  for (int half = 0; half < 2; ++half) {
    const int* l = levels + 128 * half;
    uint8_t* ql = b->ql + 64 * half;
    uint8_t* qh = b->qh + 32 * half;
    for (int i = 0; i < 32; ++i) {
      const int q1 = l[i] & 63, q2 = l[i + 32] & 63, q3 = l[i + 64] & 63, q4 = l[i + 96] & 63;
      ql[i] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      ql[i + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
      qh[i] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
}

void quantize_block(const float* src, const float* w, BlockQ4_K* b) {
  int levels[kQK_K];
  encode_k4(src, w, 15, &b->d, &b->dmin, b->scales, levels);
  set_levels(b, levels);
}

void quantize_block(const float* src, const float* w, BlockQ5_K* b) {
  int levels[kQK_K];
  encode_k4(src, w, 31, &b->d, &b->dmin, b->scales, levels);
  set_levels(b, levels);
}

void quantize_block(const float* src, const float* w, BlockQ6_K* b) {
  float scales[kQK_K / kSubK6];
  float amax = 0, max_scale = 0;
  for (int j = 0; j < kQK_K / kSubK6; ++j) {
    scales[j] = fit_symmetric6(src + j * kSubK6, w ? w + j * kSubK6 : nullptr);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  std::memset(b, 0, sizeof(*b));
  if (amax == 0) return;
  const float iscale = -128.0f / max_scale;
  b->d = fp32_to_fp16(1 / iscale);
  const float d = fp16_to_fp32(b->d);
  int levels[kQK_K];
  for (int j = 0; j < kQK_K / kSubK6; ++j) {
    b->scales[j] = static_cast<int8_t>(clamp_round(iscale * scales[j], -128, 127));
    const float dj = d * b->scales[j];
    const float idj = dj != 0 ? 1.0f / dj : 0.0f;
    for (int i = 0; i < kSubK6; ++i) {
      const int e = j * kSubK6 + i;
      levels[e] = clamp_round(src[e] * idj, -32, 31) + 32;
    }
  }
  set_levels(b, levels);
}

void dequantize_block(const BlockQ2_K& b, float* dst) {
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int e = 0; e < kQK_K; ++e) {
    const int q = k_quant_2bits(b.qs, e);
    const uint8_t sc = b.scales[e / 16];
    dst[e] = d * static_cast<float>(sc & 0xF) * static_cast<float>(q) - dmin * static_cast<float>(sc >> 4);
  }
}

void set_levels(BlockQ2_K* b, const int* levels) {
  std::memset(b->qs, 0, sizeof(b->qs));
  for (int e = 0; e < kQK_K; ++e) {
    const int n = e / 128, k = (e % 128) / 32, l = e % 32;
    b->qs[32 * n + l] |= static_cast<uint8_t>((levels[e] & 3) << (2 * k));
  }
}

// Each 16-element sub-block fitted as s * L - m (L in 0..3), then the 16
// (s, m) pairs quantized to 4 bits against fp16 d / dmin, then every
// element re-rounded with the scales it will be decoded with. With only
// four levels the error weights matter most: |x| (large values kept best,
// as GGML's Q2_K), times the importance and sqrt(sigma^2 + x^2) with one.
void quantize_block(const float* src, const float* w, BlockQ2_K* b) {
  constexpr int kSub = 16;
  float ew[kQK_K];
  double sum_x2 = 0;
  for (int e = 0; e < kQK_K; ++e) sum_x2 += static_cast<double>(src[e]) * src[e];
  const float sigma2 = static_cast<float>(sum_x2 / kQK_K);
  for (int e = 0; e < kQK_K; ++e) ew[e] = w ? w[e] * std::sqrt(sigma2 + src[e] * src[e]) : std::fabs(src[e]);
  AffineFit fits[kQK_K / kSub];
  float max_s = 0, max_m = 0;
  for (int j = 0; j < kQK_K / kSub; ++j) {
    fits[j] = fit_affine(src + j * kSub, ew + j * kSub, kSub, 3);
    max_s = std::max(max_s, fits[j].s);
    max_m = std::max(max_m, fits[j].m);
  }
  b->d = fp32_to_fp16(max_s / 15);
  b->dmin = fp32_to_fp16(max_m / 15);
  const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
  int levels[kQK_K];
  for (int j = 0; j < kQK_K / kSub; ++j) {
    const int sc = d > 0 ? clamp_round(fits[j].s / d, 0, 15) : 0;
    const int m = dmin > 0 ? clamp_round(fits[j].m / dmin, 0, 15) : 0;
    b->scales[j] = static_cast<uint8_t>(sc | (m << 4));
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    const float id1 = d1 > 0 ? 1.0f / d1 : 0.0f;
    for (int i = 0; i < kSub; ++i) levels[j * kSub + i] = clamp_round((src[j * kSub + i] + m1) * id1, 0, 3);
  }
  set_levels(b, levels);
}

}  // namespace pagoda::ref
