// libFuzzer target: GGUFFile::parse on arbitrary bytes must return an error
// or a consistent file, never crash, leak or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "gguf/gguf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = pagoda::gguf::GGUFFile::parse(data, size);
  if (!r.is_ok()) {
    if (r.status().message().empty()) std::abort();
    return 0;
  }
  const auto& f = *r.value();
  // Touch what a successful parse promises to be valid.
  uint64_t sum = 0;
  for (const auto& t : f.tensors()) {
    if (t.data < data || t.data + t.num_bytes > data + size) std::abort();
    if (f.tensor(t.name) != &t) std::abort();
    if (t.num_bytes > 0) sum += t.data[0] + t.data[t.num_bytes - 1];
    sum += static_cast<uint64_t>(t.num_elements());
  }
  for (const auto& [key, v] : f.metadata()) {
    sum += f.get_int(key).value_or(0) + v.array_size();
    if (auto s = f.get_float(key)) sum += static_cast<uint64_t>(*s != 0);
  }
  static volatile uint64_t sink = 0;
  sink = sink + sum;  // keep the reads alive
  return 0;
}
