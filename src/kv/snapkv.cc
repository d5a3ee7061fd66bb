#include "kv/snapkv.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"

namespace pagoda {

std::vector<int32_t> snapkv_select(std::span<const float> votes, int32_t window, int32_t budget, int32_t pool) {
  PAGODA_CHECK(window >= 1 && window < budget && pool >= 1);
  const auto n = static_cast<int32_t>(votes.size());
  std::vector<int32_t> keep(static_cast<size_t>(std::min(budget, n)));
  if (n <= budget) {
    std::iota(keep.begin(), keep.end(), 0);
    return keep;
  }
  const int32_t prefix = n - window;  // candidates: before the observation window
  const int32_t half = pool / 2;
  std::vector<float> pooled(static_cast<size_t>(prefix));
  for (int32_t j = 0; j < prefix; ++j) {
    const int32_t lo = std::max(0, j - half), hi = std::min(prefix - 1, j + half);
    pooled[j] = *std::max_element(votes.begin() + lo, votes.begin() + hi + 1);
  }
  std::vector<int32_t> order(static_cast<size_t>(prefix));
  std::iota(order.begin(), order.end(), 0);
  const int32_t take = budget - window;
  std::partial_sort(order.begin(), order.begin() + take, order.end(),
                    [&](int32_t a, int32_t b) { return pooled[a] != pooled[b] ? pooled[a] > pooled[b] : a < b; });
  std::copy(order.begin(), order.begin() + take, keep.begin());
  std::sort(keep.begin(), keep.begin() + take);
  std::iota(keep.begin() + take, keep.end(), prefix);
  return keep;
}

}  // namespace pagoda
