// exp(x) in straight-line float arithmetic that GCC vectorizes (no libm
// call): exp(x) = 2^n e^f with n = round(x / ln 2) and |f| <= 0.35, e^f by a
// degree-7 polynomial, 2^n put into the exponent bits. Max relative error
// about 2e-7 (tests/kernels/ops_test.cc); exp(x) = 0 below -87.3 (so
// exp(-inf) = 0), clamped at exp(88.3) above.
#pragma once

#include <cstdint>
#include <cstring>

namespace pagoda::kernels {

inline float fast_exp(float x) {
  const float xc = x > 88.3f ? 88.3f : (x < -87.3f ? -87.3f : x);
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: round to nearest
  const float r = (xc * 1.44269504f + kMagic) - kMagic;
  // f = x - r ln 2 in two steps (Cody-Waite): |f| <= 0.35, no cancellation loss
  const float f = (xc - r * 0.693145751953125f) - r * 1.428606765330187e-6f;
  float p = 1.0f / 5040;
  p = p * f + 1.0f / 720;
  p = p * f + 1.0f / 120;
  p = p * f + 1.0f / 24;
  p = p * f + 1.0f / 6;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
  const int32_t bits = (static_cast<int32_t>(r) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return x < -87.3f ? 0.0f : p * scale;
}

}  // namespace pagoda::kernels
