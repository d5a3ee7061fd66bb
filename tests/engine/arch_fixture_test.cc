// New architectures against llama.cpp (../shared/fixtures/arch): the logits
// of every prompt position within 1e-3 x max |logit| of llama.cpp's, and the
// greedy continuation token for token, with the prompt as one batch, in
// chunks, and one token at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../shared_files.h"
#include "engine/prompt_logits.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using nlohmann::json;
using testing_util::shared_path;

std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

class ArchFixture : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return "fixtures/arch/" + GetParam(); }
};

TEST_P(ArchFixture, LogitsMatchLlamaCpp) {
  PAGODA_SKIP_WITHOUT_SHARED(dir() + "/model.gguf");
  const json prompts = read_json(shared_path(dir() + "/prompts.json"));
  auto runner = make_logits_runner(shared_path(dir() + "/model.gguf"), 128, 1);
  ASSERT_TRUE(runner.is_ok()) << runner.status().message();
  const int32_t vocab = runner->runner->config().vocab_size;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> ids = prompts[i].get<std::vector<int32_t>>();
    auto got = prompt_logits(*runner->runner, ids);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    const std::vector<float> want = read_f32(shared_path(dir() + "/logits-" + std::to_string(i) + ".f32"));
    ASSERT_EQ(got->size(), want.size());
    ASSERT_EQ(want.size(), ids.size() * static_cast<size_t>(vocab));
    float max_abs = 0, max_diff = 0;
    for (size_t j = 0; j < want.size(); ++j) {
      max_abs = std::max(max_abs, std::fabs(want[j]));
      max_diff = std::max(max_diff, std::fabs(want[j] - (*got)[j]));
    }
    std::printf("[ diff ] %s prompt %zu: max |diff| %.3g = %.3g x max |logit|\n", GetParam().c_str(), i, max_diff,
                max_diff / max_abs);
    EXPECT_LE(max_diff, 1e-3f * max_abs) << GetParam() << " prompt " << i;
  }
}

// Greedy tokens of the fixture's prompts on an engine with this step budget.
std::vector<std::vector<int32_t>> greedy(const std::string& path, const json& prompts, int32_t budget, int n) {
  SchedulerConfig sched;
  sched.max_num_batched_tokens = budget;
  auto e = testing_util::make_engine(path, 16 << 20, 16, sched);
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::vector<RequestId> ids;
  for (const json& p : prompts) {
    RequestSpec spec;
    spec.prompt = p.get<std::vector<int32_t>>();
    spec.max_tokens = n;
    spec.sampling.temperature = 0;
    spec.ignore_eos = true;
    auto id = e->add_request(spec);
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    ids.push_back(*id);
  }
  while (e->has_unfinished())
    for (const auto& o : e->step())
      for (size_t i = 0; i < ids.size(); ++i)
        if (o.id == ids[i]) out[i].insert(out[i].end(), o.new_tokens.begin(), o.new_tokens.end());
  return out;
}

TEST_P(ArchFixture, GreedyContinuationMatchesLlamaCpp) {
  PAGODA_SKIP_WITHOUT_SHARED(dir() + "/model.gguf");
  const json prompts = read_json(shared_path(dir() + "/prompts.json"));
  const json want = read_json(shared_path(dir() + "/greedy.json"));
  const std::string model = shared_path(dir() + "/model.gguf");
  for (int32_t budget : {2048, 7, 1}) {  // whole prompts, chunked prefill, one token per step
    const auto got = greedy(model, prompts, budget, static_cast<int>(want[0].size()));
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(got[i], want[i].get<std::vector<int32_t>>()) << GetParam() << " prompt " << i << " budget " << budget;
  }
}

TEST(ArchFixtureUnsupported, ErrorNamesTheArchitecture) {
  PAGODA_SKIP_WITHOUT_SHARED("fixtures/arch/mamba2/model.gguf");
  auto runner = make_logits_runner(shared_path("fixtures/arch/mamba2/model.gguf"), 16, 1);
  ASSERT_FALSE(runner.is_ok());
  EXPECT_NE(runner.status().message().find("unsupported architecture 'mamba2'"), std::string::npos)
      << runner.status().message();
  EXPECT_NE(runner.status().message().find("qwen3moe"), std::string::npos) << runner.status().message();
}

INSTANTIATE_TEST_SUITE_P(Arch, ArchFixture, ::testing::Values("llama3", "qwen3", "gemma3", "qwen3moe", "gpt-oss"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');  // gtest names: [A-Za-z0-9_]
                           return name;
                         });

}  // namespace
}  // namespace pagoda
