// Distinct id types used across subsystems, so a block id, a sequence id and
// a request id cannot be swapped with each other (or with a count) by
// mistake. Kernels read block tables as arrays of BlockId.
#pragma once

#include <cstdint>
#include <functional>

namespace pagoda {

// Index of a KV block in a pool (and in its KVStorage).
struct BlockId {
  int32_t value = -1;
  bool operator==(const BlockId&) const = default;
  auto operator<=>(const BlockId&) const = default;
};
static_assert(sizeof(BlockId) == sizeof(int32_t));

// One sequence of the KV cache manager (a request has one per choice/beam).
struct SeqId {
  int64_t value = -1;
  bool operator==(const SeqId&) const = default;
  auto operator<=>(const SeqId&) const = default;
};

struct RequestId {
  int64_t value = -1;
  bool operator==(const RequestId&) const = default;
  auto operator<=>(const RequestId&) const = default;
};

}  // namespace pagoda

template <>
struct std::hash<pagoda::BlockId> {
  size_t operator()(const pagoda::BlockId& b) const noexcept { return std::hash<int32_t>()(b.value); }
};
template <>
struct std::hash<pagoda::SeqId> {
  size_t operator()(const pagoda::SeqId& s) const noexcept { return std::hash<int64_t>()(s.value); }
};
template <>
struct std::hash<pagoda::RequestId> {
  size_t operator()(const pagoda::RequestId& r) const noexcept { return std::hash<int64_t>()(r.value); }
};
