// Registration of each ISA's kernels into its table (cpu/kernel_table.h).
// A register_*_<isa> function is compiled with that ISA's flags: call it only
// when isa_supported(<isa>) (kernels_for does).
#pragma once

#include "kernels/cpu/kernel_table.h"

namespace pagoda::kernels::cpu {

// Row-layout reference kernels (matmul_scalar.cc).
void register_matmul_scalar(IsaKernels& k);
void register_attention_scalar(IsaKernels& k);
// dot_f32, the layer ops and the activation quantizers (ops_<isa>.cc).
void register_ops_scalar(IsaKernels& k);

#if defined(__x86_64__)
// k.packed for every packable kind (packed_<isa>.cc).
void register_packed_avx2(IsaKernels& k);
void register_packed_avx512(IsaKernels& k);
void register_attention_avx2(IsaKernels& k);
void register_attention_avx512(IsaKernels& k);
void register_ops_avx2(IsaKernels& k);
void register_ops_avx512(IsaKernels& k);
// k.unpacked for F32/F16/BF16 (unpacked_<isa>.cc).
void register_unpacked_avx2(IsaKernels& k);
void register_unpacked_avx512(IsaKernels& k);
#endif

}  // namespace pagoda::kernels::cpu
