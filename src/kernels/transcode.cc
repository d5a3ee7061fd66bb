#include "kernels/transcode.h"

#include <cstring>

#include "core/check.h"
#include "kernels/ref/blocks.h"

namespace pagoda::kernels {
namespace {

template <class From, class To, void (*Convert)(const From&, To*)>
void convert_blocks(const void* src, void* dst, int64_t num_blocks) {
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < num_blocks; ++i) {
    From b;
    To t;
    std::memcpy(&b, in + i * static_cast<int64_t>(sizeof(From)), sizeof(From));
    Convert(b, &t);
    std::memcpy(out + i * static_cast<int64_t>(sizeof(To)), &t, sizeof(To));
  }
}

// One IQ4_XS super-block becomes eight Q8_0 blocks.
void xs_to_q8(const ref::BlockIQ4_XS& b, ref::BlockQ8_0 (*out)[8]) { ref::iq4_xs_to_q8_0(b, *out); }

}  // namespace

std::optional<DType> compute_type(DType stored) {
  switch (stored) {
    case DType::kIQ4_NL:
    case DType::kIQ4_XS: return DType::kQ8_0;
    default: return std::nullopt;
  }
}

void transcode_rows(DType stored, const void* src, void* dst, int64_t n_in, int64_t rows) {
  const int64_t blocks = n_in / dtype_block_size(stored) * rows;
  PAGODA_CHECK(n_in % dtype_block_size(stored) == 0);
  switch (stored) {
    case DType::kIQ4_NL:
      convert_blocks<ref::BlockIQ4_NL, ref::BlockQ8_0, ref::iq4_nl_to_q8_0>(src, dst, blocks);
      return;
    case DType::kIQ4_XS: convert_blocks<ref::BlockIQ4_XS, ref::BlockQ8_0[8], xs_to_q8>(src, dst, blocks); return;
    default: PAGODA_CHECK(false && "transcode_rows: no re-encoding for this type");
  }
}

}  // namespace pagoda::kernels
