// AVX2 variant of the packed-layout kernels (cpu/packed_tiles_inl.h): a
// group of 16 rows is a pair of ymm (rows 0-7, 8-15); integer dots with
// vpmaddubsw + vpmaddwd (no saturation: packed weights are <= 63, or Q8_0
// with its sign moved onto the activations). Built with the AVX2 flags and
// without AVX-512 (top-level CMakeLists.txt).
#if defined(__x86_64__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__) || defined(__AVX512F__)
#error "packed_avx2.cc needs -mavx2 -mfma -mf16c and no AVX-512"
#endif

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/pack.h"
#include "kernels/cpu/packed_kernels.h"

namespace pagoda::kernels::cpu {
namespace {

struct V {
  struct I {
    __m256i lo, hi;
  };
  struct F {
    __m256 lo, hi;
  };
  static constexpr int kQ8Offset = 0;
  static __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
  static __m128i load64(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }
  static I load_i(const void* p) {
    const auto* q = static_cast<const __m256i*>(p);
    return {_mm256_loadu_si256(q), _mm256_loadu_si256(q + 1)};
  }
  static I set1_i8(char v) { return {_mm256_set1_epi8(v), _mm256_set1_epi8(v)}; }
  static I set1_i32(int32_t v) { return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
  static I zero_i() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
  static I and_i(I a, I b) { return {_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)}; }
  static I or_i(I a, I b) { return {_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)}; }
  static I srli16(I a, int n) { return {_mm256_srli_epi16(a.lo, n), _mm256_srli_epi16(a.hi, n)}; }
  static I slli16(I a, int n) { return {_mm256_slli_epi16(a.lo, n), _mm256_slli_epi16(a.hi, n)}; }
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
  static I dot_s16(I acc, I w, I x) {
    return {_mm256_add_epi32(acc.lo, _mm256_madd_epi16(w.lo, x.lo)),
            _mm256_add_epi32(acc.hi, _mm256_madd_epi16(w.hi, x.hi))};
  }
  static I u8x32_to_i16(const uint8_t* p) {
    return {_mm256_cvtepu8_epi16(load128(p)), _mm256_cvtepu8_epi16(load128(p + 16))};
  }
  static F u8x16_to_f(const uint8_t* p) {
    return {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load64(p))), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load64(p + 8)))};
  }
  static F i8x16_to_f(const uint8_t* p) {
    return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load64(p))), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load64(p + 8)))};
  }
  static I i8x16_to_i32(const uint8_t* p) { return {_mm256_cvtepi8_epi32(load64(p)), _mm256_cvtepi8_epi32(load64(p + 8))}; }
  static I u8x16_to_i32(const uint8_t* p) { return {_mm256_cvtepu8_epi32(load64(p)), _mm256_cvtepu8_epi32(load64(p + 8))}; }
  static I add_i32(I a, I b) { return {_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)}; }
  static I mullo_i32(I a, I b) { return {_mm256_mullo_epi32(a.lo, b.lo), _mm256_mullo_epi32(a.hi, b.hi)}; }
  static F half16_to_f(const uint8_t* p) { return {_mm256_cvtph_ps(load128(p)), _mm256_cvtph_ps(load128(p + 16))}; }
  static __m256 bf16x8(const uint8_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
  static F bf16x16_to_f(const uint8_t* p) { return {bf16x8(p), bf16x8(p + 16)}; }
  static F load_f(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static F cvt_i_f(I a) { return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
  static F zero_f() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static F set1_f(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
  static F mul(F a, F b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static F fmadd(F a, F b, F c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
  static F fnmadd(F a, F b, F c) { return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)}; }
  static void store_f(float* p, F a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
  }
};
using VI = V::I;
using VF = V::F;

// clang-format off
#include "kernels/cpu/packed_tiles_inl.h"
// clang-format on

}  // namespace

void use_packed_avx2(IsaKernels& k) {
  auto set = [&](WKind kind, RowsFn fn) { k.packed[static_cast<int>(kind)] = fn; };
  set(WKind::kQ4_0, packed_rows<KQ4_0, 1, 4, 2>);
  set(WKind::kQ8_0, packed_rows<KQ8_0, 1, 4, 2>);
  set(WKind::kQ4_1, packed_rows<KQ4_1, 1, 4, 2>);
  set(WKind::kQ5_0, packed_rows<KQ5_0, 1, 4, 2>);
  set(WKind::kQ5_1, packed_rows<KQ5_1, 1, 4, 2>);
  set(WKind::kQ4_K, packed_rows<KQ4_K, 1, 4, 2>);
  set(WKind::kQ5_K, packed_rows<KQ5_K, 1, 4, 2>);
  set(WKind::kQ6_K, packed_rows<KQ6_K, 1, 4, 2>);
  set(WKind::kF32, packed_rows<KF32, 1, 4, 2>);
  set(WKind::kF16, packed_rows<KF16, 1, 4, 2>);
  set(WKind::kBF16, packed_rows<KBF16, 1, 4, 2>);
}

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
