#include "gguf/mapping_guard.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace pagoda::gguf {
namespace {

constexpr int kSlots = 16;
constexpr size_t kPathBytes = 512;

// Read by the signal handler: plain data, published with atomics.
struct Slot {
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> size{0};
  char path[kPathBytes];
};
Slot g_slots[kSlots];
std::mutex g_mu;  // writers only

void write_str(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void write_u64(uint64_t v) {
  char buf[24];
  int i = 23;
  buf[i] = '\0';
  do {
    buf[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0 && i > 0);
  write_str(buf + i);
}

void on_sigbus(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    const uintptr_t base = s.base.load(std::memory_order_acquire);
    const size_t size = s.size.load(std::memory_order_acquire);
    if (base == 0 || addr < base || addr >= base + size) continue;
    write_str("pagoda: fatal: the model file '");
    write_str(s.path);
    write_str("' was truncated or replaced while in use (read fault at byte ");
    write_u64(addr - base);
    write_str("); exiting. Replace model files by renaming a new file over the old one, never by rewriting it.\n");
    ::_exit(kTruncatedFileExitCode);
  }
  // Not ours: the default action (the fault repeats when we return).
  ::signal(sig, SIG_DFL);
}

}  // namespace

void install_mapping_guard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, nullptr);
  });
}

void register_mapping(const void* base, size_t size, const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots) {
    if (s.base.load(std::memory_order_relaxed) != 0) continue;
    const size_t n = std::min(path.size(), kPathBytes - 1);
    std::memcpy(s.path, path.data(), n);
    s.path[n] = '\0';
    s.size.store(size, std::memory_order_release);
    s.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return;
  }
}

void unregister_mapping(const void* base) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots)
    if (s.base.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(base)) {
      s.base.store(0, std::memory_order_release);
      s.size.store(0, std::memory_order_release);
    }
}

}  // namespace pagoda::gguf
