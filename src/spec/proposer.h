// Speculative decoding proposers: given a sequence's tokens, guess how it
// continues. The engine schedules the guesses (draft tokens) as extra
// positions of the sequence and verifies them against the target model, so a
// proposer can be wrong without changing the output — it only changes speed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace pagoda {

enum class SpecMethod {
  kNone,
  kNgram,      // prompt lookup: continue a repeated n-gram of the sequence itself
  kRetrieval,  // REST: continue the context's longest match in a corpus datastore
  kDraft,      // a smaller model with the same vocabulary drafts (spec/draft_model.h)
  kLayerSkip,  // the target with layers skipped drafts for itself (spec/layer_skip.h)
  kLookahead,  // Jacobi iterations and an n-gram pool, drafts as a tree (spec/lookahead.h)
  kMedusa,     // extra decoding heads on the target's hidden state, drafts as a tree (spec/medusa.h)
};

// Parses "none" | "ngram" | "retrieval" | "draft" | "layer-skip" | "lookahead" | "medusa"; false for
// anything else.
bool parse_spec_method(std::string_view name, SpecMethod* out);
const char* spec_method_name(SpecMethod m);

// What a stateful proposer keeps per sequence (lookahead's window and pool).
class ProposerState {
 public:
  virtual ~ProposerState() = default;
};

// A tree to fill after scheduling (Medusa): `draft` holds the scheduled
// number of placeholders; the proposer replaces them with as many nodes and
// sets `parents`.
struct TreeFill {
  ProposerState* state = nullptr;
  std::vector<int32_t>* draft = nullptr;
  std::vector<int32_t>* parents = nullptr;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Replaces *draft with at most max_tokens tokens proposed to follow
  // `tokens` (prompt + output so far); empty when there is no guess.
  virtual void propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>* draft) const = 0;
  // True when propose() only reserves positions and the tokens are written
  // after scheduling (the draft model drafts for the scheduled batch).
  virtual bool drafts_after_scheduling() const { return false; }

  // Tree proposals. A proposer that keeps state per sequence makes it here
  // (null: stateless); the engine keeps it with the sequence.
  virtual std::unique_ptr<ProposerState> make_state() const { return nullptr; }
  // Replaces *draft with at most max_tokens tokens, none deeper than
  // max_depth, and *parents with each one's parent (an earlier draft, or -1:
  // follows the last token); empty parents mean a chain. The default is
  // propose()'s chain.
  virtual void propose_tree(ProposerState* state, std::span<const int32_t> tokens, int32_t max_tokens,
                            int32_t max_depth, std::vector<int32_t>* draft, std::vector<int32_t>* parents) const {
    propose(tokens, std::min(max_tokens, max_depth), draft);
    parents->clear();
  }
  // A proposer that drafts from the target's hidden state (Medusa) gets,
  // before each proposal, the final-normed hidden row the sequence's newest
  // token was sampled from.
  virtual bool wants_hidden() const { return false; }
  // A drafts_after_scheduling() proposer without a draft model fills the
  // scheduled sequences' placeholders here, all at once (one batched pass).
  virtual void fill_trees(std::span<const TreeFill> fills) const {}
  virtual void set_hidden(ProposerState* state, std::span<const float> hidden) const {}
  // After the target scored the last proposal: the raw logits of its first
  // num_scored drafts (those the scheduler kept), [num_scored][vocab_size].
  virtual void observe(ProposerState* state, const float* draft_logits, int32_t num_scored, int32_t vocab_size) const {}
  // After a verification: the tokens the target emitted (the accepted
  // drafts and the one it added), whether or not drafts were verified.
  virtual void verified(ProposerState* state, std::span<const int32_t> emitted) const {}
  // A tree proposer whose nodes' expected gains are known before it drafts
  // (Medusa; the engine asks it for its method): the gains of its tree's
  // first num_nodes nodes, best first, for the planner (fewer when the tree
  // is smaller).
  virtual void node_gains(const ProposerState* state, int32_t num_nodes, std::vector<double>* out) const {}
};

}  // namespace pagoda
