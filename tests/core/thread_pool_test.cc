// ThreadPool: every thread runs each job exactly once, run() returns only
// after all of them finished (their plain writes visible to the caller), and
// parallel_for covers [0, n) with disjoint chunks of the documented shape, for
// 1 thread, fewer items than threads, and many jobs back to back. Writes are
// deliberately non-atomic so the TSan job flags any missing synchronization.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#if defined(__linux__)
#include <sched.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace pagoda {
namespace {

using Chunks = std::vector<std::pair<int64_t, int64_t>>;

// The chunks parallel_for handed out, sorted by begin.
template <class Call>
Chunks collect_chunks(Call call) {
  std::mutex mu;
  Chunks chunks;
  call([&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    chunks.emplace_back(b, e);
  });
  std::sort(chunks.begin(), chunks.end());
  return chunks;
}

// Chunks are non-empty, contiguous and cover [0, n) exactly.
void expect_partition(const Chunks& chunks, int64_t n) {
  int64_t next = 0;
  for (const auto& [b, e] : chunks) {
    EXPECT_EQ(b, next) << "gap or overlap at " << b;
    EXPECT_LT(b, e) << "empty chunk [" << b << ", " << e << ")";
    next = e;
  }
  EXPECT_EQ(next, n);
}

TEST(ThreadPool, NumThreadsIsAtLeastOne) {
  EXPECT_EQ(ThreadPool(0).num_threads(), 1);
  EXPECT_EQ(ThreadPool(-3).num_threads(), 1);
  EXPECT_EQ(ThreadPool(1).num_threads(), 1);
  EXPECT_EQ(ThreadPool(5).num_threads(), 5);
  EXPECT_GE(default_num_threads(), 1);
}

// Holds every slot of a job until all of them started. A thread runs one
// slot at a time, so the slots of a job that passes it ran on that many
// distinct threads: each worker took its own (none was free to take
// another's). Gives up after 10 s (all_arrived() then says so).
class StartBarrier {
 public:
  explicit StartBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    count_.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (count_.load() < n_ && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }
  bool all_arrived() const { return count_.load() >= n_; }

 private:
  const int n_;
  std::atomic<int> count_{0};
};

TEST(ThreadPool, RunCallsEveryThreadIndexOnce) {
  for (int num_threads : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE(num_threads);
    ThreadPool pool(num_threads);
    for (int rep = 0; rep < 100; ++rep) {
      std::vector<int> calls(num_threads, 0);  // plain ints: a slot run twice at once would race
      std::vector<int> seen_count(num_threads, -1);
      std::thread::id first;
      pool.run([&](int ti, int nt) {
        ASSERT_GE(ti, 0);
        ASSERT_LT(ti, num_threads);
        ++calls[ti];
        seen_count[ti] = nt;
        if (ti == 0) first = std::this_thread::get_id();
      });
      for (int i = 0; i < num_threads; ++i) {
        ASSERT_EQ(calls[i], 1) << "thread index " << i << " rep " << rep;
        ASSERT_EQ(seen_count[i], num_threads);
      }
      ASSERT_EQ(first, std::this_thread::get_id()) << "index 0 runs on the caller";
    }
  }
}

TEST(ThreadPool, WorkersRunTheirOwnSlotsOnDistinctThreads) {
  for (int num_threads : {2, 3, 4, 8}) {
    SCOPED_TRACE(num_threads);
    ThreadPool pool(num_threads);
    std::vector<std::thread::id> ids(num_threads);
    StartBarrier barrier(num_threads);
    pool.run([&](int ti, int) {
      ids[ti] = std::this_thread::get_id();
      barrier.arrive_and_wait();
    });
    ASSERT_TRUE(barrier.all_arrived()) << "a worker never started its slot";
    EXPECT_EQ(ids[0], std::this_thread::get_id()) << "the caller is worker 0";
    EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), static_cast<size_t>(num_threads));
  }
}

