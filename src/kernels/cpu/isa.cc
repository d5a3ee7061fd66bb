#include "kernels/cpu/isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "core/check.h"

namespace pagoda::kernels::cpu {
namespace {

bool host_has(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
#if defined(__x86_64__) && defined(__GNUC__)
    case Isa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
             __builtin_cpu_supports("avx512dq");
#endif
    default: return false;
  }
}

Isa& active_slot() {
  static Isa isa = isa_from_env(std::getenv("PAGODA_ISA"));
  return isa;
}

std::atomic<int>& int8_tiles_slot() {
  static std::atomic<int> shape = [] {
    const char* env = std::getenv("PAGODA_INT8_TILES");
    if (env != nullptr && *env != '\0') {
      const std::string_view v(env);
      if (v == "2x6") return static_cast<int>(Int8Tiles::k2x6);
      if (v == "3x4") return static_cast<int>(Int8Tiles::k3x4);
      std::fprintf(stderr, "pagoda: unknown PAGODA_INT8_TILES=%s (2x6|3x4); choosing by CPU\n", env);
    }
    return static_cast<int>(host_is_amd_family_at_least(0x1a) ? Int8Tiles::k3x4 : Int8Tiles::k2x6);
  }();
  return shape;
}

}  // namespace

bool host_is_amd_family_at_least(unsigned family) {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  if (std::strcmp(vendor, "AuthenticAMD") != 0 || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return ((eax >> 8) & 0xf) + ((eax >> 20) & 0xff) >= family;
#else
  (void)family;
  return false;
#endif
}

Int8Tiles int8_tiles() { return static_cast<Int8Tiles>(int8_tiles_slot().load(std::memory_order_relaxed)); }

void set_int8_tiles(Int8Tiles shape) { int8_tiles_slot().store(static_cast<int>(shape), std::memory_order_relaxed); }

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa_name(isa) == name) return isa;
  return std::nullopt;
}

bool isa_supported(Isa isa) { return host_has(isa); }

bool host_has_bf16_dot() {
#if defined(__x86_64__) && defined(__GNUC__)
  return host_has(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

Isa best_isa() {
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa isa_from_env(const char* value) {
  const Isa best = best_isa();
  if (value == nullptr || *value == '\0') return best;
  const auto forced = isa_from_name(value);
  if (!forced) {
    std::fprintf(stderr, "pagoda: unknown PAGODA_ISA=%s (scalar|avx2|avx512); using %s\n", value,
                 isa_name(best).data());
    return best;
  }
  if (!isa_supported(*forced)) {
    std::fprintf(stderr, "pagoda: PAGODA_ISA=%s not supported on this CPU; using %s\n", value, isa_name(best).data());
    return best;
  }
  return *forced;
}

Isa active_isa() { return active_slot(); }

void set_active_isa(Isa isa) {
  PAGODA_CHECK(isa_supported(isa));
  active_slot() = isa;
}

}  // namespace pagoda::kernels::cpu
