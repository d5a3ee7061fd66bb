#include "spec/ngram_proposer.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace pagoda {
namespace {

std::vector<int32_t> propose(const NgramProposer& p, const std::vector<int32_t>& t, int32_t k) {
  std::vector<int32_t> d = {-1};  // must be replaced
  p.propose(t, k, &d);
  return d;
}

TEST(NgramProposer, ContinuesTheMostRecentLongestMatch) {
  const NgramProposer p(1, 3);
  // "1 2 3" occurs at 0 and 5; the most recent earlier match (5) wins.
  EXPECT_EQ(propose(p, {1, 2, 3, 7, 8, 1, 2, 3, 9, 4, 1, 2, 3}, 3), (std::vector<int32_t>{9, 4, 1}));
  // Longest first: "5 1 2" (3-gram) beats the more recent "2" (1-gram).
  EXPECT_EQ(propose(p, {5, 1, 2, 6, 2, 7, 5, 1, 2}, 2), (std::vector<int32_t>{6, 2}));
  // Proposals stop at the end of the sequence.
  EXPECT_EQ(propose(p, {4, 5, 4}, 5), (std::vector<int32_t>{5, 4}));
}

TEST(NgramProposer, NoMatchNoDraft) {
  const NgramProposer p(2, 4);
  EXPECT_TRUE(propose(p, {1, 2, 3, 4, 5}, 4).empty());
  EXPECT_TRUE(propose(p, {1}, 4).empty());
  EXPECT_TRUE(propose(p, {}, 4).empty());
  EXPECT_TRUE(propose(p, {1, 2, 1, 2}, 0).empty());
  // min_n = 2: a lone repeated token is not enough.
  EXPECT_TRUE(propose(p, {3, 9, 8, 3}, 4).empty());
}

TEST(NgramProposer, EveryProposalFollowsAnEarlierOccurrence) {
  // Property: the draft equals the tokens after some earlier occurrence of
  // the sequence's last n tokens, for some n in [min, max].
  std::mt19937 rng(7);
  const NgramProposer p(1, 4);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int32_t> t(1 + rng() % 40);
    for (auto& x : t) x = static_cast<int32_t>(rng() % 4);
    const int32_t k = 1 + static_cast<int32_t>(rng() % 6);
    const std::vector<int32_t> d = propose(p, t, k);
    if (d.empty()) continue;
    ASSERT_LE(static_cast<int32_t>(d.size()), k);
    bool found = false;
    for (int n = 1; n <= 4 && !found; ++n) {
      if (n >= static_cast<int>(t.size())) break;
      for (size_t i = 0; i + n < t.size() && !found; ++i) {
        if (!std::equal(t.end() - n, t.end(), t.begin() + static_cast<long>(i))) continue;
        const size_t avail = std::min(d.size(), t.size() - i - n);
        found = avail == d.size() && std::equal(d.begin(), d.end(), t.begin() + static_cast<long>(i + n));
      }
    }
    ASSERT_TRUE(found) << "trial " << trial;
  }
}

TEST(SpecMethod, ParsesNames) {
  SpecMethod m;
  ASSERT_TRUE(parse_spec_method("ngram", &m));
  EXPECT_EQ(m, SpecMethod::kNgram);
  ASSERT_TRUE(parse_spec_method("none", &m));
  EXPECT_EQ(m, SpecMethod::kNone);
  EXPECT_FALSE(parse_spec_method("medusa2", &m));
  EXPECT_STREQ(spec_method_name(SpecMethod::kNgram), "ngram");
}

}  // namespace
}  // namespace pagoda