// Workers asleep on the condition variable (30 ms idle) wake after the
// caller finished an empty slot 0: the caller runs their slots instead of
// waiting for them, each exactly once. A pool that waits for every worker
// never does.
TEST(ThreadPool, CallerTakesTheSlotsOfLateWorkers) {
  ThreadPool pool(3);
  const auto caller = std::this_thread::get_id();
  int taken = 0;
  for (int rep = 0; rep < 10; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    std::vector<int> calls(3, 0);
    std::vector<std::thread::id> ids(3);
    pool.run([&](int ti, int) {
      ++calls[ti];
      ids[ti] = std::this_thread::get_id();
    });
    for (int i = 0; i < 3; ++i) ASSERT_EQ(calls[i], 1) << "slot " << i << " rep " << rep;
    taken += (ids[1] == caller) + (ids[2] == caller);
  }
  EXPECT_GT(taken, 0) << "the caller waited for late workers in all 10 jobs";
}

// A worker that finished its slot takes those of workers that have not
// started theirs: three workers asleep on the condition variable wake one
// after another (on 2 vCPUs, two at most run at once) while the caller
// sleeps in slot 0.
TEST(ThreadPool, AFreeWorkerTakesTheSlotOfALateOne) {
  ThreadPool pool(4);
  int taken = 0;
  for (int rep = 0; rep < 10; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    std::vector<int> calls(4, 0);
    std::vector<std::thread::id> ids(4);
    pool.run([&](int ti, int) {
      ++calls[ti];
      ids[ti] = std::this_thread::get_id();
      // The caller stays in slot 0 for 20 ms, so a slot that is not
      // worker 3's own on worker 3's thread was taken by worker 1 or 2.
      if (ti == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    });
    for (int i = 0; i < 4; ++i) ASSERT_EQ(calls[i], 1) << "slot " << i << " rep " << rep;
    for (int i = 1; i < 4; ++i)
      for (int j = 1; j < 4; ++j) taken += i != j && ids[i] == ids[j];
  }
  // Workers wake one after another (a futex each); the first awake takes
  // the slots of those still asleep at least once in 10 jobs.
  EXPECT_GT(taken, 0) << "every worker ran only its own slot in all 10 jobs";
}

TEST(ThreadPool, RunReturnsOnlyAfterSlowWorkersFinish) {
  ThreadPool pool(4);
  std::vector<int> done(4, 0);
  pool.run([&](int ti, int) {
    // Workers finish well after the caller's own share.
    if (ti != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20 * ti));
    done[ti] = ti + 1;
  });
  for (int i = 0; i < 4; ++i) EXPECT_EQ(done[i], i + 1) << "run() returned before thread " << i << " finished";
}

TEST(ThreadPool, ParallelForPartitionsTheRange) {
  for (int num_threads : {1, 2, 3, 5, 8}) {
    ThreadPool pool(num_threads);
    for (int64_t n : {0, 1, 2, 3, 4, 7, 8, 9, 64, 1000, 1001}) {
      SCOPED_TRACE(::testing::Message() << "threads " << num_threads << " n " << n);
      const Chunks chunks = collect_chunks([&](auto fn) { pool.parallel_for(n, fn); });
      expect_partition(chunks, n);
      EXPECT_LE(chunks.size(), static_cast<size_t>(num_threads));
      // One chunk per thread of ceil(n / threads) items (the last may be shorter).
      const int64_t per_thread = (n + num_threads - 1) / num_threads;
      for (size_t i = 0; i + 1 < chunks.size(); ++i) {
        EXPECT_EQ(chunks[i].second - chunks[i].first, per_thread);
      }
    }
  }
}

TEST(ThreadPool, ParallelForTouchesEveryItemExactlyOnce) {
  ThreadPool pool(3);
  std::vector<int> hits(10007, 0);  // plain ints: overlapping chunks would race
  pool.parallel_for(static_cast<int64_t>(hits.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i] += 1;
  });
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "item " << i;
}

