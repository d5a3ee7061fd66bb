#include "kernels/packed.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/pack.h"

namespace pagoda::kernels {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Null when the memory is not there.
uint8_t* alloc_huge(size_t bytes) {
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, size) != 0) return nullptr;
#if defined(MADV_HUGEPAGE)
  madvise(p, size, MADV_HUGEPAGE);  // advisory: fine if THP is off
#endif
  return static_cast<uint8_t*>(p);
}

int64_t num_groups(const WeightView& w) { return (w.n_out + cpu::kPackRows - 1) / cpu::kPackRows; }

cpu::WKind kind_of(const WeightView& w) {
  return static_cast<cpu::WKind>(cpu::wkind_of(w.type, w.row_scaled, w.bf16_dot));
}

constexpr size_t kAlign = 64;

size_t packed_bytes(const WeightView& w) {
  const size_t bytes = cpu::packed_group_bytes(kind_of(w), w.n_in) * static_cast<size_t>(num_groups(w));
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// --- The pack cache file ---------------------------------------------------
// "PAGODA-PACK\0", u32 version, u32 header bytes, then the header body (the
// identity, the rows per group, and per packed matrix its kind, shape, offset
// and the fingerprint of its layout), zero padding to a 4 KiB boundary, then
// the packed bytes exactly as the arena holds them. Host byte order (x86).
constexpr char kCacheMagic[12] = "PAGODA-PACK";
constexpr uint32_t kCacheVersion = 1;
constexpr size_t kCacheDataAlign = 4096;

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 14695981039346656037ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// One group of 16 pseudo-random rows of 256 elements packed as `w`'s kind
// and hashed: changes whenever that layout does, so a cache written by
// another version of the packing code is not trusted.
uint64_t layout_fingerprint(const WeightView& like) {
  constexpr int64_t kIn = 256;
  const size_t rb = dtype_row_bytes(like.type, kIn);
  std::vector<uint8_t> rows(rb * cpu::kPackRows);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : rows) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(x >> 56);
  }
  const cpu::WKind kind = kind_of(like);
  std::vector<uint8_t> out(cpu::packed_group_bytes(kind, kIn));
  cpu::pack_groups(kind, rows.data(), rb, kIn, cpu::kPackRows, 0, 1, out.data());
  return fnv1a(out.data(), out.size());
}

template <class T>
void put(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof v);
}

// The whole header (magic to the last entry) a cache for these weights must
// start with; *data_offset is where the packed bytes begin.
std::string cache_header(const std::vector<WeightView*>& todo, const PackCacheSpec& spec, size_t* data_offset) {
  std::string body;
  put<uint64_t>(&body, spec.identity.size());
  body += spec.identity;
  put<int32_t>(&body, cpu::kPackRows);
  put<uint64_t>(&body, todo.size());
  std::vector<std::pair<int, uint64_t>> prints;  // fingerprint per kind, computed once
  size_t offset = 0;
  for (const WeightView* w : todo) {
    const int kind = static_cast<int>(kind_of(*w));
    auto it = std::find_if(prints.begin(), prints.end(), [kind](const auto& p) { return p.first == kind; });
    if (it == prints.end()) it = prints.insert(prints.end(), {kind, layout_fingerprint(*w)});
    put<int32_t>(&body, kind);
    put<int64_t>(&body, w->n_in);
    put<int64_t>(&body, w->n_out);
    put<uint64_t>(&body, offset);
    put<uint64_t>(&body, it->second);
    offset += packed_bytes(*w);
  }
  put<uint64_t>(&body, offset);
  std::string h(kCacheMagic, sizeof kCacheMagic);
  put<uint32_t>(&h, kCacheVersion);
  put<uint32_t>(&h, static_cast<uint32_t>(body.size()));
  h += body;
  *data_offset = (h.size() + kCacheDataAlign - 1) / kCacheDataAlign * kCacheDataAlign;
  return h;
}

// Named by a hash of the whole header: the same file packed two ways (say
// with and without --bf16-dot) keeps two caches.
std::string cache_path(const PackCacheSpec& spec, const std::string& header) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a(header.data(), header.size())));
  return (std::filesystem::path(spec.dir) / (spec.stem + "." + hash + ".pagoda-pack")).string();
}

// Maps a cache file whose header is exactly `header` and whose size is
// data_offset + total; null (and *why set) otherwise.
void* map_cache(const std::string& path, const std::string& header, size_t data_offset, size_t total,
                std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ENOENT ? "" : std::strerror(errno);
    return nullptr;
  }
  void* addr = nullptr;
  struct stat st {};
  std::string got(header.size(), '\0');
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != data_offset + total) {
    *why = "its size does not match";
  } else if (::pread(fd, got.data(), got.size(), 0) != static_cast<ssize_t>(got.size()) || got != header) {
    *why = "it was made for another file, shape or packing version";
  } else {
    addr = ::mmap(nullptr, data_offset + total, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (addr == MAP_FAILED) {
      addr = nullptr;
      *why = std::string("mmap: ") + std::strerror(errno);
    }
  }
  ::close(fd);
  return addr;
}

