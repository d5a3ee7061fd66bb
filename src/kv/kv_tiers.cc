#include "kv/kv_tiers.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace pagoda {

std::string BlockKey::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

BlockKey chain_block_key(const BlockKey& parent, std::span<const int32_t> block_tokens) {
  const XXH128_hash_t h =
      XXH3_128bits_withSeed(block_tokens.data(), block_tokens.size() * sizeof(int32_t), parent.lo ^ (parent.hi << 1));
  // The parent's high half enters too (a seed is 64 bits).
  return {h.low64 ^ parent.hi, h.high64 + (parent.lo * 0x9E3779B97F4A7C15ull)};
}

BlockKey namespace_key(std::span<const uint8_t> bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return {h.low64, h.high64};
}

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'P', 'G', 'D', 'A', 'K', 'V', '0', '1'};
constexpr uint32_t kVersion = 1;

// The fixed header of a tier file (96 bytes, host byte order).
struct FileHeader {
  char magic[8];
  uint32_t version;
  int32_t block_size;
  uint64_t ns_lo, ns_hi;
  uint64_t key_lo, key_hi;
  uint64_t payload_bytes;
  uint64_t checksum;  // XXH3-64 of the tokens, then the payload
  uint8_t reserved[32];
};
static_assert(sizeof(FileHeader) == 96);

uint64_t checksum(std::span<const int32_t> tokens, std::span<const uint8_t> payload) {
  XXH3_state_t* st = XXH3_createState();
  PAGODA_CHECK(st != nullptr);
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, tokens.data(), tokens.size() * sizeof(int32_t));
  XXH3_64bits_update(st, payload.data(), payload.size());
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

bool parse_hex_key(const std::string& s, BlockKey* key) {
  if (s.size() != 32) return false;
  auto half = [&](size_t off, uint64_t* out) {
    uint64_t v = 0;
    for (size_t i = off; i < off + 16; ++i) {
      const char c = s[i];
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else {
        return false;
      }
      v = v << 4 | static_cast<uint64_t>(d);
    }
    *out = v;
    return true;
  };
  return half(0, &key->hi) && half(16, &key->lo);
}

bool write_all(int fd, const void* p, size_t n) {
  const auto* c = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  auto* c = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

KVTiers::KVTiers(const KVTierOptions& options, const BlockKey& ns, int32_t block_size, size_t payload_bytes)
    : options_(options), ns_(ns), block_size_(block_size), payload_bytes_(payload_bytes) {}

KVTiers::~KVTiers() = default;

Result<std::unique_ptr<KVTiers>> KVTiers::open(const KVTierOptions& options, const BlockKey& ns, int32_t block_size,
                                               size_t payload_bytes) {
  if (block_size < 1 || payload_bytes == 0) return invalid_argument("KV tiers need a block size and block bytes");
  if (options.host_bytes < 0 || options.disk_bytes < 0) return invalid_argument("KV tier sizes must not be negative");
  if (options.disk_dir.empty() && options.host_bytes == 0)
    return invalid_argument("KV tiers need a host tier size or a disk folder");
  if (!options.disk_dir.empty() && options.disk_bytes <= 0)
    return invalid_argument("the disk KV tier needs a positive size (--kv-disk-size)");
  std::unique_ptr<KVTiers> t(new KVTiers(options, ns, block_size, payload_bytes));
  if (!options.disk_dir.empty()) {
    t->dir_ = (fs::path(options.disk_dir) / ns.hex()).string();
    PAGODA_RETURN_IF_ERROR(t->scan_disk());
  }
  return t;
}

size_t KVTiers::file_bytes() const {
  return sizeof(FileHeader) + static_cast<size_t>(block_size_) * sizeof(int32_t) + payload_bytes_;
}

std::string KVTiers::file_path(const BlockKey& key) const { return dir_ + "/" + key.hex() + ".kv"; }

Status KVTiers::scan_disk() {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return invalid_argument("cannot create the KV disk tier folder " + dir_ + ": " + ec.message());
  struct Found {
    fs::file_time_type time;
    BlockKey key;
  };
  std::vector<Found> found;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    BlockKey key;
    const bool ours = name.size() == 35 && name.substr(32) == ".kv" && parse_hex_key(name.substr(0, 32), &key);
    if (!ours) {
      // Leftovers of an interrupted write; anything else is not ours to touch.
      if (name.find(".kv.tmp.") != std::string::npos) fs::remove(e.path(), ec);
      continue;
    }
    std::error_code size_ec;
    const uintmax_t size = e.file_size(size_ec);
    if (size_ec || size != file_bytes()) {  // truncated, or made for another layout
      fs::remove(e.path(), ec);
      ++stats_.disk_corrupt;
      continue;
    }
    found.push_back({e.last_write_time(size_ec), key});
  }
  if (ec) return invalid_argument("cannot read the KV disk tier folder " + dir_ + ": " + ec.message());
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.time < b.time; });
  for (const Found& f : found) {
    disk_lru_.push_back(f.key);
    disk_[f.key] = {std::prev(disk_lru_.end())};
  }
  // Over the size (a smaller --kv-disk-size than last time): oldest go.
  while (!disk_lru_.empty() && static_cast<int64_t>(disk_.size() * file_bytes()) > options_.disk_bytes) {
    ++stats_.disk_dropped;
    drop_disk(disk_lru_.front());
  }
  return Status::ok();
}

