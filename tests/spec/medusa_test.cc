// Medusa heads (spec/medusa.h): the file round-trips and bad files are clear
// errors; the residual block matches a naive reference; the calibration
// counts each head where the accepted path reached it; the proposer shapes
// its tree best first from the calibrated rates, fills it with the heads'
// top candidates within the size and depth limits, learns the shape from
// its verifications, and proposes only after it was given a hidden state.
#include "spec/medusa.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "gguf/gguf_writer.h"

namespace pagoda {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("pagoda_medusa_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

MedusaHeads random_heads(int32_t heads, int32_t hidden, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.3f);
  MedusaHeads h;
  h.num_heads = heads;
  h.hidden_size = hidden;
  h.weight.resize(static_cast<size_t>(heads) * hidden * hidden);
  h.bias.resize(static_cast<size_t>(heads) * hidden);
  for (float& x : h.weight) x = d(rng);
  for (float& x : h.bias) x = d(rng);
  h.transpose();
  return h;
}

TEST(MedusaHeads, SaveLoadAndApplyMatchesTheReference) {
  const MedusaHeads h = random_heads(3, 37, 5);  // an awkward hidden size
  const std::string path = temp_path("ok.gguf");
  ASSERT_TRUE(h.save(path, 100).is_ok());
  auto loaded = MedusaHeads::load(path, 37, 100);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ(loaded->weight, h.weight);
  EXPECT_EQ(loaded->bias, h.bias);
  std::vector<float> x(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  std::vector<float> got(3 * 37);
  loaded->apply(x.data(), 3, got.data());
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 37; ++i) {
      double z = h.bias[static_cast<size_t>(k * 37 + i)];
      for (int j = 0; j < 37; ++j) z += double{h.weight[static_cast<size_t>((k * 37 + i) * 37 + j)]} * x[j];
      const double want = x[i] + z / (1 + std::exp(-z));
      EXPECT_NEAR(got[static_cast<size_t>(k * 37 + i)], want, 1e-4) << k << " " << i;
    }
  std::filesystem::remove(path);
}

TEST(MedusaHeads, BadFilesAreClearErrors) {
  const MedusaHeads h = random_heads(2, 8, 1);
  const std::string path = temp_path("bad.gguf");
  ASSERT_TRUE(h.save(path, 50).is_ok());
  auto wrong_hidden = MedusaHeads::load(path, 16, 50);
  ASSERT_FALSE(wrong_hidden.is_ok());
  EXPECT_NE(wrong_hidden.status().message().find("hidden size"), std::string::npos);
  EXPECT_FALSE(MedusaHeads::load(path, 8, 51).is_ok()) << "another vocabulary";
  EXPECT_FALSE(MedusaHeads::load("/nonexistent.gguf", 8, 50).is_ok());
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << "not a gguf";
  }
  EXPECT_FALSE(MedusaHeads::load(path, 8, 50).is_ok());
  // A GGUF of another kind, and one with a tensor missing.
  gguf::GGUFWriter w;
  w.set("general.architecture", gguf::Value::make_string("llama"));
  ASSERT_TRUE(w.write(path).is_ok());
  auto other = MedusaHeads::load(path, 8, 50);
  ASSERT_FALSE(other.is_ok());
  EXPECT_NE(other.status().message().find("not a Medusa"), std::string::npos) << other.status().message();
  gguf::GGUFWriter m;
  m.set("general.architecture", gguf::Value::make_string("medusa"));
  m.set("medusa.head_count", gguf::Value::make_u32(1));
  m.set("medusa.embedding_length", gguf::Value::make_u32(8));
  m.set("medusa.vocab_size", gguf::Value::make_u32(50));
  ASSERT_TRUE(m.write(path).is_ok());
  auto missing = MedusaHeads::load(path, 8, 50);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("missing"), std::string::npos) << missing.status().message();
  std::filesystem::remove(path);
}

