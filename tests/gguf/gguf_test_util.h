// Helpers for GGUF tests: building GGUF bytes by hand (to produce files the
// writer would refuse to write) and parsing them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"

namespace pagoda::gguf::testing {

class RawGGUF {
 public:
  template <typename T>
  RawGGUF& put(T v) {
    const size_t old = bytes.size();
    bytes.resize(old + sizeof(T));
    std::memcpy(bytes.data() + old, &v, sizeof(T));
    return *this;
  }
  RawGGUF& str(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  RawGGUF& header(uint64_t num_tensors, uint64_t num_kv, uint32_t version = 3) {
    bytes.insert(bytes.end(), {'G', 'G', 'U', 'F'});
    return put<uint32_t>(version).put<uint64_t>(num_tensors).put<uint64_t>(num_kv);
  }
  RawGGUF& kv_u32(const std::string& key, uint32_t v) {
    return str(key).put<uint32_t>(static_cast<uint32_t>(ValueType::kU32)).put<uint32_t>(v);
  }
  RawGGUF& tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) put<uint64_t>(d);
    return put<uint32_t>(type).put<uint64_t>(offset);
  }
  RawGGUF& pad_to(size_t alignment) {
    bytes.resize((bytes.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  RawGGUF& zeros(size_t n) {
    bytes.resize(bytes.size() + n, 0);
    return *this;
  }

  std::vector<uint8_t> bytes;
};

inline Status parse_status(const std::vector<uint8_t>& bytes) {
  return GGUFFile::parse(bytes.data(), bytes.size()).status();
}

}  // namespace pagoda::gguf::testing
