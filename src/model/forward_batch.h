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
};

struct ForwardBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;  // per token, absolute position in its sequence
  std::vector<int64_t> slots;      // per token, KV slot (block * block_size + offset)
  std::vector<SeqSlice> seqs;
  std::vector<int32_t> logit_rows;  // token indices whose logits are wanted, in output order

  void clear() {
    tokens.clear();
    positions.clear();
    slots.clear();
    seqs.clear();
    logit_rows.clear();
  }
};

}  // namespace pagoda
