// New architectures against llama.cpp (../shared/fixtures/arch): the logits
// of every prompt position within 1e-3 x max |logit| of llama.cpp's, and the
// greedy continuation token for token, with the prompt as one batch, in
// chunks, and one token at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../shared_files.h"
#include "engine/prompt_logits.h"
#include "engine_test_util.h"
#include "kv/kv_storage.h"

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

// How greedy() runs the fixture's prompts.
struct GreedyRun {
  const char* name;
  int32_t budget;     // max_num_batched_tokens: chunked prefill below the prompt length
  int32_t kv_blocks;  // KV cache size in 16-token blocks: small ones force preemption
  PreemptMode mode = PreemptMode::kRecompute;
  bool twice = false;  // every prompt twice (the copies hit the prefix cache)
};

// Greedy tokens of the fixture's prompts (each run to n tokens), all in one
// engine; `preemptions` gets the scheduler's count.
std::vector<std::vector<int32_t>> greedy(const std::string& path, const json& prompts, const GreedyRun& run, int n,
                                         int64_t* preemptions) {
  SchedulerConfig sched;
  sched.max_num_batched_tokens = run.budget;
  sched.preempt_mode = run.mode;
  auto probe = make_logits_runner(path, 16, 1);
  EXPECT_TRUE(probe.is_ok());
  const ModelConfig& mc = probe->runner->config();
  RunnerConfig rc;
  rc.block_size = 16;
  const int64_t block_bytes = ModelRunner::bytes_per_block(mc, rc);
  auto e = testing_util::make_engine(path, run.kv_blocks * block_bytes, 16, sched,
                                     run.mode == PreemptMode::kSwap ? 64 * block_bytes : 0);
  const size_t copies = run.twice ? 2 : 1;
  std::vector<std::vector<int32_t>> out(prompts.size() * copies);
  std::vector<RequestId> ids;
  for (size_t c = 0; c < copies; ++c)
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
  while (e->has_unfinished()) {
    for (const auto& o : e->step())
      for (size_t i = 0; i < ids.size(); ++i)
        if (o.id == ids[i]) out[i].insert(out[i].end(), o.new_tokens.begin(), o.new_tokens.end());
    EXPECT_TRUE(e->kv_manager().check_invariants().is_ok());
  }
  EXPECT_EQ(e->kv_manager().num_seqs(), 0);
  *preemptions = e->scheduler().num_preemptions();
  return out;
}

TEST_P(ArchFixture, GreedyContinuationMatchesLlamaCpp) {
  // Greedy output is independent of batching (all prompts in one batch,
  // copies sharing cached prefixes), chunking (7 or 1 token per step) and
  // preemption (recompute and swap under a KV cache smaller than the load).
  PAGODA_SKIP_WITHOUT_SHARED(dir() + "/model.gguf");
  const json prompts = read_json(shared_path(dir() + "/prompts.json"));
  const json want = read_json(shared_path(dir() + "/greedy.json"));
  const std::string model = shared_path(dir() + "/model.gguf");
  const GreedyRun runs[] = {
      {"whole", 2048, 64},
      {"chunks_of_7", 7, 64},
      {"token_at_a_time", 1, 64},
      {"prefix_hits", 64, 64, PreemptMode::kRecompute, true},
      {"preempt_recompute", 64, 9, PreemptMode::kRecompute, true},
      {"preempt_swap", 64, 9, PreemptMode::kSwap, true},
  };
  for (const GreedyRun& run : runs) {
    int64_t preemptions = 0;
    const auto got = greedy(model, prompts, run, static_cast<int>(want[0].size()), &preemptions);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], want[i % prompts.size()].get<std::vector<int32_t>>())
          << GetParam() << " prompt " << i << " run " << run.name;
    if (run.kv_blocks < 16) {
      EXPECT_GT(preemptions, 0) << run.name << ": the KV cache should force preemption";
    }
  }
}

// Recurrent architectures: n > 1 and beam search fork a sequence's state
// (a child that started from a zeroed or shared state would diverge from
// llama.cpp's greedy tokens), and what needs rollback or eviction is refused.
class RecurrentArch : public ArchFixture {};

