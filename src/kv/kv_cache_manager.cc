#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <climits>
#include <string>

#include "core/check.h"

namespace pagoda {

KVCacheManager::KVCacheManager(int32_t num_blocks, int32_t block_size, int32_t num_host_blocks)
    : block_size_(block_size), pool_(num_blocks), host_pool_(num_host_blocks) {
  PAGODA_CHECK(validate_config(num_blocks, block_size).is_ok());
}

// The pool's hook reaches back into this object: it goes before the members do.
KVCacheManager::~KVCacheManager() { pool_.set_release_hook(nullptr); }

void KVCacheManager::enable_kv_groups(int32_t num_groups, int32_t num_full_groups, int32_t window) {
  PAGODA_CHECK(seqs_.empty() && swapped_.empty() && !state_slots_ && tiers_ == nullptr);
  PAGODA_CHECK(num_groups >= 1 && num_full_groups >= 1 && num_full_groups <= num_groups && window >= 0);
  PAGODA_CHECK(prefix_ == nullptr || prefix_->num_cached_blocks() == 0);
  groups_ = num_groups;
  full_groups_ = num_full_groups;
  window_ = num_groups > num_full_groups ? window : 0;
  const auto n = static_cast<size_t>(pool_.num_blocks());
  companions_.assign(n * static_cast<size_t>(groups_ - 1), BlockId{-1});
  sliding_refs_.assign(n, 0);
  cache_sliding_.assign(n, 0);
  sliding_stamp_.assign(n, 0);
  if (groups_ > 1) pool_.set_release_hook([this](BlockId b) { on_block_released(b); });
}

BlockId KVCacheManager::allocate_block(bool sliding_pages) {
  const std::optional<BlockId> b = pool_.allocate();  // a free block, never a cached one
  PAGODA_CHECK(b.has_value());
  for (int32_t g = 1; g < groups_; ++g) {
    if (g >= full_groups_ && !sliding_pages) continue;
    const std::optional<BlockId> p = pool_.allocate();
    PAGODA_CHECK(p.has_value());
    companions_[static_cast<size_t>(b->value) * (groups_ - 1) + g - 1] = *p;
  }
  if (sliding() && sliding_pages) sliding_refs_[b->value] = 1;  // the caller's table entry
  return *b;
}

void KVCacheManager::hold_sliding(BlockId b) {
  int32_t& refs = sliding_refs_[b.value];
  PAGODA_CHECK(refs > 0 && has_sliding_pages(b));
  if (refs == 1 && cache_sliding_[b.value]) sliding_lru_.erase({sliding_stamp_[b.value], b.value});
  ++refs;
}

void KVCacheManager::drop_sliding(BlockId b) {
  int32_t& refs = sliding_refs_[b.value];
  PAGODA_CHECK(refs > 0);
  if (--refs > 0) {
    if (refs == 1 && cache_sliding_[b.value]) {  // the cache's alone now: evictable
      sliding_stamp_[b.value] = ++sliding_clock_;
      sliding_lru_.insert({sliding_stamp_[b.value], b.value});
    }
    return;
  }
  if (prefix_ && prefix_->holds(b)) {  // kept for a later hit, until pages run short
    cache_sliding_[b.value] = 1;
    refs = 1;
    sliding_stamp_[b.value] = ++sliding_clock_;
    sliding_lru_.insert({sliding_stamp_[b.value], b.value});
    return;
  }
  free_sliding_pages(b);
}

void KVCacheManager::free_sliding_pages(BlockId b) {
  for (int32_t g = full_groups_; g < groups_; ++g) {
    BlockId& p = companions_[static_cast<size_t>(b.value) * (groups_ - 1) + g - 1];
    const BlockId q = p;
    p = BlockId{-1};
    if (q.value >= 0) pool_.decref(q);
  }
}

void KVCacheManager::evict_oldest_sliding() {
  const int32_t b = sliding_lru_.begin()->second;
  sliding_lru_.erase(sliding_lru_.begin());
  PAGODA_CHECK(cache_sliding_[b] && sliding_refs_[b] == 1);
  cache_sliding_[b] = 0;
  sliding_refs_[b] = 0;
  free_sliding_pages(BlockId{b});
}

void KVCacheManager::on_block_released(BlockId b) {
  // Nobody holds the block: its sliding pages, if any, were the cache's.
  if (sliding_refs_[b.value] > 0) {
    PAGODA_CHECK(cache_sliding_[b.value] && sliding_refs_[b.value] == 1);
    sliding_lru_.erase({sliding_stamp_[b.value], b.value});
    cache_sliding_[b.value] = 0;
    sliding_refs_[b.value] = 0;
  }
  for (int32_t g = 1; g < groups_; ++g) {
    BlockId& p = companions_[static_cast<size_t>(b.value) * (groups_ - 1) + g - 1];
    const BlockId q = p;
    p = BlockId{-1};
    if (q.value >= 0) pool_.decref(q);  // a page has no pages of its own: no recursion
  }
}

void KVCacheManager::group_table(SeqId seq, int32_t group, std::vector<BlockId>* out) const {
  PAGODA_CHECK(group >= 0 && group < groups_);
  const std::vector<BlockId>& table = block_table(seq);
  out->resize(table.size());
  for (size_t i = 0; i < table.size(); ++i) (*out)[i] = page(table[i], group);
}

void KVCacheManager::release_window(SeqId seq, int32_t num_computed) {
  if (!sliding() || window_ <= 0) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqState& st = it->second;
  const int32_t upto =
      std::min<int32_t>(std::max(0, num_computed - window_ + 1) / block_size_, static_cast<int32_t>(st.table.size()));
  for (; st.sliding_from < upto; ++st.sliding_from) drop_sliding(st.table[static_cast<size_t>(st.sliding_from)]);
}

int32_t KVCacheManager::num_pinned_pages() const {
  std::vector<uint8_t> seen(static_cast<size_t>(pool_.num_blocks()), 0);
  int32_t n = 0;
  for (const auto& [id, s] : seqs_)
    for (size_t i = 0; i < s.table.size(); ++i) {
      const BlockId b = s.table[i];
      if (seen[static_cast<size_t>(b.value)]) continue;
      seen[static_cast<size_t>(b.value)] = 1;
      for (int32_t g = 0; g < full_groups_; ++g) n += page(b, g).value >= 0 ? 1 : 0;
      // Sliding pages only the cache keeps are evictable: not pinned.
      if (sliding() && has_sliding_pages(b) && !(cache_sliding_[b.value] && sliding_refs_[b.value] == 1))
        n += groups_ - full_groups_;
    }
  return n;
}

void KVCacheManager::cut_to_window(std::span<const int32_t> tokens, PrefixPlan* plan) const {
  if (!sliding() || window_ <= 0 || plan->num_tokens(block_size_) == 0) return;
  const std::vector<BlockId> path = prefix_->peek(tokens, plan->whole_blocks);
  for (;;) {
    const int32_t len = plan->num_tokens(block_size_);
    if (len == 0) return;
    bool ok = true;
    for (int32_t i = std::max(0, len - window_ + 1) / block_size_; ok && i <= (len - 1) / block_size_; ++i)
      ok = has_sliding_pages(i < plan->whole_blocks ? path[static_cast<size_t>(i)] : plan->partial.block);
    if (ok) return;
    if (plan->partial.num_tokens > 0) {
      plan->partial = {};
    } else {
      --plan->whole_blocks;
    }
  }
}

int32_t KVCacheManager::evictable_pages_reused(std::span<const int32_t> tokens, const PrefixPlan& plan) const {
  int32_t blocks = prefix_ && plan.whole_blocks > 0 ? prefix_->num_evictable_in_prefix(tokens, plan.whole_blocks) : 0;
  if (plan.partial.num_tokens > 0 && plan.partial.evictable) ++blocks;
  int32_t pages = blocks * full_groups_;
  const int32_t len = plan.num_tokens(block_size_);
  if (sliding() && len > 0) {  // sliding pages only the cache holds now, which the sequence would hold
    const std::vector<BlockId> path = prefix_->peek(tokens, plan.whole_blocks);
    for (int32_t i = std::max(0, len - window_ + 1) / block_size_; i <= (len - 1) / block_size_; ++i) {
      const BlockId b = i < plan.whole_blocks ? path[static_cast<size_t>(i)] : plan.partial.block;
      if (cache_sliding_[b.value] && sliding_refs_[b.value] == 1) pages += groups_ - full_groups_;
    }
  }
  return pages;
}

Status KVCacheManager::validate_config(int64_t num_blocks, int64_t block_size) {
  if (block_size < 1 || block_size > (1 << 20)) {
    return invalid_argument("KV block size must be in [1, 1048576], got " + std::to_string(block_size));
  }
  if (num_blocks < 0 || num_blocks > INT32_MAX / block_size) {
    return invalid_argument("number of KV blocks must be in [0, " + std::to_string(INT32_MAX / block_size) +
                            "] for block size " + std::to_string(block_size) + ", got " + std::to_string(num_blocks));
  }
  return Status::ok();
}

const KVCacheManager::SeqState& KVCacheManager::state(SeqId seq) const {
  auto it = seqs_.find(seq);
  PAGODA_CHECK(it != seqs_.end());
  return it->second;
}

int32_t KVCacheManager::num_blocks_needed(SeqId seq, int32_t num_total_tokens) const {
  PAGODA_CHECK(num_total_tokens >= 0);
  auto it = seqs_.find(seq);
  int32_t have = it == seqs_.end() ? 0 : static_cast<int32_t>(it->second.table.size());
  int32_t want = num_blocks_for(num_total_tokens);
  return want > have ? want - have : 0;
}

bool KVCacheManager::can_allocate(SeqId seq, int32_t num_total_tokens) const {
  return num_blocks_needed(seq, num_total_tokens) * groups_ <= num_available_blocks();
}

bool KVCacheManager::can_write(SeqId seq, int32_t pos_begin, int32_t pos_end) const {
  return (num_blocks_needed(seq, pos_end) + num_cow_blocks_needed(seq, pos_begin, pos_end)) * groups_ <=
         num_available_blocks();
}

bool KVCacheManager::can_admit(std::span<const int32_t> tokens, int32_t num_total_tokens) const {
  const PrefixPlan plan = plan_prefix(tokens);
  // Reused blocks become pinned: they stop counting as evictable. A partly
  // matched last block is pinned too until its copy is made, and the copy
  // is one of the blocks counted in `need`.
  const int32_t reused_evictable = evictable_pages_reused(tokens, plan);
  const int32_t need = std::max(0, num_blocks_for(num_total_tokens) - plan.whole_blocks) * groups_;
  return need <= num_available_blocks() - reused_evictable;
}

PrefixCache::PartialHit KVCacheManager::partial_hit(std::span<const int32_t> tokens, int32_t whole) const {
  // At least one token stays uncomputed (the last position must run).
  const int32_t room = static_cast<int32_t>(tokens.size()) - 1 - whole * block_size_;
  if (!prefix_ || room < 1) return {};
  return prefix_->find_partial(tokens, whole, room);
}

int32_t KVCacheManager::num_available_blocks() const {
  return pool_.num_free() + (prefix_ ? prefix_->num_evictable() * full_groups_ : 0) +
         static_cast<int32_t>(sliding_lru_.size()) * (groups_ - full_groups_);
}

bool KVCacheManager::ensure_free(int32_t need) {
  if (need <= pool_.num_free()) return true;
  if (!prefix_ || need > num_available_blocks()) return false;
  if (groups_ == 1) {
    prefix_->evict(need - pool_.num_free());
    return need <= pool_.num_free();
  }
  // Sliding pages the cache alone keeps go first: losing them costs hits
  // at those places only; a tree node then frees its full pages.
  while (pool_.num_free() < need) {
    if (!sliding_lru_.empty()) {
      evict_oldest_sliding();
    } else if (prefix_->evict(1) == 0) {
      break;
    }
  }
  return need <= pool_.num_free();
}

void KVCacheManager::incref(BlockId b) {
  pool_.incref(b);
  if (prefix_) prefix_->on_ref_changed(b);
}

void KVCacheManager::decref(BlockId b) {
  pool_.decref(b);
  if (prefix_) prefix_->on_ref_changed(b);
}

KVCacheManager::SeqState& KVCacheManager::get_or_create(SeqId seq) {
  auto [it, inserted] = seqs_.try_emplace(seq);
  if (inserted && state_slots_) it->second.state_slot = take_state_slot();
  return it->second;
}

void KVCacheManager::enable_state_slots(int32_t max_state_snapshots) {
  PAGODA_CHECK(seqs_.empty() && swapped_.empty() && max_state_snapshots >= 0 && groups_ == 1);
  state_slots_ = true;
  max_state_snapshots_ = max_state_snapshots;
}

void KVCacheManager::take_state_copies(std::vector<StateCopy>* out) {
  out->insert(out->end(), pending_state_copies_.begin(), pending_state_copies_.end());
  pending_state_copies_.clear();
}

KVCacheManager::PrefixPlan KVCacheManager::plan_prefix(std::span<const int32_t> tokens) const {
  PrefixPlan plan;
  if (!prefix_ || tokens.empty()) return plan;
  const auto n = static_cast<int32_t>(tokens.size());
  const int32_t cached_whole = prefix_->num_cached_tokens(tokens) / block_size_;  // whole blocks in the tree
  if (!state_slots_) {
    plan.whole_blocks = std::min((n - 1) / block_size_, cached_whole);
    plan.partial = partial_hit(tokens, plan.whole_blocks);
    cut_to_window(tokens, &plan);
    return plan;
  }
  // The longest snapshot that begins the prompt (one token left to
  // compute) and whose blocks are all still cached.
  int32_t best = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(snapshots_.size()); ++i) {
    const std::vector<int32_t>& key = snapshots_[static_cast<size_t>(i)].tokens;
    const auto len = static_cast<int32_t>(key.size());
    if (len > n - 1 || (best >= 0 && len <= static_cast<int32_t>(snapshots_[static_cast<size_t>(best)].tokens.size())))
      continue;
    if (!std::equal(key.begin(), key.end(), tokens.begin())) continue;
    const int32_t whole = len / block_size_, rest = len % block_size_;
    if (cached_whole < whole) continue;
    if (rest > 0 && prefix_->find_partial(tokens, whole, rest).num_tokens != rest) continue;
    best = i;
  }
  if (best < 0) return plan;
  const auto len = static_cast<int32_t>(snapshots_[static_cast<size_t>(best)].tokens.size());
  plan.snapshot = best;
  plan.whole_blocks = len / block_size_;
  if (len % block_size_ > 0) plan.partial = prefix_->find_partial(tokens, plan.whole_blocks, len % block_size_);
  return plan;
}

