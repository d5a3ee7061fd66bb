// Shared helpers for engine tests: tiny random models made on the fly.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "testing/make_model.h"

namespace pagoda::testing_util {

// Removes the model files this process wrote when it exits: ctest runs each
// test in its own process, so per-pid names would otherwise pile up in /tmp.
inline void remove_at_exit(const std::string& path) {
  struct Registry {
    std::vector<std::string> paths;
    ~Registry() {
      std::error_code ec;
      for (const auto& p : paths) std::filesystem::remove(p, ec);
    }
  };
  static Registry registry;
  registry.paths.push_back(path);
}

// Writes (once per process) a tiny random llama model and returns its path.
inline std::string tiny_model_path(const std::string& preset = "tiny", int64_t n_ctx = 4096) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("pagoda_test_" + preset + "_" + std::to_string(n_ctx) + "_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  if (!std::filesystem::exists(path)) {
    auto shape = model_preset(preset);
    EXPECT_TRUE(shape.is_ok());
    MakeModelOptions opts;
    opts.config = shape.value();
    opts.config.train_context_len = n_ctx;
    opts.dtype = DType::kF32;
    opts.seed = 7;
    opts.num_threads = 1;
    auto plan = make_model(opts, path);
    EXPECT_TRUE(plan.is_ok()) << plan.status().message();
    remove_at_exit(path);
  }
  return path;
}

// A tiny random model of `num_layers` layers and `num_kv_heads` KV heads
// (0: the preset's), written once per process. One layer makes a token's
// K/V depend only on its token and position: the KV policy tests compare
// against fresh runs over the tokens a cache kept.
inline std::string small_model_path(int32_t num_layers, int32_t num_kv_heads, int64_t n_ctx, uint64_t seed) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("pagoda_test_l" + std::to_string(num_layers) + "_kv" + std::to_string(num_kv_heads) + "_" +
                             std::to_string(n_ctx) + "_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  if (!std::filesystem::exists(path)) {
    auto shape = model_preset("tiny");
    EXPECT_TRUE(shape.is_ok());
    MakeModelOptions opts;
    opts.config = shape.value();
    opts.config.num_layers = num_layers;
    if (num_kv_heads > 0) opts.config.num_kv_heads = num_kv_heads;
    opts.config.train_context_len = n_ctx;
    opts.seed = seed;
    opts.num_threads = 1;
    auto plan = make_model(opts, path);
    EXPECT_TRUE(plan.is_ok()) << plan.status().message();
    remove_at_exit(path);
  }
  return path;
}

// A greedy request that ignores end-of-sequence.
inline RequestSpec greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  RequestSpec s;
  s.prompt = std::move(prompt);
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  s.sampling.temperature = 0;
  return s;
}

inline std::unique_ptr<Engine> make_engine(const std::string& path, int64_t kv_bytes, int32_t block_size = 4,
                                           SchedulerConfig sched = {}, int64_t swap_bytes = 0,
                                           DType kv_dtype = DType::kF32) {
  EngineConfig cfg;
  cfg.kv_cache_dtype = kv_dtype;
  cfg.num_threads = 1;
  cfg.kv_cache_bytes = kv_bytes;
  cfg.swap_space_bytes = swap_bytes;
  cfg.block_size = block_size;
  cfg.sched = sched;
  auto e = Engine::create(path, cfg);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return std::move(e).value();
}

// Runs requests arriving over steps (pairs of arrival step and spec),
// checking the KV manager's invariants after every step; returns each job's
// generated tokens keyed by job index.
inline std::map<int, std::vector<int32_t>> run_jobs(Engine& e, const std::vector<std::pair<int, RequestSpec>>& jobs,
                                                    int max_steps = 20000) {
  std::map<int64_t, int> job_of;
  std::map<int, std::vector<int32_t>> out;
  for (int step = 0; step < max_steps; ++step) {
    for (size_t j = 0; j < jobs.size(); ++j)
      if (jobs[j].first == step) job_of[e.add_request(jobs[j].second).value().value] = static_cast<int>(j);
    if (step > jobs.back().first && !e.has_unfinished()) break;
    for (const auto& o : e.step()) {
      auto& v = out[job_of.at(o.id.value)];
      v.insert(v.end(), o.new_tokens.begin(), o.new_tokens.end());
    }
    const Status st = e.kv_manager().check_invariants();
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
  return out;
}

}  // namespace pagoda::testing_util
