// Per-sequence block tables over a ref-counted BlockPool. Answers read-only
// cost questions (num_blocks_needed, can_allocate) and performs all-or-nothing
// allocation, so a scheduler can plan without side effects. Blocks are shared
// by reference count: fork() shares a whole table, prepare_write() does the
// copy-on-write step; a prefix cache can hold further references later.
// Not thread-safe: owned and driven by the scheduler thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"
#include "kv/kv_tiers.h"
#include "kv/prefix_cache.h"

namespace pagoda {

// One block copy: within the device pool (copy-on-write) or between tiers
// (device pool <-> host pool) for swapping.
struct BlockCopy {
  BlockId src;
  BlockId dst;
};

// Re-rotates the keys of one device block, every layer, by `delta` positions
// (RoPE is a rotation: turning a key written at position p by delta gives
// the key at p + delta). StreamingLLM eviction shifts the later tokens of a
// sequence down to keep positions inside the cache.
struct KeyShift {
  BlockId block;
  int32_t delta;
};

// One recurrent-state copy between slots (StateStorage::copy): a prefix
// hit restoring a cached state into a new sequence's slot.
struct StateCopy {
  int32_t src;
  int32_t dst;
};

class KVCacheManager {
 public:
  // num_blocks >= 0 and block_size >= 1 (CHECKed; validate user config with
  // validate_config first).
  KVCacheManager(int32_t num_blocks, int32_t block_size, int32_t num_host_blocks = 0);
  ~KVCacheManager();
  KVCacheManager(const KVCacheManager&) = delete;
  KVCacheManager& operator=(const KVCacheManager&) = delete;
  static Status validate_config(int64_t num_blocks, int64_t block_size);

  // KV groups: sliding-window freeing for models that interleave
  // sliding-window and full-attention layers (gemma3, gpt-oss). The pool's
  // blocks become pages of equally many layers; a table entry (a "block"
  // below) names a bundle of num_groups pages, one per layer group: groups
  // [0, num_full_groups) hold full-attention layers, the rest sliding-window
  // layers. The table holds the group-0 page; page() finds the others. A
  // sequence drops its hold on a block's sliding pages once every query to
  // come lies past them (release_window: the block ends before
  // num_computed - window + 1); the pages are freed when no holder is left.
  // A block the prefix cache holds keeps its sliding pages after the last
  // sequence drops them, evictable (least recently dropped first, before
  // any tree node), so a later prompt can still hit there; a prefix hit of
  // L tokens needs the sliding pages of every block in [L - window + 1, L)
  // and is cut back to the longest L that has them. Swapping moves the pages
  // a sequence can still read (the host pool counts pages too); no tiers,
  // streaming eviction or state slots with groups. Call before any sequence
  // exists. Counts of blocks below (num_free_blocks, num_available_blocks,
  // num_blocks) are pages then; num_blocks_needed stays in table entries.
  void enable_kv_groups(int32_t num_groups, int32_t num_full_groups, int32_t window);
  int32_t num_kv_groups() const { return groups_; }
  int32_t num_full_kv_groups() const { return full_groups_; }
  int32_t sliding_window() const { return window_; }
  // The page of `block` (a table entry) holding group g's layers; -1 for a
  // sliding page the block no longer has.
  BlockId page(BlockId block, int32_t group) const {
    return group == 0 ? block : companions_[static_cast<size_t>(block.value) * (groups_ - 1) + group - 1];
  }
  // The sequence's table as group g's pages (-1 where dropped), into *out.
  void group_table(SeqId seq, int32_t group, std::vector<BlockId>* out) const;
  // After a step: drops the sequence's hold on the sliding pages of blocks
  // that end before num_computed - window + 1 (no query from position
  // num_computed on sees them). A no-op without sliding groups.
  void release_window(SeqId seq, int32_t num_computed);
  // Pages the running sequences pin (eviction cannot reclaim them): the
  // pages of their blocks, less sliding pages only the prefix cache keeps.
  int32_t num_pinned_pages() const;

