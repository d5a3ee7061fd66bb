#include "kv/kv_groups.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

namespace pagoda {
namespace {

std::vector<uint8_t> pattern(int32_t layers, int32_t period) {  // gemma3 / gpt-oss: every period-th layer global
  std::vector<uint8_t> s;
  for (int32_t i = 0; i < layers; ++i) s.push_back(i % period < period - 1 ? 1 : 0);
  return s;
}

void expect_partition(const KVGroupLayout& l, const std::vector<uint8_t>& sliding) {
  std::set<std::pair<int32_t, int32_t>> places;
  for (size_t i = 0; i < sliding.size(); ++i) {
    EXPECT_TRUE(places.insert({l.group[i], l.slot[i]}).second) << "layer " << i << " shares a place";
    EXPECT_LT(l.slot[i], l.layers_per_page);
    EXPECT_EQ(l.group[i] >= l.num_full_groups, sliding[i] != 0) << "layer " << i << " in the wrong kind of group";
  }
  EXPECT_EQ(static_cast<int32_t>(places.size()), l.num_groups * l.layers_per_page) << "a page has an empty slot";
}

TEST(KVGroupLayout, RealShapesSplitIntoEqualPages) {
  const auto gemma = pattern(26, 6);  // gemma3-1b: 4 global, 22 local
  const KVGroupLayout g = KVGroupLayout::make(gemma, 512);
  EXPECT_EQ(g.layers_per_page, 2);
  EXPECT_EQ(g.num_groups, 13);
  EXPECT_EQ(g.num_full_groups, 2);
  EXPECT_EQ(g.window, 512);
  expect_partition(g, gemma);
  const auto oss = pattern(24, 2);  // gpt-oss-20b: alternating
  const KVGroupLayout o = KVGroupLayout::make(oss, 128);
  EXPECT_EQ(o.layers_per_page, 12);
  EXPECT_EQ(o.num_groups, 2);
  EXPECT_EQ(o.num_full_groups, 1);
  expect_partition(o, oss);
  const auto fixture = pattern(6, 6);  // the gemma3 fixture: 1 global, 5 local
  const KVGroupLayout f = KVGroupLayout::make(fixture, 16);
  EXPECT_EQ(f.layers_per_page, 1);
  EXPECT_EQ(f.num_groups, 6);
  expect_partition(f, fixture);
}

TEST(KVGroupLayout, NoGroupsWithoutBothKinds) {
  EXPECT_FALSE(KVGroupLayout::make(std::vector<uint8_t>(8, 0), 512).grouped());
  EXPECT_FALSE(KVGroupLayout::make(std::vector<uint8_t>(8, 1), 512).grouped());
  EXPECT_FALSE(KVGroupLayout::make(pattern(12, 6), 0).grouped());
}

}  // namespace
}  // namespace pagoda
