// Tensor parallelism's per-step message: rank 0 sends every rank the step's
// block copies and the flat batch (with each slice's block table), so each
// rank runs the same copies and forward over its share of the heads. A
// plain length-prefixed byte format of fixed-size records; decode checks
// every length and index against the receiver's KV storage and returns an
// error for a malformed message, never reading out of bounds.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache_manager.h"
#include "model/forward_batch.h"

namespace pagoda {

// A step's block copies, in the order ModelRunner runs them (views of a
// SchedulerOutput's lists, or of a decoded TpStep's).
struct StepCopies {
  std::span<const BlockCopy> evict_cow;
  std::span<const KeyShift> key_shifts;
  std::span<const BlockCopy> swap_out, swap_in, cow;
};

struct TpStep {
  std::vector<BlockCopy> evict_cow, swap_out, swap_in, cow;
  std::vector<KeyShift> key_shifts;
  ForwardBatch batch;
  std::vector<std::vector<BlockId>> tables;  // per slice; batch.seqs[i].block_table points here
  StepCopies copies() const { return {evict_cow, key_shifts, swap_out, swap_in, cow}; }
};

// block_size: the KV storage's; each slice carries the blocks covering kv_len.
void encode_tp_step(const StepCopies& copies, const ForwardBatch& batch, int32_t block_size, std::vector<uint8_t>* out);
// num_blocks / num_host_blocks / num_layers: the receiver's storage, for the checks.
Status decode_tp_step(std::span<const uint8_t> bytes, int32_t block_size, int32_t num_blocks, int32_t num_host_blocks,
                      int32_t num_layers, TpStep* out);

}  // namespace pagoda