  int32_t block_size() const { return block_size_; }
  // Blocks that hold num_tokens slots.
  int32_t num_blocks_for(int32_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }
  // Blocks an allocation can get now: free ones plus cached blocks that
  // eviction would free. O(1).
  int32_t num_available_blocks() const;
  // Blocks on the free list (referenced by no table and not cached).
  int32_t num_free_blocks() const { return pool_.num_free(); }
  int32_t num_blocks() const { return pool_.num_blocks(); }

  // Extra blocks the sequence needs so that its table holds num_total_tokens
  // slots (0 if it already does). An unknown sequence has an empty table.
  int32_t num_blocks_needed(SeqId seq, int32_t num_total_tokens) const;
  bool can_allocate(SeqId seq, int32_t num_total_tokens) const;
  // Predicate of allocate_for_write: whether it would succeed now.
  bool can_write(SeqId seq, int32_t pos_begin, int32_t pos_end) const;
  // Predicate of admitting a sequence with no blocks yet: whether
  // acquire_cached_prefix(seq, tokens) followed by allocate_for_write up to
  // num_total_tokens would succeed now (cached blocks it would reuse are not
  // counted as evictable).
  bool can_admit(std::span<const int32_t> tokens, int32_t num_total_tokens) const;
  // Grows the table to hold num_total_tokens slots (creating the sequence if
  // new). All-or-nothing: false and no change when the pool lacks blocks.
  // Never shrinks.
  bool allocate_slots(SeqId seq, int32_t num_total_tokens);
  // allocate_slots(seq, pos_end) plus copy-on-write of every shared block
  // that positions [pos_begin, pos_end) fall in; all-or-nothing. Appends the
  // block copies the caller must run (KVStorage::copy_block) to `cow`.
  bool allocate_for_write(SeqId seq, int32_t pos_begin, int32_t pos_end, std::vector<BlockCopy>* cow);
  // Drops block `index` of the sequence's table (StreamingLLM: a block from
  // the middle), decrementing its reference; every later block moves up one
  // place and its keys must shift down by block_size positions: a shared
  // block (another table or the prefix cache) is first copied (appended to
  // `cow`), then each later block is appended to `shifts`. The table's token
  // count drops by block_size, and its blocks are offered to the prefix
  // cache no more (their tokens no longer sit at their own positions).
  // All-or-nothing: false and no change when the copies lack free blocks.
  // CHECKs 0 <= index < table size - 1 (the block is whole and not the last).
  bool evict_block(SeqId seq, int32_t index, std::vector<BlockCopy>* cow, std::vector<KeyShift>* shifts);
  // Its blocks are offered to the prefix cache no more (SnapKV rewrites
  // them); CHECKs that the sequence exists.
  void set_uncacheable(SeqId seq);
  // Releases all of the sequence's blocks; unknown sequences are ignored.
  void free(SeqId seq);
  // Shrinks the table to the blocks that hold num_tokens slots, dropping the
  // rest (rejected speculative positions); the token count is capped too.
  // CHECKs that the sequence exists.
  void truncate(SeqId seq, int32_t num_tokens);

  bool contains(SeqId seq) const { return seqs_.count(seq) != 0; }
  int32_t num_seqs() const { return static_cast<int32_t>(seqs_.size()); }
  // The sequence's blocks in position order. Empty for an unknown sequence.
  const std::vector<BlockId>& block_table(SeqId seq) const;
  // Token slots the table holds (blocks * block_size).
  int32_t capacity(SeqId seq) const;
  // table[pos / bs] * bs + pos % bs; CHECKs pos < capacity.
  int64_t slot_of(SeqId seq, int32_t pos) const;
  // Tokens actually written (for waste stats); CHECKs n <= capacity.
  void set_num_tokens(SeqId seq, int32_t n);
  int32_t num_tokens(SeqId seq) const;

