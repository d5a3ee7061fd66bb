#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace pagoda {
namespace {

TEST(BlockPool, AllocatesUntilEmpty) {
  BlockPool pool(3);
  EXPECT_EQ(pool.num_blocks(), 3);
  EXPECT_EQ(pool.num_free(), 3);
  std::vector<int32_t> got;
  for (int i = 0; i < 3; ++i) {
    std::optional<BlockId> b = pool.allocate();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(pool.ref_count(*b), 1);
    got.push_back(b->value);
  }
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.num_free(), 0);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_TRUE(pool.check_invariants().is_ok());
}

TEST(BlockPool, RefCountingAndLifoReuse) {
  BlockPool pool(4);
  BlockId a = *pool.allocate();
  BlockId b = *pool.allocate();
  pool.incref(a);
  EXPECT_EQ(pool.ref_count(a), 2);
  pool.decref(a);
  EXPECT_EQ(pool.ref_count(a), 1);
  EXPECT_EQ(pool.num_free(), 2);
  pool.decref(a);
  EXPECT_EQ(pool.ref_count(a), 0);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(*pool.allocate(), a);  // most recently freed first
  pool.decref(b);
  EXPECT_TRUE(pool.check_invariants().is_ok());
}

TEST(BlockPool, EmptyPool) {
  BlockPool pool(0);
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_TRUE(pool.check_invariants().is_ok());
}

TEST(BlockPoolDeathTest, DecrefOfFreeBlockChecks) {
  BlockPool pool(2);
  BlockId a = *pool.allocate();
  pool.decref(a);
  EXPECT_DEATH(pool.decref(a), "CHECK failed");
  EXPECT_DEATH(pool.incref(a), "CHECK failed");
  EXPECT_DEATH(pool.ref_count(BlockId{2}), "CHECK failed");
}

TEST(BlockPool, RandomOperationsKeepInvariants) {
  const uint32_t seed = 11;
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937 rng(seed);
  BlockPool pool(7);
  std::vector<int32_t> model(7, 0);  // expected ref counts
  for (int step = 0; step < 2000; ++step) {
    int op = rng() % 3;
    int32_t b = rng() % 7;
    if (op == 0) {
      std::optional<BlockId> got = pool.allocate();
      bool any_free = std::count(model.begin(), model.end(), 0) > 0;
      ASSERT_EQ(got.has_value(), any_free);
      if (got) {
        ASSERT_EQ(model[got->value], 0);
        model[got->value] = 1;
      }
    } else if (op == 1 && model[b] > 0) {
      pool.incref(BlockId{b});
      ++model[b];
    } else if (op == 2 && model[b] > 0) {
      pool.decref(BlockId{b});
      --model[b];
    }
    for (int32_t i = 0; i < 7; ++i) ASSERT_EQ(pool.ref_count(BlockId{i}), model[i]);
    ASSERT_EQ(pool.num_free(), std::count(model.begin(), model.end(), 0));
    Status st = pool.check_invariants();
    ASSERT_TRUE(st.is_ok()) << st.message();
  }
}

}  // namespace
}  // namespace pagoda
