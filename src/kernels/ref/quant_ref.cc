// Row-level dispatch of the scalar reference kernels over DType.
#include "kernels/ref/quant_ref.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/fp16.h"
#include "kernels/ref/blocks.h"

namespace pagoda::ref {
namespace {

template <class Block>
void dequantize_blocks(const void* src, float* dst, int64_t n) {
  constexpr int kBs = BlockTraits<Block>::kSize;
  PAGODA_CHECK(n % kBs == 0);
  const auto* bytes = static_cast<const unsigned char*>(src);
  for (int64_t i = 0; i < n / kBs; ++i) {
    Block b;  // copy: rows need not be aligned for Block
    std::memcpy(&b, bytes + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
    dequantize_block(b, dst + i * kBs);
  }
}

template <class Block>
void quantize_blocks(const float* src, void* dst, int64_t n, const float* importance) {
  constexpr int kBs = BlockTraits<Block>::kSize;
  PAGODA_CHECK(n % kBs == 0);
  auto* bytes = static_cast<unsigned char*>(dst);
  // Error weights as llama.cpp forms them from an importance matrix:
  // importance_j * sqrt(sigma^2 + x_j^2), sigma^2 the row's mean square.
  double sum_x2 = 0;
  if (importance)
    for (int64_t j = 0; j < n; ++j) sum_x2 += static_cast<double>(src[j]) * src[j];
  const float sigma2 = n > 0 ? static_cast<float>(sum_x2 / static_cast<double>(n)) : 0.0f;
  float w[kBs];
  for (int64_t i = 0; i < n / kBs; ++i) {
    const float* x = src + i * kBs;
    if (importance)
      for (int j = 0; j < kBs; ++j) w[j] = importance[i * kBs + j] * std::sqrt(sigma2 + x[j] * x[j]);
    Block b{};
    quantize_block(x, importance ? w : nullptr, &b);
    std::memcpy(bytes + i * static_cast<int64_t>(sizeof(Block)), &b, sizeof(Block));
  }
}

template <class Block>
double dot_blocks(const void* w, const float* x, int64_t n) {
  constexpr int kBs = BlockTraits<Block>::kSize;
  PAGODA_CHECK(n % kBs == 0);
  const auto* bytes = static_cast<const unsigned char*>(w);
  float tmp[kBs];
  double sum = 0;
  for (int64_t i = 0; i < n / kBs; ++i) {
    Block b;
    std::memcpy(&b, bytes + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
    dequantize_block(b, tmp);
    const float* xb = x + i * kBs;
    for (int j = 0; j < kBs; ++j) sum += static_cast<double>(tmp[j]) * xb[j];
  }
  return sum;
}

uint16_t load_u16(const void* p, int64_t i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const unsigned char*>(p) + 2 * i, 2);
  return v;
}

float load_f32(const void* p, int64_t i) {
  float v;
  std::memcpy(&v, static_cast<const unsigned char*>(p) + 4 * i, 4);
  return v;
}

// Calls fn.template operator()<Block>() for a block type, or returns false.
template <class Fn>
bool visit_block_type(DType type, Fn&& fn) {
  switch (type) {
    case DType::kQ4_0: fn.template operator()<BlockQ4_0>(); return true;
    case DType::kQ4_1: fn.template operator()<BlockQ4_1>(); return true;
    case DType::kQ5_0: fn.template operator()<BlockQ5_0>(); return true;
    case DType::kQ5_1: fn.template operator()<BlockQ5_1>(); return true;
    case DType::kQ8_0: fn.template operator()<BlockQ8_0>(); return true;
    case DType::kQ4_K: fn.template operator()<BlockQ4_K>(); return true;
    case DType::kQ5_K: fn.template operator()<BlockQ5_K>(); return true;
    case DType::kQ6_K: fn.template operator()<BlockQ6_K>(); return true;
    case DType::kQ3_K: fn.template operator()<BlockQ3_K>(); return true;
    case DType::kQ2_K: fn.template operator()<BlockQ2_K>(); return true;
    case DType::kIQ4_NL: fn.template operator()<BlockIQ4_NL>(); return true;
    case DType::kIQ4_XS: fn.template operator()<BlockIQ4_XS>(); return true;
    default: return false;
  }
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load_u16(src, i));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(src, i));
      return;
    default: break;
  }
  const bool known = visit_block_type(type, [&]<class Block>() { dequantize_blocks<Block>(src, dst, n); });
  PAGODA_CHECK(known && "dequantize_row: unsupported dtype");
}

void quantize_row(DType type, const float* src, void* dst, int64_t n, const float* importance) {
  auto* bytes = static_cast<unsigned char*>(dst);
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = type == DType::kF16 ? fp32_to_fp16(src[i]) : fp32_to_bf16(src[i]);
        std::memcpy(bytes + 2 * i, &h, 2);
      }
      return;
    default: break;
  }
  const bool known = visit_block_type(type, [&]<class Block>() { quantize_blocks<Block>(src, dst, n, importance); });
  PAGODA_CHECK(known && "quantize_row: unsupported dtype");
}

double vec_dot(DType type, const void* w, const float* x, int64_t n) {
  double sum = 0;
  switch (type) {
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(load_f32(w, i)) * x[i];
      return sum;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(fp16_to_fp32(load_u16(w, i))) * x[i];
      return sum;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_fp32(load_u16(w, i))) * x[i];
      return sum;
    default: break;
  }
  const bool known = visit_block_type(type, [&]<class Block>() { sum = dot_blocks<Block>(w, x, n); });
  PAGODA_CHECK(known && "vec_dot: unsupported dtype");
  return sum;
}

}  // namespace pagoda::ref
