// The reconstruction grid of one quantized block once its scales are fixed:
// element e decodes to a[e] * q + b[e] for an integer level q in [0, qmax].
// GPTQ rounds against it column by column (the block's scales are chosen
// first, from the weights as they are when GPTQ reaches the block), then
// writes the levels back into the block.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pagoda::quant {

struct BlockGrid {
  int n = 0;     // elements (the block size)
  int qmax = 0;  // levels 0..qmax
  float a[kQK_K];
  float b[kQK_K];

  // The level nearest to v, clamped.
  int level(int e, float v) const;
  float value(int e, int q) const { return a[e] * static_cast<float>(q) + b[e]; }
};

// Block types GPTQ can target (every supported block-quantized type).
bool has_block_grid(DType type);
// The grid of an encoded block (its scales and mins).
void grid_of_block(DType type, const uint8_t* block, BlockGrid* grid);
// Writes levels (0..qmax, element order) into an encoded block, keeping its scales.
void set_block_levels(DType type, uint8_t* block, const int* levels);

}  // namespace pagoda::quant
