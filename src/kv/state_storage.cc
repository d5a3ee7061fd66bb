#include "kv/state_storage.h"

#include <algorithm>

#include "core/check.h"

namespace pagoda {

float* StateStorage::slot(int32_t slot) {
  PAGODA_CHECK(slot >= 0);
  while (static_cast<int32_t>(slots_.size()) <= slot) {
    slots_.push_back(std::make_unique<float[]>(static_cast<size_t>(slot_floats_)));  // value-initialized: zeros
  }
  return slots_[static_cast<size_t>(slot)].get();
}

void StateStorage::copy(int32_t src, int32_t dst) {
  if (src == dst) return;
  const float* s = slot(src);
  std::copy_n(s, slot_floats_, slot(dst));
}

}  // namespace pagoda
