// make-model writes every supported architecture: a tiny random model of
// each loads, its logits are finite and vary, and greedy output does not
// depend on how the prompt is chunked (the real-shape presets are checked by
// their plans: sizes as published).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/prompt_logits.h"
#include "engine_test_util.h"
#include "model/model_config.h"
#include "testing/make_model.h"

namespace pagoda {
namespace {

// The tiny preset as `arch`, with what the architecture needs: experts,
// a sliding window shorter than the prompts, YaRN, a head wider than
// hidden_size / num_heads.
ModelConfig tiny_of(const std::string& arch) {
  ModelConfig c = model_preset("tiny").value();
  EXPECT_TRUE(set_model_arch(&c, arch).is_ok());
  if (arch != "llama" && arch != "qwen2") c.head_dim = 32;  // q 128 wide on a 64 residual
  if (arch_is_moe(arch)) {
    c.num_experts = 4;
    c.num_experts_used = 2;
    c.expert_ffn_size = 32;
  }
  if (c.swa_period > 0) c.sliding_window = 8;
  if (arch == "rwkv7") c.rwkv_head_size = 16;  // 4 heads of 16
  if (arch == "qwen35" || arch == "mamba2") {  // 2 groups (key heads), 4 value heads of 16
    if (arch == "qwen35") c.num_layers = 4;    // layer 3 attends
    c.ssm_conv_kernel = 4;
    c.ssm_state_size = 16;
    c.ssm_group_count = 2;
    c.ssm_time_step_rank = 4;
    c.ssm_inner_size = 64;
  }
  if (arch == "gpt-oss") {
    c.rope_ext_factor = 1;
    c.rope_freq_scale = 0.25f;
    c.rope_orig_ctx = 64;
  }
  return c;
}

std::string make_tiny(const std::string& arch, DType dtype) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("pagoda_arch_" + arch + "_" + std::string(dtype_name(dtype)) + "_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  MakeModelOptions o;
  o.config = tiny_of(arch);
  o.dtype = dtype;
  o.seed = 11;
  o.num_threads = 1;
  o.tied_embeddings = arch == "gemma3";
  auto plan = make_model(o, path);
  EXPECT_TRUE(plan.is_ok()) << arch << ": " << plan.status().message();
  return path;
}

std::vector<int32_t> prompt(int32_t n, int32_t salt) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back(1 + (i * 37 + salt * 101) % 500);
  return p;
}

class MakeModelArch : public ::testing::TestWithParam<std::string> {};

TEST_P(MakeModelArch, LoadsRunsAndIgnoresChunking) {
  const std::string arch = GetParam();
  for (DType dtype : {DType::kF32, DType::kQ8_0}) {
    SCOPED_TRACE(arch + " " + std::string(dtype_name(dtype)));
    const std::string path = make_tiny(arch, dtype);
    {
      auto r = make_logits_runner(path, 64, 1);
      ASSERT_TRUE(r.is_ok()) << r.status().message();
      EXPECT_EQ(r->runner->config().arch, arch);
      const std::vector<int32_t> ids = prompt(30, 0);
      auto logits = prompt_logits(*r->runner, ids);
      ASSERT_TRUE(logits.is_ok()) << logits.status().message();
      const int32_t vocab = r->runner->config().vocab_size;
      double sum = 0, sq = 0;
      for (float x : *logits) {
        ASSERT_TRUE(std::isfinite(x));
        sum += x, sq += double(x) * x;
      }
      const double n = static_cast<double>(logits->size()), mean = sum / n;
      EXPECT_GT(std::sqrt(sq / n - mean * mean), 1e-3) << "constant logits";
      // Rows differ: the model looks at its input.
      EXPECT_NE((*logits)[0], (*logits)[static_cast<size_t>(vocab) * 29]);
    }
    // Greedy continuations of three prompts (longer than the window) in one
    // batch: the same whole, in chunks of 5, and one token per step.
    std::vector<std::vector<int32_t>> first;
    for (int32_t budget : {2048, 5, 1}) {
      SchedulerConfig sched;
      sched.max_num_batched_tokens = budget;
      auto e = testing_util::make_engine(path, 4 << 20, 16, sched);
      std::vector<RequestId> ids;
      for (int32_t k = 0; k < 3; ++k) {
        RequestSpec spec;
        spec.prompt = prompt(12 + 9 * k, k);
        spec.max_tokens = 12;
        spec.sampling.temperature = 0;
        spec.ignore_eos = true;
        ids.push_back(e->add_request(spec).value());
      }
      std::vector<std::vector<int32_t>> out(3);
      while (e->has_unfinished())
        for (const auto& o : e->step())
          for (size_t i = 0; i < ids.size(); ++i)
            if (o.id == ids[i]) out[i].insert(out[i].end(), o.new_tokens.begin(), o.new_tokens.end());
      for (const auto& o : out) EXPECT_EQ(o.size(), 12u);
      if (first.empty()) {
        first = out;
      } else {
        EXPECT_EQ(out, first) << "budget " << budget;
      }
    }
    std::filesystem::remove(path);
  }
}

// make-model writes every supported architecture.
std::vector<std::string> make_model_archs() {
  std::vector<std::string> out;
  for (const std::string& a : supported_archs()) out.push_back(a);
  return out;
}

TEST(MakeModelArchErrors, RecurrentShapesNeedTheirSizes) {
  for (const char* arch : {"rwkv7", "mamba2", "qwen35"}) {
    MakeModelOptions o;
    o.config = model_preset("tiny").value();
    ASSERT_TRUE(set_model_arch(&o.config, arch).is_ok());
    auto plan = make_model(o, (std::filesystem::temp_directory_path() / "pagoda_never_written.gguf").string());
    ASSERT_FALSE(plan.is_ok()) << arch;
    EXPECT_NE(plan.status().message().find("preset"), std::string::npos) << plan.status().message();
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, MakeModelArch, ::testing::ValuesIn(make_model_archs()), [](const auto& info) {
  std::string name = info.param;
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
});

// Lookahead's tree drafts sit at cache positions past their RoPE positions;
// a window counted in cache positions would see the wrong keys, so a model
// with sliding-window layers refuses lookahead with a clear error.
TEST(MakeModelArchSpec, LookaheadRefusesSlidingWindowModels) {
  const std::string path = make_tiny("gemma3", DType::kF32);
  EngineConfig cfg;
  cfg.num_threads = 1;
  cfg.spec_method = SpecMethod::kLookahead;
  auto e = Engine::create(path, cfg);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("sliding-window"), std::string::npos) << e.status().message();
  cfg.spec_method = SpecMethod::kNgram;  // chains are fine
  EXPECT_TRUE(Engine::create(path, cfg).is_ok());
  std::filesystem::remove(path);
}

TEST(MakeModelPresets, RealShapesPlanTheirPublishedSizes) {
  struct Want {
    const char* preset;
    const char* arch;
    double min_params, max_params;  // millions, untied unless noted
    bool tied;
  };
  const Want wants[] = {
      {"qwen3-0.6b", "qwen3", 590, 610, true},            // Qwen3-0.6B: 596M with tied embeddings
      {"gemma3-1b", "gemma3", 990, 1010, true},           // Gemma-3-1B: 1.0B
      {"qwen3-moe-mini", "qwen3moe", 3000, 3400, false},  // 8 layers x 64 experts + 2 x 311M embeddings
      {"gpt-oss-mini", "gpt-oss", 2800, 3200, false},     // 4 layers x 16 experts + 2 x 579M embeddings
      {"qwen35-hybrid", "qwen35", 900, 950, false},       // 18 DeltaNet + 6 gated attention layers, 2 x 156M
      {"mamba2-370m", "mamba2", 360, 380, true},          // Mamba2-370m: 368M with tied embeddings
      {"rwkv7-0.1b", "rwkv7", 185, 200, false},           // RWKV-7 World 0.1B: 191M with its 65k vocabulary
  };
  for (const Want& w : wants) {
    auto c = model_preset(w.preset);
    ASSERT_TRUE(c.is_ok()) << w.preset;
    EXPECT_EQ(c->arch, w.arch);
    auto plan = plan_model(*c, DType::kQ4_0, w.tied);
    ASSERT_TRUE(plan.is_ok()) << w.preset << ": " << plan.status().message();
    const double m = plan->num_params / 1e6;
    EXPECT_GE(m, w.min_params) << w.preset;
    EXPECT_LE(m, w.max_params) << w.preset;
  }
  ModelConfig c = model_preset("qwen3-moe-mini").value();
  c.num_experts_used = 65;  // more than the 64 experts
  EXPECT_FALSE(plan_model(c, DType::kQ4_0, false).is_ok());
}

}  // namespace
}  // namespace pagoda
