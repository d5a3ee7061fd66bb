// Retrieval datastore for REST-style speculative decoding (He et al. 2024):
// the token ids of a text corpus with a suffix array over them, saved to a
// file (`pagoda spec build-datastore`). A lookup finds the longest suffix of
// the context (up to max_n tokens) that occurs in the corpus and proposes
// the continuation that follows it most often.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "spec/proposer.h"

namespace pagoda {

class Datastore {
 public:
  // Sorts the suffixes of `tokens` (O(n log^2 n)); vocab_size is recorded so
  // a file built for another vocabulary is refused at load.
  static Result<std::unique_ptr<Datastore>> build(std::vector<int32_t> tokens, int32_t vocab_size);
  // Reads and validates a file written by save(): a clear error for a wrong
  // magic/version, a truncated file, ids out of range or an unsorted array.
  static Result<std::unique_ptr<Datastore>> load(const std::string& path, int32_t vocab_size);
  Status save(const std::string& path) const;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int32_t vocab_size() const { return vocab_size_; }
  // Suffix-array range [begin, end) of corpus positions starting with `pattern`.
  std::pair<int64_t, int64_t> find(std::span<const int32_t> pattern) const;
  // Corpus position of the suffix at suffix-array index i.
  int64_t position(int64_t i) const { return sa_[i]; }
  std::span<const int32_t> tokens() const { return tokens_; }

 private:
  Datastore() = default;
  // Suffix at a vs pattern: <0, 0 (pattern is a prefix), >0.
  int compare(int64_t pos, std::span<const int32_t> pattern) const;

  int32_t vocab_size_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<int32_t> sa_;
};

class RetrievalProposer : public Proposer {
 public:
  RetrievalProposer(std::shared_ptr<const Datastore> store, int32_t min_n, int32_t max_n);
  void propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>* draft) const override;

 private:
  std::shared_ptr<const Datastore> store_;
  int32_t min_n_;
  int32_t max_n_;
};

}  // namespace pagoda
