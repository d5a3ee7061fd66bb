// AVX2 instantiation of the float matmul over the file layout
// (cpu/unpacked_inl.h). Built with the AVX2 flags, without AVX-512 (top-level
// CMakeLists.txt); only reached when isa_supported(Isa::kAvx2) holds.
#if defined(__x86_64__)
#include <cstdint>
#include <cstring>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/simd_avx2.h"

namespace pagoda::kernels::cpu {
namespace {

using V = avx2::V;

// clang-format off
#include "kernels/cpu/unpacked_inl.h"
// clang-format on

}  // namespace

// 2 rows x 2 tokens: 8 of the 16 ymm registers accumulate.
void register_unpacked_avx2(IsaKernels& k) { register_unpacked<2, 2>(k); }

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
