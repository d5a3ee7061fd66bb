// Tiered KV storage below the prefix cache (LMCache / Mooncake's store):
// whole blocks the prefix cache evicts go to a host-memory tier and from
// there (or directly, without one) to a disk tier; a later prompt with that
// prefix loads them back instead of recomputing them. Blocks are keyed by
// their hash chain (kv/block_key.h), whose seed names the model file and the
// KV layout, so the disk tier survives restarts and never mixes models.
//
// Data movement is staged, like every block copy: KVCacheManager decides
// (stage_spill when the prefix cache evicts a block, stage_load when it
// restores one into a fresh block; a load reads and verifies the bytes at
// once, so a damaged file is a miss, never a wrong block) and the runner
// moves the bytes before the next forward (run_pending: spills first, while
// the evicted blocks still hold their data, then loads).
//
// Disk format: DIR/<namespace>/<key>.kv, one file per block: a 96-byte
// header (magic, version, block size, namespace, key, payload bytes, XXH3-64
// of tokens and payload), the block's tokens (int32), then its K/V bytes as
// KVStorage::read_block lays them out. Files are written to a temporary name
// and renamed; a file of the wrong size, namespace or checksum is deleted
// and counted (KVTierStats::disk_corrupt). The disk tier keeps at most
// disk_bytes, dropping the least recently used files.
//
// Not thread-safe: driven by the engine thread (stats() is a copy).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "core/status.h"
#include "kv/block_key.h"
#include "kv/kv_storage.h"

namespace pagoda {

// Whole blocks of K/V in the tiers' format, leaving one instance for
// another (prefill/decode disaggregation): the sender's namespace, and per
// block its hash-chain key, tokens and bytes (KVStorage::read_block).
struct KVBlockExport {
  BlockKey ns;
  int32_t block_size = 0;
  size_t payload_bytes = 0;
  struct Block {
    BlockKey key;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> payload;
  };
  std::vector<Block> blocks;
};
// The wire format (host byte order): "PGKVX001", u32 block size, u64
// payload bytes, namespace, u64 count, then per block its key, tokens and
// payload. decode checks every size against the bytes it has.
std::string encode_kv_export(const KVBlockExport& e);
Result<KVBlockExport> decode_kv_export(std::string_view bytes);

struct KVTierOptions {
  int64_t host_bytes = 0;  // host-memory tier; 0: spills go straight to disk
  std::string disk_dir;    // empty: no disk tier
  int64_t disk_bytes = 0;  // the disk tier's capacity
};

struct KVTierStats {
  int64_t host_hits = 0;     // blocks loaded back from the host tier
  int64_t disk_hits = 0;     // ... from the disk tier
  int64_t spills = 0;        // evicted blocks stored in a tier
  int64_t disk_writes = 0;   // files written
  int64_t disk_corrupt = 0;  // files rejected (size, header, tokens or checksum) and deleted
  int64_t disk_dropped = 0;  // files deleted to stay within the disk tier's size
  int64_t imports = 0;       // blocks received from another instance (prefill/decode disaggregation)
  int64_t host_blocks = 0;   // blocks held now
  int64_t disk_blocks = 0;
  int64_t disk_bytes = 0;
};

class KVTiers {
 public:
  // ns: the model's and layout's namespace; payload_bytes: K/V bytes of one
  // block (KVStorage::bytes_per_block_all). Scans the namespace's disk folder
  // (creating it), deleting files of the wrong size. Fails with a clear
  // error when the folder cannot be created or the options make no tier.
  static Result<std::unique_ptr<KVTiers>> open(const KVTierOptions& options, const BlockKey& ns, int32_t block_size,
                                               size_t payload_bytes);
  ~KVTiers();
  KVTiers(const KVTiers&) = delete;
  KVTiers& operator=(const KVTiers&) = delete;

  const BlockKey& root() const { return ns_; }
  int32_t block_size() const { return block_size_; }
  size_t payload_bytes() const { return payload_bytes_; }
  // Whether a tier holds the block (it may still turn out damaged on load).
  bool contains(const BlockKey& key) const;
  // Reads the block (host tier first, then disk, checked) for block `dst` of
  // the device storage, written there by run_pending. False, and a damaged
  // file deleted, when it is absent or fails a check.
  bool stage_load(const BlockKey& key, std::span<const int32_t> tokens, BlockId dst);
  // Block `src` was evicted holding the block keyed `key`: run_pending copies
  // it out before anything overwrites it. A block whose own load is still
  // pending is dropped from the loads instead (a tier holds it already).
  void stage_spill(const BlockKey& key, std::span<const int32_t> tokens, BlockId src);
  bool has_pending() const { return !spills_.empty() || !loads_.empty(); }
  // Spills first (device -> tiers), then loads (staged bytes -> device).
  void run_pending(KVStorage& storage);
  // Writes the block straight to the disk tier unless it holds it already
  // (at shutdown: what the prefix cache still holds survives a restart).
  void persist(const BlockKey& key, std::span<const int32_t> tokens, const KVStorage& storage, BlockId block);
  // Moves every host-tier block to disk (at shutdown).
  void flush_host();
  // Blocks another instance computed (KVBlockExport, same namespace and
  // layout: checked by the caller) go in like spills: the host tier (or
  // disk without one), where restore_prefix finds them.
  void import_block(const BlockKey& key, std::span<const int32_t> tokens, std::span<const uint8_t> payload);
  KVTierStats stats() const;

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::vector<uint8_t> payload;
  };
  struct HostEntry {
    Entry entry;
    std::list<BlockKey>::iterator lru;
  };
  struct DiskEntry {
    std::list<BlockKey>::iterator lru;
  };
  struct PendingSpill {
    BlockKey key;
    std::vector<int32_t> tokens;
    BlockId src;
  };
  struct PendingLoad {
    BlockId dst;
    std::vector<uint8_t> payload;
  };

  KVTiers(const KVTierOptions& options, const BlockKey& ns, int32_t block_size, size_t payload_bytes);
  Status scan_disk();
  std::string file_path(const BlockKey& key) const;
  size_t file_bytes() const;
  void put_host(const BlockKey& key, Entry entry);
  void put_disk(const BlockKey& key, const Entry& entry);
  // Reads and checks a disk file; false (and the file deleted) when damaged.
  bool read_disk(const BlockKey& key, std::span<const int32_t> tokens, std::vector<uint8_t>* payload);
  void drop_disk(BlockKey key);  // by value: callers pass list elements it erases

  KVTierOptions options_;
  BlockKey ns_;
  int32_t block_size_;
  size_t payload_bytes_;
  std::string dir_;  // options_.disk_dir/<namespace>; empty without a disk tier
  std::unordered_map<BlockKey, HostEntry, BlockKeyHash> host_;
  std::list<BlockKey> host_lru_;  // front: least recently used
  int64_t host_used_ = 0;
  std::unordered_map<BlockKey, DiskEntry, BlockKeyHash> disk_;
  std::list<BlockKey> disk_lru_;
  std::vector<PendingSpill> spills_;
  std::vector<PendingLoad> loads_;
  KVTierStats stats_;
};

}  // namespace pagoda
