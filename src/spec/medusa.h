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
// top candidates of head d as children, scored by the product along its path
// of how often a candidate of that head and rank was the target's token
// (MedusaCalibration: measured on the verifications, per sequence and
// engine-wide; the paper calibrates its static tree the same way on a
// dataset). The highest-scoring nodes are kept up to the size limit, so the
// tree's prefixes are trees too, and a node's score is what it is expected
// to add to an accepted run: the planner prices nodes with it before the
// heads run, and cuts the tree. The heads' own probabilities are not
// calibrated (a loop the heads predict at 95% still reads as 40%), so they
// only rank the candidates. The engine verifies the tree with tree
// attention like lookahead's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
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

// How often the candidate of rank r of head k was the token the target
// chose, among verifications whose accepted path reached head k's place
// (so the rate is conditional on the path before it being right, which is
// what a tree node needs). Counts fade by `decay` per recorded verification.
class MedusaCalibration {
 public:
  MedusaCalibration() = default;
  MedusaCalibration(int32_t num_heads, int32_t top_k);
  // cand: [heads_run][top_k] the heads' candidates at the proposal;
  // emitted: the tokens the target emitted in the verification (emitted[k]
  // is the token head k guessed; as many as were accepted, plus one).
  void record(std::span<const int32_t> cand, std::span<const int32_t> emitted, double decay);
  // The hit rate of (head, rank) pulled towards prior with prior_weight
  // observations.
  double rate(int32_t head, int32_t rank, double prior, double prior_weight) const;
  double seen(int32_t head) const { return seen_[static_cast<size_t>(head)]; }

 private:
  int32_t num_heads_ = 0, top_k_ = 0;
  std::vector<double> seen_;  // [head]
  std::vector<double> hit_;   // [head][rank]
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

  // The target's tokens of the verification of this sequence's last tree:
  // calibrates the heads (the sequence's record and the engine-wide one).
  void verified(ProposerState* state, std::span<const int32_t> emitted) const override;
  // Scores of the best-first tree's first num_nodes nodes (what each adds to
  // the accepted run, non-increasing; fewer when the tree is smaller).
  void node_gains(const ProposerState* state, int32_t num_nodes, std::vector<double>* out) const override;

  const MedusaHeads& heads() const { return heads_; }
  // Nodes a tree of at most max_depth levels can have.
  int32_t max_nodes(int32_t max_depth) const;

  // A node of the tree's shape: its head (depth - 1), the rank of its token
  // among that head's candidates, its parent (-1: the root) and score.
  struct Node {
    int32_t head, rank, parent;
    double score;
  };
  // The best-first shape of at most max_nodes nodes, none deeper than
  // depth_limit, from rates [heads][top_k] (each in [0, 1]).
  static std::vector<Node> shape(std::span<const double> rates, int32_t top_k, int32_t depth_limit, int32_t max_nodes);

 private:
  // The calibrated rates [heads][top_k] a sequence's tree is shaped by.
  std::vector<double> rates(const ProposerState* state) const;
  // The tree from the heads' logits ([depth_limit][vocab]); keeps the heads'
  // candidates in the state for verified().
  void build(ProposerState* state, const float* logits, int32_t depth_limit, int32_t max_tokens,
             std::vector<int32_t>* draft, std::vector<int32_t>* parents) const;
  MedusaHeads heads_;
  int32_t vocab_size_;
  Project project_;
  int32_t top_k_;
  std::vector<double> prior_;  // [heads][top_k]: the engine-wide rates before any verification
  mutable std::mutex mu_;
  mutable MedusaCalibration engine_calibration_;  // every sequence's verifications (guarded by mu_)
};

}  // namespace pagoda