TEST_P(RecurrentArch, ForkedChoicesCopyTheState) {
  PAGODA_SKIP_WITHOUT_SHARED(dir() + "/model.gguf");
  const json prompts = read_json(shared_path(dir() + "/prompts.json"));
  const json want = read_json(shared_path(dir() + "/greedy.json"));
  SchedulerConfig sched;
  sched.max_num_batched_tokens = 16;  // chunked prompts
  auto e = testing_util::make_engine(shared_path(dir() + "/model.gguf"), 8 << 20, 16, sched);
  ASSERT_NE(e, nullptr);
  const int32_t n_tokens = static_cast<int32_t>(want[0].size());
  std::vector<RequestId> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestSpec spec;
    spec.prompt = prompts[i].get<std::vector<int32_t>>();
    spec.max_tokens = n_tokens;
    spec.n = 3;
    spec.sampling.temperature = 0;
    spec.ignore_eos = true;
    auto id = e->add_request(spec);
    ASSERT_TRUE(id.is_ok()) << id.status().message();
    ids.push_back(*id);
  }
  RequestSpec beam;  // beam search forks and drops beams every step
  beam.prompt = prompts[2].get<std::vector<int32_t>>();
  beam.max_tokens = 12;
  beam.use_beam_search = true;
  beam.beam_width = 3;
  beam.ignore_eos = true;
  auto beam_id = e->add_request(beam);
  ASSERT_TRUE(beam_id.is_ok()) << beam_id.status().message();
  std::map<std::pair<int64_t, int32_t>, std::vector<int32_t>> out;  // (request, choice) -> tokens
  int32_t beam_tokens = 0;
  while (e->has_unfinished()) {
    for (const auto& o : e->step()) {
      if (o.id == *beam_id) {
        beam_tokens += static_cast<int32_t>(o.new_tokens.size());
        EXPECT_TRUE(o.error.empty()) << o.error;
        continue;
      }
      auto& v = out[{o.id.value, o.index}];
      v.insert(v.end(), o.new_tokens.begin(), o.new_tokens.end());
    }
    const Status st = e->kv_manager().check_invariants();
    ASSERT_TRUE(st.is_ok()) << st.message();
  }
  for (size_t i = 0; i < ids.size(); ++i)
    for (int32_t c = 0; c < 3; ++c)
      EXPECT_EQ(out[std::make_pair(ids[i].value, c)], want[i].get<std::vector<int32_t>>())
          << "prompt " << i << " choice " << c;
  EXPECT_EQ(beam_tokens, 12);
  EXPECT_EQ(e->kv_manager().num_seqs(), 0);
  EXPECT_EQ(e->kv_manager().num_free_state_slots() + e->kv_manager().num_state_snapshots(),
            e->kv_manager().num_state_slots());
  EXPECT_GE(e->kv_manager().num_state_slots(), 9);  // 3 requests x 3 choices at once
}

// A chat's next turn: the prompt continues a finished request's prompt and
// answer. The hit resumes from that request's state snapshot (the longest
// one that begins the prompt) and must give the tokens a cold engine gives.
TEST_P(RecurrentArch, NextTurnResumesFromTheStateSnapshot) {
  PAGODA_SKIP_WITHOUT_SHARED(dir() + "/model.gguf");
  const json prompts = read_json(shared_path(dir() + "/prompts.json"));
  const std::string model = shared_path(dir() + "/model.gguf");
  // Greedy tokens of `prompt` on `e`; num_cached gets the prompt tokens served from the cache.
  auto run = [](Engine& e, const std::vector<int32_t>& prompt, int32_t n, int32_t* num_cached) {
    RequestSpec spec;
    spec.prompt = prompt;
    spec.max_tokens = n;
    spec.sampling.temperature = 0;
    spec.ignore_eos = true;
    auto id = e.add_request(spec);
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    std::vector<int32_t> out;
    while (e.has_unfinished())
      for (const auto& o : e.step()) {
        out.insert(out.end(), o.new_tokens.begin(), o.new_tokens.end());
        if (o.finished) *num_cached = o.num_cached_tokens;
      }
    EXPECT_TRUE(e.kv_manager().check_invariants().is_ok());
    return out;
  };
  SchedulerConfig sched;
  sched.max_num_batched_tokens = 16;  // chunked prompts
  auto warm = testing_util::make_engine(model, 8 << 20, 16, sched);
  ASSERT_TRUE(warm->kv_manager().prefix_cache_enabled());
  std::vector<int32_t> history = prompts[1].get<std::vector<int32_t>>();  // 40 tokens
  int32_t cached = -1;
  for (int turn = 0; turn < 3; ++turn) {
    SCOPED_TRACE("turn " + std::to_string(turn));
    const std::vector<int32_t> answer = run(*warm, history, 9, &cached);
    if (turn == 0) {
      EXPECT_EQ(cached, 0);
    } else {
      EXPECT_EQ(cached, static_cast<int32_t>(history.size()) - 6);  // all but the new user turn and last token
    }
    auto cold = testing_util::make_engine(model, 8 << 20, 16, sched);
    int32_t cold_cached = -1;
    EXPECT_EQ(answer, run(*cold, history, 9, &cold_cached));
    EXPECT_EQ(cold_cached, 0);
    // Next turn: the answer (its last token was sampled, never computed),
    // then 5 tokens of a new user message.
    history.insert(history.end(), answer.begin(), answer.end());
    for (int32_t i = 0; i < 5; ++i) history.push_back(100 + 37 * turn + i);
  }
  EXPECT_GE(warm->kv_manager().num_state_snapshots(), 1);
  // A prompt that only shares a beginning with the snapshots (no snapshot
  // begins it) is not a hit: the state after the shared part is not kept.
  std::vector<int32_t> other = prompts[1].get<std::vector<int32_t>>();
  other.resize(30);
  other.push_back(7);
  other.push_back(8);
  run(*warm, other, 2, &cached);
  EXPECT_EQ(cached, 0);
}

