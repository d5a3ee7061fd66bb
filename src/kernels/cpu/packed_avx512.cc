// AVX-512 variant of the packed-layout kernels (cpu/packed_tiles_inl.h):
// one zmm is a group of 16 rows, vpdpbusd / vpdpwssd for the integer dots.
// Built with the AVX-512 flags (top-level CMakeLists.txt); only reached
// when isa_supported(kAvx512).
#if defined(__x86_64__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>
#include <cstring>

#include "kernels/cpu/pack.h"
#include "kernels/cpu/packed_kernels.h"

namespace pagoda::kernels::cpu {
namespace {

struct V {
  using I = __m512i;
  using F = __m512;
  static constexpr int kQ8Offset = -128;
  static I load_i(const void* p) { return _mm512_loadu_si512(p); }
  static I set1_i8(char v) { return _mm512_set1_epi8(v); }
  static I set1_i32(int32_t v) { return _mm512_set1_epi32(v); }
  static I zero_i() { return _mm512_setzero_si512(); }
  static I and_i(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_i(I a, I b) { return _mm512_or_si512(a, b); }
  static I srli16(I a, int n) { return _mm512_srli_epi16(a, n); }
  static I slli16(I a, int n) { return _mm512_slli_epi16(a, n); }
  static I dot_u8s8(I acc, I w, I x) { return _mm512_dpbusd_epi32(acc, w, x); }
  static I dot_q8(I acc, I w, I x) { return _mm512_dpbusd_epi32(acc, w, x); }
  static I dot_s16(I acc, I w, I x) { return _mm512_dpwssd_epi32(acc, w, x); }
  static I u8x32_to_i16(const uint8_t* p) {
    return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F u8x16_to_f(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static F i8x16_to_f(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static I i8x16_to_i32(const uint8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I u8x16_to_i32(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I add_i32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I mullo_i32(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static F half16_to_f(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F bf16x16_to_f(const uint8_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static F load_f(const float* p) { return _mm512_loadu_ps(p); }
  static F cvt_i_f(I a) { return _mm512_cvtepi32_ps(a); }
  static F zero_f() { return _mm512_setzero_ps(); }
  static F set1_f(float v) { return _mm512_set1_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static void store_f(float* p, F a) { _mm512_storeu_ps(p, a); }
};
using VI = V::I;
using VF = V::F;

// clang-format off
#include "kernels/cpu/packed_tiles_inl.h"
// clang-format on

}  // namespace

void use_packed512(IsaKernels& k) {
  auto set = [&](WKind kind, RowsFn fn) { k.packed[static_cast<int>(kind)] = fn; };
  set(WKind::kQ4_0, packed_rows<KQ4_0, 3, 3, 4>);
  set(WKind::kQ8_0, packed_rows<KQ8_0, 2, 4, 4>);
  set(WKind::kQ4_1, packed_rows<KQ4_1, 2, 4, 4>);
  set(WKind::kQ5_0, packed_rows<KQ5_0, 2, 4, 4>);
  set(WKind::kQ5_1, packed_rows<KQ5_1, 2, 4, 4>);
  set(WKind::kQ4_K, packed_rows<KQ4_K, 2, 4, 8>);
  set(WKind::kQ5_K, packed_rows<KQ5_K, 2, 4, 4>);
  set(WKind::kQ6_K, packed_rows<KQ6_K, 2, 4, 4>);
  set(WKind::kF32, packed_rows<KF32, 3, 8, 8>);
  set(WKind::kF16, packed_rows<KF16, 3, 8, 8>);
  set(WKind::kBF16, packed_rows<KBF16, 3, 8, 8>);
}

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
