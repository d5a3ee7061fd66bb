#include "spec/medusa.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <queue>

#include "core/check.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "spec/draft_planner.h"

namespace pagoda {
namespace {

// Calibration: counts fade by 5% per verification in a sequence's record
// (it follows the text: a loop the heads predict, a free stretch they do
// not) and by 1% in the engine-wide one. A sequence's rate is pulled towards
// the engine's with the weight of 4 verifications, the engine's towards
// kPriorTop1 * kPriorHeadDecay^head * kPriorRankDecay^rank with the same.
constexpr double kSequenceDecay = 0.95, kEngineDecay = 0.99, kPriorWeight = 4.0;
constexpr double kPriorTop1 = 0.45, kPriorHeadDecay = 0.85, kPriorRankDecay = 0.35;

struct MedusaState final : ProposerState {
  std::vector<float> hidden;
  bool fresh = false;  // hidden was set since the last proposal
  MedusaCalibration calibration;
  std::vector<int32_t> candidates;  // the last tree's heads' candidates [heads run][top_k]; empty: verified
};

}  // namespace

MedusaCalibration::MedusaCalibration(int32_t num_heads, int32_t top_k)
    : num_heads_(num_heads),
      top_k_(top_k),
      seen_(static_cast<size_t>(num_heads), 0.0),
      hit_(static_cast<size_t>(num_heads) * static_cast<size_t>(top_k), 0.0) {}

void MedusaCalibration::record(std::span<const int32_t> cand, std::span<const int32_t> emitted, double decay) {
  const auto top = static_cast<size_t>(top_k_);
  PAGODA_CHECK(top > 0 && cand.size() % top == 0 && cand.size() / top <= seen_.size());
  for (double& x : seen_) x *= decay;
  for (double& x : hit_) x *= decay;
  // Head k is seen when the path reached its place: emitted[k] exists.
  const size_t heads = std::min(cand.size() / top, emitted.size());
  for (size_t k = 0; k < heads; ++k) {
    seen_[k] += 1.0;
    for (size_t r = 0; r < top; ++r)
      if (cand[k * top + r] == emitted[k]) {
        hit_[k * top + r] += 1.0;
        break;
      }
  }
}

double MedusaCalibration::rate(int32_t head, int32_t rank, double prior, double prior_weight) const {
  PAGODA_CHECK(head >= 0 && head < num_heads_ && rank >= 0 && rank < top_k_);
  const double hit = hit_[static_cast<size_t>(head) * static_cast<size_t>(top_k_) + static_cast<size_t>(rank)];
  return (hit + prior_weight * prior) / (seen_[static_cast<size_t>(head)] + prior_weight);
}

Result<MedusaHeads> MedusaHeads::load(const std::string& path, int32_t hidden_size, int32_t vocab_size) {
  auto opened = gguf::GGUFFile::open(path);
  if (!opened) return invalid_argument("Medusa heads " + path + ": " + opened.status().message());
  const gguf::GGUFFile& f = **opened;
  const std::string where = "Medusa heads " + path + ": ";
  if (f.get_string("general.architecture") != "medusa")
    return invalid_argument(where + "not a Medusa heads file (general.architecture is not \"medusa\")");
  const auto heads = f.get_int("medusa.head_count"), hidden = f.get_int("medusa.embedding_length"),
             vocab = f.get_int("medusa.vocab_size");
  if (!heads || !hidden || !vocab)
    return invalid_argument(where + "medusa.head_count, embedding_length or vocab_size missing");
  if (*heads < 1 || *heads > 16)
    return invalid_argument(where + "head count " + std::to_string(*heads) + " not in 1..16");
  if (*hidden != hidden_size || *vocab != vocab_size)
    return invalid_argument(where + "made for hidden size " + std::to_string(*hidden) + " and vocabulary " +
                            std::to_string(*vocab) + ", the model has " + std::to_string(hidden_size) + " and " +
                            std::to_string(vocab_size));
  MedusaHeads h;
  h.num_heads = static_cast<int32_t>(*heads);
  h.hidden_size = hidden_size;
  const auto H = static_cast<size_t>(hidden_size);
  h.weight.resize(static_cast<size_t>(h.num_heads) * H * H);
  h.bias.resize(static_cast<size_t>(h.num_heads) * H);
  for (int32_t k = 0; k < h.num_heads; ++k) {
    const std::string w = "medusa." + std::to_string(k) + ".weight", b = "medusa." + std::to_string(k) + ".bias";
    const gguf::TensorInfo* tw = f.tensor(w);
    const gguf::TensorInfo* tb = f.tensor(b);
    if (!tw || !tb) return invalid_argument(where + "tensor " + (tw ? b : w) + " missing");
    if (tw->type != DType::kF32 || tb->type != DType::kF32 || tw->dims != std::vector<int64_t>{*hidden, *hidden} ||
        tb->dims != std::vector<int64_t>{*hidden})
      return invalid_argument(where + "tensors " + w + " / " + b + " must be F32 [" + std::to_string(*hidden) + ", " +
                              std::to_string(*hidden) + "] / [" + std::to_string(*hidden) + "]");
    std::memcpy(&h.weight[static_cast<size_t>(k) * H * H], tw->data, H * H * sizeof(float));
    std::memcpy(&h.bias[static_cast<size_t>(k) * H], tb->data, H * sizeof(float));
  }
  for (float x : h.weight)
    if (!std::isfinite(x)) return invalid_argument(where + "non-finite weights");
  h.transpose();
  for (float x : h.bias)
    if (!std::isfinite(x)) return invalid_argument(where + "non-finite weights");
  return h;
}

Status MedusaHeads::save(const std::string& path, int32_t vocab_size) const {
  gguf::GGUFWriter w;
  w.set("general.architecture", gguf::Value::make_string("medusa"));
  w.set("medusa.head_count", gguf::Value::make_u32(static_cast<uint32_t>(num_heads)));
  w.set("medusa.embedding_length", gguf::Value::make_u32(static_cast<uint32_t>(hidden_size)));
  w.set("medusa.vocab_size", gguf::Value::make_u32(static_cast<uint32_t>(vocab_size)));
  const auto H = static_cast<size_t>(hidden_size);
  for (int32_t k = 0; k < num_heads; ++k) {
    w.add_tensor("medusa." + std::to_string(k) + ".weight", {hidden_size, hidden_size}, DType::kF32,
                 &weight[static_cast<size_t>(k) * H * H], H * H * sizeof(float));
    w.add_tensor("medusa." + std::to_string(k) + ".bias", {hidden_size}, DType::kF32, &bias[static_cast<size_t>(k) * H],
                 H * sizeof(float));
  }
  return w.write(path);
}

void MedusaHeads::apply(const float* hidden, int32_t num, float* out) const {
  const auto H = static_cast<size_t>(hidden_size);
  std::vector<float> z(H);
  for (int32_t k = 0; k < num; ++k) {
    // z = b + sum_j W[:, j] h[j], a column at a time (contiguous in the
    // transposed copy, so the inner loop vectorizes).
    const float* Wt = &weight_t[static_cast<size_t>(k) * H * H];
    std::copy_n(&bias[static_cast<size_t>(k) * H], H, z.begin());
    for (size_t j = 0; j < H; ++j) {
      const float hj = hidden[j];
      const float* col = Wt + j * H;
      for (size_t i = 0; i < H; ++i) z[i] += col[i] * hj;
    }
    float* o = out + static_cast<size_t>(k) * H;
    for (size_t i = 0; i < H; ++i) o[i] = hidden[i] + z[i] / (1.0f + std::exp(-z[i]));
  }
}

void MedusaHeads::transpose() {
  const auto H = static_cast<size_t>(hidden_size);
  weight_t.resize(weight.size());
  for (size_t k = 0; k < static_cast<size_t>(num_heads); ++k)
    for (size_t i = 0; i < H; ++i)
      for (size_t j = 0; j < H; ++j) weight_t[(k * H + j) * H + i] = weight[(k * H + i) * H + j];
}

std::string medusa_heads_path(const std::string& model_path) {
  const std::string ext = ".gguf";
  const bool has_ext = model_path.size() > ext.size() && model_path.ends_with(ext);
  return (has_ext ? model_path.substr(0, model_path.size() - ext.size()) : model_path) + ".medusa.gguf";
}

MedusaProposer::MedusaProposer(MedusaHeads heads, int32_t vocab_size, Project project, int32_t top_k)
    : heads_(std::move(heads)),
      vocab_size_(vocab_size),
      project_(std::move(project)),
      top_k_(std::min(top_k, vocab_size)),
      engine_calibration_(heads_.num_heads, top_k_) {
  PAGODA_CHECK(heads_.num_heads >= 1 && top_k_ >= 1 && vocab_size_ >= 1);
  for (int32_t k = 0; k < heads_.num_heads; ++k)
    for (int32_t j = 0; j < top_k_; ++j)
      prior_.push_back(kPriorTop1 * std::pow(kPriorHeadDecay, k) * std::pow(kPriorRankDecay, j));
}

void MedusaProposer::propose(std::span<const int32_t>, int32_t max_tokens, std::vector<int32_t>* draft) const {
  draft->assign(static_cast<size_t>(std::max(0, std::min(max_tokens, max_nodes(max_tokens)))), kPlaceholder);
}

int32_t MedusaProposer::max_nodes(int32_t max_depth) const {
  int64_t total = 0, level = 1;
  for (int32_t d = 0; d < std::min(heads_.num_heads, max_depth) && total < (1 << 20); ++d) {
    level *= std::min(top_k_, vocab_size_);
    total += level;
  }
  return static_cast<int32_t>(std::min<int64_t>(total, 1 << 20));
}

std::unique_ptr<ProposerState> MedusaProposer::make_state() const {
  auto st = std::make_unique<MedusaState>();
  st->calibration = MedusaCalibration(heads_.num_heads, top_k_);
  return st;
}

void MedusaProposer::verified(ProposerState* state, std::span<const int32_t> emitted) const {
  auto& st = *static_cast<MedusaState*>(state);
  if (st.candidates.empty()) return;  // no tree since the last verification
  st.calibration.record(st.candidates, emitted, kSequenceDecay);
  {
    std::lock_guard<std::mutex> lock(mu_);
    engine_calibration_.record(st.candidates, emitted, kEngineDecay);
  }
  st.candidates.clear();
}

std::vector<double> MedusaProposer::rates(const ProposerState* state) const {
  const auto& st = *static_cast<const MedusaState*>(state);
  std::vector<double> r(static_cast<size_t>(heads_.num_heads) * static_cast<size_t>(top_k_));
  std::lock_guard<std::mutex> lock(mu_);
  for (int32_t k = 0; k < heads_.num_heads; ++k)
    for (int32_t j = 0; j < top_k_; ++j) {
      const auto i = static_cast<size_t>(k * top_k_ + j);
      const double engine = engine_calibration_.rate(k, j, prior_[i], kPriorWeight);
      r[i] = std::clamp(st.calibration.rate(k, j, engine, kPriorWeight), 0.0, 1.0);
    }
  return r;
}

std::vector<MedusaProposer::Node> MedusaProposer::shape(std::span<const double> rates, int32_t top_k,
                                                        int32_t depth_limit, int32_t max_nodes) {
  const auto top = static_cast<size_t>(top_k);
  PAGODA_CHECK(top > 0 && rates.size() % top == 0);
  depth_limit = std::min(depth_limit, static_cast<int32_t>(rates.size() / top));
  // Best first: (score, -order) so equal scores keep insertion order.
  struct Item {
    double score;
    int64_t order;
    int32_t parent, head, rank;
    bool operator<(const Item& o) const { return score < o.score || (score == o.score && order > o.order); }
  };
  std::priority_queue<Item> queue;
  int64_t order = 0;
  auto push_children = [&](int32_t parent, int32_t head, double score) {
    if (head >= depth_limit) return;
    for (size_t r = 0; r < top; ++r)
      queue.push({score * rates[static_cast<size_t>(head) * top + r], order++, parent, head, static_cast<int32_t>(r)});
  };
  std::vector<Node> nodes;
  push_children(-1, 0, 1.0);
  while (!queue.empty() && static_cast<int32_t>(nodes.size()) < max_nodes) {
    const Item it = queue.top();
    queue.pop();
    nodes.push_back({it.head, it.rank, it.parent, it.score});
    push_children(static_cast<int32_t>(nodes.size()) - 1, it.head + 1, it.score);
  }
  return nodes;
}

void MedusaProposer::node_gains(const ProposerState* state, int32_t num_nodes, std::vector<double>* out) const {
  out->clear();
  for (const Node& n : shape(rates(state), top_k_, heads_.num_heads, num_nodes)) out->push_back(n.score);
}

void MedusaProposer::set_hidden(ProposerState* state, std::span<const float> hidden) const {
  auto& st = *static_cast<MedusaState*>(state);
  PAGODA_CHECK(static_cast<int32_t>(hidden.size()) == heads_.hidden_size);
  st.hidden.assign(hidden.begin(), hidden.end());
  st.fresh = true;
}

void MedusaProposer::propose_tree(ProposerState* state, std::span<const int32_t>, int32_t max_tokens, int32_t max_depth,
                                  std::vector<int32_t>* draft, std::vector<int32_t>* parents) const {
  auto& st = *static_cast<MedusaState*>(state);
  draft->clear();
  parents->clear();
  if (!st.fresh) return;
  st.fresh = false;
  const int32_t depth_limit = std::min(heads_.num_heads, max_depth);
  if (max_tokens <= 0 || depth_limit <= 0) return;
  const auto H = static_cast<size_t>(heads_.hidden_size), V = static_cast<size_t>(vocab_size_);
  std::vector<float> h(static_cast<size_t>(depth_limit) * H), logits(static_cast<size_t>(depth_limit) * V);
  heads_.apply(st.hidden.data(), depth_limit, h.data());
  project_(h.data(), depth_limit, logits.data());
  build(state, logits.data(), depth_limit, max_tokens, draft, parents);
}

void MedusaProposer::fill_trees(std::span<const TreeFill> fills) const {
  const auto H = static_cast<size_t>(heads_.hidden_size), V = static_cast<size_t>(vocab_size_);
  // Every sequence's head rows, projected in one pass. A tree of n nodes
  // is at most n deep; one head more is run for the calibration alone (its
  // candidates are checked against the token the target adds): heads no tree
  // reached were never recorded, so after a story's first drafts failed a
  // sequence's deeper heads kept the rates of those failures (their counts
  // only fading) and its trees stayed one node deep for 40+ steps while
  // every node was accepted (bench/RESULTS.md, 2026-12-06).
  std::vector<int32_t> depth(fills.size()), first_row(fills.size());
  int32_t rows = 0;
  for (size_t i = 0; i < fills.size(); ++i) {
    const auto n = static_cast<int32_t>(fills[i].draft->size());
    depth[i] = heads_run(n, heads_.num_heads);
    first_row[i] = rows;
    rows += depth[i];
  }
  if (rows == 0) return;
  std::vector<float> h(static_cast<size_t>(rows) * H), logits(static_cast<size_t>(rows) * V);
  for (size_t i = 0; i < fills.size(); ++i) {
    if (depth[i] == 0) continue;
    auto& st = *static_cast<MedusaState*>(fills[i].state);
    PAGODA_CHECK(static_cast<size_t>(st.hidden.size()) == H);  // set by the verifier before the placeholders
    st.fresh = false;
    heads_.apply(st.hidden.data(), depth[i], &h[static_cast<size_t>(first_row[i]) * H]);
  }
  project_(h.data(), rows, logits.data());
  for (size_t i = 0; i < fills.size(); ++i) {
    const auto n = static_cast<int32_t>(fills[i].draft->size());
    if (n == 0) continue;
    build(fills[i].state, &logits[static_cast<size_t>(first_row[i]) * V], depth[i], n, fills[i].draft,
          fills[i].parents);
    // Placeholders were counted by max_nodes: the tree has them all.
    PAGODA_CHECK(static_cast<int32_t>(fills[i].draft->size()) == n);
  }
}

void MedusaProposer::build(ProposerState* state, const float* logits, int32_t depth_limit, int32_t max_tokens,
                           std::vector<int32_t>* draft, std::vector<int32_t>* parents) const {
  draft->clear();
  parents->clear();
  const auto K = static_cast<size_t>(depth_limit), V = static_cast<size_t>(vocab_size_);
  const auto top = static_cast<size_t>(top_k_);
  // Each head's top candidates, best first (ties: the lower token id).
  auto& st = *static_cast<MedusaState*>(state);
  st.candidates.assign(K * top, 0);
  for (size_t k = 0; k < K; ++k) {
    // One pass keeping the best `top` in order (top is a handful: an
    // insertion beats sorting the vocabulary's indices).
    const float* row = &logits[k * V];
    int32_t* best = &st.candidates[k * top];
    size_t n = 0;
    for (size_t i = 0; i < V; ++i) {
      const float x = row[i];
      if (n == top && !(x > row[best[top - 1]])) continue;  // ties keep the lower id
      size_t j = n < top ? n++ : top - 1;
      for (; j > 0 && x > row[best[j - 1]]; --j) best[j] = best[j - 1];
      best[j] = static_cast<int32_t>(i);
    }
  }
  for (const Node& n : shape(rates(state), top_k_, depth_limit, max_tokens)) {
    draft->push_back(st.candidates[static_cast<size_t>(n.head) * top + static_cast<size_t>(n.rank)]);
    parents->push_back(n.parent);
  }
}

}  // namespace pagoda