bool KVTiers::contains(const BlockKey& key) const { return host_.count(key) != 0 || disk_.count(key) != 0; }

bool KVTiers::stage_load(const BlockKey& key, std::span<const int32_t> tokens, BlockId dst) {
  PAGODA_CHECK(static_cast<int32_t>(tokens.size()) == block_size_);
  if (auto it = host_.find(key); it != host_.end()) {
    const Entry& e = it->second.entry;
    if (!std::equal(tokens.begin(), tokens.end(), e.tokens.begin(), e.tokens.end())) return false;
    host_lru_.splice(host_lru_.end(), host_lru_, it->second.lru);
    loads_.push_back({dst, e.payload});
    ++stats_.host_hits;
    return true;
  }
  if (disk_.count(key) == 0) return false;
  std::vector<uint8_t> payload;
  if (!read_disk(key, tokens, &payload)) return false;
  auto d = disk_.find(key);
  disk_lru_.splice(disk_lru_.end(), disk_lru_, d->second.lru);
  loads_.push_back({dst, std::move(payload)});
  ++stats_.disk_hits;
  return true;
}

void KVTiers::stage_spill(const BlockKey& key, std::span<const int32_t> tokens, BlockId src) {
  PAGODA_CHECK(static_cast<int32_t>(tokens.size()) == block_size_);
  auto pending = std::find_if(loads_.begin(), loads_.end(), [src](const PendingLoad& l) { return l.dst == src; });
  if (pending != loads_.end()) {
    loads_.erase(pending);  // never written: the tier it came from still has it
    return;
  }
  if (contains(key)) return;
  for (const PendingSpill& s : spills_)
    if (s.key == key) return;
  spills_.push_back({key, std::vector<int32_t>(tokens.begin(), tokens.end()), src});
}

void KVTiers::run_pending(KVStorage& storage) {
  PAGODA_CHECK(storage.bytes_per_block_all() == payload_bytes_);
  for (PendingSpill& s : spills_) {
    Entry e{std::move(s.tokens), std::vector<uint8_t>(payload_bytes_)};
    storage.read_block(s.src, e.payload.data());
    ++stats_.spills;
    if (options_.host_bytes > 0) {
      put_host(s.key, std::move(e));
    } else {
      put_disk(s.key, e);
    }
  }
  spills_.clear();
  for (const PendingLoad& l : loads_) storage.write_block(l.dst, l.payload.data());
  loads_.clear();
}

