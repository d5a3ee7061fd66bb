// avx2 variant of the matmul kernels. Built with per-file flags (see the
// top-level CMakeLists.txt); only called after isa_supported() says so.
#if defined(__x86_64__)
#include <immintrin.h>
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "matmul_avx2.cc needs -mavx2 -mfma -mf16c"
#endif
#if defined(__AVX512F__)
#error "matmul_avx2.cc must be built without AVX-512 (-mno-avx512f) to stay honest"
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
// clang-format on
}  // namespace

const IsaKernels& kernels_avx2() {
  static const IsaKernels k = [] {
    IsaKernels t = make_isa_table();
    use_packed_avx2(t);
    return t;
  }();
  return k;
}

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