int32_t KVCacheManager::take_state_slot() {
  if (free_state_slots_.empty()) return num_state_slots_++;
  const int32_t s = free_state_slots_.back();
  free_state_slots_.pop_back();
  return s;
}

void KVCacheManager::release_state_slot(int32_t& slot) {
  if (slot < 0) return;
  free_state_slots_.push_back(slot);
  slot = -1;
}

int32_t KVCacheManager::state_slot(SeqId seq) const {
  if (auto it = seqs_.find(seq); it != seqs_.end()) return it->second.state_slot;
  if (auto it = swapped_.find(seq); it != swapped_.end()) return it->second.state_slot;
  return -1;
}

bool KVCacheManager::allocate_slots(SeqId seq, int32_t num_total_tokens) {
  int32_t need = num_blocks_needed(seq, num_total_tokens);
  if (!ensure_free(need * groups_)) return false;
  std::vector<BlockId>& table = get_or_create(seq).table;
  for (int32_t i = 0; i < need; ++i) table.push_back(allocate_block());
  return true;
}

bool KVCacheManager::allocate_for_write(SeqId seq, int32_t pos_begin, int32_t pos_end, std::vector<BlockCopy>* cow) {
  const int32_t need_new = num_blocks_needed(seq, pos_end);
  const int32_t need_cow = num_cow_blocks_needed(seq, pos_begin, pos_end);
  if (!ensure_free((need_new + need_cow) * groups_)) return false;
  PAGODA_CHECK(allocate_slots(seq, pos_end));
  if (need_cow == 0) return true;
  for (int32_t b = pos_begin / block_size_; b <= (pos_end - 1) / block_size_; ++b) copy_on_write(seq, b, cow);
  return true;
}