  // Shares all of parent's blocks with a new sequence child (incref each);
  // the child starts with the parent's token count. CHECKs that parent exists
  // and child does not.
  void fork(SeqId parent, SeqId child);
  // Blocks prepare_write would allocate for writes at positions [begin, end)
  // (one per shared block touched) — ask before writing into forked tables.
  int32_t num_cow_blocks_needed(SeqId seq, int32_t pos_begin, int32_t pos_end) const;
  // Copy-on-write: if the block holding pos is shared (ref > 1), allocates a
  // private block, swaps it into this sequence's table, drops the old
  // reference and returns the copy the caller must run
  // (KVStorage::copy_block). nullopt when the block is already private.
  // CHECKs that a free block exists when one is needed, and that there are
  // no KV groups (allocate_for_write copies every group's page).
  std::optional<BlockCopy> prepare_write(SeqId seq, int32_t pos);

  // Used blocks / total blocks (0 for an empty pool).
  double utilization() const;
  // (allocated slots - used slots) / allocated slots, summed over sequences'
  // tables (a shared block counts once per table); 0 if nothing allocated.
  double kv_waste() const;

  // Each block's ref count equals the number of table entries naming it;
  // every other block is free; token counts fit their tables.
  Status check_invariants() const;

  // Swap tier (preemption by swapping). swap_out moves a sequence's table to
  // host blocks: false and no change when the host pool lacks blocks;
  // otherwise `copies` lists device->host copies to run before reusing the
  // device blocks. swap_in is the reverse (host->device copies).
  bool swap_out(SeqId seq, std::vector<BlockCopy>* copies);
  bool swap_in(SeqId seq, std::vector<BlockCopy>* copies);
  bool is_swapped(SeqId seq) const { return swapped_.count(seq) != 0; }
  // Table entries a swapped sequence holds on the host (0 if not swapped).
  int32_t num_swapped_blocks(SeqId seq) const {
    auto it = swapped_.find(seq);
    return it == swapped_.end() ? 0 : static_cast<int32_t>(it->second.table.size());
  }
  // Predicate of swap_in followed by allocate_for_write up to
  // num_total_tokens from the swapped token count (no shared blocks then).
  bool can_swap_in(SeqId seq, int32_t num_total_tokens) const;
  int32_t num_free_host_blocks() const { return host_pool_.num_free(); }
  int32_t num_host_blocks() const { return host_pool_.num_blocks(); }

  // Recurrent-state slots (kv/state_storage.h), for models with recurrent
  // layers: once enabled, every sequence holds one slot id from creation
  // (allocate_slots, acquire_cached_prefix) to free(); it keeps its slot
  // while swapped out (the state is small and fixed-size); a forked child
  // gets a new one, whose state the caller copies from the parent's
  // (StateStorage::copy). A state stands for all of a sequence's computed
  // tokens, so it cannot be rolled back (truncate): the engine keeps
  // speculation off for such models. Freed ids are reused first; ids grow
  // past the high-water mark only when none is free. Call before any
  // sequence exists.
  //
  // With the prefix cache on too, a finished sequence's slot is kept as a
  // state snapshot keyed by its computed tokens (at most
  // `max_state_snapshots`, least recently used dropped first): a prefix hit
  // then stops exactly at the longest snapshot whose tokens begin the
  // prompt and whose blocks are all still cached (no snapshot: no hit), and
  // acquire_cached_prefix queues the copy of that snapshot into the new
  // sequence's slot (take_state_copies) — a chat's next turn resumes from
  // the end of the previous answer instead of recomputing the history.
  void enable_state_slots(int32_t max_state_snapshots = 0);
  bool state_slots_enabled() const { return state_slots_; }
  // The sequence's slot id (resident or swapped); -1 without one.
  int32_t state_slot(SeqId seq) const;
  // Slot ids handed out so far (the storage's size) and those free now.
  int32_t num_state_slots() const { return num_state_slots_; }
  int32_t num_free_state_slots() const { return static_cast<int32_t>(free_state_slots_.size()); }
  int32_t num_state_snapshots() const { return static_cast<int32_t>(snapshots_.size()); }
  // Moves the state copies queued by acquire_cached_prefix to `out` (the
  // runner runs them before the step's forward).
  void take_state_copies(std::vector<StateCopy>* out);

