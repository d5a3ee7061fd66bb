// Registration of the packed-layout kernels (cpu/pack.h) into an ISA table.
#pragma once

#include "kernels/cpu/kernel_table.h"

namespace pagoda::kernels::cpu {

// Fill k.packed for every packable kind (packed_avx512.cc / packed_avx2.cc).
void use_packed512(IsaKernels& k);
void use_packed_avx2(IsaKernels& k);

}  // namespace pagoda::kernels::cpu
