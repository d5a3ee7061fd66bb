// The AVX-512 vector vocabulary (see cpu/simd_scalar.h for the contract
// every ISA's V follows): one zmm holds the 16 lanes, vpdpbusd / vpdpwssd
// for the integer dots, masked loads and stores for tails.
//
// Include only from *_avx512.cc (built with the AVX-512 flags, top-level
// CMakeLists.txt): everything here is compiled for AVX-512 and lives in its
// own namespace so no other translation unit links against it.
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512VNNI__) || \
    !defined(__AVX512DQ__) || !defined(__F16C__) || !defined(__FMA__)
#error "simd_avx512.h needs -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512dq -mf16c -mfma"
#endif

// GCC 12 warns spuriously about its own AVX-512 headers at -O3 (their
// deliberately undefined values in cast / extract helpers).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace pagoda::kernels::cpu::avx512 {

struct V {
  using I = __m512i;  // 16 x int32 (or 64 x int8 / 32 x int16)
  using F = __m512;   // 16 x float
  static constexpr int kLanes = 16;
  // F accumulators a register tile may keep (32 zmm registers).
  static constexpr int kAccF = 8;
  static constexpr int kQ8Offset = -128;  // dot_q8 reads Q8_0 as u8 = q + 128

  // Integer lanes.
  static I load_i(const void* p) { return _mm512_loadu_si512(p); }
  static void store_i(void* p, I a) { _mm512_storeu_si512(p, a); }
  static I set1_i8(char v) { return _mm512_set1_epi8(v); }
  static I set1_i32(int32_t v) { return _mm512_set1_epi32(v); }
  static I zero_i() { return _mm512_setzero_si512(); }
  static I and_i(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_i(I a, I b) { return _mm512_or_si512(a, b); }
  static I srli16(I a, int n) { return _mm512_srli_epi16(a, n); }
  static I slli16(I a, int n) { return _mm512_slli_epi16(a, n); }
  static I add_i32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I mullo_i32(I a, I b) { return _mm512_mullo_epi32(a, b); }
  // vpdpbusd accumulates in place. GCC 12 treats the intrinsic's result as
  // a new value and copies every accumulator of a register tile around
  // each call (two extra moves per dot, spills past ~16 accumulators);
  // the asm form ties the accumulator to its register.
  static I dot_u8s8(I acc, I w, I x) {
#if defined(__GNUC__) && !defined(__clang__)
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, w, x);
#endif
  }
  // dot_q8 with one w against many x (AVX2 finds w's sign once).
  using Q8Prep = I;
  static Q8Prep prep_q8(I w) { return w; }
  static I dot_q8_prep(I acc, Q8Prep w, I x) { return dot_q8(acc, w, x); }
  static I dot_q8(I acc, I w, I x) { return dot_u8s8(acc, w, x); }
  static I dot_s16(I acc, I w, I x) {
#if defined(__GNUC__) && !defined(__clang__)
    asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
    return acc;
#else
    return _mm512_dpwssd_epi32(acc, w, x);
#endif
  }
  // acc (16 f32) += w.bf16[2j] * x.bf16[2j] + w.bf16[2j + 1] * x.bf16[2j + 1]
  // (vdpbf16ps; asm under GCC for the reason above).
  static F dot_bf16(F acc, I w, I x) {
#if defined(__GNUC__) && !defined(__clang__)
    asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
    return acc;
#else
    return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)x);
#endif
  }
  static I u8x32_to_i16(const uint8_t* p) {
    return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static I bcast16(const uint8_t* p) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I shuffle8(I table, I idx) { return _mm512_shuffle_epi8(table, idx); }
  static I i8x16_to_i32(const uint8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I u8x16_to_i32(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static int32_t hsum_i32(I a) {
    const __m256i s = _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(t);
  }
  // 16 int32 in [-128, 127] -> 16 int8 at p.
  static void store_i8(int8_t* p, I a) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtsepi32_epi8(a)); }

  // Float lanes.
  static F load_f(const float* p) { return _mm512_loadu_ps(p); }
  static float half_to_f(uint16_t h) { return _cvtsh_ss(h); }
  static F load_i8_f(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static F load_u4_f(const uint8_t* p, bool high) {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if (high) x = _mm_srli_epi16(x, 4);
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(x, _mm_set1_epi8(15))));
  }
  static F load_f16(const void* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p))); }
  static F load_bf16(const void* p) {
    const __m256i h = _mm256_loadu_si256(static_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static void store_f(float* p, F a) { _mm512_storeu_ps(p, a); }
  static F zero_f() { return _mm512_setzero_ps(); }
  static F set1_f(float v) { return _mm512_set1_ps(v); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F abs(F a) { return _mm512_abs_ps(a); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F cvt_i_f(I a) { return _mm512_cvtepi32_ps(a); }
  static I round_f_i(F a) { return _mm512_cvtps_epi32(a); }  // to nearest even

  // Tails: the first n lanes (0 <= n <= 16); other lanes read as 0 (or
  // `fill`) and are not written.
  static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static F load_f_part(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static F load_f_part_or(const float* p, int n, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), mask(n), p);
  }
  static F load_f16_part(const uint16_t* p, int n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(n), p)); }
  static void store_f_part(float* p, F a, int n) { _mm512_mask_storeu_ps(p, mask(n), a); }

  // Not _mm512_reduce_add_ps: GCC 12 warns about an uninitialized
  // temporary in it.
  static float hsum(F v) {
    const __m512 t = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    __m128 s = _mm_add_ps(_mm512_castps512_ps128(t), _mm256_extractf128_ps(_mm512_castps512_ps256(t), 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(F v) {
    __m512 t = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm512_max_ps(t, _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
    t = _mm512_max_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm512_max_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_cvtss_f32(t);
  }

  // exp as kernels/fast_exp.h (2^n applied with vscalefps): 0 below -87.3
  // (so exp(-inf) = 0), clamped at exp(88.3).
  static F exp(F x) {
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

  // r[i][j] -> r[j][i] for a 16 x 16 tile held as 16 rows.
  static void transpose16(F* r) {
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
};

}  // namespace pagoda::kernels::cpu::avx512
