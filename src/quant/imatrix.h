// The importance matrix (llama.cpp's imatrix): for every matrix, the sum of
// squared inputs per input column over calibration rows. Quantizing with it
// weights each element's rounding error by how strongly its column is used.
// Stored as GGUF like llama.cpp's current format: tensors "<name>.in_sum2"
// ([n_in] f32) and "<name>.counts" ([1] f32), general.type = "imatrix".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "model/llama_model.h"

namespace pagoda::quant {

struct Imatrix {
  struct Entry {
    std::vector<float> sum2;  // per input column
    double count = 0;         // rows summed
  };
  std::map<std::string, Entry> entries;  // by weight tensor name
  int32_t chunk_count = 0;
  int32_t chunk_size = 0;
  std::vector<std::string> datasets;

  Status save(const std::string& path) const;
  static Result<Imatrix> load(const std::string& path);
  // Every entry must name a 2-D tensor of `model` with as many input columns.
  Status check_against(const gguf::GGUFFile& model) const;
  // Mean squared input per column (sum2 / count), or empty if absent.
  std::vector<float> importance(const std::string& tensor) const;
  // An observer adding every observed row to the entries.
  LinearObserver observer(bool has_output);
};

}  // namespace pagoda::quant