TEST(MedusaHeads, PathBesideTheModel) {
  EXPECT_EQ(medusa_heads_path("models/pagoda-small.gguf"), "models/pagoda-small.medusa.gguf");
  EXPECT_EQ(medusa_heads_path("/x/model"), "/x/model.medusa.gguf");
}

// Heads that pass the hidden state through (zero weights and bias: h +
// SiLU(0) = h), and a projection that gives head k the logits set below.
struct Fixture {
  static constexpr int32_t kHidden = 4, kVocab = 10, kHeads = 3;
  std::vector<std::vector<float>> head_logits;  // [head][vocab]
  MedusaProposer proposer;
  explicit Fixture(int32_t top_k)
      : head_logits(kHeads, std::vector<float>(kVocab, 0.0f)),
        proposer(
            zero_heads(), kVocab,
            [this](const float* hidden, int32_t rows, float* logits) {
              // Every row equals the hidden state; row k is head k.
              for (int32_t r = 0; r < rows; ++r) {
                EXPECT_FLOAT_EQ(hidden[r * kHidden], 0.5f);
                std::copy(head_logits[r].begin(), head_logits[r].end(), logits + r * kVocab);
              }
            },
            top_k) {}
  static MedusaHeads zero_heads() {
    MedusaHeads h;
    h.num_heads = kHeads;
    h.hidden_size = kHidden;
    h.weight.assign(static_cast<size_t>(kHeads) * kHidden * kHidden, 0.0f);
    h.bias.assign(static_cast<size_t>(kHeads) * kHidden, 0.0f);
    h.transpose();
    return h;
  }
};