TEST_P(RecurrentArch, RollbackAndEvictionAreRefused) {
  PAGODA_SKIP_WITHOUT_SHARED(dir() + "/model.gguf");
  const std::string model = shared_path(dir() + "/model.gguf");
  EngineConfig cfg;
  cfg.num_threads = 1;
  cfg.kv_cache_bytes = 8 << 20;
  cfg.spec_method = SpecMethod::kNgram;
  auto spec = Engine::create(model, cfg);
  ASSERT_FALSE(spec.is_ok());
  EXPECT_NE(spec.status().message().find("recurrent layers"), std::string::npos) << spec.status().message();
  cfg.spec_method = SpecMethod::kNone;
  cfg.sched.kv_policy.kind = KvPolicyKind::kStreaming;
  cfg.sched.kv_policy.window = 64;
  auto streaming = Engine::create(model, cfg);
  ASSERT_FALSE(streaming.is_ok());
  EXPECT_NE(streaming.status().message().find("recurrent layers"), std::string::npos) << streaming.status().message();
  cfg.sched.kv_policy.kind = KvPolicyKind::kFull;
  auto e = Engine::create(model, cfg);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  RequestSpec req;
  req.prompt = {4090, 1, 2, 3};
  req.max_tokens = 2;
  req.kv_policy = KvPolicyRequest{};
  req.kv_policy->kind = KvPolicyKind::kSnapKv;
  auto id = (*e)->add_request(req);
  ASSERT_FALSE(id.is_ok());
  EXPECT_NE(id.status().message().find("recurrent layers"), std::string::npos) << id.status().message();
  EXPECT_EQ((*e)->kv_manager().num_seqs(), 0);
  // ... and a recurrent model as a draft.
  EngineConfig draft_cfg;
  draft_cfg.num_threads = 1;
  draft_cfg.kv_cache_bytes = 8 << 20;
  draft_cfg.spec_method = SpecMethod::kDraft;
  draft_cfg.draft_model = model;
  auto draft = Engine::create(shared_path("fixtures/arch/qwen3/model.gguf"), draft_cfg);
  ASSERT_FALSE(draft.is_ok());
  EXPECT_NE(draft.status().message().find("recurrent layers"), std::string::npos) << draft.status().message();
}

INSTANTIATE_TEST_SUITE_P(Arch, RecurrentArch, ::testing::Values("qwen35", "mamba2", "rwkv7"));

TEST(ArchFixtureUnsupported, ErrorNamesTheArchitecture) {
  PAGODA_SKIP_WITHOUT_SHARED("fixtures/arch/rwkv7/model.gguf");
  // A fixture model with its architecture renamed.
  std::ifstream in(shared_path("fixtures/arch/rwkv7/model.gguf"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find("rwkv7");  // general.architecture's value comes first
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 5, "rwkv9");
  const std::string path = ::testing::TempDir() + "/rwkv9.gguf";
  std::ofstream(path, std::ios::binary) << bytes;
  auto runner = make_logits_runner(path, 16, 1);
  std::remove(path.c_str());
  ASSERT_FALSE(runner.is_ok());
  EXPECT_NE(runner.status().message().find("unsupported architecture 'rwkv9'"), std::string::npos)
      << runner.status().message();
  EXPECT_NE(runner.status().message().find("qwen3moe"), std::string::npos) << runner.status().message();
}

INSTANTIATE_TEST_SUITE_P(Arch, ArchFixture,
                         ::testing::Values("llama3", "qwen3", "gemma3", "qwen3moe", "gpt-oss", "qwen35", "mamba2",
                                           "rwkv7"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');  // gtest names: [A-Za-z0-9_]
                           return name;
                         });

}  // namespace
}  // namespace pagoda
