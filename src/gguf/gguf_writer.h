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
  // Replaces an existing key. Setting "general.alignment" to an integer also
  // sets the alignment; the file's general.alignment key always reflects
  // set_alignment() and is written only when it differs from 32.
  void set(std::string key, Value value);
  // Copies nothing: `data` must stay alive until write(). num_bytes must
  // equal dtype_row_bytes(type, dims[0]) * product(dims[1..]).
  void add_tensor(std::string name, std::vector<int64_t> dims, DType type, const void* data, size_t num_bytes);
  // Writes to `path`.tmp.<pid>, then renames it over `path`. Invalid input
  // (bad shape, num_bytes mismatch, duplicate names, bad alignment, nested
  // arrays) gives an error.
  Status write(const std::string& path) const;
  // The whole file in memory; the same input errors are a CHECK failure.
  std::vector<uint8_t> to_bytes() const;
  Status validate() const;

  void set_alignment(uint32_t a) { alignment_ = a; }

 private:
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> dims;
    DType type;
    const void* data;
    size_t num_bytes;
  };
  // Header, metadata and tensor directory, padded to the alignment.
  std::vector<uint8_t> header_bytes() const;

  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace pagoda::gguf
