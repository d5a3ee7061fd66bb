#include "tokenizer/stop_strings.h"

#include <gtest/gtest.h>

#include <random>

namespace pagoda {
namespace {

// Feeds text in the given pieces; returns released text and whether it stopped.
std::pair<std::string, bool> feed(StopStringMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  bool stopped = false;
  for (const auto& p : pieces) {
    out += m.push(p, &stopped);
    if (stopped) return {out, true};
  }
  return {out + m.flush(), false};
}

TEST(StopStrings, NoStopsPassesThrough) {
  StopStringMatcher m(std::vector<std::string>{});
  EXPECT_EQ(feed(m, {"ab", "c"}).first, "abc");
}

TEST(StopStrings, StopSplitAcrossPiecesIsCutAndNotReturned) {
  StopStringMatcher m({"###"});
  auto [text, stopped] = feed(m, {"Hello #", "#", "# world"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text, "Hello ");
}

TEST(StopStrings, PartialMatchIsReleasedWhenItDiverges) {
  StopStringMatcher m({"STOP"});
  bool stopped;
  EXPECT_EQ(m.push("abST", &stopped), "ab");
  EXPECT_EQ(m.push("x", &stopped), "STx");
  EXPECT_FALSE(stopped);
}

TEST(StopStrings, EarliestOfSeveralStopsWins) {
  StopStringMatcher m({"world", "lo w"});
  auto [text, stopped] = feed(m, {"hello world"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text, "hel");
}

TEST(StopStrings, RandomSplitsAgreeWithWholeString) {
  std::mt19937 rng(5);
  const std::string alphabet = "ab\n";
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text, stop;
    for (int i = 0; i < 12; ++i) text += alphabet[rng() % 3];
    for (int i = 0; i < 1 + static_cast<int>(rng() % 3); ++i) stop += alphabet[rng() % 3];
    const size_t pos = text.find(stop);
    const std::string want = pos == std::string::npos ? text : text.substr(0, pos);
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng() % 4;
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    StopStringMatcher m({stop});
    auto [got, stopped] = feed(m, pieces);
    ASSERT_EQ(got, want) << "text=" << text << " stop=" << stop;
    ASSERT_EQ(stopped, pos != std::string::npos);
  }
}

TEST(StopStrings, SharedListMatchesLikeOwnedOne) {
  auto shared = StopStringMatcher::share({"", "END", "xy"});
  ASSERT_EQ(shared->size(), 2u);  // empty strings dropped
  StopStringMatcher a(shared), b(shared);
  bool stopped = false;
  EXPECT_EQ(a.push("abcE", &stopped), "abc");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(a.push("ND tail", &stopped), "");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(b.push("1x", &stopped), "1");  // b's state is its own
  EXPECT_FALSE(stopped);
  EXPECT_EQ(b.push("y", &stopped), "");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(shared.use_count(), 3);
}

}  // namespace
}  // namespace pagoda
