// Internal to attention.cc: the two inner loops of paged attention per
// instruction set. Each Ops struct provides
//   dot_keys(q, keys, n, hd, s):        s[j] = dot(q, keys[j]) for j < n
//   weighted_sum(acc, c, p, vals, n, hd): acc = c * acc + sum_j p[j] * vals[j]
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/fp16.h"

#if defined(__AVX2__) && defined(__FMA__)
// GCC 12 reports false "may be used uninitialized" warnings inside the
// intrinsic headers' cast/extract helpers (their deliberate undefined values).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace pagoda::kernels::attention_internal {

// K/V elements: float, or IEEE half bits (uint16_t).
inline float to_f(float x) { return x; }
inline float to_f(uint16_t h) { return fp16_to_fp32(h); }

// Ops without the transposed-key score path (attention.cc never calls
// these when kHasQkTile is false; they only let the template compile).
struct NoQkTile {
  static constexpr bool kHasQkTile = false;
  static void qk_tile(const float* const*, int32_t, const float*, int32_t, float, float*) {}
  template <class E>
  static void transpose_keys(const E* const*, int32_t, int32_t, float*) {}
  static float row_max(const float*, int32_t) { return 0; }
  static float exp_sum(const float*, int32_t, float, float*) { return 0; }
};

struct ScalarOps : NoQkTile {
  static constexpr const char* kName = "scalar";
  template <class E>
  static void dot_keys(const float* q, const E* const* keys, int32_t n, int32_t hd, float* s) {
    for (int32_t j = 0; j < n; ++j) {
      float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      int32_t d = 0;
      for (; d + 4 <= hd; d += 4) {
        a0 += q[d] * to_f(keys[j][d]);
        a1 += q[d + 1] * to_f(keys[j][d + 1]);
        a2 += q[d + 2] * to_f(keys[j][d + 2]);
        a3 += q[d + 3] * to_f(keys[j][d + 3]);
      }
      for (; d < hd; ++d) a0 += q[d] * to_f(keys[j][d]);
      s[j] = (a0 + a1) + (a2 + a3);
    }
  }
  template <class E>
  static void weighted_sum(float* acc, float c, const float* p, const E* const* vals, int32_t n, int32_t hd) {
    for (int32_t d = 0; d < hd; ++d) {
      float a = acc[d] * c;
      for (int32_t j = 0; j < n; ++j) a += p[j] * to_f(vals[j][d]);
      acc[d] = a;
    }
  }
};

// SIMD versions are written once over a vector-traits type V:
//   V::kWidth lanes; load/store of a full vector; load_part/store_part of the
//   first `rem` lanes (0 < rem <= kWidth); fma, mul, set1, zero, hsum.
template <class V>
struct SimdOps {
  using Vec = typename V::Vec;
  static constexpr int32_t kW = V::kWidth;

