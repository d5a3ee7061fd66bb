#include "spec/datastore.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

namespace pagoda {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()))).string();
}

TEST(Datastore, SuffixArrayFindsEveryOccurrence) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<int32_t> t(1 + rng() % 300);
    for (auto& x : t) x = static_cast<int32_t>(rng() % (1 + trial % 5));
    auto ds = Datastore::build(t, 8);
    ASSERT_TRUE(ds.is_ok());
    for (int q = 0; q < 20; ++q) {
      std::vector<int32_t> pat(1 + rng() % 4);
      for (auto& x : pat) x = static_cast<int32_t>(rng() % (1 + trial % 5));
      const auto [b, e] = (*ds)->find(pat);
      int64_t want = 0;
      for (size_t i = 0; i + pat.size() <= t.size(); ++i)
        want += std::equal(pat.begin(), pat.end(), t.begin() + static_cast<long>(i)) ? 1 : 0;
      ASSERT_EQ(e - b, want) << "trial " << trial;
      for (int64_t i = b; i < e; ++i) ASSERT_TRUE(std::equal(pat.begin(), pat.end(), t.begin() + (*ds)->position(i)));
    }
  }
}

TEST(Datastore, ProposesTheMostFrequentContinuation) {
  // "1 2" is followed by 3 twice and by 9 once.
  auto ds = Datastore::build({1, 2, 3, 4, 1, 2, 9, 1, 2, 3, 5}, 10);
  ASSERT_TRUE(ds.is_ok());
  RetrievalProposer p(std::shared_ptr<const Datastore>(std::move(*ds)), 1, 4);
  std::vector<int32_t> d;
  p.propose(std::vector<int32_t>{7, 7, 1, 2}, 2, &d);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], 3);
  p.propose(std::vector<int32_t>{8, 8}, 3, &d);
  EXPECT_TRUE(d.empty());
}

TEST(Datastore, SaveLoadRoundTripAndBadFiles) {
  std::vector<int32_t> t;
  for (int i = 0; i < 100; ++i) t.push_back(i % 7);
  auto ds = Datastore::build(t, 16);
  ASSERT_TRUE(ds.is_ok());
  const std::string path = temp_path("pagoda_ds_");
  ASSERT_TRUE((*ds)->save(path).is_ok());
  auto back = Datastore::load(path, 16);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ((*back)->num_tokens(), 100);
  EXPECT_EQ((*back)->find(std::vector<int32_t>{3, 4}), (*ds)->find(std::vector<int32_t>{3, 4}));
  // Wrong vocabulary, missing file.
  EXPECT_FALSE(Datastore::load(path, 17).is_ok());
  EXPECT_FALSE(Datastore::load(path + ".missing", 16).is_ok());
  // Truncations and byte flips: a clear error or a valid store, never a crash.
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string bad = temp_path("pagoda_ds_bad_");
  for (size_t cut : {size_t{0}, size_t{5}, size_t{23}, bytes.size() / 2, bytes.size() - 1}) {
    std::ofstream(bad, std::ios::binary) << bytes.substr(0, cut);
    EXPECT_FALSE(Datastore::load(bad, 16).is_ok()) << "cut " << cut;
  }
  std::mt19937 rng(1);
  int rejected = 0;
  for (int i = 0; i < 200; ++i) {
    std::string m = bytes;
    m[rng() % m.size()] ^= static_cast<char>(1 + rng() % 255);
    std::ofstream(bad, std::ios::binary) << m;
    auto r = Datastore::load(bad, 16);
    rejected += r.is_ok() ? 0 : 1;
    if (r.is_ok()) {  // a flip that keeps the file valid must still give a usable store
      (*r)->find(std::vector<int32_t>{1, 2});
    }
  }
  EXPECT_GT(rejected, 150);
  std::filesystem::remove(path);
  std::filesystem::remove(bad);
}

}  // namespace
}  // namespace pagoda
