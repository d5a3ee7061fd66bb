// The real trained stories260K model reproduces llama2.c's greedy output
// token for token through the engine's step loop.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "../shared_files.h"
#include "engine/engine.h"

namespace pagoda {
namespace {

std::vector<int32_t> read_ids(std::istream& in) {
  std::string line;
  std::getline(in, line);
  std::istringstream ss(line.substr(line.find(':') + 1));
  std::vector<int32_t> ids;
  for (int32_t v; ss >> v;) ids.push_back(v);
  return ids;
}

class StoriesGolden : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(StoriesGolden, GreedyMatchesReference) {
  PAGODA_SKIP_WITHOUT_SHARED("models/stories260K.gguf");
  const std::string dir = std::string(PAGODA_SHARED_DIR) + "/models/";
  std::ifstream ids_file(dir + "reference-greedy-" + GetParam().first + ".ids.txt");
  ASSERT_TRUE(ids_file) << "missing reference file";
  const auto prompt_ids = read_ids(ids_file);
  const auto next_ids = read_ids(ids_file);

  EngineConfig cfg;
  cfg.num_threads = 2;
  auto engine = Engine::create(dir + "stories260K.gguf", cfg);
  ASSERT_TRUE(engine.is_ok()) << engine.status().message();
  Engine& e = **engine;
  ASSERT_EQ(e.tokenizer().encode(GetParam().second, true, false), prompt_ids);

  RequestSpec spec;
  spec.prompt = prompt_ids;
  spec.sampling.temperature = 0;
  // NEXT lists the token after each position: prompt tokens 1.. then output.
  const size_t n_out = next_ids.size() - (prompt_ids.size() - 1);
  spec.max_tokens = static_cast<int32_t>(n_out);
  spec.ignore_eos = true;
  ASSERT_TRUE(e.add_request(spec).is_ok());
  std::vector<int32_t> got;
  while (e.has_unfinished())
    for (const auto& o : e.step()) got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
  const std::vector<int32_t> want(next_ids.end() - n_out, next_ids.end());
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(Prompts, StoriesGolden,
                         ::testing::Values(std::make_pair("Once_upon_a_time", "Once upon a time"),
                                           std::make_pair("The_little_dog", "The little dog")));

}  // namespace
}  // namespace pagoda
