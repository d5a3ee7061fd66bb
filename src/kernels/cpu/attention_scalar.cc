// Portable instantiation of paged attention (cpu/attention_inl.h) over the
// scalar vocabulary: the path of hosts without AVX2 (and of non-x86 builds).
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
#include "kernels/cpu/simd_scalar.h"

namespace pagoda::kernels::cpu {
namespace {

using V = scalar::V;

// clang-format off
#include "kernels/cpu/attention_inl.h"
// clang-format on

}  // namespace

// Both score paths run on every host (tests/kernels/attention_test.cc).
void register_attention_scalar(IsaKernels& k) { k.attention = paged_attention_kernel<4, 4>; }

}  // namespace pagoda::kernels::cpu