  // s[j..j+kKeys) for kKeys keys at once: independent FMA chains, q loaded once.
  template <int kKeys, class E>
  static void dot_block(const float* q, const E* const* keys, int32_t hd, float* s) {
    Vec a[kKeys];
    for (int k = 0; k < kKeys; ++k) a[k] = V::zero();
    int32_t d = 0;
    for (; d + kW <= hd; d += kW) {
      const Vec x = V::load(q + d);
      for (int k = 0; k < kKeys; ++k) a[k] = V::fma(x, V::load(keys[k] + d), a[k]);
    }
    if (d < hd) {
      const Vec x = V::load_part(q + d, hd - d);
      for (int k = 0; k < kKeys; ++k) a[k] = V::fma(x, V::load_part(keys[k] + d, hd - d), a[k]);
    }
    for (int k = 0; k < kKeys; ++k) s[k] = V::hsum(a[k]);
  }
  template <class E>
  static void dot_keys(const float* q, const E* const* keys, int32_t n, int32_t hd, float* s) {
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) dot_block<8, E>(q, keys + j, hd, s + j);
    if (j + 4 <= n) {
      dot_block<4, E>(q, keys + j, hd, s + j);
      j += 4;
    }
    for (; j < n; ++j) dot_block<1, E>(q, keys + j, hd, s + j);
  }

  // acc[d0 .. d0 + kChunks*kW) (the last chunk holding `last` lanes) kept in
  // registers across all n keys, so the FMAs are independent.
  template <int kChunks, class E>
  static void weighted_block(float* acc, Vec vc, const float* p, const E* const* vals, int32_t n, int32_t d0,
                             int32_t last) {
    constexpr int kFull = kChunks - 1;
    const bool partial = last < kW;
    Vec a[kChunks];
    for (int c = 0; c < kFull; ++c) a[c] = V::mul(V::load(acc + d0 + c * kW), vc);
    a[kFull] = V::mul(partial ? V::load_part(acc + d0 + kFull * kW, last) : V::load(acc + d0 + kFull * kW), vc);
    for (int32_t j = 0; j < n; ++j) {
      const Vec pj = V::set1(p[j]);
      const E* v = vals[j] + d0;
      for (int c = 0; c < kFull; ++c) a[c] = V::fma(pj, V::load(v + c * kW), a[c]);
      a[kFull] = V::fma(pj, partial ? V::load_part(v + kFull * kW, last) : V::load(v + kFull * kW), a[kFull]);
    }
    for (int c = 0; c < kFull; ++c) V::store(acc + d0 + c * kW, a[c]);
    if (partial) {
      V::store_part(acc + d0 + kFull * kW, a[kFull], last);
    } else {
      V::store(acc + d0 + kFull * kW, a[kFull]);
    }
  }
  template <class E>
  static void weighted_sum(float* acc, float c, const float* p, const E* const* vals, int32_t n, int32_t hd) {
    const Vec vc = V::set1(c);
    for (int32_t d0 = 0; d0 < hd; d0 += 8 * kW) {
      const int32_t rem = std::min(hd - d0, 8 * kW);
      const int32_t chunks = (rem + kW - 1) / kW;
      const int32_t last = rem - (chunks - 1) * kW;
      switch (chunks) {
        case 1: weighted_block<1, E>(acc, vc, p, vals, n, d0, last); break;
        case 2: weighted_block<2, E>(acc, vc, p, vals, n, d0, last); break;
        case 3: weighted_block<3, E>(acc, vc, p, vals, n, d0, last); break;
        case 4: weighted_block<4, E>(acc, vc, p, vals, n, d0, last); break;
        case 5: weighted_block<5, E>(acc, vc, p, vals, n, d0, last); break;
        case 6: weighted_block<6, E>(acc, vc, p, vals, n, d0, last); break;
        case 7: weighted_block<7, E>(acc, vc, p, vals, n, d0, last); break;
        default: weighted_block<8, E>(acc, vc, p, vals, n, d0, last); break;
      }
    }
  }
};

