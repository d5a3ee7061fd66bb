// Writing GGUF v3 files: metadata in insertion order, then tensors aligned.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "gguf/gguf_file.h"

namespace pagoda::gguf {

class GGUFWriter {
 public:
  void set(std::string key, Value value);  // replaces an existing key
  // Copies nothing: `data` must stay alive until write(). num_bytes must
  // equal dtype_row_bytes(type, dims[0]) * product(dims[1..]).
  void add_tensor(std::string name, std::vector<int64_t> dims, DType type, const void* data,
                  size_t num_bytes);
  Status write(const std::string& path) const;
  std::vector<uint8_t> to_bytes() const;

  void set_alignment(uint32_t a) { alignment_ = a; }

 private:
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> dims;
    DType type;
    const void* data;
    size_t num_bytes;
  };
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace pagoda::gguf
