// Portable instantiation of the layer ops and activation quantizers
// (cpu/ops_inl.h) over the scalar vocabulary.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/simd_scalar.h"

namespace pagoda::kernels::cpu {
namespace {

using V = scalar::V;

// clang-format off
#include "kernels/cpu/ops_inl.h"
// clang-format on

}  // namespace

void register_ops_scalar(IsaKernels& k) { register_ops(k); }

}  // namespace pagoda::kernels::cpu