TEST(ThreadPool, AlignedParallelForKeepsBoundariesOnMultiples) {
  for (int num_threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool(num_threads);
    for (int64_t align : {1, 4, 16, 64}) {
      for (int64_t n : {1, 5, 16, 63, 64, 65, 100, 257, 1024}) {
        SCOPED_TRACE(::testing::Message() << "threads " << num_threads << " align " << align << " n " << n);
        const Chunks chunks = collect_chunks([&](auto fn) { pool.parallel_for(n, align, fn); });
        expect_partition(chunks, n);
        EXPECT_LE(chunks.size(), static_cast<size_t>(num_threads));
        const int64_t per_thread = (n + num_threads - 1) / num_threads;
        const int64_t chunk = (per_thread + align - 1) / align * align;
        for (size_t i = 0; i < chunks.size(); ++i) {
          EXPECT_EQ(chunks[i].first % align, 0);
          if (i + 1 < chunks.size()) {
            EXPECT_EQ(chunks[i].second - chunks[i].first, chunk);
          }
        }
      }
    }
  }
}

TEST(ThreadPool, ParallelChunksPartitionsIntoChunksOfTheGivenSize) {
  for (int num_threads : {1, 2, 3, 8}) {
    ThreadPool pool(num_threads);
    for (int64_t chunk : {1, 3, 16, 100}) {
      for (int64_t n : {0, 1, 2, 15, 16, 17, 99, 100, 101, 1000, 1001}) {
        SCOPED_TRACE(::testing::Message() << "threads " << num_threads << " chunk " << chunk << " n " << n);
        const Chunks chunks = collect_chunks([&](auto fn) { pool.parallel_chunks(n, chunk, fn); });
        expect_partition(chunks, n);
        EXPECT_EQ(static_cast<int64_t>(chunks.size()), (n + chunk - 1) / chunk);
        for (const auto& [b, e] : chunks) {
          EXPECT_EQ(b % chunk, 0);
          if (e != n) {
            EXPECT_EQ(e - b, chunk);
          }
        }
      }
    }
  }
}

// A thread that is slow on its chunks ends up with fewer of them: the others
// keep claiming while it works (a static split would give it half).
TEST(ThreadPool, ParallelChunksLetsFastThreadsTakeMoreChunks) {
  ThreadPool pool(2);
  std::mutex mu;
  std::vector<std::pair<std::thread::id, int64_t>> claims;
  const auto caller = std::this_thread::get_id();
  pool.parallel_chunks(40, 1, [&](int64_t b, int64_t) {
    const auto self = std::this_thread::get_id();
    {
      std::lock_guard<std::mutex> lock(mu);
      claims.emplace_back(self, b);
    }
    if (self != caller) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  ASSERT_EQ(claims.size(), 40u);
  const auto by_caller = std::count_if(claims.begin(), claims.end(), [&](const auto& c) { return c.first == caller; });
  EXPECT_GT(by_caller, 30) << "the sleeping worker took " << 40 - by_caller << " of 40 chunks";
}

TEST(ThreadPool, ParallelChunksTouchesEveryItemExactlyOnce) {
  ThreadPool pool(3);
  std::vector<int> hits(10007, 0);  // plain ints: overlapping chunks would race
  pool.parallel_chunks(static_cast<int64_t>(hits.size()), 7, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i] += 1;
  });
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "item " << i;
}

TEST(ThreadPool, SingleChunkRunsOnTheCallingThread) {
  ThreadPool pool(4);
  std::thread::id where;
  int calls = 0;
  // align larger than n: one chunk, run inline.
  pool.parallel_for(10, 64, [&](int64_t b, int64_t e) {
    where = std::this_thread::get_id();
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(where, std::this_thread::get_id());
}

TEST(ThreadPool, OneThreadRunsEverythingInline) {
  ThreadPool pool(1);
  const auto self = std::this_thread::get_id();
  int runs = 0;
  pool.run([&](int ti, int nt) {
    EXPECT_EQ(ti, 0);
    EXPECT_EQ(nt, 1);
    EXPECT_EQ(std::this_thread::get_id(), self);
    ++runs;
  });
  EXPECT_EQ(runs, 1);
  const Chunks chunks = collect_chunks([&](auto fn) { pool.parallel_for(100, fn); });
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0], std::make_pair(int64_t{0}, int64_t{100}));
}

