// AVX2 variant of the packed-layout kernels (cpu/packed_tiles_inl.h): a
// group of 16 rows is a pair of ymm (rows 0-7, 8-15); integer dots with
// vpmaddubsw + vpmaddwd (no saturation: packed weights are <= 63, or Q8_0
// with its sign moved onto the activations). Built with the AVX2 flags and
// without AVX-512 (top-level CMakeLists.txt).
#if defined(__x86_64__)
#include <algorithm>
#include <array>
#include <cstdlib>
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
  set_packed<KQ4_0, 1, 4, 2>(k, WKind::kQ4_0);
  set_packed<KQ8_0, 1, 4, 2>(k, WKind::kQ8_0);
  set_packed<KQ8_0R, 1, 4, 2>(k, WKind::kQ8_0R);
  set_packed<KQ4_1, 1, 4, 2>(k, WKind::kQ4_1);
  set_packed<KQ5_0, 1, 4, 2>(k, WKind::kQ5_0);
  set_packed<KQ5_1, 1, 4, 2>(k, WKind::kQ5_1);
  set_packed<KQ4_K, 1, 4, 2>(k, WKind::kQ4_K);
  set_packed<KQ5_K, 1, 4, 2>(k, WKind::kQ5_K);
  set_packed_expanded<KQ6_K, KXK16<true>::K, XK16<true>, 1, 4, 2, 1, 4>(k, WKind::kQ6_K);
  set_packed<KQ2_K, 1, 4, 2>(k, WKind::kQ2_K);
  set_packed<KQ3_K, 1, 4, 2>(k, WKind::kQ3_K);
  set_packed<KIQ4_NL, 1, 4, 2>(k, WKind::kIQ4_NL);
  set_packed<KIQ4_XS, 1, 4, 2>(k, WKind::kIQ4_XS);
  // Float tiles: 1 group x 6 tokens, 12 ymm accumulators (2 weight ymm, a
  // broadcast: 15 of 16 registers). With 4 tokens the 8 chains just cover
  // two FMA pipes of 4-cycle latency, and a k step's loads and loop count
  // left the tile at ~87-90% of the FMA peak; 6 tokens ran 2-12% faster on
  // Zen 3 (bench/RESULTS.md, "2026-12-07 (16:00-16:45 UTC)").
  set_packed<KF32, 1, 6, 2>(k, WKind::kF32);
  set_packed<KF16, 1, 6, 2>(k, WKind::kF16);
  set_packed<KBF16, 1, 6, 2>(k, WKind::kBF16);
}

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
