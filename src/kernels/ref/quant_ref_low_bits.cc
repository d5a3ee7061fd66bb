// Reference dequantize/quantize for Q3_K and IQ4_NL (layouts bit-exact with
// GGML; the quantizers are our own searches). All three have packed
// kernels of their own (kernels/cpu/pack.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/ref/blocks.h"
#include "kernels/ref/scale_search.h"

namespace pagoda::ref {
namespace {

float wt(const float* w, int i) { return w ? w[i] : 1.0f; }

// Index of the table value nearest to v (the table is sorted).
int nearest_iq4nl(float v) {
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < static_cast<float>(kIq4nlValues[mid]))
      hi = mid;
    else
      lo = mid;
  }
  return v - static_cast<float>(kIq4nlValues[lo]) <= static_cast<float>(kIq4nlValues[hi]) - v ? lo : hi;
}

}  // namespace

int clamp_round(float v, int lo, int hi) {
  if (!(v > static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return lo + static_cast<int>(v - static_cast<float>(lo) + 0.5f);
}

float fit_symmetric(const float* x, const float* w, int n, int lo, int hi) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  if (amax == 0) return 0;
  float best_s = max / static_cast<float>(lo);
  double best = -1;
  for (int sign = -1; sign <= 1; sign += 2) {
    const float top = sign < 0 ? static_cast<float>(-lo) : static_cast<float>(hi);
    for (int k = -6; k <= 6; ++k) {
      const float iscale = static_cast<float>(sign) * (top + 0.1f * static_cast<float>(k)) / max;
      double sxl = 0, sll = 0;
      for (int i = 0; i < n; ++i) {
        const int l = clamp_round(iscale * x[i], lo, hi);
        sxl += static_cast<double>(wt(w, i)) * x[i] * l;
        sll += static_cast<double>(wt(w, i)) * l * l;
      }
      if (sll <= 0) continue;
      const double score = sxl * sxl / sll;  // the error is sum w x^2 - score
      if (score > best) {
        best = score;
        best_s = static_cast<float>(sxl / sll);
      }
    }
  }
  return best_s;
}

void get_scales_q3_k(const BlockQ3_K& b, int8_t* scales) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? b.scales[j] & 0xF : b.scales[j - 8] >> 4;
    const int high = (b.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

void set_scales_q3_k(BlockQ3_K* b, const int8_t* scales) {
  std::memset(b->scales, 0, sizeof(b->scales));
  for (int j = 0; j < 16; ++j) {
    const int l = std::clamp(static_cast<int>(scales[j]), -32, 31) + 32;
    if (j < 8)
      b->scales[j] = static_cast<uint8_t>(l & 0xF);
    else
      b->scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
    b->scales[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
  }
}

void set_levels(BlockQ3_K* b, const int* levels) {
  std::memset(b->hmask, 0, sizeof(b->hmask));
  std::memset(b->qs, 0, sizeof(b->qs));
  for (int e = 0; e < kQK_K; ++e) {
    const int l = levels[e] & 7;
    if (l > 3) b->hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
    // Element e = 128 * half + 32 * k + i: qs[32 * half + i], bits 2k.
    const int half = e / 128, k = (e % 128) / 32, i = e % 32;
    b->qs[32 * half + i] |= static_cast<uint8_t>((l & 3) << (2 * k));
  }
}

void dequantize_block(const BlockQ3_K& b, float* dst) {
  const float d = fp16_to_fp32(b.d);
  int8_t sc[16];
  get_scales_q3_k(b, sc);
  for (int e = 0; e < kQK_K; ++e) {
    const int low = k_quant_2bits(b.qs, e);
    const int high = (b.hmask[e % 32] >> (e / 32)) & 1;
    dst[e] = d * static_cast<float>(sc[e / 16]) * static_cast<float>(low + 4 * high - 4);
  }
}

void quantize_block(const float* src, const float* w, BlockQ3_K* b) {
  float scales[16];
  float amax = 0, max_scale = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric(src + 16 * j, w ? w + 16 * j : nullptr, 16, -4, 3);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  std::memset(b, 0, sizeof(*b));
  int levels[kQK_K];
  int8_t sc[16] = {};
  if (amax == 0) {
    for (int& l : levels) l = 4;
    set_scales_q3_k(b, sc);
    set_levels(b, levels);
    return;
  }
  const float iscale = -32.0f / max_scale;
  b->d = fp32_to_fp16(1 / iscale);
  const float d = fp16_to_fp32(b->d);
  for (int j = 0; j < 16; ++j) {
    sc[j] = static_cast<int8_t>(clamp_round(iscale * scales[j], -32, 31));
    const float dj = d * static_cast<float>(sc[j]);
    for (int i = 0; i < 16; ++i) levels[16 * j + i] = (dj != 0 ? clamp_round(src[16 * j + i] / dj, -4, 3) : 0) + 4;
  }
  set_scales_q3_k(b, sc);
  set_levels(b, levels);
}

void dequantize_block(const BlockIQ4_NL& b, float* dst) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < kQK4_NL / 2; ++j) {
    dst[j] = d * static_cast<float>(kIq4nlValues[b.qs[j] & 0xF]);
    dst[j + kQK4_NL / 2] = d * static_cast<float>(kIq4nlValues[b.qs[j] >> 4]);
  }
}

namespace {

// The scale of a 32-group on IQ4_NL's grid: candidates map max near the
// table's ends, each refined by weighted least squares for its levels.
float fit_iq4nl(const float* x, const float* w) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  if (amax == 0) return 0;
  float best_d = max / -127.0f;
  double best = -1;
  for (int k = -10; k <= 10; ++k) {
    const float id = (-127.0f + 1.0f * static_cast<float>(k)) / max;
    double sxl = 0, sll = 0;
    for (int j = 0; j < 32; ++j) {
      const float l = kIq4nlValues[nearest_iq4nl(id * x[j])];
      sxl += static_cast<double>(wt(w, j)) * x[j] * l;
      sll += static_cast<double>(wt(w, j)) * l * l;
    }
    if (sll <= 0) continue;
    const double score = sxl * sxl / sll;
    if (score > best) {
      best = score;
      best_d = static_cast<float>(sxl / sll);
    }
  }
  return best_d;
}

// 32 elements' nibbles for scale d (element j low nibble of qs[j], j + 16 high).
void pack_iq4nl(const float* x, float d, uint8_t* qs) {
  const float id = d != 0 ? 1 / d : 0;
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = nearest_iq4nl(x[j] * id);
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}

}  // namespace