void KVCacheManager::free(SeqId seq) {
  if (auto sw = swapped_.find(seq); sw != swapped_.end()) {
    if (groups_ > 1) {
      for (BlockId h : sw->second.host_pages)
        if (h.value >= 0) host_pool_.decref(h);
    } else {
      for (BlockId h : sw->second.table) host_pool_.decref(h);
    }
    release_state_slot(sw->second.state_slot);
    swapped_.erase(sw);
  }
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  release_state_slot(it->second.state_slot);
  const std::vector<BlockId> table = std::move(it->second.table);
  const auto sliding_from = static_cast<size_t>(it->second.sliding_from);
  seqs_.erase(it);
  if (sliding())
    for (size_t i = sliding_from; i < table.size(); ++i) drop_sliding(table[i]);
  for (BlockId b : table) decref(b);
}

bool KVCacheManager::evict_block(SeqId seq, int32_t index, std::vector<BlockCopy>* cow, std::vector<KeyShift>* shifts) {
  auto it = seqs_.find(seq);
  PAGODA_CHECK(it != seqs_.end());
  SeqState& st = it->second;
  const auto n = static_cast<int32_t>(st.table.size());
  PAGODA_CHECK(groups_ == 1 && index >= 0 && index + 1 < n && st.num_tokens >= (index + 1) * block_size_);
  int32_t need_cow = 0;
  for (int32_t b = index + 1; b < n; ++b) need_cow += pool_.ref_count(st.table[b]) > 1;
  // The dropped block frees itself only when nobody else holds it.
  const int32_t freed = pool_.ref_count(st.table[index]) == 1 ? 1 : 0;
  if (need_cow > freed && !ensure_free(need_cow - freed)) return false;
  const BlockId dropped = st.table[index];
  st.table.erase(st.table.begin() + index);
  st.num_tokens -= block_size_;
  st.num_cached_blocks = std::min(st.num_cached_blocks, index);
  st.no_cache = true;
  decref(dropped);
  for (int32_t b = index; b < n - 1; ++b) {
    if (auto copy = prepare_write(seq, b * block_size_)) cow->push_back(*copy);
    shifts->push_back({st.table[b], -block_size_});
  }
  return true;
}

