// Weight types the kernels compute with after a re-encoding at load time:
// IQ4_NL as Q8_0 (same values), IQ4_XS as
// Q8_0 (same values up to each 32-block's scale, rounded to fp16: relative
// error <= 2^-11 of the block's scale).
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"

namespace pagoda::kernels {

// The type `stored` is computed in, or nullopt when the kernels take it as is.
std::optional<DType> compute_type(DType stored);

// Re-encodes `rows` rows of n_in elements from `stored` into compute_type(stored).
void transcode_rows(DType stored, const void* src, void* dst, int64_t n_in, int64_t rows);

}  // namespace pagoda::kernels
