// LookaheadProposer (spec/lookahead.h): the tree's shape (parents before
// children, depth and size limits, the verification trie and the Jacobi
// window's columns), the pool fed by the sequence's own n-grams and by the
// window's predictions, and parse_lookahead's errors.
#include "spec/lookahead.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace pagoda {
namespace {

struct Tree {
  std::vector<int32_t> draft, parents;
  int32_t depth(int32_t node) const { return node < 0 ? 0 : 1 + depth(parents[static_cast<size_t>(node)]); }
  // The tokens from the root to `node`.
  std::vector<int32_t> path(int32_t node) const {
    std::vector<int32_t> p;
    for (; node >= 0; node = parents[static_cast<size_t>(node)]) p.insert(p.begin(), draft[static_cast<size_t>(node)]);
    return p;
  }
};

Tree propose(const LookaheadProposer& p, ProposerState* st, const std::vector<int32_t>& tokens, int32_t max_tokens,
             int32_t max_depth) {
  Tree t{{-7}, {-7}};  // must be replaced
  p.propose_tree(st, tokens, max_tokens, max_depth, &t.draft, &t.parents);
  EXPECT_EQ(t.draft.size(), t.parents.size());
  for (size_t i = 0; i < t.parents.size(); ++i) {
    EXPECT_GE(t.parents[i], -1);
    EXPECT_LT(t.parents[i], static_cast<int32_t>(i)) << "a parent must precede its child";
  }
  return t;
}

TEST(Lookahead, FullTreeHasTheWindowAndTheVerificationBranch) {
  const LookaheadProposer p({.window = 3, .ngram = 3, .candidates = 2});
  auto st = p.make_state();
  // "5" is followed by "6 7" and (more recently) "8 9": two candidates.
  const std::vector<int32_t> tokens = {5, 6, 7, 1, 5, 8, 9, 2, 5};
  const Tree t = propose(p, st.get(), tokens, 64, 64);
  // Verification trie: 8 9 first (most recent), then 6 7.
  ASSERT_GE(t.draft.size(), 4u);
  EXPECT_EQ(t.path(1), (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(t.path(3), (std::vector<int32_t>{6, 7}));
  // Window: level 0 is a chain of W, each column one more level: (N-1)*W.
  EXPECT_EQ(t.draft.size(), 4u + 2u * 3u);
  const int32_t l0 = 4;
  for (int32_t c = 0; c < 3; ++c) {
    EXPECT_EQ(t.depth(l0 + c), c + 1);
    EXPECT_EQ(t.parents[static_cast<size_t>(l0 + c)], c == 0 ? -1 : l0 + c - 1);
  }
  for (int32_t c = 0; c < 3; ++c) EXPECT_EQ(t.depth(l0 + 3 + c), c + 2) << "level 1 of column " << c;
}

TEST(Lookahead, SharedPrefixesMergeInTheTrie) {
  const LookaheadProposer p({.window = 1, .ngram = 4, .candidates = 4});
  auto st = p.make_state();
  // "3" is followed by "4 5 6" and "4 5 7": one trie 4 -> 5 -> {6, 7}.
  const std::vector<int32_t> tokens = {3, 4, 5, 6, 0, 3, 4, 5, 7, 0, 3};
  const Tree t = propose(p, st.get(), tokens, 64, 64);
  ASSERT_GE(t.draft.size(), 4u);
  EXPECT_EQ(t.path(2), (std::vector<int32_t>{4, 5, 7}));
  EXPECT_EQ(t.path(3), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(t.parents[3], 1) << "the second n-gram shares 4 5";
}

TEST(Lookahead, RespectsSizeAndDepthLimits) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const LookaheadParams params{static_cast<int32_t>(1 + rng() % 5), static_cast<int32_t>(2 + rng() % 4),
                                 static_cast<int32_t>(1 + rng() % 5)};
    const LookaheadProposer p(params);
    auto st = p.make_state();
    std::vector<int32_t> tokens(1 + rng() % 60);
    for (int32_t& x : tokens) x = static_cast<int32_t>(rng() % 6);
    const int32_t max_tokens = static_cast<int32_t>(rng() % 20), max_depth = static_cast<int32_t>(rng() % 6);
    const Tree t = propose(p, st.get(), tokens, max_tokens, max_depth);
    EXPECT_LE(static_cast<int32_t>(t.draft.size()), std::min(max_tokens, params.tree_size()));
    for (size_t i = 0; i < t.draft.size(); ++i) EXPECT_LE(t.depth(static_cast<int32_t>(i)), max_depth);
    // With room for everything, the whole window is there.
    if (max_tokens >= params.tree_size() && max_depth >= params.window + params.ngram) {
      EXPECT_GE(static_cast<int32_t>(t.draft.size()), (params.ngram - 1) * params.window);
    }
  }
}

TEST(Lookahead, ObservedPredictionsJoinThePool) {
  const LookaheadProposer p({.window = 2, .ngram = 2, .candidates = 2});
  auto st = p.make_state();
  const std::vector<int32_t> tokens = {1, 2, 3};
  const Tree t = propose(p, st.get(), tokens, 64, 64);
  // No earlier "3": no verification branch; the window is two level-0 nodes.
  ASSERT_EQ(t.draft.size(), 2u);
  const int32_t w1 = t.draft[1];
  // The target predicts 9 after column 0's node and 8 after column 1's.
  const int32_t vocab = 10;
  std::vector<float> logits(2 * vocab, 0.0f);
  logits[9] = 5;
  logits[vocab + 8] = 5;
  p.observe(st.get(), logits.data(), 2, vocab);
  // The pool now holds (w1, 8): after a context ending in w1 the
  // verification branch has a root child 8; the window's only level is now
  // the predictions 9 -> 8.
  const Tree after = propose(p, st.get(), {1, 2, 3, w1}, 64, 64);
  ASSERT_GE(after.draft.size(), 3u);
  bool found = false;
  for (size_t i = 0; i + 2 < after.draft.size(); ++i) found |= after.parents[i] == -1 && after.draft[i] == 8;
  EXPECT_TRUE(found) << "the observed n-gram is not verified";
  EXPECT_EQ(after.draft[after.draft.size() - 2], 9) << "Jacobi: the predictions are the next window";
  EXPECT_EQ(after.draft.back(), 8);
}

TEST(Lookahead, ChainProposalFollowsThePool) {
  const LookaheadProposer p({.window = 4, .ngram = 3, .candidates = 4});
  std::vector<int32_t> d = {-1};
  p.propose(std::vector<int32_t>{7, 8, 9, 1, 7}, 5, &d);
  EXPECT_EQ(d, (std::vector<int32_t>{8, 9}));
  p.propose(std::vector<int32_t>{7, 8, 9, 1, 4}, 5, &d);
  EXPECT_TRUE(d.empty());
  p.propose(std::vector<int32_t>{}, 5, &d);
  EXPECT_TRUE(d.empty());
}

TEST(Lookahead, ParseChecksTheSizes) {
  auto ok = parse_lookahead("5,4,3", 64);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(ok->window, 5);
  EXPECT_EQ(ok->ngram, 4);
  EXPECT_EQ(ok->candidates, 3);
  EXPECT_EQ(ok->tree_size(), 24);
  for (const char* bad : {"", "4", "4,3", "4,3,4,1", "4;3;4", "a,b,c", "0,3,4", "4,1,4", "4,3,0", "-1,3,4", "4,3,4x",
                          "16,5,16", "99999999999,3,4"}) {
    auto r = parse_lookahead(bad, 64);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_NE(r.status().message().find("lookahead"), std::string::npos) << r.status().message();
    }
  }
}

}  // namespace
}  // namespace pagoda