void KVCacheManager::set_uncacheable(SeqId seq) {
  auto it = seqs_.find(seq);
  PAGODA_CHECK(it != seqs_.end());
  it->second.no_cache = true;
}

void KVCacheManager::truncate(SeqId seq, int32_t num_tokens) {
  auto it = seqs_.find(seq);
  PAGODA_CHECK(it != seqs_.end() && num_tokens >= 0);
  SeqState& st = it->second;
  const auto keep = static_cast<size_t>(num_blocks_for(num_tokens));
  std::vector<BlockId> dropped;
  if (st.table.size() > keep) {
    dropped.assign(st.table.begin() + static_cast<std::ptrdiff_t>(keep), st.table.end());
    st.table.resize(keep);
  }
  st.num_tokens = std::min(st.num_tokens, num_tokens);
  st.num_cached_blocks = std::min(st.num_cached_blocks, static_cast<int32_t>(keep));
  if (sliding()) {
    for (size_t i = 0; i < dropped.size(); ++i)
      if (static_cast<int32_t>(keep + i) >= st.sliding_from) drop_sliding(dropped[i]);
    st.sliding_from = std::min(st.sliding_from, static_cast<int32_t>(keep));
  }
  for (BlockId b : dropped) decref(b);
}

const std::vector<BlockId>& KVCacheManager::block_table(SeqId seq) const {
  static const std::vector<BlockId> kEmpty;
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? kEmpty : it->second.table;
}

int32_t KVCacheManager::capacity(SeqId seq) const {
  return static_cast<int32_t>(block_table(seq).size()) * block_size_;
}

int64_t KVCacheManager::slot_of(SeqId seq, int32_t pos) const {
  const std::vector<BlockId>& table = state(seq).table;
  PAGODA_CHECK(pos >= 0 && pos / block_size_ < static_cast<int32_t>(table.size()));
  return static_cast<int64_t>(table[pos / block_size_].value) * block_size_ + pos % block_size_;
}

void KVCacheManager::set_num_tokens(SeqId seq, int32_t n) {
  auto it = seqs_.find(seq);
  PAGODA_CHECK(it != seqs_.end());
  PAGODA_CHECK(n >= 0 && n <= static_cast<int32_t>(it->second.table.size()) * block_size_);
  it->second.num_tokens = n;
}

int32_t KVCacheManager::num_tokens(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.num_tokens;
}

void KVCacheManager::fork(SeqId parent, SeqId child) {
  PAGODA_CHECK(!contains(child));
  SeqState copy = state(parent);
  for (BlockId b : copy.table) incref(b);
  if (sliding())
    for (size_t i = static_cast<size_t>(copy.sliding_from); i < copy.table.size(); ++i) hold_sliding(copy.table[i]);
  if (state_slots_) copy.state_slot = take_state_slot();
  seqs_.emplace(child, std::move(copy));
}