void KVTiers::put_host(const BlockKey& key, Entry entry) {
  const auto bytes = static_cast<int64_t>(payload_bytes_ + entry.tokens.size() * sizeof(int32_t));
  if (bytes > options_.host_bytes) {
    if (!dir_.empty()) put_disk(key, entry);
    return;
  }
  // Least recently used blocks move down to disk (or are dropped).
  while (host_used_ + bytes > options_.host_bytes && !host_lru_.empty()) {
    const BlockKey old = host_lru_.front();
    host_lru_.pop_front();
    auto it = host_.find(old);
    if (!dir_.empty()) put_disk(old, it->second.entry);
    host_used_ -= bytes;
    host_.erase(it);
  }
  host_lru_.push_back(key);
  host_[key] = {std::move(entry), std::prev(host_lru_.end())};
  host_used_ += bytes;
}

void KVTiers::put_disk(const BlockKey& key, const Entry& entry) {
  if (dir_.empty() || disk_.count(key) != 0) return;
  if (static_cast<int64_t>(file_bytes()) > options_.disk_bytes) return;
  while (!disk_lru_.empty() && static_cast<int64_t>((disk_.size() + 1) * file_bytes()) > options_.disk_bytes) {
    ++stats_.disk_dropped;
    drop_disk(disk_lru_.front());
  }
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.block_size = block_size_;
  h.ns_lo = ns_.lo;
  h.ns_hi = ns_.hi;
  h.key_lo = key.lo;
  h.key_hi = key.hi;
  h.payload_bytes = payload_bytes_;
  h.checksum = checksum(entry.tokens, entry.payload);
  const std::string path = file_path(key);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;  // a full or read-only disk: the block is simply not kept
  bool ok = write_all(fd, &h, sizeof h) && write_all(fd, entry.tokens.data(), entry.tokens.size() * sizeof(int32_t)) &&
            write_all(fd, entry.payload.data(), entry.payload.size());
  ok = ::close(fd) == 0 && ok;
  if (ok) ok = std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    ::unlink(tmp.c_str());
    return;
  }
  disk_lru_.push_back(key);
  disk_[key] = {std::prev(disk_lru_.end())};
  ++stats_.disk_writes;
}