void quantize_block(const float* src, const float* w, BlockIQ4_NL* b) {
  b->d = fp32_to_fp16(fit_iq4nl(src, w));
  pack_iq4nl(src, fp16_to_fp32(b->d), b->qs);
}

void dequantize_block(const BlockIQ4_XS& b, float* dst) {
  const float d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const float dl = d * static_cast<float>(iq4_xs_scale(b, ib));
    const uint8_t* qs = b.qs + 16 * ib;
    for (int j = 0; j < 16; ++j) {
      dst[32 * ib + j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0xF]);
      dst[32 * ib + j + 16] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
    }
  }
}

void quantize_block(const float* src, const float* w, BlockIQ4_XS* b) {
  float scales[8];
  float amax = 0, max_scale = 0;
  for (int ib = 0; ib < 8; ++ib) {
    scales[ib] = fit_iq4nl(src + 32 * ib, w ? w + 32 * ib : nullptr);
    if (std::fabs(scales[ib]) > amax) {
      amax = std::fabs(scales[ib]);
      max_scale = scales[ib];
    }
  }
  std::memset(b, 0, sizeof(*b));
  // d * (ls - 32), ls in [0, 63]: the largest scale maps to -32.
  const float d = amax > 0 ? max_scale / -32.0f : 0.0f;
  b->d = fp32_to_fp16(d);
  const float dh = fp16_to_fp32(b->d);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = dh != 0 ? clamp_round(scales[ib] / dh, -32, 31) + 32 : 32;
    b->scales_l[ib / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (ib % 2)));
    b->scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
    pack_iq4nl(src + 32 * ib, dh * static_cast<float>(ls - 32), b->qs + 16 * ib);
  }
}

}  // namespace pagoda::ref
