// A persistent pool of worker threads for data-parallel loops. The calling
// thread takes part as worker 0, so ThreadPool(1) runs everything inline.
//
// Each job is one slot per thread index, and a slot runs exactly once: on
// its worker, or on whichever thread of the pool finishes its own slot first
// while that worker has not yet started it (the caller included). A worker
// that is late — asleep, or sharing its CPU with another process — then costs
// a job its slot's time on another thread, not its lateness: on a 2-vCPU VM
// with one vCPU busy elsewhere, two threads ran a tiny model's prompt ~170x
// slower than one, every job of a step waiting for a worker scheduled a few
// milliseconds later (bench/RESULTS.md, 2026-12-07).
//
// Where the process may run on at least as many CPUs as the pool has
// threads (Linux), a worker that finds itself on the CPU of the thread that
// called run(), or of another worker, moves to one nobody of the pool uses
// (its affinity narrowed to the others): a woken worker placed beside the
// caller shared its CPU for tens of milliseconds before the scheduler moved
// either, every step of that time at one thread's speed.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // Jobs handed to the workers so far (run() calls that woke them).
  uint64_t jobs() const { return generation_.load(std::memory_order_relaxed); }

  // Calls fn(thread_index, num_threads) once for every index in
  // [0, num_threads) and waits. Index 0 runs on the calling thread; the
  // others on their workers, or on another thread of the pool when their
  // worker has not started them by the time it is free (one after another
  // then, never two at once on one thread).
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into contiguous chunks, one per thread: fn(begin, end).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  // As above with every chunk boundary a multiple of `align` (only the last
  // chunk ends at n): fn(begin, end) on at most num_threads() threads, each
  // chunk ceil(ceil(n / threads) / align) * align long. A single chunk runs
  // on the calling thread without waking the workers. Allocates nothing.
  template <class Fn>
  void parallel_for(int64_t n, int64_t align, const Fn& fn);

  // Splits [0, n) into chunks of `chunk` (the last one shorter) that the
  // threads claim in order from a shared counter: fn(begin, end) per chunk.
  // A thread that runs slower (a busy sibling vCPU, a costlier range) takes
  // fewer chunks instead of holding the others at the join. One chunk runs on
  // the calling thread without waking the workers. Allocates nothing.
  template <class Fn>
  void parallel_chunks(int64_t n, int64_t chunk, const Fn& fn);

 private:
  void worker_loop(int index);
  // Whether this thread takes slot `index` of job `gen` (nobody took it yet).
  bool claim(int index, uint64_t gen);
  // Runs every slot of job `gen` nobody took yet, from `from` on (wrapping
  // around, slot 0 excluded).
  void run_unclaimed(const std::function<void(int, int)>& fn, uint64_t gen, int from);
  // Moves worker `index` off a CPU the caller or a worker before it runs on.
  void spread(int index);

  int num_threads_;
  // The CPUs the process may run on when spreading applies, else empty.
  std::vector<int> cpus_;
  std::atomic<int> caller_cpu_{-1};
  std::unique_ptr<std::atomic<int>[]> worker_cpu_;  // last CPU seen per worker
  // Per slot, the last job (generation) a thread took it for; a line each.
  struct alignas(64) Slot {
    std::atomic<uint64_t> claimed{0};
  };
  std::unique_ptr<Slot[]> slots_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
};

template <class Fn>
void ThreadPool::parallel_for(int64_t n, int64_t align, const Fn& fn) {
  if (n <= 0) return;
  if (align < 1) align = 1;
  const int64_t per_thread = (n + num_threads_ - 1) / num_threads_;
  const int64_t chunk = (per_thread + align - 1) / align * align;
  if (chunk >= n) {
    fn(int64_t{0}, n);
    return;
  }
  // One captured pointer keeps the std::function of run() in its small
  // buffer (no heap allocation per call).
  struct Job {
    const Fn* fn;
    int64_t n, chunk;
  };
  const Job job{&fn, n, chunk};
  run([&job](int ti, int) {
    const int64_t b = std::min<int64_t>(job.n, ti * job.chunk);
    const int64_t e = std::min<int64_t>(job.n, b + job.chunk);
    if (b < e) (*job.fn)(b, e);
  });
}

template <class Fn>
void ThreadPool::parallel_chunks(int64_t n, int64_t chunk, const Fn& fn) {
  if (n <= 0) return;
  if (chunk < 1) chunk = 1;
  if (chunk >= n || num_threads_ == 1) {
    for (int64_t b = 0; b < n; b += chunk) fn(b, std::min(n, b + chunk));
    return;
  }
  struct Job {
    const Fn* fn;
    int64_t n, chunk;
    std::atomic<int64_t> next{0};
  };
  Job job{&fn, n, chunk};
  run([&job](int, int) {
    for (;;) {
      const int64_t b = job.next.fetch_add(job.chunk, std::memory_order_relaxed);
      if (b >= job.n) return;
      (*job.fn)(b, std::min(job.n, b + job.chunk));
    }
  });
}

// Physical cores of this machine (best effort), at least 1.
int default_num_threads();

}  // namespace pagoda
