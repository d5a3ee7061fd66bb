#include "kernels/packed.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/pack.h"

namespace pagoda::kernels {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Null when the memory is not there.
uint8_t* alloc_huge(size_t bytes) {
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, size) != 0) return nullptr;
#if defined(MADV_HUGEPAGE)
  madvise(p, size, MADV_HUGEPAGE);  // advisory: fine if THP is off
#endif
  return static_cast<uint8_t*>(p);
}

}  // namespace

void PackedWeights::Free::operator()(uint8_t* p) const { std::free(p); }

bool repack_enabled() {
  const char* v = std::getenv("PAGODA_REPACK");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

bool can_pack(const WeightView& w) {
  const int kind = cpu::wkind_of(w.type);
  if (kind < 0 || w.n_out < cpu::kPackRows || w.data == nullptr) return false;
  const auto wk = static_cast<cpu::WKind>(kind);
  if (!cpu::packable(wk) || cpu::kernels_for(cpu::active_isa()).packed[kind] == nullptr) return false;
  switch (cpu::act_format_of(wk)) {
    case cpu::ActFormat::kFloat: return true;
    case cpu::ActFormat::kQ8_32: return w.n_in % 32 == 0;
    case cpu::ActFormat::kQ8_K: return w.n_in % 256 == 0;
  }
  return false;
}

size_t PackedWeights::pack(WeightView* const* ws, int n, ThreadPool& pool,
                           const std::function<void(const WeightView&)>& on_packed) {
  constexpr size_t kAlign = 64;
  auto bytes_of = [](const WeightView& w) {
    const auto kind = static_cast<cpu::WKind>(cpu::wkind_of(w.type));
    return cpu::packed_group_bytes(kind, w.n_in) * static_cast<size_t>(w.n_out / cpu::kPackRows);
  };
  size_t total = 0;
  for (int i = 0; i < n; ++i)
    if (ws[i]->packed == nullptr && can_pack(*ws[i])) total += (bytes_of(*ws[i]) + kAlign - 1) / kAlign * kAlign;
  if (total == 0) return 0;
  // One arena: small matrices do not each round up to a 2 MiB page.
  uint8_t* arena = alloc_huge(total);
  if (arena == nullptr) {  // keep serving from the row layout
    std::fprintf(stderr, "pagoda: cannot allocate %zu bytes to repack weights; using the row layout\n", total);
    return 0;
  }
  buffers_.emplace_back(arena);
  size_t used = 0;
  for (int i = 0; i < n; ++i) {
    WeightView& w = *ws[i];
    if (w.packed != nullptr || !can_pack(w)) continue;
    const auto kind = static_cast<cpu::WKind>(cpu::wkind_of(w.type));
    const int64_t groups = w.n_out / cpu::kPackRows;
    const size_t gb = cpu::packed_group_bytes(kind, w.n_in);
    uint8_t* out = arena + used;
    used += (bytes_of(w) + kAlign - 1) / kAlign * kAlign;
    const auto* src = static_cast<const uint8_t*>(w.data);
    const size_t row_bytes = w.row_bytes();
    const int64_t n_in = w.n_in;
    pool.run([&](int ti, int nt) {
      const int64_t chunk = (groups + nt - 1) / nt;
      const int64_t g0 = std::min<int64_t>(groups, ti * chunk), g1 = std::min<int64_t>(groups, g0 + chunk);
      if (g0 < g1) cpu::pack_groups(kind, src, row_bytes, n_in, g0, g1, out + g0 * gb);
    });
    w.packed = out;
    w.packed_rows = groups * cpu::kPackRows;
    if (on_packed) on_packed(w);
  }
  bytes_ += used;
  return used;
}

}  // namespace pagoda::kernels
