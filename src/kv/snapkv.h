// SnapKV's selection (Li et al. 2024, "SnapKV: LLM Knows What You are
// Looking for Before Generation"): after a prompt is computed, each KV head
// keeps the prompt positions its last queries (the observation window)
// attend to most, clustered by pooling, plus the window itself.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pagoda {

// votes[j]: the attention mass the observation window puts on cache
// position j (j < n). Returns min(budget, n) positions, ascending: the last
// `window` always, and the budget - window earlier ones whose votes,
// max-pooled over `pool` neighbours (pool / 2 each side), are highest (ties:
// the earlier first). 1 <= window < budget.
std::vector<int32_t> snapkv_select(std::span<const float> votes, int32_t window, int32_t budget, int32_t pool);

}  // namespace pagoda