int32_t KVCacheManager::num_cow_blocks_needed(SeqId seq, int32_t pos_begin, int32_t pos_end) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || pos_begin >= pos_end) return 0;
  const std::vector<BlockId>& table = it->second.table;
  int32_t first = pos_begin / block_size_;
  int32_t last = std::min<int32_t>((pos_end - 1) / block_size_, static_cast<int32_t>(table.size()) - 1);
  int32_t n = 0;
  for (int32_t i = first; i <= last; ++i) n += pool_.ref_count(table[i]) > 1 ? 1 : 0;
  return n;
}

std::optional<BlockCopy> KVCacheManager::prepare_write(SeqId seq, int32_t pos) {
  auto it = seqs_.find(seq);
  PAGODA_CHECK(it != seqs_.end() && groups_ == 1);
  PAGODA_CHECK(pos >= 0 && pos / block_size_ < static_cast<int32_t>(it->second.table.size()));
  const BlockId src = it->second.table[pos / block_size_];
  if (pool_.ref_count(src) <= 1) return std::nullopt;
  PAGODA_CHECK(ensure_free(1));                   // callers ask num_cow_blocks_needed first
  std::optional<BlockId> dst = pool_.allocate();  // a free block, never a cached one
  PAGODA_CHECK(dst.has_value());
  seqs_.at(seq).table[pos / block_size_] = *dst;
  decref(src);  // stays referenced by the other holders (ref was > 1)
  return BlockCopy{src, *dst};
}

void KVCacheManager::copy_on_write(SeqId seq, int32_t index, std::vector<BlockCopy>* cow) {
  if (groups_ == 1) {
    if (auto copy = prepare_write(seq, index * block_size_)) cow->push_back(*copy);
    return;
  }
  SeqState& st = seqs_.at(seq);
  PAGODA_CHECK(index >= 0 && index < static_cast<int32_t>(st.table.size()));
  const BlockId src = st.table[static_cast<size_t>(index)];
  if (pool_.ref_count(src) <= 1) return;
  PAGODA_CHECK(index >= st.sliding_from || !sliding());  // writes land inside the window
  PAGODA_CHECK(ensure_free(groups_));                    // callers ask num_cow_blocks_needed first
  const BlockId dst = allocate_block();
  for (int32_t g = 0; g < groups_; ++g)
    if (page(src, g).value >= 0) cow->push_back({page(src, g), page(dst, g)});
  st.table[static_cast<size_t>(index)] = dst;
  if (sliding()) drop_sliding(src);
  decref(src);  // stays referenced by the other holders (ref was > 1)
}

double KVCacheManager::utilization() const {
  if (pool_.num_blocks() == 0) return 0.0;
  return static_cast<double>(pool_.num_blocks() - num_available_blocks()) / pool_.num_blocks();
}

double KVCacheManager::kv_waste() const {
  int64_t allocated = 0;
  int64_t used = 0;
  for (const auto& [id, s] : seqs_) {
    allocated += static_cast<int64_t>(s.table.size()) * block_size_;
    used += s.num_tokens;
  }
  if (allocated == 0) return 0.0;
  return static_cast<double>(allocated - used) / static_cast<double>(allocated);
}

Status KVCacheManager::check_invariants() const {
  PAGODA_RETURN_IF_ERROR(pool_.check_invariants());
  std::vector<int32_t> holders(pool_.num_blocks(), 0);
  if (prefix_) {
    PAGODA_RETURN_IF_ERROR(prefix_->check_invariants());
    prefix_->add_holders(holders);
  }
  for (const auto& [id, s] : seqs_) {
    std::string name = "sequence " + std::to_string(id.value);
    for (BlockId b : s.table) {
      if (b.value < 0 || b.value >= pool_.num_blocks())
        return internal_error(name + " holds invalid block " + std::to_string(b.value));
      ++holders[b.value];
    }
    if (s.num_tokens < 0 || s.num_tokens > static_cast<int64_t>(s.table.size()) * block_size_) {
      return internal_error(name + " has " + std::to_string(s.num_tokens) + " tokens but room for " +
                            std::to_string(s.table.size() * block_size_));
    }
  }
  PAGODA_RETURN_IF_ERROR(check_groups(holders));
  for (int32_t b = 0; b < pool_.num_blocks(); ++b) {
    int32_t rc = pool_.ref_count(BlockId{b});
    if (rc != holders[b]) {
      return internal_error("block " + std::to_string(b) + " has ref count " + std::to_string(rc) + " but " +
                            std::to_string(holders[b]) + " table/cache references" +
                            (rc > holders[b] ? " (leak)" : ""));
    }
  }
  PAGODA_RETURN_IF_ERROR(host_pool_.check_invariants());
  std::vector<int32_t> host_holders(host_pool_.num_blocks(), 0);
  for (const auto& [id, s] : swapped_) {
    if (seqs_.count(id))
      return internal_error("sequence " + std::to_string(id.value) + " is both swapped and resident");
    if (groups_ > 1) {
      for (BlockId h : s.host_pages)
        if (h.value >= 0) ++host_holders.at(h.value);
    } else {
      for (BlockId h : s.table) ++host_holders.at(h.value);
    }
  }
  for (int32_t h = 0; h < host_pool_.num_blocks(); ++h)
    if (host_pool_.ref_count(BlockId{h}) != host_holders[h])
      return internal_error("host block " + std::to_string(h) + " ref count does not match swapped tables");
  // State slots: each id below the high-water mark is held by exactly one
  // sequence (resident or swapped) or free; none without slots enabled.
  std::vector<int32_t> slot_holders(static_cast<size_t>(num_state_slots_), 0);
  auto hold = [&](int32_t slot, const std::string& who) -> Status {
    if (!state_slots_) return slot == -1 ? Status::ok() : internal_error(who + " holds a state slot, none enabled");
    if (slot < 0 || slot >= num_state_slots_)
      return internal_error(who + " holds state slot " + std::to_string(slot) + " of " +
                            std::to_string(num_state_slots_));
    ++slot_holders[static_cast<size_t>(slot)];
    return Status::ok();
  };
  for (const auto& [id, s] : seqs_) PAGODA_RETURN_IF_ERROR(hold(s.state_slot, "sequence " + std::to_string(id.value)));
  for (const auto& [id, s] : swapped_)
    PAGODA_RETURN_IF_ERROR(hold(s.state_slot, "swapped sequence " + std::to_string(id.value)));
  for (int32_t slot : free_state_slots_) PAGODA_RETURN_IF_ERROR(hold(slot, "the free list"));
  for (const Snapshot& s : snapshots_) PAGODA_RETURN_IF_ERROR(hold(s.slot, "a state snapshot"));
  if (static_cast<int32_t>(snapshots_.size()) > max_state_snapshots_)
    return internal_error("more state snapshots than allowed");
  for (int32_t i = 0; i < num_state_slots_; ++i)
    if (slot_holders[static_cast<size_t>(i)] != 1)
      return internal_error("state slot " + std::to_string(i) + " has " +
                            std::to_string(slot_holders[static_cast<size_t>(i)]) + " holders (free list included)");
  return Status::ok();
}

