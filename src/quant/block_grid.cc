#include "quant/block_grid.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/ref/blocks.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::quant {
namespace {

int qmax_of(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K: return 15;
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ5_K: return 31;
    case DType::kQ6_K: return 63;
    case DType::kQ3_K: return 7;
    case DType::kQ2_K: return 3;
    case DType::kQ8_0: return 255;
    default: return 0;
  }
}

template <class Block>
void set_levels_of(uint8_t* block, const int* levels) {
  Block b;
  std::memcpy(&b, block, sizeof(Block));
  ref::set_levels(&b, levels);
  std::memcpy(block, &b, sizeof(Block));
}

}  // namespace

int BlockGrid::level(int e, float v) const {
  if (!(a[e] != 0.0f)) return 0;  // a zero scale decodes every level alike
  const float q = std::nearbyint((v - b[e]) / a[e]);
  if (!(q > 0.0f)) return 0;  // also NaN
  return q >= static_cast<float>(qmax) ? qmax : static_cast<int>(q);
}

bool has_block_grid(DType type) { return qmax_of(type) > 0; }

void set_block_levels(DType type, uint8_t* block, const int* levels) {
  switch (type) {
    case DType::kQ4_0: set_levels_of<ref::BlockQ4_0>(block, levels); return;
    case DType::kQ4_1: set_levels_of<ref::BlockQ4_1>(block, levels); return;
    case DType::kQ5_0: set_levels_of<ref::BlockQ5_0>(block, levels); return;
    case DType::kQ5_1: set_levels_of<ref::BlockQ5_1>(block, levels); return;
    case DType::kQ8_0: set_levels_of<ref::BlockQ8_0>(block, levels); return;
    case DType::kQ4_K: set_levels_of<ref::BlockQ4_K>(block, levels); return;
    case DType::kQ5_K: set_levels_of<ref::BlockQ5_K>(block, levels); return;
    case DType::kQ6_K: set_levels_of<ref::BlockQ6_K>(block, levels); return;
    case DType::kQ3_K: set_levels_of<ref::BlockQ3_K>(block, levels); return;
    case DType::kQ2_K: set_levels_of<ref::BlockQ2_K>(block, levels); return;
    default: PAGODA_CHECK(false && "set_block_levels: not a block type");
  }
}

// Every type decodes linearly in its level: decoding the block with all
// levels 0 gives b, with all levels 1 gives a + b.
void grid_of_block(DType type, const uint8_t* block, BlockGrid* grid) {
  PAGODA_CHECK(has_block_grid(type));
  const int n = dtype_block_size(type);
  const size_t bytes = static_cast<size_t>(dtype_type_size(type));
  uint8_t copy[sizeof(ref::BlockQ6_K) + sizeof(ref::BlockQ5_K)];
  PAGODA_CHECK(bytes <= sizeof(copy));
  int levels[kQK_K];
  float v1[kQK_K];
  std::memcpy(copy, block, bytes);
  for (int e = 0; e < n; ++e) levels[e] = 0;
  set_block_levels(type, copy, levels);
  ref::dequantize_row(type, copy, grid->b, n);
  for (int e = 0; e < n; ++e) levels[e] = 1;
  set_block_levels(type, copy, levels);
  ref::dequantize_row(type, copy, v1, n);
  for (int e = 0; e < n; ++e) grid->a[e] = v1[e] - grid->b[e];
  grid->n = n;
  grid->qmax = qmax_of(type);
}

}  // namespace pagoda::quant
