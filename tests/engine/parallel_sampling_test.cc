// n > 1: choices fork after the prompt and share its blocks; the shared last
// block is copied on the first write.
#include <gtest/gtest.h>

#include <map>

#include "engine_test_util.h"

namespace pagoda {
namespace {

using testing_util::make_engine;
using testing_util::tiny_model_path;

RequestSpec prompt_spec(int32_t n, float temperature, int32_t max_tokens) {
  RequestSpec s;
  for (int i = 0; i < 50; ++i) s.prompt.push_back(3 + (i * 7) % 300);
  s.n = n;
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  s.sampling.temperature = temperature;
  s.sampling.seed = 11;
  return s;
}

std::map<int32_t, std::vector<int32_t>> run(Engine& e, const RequestSpec& spec, int32_t* peak_blocks) {
  EXPECT_TRUE(e.add_request(spec).is_ok());
  std::map<int32_t, std::vector<int32_t>> out;
  *peak_blocks = 0;
  int finished_requests = 0;
  while (e.has_unfinished()) {
    for (const auto& o : e.step()) {
      out[o.index].insert(out[o.index].end(), o.new_tokens.begin(), o.new_tokens.end());
      finished_requests += o.request_finished;
    }
    const auto& kv = e.kv_manager();
    *peak_blocks = std::max(*peak_blocks, kv.num_blocks() - kv.num_available_blocks());
    const Status st = kv.check_invariants();
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
  EXPECT_EQ(finished_requests, 1);
  EXPECT_EQ(e.kv_manager().num_available_blocks(), e.kv_manager().num_blocks());
  return out;
}

TEST(ParallelSampling, GreedyChoicesEqualSingleRunAndSharePromptBlocks) {
  const std::string path = tiny_model_path();
  int32_t peak_one = 0, peak_four = 0;
  auto e1 = make_engine(path, 16 << 20, 4);
  const auto one = run(*e1, prompt_spec(1, 0, 10), &peak_one);
  auto e4 = make_engine(path, 16 << 20, 4);
  const auto four = run(*e4, prompt_spec(4, 0, 10), &peak_four);
  ASSERT_EQ(four.size(), 4u);
  for (const auto& [i, toks] : four) EXPECT_EQ(toks, one.at(0)) << "choice " << i;
  // 50 prompt tokens = 12 full blocks + a shared partial one; each choice
  // then owns at most 3 tail blocks (positions 48..59): 12 + 4 * 3 = 24,
  // against 4 * 15 = 60 without sharing.
  EXPECT_EQ(peak_one, 15);
  EXPECT_LE(peak_four, 24);
  EXPECT_LT(peak_four, 2 * peak_one);
}

TEST(ParallelSampling, SeededChoicesDifferAndAreReproducible) {
  const std::string path = tiny_model_path();
  int32_t peak = 0;
  auto a = make_engine(path, 16 << 20, 4);
  const auto first = run(*a, prompt_spec(4, 1.0f, 12), &peak);
  auto b = make_engine(path, 16 << 20, 4);
  const auto second = run(*b, prompt_spec(4, 1.0f, 12), &peak);
  EXPECT_EQ(first, second);
  int distinct = 0;
  for (int i = 1; i < 4; ++i) distinct += first.at(i) != first.at(0);
  EXPECT_GT(distinct, 0) << "sampled choices should not all coincide";
}

}  // namespace
}  // namespace pagoda
