// AVX2 instantiation of the layer ops and activation quantizers
// (cpu/ops_inl.h). Built with the AVX2 flags and without AVX-512 (top-level CMakeLists.txt);
// only reached when isa_supported(kAvx2).
#if defined(__x86_64__)
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/simd_avx2.h"

namespace pagoda::kernels::cpu {
namespace {

using V = avx2::V;

// clang-format off
#include "kernels/cpu/ops_inl.h"
// clang-format on

}  // namespace

void register_ops_avx2(IsaKernels& k) { register_ops(k); }

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