Status KVCacheManager::check_groups(std::vector<int32_t>& holders) const {
  if (groups_ == 1) return Status::ok();
  // A live block holds its other pages; sliding holders are the sequences
  // whose window reaches the block, plus the cache where it kept them.
  std::vector<int32_t> want(static_cast<size_t>(pool_.num_blocks()), 0);
  for (const auto& [id, s] : seqs_) {
    if (s.sliding_from < 0 || s.sliding_from > static_cast<int32_t>(s.table.size()))
      return internal_error("sequence " + std::to_string(id.value) + " holds sliding pages from a bad index");
    if (sliding())
      for (size_t i = static_cast<size_t>(s.sliding_from); i < s.table.size(); ++i) ++want[s.table[i].value];
  }
  size_t lru = 0;
  for (int32_t b = 0; b < pool_.num_blocks(); ++b) {
    const std::string name = "block " + std::to_string(b);
    const bool live = pool_.ref_count(BlockId{b}) > 0;
    for (int32_t g = 1; g < groups_; ++g) {
      const BlockId p = page(BlockId{b}, g);
      if (p.value < 0) continue;
      if (!live || p.value >= pool_.num_blocks()) return internal_error(name + " is free but holds pages");
      ++holders[p.value];
    }
    if (cache_sliding_[b]) {
      if (!prefix_ || !prefix_->holds(BlockId{b})) return internal_error(name + ": kept sliding pages, not cached");
      ++want[b];
      if (sliding_refs_[b] == 1 && !sliding_lru_.count({sliding_stamp_[b], b}))
        return internal_error(name + ": evictable sliding pages missing from their list");
      lru += sliding_refs_[b] == 1 ? 1 : 0;
    }
    if (sliding_refs_[b] != want[b])
      return internal_error(name + " has " + std::to_string(sliding_refs_[b]) + " sliding holders, want " +
                            std::to_string(want[b]));
    if (sliding() && live && (sliding_refs_[b] > 0) != has_sliding_pages(BlockId{b}))
      return internal_error(name + (sliding_refs_[b] > 0 ? " lost its sliding pages" : " keeps unheld sliding pages"));
  }
  if (lru != sliding_lru_.size()) return internal_error("the evictable sliding list is out of date");
  return Status::ok();
}

bool KVCacheManager::swap_out(SeqId seq, std::vector<BlockCopy>* copies) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || swapped_.count(seq)) return false;
  if (groups_ > 1) return swap_out_pages(seq, copies);
  SeqState& dev = it->second;
  if (static_cast<int32_t>(dev.table.size()) > host_pool_.num_free()) return false;
  SeqState host;
  host.num_tokens = dev.num_tokens;
  host.no_cache = dev.no_cache;
  host.state_slot = dev.state_slot;  // the state stays where it is
  dev.state_slot = -1;
  for (BlockId b : dev.table) {
    std::optional<BlockId> h = host_pool_.allocate();
    PAGODA_CHECK(h.has_value());
    host.table.push_back(*h);
    copies->push_back({b, *h});
  }
  free(seq);
  swapped_.emplace(seq, std::move(host));
  return true;
}

bool KVCacheManager::swap_in(SeqId seq, std::vector<BlockCopy>* copies) {
  auto it = swapped_.find(seq);
  if (it == swapped_.end() || seqs_.count(seq)) return false;
  SeqState& host = it->second;
  if (groups_ > 1) return swap_in_pages(seq, copies);
  if (!ensure_free(static_cast<int32_t>(host.table.size()))) return false;
  SeqState dev;
  dev.num_tokens = host.num_tokens;
  dev.no_cache = host.no_cache;
  dev.state_slot = host.state_slot;
  for (BlockId h : host.table) {
    const BlockId b = allocate_block();
    dev.table.push_back(b);
    copies->push_back({h, b});
    host_pool_.decref(h);
  }
  swapped_.erase(it);
  seqs_.emplace(seq, std::move(dev));
  return true;
}