TEST(ThreadPool, FewerItemsThanThreadsGetsNoEmptyChunks) {
  ThreadPool pool(8);
  for (int64_t n : {1, 2, 3, 7}) {
    SCOPED_TRACE(n);
    const Chunks chunks = collect_chunks([&](auto fn) { pool.parallel_for(n, fn); });
    expect_partition(chunks, n);
    EXPECT_EQ(chunks.size(), static_cast<size_t>(n));  // one item per chunk
  }
}

TEST(ThreadPool, MoreWorkChunksThanThreadsThroughRun) {
  // The usual pattern for more chunks than threads: thread ti takes chunks
  // ti, ti + nt, ti + 2 nt, ...
  ThreadPool pool(3);
  constexpr int kNumChunks = 100;
  std::vector<int> owner(kNumChunks, -1);
  pool.run([&](int ti, int nt) {
    for (int c = ti; c < kNumChunks; c += nt) owner[c] = ti;
  });
  for (int c = 0; c < kNumChunks; ++c) EXPECT_EQ(owner[c], c % 3) << "chunk " << c;
}

TEST(ThreadPool, ManyJobsBackToBack) {
  // Decode issues thousands of tiny jobs; each must see its own data and
  // finish before the next starts.
  ThreadPool pool(3);
  std::vector<int64_t> partial(3);
  for (int iter = 0; iter < 1000; ++iter) {
    const int64_t n = 1 + iter % 37;
    std::fill(partial.begin(), partial.end(), 0);
    pool.run([&](int ti, int nt) {
      for (int64_t i = ti; i < n; i += nt) partial[ti] += i + iter;
    });
    int64_t sum = 0;
    for (int64_t p : partial) sum += p;
    ASSERT_EQ(sum, n * (n - 1) / 2 + n * iter) << "iteration " << iter;
  }
  // Alternating the two parallel_for overloads on the same pool.
  std::vector<int> hits(1000);
  for (int iter = 0; iter < 200; ++iter) {
    auto fn = [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[i];
    };
    if (iter % 2) {
      pool.parallel_for(1000, fn);
    } else {
      pool.parallel_for(1000, 8, fn);
    }
  }
  for (int h : hits) ASSERT_EQ(h, 200);
}

TEST(ThreadPool, NestedPoolsInsideAJob) {
  // A job of one pool may drive another pool (e.g. the engine thread's pool
  // inside a server worker); each outer thread owns its inner pool.
  ThreadPool outer(2);
  std::vector<std::vector<int>> hits(2, std::vector<int>(257, 0));
  outer.run([&](int ti, int) {
    ThreadPool inner(3);
    for (int rep = 0; rep < 20; ++rep) {
      inner.parallel_for(257, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++hits[ti][i];
      });
    }
  });
  for (const auto& h : hits) {
    for (int v : h) ASSERT_EQ(v, 20);
  }
}

TEST(ThreadPool, UsableFromAThreadOtherThanItsCreator) {
  ThreadPool pool(3);
  std::vector<int> hits(100, 0);
  std::thread user([&] {
    for (int rep = 0; rep < 50; ++rep) {
      pool.parallel_for(100, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++hits[i];
      });
    }
  });
  user.join();
  for (int h : hits) EXPECT_EQ(h, 50);
}

TEST(ThreadPool, ConstructAndDestroyWithoutHanging) {
  // Idle workers (spinning or asleep) must notice the stop; a hang fails the
  // ctest timeout.
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(1 + i % 4);
    if (i % 2) pool.run([](int, int) {});
    if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));  // let workers block on the cv
  }
}

#if defined(__linux__)
// The calling thread's affinity, restored when the test ends.
class AffinityGuard {
 public:
  AffinityGuard() { ok_ = sched_getaffinity(0, sizeof(saved_), &saved_) == 0; }
  ~AffinityGuard() {
    if (ok_) sched_setaffinity(0, sizeof(saved_), &saved_);
  }
  std::vector<int> cpus() const {
    std::vector<int> out;
    for (int c = 0; ok_ && c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &saved_)) out.push_back(c);
    return out;
  }

 private:
  cpu_set_t saved_;
  bool ok_ = false;
};