bool KVTiers::read_disk(const BlockKey& key, std::span<const int32_t> tokens, std::vector<uint8_t>* payload) {
  const std::string path = file_path(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0;
  FileHeader h{};
  std::vector<int32_t> stored(static_cast<size_t>(block_size_));
  payload->assign(payload_bytes_, 0);
  struct stat st {};
  ok = ok && ::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == file_bytes();
  ok = ok && read_all(fd, &h, sizeof h) && read_all(fd, stored.data(), stored.size() * sizeof(int32_t)) &&
       read_all(fd, payload->data(), payload->size());
  if (fd >= 0) ::close(fd);
  ok = ok && std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 && h.version == kVersion && h.block_size == block_size_ &&
       h.ns_lo == ns_.lo && h.ns_hi == ns_.hi && h.key_lo == key.lo && h.key_hi == key.hi &&
       h.payload_bytes == payload_bytes_ && h.checksum == checksum(stored, *payload);
  if (!ok) {
    ++stats_.disk_corrupt;
    drop_disk(key);
    return false;
  }
  // A sound file for other tokens: a hash-chain collision; not ours.
  return std::equal(tokens.begin(), tokens.end(), stored.begin(), stored.end());
}

void KVTiers::drop_disk(BlockKey key) {
  auto it = disk_.find(key);
  if (it == disk_.end()) return;
  disk_lru_.erase(it->second.lru);
  disk_.erase(it);
  ::unlink(file_path(key).c_str());
}

void KVTiers::persist(const BlockKey& key, std::span<const int32_t> tokens, const KVStorage& storage, BlockId block) {
  if (dir_.empty() || disk_.count(key) != 0) return;
  Entry e{std::vector<int32_t>(tokens.begin(), tokens.end()), std::vector<uint8_t>(payload_bytes_)};
  storage.read_block(block, e.payload.data());
  put_disk(key, e);
}

void KVTiers::flush_host() {
  if (dir_.empty()) return;
  for (const BlockKey& key : host_lru_) put_disk(key, host_.at(key).entry);
}

void KVTiers::import_block(const BlockKey& key, std::span<const int32_t> tokens, std::span<const uint8_t> payload) {
  PAGODA_CHECK(static_cast<int32_t>(tokens.size()) == block_size_ && payload.size() == payload_bytes_);
  if (contains(key)) return;
  Entry e{std::vector<int32_t>(tokens.begin(), tokens.end()), std::vector<uint8_t>(payload.begin(), payload.end())};
  ++stats_.imports;
  if (options_.host_bytes > 0) {
    put_host(key, std::move(e));
  } else {
    put_disk(key, e);
  }
}

namespace {
constexpr char kExportMagic[8] = {'P', 'G', 'K', 'V', 'X', '0', '0', '1'};
}  // namespace

std::string encode_kv_export(const KVBlockExport& e) {
  std::string out(kExportMagic, sizeof kExportMagic);
  auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const uint32_t bs = static_cast<uint32_t>(e.block_size);
  const uint64_t pb = e.payload_bytes, count = e.blocks.size();
  put(&bs, sizeof bs);
  put(&pb, sizeof pb);
  put(&e.ns.lo, 8);
  put(&e.ns.hi, 8);
  put(&count, sizeof count);
  for (const KVBlockExport::Block& b : e.blocks) {
    put(&b.key.lo, 8);
    put(&b.key.hi, 8);
    put(b.tokens.data(), b.tokens.size() * sizeof(int32_t));
    put(b.payload.data(), b.payload.size());
  }
  return out;
}

Result<KVBlockExport> decode_kv_export(std::string_view bytes) {
  size_t off = 0;
  auto bad = [](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "malformed KV block transfer: " + why);
  };
  auto get = [&](void* p, size_t n) {
    if (bytes.size() - off < n) return false;
    std::memcpy(p, bytes.data() + off, n);
    off += n;
    return true;
  };
  char magic[8];
  uint32_t bs = 0;
  uint64_t pb = 0, count = 0;
  KVBlockExport e;
  if (!get(magic, 8) || std::memcmp(magic, kExportMagic, 8) != 0) return bad("not a Pagoda KV block transfer");
  if (!get(&bs, 4) || !get(&pb, 8) || !get(&e.ns.lo, 8) || !get(&e.ns.hi, 8) || !get(&count, 8))
    return bad("truncated header");
  if (bs < 1 || bs > 1024 || pb == 0 || pb > (size_t{1} << 32)) return bad("implausible block shape");
  const size_t per_block = 16 + size_t{bs} * 4 + pb;
  if (count > (bytes.size() - off) / per_block || (bytes.size() - off) != count * per_block)
    return bad("the block count does not match the bytes sent");
  e.block_size = static_cast<int32_t>(bs);
  e.payload_bytes = pb;
  e.blocks.resize(count);
  for (KVBlockExport::Block& b : e.blocks) {
    b.tokens.resize(bs);
    b.payload.resize(pb);
    get(&b.key.lo, 8);
    get(&b.key.hi, 8);
    get(b.tokens.data(), size_t{bs} * 4);
    get(b.payload.data(), pb);
  }
  return e;
}

KVTierStats KVTiers::stats() const {
  KVTierStats s = stats_;
  s.host_blocks = static_cast<int64_t>(host_.size());
  s.disk_blocks = static_cast<int64_t>(disk_.size());
  s.disk_bytes = s.disk_blocks * static_cast<int64_t>(file_bytes());
  return s;
}

}  // namespace pagoda