  // Prefix caching (RadixAttention). Off until enabled.
  void enable_prefix_cache(bool on);
  bool prefix_cache_enabled() const { return prefix_ != nullptr; }
  // For a sequence with no blocks yet: shares the cached blocks of the
  // longest prefix of `tokens`, leaving at least one token to compute (the
  // last position must run to give logits). The prefix may end inside a
  // block: that block is shared too and copied on the first write
  // (allocate_for_write). Returns the number of tokens whose K/V is now
  // present.
  int32_t acquire_cached_prefix(SeqId seq, std::span<const int32_t> tokens);
  // Read-only: tokens acquire_cached_prefix would reuse.
  int32_t num_cached_prefix_tokens(std::span<const int32_t> tokens) const;
  // Offers the sequence's whole blocks among its first num_computed tokens
  // to the cache.
  void cache_computed(SeqId seq, std::span<const int32_t> tokens, int32_t num_computed);
  // Before freeing a finished sequence: offers its last, partly filled block
  // too (PrefixCache::insert_partial), so a prompt that continues it —
  // the next turn of a chat, a short prompt sent again — shares those slots.
  void cache_finished(SeqId seq, std::span<const int32_t> tokens);
  const PrefixCache* prefix_cache() const { return prefix_.get(); }

  // Tiered KV (kv/kv_tiers.h), below the prefix cache: once attached (with
  // the prefix cache on, no state slots, before any sequence), every whole
  // block the cache evicts is staged for a spill into the tiers, and
  // restore_prefix refills the cache from them. `tiers` outlives this.
  void attach_tiers(KVTiers* tiers);
  KVTiers* tiers() const { return tiers_; }
  // Before admitting a prompt: loads the whole blocks that continue its
  // cached prefix from the tiers into fresh blocks held by the prefix cache
  // (their bytes arrive with the next forward, KVTiers::run_pending), so
  // acquire_cached_prefix then shares them like any cached block. Leaves one
  // token to compute; stops at the first block no tier holds or a damaged
  // one. Skipped unless the pool could hold the whole prompt (no thrashing).
  // Returns the number of blocks restored.
  int32_t restore_prefix(std::span<const int32_t> tokens);
  // At shutdown: every whole block the prefix cache holds goes to the disk
  // tier (what a restart will find).
  void persist_cached_blocks(const KVStorage& storage);

  // Read-only: every reference change goes through this class, which keeps
  // the prefix cache's evictable counts current.
  const BlockPool& pool() const { return pool_; }