bool KVCacheManager::can_swap_in(SeqId seq, int32_t num_total_tokens) const {
  auto it = swapped_.find(seq);
  if (it == swapped_.end()) return false;
  const auto entries = static_cast<int32_t>(it->second.table.size());
  int32_t need = entries;
  if (groups_ > 1) {
    need = 0;
    for (BlockId h : it->second.host_pages) need += h.value >= 0 ? 1 : 0;
  }
  return need + std::max(0, num_blocks_for(num_total_tokens) - entries) * groups_ <= num_available_blocks();
}

bool KVCacheManager::swap_out_pages(SeqId seq, std::vector<BlockCopy>* copies) {
  SeqState& dev = seqs_.at(seq);
  const auto n = static_cast<int32_t>(dev.table.size());
  // Every page the sequence can still read: full groups' of every entry,
  // sliding groups' from sliding_from on.
  int32_t need = 0;
  for (int32_t i = 0; i < n; ++i)
    for (int32_t g = 0; g < groups_; ++g) need += g < full_groups_ || i >= dev.sliding_from ? 1 : 0;
  if (need > host_pool_.num_free()) return false;
  SeqState host;
  host.num_tokens = dev.num_tokens;
  host.no_cache = dev.no_cache;
  host.sliding_from = dev.sliding_from;
  host.host_pages.assign(static_cast<size_t>(n) * groups_, BlockId{-1});
  for (int32_t i = 0; i < n; ++i)
    for (int32_t g = 0; g < groups_; ++g) {
      if (g >= full_groups_ && i < dev.sliding_from) continue;
      const std::optional<BlockId> h = host_pool_.allocate();
      PAGODA_CHECK(h.has_value());
      host.host_pages[static_cast<size_t>(i) * groups_ + g] = *h;
      copies->push_back({page(dev.table[static_cast<size_t>(i)], g), *h});
    }
  for (int32_t i = 0; i < n; ++i) host.table.push_back(host.host_pages[static_cast<size_t>(i) * groups_]);
  free(seq);
  swapped_.emplace(seq, std::move(host));
  return true;
}

bool KVCacheManager::swap_in_pages(SeqId seq, std::vector<BlockCopy>* copies) {
  SeqState& host = swapped_.at(seq);
  const auto n = static_cast<int32_t>(host.table.size());
  int32_t need = 0;
  for (BlockId h : host.host_pages) need += h.value >= 0 ? 1 : 0;
  if (!ensure_free(need)) return false;
  SeqState dev;
  dev.num_tokens = host.num_tokens;
  dev.no_cache = host.no_cache;
  dev.sliding_from = host.sliding_from;
  for (int32_t i = 0; i < n; ++i) {
    const BlockId b = allocate_block(i >= dev.sliding_from);  // sliding pages before the window were not kept
    for (int32_t g = 0; g < groups_; ++g) {
      const BlockId h = host.host_pages[static_cast<size_t>(i) * groups_ + g];
      if (h.value < 0) continue;
      copies->push_back({h, page(b, g)});
      host_pool_.decref(h);
    }
    dev.table.push_back(b);
  }
  swapped_.erase(seq);
  seqs_.emplace(seq, std::move(dev));
  return true;
}

void KVCacheManager::enable_prefix_cache(bool on) {
  if (on && !prefix_) prefix_ = std::make_unique<PrefixCache>(pool_, block_size_);
  if (!on) {
    // Sliding pages the cache kept go first (their blocks may outlive it).
    for (size_t b = 0; b < cache_sliding_.size(); ++b) {
      if (!cache_sliding_[b]) continue;
      if (sliding_refs_[b] == 1) sliding_lru_.erase({sliding_stamp_[b], static_cast<int32_t>(b)});
      cache_sliding_[b] = 0;
      if (--sliding_refs_[b] == 0) free_sliding_pages(BlockId{static_cast<int32_t>(b)});
    }
    prefix_.reset();
    tiers_ = nullptr;
  }
}

int32_t KVCacheManager::acquire_cached_prefix(SeqId seq, std::span<const int32_t> tokens) {
  if (!prefix_ || tokens.empty()) return 0;
  auto it = seqs_.find(seq);
  if (it != seqs_.end() && !it->second.table.empty()) return 0;
  const PrefixPlan plan = plan_prefix(tokens);
  if (state_slots_ && plan.snapshot < 0) return 0;  // no state to resume from
  const std::vector<BlockId> blocks = prefix_->match(tokens, plan.whole_blocks);
  PAGODA_CHECK(static_cast<int32_t>(blocks.size()) == plan.whole_blocks);
  SeqState& st = get_or_create(seq);
  for (BlockId b : blocks) {
    incref(b);
    st.table.push_back(b);
  }
  st.num_cached_blocks = static_cast<int32_t>(blocks.size());
  st.num_tokens = st.num_cached_blocks * block_size_;
  // The hit may go on inside the next block: share it; the first write
  // copies it (allocate_for_write's copy-on-write), keeping its matched slots.
  if (plan.partial.num_tokens > 0) {
    const PrefixCache::PartialHit hit = prefix_->match_partial(tokens, st.num_cached_blocks, plan.partial.num_tokens);
    PAGODA_CHECK(hit.num_tokens == plan.partial.num_tokens);
    incref(hit.block);
    st.table.push_back(hit.block);
    st.num_tokens += hit.num_tokens;
  }
  // The first query (at num_tokens) sees the window before it: those blocks' sliding pages.
  if (sliding()) {
    st.sliding_from = std::max(0, st.num_tokens - window_ + 1) / block_size_;
    for (size_t i = static_cast<size_t>(st.sliding_from); i < st.table.size(); ++i) hold_sliding(st.table[i]);
  }
  if (plan.snapshot >= 0) {
    Snapshot& snap = snapshots_[static_cast<size_t>(plan.snapshot)];
    snap.last_use = ++snapshot_clock_;
    pending_state_copies_.push_back({snap.slot, st.state_slot});
  }
  return st.num_tokens;
}

