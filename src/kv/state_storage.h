// Fixed-size per-sequence state of recurrent layers (Gated DeltaNet,
// Mamba-2): one slot per sequence, each holding every recurrent layer's conv
// window and state matrices (ModelConfig::recurrent_state_floats). Slot ids
// come from KVCacheManager (allocated on admission, freed on finish, kept
// while swapped, a new one on fork); the storage grows as new ids appear, so
// its memory follows the peak number of live sequences.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace pagoda {

class StateStorage {
 public:
  explicit StateStorage(int64_t slot_floats) : slot_floats_(slot_floats) {}

  int64_t slot_floats() const { return slot_floats_; }
  int32_t num_slots() const { return static_cast<int32_t>(slots_.size()); }
  // The slot's floats (zero when first created); grows the storage to hold
  // slot ids up to `slot`. Pointers stay valid as it grows.
  float* slot(int32_t slot);
  // dst = src (a forked sequence starts from its parent's state).
  void copy(int32_t src, int32_t dst);

 private:
  int64_t slot_floats_;
  std::vector<std::unique_ptr<float[]>> slots_;
};

}  // namespace pagoda
