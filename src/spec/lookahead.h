// Lookahead decoding (Fu et al. 2024, "Break the Sequential Dependency of LLM
// Inference Using Lookahead Decoding"): Jacobi iterations over a window of
// guessed future tokens run in the same forward pass as the verification of
// n-grams those iterations produced. One proposal is a tree of drafts
// following the sequence's last token at position P:
//
// - verification branch: up to G n-grams from the sequence's pool that start
//   with the last token, each its N - 1 continuation tokens, merged into a
//   trie;
// - lookahead branch: the window's N - 1 levels of W guesses. Level 0 is a
//   chain L0[0] -> L0[1] -> ... at positions P + 1 ...; L_j[c] (j >= 1)
//   follows L_{j-1}[c] at position P + 1 + c + j. So L_j[c] sees the context,
//   L0[0..c] and L1..L_{j-1} of column c — the paper's attention mask — and
//   its logits predict the token after that diagonal.
//
// After the step (observe), the prediction at each column's last level ends
// an n-gram L0[c], L1[c], ..., L_{N-2}[c], prediction, which joins the pool
// under its first token; the levels shift up and the predictions become the
// new last level. The pool also holds every n-gram of the sequence's own
// tokens (prompt and output), so the proposer finds repeated text as prompt
// lookup does. The engine verifies the tree exactly (the verifier samples
// from the target and follows the child with that token; every node's K/V
// was computed with exactly its ancestors before it), so lookahead nodes
// themselves may be accepted too — Jacobi decoding.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "spec/proposer.h"

namespace pagoda {

struct LookaheadParams {
  // The default, 1,5,2, was the fastest on the bundled model (a
  // compute-bound 4.5M model: every tree node costs; bench/RESULTS.md); a
  // memory-bound model, whose step costs little more with more nodes, can
  // afford the paper's wider windows.
  int32_t window = 1;      // W: guesses per level
  int32_t ngram = 5;       // N: n-gram size (N - 1 levels in the window)
  int32_t candidates = 2;  // G: n-grams verified per step
  // Nodes of one proposal: (N - 1) * (W + G).
  int32_t tree_size() const { return (ngram - 1) * (window + candidates); }
};

// "W,N,G", e.g. "4,3,4"; each >= 1 (N >= 2), the tree at most max_nodes.
Result<LookaheadParams> parse_lookahead(const std::string& text, int32_t max_nodes);

class LookaheadProposer : public Proposer {
 public:
  explicit LookaheadProposer(LookaheadParams params);

  // A chain: the pool's most recent n-gram after the last token (the
  // verification branch of a one-candidate, no-window proposal).
  void propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>* draft) const override;
  std::unique_ptr<ProposerState> make_state() const override;
  void propose_tree(ProposerState* state, std::span<const int32_t> tokens, int32_t max_tokens, int32_t max_depth,
                    std::vector<int32_t>* draft, std::vector<int32_t>* parents) const override;
  void observe(ProposerState* state, const float* draft_logits, int32_t num_scored, int32_t vocab_size) const override;

  const LookaheadParams& params() const { return params_; }

 private:
  LookaheadParams params_;
};

}  // namespace pagoda
