// AVX2 variant of the packed-layout kernels (cpu/packed_tiles_inl.h): a
// group of 16 rows is a pair of ymm (rows 0-7, 8-15); integer dots with
// vpmaddubsw + vpmaddwd (no saturation: packed weights are <= 63, or Q8_0
// with its sign moved onto the activations). Built with the AVX2 flags and
// without AVX-512 (top-level CMakeLists.txt).
#if defined(__x86_64__)
#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/pack.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/ref/blocks.h"

namespace pagoda::kernels::cpu {
namespace {

using V = avx2::V;

// clang-format off
#include "kernels/cpu/packed_tiles_inl.h"
// clang-format on

}  // namespace

void register_packed_avx2(IsaKernels& k) {
  auto set = [&](WKind kind, RowsFn fn) { k.packed[static_cast<int>(kind)] = fn; };
  set(WKind::kQ4_0, packed_rows<KQ4_0, 1, 4, 2>);
  set(WKind::kQ8_0, packed_rows<KQ8_0, 1, 4, 2>);
  set(WKind::kQ8_0R, packed_rows<KQ8_0R, 1, 4, 2>);
  set(WKind::kQ4_1, packed_rows<KQ4_1, 1, 4, 2>);
  set(WKind::kQ5_0, packed_rows<KQ5_0, 1, 4, 2>);
  set(WKind::kQ5_1, packed_rows<KQ5_1, 1, 4, 2>);
  set(WKind::kQ4_K, packed_rows<KQ4_K, 1, 4, 2>);
  set(WKind::kQ5_K, packed_rows<KQ5_K, 1, 4, 2>);
  set(WKind::kQ6_K, packed_rows<KQ6_K, 1, 4, 2>);
  set(WKind::kQ2_K, packed_rows<KQ2_K, 1, 4, 2>);
  set(WKind::kQ3_K, packed_rows<KQ3_K, 1, 4, 2>);
  set(WKind::kIQ4_NL, packed_rows<KIQ4_NL, 1, 4, 2>);
  set(WKind::kIQ4_XS, packed_rows<KIQ4_XS, 1, 4, 2>);
  set(WKind::kF32, packed_rows<KF32, 1, 4, 2>);
  set(WKind::kF16, packed_rows<KF16, 1, 4, 2>);
  set(WKind::kBF16, packed_rows<KBF16, 1, 4, 2>);
}

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
