// SnapKV's selection (kv/snapkv.h) on hand-made votes.
#include "kv/snapkv.h"

#include <gtest/gtest.h>

#include <vector>

namespace pagoda {
namespace {

TEST(SnapKv, ShortPromptsKeepEverything) {
  const std::vector<float> votes = {0.1f, 0.5f, 0.2f};
  EXPECT_EQ(snapkv_select(votes, 1, 3, 1), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(snapkv_select(votes, 2, 8, 3), (std::vector<int32_t>{0, 1, 2}));
}

TEST(SnapKv, KeepsTheWindowAndTheMostVotedPositions) {
  //                            0     1     2     3     4     5     6     7     8     9
  const std::vector<float> votes = {0.0f, 0.9f, 0.0f, 0.0f, 0.3f, 0.0f, 0.6f, 0.0f, 0.0f, 0.0f};
  // Window 2 (positions 8, 9), budget 5: the 3 best of 0..7 without pooling.
  EXPECT_EQ(snapkv_select(votes, 2, 5, 1), (std::vector<int32_t>{1, 4, 6, 8, 9}));
  // Pooling over 3 spreads each peak to its neighbours: 0, 1, 2 share 0.9,
  // then 5, 6, 7 share 0.6; ties go to the earlier position.
  EXPECT_EQ(snapkv_select(votes, 2, 6, 3), (std::vector<int32_t>{0, 1, 2, 5, 8, 9}));
  // A budget one above the window keeps the single best earlier position.
  EXPECT_EQ(snapkv_select(votes, 4, 5, 1), (std::vector<int32_t>{1, 6, 7, 8, 9}));
}

TEST(SnapKv, PoolingStaysInsideThePrompt) {
  // A peak inside the window must not pull its neighbour before it in:
  // position 4 pools 0.2 (not 9.0), tied with 3, and the earlier wins.
  const std::vector<float> votes = {0.1f, 0.0f, 0.0f, 0.0f, 0.2f, 9.0f, 9.0f};
  EXPECT_EQ(snapkv_select(votes, 2, 3, 3), (std::vector<int32_t>{3, 5, 6}));
}

}  // namespace
}  // namespace pagoda
