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

// An AMD CPU of this family or later (CPUID family with its extension:
// 0x19 Zen 3 / Zen 4, 0x1a Zen 5); false on other vendors.
bool host_is_amd_family_at_least(unsigned family);

// The register tile shape of the AVX-512 prefill tiles for 32-element
// integer blocks (Q8_0, and Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL through
// their expanded copy): 2 groups x 6 tokens, or 3 groups x 4 tokens
// (a broadcast activation feeds 3 weight vectors instead of 2). Which is
// faster depends on the core: 3 x 4 on Zen 5, 2 x 6 on Ice Lake
// (bench/RESULTS.md 2026-12-06 03:05 and 2026-12-07 21:45). Both give the
// same bits.
enum class Int8Tiles { k2x6 = 0, k3x4 = 1 };
// PAGODA_INT8_TILES=2x6|3x4 if set, else 3x4 on AMD family 0x1a and later,
// else 2x6.
Int8Tiles int8_tiles();
// Switches the shape (tests, benchmarks); safe against concurrent matmuls
// (each call reads the shape once).
void set_int8_tiles(Int8Tiles shape);

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
