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

int64_t num_groups(const WeightView& w) { return (w.n_out + cpu::kPackRows - 1) / cpu::kPackRows; }

}  // namespace

void PackedWeights::Free::operator()(uint8_t* p) const { std::free(p); }

bool repack_enabled() {
  const char* v = std::getenv("PAGODA_REPACK");
  const bool on = v == nullptr || std::strcmp(v, "0") != 0;
  if (!on) {
    static const bool warned = [] {
      std::fprintf(stderr,
                   "pagoda: PAGODA_REPACK=0: weights stay in the file layout and matmul runs the scalar "
                   "reference kernels (slow)\n");
      return true;
    }();
    (void)warned;
  }
  return on;
}

bool can_pack(const WeightView& w) {
  const int kind = cpu::wkind_of(w.type, w.row_scaled);
  if (kind < 0 || w.n_out <= 0 || w.data == nullptr) return false;
  return cpu::packable(static_cast<cpu::WKind>(kind)) && cpu::active_kernels().packed[kind] != nullptr;
}

size_t PackedWeights::pack(WeightView* const* ws, int n, ThreadPool& pool,
                           const std::function<void(const WeightView&)>& on_packed) {
  constexpr size_t kAlign = 64;
  auto bytes_of = [](const WeightView& w) {
    const auto kind = static_cast<cpu::WKind>(cpu::wkind_of(w.type, w.row_scaled));
    const size_t bytes = cpu::packed_group_bytes(kind, w.n_in) * static_cast<size_t>(num_groups(w));
    return (bytes + kAlign - 1) / kAlign * kAlign;
  };
  size_t total = 0;
  for (int i = 0; i < n; ++i)
    if (ws[i]->packed == nullptr && can_pack(*ws[i])) total += bytes_of(*ws[i]);
  if (total == 0) return 0;
  // One arena: small matrices do not each round up to a 2 MiB page.
  uint8_t* arena = alloc_huge(total);
  if (arena == nullptr) {
    std::fprintf(stderr,
                 "pagoda: cannot allocate %zu bytes to repack weights; matmul runs the scalar reference kernels\n",
                 total);
    return 0;
  }
  buffers_.emplace_back(arena);
  size_t used = 0;
  for (int i = 0; i < n; ++i) {
    WeightView& w = *ws[i];
    if (w.packed != nullptr || !can_pack(w)) continue;
    const auto kind = static_cast<cpu::WKind>(cpu::wkind_of(w.type, w.row_scaled));
    const size_t gb = cpu::packed_group_bytes(kind, w.n_in);
    uint8_t* out = arena + used;
    used += bytes_of(w);
    pool.parallel_for(num_groups(w), 1, [&](int64_t g0, int64_t g1) {
      cpu::pack_groups(kind, static_cast<const uint8_t*>(w.data), w.row_bytes(), w.n_in, w.n_out, g0, g1,
                       out + g0 * gb);
    });
    w.packed = out;
    if (on_packed) on_packed(w);
  }
  bytes_ += used;
  return used;
}

}  // namespace pagoda::kernels
