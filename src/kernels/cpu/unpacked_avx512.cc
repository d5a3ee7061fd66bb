// AVX-512 instantiation of the float matmul over the file layout
// (cpu/unpacked_inl.h). Built with the AVX-512 flags (top-level
// CMakeLists.txt); only reached when isa_supported(Isa::kAvx512) holds.
#if defined(__x86_64__)
#include <cstdint>
#include <cstring>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/simd_avx512.h"

namespace pagoda::kernels::cpu {
namespace {

using V = avx512::V;

// clang-format off
#include "kernels/cpu/unpacked_inl.h"
// clang-format on

}  // namespace

// 2 rows x 4 tokens: 8 of the 32 zmm registers accumulate.
void register_unpacked_avx512(IsaKernels& k) { register_unpacked<2, 4>(k); }

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
