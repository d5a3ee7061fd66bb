// The AVX2 vector vocabulary (see cpu/simd_scalar.h for the contract every
// ISA's V follows): the 16 lanes are a pair of ymm (lanes 0-7, 8-15);
// integer dots with vpmaddubsw + vpmaddwd (no saturation: packed weights
// are <= 63, or Q8_0 with its sign moved onto the activations).
//
// Include only from *_avx2.cc (built with the AVX2 flags and without
// AVX-512, top-level CMakeLists.txt): everything here lives in its own
// namespace so no other translation unit links against it.
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__) || defined(__AVX512F__)
#error "simd_avx2.h needs -mavx2 -mfma -mf16c and no AVX-512"
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace pagoda::kernels::cpu::avx2 {

struct V {
  struct I {
    __m256i lo, hi;
  };
  struct F {
    __m256 lo, hi;
  };
  static constexpr int kLanes = 16;
  // F accumulators a register tile may keep (16 ymm registers, 2 per F).
  static constexpr int kAccF = 4;
  static constexpr int kQ8Offset = 0;  // dot_q8 restores Q8_0's sign

  static __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
  static __m128i load64(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }

  // Integer lanes.
  static I load_i(const void* p) {
    const auto* q = static_cast<const __m256i*>(p);
    return {_mm256_loadu_si256(q), _mm256_loadu_si256(q + 1)};
  }
  static void store_i(void* p, I a) {
    auto* q = static_cast<__m256i*>(p);
    _mm256_storeu_si256(q, a.lo);
    _mm256_storeu_si256(q + 1, a.hi);
  }
  static I set1_i8(char v) { return {_mm256_set1_epi8(v), _mm256_set1_epi8(v)}; }
  static I set1_i32(int32_t v) { return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
  static I zero_i() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
  static I and_i(I a, I b) { return {_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)}; }
  static I or_i(I a, I b) { return {_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)}; }
  static I srli16(I a, int n) { return {_mm256_srli_epi16(a.lo, n), _mm256_srli_epi16(a.hi, n)}; }
  static I slli16(I a, int n) { return {_mm256_slli_epi16(a.lo, n), _mm256_slli_epi16(a.hi, n)}; }
  static I add_i32(I a, I b) { return {_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)}; }
  static I mullo_i32(I a, I b) { return {_mm256_mullo_epi32(a.lo, b.lo), _mm256_mullo_epi32(a.hi, b.hi)}; }
  static __m256i dot1(__m256i acc, __m256i w, __m256i x) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
  }
  static I dot_u8s8(I acc, I w, I x) { return {dot1(acc.lo, w.lo, x.lo), dot1(acc.hi, w.hi, x.hi)}; }
  // w = q + 128: q * x = |q| * (x with q's sign), |q| <= 128 fits u8.
  static __m256i dot_q8_1(__m256i acc, __m256i w, __m256i x) {
    const __m256i q = _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
    return dot1(acc, _mm256_abs_epi8(q), _mm256_sign_epi8(x, q));
  }
  static I dot_q8(I acc, I w, I x) { return {dot_q8_1(acc.lo, w.lo, x.lo), dot_q8_1(acc.hi, w.hi, x.hi)}; }
  // dot_q8 with one w against many x: its sign and magnitude found once.
  struct Q8Prep {
    __m256i abs_lo, abs_hi, q_lo, q_hi;
  };
  static Q8Prep prep_q8(I w) {
    const __m256i m = _mm256_set1_epi8(static_cast<char>(0x80));
    const __m256i lo = _mm256_xor_si256(w.lo, m), hi = _mm256_xor_si256(w.hi, m);
    return {_mm256_abs_epi8(lo), _mm256_abs_epi8(hi), lo, hi};
  }
  static I dot_q8_prep(I acc, const Q8Prep& w, I x) {
    return {dot1(acc.lo, w.abs_lo, _mm256_sign_epi8(x.lo, w.q_lo)),
            dot1(acc.hi, w.abs_hi, _mm256_sign_epi8(x.hi, w.q_hi))};
  }
  static I dot_s16(I acc, I w, I x) {
    return {_mm256_add_epi32(acc.lo, _mm256_madd_epi16(w.lo, x.lo)),
            _mm256_add_epi32(acc.hi, _mm256_madd_epi16(w.hi, x.hi))};
  }
  static I u8x32_to_i16(const uint8_t* p) {
    return {_mm256_cvtepu8_epi16(load128(p)), _mm256_cvtepu8_epi16(load128(p + 16))};
  }
  static I bcast16(const uint8_t* p) {
    const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return {t, t};
  }
  static I shuffle8(I table, I idx) {
    return {_mm256_shuffle_epi8(table.lo, idx.lo), _mm256_shuffle_epi8(table.hi, idx.hi)};
  }
  static I i8x16_to_i32(const uint8_t* p) {
    return {_mm256_cvtepi8_epi32(load64(p)), _mm256_cvtepi8_epi32(load64(p + 8))};
  }
  static I u8x16_to_i32(const uint8_t* p) {
    return {_mm256_cvtepu8_epi32(load64(p)), _mm256_cvtepu8_epi32(load64(p + 8))};
  }
  static int32_t hsum_i32(I a) {
    const __m256i s = _mm256_add_epi32(a.lo, a.hi);
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(t);
  }
  // 16 int32 in [-128, 127] -> 16 int8 at p.
  static void store_i8(int8_t* p, I a) {
    // packs interleaves 128-bit halves: [lo 0-3, hi 0-3, lo 4-7, hi 4-7]
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(a.lo, a.hi), _MM_SHUFFLE(3, 1, 2, 0));
    const __m128i b = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), b);
  }

  // Float lanes.
  static F load_f(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static F load_f16(const void* p) {
    const auto* b = static_cast<const uint8_t*>(p);
    return {_mm256_cvtph_ps(load128(b)), _mm256_cvtph_ps(load128(b + 16))};
  }
  static float half_to_f(uint16_t h) { return _cvtsh_ss(h); }
  static F load_i8_f(const int8_t* p) {
    const auto* b = reinterpret_cast<const uint8_t*>(p);
    return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load64(b))),
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load64(b + 8)))};
  }
  static F load_u4_f(const uint8_t* p, bool high) {
    __m128i x = load128(p);
    if (high) x = _mm_srli_epi16(x, 4);
    x = _mm_and_si128(x, _mm_set1_epi8(15));
    return {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x)),
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(x, 8)))};
  }
  static __m256 bf16x8(const uint8_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
  static F load_bf16(const void* p) {
    const auto* b = static_cast<const uint8_t*>(p);
    return {bf16x8(b), bf16x8(b + 16)};
  }
  static void store_f(float* p, F a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
  }
  static F zero_f() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static F set1_f(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
  static F add(F a, F b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
  static F sub(F a, F b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
  static F mul(F a, F b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static F div(F a, F b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
  static F max(F a, F b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
  static F min(F a, F b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
  static F abs(F a) {
    const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    return {_mm256_and_ps(a.lo, m), _mm256_and_ps(a.hi, m)};
  }
  static F fmadd(F a, F b, F c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
  static F fnmadd(F a, F b, F c) { return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)}; }
  static F cvt_i_f(I a) { return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
  static I round_f_i(F a) { return {_mm256_cvtps_epi32(a.lo), _mm256_cvtps_epi32(a.hi)}; }  // nearest even

  // Tails: the first n lanes (0 <= n <= 16); other lanes read as 0 (or
  // `fill`) and are not written.
  static __m256i mask8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  // The upper ymm is touched only when n > 8 (no pointer past the data).
  static F load_f_part(const float* p, int n) {
    if (n <= 8) return {_mm256_maskload_ps(p, mask8(n)), _mm256_setzero_ps()};
    return {_mm256_loadu_ps(p), _mm256_maskload_ps(p + 8, mask8(n - 8))};
  }
  static F load_f_part_or(const float* p, int n, float fill) {
    const __m256 f = _mm256_set1_ps(fill);
    auto part = [&](const float* q, int m) {
      const __m256i k = mask8(m);
      return _mm256_blendv_ps(f, _mm256_maskload_ps(q, k), _mm256_castsi256_ps(k));
    };
    if (n <= 8) return {part(p, n), f};
    return {_mm256_loadu_ps(p), part(p + 8, n - 8)};
  }
  static F load_f16_part(const uint16_t* p, int n) {
    uint16_t tmp[16] = {};
    std::memcpy(tmp, p, sizeof(uint16_t) * n);
    return load_f16(tmp);
  }
  static void store_f_part(float* p, F a, int n) {
    if (n <= 8) {
      _mm256_maskstore_ps(p, mask8(n), a.lo);
    } else {
      _mm256_storeu_ps(p, a.lo);
      _mm256_maskstore_ps(p + 8, mask8(n - 8), a.hi);
    }
  }

  static float hsum(F v) {
    const __m256 a = _mm256_add_ps(v.lo, v.hi);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(F v) {
    const __m256 a = _mm256_max_ps(v.lo, v.hi);
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // exp as kernels/fast_exp.h, 8 lanes: 0 below -87.3 (so exp(-inf) = 0),
  // clamped at exp(88.3).
  static __m256 exp8(__m256 x) {
    const __m256 xc = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3f)), _mm256_set1_ps(-87.3f));
    const __m256 r =
        _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_fnmadd_ps(r, _mm256_set1_ps(0.693145751953125f), xc);
    f = _mm256_fnmadd_ps(r, _mm256_set1_ps(1.428606765330187e-6f), f);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    // 2^r into the exponent bits (r in [-126, 127] after the clamp).
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(r), _mm256_set1_epi32(127)), 23);
    const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    return _mm256_andnot_ps(under, e);
  }
  static F exp(F x) { return {exp8(x.lo), exp8(x.hi)}; }

  // r[i][j] -> r[j][i] for an 8 x 8 tile held as 8 rows.
  static void transpose8(__m256* r) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i) {
      u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
      u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
      u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
      u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; ++i) {
      r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
      r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
  }
  // r[i][j] -> r[j][i] for a 16 x 16 tile held as 16 rows: four 8 x 8
  // transposes, the off-diagonal quarters swapped.
  static void transpose16(F* r) {
    __m256 a[8], b[8], c[8], d[8];
    for (int i = 0; i < 8; ++i) {
      a[i] = r[i].lo;
      b[i] = r[i].hi;
      c[i] = r[i + 8].lo;
      d[i] = r[i + 8].hi;
    }
    transpose8(a);
    transpose8(b);
    transpose8(c);
    transpose8(d);
    for (int i = 0; i < 8; ++i) {
      r[i] = {a[i], c[i]};
      r[i + 8] = {b[i], d[i]};
    }
  }
};

}  // namespace pagoda::kernels::cpu::avx2
