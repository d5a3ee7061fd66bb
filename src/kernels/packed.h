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
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/matmul.h"

namespace pagoda::kernels {

// False when PAGODA_REPACK=0 (says so on stderr, once).
bool repack_enabled();

// Whether the active ISA has a packed kernel for this weight.
bool can_pack(const WeightView& w);

// Whether the active ISA runs the BF16 dot-product path (WeightView::bf16_dot).
bool has_bf16_dot();

// An on-disk copy of the packed weights (`--pack-cache DIR`): the next start
// maps it from the page cache instead of packing into fresh memory — on a
// 14 GB F16 model that is most of the start-up time. The file's header
// holds `identity`, which must change whenever the source weights do
// (LlamaModel uses the file's path, size, mtime and inode), every packed
// matrix's kind and shape, and a fingerprint of each layout (a small matrix
// packed now); it is named after the model (stem) and a hash of that
// header, and used only when its header and size are exactly as expected,
// so a stale, foreign or truncated file is never used: it is rebuilt. Old
// files are not deleted; the directory may be emptied at any time.
struct PackCacheSpec {
  std::string dir;  // empty: no cache
  std::string stem;
  std::string identity;
};

// Owns packed copies; the WeightViews it fills point into it, so it must
// outlive them.
class PackedWeights {
 public:
  PackedWeights() = default;
  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;

  // Packs every weight that can_pack() (splitting the work across `pool`)
  // into one huge-page arena and sets its `packed`; calls on_packed(w)
  // after each (e.g. to release the source pages). Returns the bytes added
  // (0 when the arena cannot be allocated: a message, and the weights keep
  // the row layout).
  // With a cache spec, a valid cache file is mapped instead (nothing is
  // packed; returns its bytes); otherwise the weights are packed and the
  // file written for next time (best effort: a failure is a message).
  size_t pack(WeightView* const* ws, int n, ThreadPool& pool,
              const std::function<void(const WeightView&)>& on_packed = nullptr, const PackCacheSpec* cache = nullptr);
  size_t bytes() const { return bytes_; }
  // Whether the last pack() mapped a cache file rather than packing.
  bool from_cache() const { return from_cache_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  struct Mapping {
    void* addr = nullptr;
    size_t size = 0;
  };
  std::vector<std::unique_ptr<uint8_t, Free>> buffers_;
  std::vector<Mapping> mappings_;
  size_t bytes_ = 0;
  bool from_cache_ = false;
};

}  // namespace pagoda::kernels