void pin_self(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
}

TEST(ThreadPool, WorkerMovesOffTheCallersCpu) {
  // A worker put on the caller's CPU (here: pinned there by its own job)
  // moves to another one at its next job, so the two threads do not share
  // a CPU; the caller's own affinity is left alone.
  AffinityGuard guard;
  const std::vector<int> cpus = guard.cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs 2 CPUs this process may run on";
  ThreadPool pool(2);  // before the pin: the pool's CPUs are its creator's
  pin_self(cpus[0]);
  StartBarrier pinned(2);
  pool.run([&](int ti, int) {
    if (ti == 1) pin_self(cpus[0]);
    pinned.arrive_and_wait();
  });
  ASSERT_TRUE(pinned.all_arrived());
  for (int rep = 0; rep < 20; ++rep) {
    int worker_cpu = -1, caller_cpu = -1;
    StartBarrier both(2);  // slot 1 on the worker, not taken by the caller
    pool.run([&](int ti, int) {
      (ti == 1 ? worker_cpu : caller_cpu) = sched_getcpu();
      both.arrive_and_wait();
    });
    ASSERT_TRUE(both.all_arrived());
    EXPECT_EQ(caller_cpu, cpus[0]);
    EXPECT_NE(worker_cpu, caller_cpu) << "rep " << rep;
  }
  cpu_set_t now;
  ASSERT_EQ(sched_getaffinity(0, sizeof(now), &now), 0);
  EXPECT_EQ(CPU_COUNT(&now), 1);
}

TEST(ThreadPool, WorkersMoveOffEachOthersCpus) {
  // Three threads on at least three CPUs: two workers pinned to one CPU
  // end up on distinct CPUs, neither on the caller's.
  AffinityGuard guard;
  const std::vector<int> cpus = guard.cpus();
  if (cpus.size() < 3) GTEST_SKIP() << "needs 3 CPUs this process may run on";
  ThreadPool pool(3);
  pin_self(cpus[0]);
  StartBarrier pinned(3);
  pool.run([&](int ti, int) {
    if (ti > 0) pin_self(cpus[1]);
    pinned.arrive_and_wait();
  });
  StartBarrier moved(3);
  pool.run([&](int, int) { moved.arrive_and_wait(); });  // the first move of each worker
  std::vector<int> at(3, -1);
  StartBarrier all(3);
  pool.run([&](int ti, int) {
    at[static_cast<size_t>(ti)] = sched_getcpu();
    all.arrive_and_wait();
  });
  ASSERT_TRUE(pinned.all_arrived() && moved.all_arrived() && all.all_arrived());
  EXPECT_NE(at[1], at[0]);
  EXPECT_NE(at[2], at[0]);
  EXPECT_NE(at[1], at[2]);
}

TEST(ThreadPool, MoreThreadsThanCpusLeavesPlacementToTheKernel) {
  // Oversubscribed: nothing to spread over, the workers' affinity stays
  // what they set.
  AffinityGuard guard;
  const std::vector<int> cpus = guard.cpus();
  if (cpus.empty()) GTEST_SKIP() << "no affinity mask";
  const int n = static_cast<int>(cpus.size()) + 1;
  ThreadPool pool(n);
  pin_self(cpus[0]);
  StartBarrier pinned(n);
  pool.run([&](int ti, int) {
    if (ti > 0) pin_self(cpus[0]);
    pinned.arrive_and_wait();
  });
  std::vector<int> at(cpus.size() + 1, -1);
  StartBarrier all(n);
  pool.run([&](int ti, int) {
    at[static_cast<size_t>(ti)] = sched_getcpu();
    all.arrive_and_wait();
  });
  ASSERT_TRUE(pinned.all_arrived() && all.all_arrived());
  for (int cpu : at) EXPECT_EQ(cpu, cpus[0]);
}
#endif

}  // namespace
}  // namespace pagoda
