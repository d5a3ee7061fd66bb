// AVX-512 instantiation of paged attention (cpu/attention_inl.h). Built with
// the AVX-512 flags (top-level CMakeLists.txt); only reached when
// isa_supported(kAvx512).
#if defined(__x86_64__)
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/simd_avx512.h"

namespace pagoda::kernels::cpu {
namespace {

using V = avx512::V;

// clang-format off
#include "kernels/cpu/attention_inl.h"
// clang-format on

}  // namespace

// Tiles of at least 4 query rows (a GQA decode group of 8 included) score
// from the transposed key tile: bench/kernels/attention_bench.cc measured
// -13..25% decode time at group 8.
void register_attention_avx512(IsaKernels& k) { k.attention = paged_attention_kernel<4, 4>; }

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
