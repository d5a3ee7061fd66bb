// How a sliding-window model's KV layers split into groups of equally many
// layers (vLLM's hybrid allocator): each group's K/V for one block fills one
// page of the shared pool, so memory moves freely between full-attention
// and sliding-window layers. Full-attention layers form the first groups,
// sliding-window layers the rest; within a page a layer has a fixed slot.
// The page size is gcd(full layers, sliding layers) layers: gemma3-1b's 4
// global and 22 local layers make 13 groups of 2, gpt-oss's 12 and 12 make
// 2 groups of 12. KVCacheManager::enable_kv_groups takes the counts.
#pragma once

#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

namespace pagoda {

struct KVGroupLayout {
  int32_t num_groups = 1;       // 1: no groups, a page holds every layer
  int32_t num_full_groups = 1;  // groups [0, num_full_groups) are full attention
  int32_t layers_per_page = 0;
  int32_t window = 0;          // the sliding layers' window in tokens
  std::vector<int32_t> group;  // per KV layer
  std::vector<int32_t> slot;   // per KV layer: its place within the page

  bool grouped() const { return num_groups > 1; }

  // From each KV layer's sliding flag. No groups unless both kinds exist.
  static KVGroupLayout make(std::span<const uint8_t> sliding, int32_t window) {
    KVGroupLayout l;
    int32_t num_sliding = 0;
    for (uint8_t s : sliding) num_sliding += s ? 1 : 0;
    const auto num_full = static_cast<int32_t>(sliding.size()) - num_sliding;
    if (num_sliding == 0 || num_full == 0 || window <= 0) return l;
    const int32_t g = std::gcd(num_full, num_sliding);
    l.layers_per_page = g;
    l.num_full_groups = num_full / g;
    l.num_groups = l.num_full_groups + num_sliding / g;
    l.window = window;
    int32_t next_full = 0, next_sliding = 0;
    for (uint8_t s : sliding) {
      const int32_t i = s ? num_full + next_sliding++ : next_full++;  // the layer's place among all
      l.group.push_back(i / g);
      l.slot.push_back(i % g);
    }
    return l;
  }
};

}  // namespace pagoda
