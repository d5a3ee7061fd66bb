// Medusa (Cai et al. 2024, "Medusa: Simple LLM Inference Acceleration
// Framework with Multiple Decoding Heads"): K extra heads read the target's
// last hidden state h (after the final norm) at the row the newest token
// was sampled from; head k (0-based) guesses the token k + 1 places after
// that newest token. Each head is one residual block, h + SiLU(W_k h + b_k),
// followed by the target's own output matrix (Medusa-1: a frozen backbone;
// the heads are trained by tools/train/train_medusa.py and shipped beside
// the model as MODEL.medusa.gguf).
//
// One proposal is a sparse tree built best first: a node at depth d has the
// top candidates of head d as children, scored by the product of the heads'
// probabilities along its path; the highest-scoring nodes are kept up to the
// size limit, so the tree's prefixes are trees too (the planner may cut it).
// The engine verifies it with tree attention like lookahead's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "spec/proposer.h"

namespace pagoda {

struct MedusaHeads {
  int32_t num_heads = 0;
  int32_t hidden_size = 0;
  std::vector<float> weight;    // [heads][hidden out][hidden in]
  std::vector<float> bias;      // [heads][hidden]
  std::vector<float> weight_t;  // [heads][hidden in][hidden out] (transpose() fills it)

  // A Medusa GGUF (general.architecture "medusa"; medusa.head_count,
  // medusa.embedding_length, medusa.vocab_size; F32 tensors medusa.K.weight
  // [hidden, hidden] and medusa.K.bias [hidden]) for a target with these
  // sizes; a clear error for anything else.
  static Result<MedusaHeads> load(const std::string& path, int32_t hidden_size, int32_t vocab_size);
  Status save(const std::string& path, int32_t vocab_size) const;
  // Fills weight_t from weight (load() does).
  void transpose();
  // out[k] = h + SiLU(W_k h + b_k) for the first num heads: [num][hidden].
  void apply(const float* hidden, int32_t num, float* out) const;
};

// Where the heads of the model at `model_path` are looked for:
// "dir/name.gguf" -> "dir/name.medusa.gguf".
std::string medusa_heads_path(const std::string& model_path);

class MedusaProposer : public Proposer {
 public:
  // project(hidden, rows, logits): the target's output matrix applied to
  // `rows` hidden rows, [rows][vocab_size] logits.
  using Project = std::function<void(const float* hidden, int32_t rows, float* logits)>;
  // top_k: candidates each head offers a node.
  MedusaProposer(MedusaHeads heads, int32_t vocab_size, Project project, int32_t top_k = 4);

  // Placeholders (kPlaceholder) for as many nodes as a tree can have, at
  // most max_tokens: the scheduler budgets them, the planner trims them, and
  // fill_trees() computes the heads only for the sequences still drafting.
  static constexpr int32_t kPlaceholder = -1;
  void propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>* draft) const override;
  bool drafts_after_scheduling() const override { return true; }
  void fill_trees(std::span<const TreeFill> fills) const override;
  std::unique_ptr<ProposerState> make_state() const override;
  bool wants_hidden() const override { return true; }
  void set_hidden(ProposerState* state, std::span<const float> hidden) const override;
  // One tree, at once, from the hidden row set since the last proposal
  // (none: no drafts).
  void propose_tree(ProposerState* state, std::span<const int32_t> tokens, int32_t max_tokens, int32_t max_depth,
                    std::vector<int32_t>* draft, std::vector<int32_t>* parents) const override;

  const MedusaHeads& heads() const { return heads_; }
  // Nodes a tree of at most max_depth levels can have.
  int32_t max_nodes(int32_t max_depth) const;

 private:
  // The tree from the heads' logits ([depth_limit][vocab]).
  void build(const float* logits, int32_t depth_limit, int32_t max_tokens, std::vector<int32_t>* draft,
             std::vector<int32_t>* parents) const;
  MedusaHeads heads_;
  int32_t vocab_size_;
  Project project_;
  int32_t top_k_;
};

}  // namespace pagoda
