// The context-independent part of token masks, per grammar and vocabulary:
// for the top positions of a stack (its "key"), which tokens are accepted
// whatever lies below them, and which reach below and must be checked
// against the whole stack (XGrammar's adaptive token mask cache).
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"

namespace pagoda::grammar {

struct MaskEntry {
  TokenMask accepted;              // valid for every stack with this key
  std::vector<int32_t> uncertain;  // valid or not depending on the stack below the key
};

class MaskCache {
 public:
  // Stacks deeper than this are keyed by their top kKeyDepth positions.
  static constexpr size_t kKeyDepth = 16;
  // Entries kept per cache; beyond it the cache starts over.
  static constexpr size_t kMaxEntries = 4096;

  // The entry of `stack`'s key, computed on first use. Thread-safe.
  std::shared_ptr<const MaskEntry> get(const Grammar& g, const TokenVocab& vocab, const Stack& stack);

  size_t size() const;

 private:
  struct KeyHash {
    size_t operator()(const std::vector<uint32_t>& k) const;
  };
  mutable std::mutex mu_;
  // key: vocab uid (2 words), whole-stack flag, then the positions.
  std::unordered_map<std::vector<uint32_t>, std::shared_ptr<const MaskEntry>, KeyHash> entries_;
};

// The grammar's cache (created with the grammar on first use).
MaskCache& mask_cache(const Grammar& g);

}  // namespace pagoda::grammar
