// Load-time weight repacking: a row-interleaved copy of a weight matrix
// (kernels/cpu/pack.h) that the active ISA's packed kernels read for both
// prefill and decode. The copy lives in 2 MiB-aligned anonymous memory
// advised for transparent huge pages, so streaming it does not take a TLB
// miss (and a hardware-prefetch restart) every 4 KiB the way mmapped file
// pages do.
//
// Every row of a matrix is packed (a last partial group of 16 is padded).
// PAGODA_REPACK=0 in the environment turns packing off: matmul then runs the
// scalar reference kernels on the original layout (slow; for debugging).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/matmul.h"

namespace pagoda::kernels {

// False when PAGODA_REPACK=0 (says so on stderr, once).
bool repack_enabled();

// Whether the active ISA has a packed kernel for this weight.
bool can_pack(const WeightView& w);

// Owns packed copies; the WeightViews it fills point into it, so it must
// outlive them.
class PackedWeights {
 public:
  PackedWeights() = default;
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;

  // Packs every weight that can_pack() (splitting the work across `pool`)
  // into one huge-page arena and sets its `packed`; calls on_packed(w)
  // after each (e.g. to release the source pages). Returns the bytes added
  // (0 when the arena cannot be allocated: a message, and the weights keep
  // the row layout).
  size_t pack(WeightView* const* ws, int n, ThreadPool& pool,
              const std::function<void(const WeightView&)>& on_packed = nullptr);
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::vector<std::unique_ptr<uint8_t, Free>> buffers_;
  size_t bytes_ = 0;
};

}  // namespace pagoda::kernels
