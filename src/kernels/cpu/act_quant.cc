// Activation quantizers (shared by every ISA) and the kernel-table lookup.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/kernel_table.h"

namespace pagoda::kernels::cpu {
namespace {

// Round-to-nearest-even via the 1.5 * 2^23 trick: exact for |v| < 2^22,
// identical on every path and auto-vectorizable.
inline int round_small(float v) {
  constexpr float kMagic = 12582912.0f;
  return static_cast<int>((v + kMagic) - kMagic);
}

// Quantizes one block of n to int8 with scale max|x|/127; returns d.
float quantize_block(const float* x, int n, int8_t* q) {
  // max |x| as the max of the sign-cleared bit patterns (monotonic for
  // non-NaN floats): an unsigned max reduction the compiler vectorizes.
  uint32_t max_bits = 0;
  for (int i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &x[i], 4);
    b &= 0x7fffffffu;
    max_bits = b > max_bits ? b : max_bits;
  }
  float amax;
  std::memcpy(&amax, &max_bits, 4);
  const float d = amax / 127.0f;
  const float id = d > 0 ? 127.0f / amax : 0.0f;
  for (int i = 0; i < n; ++i) {
    float v = x[i] * id;
    v = std::min(127.0f, std::max(-127.0f, v));
    q[i] = static_cast<int8_t>(round_small(v));
  }
  return d;
}

}  // namespace

void quantize_act_q8_32(const float* x, int64_t n, int8_t* qs, float* d, float* s, int32_t* qsum) {
  PAGODA_CHECK(n % kActBlock32 == 0);
  for (int64_t b = 0; b < n / kActBlock32; ++b) {
    int8_t* q = qs + b * kActBlock32;
    d[b] = quantize_block(x + b * kActBlock32, kActBlock32, q);
    int sum = 0;
    for (int i = 0; i < kActBlock32; ++i) sum += q[i];
    s[b] = d[b] * static_cast<float>(sum);
    qsum[b] = sum;
  }
}

void quantize_act_q8_k(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsums) {
  PAGODA_CHECK(n % kActBlockK == 0);
  for (int64_t b = 0; b < n / kActBlockK; ++b) {
    int8_t* q = qs + b * kActBlockK;
    d[b] = quantize_block(x + b * kActBlockK, kActBlockK, q);
    for (int g = 0; g < kActBlockK / kActSumGroup; ++g) {
      int sum = 0;
      for (int i = 0; i < kActSumGroup; ++i) sum += q[g * kActSumGroup + i];
      bsums[b * (kActBlockK / kActSumGroup) + g] = static_cast<int16_t>(sum);
    }
  }
}

void expand_act_pairs(const float* d, const float* s, int64_t nb, float* d16, float* s16) {
  for (int64_t p = 0; p < nb / 2; ++p)
    for (int i = 0; i < 16; ++i) {
      const int64_t b = 2 * p + i / 8;
      d16[16 * p + i] = d[b];
      s16[16 * p + i] = s[b] * 0.125f;  // exact: 8 lanes sum back to s
    }
}

int wkind_of(DType type) {
  switch (type) {
    case DType::kF32: return static_cast<int>(WKind::kF32);
    case DType::kF16: return static_cast<int>(WKind::kF16);
    case DType::kBF16: return static_cast<int>(WKind::kBF16);
    case DType::kQ8_0: return static_cast<int>(WKind::kQ8_0);
    case DType::kQ4_0: return static_cast<int>(WKind::kQ4_0);
    case DType::kQ4_1: return static_cast<int>(WKind::kQ4_1);
    case DType::kQ5_0: return static_cast<int>(WKind::kQ5_0);
    case DType::kQ5_1: return static_cast<int>(WKind::kQ5_1);
    case DType::kQ4_K: return static_cast<int>(WKind::kQ4_K);
    case DType::kQ5_K: return static_cast<int>(WKind::kQ5_K);
    case DType::kQ6_K: return static_cast<int>(WKind::kQ6_K);
    default: return -1;
  }
}

ActFormat act_format_of(WKind kind) {
  switch (kind) {
    case WKind::kF32:
    case WKind::kF16:
    case WKind::kBF16:
      return ActFormat::kFloat;
    case WKind::kQ4_K:
    case WKind::kQ5_K:
    case WKind::kQ6_K:
      return ActFormat::kQ8_K;
    default:
      return ActFormat::kQ8_32;
  }
}

#if !defined(__x86_64__)
const IsaKernels& kernels_avx2() { return kernels_scalar(); }
const IsaKernels& kernels_avx512() { return kernels_scalar(); }
#endif

const IsaKernels& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return kernels_avx512();
    case Isa::kAvx2: return kernels_avx2();
    default: return kernels_scalar();
  }
}

}  // namespace pagoda::kernels::cpu
