// avx512 variant of the matmul kernels. Built with per-file flags (see the
// top-level CMakeLists.txt); only called after isa_supported() says so.
#if defined(__x86_64__)
// GCC 12 warns spuriously about its own AVX-512 headers at -O3.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || \
    !defined(__AVX512VNNI__) || !defined(__F16C__) || !defined(__FMA__)
#error "matmul_avx512.cc needs -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mf16c -mfma"
#endif

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/fp16.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/packed_kernels.h"
#include "kernels/ref/blocks.h"

namespace pagoda::kernels::cpu {
namespace {
// clang-format off
#include "kernels/cpu/simd_common_inl.h"
#include "kernels/cpu/tiles_legacy_inl.h"
#include "kernels/cpu/tiles_kquant_inl.h"
#include "kernels/cpu/tiles_float_inl.h"
#include "kernels/cpu/tiles_legacy512_inl.h"
// clang-format on
}  // namespace

const IsaKernels& kernels_avx512() {
  static const IsaKernels k = [] {
    IsaKernels t = make_isa_table();
    use_legacy512(t);
    use_packed512(t);
    return t;
  }();
  return k;
}

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
