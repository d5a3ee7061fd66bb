// The target's output matrix as the Medusa heads read it. The heads only
// pick candidates (verification computes the exact logits), so when the
// matrix is F32, F16 or BF16 they read a Q8_0 copy, packed for the active
// ISA: a quarter (F32) or half (F16) of the bytes and integer dot products.
// On the bundled model (4096 x 256, F32) that is 1 MiB instead of 4: it
// stays in L2, and a one-head proposal costs about a third of what the
// full matrix did. Other types (already quantized), or rows that are not
// whole Q8_0 blocks, use the matrix itself.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/packed.h"

namespace pagoda {

class HeadProjection {
 public:
  // `output` must outlive this object unless quantized() (the copy is ours).
  HeadProjection(const kernels::WeightView& output, ThreadPool& pool);
  HeadProjection(const HeadProjection&) = delete;
  HeadProjection& operator=(const HeadProjection&) = delete;

  // logits[r] = W hidden[r] for r < rows: [rows][vocab].
  void project(const float* hidden, int32_t rows, float* logits, ThreadPool& pool) const;
  bool quantized() const { return !q8_.empty(); }
  const kernels::WeightView& weight() const { return view_; }

 private:
  std::vector<uint8_t> q8_;
  kernels::WeightView view_;
  kernels::PackedWeights packed_;
};

}  // namespace pagoda
