// The kernel tables of every ISA, assembled from each ISA's register_*
// functions (cpu/register.h), and the weight-kind helpers.
#include "kernels/cpu/kernel_table.h"

#include "core/check.h"
#include "kernels/cpu/register.h"

namespace pagoda::kernels::cpu {

int wkind_of(DType type, bool row_scaled, bool bf16_dot) {
  if (row_scaled) return type == DType::kQ8_0 ? static_cast<int>(WKind::kQ8_0R) : -1;
  if (bf16_dot) {
    if (type == DType::kF16) return static_cast<int>(WKind::kF16D);
    if (type == DType::kBF16) return static_cast<int>(WKind::kBF16D);
    return -1;
  }
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
    case DType::kQ2_K: return static_cast<int>(WKind::kQ2_K);
    case DType::kQ3_K: return static_cast<int>(WKind::kQ3_K);
    case DType::kIQ4_NL: return static_cast<int>(WKind::kIQ4_NL);
    case DType::kIQ4_XS: return static_cast<int>(WKind::kIQ4_XS);
    default: return -1;
  }
}

ActFormat act_format_of(WKind kind) {
  switch (kind) {
    case WKind::kF32:
    case WKind::kF16:
    case WKind::kBF16: return ActFormat::kFloat;
    case WKind::kQ4_K:
    case WKind::kQ5_K:
    case WKind::kQ6_K:
    case WKind::kQ2_K:
    case WKind::kQ3_K:
    case WKind::kIQ4_XS: return ActFormat::kQ8_K;
    case WKind::kQ8_0R: return ActFormat::kQ8_Row;
    case WKind::kF16D:
    case WKind::kBF16D: return ActFormat::kBF16;
    default: return ActFormat::kQ8_32;
  }
}

const IsaKernels& kernels_scalar() {
  static const IsaKernels k = [] {
    IsaKernels t;
    register_matmul_scalar(t);
    register_attention_scalar(t);
    register_ops_scalar(t);
    return t;
  }();
  return k;
}

#if defined(__x86_64__)
namespace {

// Built on first use, so the ISA's code runs only once isa_supported() said so.
const IsaKernels& kernels_avx2() {
  static const IsaKernels k = [] {
    PAGODA_CHECK(isa_supported(Isa::kAvx2));
    IsaKernels t;
    register_packed_avx2(t);
    register_attention_avx2(t);
    register_ops_avx2(t);
    register_unpacked_avx2(t);
    return t;
  }();
  return k;
}

const IsaKernels& kernels_avx512() {
  static const IsaKernels k = [] {
    PAGODA_CHECK(isa_supported(Isa::kAvx512));
    IsaKernels t;
    register_packed_avx512(t);
    register_attention_avx512(t);
    register_ops_avx512(t);
    register_unpacked_avx512(t);
    return t;
  }();
  return k;
}

}  // namespace
#endif

const IsaKernels& kernels_for(Isa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case Isa::kAvx512: return kernels_avx512();
    case Isa::kAvx2: return kernels_avx2();
#endif
    default: return kernels_scalar();
  }
}

const IsaKernels& active_kernels() { return kernels_for(active_isa()); }

}  // namespace pagoda::kernels::cpu