void KVCacheManager::attach_tiers(KVTiers* tiers) {
  PAGODA_CHECK(prefix_ != nullptr && !state_slots_ && seqs_.empty() && swapped_.empty() && groups_ == 1);
  PAGODA_CHECK(tiers->block_size() == block_size_);
  tiers_ = tiers;
  prefix_->set_root_key(tiers->root());
  prefix_->set_evict_listener([tiers](BlockId block, const BlockKey& key, std::span<const int32_t> tokens) {
    tiers->stage_spill(key, tokens, block);
  });
}

int32_t KVCacheManager::restore_prefix(std::span<const int32_t> tokens) {
  if (!tiers_ || !prefix_ || tokens.empty()) return 0;
  const auto n = static_cast<int32_t>(tokens.size());
  const int32_t limit = (n - 1) / block_size_;  // one token is left to compute
  const int32_t cached = prefix_->num_cached_tokens(tokens) / block_size_;
  if (cached >= limit || num_available_blocks() < num_blocks_for(n)) return 0;
  auto block_tokens = [&](int32_t i) { return tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_); };
  BlockKey key = tiers_->root();
  for (int32_t i = 0; i < cached; ++i) key = chain_block_key(key, block_tokens(i));
  if (!tiers_->contains(chain_block_key(key, block_tokens(cached)))) return 0;
  // The cached path is held while restoring so that making room cannot evict it.
  std::vector<BlockId> path = prefix_->match(tokens, cached);
  for (BlockId b : path) incref(b);
  int32_t restored = 0;
  for (int32_t i = cached; i < limit; ++i) {
    key = chain_block_key(key, block_tokens(i));
    if (!tiers_->contains(key) || !ensure_free(1)) break;
    const std::optional<BlockId> b = pool_.allocate();
    PAGODA_CHECK(b.has_value());
    if (!tiers_->stage_load(key, block_tokens(i), *b)) {
      pool_.decref(*b);
      break;
    }
    path.push_back(*b);
    ++restored;
  }
  if (restored > 0) prefix_->insert(tokens.first(static_cast<size_t>(cached + restored) * block_size_), path);
  for (BlockId b : path) decref(b);  // the restored blocks are the cache's alone now
  return restored;
}

void KVCacheManager::persist_cached_blocks(const KVStorage& storage) {
  if (!tiers_ || !prefix_) return;
  prefix_->for_each_block([&](BlockId block, const BlockKey& key, std::span<const int32_t> tokens) {
    tiers_->persist(key, tokens, storage, block);
  });
}

int32_t KVCacheManager::num_cached_prefix_tokens(std::span<const int32_t> tokens) const {
  return plan_prefix(tokens).num_tokens(block_size_);
}

void KVCacheManager::cache_computed(SeqId seq, std::span<const int32_t> tokens, int32_t num_computed) {
  if (!prefix_) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqState& st = it->second;
  const int32_t full = std::min<int32_t>(num_computed / block_size_, static_cast<int32_t>(st.table.size()));
  if (st.no_cache || full <= st.num_cached_blocks) return;
  prefix_->insert(tokens.first(static_cast<size_t>(full) * block_size_), st.table);
  st.num_cached_blocks = full;
}

void KVCacheManager::cache_finished(SeqId seq, std::span<const int32_t> tokens) {
  if (!prefix_) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqState& st = it->second;
  if (st.no_cache) return;
  const int32_t n = std::min<int32_t>(st.num_tokens, static_cast<int32_t>(tokens.size()));
  if (n % block_size_ != 0 && st.num_cached_blocks == n / block_size_)  // else whole blocks are cached already
    prefix_->insert_partial(tokens.first(static_cast<size_t>(n)), st.table);
  // The sequence's state stands for its n computed tokens: keep it.
  if (!state_slots_ || max_state_snapshots_ == 0 || n < 1 || st.state_slot < 0) return;
  for (const Snapshot& s : snapshots_)
    if (static_cast<int32_t>(s.tokens.size()) == n && std::equal(s.tokens.begin(), s.tokens.end(), tokens.begin()))
      return;  // the same tokens are kept already
  if (static_cast<int32_t>(snapshots_.size()) == max_state_snapshots_) {
    auto lru = std::min_element(snapshots_.begin(), snapshots_.end(),
                                [](const Snapshot& a, const Snapshot& b) { return a.last_use < b.last_use; });
    release_state_slot(lru->slot);
    snapshots_.erase(lru);
  }
  snapshots_.push_back({std::vector<int32_t>(tokens.begin(), tokens.begin() + n), st.state_slot, ++snapshot_clock_});
  st.state_slot = -1;  // the snapshot owns it now
}

}  // namespace pagoda