#if defined(__AVX2__) && defined(__FMA__)
struct Avx2Vec {
  using Vec = __m256;
  static constexpr int32_t kWidth = 8;
  static __m256i mask(int32_t rem) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec load_part(const float* p, int32_t rem) { return _mm256_maskload_ps(p, mask(rem)); }
  static Vec load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static Vec load_part(const uint16_t* p, int32_t rem) {
    uint16_t tmp[8] = {};
    std::copy_n(p, rem, tmp);
    return load(tmp);
  }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static void store_part(float* p, Vec v, int32_t rem) { _mm256_maskstore_ps(p, mask(rem), v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec set1(float x) { return _mm256_set1_ps(x); }
  static Vec zero() { return _mm256_setzero_ps(); }
  static float hsum(Vec v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};
struct Avx2Ops : SimdOps<Avx2Vec>, NoQkTile {};
#endif

#if defined(__AVX512F__)
struct Avx512Vec {
  using Vec = __m512;
  static constexpr int32_t kWidth = 16;
  static __mmask16 mask(int32_t rem) { return static_cast<__mmask16>((1u << rem) - 1u); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec load_part(const float* p, int32_t rem) { return _mm512_maskz_loadu_ps(mask(rem), p); }
  static Vec load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Vec load_part(const uint16_t* p, int32_t rem) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(rem), p));
#else
    uint16_t tmp[16] = {};
    std::copy_n(p, rem, tmp);
    return load(tmp);
#endif
  }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static void store_part(float* p, Vec v, int32_t rem) { _mm512_mask_storeu_ps(p, mask(rem), v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec set1(float x) { return _mm512_set1_ps(x); }
  static Vec zero() { return _mm512_setzero_ps(); }
  // Not _mm512_reduce_add_ps: GCC 12 warns about an uninitialized temporary in it.
  static float hsum(Vec v) {
    __m512 t = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    __m128 s = _mm_add_ps(_mm512_castps512_ps128(t), _mm256_extractf128_ps(_mm512_castps512_ps256(t), 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};
struct Avx512Ops : SimdOps<Avx512Vec> {
  // The prefill path of attention.cc: a key tile of 32 is transposed to
  // kt[head_dim][32] once, then scores of many query rows come from it with
  // keys in lanes (no horizontal sums); max and exp-sum run 16 lanes wide.
  static constexpr bool kHasQkTile = true;

  static float hmax(__m512 v) {
    __m512 t = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm512_max_ps(t, _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
    t = _mm512_max_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm512_max_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_cvtss_f32(t);
  }
  // exp as kernels/fast_exp.h, 16 lanes (2^n applied with vscalefps).
  static __m512 exp16(__m512 x) {
    const __m512 xc = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.3f)), _mm512_set1_ps(-87.3f));
    const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
    __m512 f = _mm512_fnmadd_ps(r, _mm512_set1_ps(0.693145751953125f), xc);
    f = _mm512_fnmadd_ps(r, _mm512_set1_ps(1.428606765330187e-6f), f);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~under), _mm512_scalef_ps(p, r));
  }
  // max of s[0..n), n in 1..32
  static float row_max(const float* s, int32_t n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 m = _mm512_mask_loadu_ps(ninf, Avx512Vec::mask(std::min(n, 16)), s);
    if (n > 16) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(ninf, Avx512Vec::mask(n - 16), s + 16));
    return hmax(m);
  }
  // p[j] = exp(s[j] - m) for j < n (n in 1..32); returns their sum.
  static float exp_sum(const float* s, int32_t n, float m, float* p) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512 sum = _mm512_setzero_ps();
    for (int32_t j = 0; j < n; j += 16) {
      const __mmask16 k = Avx512Vec::mask(std::min(n - j, 16));
      const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vm)));
      _mm512_mask_storeu_ps(p + j, k, e);
      sum = _mm512_add_ps(sum, e);
    }
    return Avx512Vec::hsum(sum);
  }

  // kt[d][0..32) = keys[0..nk)[d], zero past nk (nk in 1..32): 16x16
  // in-register transposes when head_dim is a multiple of 16.
  static void transpose16(__m512* r) {
    __m512 t[16];
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    auto lo = [](__m512 a, __m512 b) {
      return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    };
    auto hi = [](__m512 a, __m512 b) {
      return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    };
    for (int i = 0; i < 4; ++i) {
      r[4 * i] = lo(t[4 * i], t[4 * i + 2]);
      r[4 * i + 1] = hi(t[4 * i], t[4 * i + 2]);
      r[4 * i + 2] = lo(t[4 * i + 1], t[4 * i + 3]);
      r[4 * i + 3] = hi(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
      t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
      t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
      t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; ++i) {
      r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
      r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
  }
  template <class E>
  static void transpose_keys(const E* const* keys, int32_t nk, int32_t hd, float* kt) {
    if (hd % 16 != 0) {
      for (int32_t d = 0; d < hd; ++d) {
        float* col = kt + static_cast<size_t>(d) * 32;
        for (int32_t j = 0; j < nk; ++j) col[j] = to_f(keys[j][d]);
        for (int32_t j = nk; j < 32; ++j) col[j] = 0.0f;
      }
      return;
    }
    for (int32_t jb = 0; jb < 32; jb += 16) {
      for (int32_t d0 = 0; d0 < hd; d0 += 16) {
        __m512 r[16];
        for (int32_t i = 0; i < 16; ++i)
          r[i] = jb + i < nk ? Avx512Vec::load(keys[jb + i] + d0) : _mm512_setzero_ps();
        if (jb < nk) transpose16(r);
        for (int32_t k = 0; k < 16; ++k) _mm512_storeu_ps(kt + static_cast<size_t>(d0 + k) * 32 + jb, r[k]);
      }
    }
  }

  // sc[r][0..32) = scale * q_r . kt[:, 0..32) for `rows` query rows: 4 rows
  // x 2 vectors of independent FMA chains.
  template <int R>
  static void qk_rows(const float* const* q, const float* kt, int32_t hd, float scale, float* sc) {
    __m512 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int32_t d = 0; d < hd; ++d) {
      const __m512 k0 = _mm512_loadu_ps(kt + d * 32);
      const __m512 k1 = _mm512_loadu_ps(kt + d * 32 + 16);
      for (int r = 0; r < R; ++r) {
        const __m512 qb = _mm512_set1_ps(q[r][d]);
        acc[r][0] = _mm512_fmadd_ps(qb, k0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(qb, k1, acc[r][1]);
      }
    }
    const __m512 vs = _mm512_set1_ps(scale);
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(sc + r * 32, _mm512_mul_ps(acc[r][0], vs));
      _mm512_storeu_ps(sc + r * 32 + 16, _mm512_mul_ps(acc[r][1], vs));
    }
  }
  static void qk_tile(const float* const* q, int32_t rows, const float* kt, int32_t hd, float scale, float* sc) {
    int32_t r = 0;
    for (; r + 4 <= rows; r += 4) qk_rows<4>(q + r, kt, hd, scale, sc + r * 32);
    for (; r < rows; ++r) qk_rows<1>(q + r, kt, hd, scale, sc + r * 32);
  }
};
#endif

}  // namespace pagoda::kernels::attention_internal
