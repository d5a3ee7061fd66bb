// The portable vector vocabulary, and the contract every ISA's V follows.
//
// SIMD kernels are written once over a struct V of static functions on 16
// lanes (cpu/packed_tiles_inl.h, cpu/attention_inl.h, cpu/ops_inl.h) and
// compiled once per ISA: each *_<isa>.cc includes its cpu/simd_<isa>.h,
// binds `using V = <isa>::V;` and textually includes the kernels inside an
// anonymous namespace. V provides:
//   F / I: 16 float / 16 int32 lanes (I is also 64 int8 or 32 int16 lanes);
//   kLanes = 16; kAccF, how many F accumulators a register tile may hold.
//   float: load_f, load_f16 / load_bf16 (16 halves / bfloat16 at p),
//     load_i8_f (16 int8), load_u4_f(p, high) (the low or high nibbles of
//     16 bytes, 0..15), half_to_f (one IEEE half),
//     store_f, zero_f, set1_f, add, sub, mul, div, max, min, abs, fmadd(a, b, c)
//     = a * b + c, fnmadd = c - a * b, cvt_i_f, round_f_i (to nearest even),
//     hsum, hmax, exp (as kernels/fast_exp.h), transpose16(F r[16]);
//   tails (first n lanes, 0 <= n <= 16, the rest read as 0 or `fill`, not
//     written): load_f_part, load_f_part_or, load_f16_part, store_f_part;
//   int: hsum_i32, store_i8 (16 int32 in [-128, 127] to int8);
//   the packed integer dots (x86 only, cpu/packed_tiles_inl.h): load_i, store_i,
//     set1_i8, set1_i32, zero_i, and_i, or_i, srli16 / slli16 (16-bit
//     lanes), add_i32, mullo_i32, dot_u8s8(acc, w, x) (sum of 4 u8 x s8
//     products per int32 lane, w <= 63), dot_q8 with kQ8Offset (Q8_0 stored
//     as q + 128), dot_s16 (pairs of int16), u8x32_to_i16, i8x16_to_i32,
//     u8x16_to_i32, bcast16 (16 bytes to every 128-bit lane) and
//     shuffle8(table, idx) (each byte idx < 16 replaced by table[idx] of its
//     128-bit lane: the IQ4 value lookup).
// This scalar V has the float and int parts (plain loops the compiler may
// vectorize for the baseline target) and of the packed dots only load_i,
// set1_i32, zero_i and dot_q8 (for attention): the scalar ISA multiplies
// from the row layout (cpu/matmul_scalar.cc), the reference.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "kernels/fast_exp.h"

namespace pagoda::kernels::cpu::scalar {

struct V {
  struct F {
    float v[16];
  };
  struct I {
    int32_t v[16];
  };
  static constexpr int kLanes = 16;
  static constexpr int kAccF = 4;

  template <class Fn>
  static F map(Fn fn) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = fn(i);
    return r;
  }