 private:
  struct SeqState {
    std::vector<BlockId> table;
    int32_t num_tokens = 0;
    int32_t num_cached_blocks = 0;  // leading blocks already offered to the cache
    bool no_cache = false;          // evicted or compressed: its blocks are offered to the cache no more
    int32_t state_slot = -1;        // with state slots enabled
    int32_t sliding_from = 0;       // KV groups: table[sliding_from..] hold their sliding pages
    // KV groups, swapped out: the host pages of every entry and group
    // ([entry][group], -1 for sliding pages before sliding_from); `table`
    // then holds the group-0 ones.
    std::vector<BlockId> host_pages;
  };
  // The sequence's entry, created (with a state slot when enabled) if new.
  SeqState& get_or_create(SeqId seq);
  // What a prefix hit on `tokens` would reuse: whole blocks, then part of
  // the next one; with state snapshots, cut to the longest usable one.
  struct PrefixPlan {
    int32_t whole_blocks = 0;
    PrefixCache::PartialHit partial;
    int32_t snapshot = -1;  // index into snapshots_
    int32_t num_tokens(int32_t block_size) const { return whole_blocks * block_size + partial.num_tokens; }
  };
  PrefixPlan plan_prefix(std::span<const int32_t> tokens) const;
  struct Snapshot {
    std::vector<int32_t> tokens;  // the state stands for exactly these
    int32_t slot;
    uint64_t last_use;
  };
  int32_t take_state_slot();
  void release_state_slot(int32_t& slot);
  // The cached block continuing the first `whole` blocks of tokens partway
  // (PrefixCache::find_partial), leaving one token to compute.
  PrefixCache::PartialHit partial_hit(std::span<const int32_t> tokens, int32_t whole) const;
  // Makes `need` blocks free, evicting cached ones if that suffices.
  bool ensure_free(int32_t need);
  // A new table entry: a block, and with KV groups its other pages (the
  // caller holds the sliding ones; none when !sliding_pages). CHECKs that
  // enough pages are free.
  BlockId allocate_block(bool sliding_pages = true);
  // Copy-on-write of table entry `index` when shared; every group's page
  // copy is appended to `cow`.
  void copy_on_write(SeqId seq, int32_t index, std::vector<BlockCopy>* cow);
  // KV groups: holders of a block's sliding pages.
  bool sliding() const { return groups_ > full_groups_; }
  bool has_sliding_pages(BlockId b) const { return !sliding() || page(b, full_groups_).value >= 0; }
  void hold_sliding(BlockId b);
  void drop_sliding(BlockId b);
  void free_sliding_pages(BlockId b);
  void evict_oldest_sliding();
  void on_block_released(BlockId b);
  // swap_out / swap_in with KV groups: page by page.
  bool swap_out_pages(SeqId seq, std::vector<BlockCopy>* copies);
  bool swap_in_pages(SeqId seq, std::vector<BlockCopy>* copies);
  // check_invariants' part for KV groups: adds the pages blocks hold to `holders`.
  Status check_groups(std::vector<int32_t>& holders) const;
  // Cuts a prefix plan back to a hit whose window has its sliding pages.
  void cut_to_window(std::span<const int32_t> tokens, PrefixPlan* plan) const;
  // Pages (in units of groups) a prefix plan would pin that count as
  // evictable now.
  int32_t evictable_pages_reused(std::span<const int32_t> tokens, const PrefixPlan& plan) const;
  // Device-pool reference changes, reported to the prefix cache.
  void incref(BlockId b);
  void decref(BlockId b);
  const SeqState& state(SeqId seq) const;

  int32_t block_size_;
  BlockPool pool_;
  std::unordered_map<SeqId, SeqState> seqs_;
  BlockPool host_pool_;
  std::unordered_map<SeqId, SeqState> swapped_;  // tables of host block ids
  std::unique_ptr<PrefixCache> prefix_;          // after pool_: destroyed first
  bool state_slots_ = false;
  int32_t num_state_slots_ = 0;
  std::vector<int32_t> free_state_slots_;
  int32_t max_state_snapshots_ = 0;
  std::vector<Snapshot> snapshots_;
  uint64_t snapshot_clock_ = 0;
  std::vector<StateCopy> pending_state_copies_;
  KVTiers* tiers_ = nullptr;
  // KV groups (enable_kv_groups).
  int32_t groups_ = 1;
  int32_t full_groups_ = 1;
  int32_t window_ = 0;
  std::vector<BlockId> companions_;     // [page][groups_ - 1]: a block's other pages, -1 when none
  std::vector<int32_t> sliding_refs_;   // per block: holders of its sliding pages
  std::vector<uint8_t> cache_sliding_;  // per block: the prefix cache is one of them
  std::vector<uint64_t> sliding_stamp_;
  std::set<std::pair<uint64_t, int32_t>> sliding_lru_;  // blocks whose sliding pages only the cache holds
  uint64_t sliding_clock_ = 0;
};

}  // namespace pagoda
