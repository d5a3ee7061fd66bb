// ThreadPool::parallel_for(n, align, fn), the split every kernel front end
// uses: the chunks cover [0, n) exactly once, every boundary but n is a
// multiple of align (the packed matmul needs whole groups of 16 rows), at
// most one chunk per thread, and a single chunk runs on the calling thread.
// (Kept with the kernels, whose contract it is; the pool itself is tested
// in tests/core.)
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/thread_pool.h"

namespace pagoda {
namespace {

TEST(ParallelForAlign, ChunksCoverOnceAndAreAligned) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t align : {1, 4, 16}) {
      for (int64_t n : {0, 1, 5, 15, 16, 17, 31, 33, 64, 100, 163, 1000}) {
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        pool.parallel_for(n, align, [&](int64_t b, int64_t e) {
          std::lock_guard<std::mutex> lock(mu);
          chunks.emplace_back(b, e);
        });
        SCOPED_TRACE(::testing::Message() << "threads " << threads << " align " << align << " n " << n);
        std::sort(chunks.begin(), chunks.end());
        EXPECT_LE(static_cast<int>(chunks.size()), threads);
        int64_t at = 0;
        for (auto [b, e] : chunks) {
          EXPECT_EQ(b, at);
          EXPECT_LT(b, e);
          EXPECT_EQ(b % align, 0);
          if (e != n) {
            EXPECT_EQ(e % align, 0);
          }
          at = e;
        }
        EXPECT_EQ(at, n);
      }
    }
  }
}

TEST(ParallelForAlign, SingleChunkRunsOnTheCaller) {
  ThreadPool pool(3);
  const auto caller = std::this_thread::get_id();
  std::thread::id ran;
  pool.parallel_for(16, 16, [&](int64_t, int64_t) { ran = std::this_thread::get_id(); });
  EXPECT_EQ(ran, caller);
}

TEST(ParallelForAlign, OldOverloadStillSplits) {
  ThreadPool pool(2);
  std::mutex mu;
  int64_t total = 0;
  int calls = 0;
  pool.parallel_for(101, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    total += e - b;
    ++calls;
  });
  EXPECT_EQ(total, 101);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace pagoda
