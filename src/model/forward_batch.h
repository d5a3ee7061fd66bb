// One step's work for the model: a flat (ragged) batch of tokens from any
// number of sequences, each with its positions and KV block table. A prefill
// chunk, a decode token and draft tokens to verify all look the same here.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ids.h"

namespace pagoda {

struct SeqSlice {
  int32_t token_begin = 0;  // first index into ForwardBatch::tokens
  int32_t num_tokens = 0;
  int32_t kv_len = 0;                    // tokens in the cache after this step's writes
  const BlockId* block_table = nullptr;  // kernels read K/V through it
  // SnapKV / H2O: > 0 compresses the sequence's cache to this many tokens
  // per KV head after each layer's attention.
  int32_t compress_to = 0;
  // H2O: add the attention of this slice's queries to the rows' scores
  // (KVStorage::score), and compress by those scores.
  bool accumulate_scores = false;
  // With compress_to: SnapKV's observation window (the slice's last
  // queries) and max-pooling width over the votes; H2O's recent window.
  int32_t kv_window = 0, kv_pool = 1;
  // > 0: the slice ends with a tree of drafts from this cache position on;
  // ForwardBatch::tree_masks holds each token's mask (kernels::AttentionOptions).
  int32_t tree_begin = 0;
  // Models with recurrent layers: the sequence's state slot
  // (KVCacheManager::state_slot); its state covers kv_len - num_tokens
  // tokens (none: the slice starts the sequence and the state is zeroed).
  int32_t state_slot = -1;
};

struct ForwardBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;  // per token, RoPE position
  // Per token, its index in the sequence's cache (the causal mask: it sees
  // cache indices 0..this); differs from `positions` once tokens are evicted
  // under a policy that keeps their original positions (SnapKV).
  std::vector<int32_t> cache_positions;
  std::vector<int64_t> slots;  // per token, KV slot (block * block_size + offset)
  std::vector<SeqSlice> seqs;
  std::vector<int32_t> logit_rows;  // token indices whose logits are wanted, in output order
  // Per token when a slice has a tree (SeqSlice::tree_begin): bit j = sees
  // the tree's j-th position (its ancestors and itself); 0 before the tree.
  std::vector<uint64_t> tree_masks;
  // Per layer, nonzero: the layer is skipped (its residual passes through
  // unchanged), as a self-speculative draft runs the model; empty: none.
  // A setting of the batch's owner: clear() keeps it.
  std::vector<uint8_t> skip_layers;
  // KV groups (kv/kv_groups.h), when the model has them: group g >= 1's
  // slots at group_slots[(g - 1) * tokens.size() + t] and slice i's table of
  // group g's pages at group_tables[i * (num_groups - 1) + g - 1]; `slots`
  // and SeqSlice::block_table are group 0's.
  std::vector<int64_t> group_slots;
  std::vector<const BlockId*> group_tables;

  void clear() {
    tokens.clear();
    positions.clear();
    cache_positions.clear();
    slots.clear();
    seqs.clear();
    logit_rows.clear();
    tree_masks.clear();
    group_slots.clear();
    group_tables.clear();
  }
};

}  // namespace pagoda
