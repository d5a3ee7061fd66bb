// Tensor element types. Values equal the GGML/GGUF type ids so a GGUF tensor's
// type field maps directly. Block-quantized types store `block_size` elements
// in `type_size` bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pagoda {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

constexpr int kQK_K = 256;  // super-block size of the K-quants

struct DTypeInfo {
  DType type;
  std::string_view name;  // lower-case, as on the command line: "q4_0"
  int block_size;         // elements per block (1 for plain types)
  int type_size;          // bytes per block
  bool supported;         // we can compute with it (dequantize / dot)
};

// nullopt for an id we do not know (e.g. from an untrusted file).
std::optional<DTypeInfo> dtype_info(uint32_t id);
const DTypeInfo& dtype_info(DType t);
std::optional<DType> dtype_from_name(std::string_view name);

inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
inline int dtype_block_size(DType t) { return dtype_info(t).block_size; }
inline int dtype_type_size(DType t) { return dtype_info(t).type_size; }
// Bytes for a row of n elements; n must be a multiple of the block size.
inline size_t dtype_row_bytes(DType t, int64_t n) {
  const auto& i = dtype_info(t);
  return static_cast<size_t>(n / i.block_size) * i.type_size;
}

}  // namespace pagoda
