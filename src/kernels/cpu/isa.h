// Runtime instruction-set selection for the CPU kernels. Every SIMD variant
// is compiled in its own translation unit with its own flags; the best one
// the host supports is chosen at start-up (CPUID via __builtin_cpu_supports).
// PAGODA_ISA=scalar|avx2|avx512 forces a path (falls back to the best
// supported one, with a warning, if the host lacks it).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace pagoda::kernels::cpu {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

std::string_view isa_name(Isa isa);
std::optional<Isa> isa_from_name(std::string_view name);

// Compiled in and runnable on this host. AVX-512 means F, BW, VL, DQ and
// VNNI (Ice Lake, Cascade Lake, Zen 4 and later).
bool isa_supported(Isa isa);
// AVX-512 BF16 too (vdpbf16ps: Cooper Lake, Sapphire Rapids, Zen 4 and
// later): only then does the AVX-512 table hold the --bf16-dot kernels.
bool host_has_bf16_dot();
std::vector<Isa> supported_isas();
Isa best_isa();

// The ISA a PAGODA_ISA value asks for: that ISA if it is known and
// supported, else best_isa() (with a warning on stderr); null or empty:
// best_isa().
Isa isa_from_env(const char* value);

// The path matmul() uses now.
Isa active_isa();
// Switches the path (tests, benchmarks). isa must be supported. Not
// thread-safe against concurrent matmul() calls.
void set_active_isa(Isa isa);

}  // namespace pagoda::kernels::cpu
