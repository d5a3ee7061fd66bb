// Runs a grammar over generated text: the parse state of one sequence and
// the mask of tokens that may come next.
//
// The state is a set of stacks of grammar positions (a pushdown automaton
// run breadth-first, as llama.cpp's grammar sampler does); every stack's top
// is a byte terminal, and an empty stack means the text so far is a whole
// sentence of the grammar. Token masks follow XGrammar's split: for a stack's
// top positions, the tokens accepted or rejected without looking further
// down the stack are computed once by a walk over the vocabulary trie and
// cached in the grammar (shared by every request that uses it); only the
// few tokens that reach below those positions are checked per step.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/stack.h"
#include "grammar/token_vocab.h"

namespace pagoda::grammar {

// One bit per token id.
using TokenMask = std::vector<uint64_t>;
inline bool mask_has(const TokenMask& m, int32_t t) { return (m[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1; }
inline void mask_set(TokenMask& m, int32_t t) { m[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63); }

class Matcher {
 public:
  // More stacks than this (a very ambiguous grammar) are dropped: every kept
  // stack still leads to a sentence of the grammar, so outputs stay valid.
  static constexpr size_t kMaxStacks = 256;

  explicit Matcher(std::shared_ptr<const Grammar> g);

  // Consumes one token: its bytes, or an end token once complete. False (and
  // the state unchanged) when the grammar does not allow it here.
  bool accept_token(const TokenVocab& vocab, int32_t token);
  bool accept_bytes(std::string_view bytes);
  // The text so far is a whole sentence: an end token may follow.
  bool is_complete() const;
  // Nothing may follow (complete and no longer text allowed either).
  bool is_finished() const { return stacks_.size() == 1 && stacks_[0].empty(); }

  // Every token the grammar allows next (mask resized to vocab.mask_words()):
  // tokens whose bytes continue the text validly, and vocab.end_ids() when
  // the text is complete.
  void fill_mask(const TokenVocab& vocab, TokenMask* mask) const;

  const std::vector<Stack>& stacks() const { return stacks_; }
  const Grammar& grammar() const { return *g_; }

 private:
  std::shared_ptr<const Grammar> g_;
  std::vector<Stack> stacks_;
};

// The stacks reached from `in` by one byte (grammar/matcher.cc), for tests.
void advance_stacks(const Grammar& g, const std::vector<Stack>& in, uint8_t byte, std::vector<Stack>* out);

// Every token `stacks` allows, by checking each token's bytes in full (no
// trie, no cache): the reference fill_mask is tested against.
void reference_mask(const Grammar& g, const std::vector<Stack>& stacks, const TokenVocab& vocab, TokenMask* mask);

}  // namespace pagoda::grammar
