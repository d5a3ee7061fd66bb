#include "spec/lookahead.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <unordered_map>

#include "core/check.h"

namespace pagoda {
namespace {

struct LookaheadState final : ProposerState {
  // [N - 1][W] guesses, level-major; empty until the first proposal.
  std::vector<int32_t> window;
  // First token -> up to G continuations (N - 1 tokens each), most recent first.
  std::unordered_map<int32_t, std::vector<std::vector<int32_t>>> pool;
  size_t num_ingested = 0;  // n-grams starting before this index of the tokens are in the pool
  // The last proposal: each column's last-level node (-1: not proposed).
  std::vector<int32_t> last_level_node;
};

void add_ngram(LookaheadState& st, int32_t first, std::vector<int32_t> rest, int32_t max_per_key) {
  std::vector<std::vector<int32_t>>& list = st.pool[first];
  auto same = std::find(list.begin(), list.end(), rest);
  if (same != list.end()) list.erase(same);
  list.insert(list.begin(), std::move(rest));
  if (static_cast<int32_t>(list.size()) > max_per_key) list.resize(static_cast<size_t>(max_per_key));
}

// The sequence's own n-grams not yet in the pool.
void ingest(LookaheadState& st, std::span<const int32_t> tokens, const LookaheadParams& p) {
  const size_t rest = static_cast<size_t>(p.ngram) - 1;
  for (; st.num_ingested + rest < tokens.size(); ++st.num_ingested) {
    const size_t i = st.num_ingested;
    add_ngram(st, tokens[i], std::vector<int32_t>(tokens.begin() + i + 1, tokens.begin() + i + 1 + rest), p.candidates);
  }
}

int32_t argmax(const float* row, int32_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

}  // namespace

Result<LookaheadParams> parse_lookahead(const std::string& text, int32_t max_nodes) {
  std::istringstream in(text);
  LookaheadParams p;
  char c1 = 0, c2 = 0;
  if (!(in >> p.window >> c1 >> p.ngram >> c2 >> p.candidates) || c1 != ',' || c2 != ',' || !(in >> std::ws).eof())
    return invalid_argument("lookahead sizes must be W,N,G (window, n-gram size, candidates), e.g. 4,3,4: got '" +
                            text + "'");
  if (p.window < 1 || p.ngram < 2 || p.candidates < 1 || p.window > max_nodes || p.ngram > max_nodes ||
      p.candidates > max_nodes)
    return invalid_argument("lookahead sizes need W >= 1, N >= 2, G >= 1: got '" + text + "'");
  if (p.tree_size() > max_nodes)
    return invalid_argument("lookahead " + text + " proposes (N - 1) * (W + G) = " + std::to_string(p.tree_size()) +
                            " drafts per step, more than " + std::to_string(max_nodes));
  return p;
}

LookaheadProposer::LookaheadProposer(LookaheadParams params) : params_(params) {
  PAGODA_CHECK(params.window >= 1 && params.ngram >= 2 && params.candidates >= 1);
}

std::unique_ptr<ProposerState> LookaheadProposer::make_state() const { return std::make_unique<LookaheadState>(); }

void LookaheadProposer::propose(std::span<const int32_t> tokens, int32_t max_tokens,
                                std::vector<int32_t>* draft) const {
  draft->clear();
  if (tokens.empty() || max_tokens <= 0) return;
  LookaheadState st;
  ingest(st, tokens, params_);
  auto it = st.pool.find(tokens.back());
  if (it == st.pool.end()) return;
  const std::vector<int32_t>& best = it->second.front();
  draft->assign(best.begin(), best.begin() + std::min<size_t>(best.size(), static_cast<size_t>(max_tokens)));
}

void LookaheadProposer::propose_tree(ProposerState* state, std::span<const int32_t> tokens, int32_t max_tokens,
                                     int32_t max_depth, std::vector<int32_t>* draft,
                                     std::vector<int32_t>* parents) const {
  auto& st = *static_cast<LookaheadState*>(state);
  draft->clear();
  parents->clear();
  const int32_t W = params_.window, levels = params_.ngram - 1;
  st.last_level_node.assign(static_cast<size_t>(W), -1);
  if (tokens.empty()) return;
  ingest(st, tokens, params_);
  std::vector<int32_t> depth;  // per node
  auto add = [&](int32_t token, int32_t parent) {
    if (parent < -1) return -2;
    const int32_t d = parent < 0 ? 1 : depth[parent] + 1;
    if (static_cast<int32_t>(draft->size()) >= max_tokens || d > max_depth) return -2;
    draft->push_back(token);
    parents->push_back(parent);
    depth.push_back(d);
    return static_cast<int32_t>(draft->size()) - 1;
  };
  // Verification branch: the pool's n-grams after the last token, as a trie.
  auto it = st.pool.find(tokens.back());
  if (it != st.pool.end()) {
    for (const std::vector<int32_t>& cont : it->second) {
      int32_t node = -1;
      for (int32_t t : cont) {
        int32_t child = -1;
        for (int32_t d = node + 1; d < static_cast<int32_t>(draft->size()) && child < 0; ++d)
          if ((*parents)[d] == node && (*draft)[d] == t) child = d;
        if (child < 0) child = add(t, node);
        if (child < -1) break;
        node = child;
      }
    }
  }
  // Lookahead branch. The first window is drawn from the context.
  if (st.window.empty()) {
    const size_t n = tokens.size();
    st.window.resize(static_cast<size_t>(levels) * W);
    for (size_t k = 0; k < st.window.size(); ++k) st.window[k] = tokens[(k * 2654435761u + n / 2) % n];
  }
  auto cell = [&](int32_t level, int32_t col) { return st.window[static_cast<size_t>(level) * W + col]; };
  // -2: a cell left out (no room, or too deep), and everything after it.
  std::vector<int32_t> level0(static_cast<size_t>(W), -2);
  for (int32_t c = 0; c < W; ++c) level0[c] = add(cell(0, c), c == 0 ? -1 : level0[c - 1]);
  for (int32_t c = 0; c < W; ++c) {
    int32_t node = level0[c];
    for (int32_t j = 1; j < levels && node >= 0; ++j) node = add(cell(j, c), node);
    st.last_level_node[c] = std::max(node, -1);
  }
}

void LookaheadProposer::observe(ProposerState* state, const float* draft_logits, int32_t num_scored,
                                int32_t vocab_size) const {
  auto& st = *static_cast<LookaheadState*>(state);
  const int32_t W = params_.window, levels = params_.ngram - 1;
  for (int32_t c = 0; c < static_cast<int32_t>(st.last_level_node.size()); ++c) {
    const int32_t node = st.last_level_node[c];
    if (node < 0 || node >= num_scored) continue;
    const int32_t pred = argmax(draft_logits + static_cast<size_t>(node) * vocab_size, vocab_size);
    // The column's diagonal and its prediction: an n-gram of N tokens.
    std::vector<int32_t> rest;
    for (int32_t j = 1; j < levels; ++j) rest.push_back(st.window[static_cast<size_t>(j) * W + c]);
    rest.push_back(pred);
    add_ngram(st, st.window[c], std::move(rest), params_.candidates);
    // Jacobi: the levels move up, the predictions are the newest.
    for (int32_t j = 0; j + 1 < levels; ++j)
      st.window[static_cast<size_t>(j) * W + c] = st.window[static_cast<size_t>(j + 1) * W + c];
    st.window[static_cast<size_t>(levels - 1) * W + c] = pred;
  }
  st.last_level_node.assign(st.last_level_node.size(), -1);
}

}  // namespace pagoda