  static F load_f(const float* p) {
    return map([&](int i) { return p[i]; });
  }
  static F load_f16(const void* p) {
    uint16_t h[16];
    std::memcpy(h, p, sizeof h);
    return map([&](int i) { return fp16_to_fp32(h[i]); });
  }
  static float half_to_f(uint16_t h) { return fp16_to_fp32(h); }
  static F load_i8_f(const int8_t* p) {
    return map([&](int i) { return static_cast<float>(p[i]); });
  }
  static F load_u4_f(const uint8_t* p, bool high) {
    return map([&](int i) { return static_cast<float>(high ? p[i] >> 4 : p[i] & 15); });
  }
  static F load_bf16(const void* p) {
    uint16_t h[16];
    std::memcpy(h, p, sizeof h);
    return map([&](int i) { return bf16_to_fp32(h[i]); });
  }
  static void store_f(float* p, F a) { std::copy_n(a.v, 16, p); }
  static F zero_f() { return set1_f(0.0f); }
  static F set1_f(float x) {
    return map([&](int) { return x; });
  }
  static F add(F a, F b) {
    return map([&](int i) { return a.v[i] + b.v[i]; });
  }
  static F sub(F a, F b) {
    return map([&](int i) { return a.v[i] - b.v[i]; });
  }
  static F mul(F a, F b) {
    return map([&](int i) { return a.v[i] * b.v[i]; });
  }
  static F div(F a, F b) {
    return map([&](int i) { return a.v[i] / b.v[i]; });
  }
  static F max(F a, F b) {
    return map([&](int i) { return a.v[i] > b.v[i] ? a.v[i] : b.v[i]; });
  }
  static F min(F a, F b) {
    return map([&](int i) { return a.v[i] < b.v[i] ? a.v[i] : b.v[i]; });
  }
  static F abs(F a) {
    return map([&](int i) { return fp32_from_bits(fp32_to_bits(a.v[i]) & 0x7fffffffu); });
  }
  static F fmadd(F a, F b, F c) {
    return map([&](int i) { return a.v[i] * b.v[i] + c.v[i]; });
  }
  static F fnmadd(F a, F b, F c) {
    return map([&](int i) { return c.v[i] - a.v[i] * b.v[i]; });
  }
  static F cvt_i_f(I a) {
    return map([&](int i) { return static_cast<float>(a.v[i]); });
  }
  // Nearest even via 1.5 * 2^23 (exact for |x| < 2^22, all callers' range).
  static I round_f_i(F a) {
    I r;
    for (int i = 0; i < 16; ++i) r.v[i] = static_cast<int32_t>((a.v[i] + 12582912.0f) - 12582912.0f);
    return r;
  }

  static F load_f_part(const float* p, int n) { return load_f_part_or(p, n, 0.0f); }
  static F load_f_part_or(const float* p, int n, float fill) {
    return map([&](int i) { return i < n ? p[i] : fill; });
  }
  static F load_f16_part(const uint16_t* p, int n) {
    return map([&](int i) { return i < n ? fp16_to_fp32(p[i]) : 0.0f; });
  }
  static void store_f_part(float* p, F a, int n) { std::copy_n(a.v, n, p); }

  static float hsum(F a) {
    float s[8];
    for (int i = 0; i < 8; ++i) s[i] = a.v[i] + a.v[i + 8];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  }
  static float hmax(F a) {
    float m = a.v[0];
    for (int i = 1; i < 16; ++i) m = a.v[i] > m ? a.v[i] : m;
    return m;
  }
  static F exp(F a) {
    return map([&](int i) { return fast_exp(a.v[i]); });
  }
  static void transpose16(F* r) {
    for (int i = 0; i < 16; ++i)
      for (int j = i + 1; j < 16; ++j) std::swap(r[i].v[j], r[j].v[i]);
  }

  // The one integer dot of the portable V (quantized-key attention scores,
  // cpu/attention_inl.h): dot_q8 as on x86, w = q + 128 read as u8 with the
  // offset left to the caller (kQ8Offset * sum(x)), like AVX-512.
  static constexpr int kQ8Offset = -128;
  static I load_i(const void* p) {
    I r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  static I set1_i32(int32_t x) {
    I r;
    std::fill_n(r.v, 16, x);
    return r;
  }
  static I zero_i() { return set1_i32(0); }
  // dot_q8 with one w against many x (AVX2 finds w's sign once).
  using Q8Prep = I;
  static Q8Prep prep_q8(I w) { return w; }
  static I dot_q8_prep(I acc, Q8Prep w, I x) { return dot_q8(acc, w, x); }
  static I dot_q8(I acc, I w, I x) {
    uint8_t wb[64];
    int8_t xb[64];
    std::memcpy(wb, w.v, 64);
    std::memcpy(xb, x.v, 64);
    for (int i = 0; i < 16; ++i)
      for (int k = 0; k < 4; ++k) acc.v[i] += int32_t{wb[4 * i + k]} * xb[4 * i + k];
    return acc;
  }

  static int32_t hsum_i32(I a) {
    int32_t s = 0;
    for (int i = 0; i < 16; ++i) s += a.v[i];
    return s;
  }
  static void store_i8(int8_t* p, I a) {
    for (int i = 0; i < 16; ++i) p[i] = static_cast<int8_t>(a.v[i]);
  }
};

}  // namespace pagoda::kernels::cpu::scalar
