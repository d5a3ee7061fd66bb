#include "kernels/cpu/isa.h"

#include <cstdio>
#include <cstdlib>

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

}  // namespace

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
