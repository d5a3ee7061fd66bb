// AVX-512 variant of the packed-layout kernels (cpu/packed_tiles_inl.h):
// one zmm is a group of 16 rows, vpdpbusd / vpdpwssd for the integer dots.
// Built with the AVX-512 flags (top-level CMakeLists.txt); only reached
// when isa_supported(kAvx512).
#if defined(__x86_64__)
#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/pack.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/ref/blocks.h"

namespace pagoda::kernels::cpu {
namespace {

using V = avx512::V;

// clang-format off
#include "kernels/cpu/packed_tiles_inl.h"
// clang-format on

}  // namespace

void register_packed_avx512(IsaKernels& k) {
  auto set = [&](WKind kind, RowsFn fn) { k.packed[static_cast<int>(kind)] = fn; };
  set(WKind::kQ4_0, packed_rows<KQ4_0, 3, 3, 4>);
  set(WKind::kQ8_0, packed_rows<KQ8_0, 2, 6, 4>);
  set(WKind::kQ8_0R, packed_rows<KQ8_0R, 4, 6, 8>);
  set(WKind::kQ4_1, packed_rows<KQ4_1, 2, 4, 4>);
  set(WKind::kQ5_0, packed_rows<KQ5_0, 2, 4, 4>);
  set(WKind::kQ5_1, packed_rows<KQ5_1, 2, 4, 4>);
  set(WKind::kQ4_K, packed_rows<KQ4_K, 2, 4, 8>);
  set(WKind::kQ5_K, packed_rows<KQ5_K, 2, 4, 4>);
  set(WKind::kQ6_K, packed_rows<KQ6_K, 2, 4, 4>);
  set(WKind::kQ2_K, packed_rows<KQ2_K, 2, 4, 4>);
  set(WKind::kQ3_K, packed_rows<KQ3_K, 2, 4, 4>);
  set(WKind::kIQ4_NL, packed_rows<KIQ4_NL, 2, 4, 4>);
  set(WKind::kIQ4_XS, packed_rows<KIQ4_XS, 2, 4, 4>);
  set(WKind::kF32, packed_rows<KF32, 3, 8, 8>);
  set(WKind::kF16, packed_rows<KF16, 3, 8, 8>);
  set(WKind::kBF16, packed_rows<KBF16, 3, 8, 8>);
}

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
