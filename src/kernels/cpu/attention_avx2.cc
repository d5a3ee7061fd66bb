// AVX2 instantiation of paged attention (cpu/attention_inl.h). Built with
// the AVX2 flags and without AVX-512 (top-level CMakeLists.txt); only reached when
// isa_supported(kAvx2).
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
#include "kernels/cpu/simd_avx2.h"

namespace pagoda::kernels::cpu {
namespace {

using V = avx2::V;

// clang-format off
#include "kernels/cpu/attention_inl.h"
// clang-format on

}  // namespace

// bench/kernels/attention_bench.cc on Zen 3, transposed key tile against
// per-key dots (CPU time, medians of 3): prefill64 (64 rows) -19..41% for
// f32 and f16; decode at GQA group 8 (8 rows) -20..45% for f16 but +5..30%
// for f32 at ctx 2048 and 8192. Hence 16 rows for f32, 4 for f16.
void register_attention_avx2(IsaKernels& k) { k.attention = paged_attention_kernel<16, 4>; }

}  // namespace pagoda::kernels::cpu
#endif  // __x86_64__
