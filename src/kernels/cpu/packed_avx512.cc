// AVX-512 variant of the packed-layout kernels (cpu/packed_tiles_inl.h):
// one zmm is a group of 16 rows, vpdpbusd / vpdpwssd for the integer dots.
// Built with the AVX-512 flags (top-level CMakeLists.txt); only reached
// when isa_supported(kAvx512).
#if defined(__x86_64__)
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/isa.h"
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

// F16D / BF16D (--bf16-dot, AVX-512 only): a zmm of the group is one input
// pair of 16 rows, the token's pair is broadcast, vdpbf16ps adds both
// products: half the instructions of tile_f, one fp32 chain per row and
// token (cpu/matmul_scalar.cc's dot_bf16_pairs_row is its exact reference).
template <int RG, int T>
void tile_bf16d(const MatmulArgs& a, int64_t g, int64_t t0) {
  const uint8_t* w[RG];
  for (int r = 0; r < RG; ++r) w[r] = a.wp + (g + r) * a.group_bytes;
  const uint16_t* x[T];
  for (int t = 0; t < T; ++t) x[t] = a.act.bf16 + (t0 + t) * a.act.bf16_stride;
  VF acc[RG][T];
  fill(acc, V::zero_f());
  const int64_t np = (a.n_in + 1) / 2;
  for (int64_t p = 0; p < np; ++p) {
    VI wv[RG];
    for (int r = 0; r < RG; ++r) wv[r] = V::load_i(w[r] + p * 64);
    for (int t = 0; t < T; ++t) {
      uint32_t pair;
      std::memcpy(&pair, x[t] + 2 * p, 4);
      const VI xb = V::set1_i32(static_cast<int32_t>(pair));
      for (int r = 0; r < RG; ++r) acc[r][t] = V::dot_bf16(acc[r][t], wv[r], xb);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < RG; ++r) store_group(a, t0 + t, g + r, acc[r][t]);
}

template <int RG, int T>
struct KBF16D {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_bf16d<RG, T>(a, g, t); }
};

// The 32-element integer kinds' prefill tiles in both shapes of
// cpu::int8_tiles(), chosen at each call; the work split follows the shape
// the table was built with (a split into multiples of the other shape's
// groups only costs a pair or single-group tile at a chunk's end).
template <template <int, int> class K, int RGd>
void set_packed_int8(IsaKernels& k, WKind kind) {
  k.packed[static_cast<int>(kind)] = rows_by_int8_tiles<packed_rows<K, 2, 6, RGd>, packed_rows<K, 3, 4, RGd>>;
  k.packed_tile_groups[static_cast<int>(kind)][0] = int8_tiles() == Int8Tiles::k3x4 ? 3 : 2;
  k.packed_tile_groups[static_cast<int>(kind)][1] = RGd;
}

template <template <int, int> class K, template <int, int> class KX, class E, int RG, int T, int RGd>
void set_packed_expanded_int8(IsaKernels& k, WKind kind) {
  k.packed[static_cast<int>(kind)] = rows_by_int8_tiles<packed_rows_expanded<K, KX, E, RG, T, RGd, 2, 6>,
                                                        packed_rows_expanded<K, KX, E, RG, T, RGd, 3, 4>>;
  k.packed_tile_groups[static_cast<int>(kind)][0] = int8_tiles() == Int8Tiles::k3x4 ? 3 : 2;
  k.packed_tile_groups[static_cast<int>(kind)][1] = RGd;
}

}  // namespace

void register_packed_avx512(IsaKernels& k) {
  set_packed_expanded_int8<KQ4_0, KXQ<PQ4_0>::K, PX<PQ4_0>, 3, 3, 4>(k, WKind::kQ4_0);
  set_packed_int8<KQ8_0, 4>(k, WKind::kQ8_0);
  set_packed<KQ8_0R, 4, 6, 8>(k, WKind::kQ8_0R);
  set_packed_expanded_int8<KQ4_1, KXQ<PQ4_1>::K, PX<PQ4_1>, 2, 4, 4>(k, WKind::kQ4_1);
  set_packed_expanded_int8<KQ5_0, KXQ<PQ5_0>::K, PX<PQ5_0>, 2, 4, 4>(k, WKind::kQ5_0);
  set_packed_expanded_int8<KQ5_1, KXQ<PQ5_1>::K, PX<PQ5_1>, 2, 4, 4>(k, WKind::kQ5_1);
  set_packed_expanded<KQ4_K, KXK45<PQ4_0>::K, XK45<PQ4_0>, 2, 4, 4, 2, 4>(k, WKind::kQ4_K);
  set_packed_expanded<KQ5_K, KXK45<PQ5_0>::K, XK45<PQ5_0>, 2, 4, 4, 2, 4>(k, WKind::kQ5_K);
  set_packed_expanded<KQ6_K, KXK16<true>::K, XK16<true>, 2, 4, 4, 2, 4>(k, WKind::kQ6_K);
  set_packed<KQ2_K, 2, 4, 4>(k, WKind::kQ2_K);
  set_packed_expanded<KQ3_K, KXK16<false>::K, XK16<false>, 2, 4, 4, 2, 4>(k, WKind::kQ3_K);
  set_packed_expanded_int8<KIQ4_NL, KXQ<PIQ4NL>::K, PX<PIQ4NL>, 2, 4, 4>(k, WKind::kIQ4_NL);
  set_packed_expanded<KIQ4_XS, KXIQ4XS, XIQ4XS, 2, 4, 4, 2, 4>(k, WKind::kIQ4_XS);
  set_packed<KF32, 3, 8, 8>(k, WKind::kF32);
  set_packed<KF16, 3, 8, 8>(k, WKind::kF16);
  set_packed<KBF16, 3, 8, 8>(k, WKind::kBF16);
  if (host_has_bf16_dot()) {  // vdpbf16ps: not every AVX-512 host has it
    set_packed<KBF16D, 3, 8, 8>(k, WKind::kF16D);
    set_packed<KBF16D, 3, 8, 8>(k, WKind::kBF16D);
  }
}

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
