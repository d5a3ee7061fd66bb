#include "core/thread_pool.h"

#if defined(__linux__)
#include <sched.h>
#endif

#include <algorithm>
#include <fstream>
#include <set>
#include <string>

namespace pagoda {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  worker_cpu_ = std::make_unique<std::atomic<int>[]>(static_cast<size_t>(num_threads_));
  for (int i = 0; i < num_threads_; ++i) worker_cpu_[i].store(-1, std::memory_order_relaxed);
  slots_ = std::make_unique<Slot[]>(static_cast<size_t>(num_threads_));
#if defined(__linux__)
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (num_threads_ > 1 && sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus_.push_back(c);
    if (static_cast<int>(cpus_.size()) < num_threads_) cpus_.clear();  // oversubscribed: leave it to the kernel
  }
#endif
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {

// Waiting for a job or for the workers: a few pause instructions (~14 ns
// each on recent Intel cores), then sched_yield (~0.2 us when the CPU is
// otherwise idle), then (workers only, after ~4 ms) the condition variable.
// The pause phase stays short: when the machine is busy and a worker shares
// a CPU with the thread it waits for (a 2-vCPU VM with one vCPU taken by
// another process), pausing holds the CPU the other thread needs, and every
// job of a step paid the whole pause phase (4,000 pauses made a tiny model's
// decode 4x slower than one thread); yielding hands it over at once.
constexpr int kPauseSpins = 64;
constexpr int kMaxSpins = 20000;

}  // namespace

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly: a decode step issues many small jobs back to back, and a
    // futex wake-up costs more than the job.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kMaxSpins; ++spin) {
      if (spin < kPauseSpins) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      } else {
        std::this_thread::yield();
      }
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    const std::function<void(int, int)>* job;
    {
      // The job and its generation together: a late worker may find the
      // caller a job or more further on (its slots taken by others).
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      gen = generation_.load(std::memory_order_relaxed);
      job = job_;
    }
    seen = gen;
    if (claim(index, gen)) {
      if (!cpus_.empty()) spread(index);
      (*job)(index, num_threads_);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
    // Then the slots of workers later than this one.
    run_unclaimed(*job, gen, index + 1);
  }
}

bool ThreadPool::claim(int index, uint64_t gen) {
  std::atomic<uint64_t>& c = slots_[index].claimed;
  uint64_t prev = c.load(std::memory_order_relaxed);
  // Generations only grow; whoever moves the slot to `gen` first runs it.
  while (prev < gen)
    if (c.compare_exchange_weak(prev, gen, std::memory_order_acq_rel, std::memory_order_relaxed)) return true;
  return false;
}

void ThreadPool::run_unclaimed(const std::function<void(int, int)>& fn, uint64_t gen, int from) {
  for (int k = 0; k < num_threads_ - 1; ++k) {
    const int i = 1 + (from - 1 + k) % (num_threads_ - 1);
    if (claim(i, gen)) {
      fn(i, num_threads_);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

void ThreadPool::spread(int index) {
#if defined(__linux__)
  const int me = sched_getcpu();
  const int caller = caller_cpu_.load(std::memory_order_relaxed);
  bool clash = me == caller;
  int now = me;
  for (int j = 1; j < index && !clash; ++j) clash = worker_cpu_[j].load(std::memory_order_relaxed) == me;
  if (clash && me >= 0) {
    cpu_set_t free_cpus;
    CPU_ZERO(&free_cpus);
    int n_free = 0;
    for (int c : cpus_) {
      bool used = c == caller;
      for (int j = 1; j < num_threads_ && !used; ++j)
        used = j != index && worker_cpu_[j].load(std::memory_order_relaxed) == c;
      if (!used) {
        CPU_SET(c, &free_cpus);
        ++n_free;
      }
    }
    // The kernel moves the thread before the call returns.
    if (n_free > 0 && sched_setaffinity(0, sizeof(free_cpus), &free_cpus) == 0) now = sched_getcpu();
  }
  // Stored only when it changed: the workers' entries share a cache line.
  if (worker_cpu_[index].load(std::memory_order_relaxed) != now)
    worker_cpu_[index].store(now, std::memory_order_relaxed);
#else
  (void)index;
#endif
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (num_threads_ == 1) {
    fn(0, 1);
    return;
  }
#if defined(__linux__)
  if (!cpus_.empty()) caller_cpu_.store(sched_getcpu(), std::memory_order_relaxed);
#endif
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    pending_.store(num_threads_ - 1, std::memory_order_release);
    gen = generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  cv_.notify_all();
  fn(0, num_threads_);
  run_unclaimed(fn, gen, 1);
  // Spin briefly, then yield: when the machine is oversubscribed a worker may
  // be descheduled, and spinning would only burn the timeslice it needs.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kPauseSpins) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) { parallel_for(n, 1, fn); }

int default_num_threads() {
  std::ifstream f("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, phys, core;
  while (std::getline(f, line)) {
    if (line.rfind("physical id", 0) == 0) phys = line;
    if (line.rfind("core id", 0) == 0) {
      core = line;
      cores.insert({phys, core});
    }
  }
  int n = static_cast<int>(cores.size());
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, n);
}

}  // namespace pagoda
