// Beam search: width 1 is greedy; a wide beam finds the best two-token
// continuation that brute force finds; beams share blocks and never leak.
#include <gtest/gtest.h>

#include <map>

#include "engine_test_util.h"

namespace pagoda {
namespace {

using testing_util::make_engine;
using testing_util::tiny_model_path;

RequestSpec base_spec(int32_t max_tokens) {
  RequestSpec s;
  s.prompt = {1, 45, 67, 89, 101, 7, 3};
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  s.sampling.temperature = 0;
  return s;
}

std::vector<RequestOutput> run_all(Engine& e) {
  std::vector<RequestOutput> outs;
  while (e.has_unfinished()) {
    for (auto& o : e.step()) outs.push_back(std::move(o));
    const Status st = e.kv_manager().check_invariants();
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
  EXPECT_EQ(e.kv_manager().num_available_blocks(), e.kv_manager().num_blocks());
  return outs;
}

TEST(BeamSearch, WidthOneIsGreedy) {
  auto e = make_engine(tiny_model_path(), 16 << 20);
  ASSERT_TRUE(e->add_request(base_spec(12)).is_ok());
  std::vector<int32_t> greedy;
  for (const auto& o : run_all(*e)) greedy.insert(greedy.end(), o.new_tokens.begin(), o.new_tokens.end());
  RequestSpec b = base_spec(12);
  b.use_beam_search = true;
  b.beam_width = 1;
  ASSERT_TRUE(e->add_request(b).is_ok());
  const auto outs = run_all(*e);
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_TRUE(outs[0].request_finished);
  EXPECT_EQ(outs[0].new_tokens, greedy);
}

TEST(BeamSearch, WideBeamFindsTheBestTwoTokenContinuation) {
  auto e = make_engine(tiny_model_path(), 64 << 20);
  // Brute force over the 20 likeliest first tokens.
  RequestSpec first = base_spec(1);
  first.sampling.logprobs = 20;
  ASSERT_TRUE(e->add_request(first).is_ok());
  const auto top = run_all(*e).at(0).samples.at(0).top;
  ASSERT_EQ(top.size(), 20u);
  double best = -1e30;
  std::pair<int32_t, int32_t> best_pair;
  for (const auto& t1 : top) {
    RequestSpec second = base_spec(1);
    second.prompt.push_back(t1.token);
    second.sampling.logprobs = 0;
    ASSERT_TRUE(e->add_request(second).is_ok());
    const auto s = run_all(*e).at(0).samples.at(0);
    if (t1.logprob + s.logprob > best) {
      best = t1.logprob + s.logprob;
      best_pair = {t1.token, s.token};
    }
  }
  RequestSpec b = base_spec(2);
  b.use_beam_search = true;
  b.beam_width = 64;
  b.n = 3;
  ASSERT_TRUE(e->add_request(b).is_ok());
  const auto outs = run_all(*e);
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[0].index, 0);
  EXPECT_TRUE(outs.back().request_finished);
  EXPECT_EQ(outs[0].new_tokens, (std::vector<int32_t>{best_pair.first, best_pair.second}));
  EXPECT_NE(outs[0].new_tokens, outs[1].new_tokens);
}

TEST(BeamSearch, BeamsShareHistoryBlocks) {
  auto e = make_engine(tiny_model_path(), 16 << 20, 4);
  RequestSpec b = base_spec(20);
  for (int i = 0; i < 40; ++i) b.prompt.push_back(10 + i);  // 47-token prompt: 12 blocks
  b.use_beam_search = true;
  b.beam_width = 4;
  b.n = 2;
  ASSERT_TRUE(e->add_request(b).is_ok());
  int32_t peak = 0;
  std::vector<RequestOutput> outs;
  while (e->has_unfinished()) {
    for (auto& o : e->step()) outs.push_back(std::move(o));
    peak = std::max(peak, e->kv_manager().num_blocks() - e->kv_manager().num_available_blocks());
    ASSERT_TRUE(e->kv_manager().check_invariants().is_ok());
  }
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].new_tokens.size(), 20u);
  // Unshared, 4 beams of 67 tokens would hold 4 * 17 = 68 blocks.
  EXPECT_LT(peak, 40);
  EXPECT_EQ(e->kv_manager().num_available_blocks(), e->kv_manager().num_blocks());
}

}  // namespace
}  // namespace pagoda