TEST(MedusaCalibration, CountsEachHeadWhereThePathReachedIt) {
  MedusaCalibration c(3, 2);
  // Candidates [head][rank]: head 0 {3, 7}, head 1 {1, 2}, head 2 {5, 6}.
  const std::vector<int32_t> cand = {3, 7, 1, 2, 5, 6};
  c.record(cand, std::vector<int32_t>{7, 9}, 1.0);  // head 0's rank 1 hit, head 1 missed, head 2 not reached
  EXPECT_DOUBLE_EQ(c.seen(0), 1.0);
  EXPECT_DOUBLE_EQ(c.seen(1), 1.0);
  EXPECT_DOUBLE_EQ(c.seen(2), 0.0);
  EXPECT_DOUBLE_EQ(c.rate(0, 1, 0.5, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(c.rate(0, 0, 0.5, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(c.rate(1, 0, 0.5, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(c.rate(2, 0, 0.25, 1.0), 0.25) << "unseen: the prior";
  c.record(cand, std::vector<int32_t>{3, 1, 5}, 0.5);  // the old counts halve
  EXPECT_DOUBLE_EQ(c.seen(0), 1.5);
  EXPECT_DOUBLE_EQ(c.rate(0, 0, 0.0, 0.0), 1.0 / 1.5);
  EXPECT_DOUBLE_EQ(c.rate(2, 0, 0.0, 1.0), 0.5) << "one hit, pulled halfway to the prior 0";
  // Only the heads that ran count: a one-head tree sees head 0 alone.
  c.record(std::vector<int32_t>{3, 7}, std::vector<int32_t>{3, 1, 5}, 1.0);
  EXPECT_DOUBLE_EQ(c.seen(0), 2.5);
  EXPECT_DOUBLE_EQ(c.seen(1), 1.5);
}

TEST(MedusaProposer, ShapesTheTreeBestFirstFromTheRates) {
  // Head 0: rank 0 at 0.9, rank 1 at 0.05; head 1: 0.8 / 0.1; head 2: 0.5 / 0.4.
  const std::vector<double> rates = {0.9, 0.05, 0.8, 0.1, 0.5, 0.4};
  const auto nodes = MedusaProposer::shape(rates, 2, 3, 6);
  ASSERT_EQ(nodes.size(), 6u);
  // 0.9 (h0 r0), 0.72 (h1 r0), 0.36 (h2 r0), 0.288 (h2 r1), 0.09 (h1 r1), 0.05 (h0 r1).
  const std::vector<std::array<int32_t, 3>> want = {{0, 0, -1}, {1, 0, 0}, {2, 0, 1}, {2, 1, 1}, {1, 1, 0}, {0, 1, -1}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(nodes[i].head, want[i][0]) << i;
    EXPECT_EQ(nodes[i].rank, want[i][1]) << i;
    EXPECT_EQ(nodes[i].parent, want[i][2]) << i;
    if (i > 0) {
      EXPECT_LE(nodes[i].score, nodes[i - 1].score);
    }
  }
  EXPECT_NEAR(nodes[3].score, 0.9 * 0.8 * 0.4, 1e-12);
  // Depth and size limits.
  EXPECT_EQ(MedusaProposer::shape(rates, 2, 1, 6).size(), 2u);
  EXPECT_EQ(MedusaProposer::shape(rates, 2, 3, 2).size(), 2u);
}

TEST(MedusaProposer, LearnsTheTreeFromItsVerifications) {
  Fixture f(2);
  // Head 0: token 3, then 7. Head 1: token 1, then 2. Head 2: 5, then 6.
  f.head_logits[0][3] = 5;
  f.head_logits[0][7] = 4;
  f.head_logits[1][1] = 6;
  f.head_logits[1][2] = 1;
  f.head_logits[2][5] = 6;
  f.head_logits[2][6] = 1;
  auto st = f.proposer.make_state();
  const std::vector<float> hidden(Fixture::kHidden, 0.5f);
  std::vector<int32_t> draft = {-9}, parents = {-9};
  f.proposer.propose_tree(st.get(), std::vector<int32_t>{1, 2}, 64, 64, &draft, &parents);
  EXPECT_TRUE(draft.empty()) << "no hidden state yet: no proposal";
  // The heads' chain is always right (a loop the heads predict): the tree
  // turns into that chain, and its nodes' gains approach 1.
  for (int i = 0; i < 40; ++i) {
    f.proposer.set_hidden(st.get(), hidden);
    f.proposer.propose_tree(st.get(), std::vector<int32_t>{1, 2}, 3, 64, &draft, &parents);
    ASSERT_EQ(draft.size(), 3u);
    f.proposer.verified(st.get(), std::vector<int32_t>{3, 1, 5, 8});
  }
  EXPECT_EQ(draft, (std::vector<int32_t>{3, 1, 5}));
  EXPECT_EQ(parents, (std::vector<int32_t>{-1, 0, 1}));
  std::vector<double> gains;
  f.proposer.node_gains(st.get(), 4, &gains);
  ASSERT_EQ(gains.size(), 4u);
  EXPECT_GT(gains[2], 0.8);
  EXPECT_LT(gains[3], 0.1) << "a second-rank node never hit";
  // Used once per hidden state; a verification without a tree teaches nothing.
  f.proposer.propose_tree(st.get(), std::vector<int32_t>{1, 2}, 3, 64, &draft, &parents);
  EXPECT_TRUE(draft.empty());
  f.proposer.verified(st.get(), std::vector<int32_t>{7});
  // Now head 0's second candidate is the target's token, every time: it
  // becomes the first node, head 1 is never reached again.
  for (int i = 0; i < 60; ++i) {
    f.proposer.set_hidden(st.get(), hidden);
    f.proposer.propose_tree(st.get(), std::vector<int32_t>{1, 2}, 2, 64, &draft, &parents);
    f.proposer.verified(st.get(), std::vector<int32_t>{7, 9});
  }
  ASSERT_EQ(draft.size(), 2u);
  EXPECT_EQ(draft[0], 7);
  EXPECT_EQ(parents[0], -1);
  // A new sequence starts from the engine-wide record, which saw both.
  auto fresh = f.proposer.make_state();
  std::vector<double> fresh_gains;
  f.proposer.node_gains(fresh.get(), 2, &fresh_gains);
  ASSERT_EQ(fresh_gains.size(), 2u);
  EXPECT_GT(fresh_gains[0], 0.5);
}

TEST(MedusaProposer, OneNodeTreesStillCalibrateTheNextHead) {
  // Head 0's best is 3 and head 1's is 1; the target emits 3, then 1: a
  // one-node tree is accepted every time, and the token the target adds is
  // head 1's candidate. Trees filled after scheduling run one head beyond
  // their depth, so head 1 is calibrated and the tree can grow; run only as
  // deep as the tree, head 1 kept its prior (0.38) however often the node
  // was accepted.
  Fixture f(2);
  f.head_logits[0][3] = 5;
  f.head_logits[1][1] = 6;
  f.head_logits[2][5] = 6;
  auto st = f.proposer.make_state();
  const std::vector<float> hidden(Fixture::kHidden, 0.5f);
  for (int i = 0; i < 30; ++i) {
    f.proposer.set_hidden(st.get(), hidden);
    std::vector<int32_t> draft = {-1}, parents;
    const TreeFill fill{st.get(), &draft, &parents};
    f.proposer.fill_trees(std::span<const TreeFill>(&fill, 1));
    ASSERT_EQ(draft, std::vector<int32_t>{3});
    f.proposer.verified(st.get(), std::vector<int32_t>{3, 1});
  }
  std::vector<double> gains;
  f.proposer.node_gains(st.get(), 2, &gains);
  ASSERT_EQ(gains.size(), 2u);
  EXPECT_GT(gains[0], 0.8);
  EXPECT_GT(gains[1], 0.6) << "head 1's candidate under head 0's";
}

TEST(MedusaProposer, RespectsSizeAndDepthLimits) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 100; ++trial) {
    Fixture f(1 + static_cast<int32_t>(rng() % 4));
    for (auto& row : f.head_logits)
      for (float& x : row) x = static_cast<float>(rng() % 100) / 10.0f;
    auto st = f.proposer.make_state();
    f.proposer.set_hidden(st.get(), std::vector<float>(Fixture::kHidden, 0.5f));
    const int32_t max_tokens = static_cast<int32_t>(rng() % 30), max_depth = static_cast<int32_t>(rng() % 5);
    std::vector<int32_t> draft, parents;
    f.proposer.propose_tree(st.get(), std::vector<int32_t>{4}, max_tokens, max_depth, &draft, &parents);
    ASSERT_EQ(draft.size(), parents.size());
    EXPECT_LE(static_cast<int32_t>(draft.size()), max_tokens);
    // The root's children, in order, are head 0's best candidates by logit
    // (ties: the lower token id), as a full sort ranks them.
    std::vector<int32_t> order(Fixture::kVocab);
    for (int32_t i = 0; i < Fixture::kVocab; ++i) order[static_cast<size_t>(i)] = i;
    const auto& row0 = f.head_logits[0];
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row0[a] > row0[b]; });
    size_t rank = 0;
    for (size_t i = 0; i < draft.size(); ++i) {
      if (parents[i] == -1) {
        EXPECT_EQ(draft[i], order[rank++]) << "trial " << trial;
      }
    }
    for (size_t i = 0; i < draft.size(); ++i) {
      EXPECT_LT(parents[i], static_cast<int32_t>(i));
      int32_t depth = 0;
      for (int32_t n = static_cast<int32_t>(i); n >= 0; n = parents[static_cast<size_t>(n)]) ++depth;
      EXPECT_LE(depth, std::min(max_depth, Fixture::kHeads));
      // Siblings differ.
      for (size_t j = 0; j < i; ++j) {
        if (parents[j] == parents[i]) {
          EXPECT_NE(draft[j], draft[i]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
