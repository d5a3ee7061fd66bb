// A block's identity across processes (the KV tiers, kv/kv_tiers.h): a
// 128-bit hash chain over the tokens of every block from the sequence's
// start, seeded by a namespace (the model file and the KV layout), so equal
// keys mean equal K/V: the same tokens at the same positions under the same
// weights. XXH3-128, not a cryptographic hash: a tier file also stores its
// block's own tokens, checked on load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace pagoda {

struct BlockKey {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const BlockKey& o) const { return lo == o.lo && hi == o.hi; }
  bool operator!=(const BlockKey& o) const { return !(*this == o); }
  // 32 lowercase hex digits (a tier file's name).
  std::string hex() const;
};

struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const { return static_cast<size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull)); }
};

// The key of the block holding `block_tokens` after the block keyed `parent`
// (the namespace for a sequence's first block).
BlockKey chain_block_key(const BlockKey& parent, std::span<const int32_t> block_tokens);

// A namespace from arbitrary bytes (a description of the model and layout).
BlockKey namespace_key(std::span<const uint8_t> bytes);

}  // namespace pagoda