// Writes header, padding and the arena to a temporary file renamed into
// place (readers never see a partial cache). False with *why on failure.
bool write_cache(const std::string& path, const std::string& header, size_t data_offset, const uint8_t* data,
                 size_t total, std::string* why) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) {
    *why = ec.message();
    return false;
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = std::strerror(errno);
    return false;
  }
  std::string head = header;
  head.resize(data_offset, '\0');
  bool ok = true;
  auto write_all = [&](const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    while (ok && n > 0) {
      const ssize_t w = ::write(fd, c, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        *why = std::strerror(errno);
        ok = false;
        break;
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
  };
  write_all(head.data(), head.size());
  write_all(data, total);
  if (::close(fd) != 0 && ok) {
    *why = std::strerror(errno);
    ok = false;
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    *why = std::strerror(errno);
    ok = false;
  }
  if (!ok) std::filesystem::remove(tmp, ec);
  return ok;
}

}  // namespace

void PackedWeights::Free::operator()(uint8_t* p) const { std::free(p); }

PackedWeights::~PackedWeights() {
  for (const Mapping& m : mappings_) ::munmap(m.addr, m.size);
}

bool repack_enabled() {
  const char* v = std::getenv("PAGODA_REPACK");
  const bool on = v == nullptr || std::strcmp(v, "0") != 0;
  if (!on) {
    static const bool warned = [] {
      std::fprintf(stderr,
                   "pagoda: PAGODA_REPACK=0: weights stay in the file layout and matmul runs the scalar "
                   "reference kernels (slow)\n");
      return true;
    }();
    (void)warned;
  }
  return on;
}

bool can_pack(const WeightView& w) {
  const int kind = cpu::wkind_of(w.type, w.row_scaled, w.bf16_dot);
  if (kind < 0 || w.n_out <= 0 || w.data == nullptr) return false;
  return cpu::packable(static_cast<cpu::WKind>(kind)) && cpu::active_kernels().packed[kind] != nullptr;
}

bool has_bf16_dot() { return cpu::active_kernels().packed[static_cast<int>(cpu::WKind::kF16D)] != nullptr; }

size_t PackedWeights::pack(WeightView* const* ws, int n, ThreadPool& pool,
                           const std::function<void(const WeightView&)>& on_packed, const PackCacheSpec* cache) {
  from_cache_ = false;
  std::vector<WeightView*> todo;
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    if (ws[i]->packed != nullptr || !can_pack(*ws[i])) continue;
    todo.push_back(ws[i]);
    total += packed_bytes(*ws[i]);
  }
  if (total == 0) return 0;
  const bool use_cache = cache != nullptr && !cache->dir.empty();
  std::string header, path;
  size_t data_offset = 0;
  if (use_cache) {
    header = cache_header(todo, *cache, &data_offset);
    path = cache_path(*cache, header);
    std::string why;
    if (void* addr = map_cache(path, header, data_offset, total, &why)) {
      mappings_.push_back({addr, data_offset + total});
      const uint8_t* data = static_cast<const uint8_t*>(addr) + data_offset;
      for (WeightView* w : todo) {
        w->packed = data;
        data += packed_bytes(*w);
        if (on_packed) on_packed(*w);
      }
      bytes_ += total;
      from_cache_ = true;
      return total;
    }
    if (!why.empty())
      std::fprintf(stderr, "pagoda: pack cache %s not used (%s); rebuilding it\n", path.c_str(), why.c_str());
  }
  // One arena: small matrices do not each round up to a 2 MiB page.
  uint8_t* arena = alloc_huge(total);
  if (arena == nullptr) {
    std::fprintf(stderr,
                 "pagoda: cannot allocate %zu bytes to repack weights; matmul runs the scalar reference kernels\n",
                 total);
    return 0;
  }
  buffers_.emplace_back(arena);
  size_t used = 0;
  // Progress on a terminal once packing has taken a second.
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  bool shown = false;
  for (WeightView* wp : todo) {
    if (tty && seconds() > 1.0) {
      std::fprintf(stderr, "\rpagoda: packing weights %3d%% (%.1f of %.1f GB)", static_cast<int>(100.0 * used / total),
                   used / 1e9, total / 1e9);
      shown = true;
    }
    WeightView& w = *wp;
    const cpu::WKind kind = kind_of(w);
    const size_t gb = cpu::packed_group_bytes(kind, w.n_in);
    uint8_t* out = arena + used;
    used += packed_bytes(w);
    pool.parallel_for(num_groups(w), 1, [&](int64_t g0, int64_t g1) {
      cpu::pack_groups(kind, static_cast<const uint8_t*>(w.data), w.row_bytes(), w.n_in, w.n_out, g0, g1,
                       out + g0 * gb);
    });
    w.packed = out;
    if (on_packed) on_packed(w);
  }
  bytes_ += used;
  if (shown) std::fprintf(stderr, "\rpagoda: packing weights 100%% (%.1f GB) in %.1f s\n", total / 1e9, seconds());
  if (use_cache) {
    std::string why;
    if (!write_cache(path, header, data_offset, arena, used, &why))
      std::fprintf(stderr, "pagoda: cannot write the pack cache %s (%s)\n", path.c_str(), why.c_str());
  } else if (seconds() > 2.0) {
    std::fprintf(stderr,
                 "pagoda: packing the weights took %.1f s; --pack-cache DIR (or PAGODA_PACK_CACHE) keeps the packed "
                 "copy for the next start\n",
                 seconds());
  }
  return used;
}

}  // namespace pagoda::kernels
