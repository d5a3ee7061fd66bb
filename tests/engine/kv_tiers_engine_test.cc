// Tiered KV end to end: prompts whose prefix blocks were evicted to the
// host or disk tier come back from there (counted) with greedy outputs
// equal to a run that computed everything; the disk tier is hit again after
// a restart (a new Engine on the same folder); damaged files are rejected
// and recomputed; blocks never leak.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "../run_command.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using testing_util::greedy;
using testing_util::tiny_model_path;

using testing_util::TempDir;

constexpr int32_t kBs = 4;

std::unique_ptr<Engine> make(int64_t kv_blocks, const std::string& disk_dir, int64_t host_blocks = 0,
                             DType kv_dtype = DType::kF16, bool prefix_cache = true) {
  const std::string path = tiny_model_path();
  EngineConfig cfg;
  cfg.kv_cache_dtype = kv_dtype;
  cfg.num_threads = 1;
  cfg.block_size = kBs;
  cfg.enable_prefix_caching = prefix_cache;
  cfg.sched.max_num_seqs = 4;
  cfg.sched.max_num_batched_tokens = 32;
  auto probe = Engine::create(path, cfg);
  EXPECT_TRUE(probe.is_ok()) << probe.status().message();
  const double per_block = (*probe)->kv_bytes_per_token() * kBs;
  cfg.kv_cache_bytes = static_cast<int64_t>(per_block * static_cast<double>(kv_blocks));
  cfg.kv_host_tier_bytes = static_cast<int64_t>(per_block * static_cast<double>(host_blocks) * 1.1);
  cfg.kv_disk_dir = disk_dir;
  cfg.kv_disk_bytes = int64_t{64} << 20;
  auto e = Engine::create(path, cfg);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return std::move(e).value();
}

// Runs the requests (arriving at the given steps) to the end; outputs by job index.
std::map<int, std::vector<int32_t>> run(Engine& e, const std::vector<std::pair<int, RequestSpec>>& jobs) {
  auto out = testing_util::run_jobs(e, jobs);
  EXPECT_FALSE(e.has_unfinished());
  EXPECT_EQ(e.kv_manager().num_seqs(), 0);
  return out;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int32_t vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(3 + rng() % (vocab - 3)));
  return t;
}

// Three long "documents", each asked about several times between other
// prompts that push it out of a small pool.
std::vector<std::pair<int, RequestSpec>> workload(uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < 3; ++d) docs.push_back(random_tokens(rng, 45 + d * 7, vocab));
  std::vector<std::pair<int, RequestSpec>> jobs;
  int step = 0;
  for (int i = 0; i < 18; ++i) {
    std::vector<int32_t> p = i % 3 == 2 ? random_tokens(rng, 40, vocab) : docs[rng() % docs.size()];
    const std::vector<int32_t> q = random_tokens(rng, 1 + static_cast<int>(rng() % 6), vocab);
    p.insert(p.end(), q.begin(), q.end());
    jobs.push_back({step, greedy(p, 4 + static_cast<int32_t>(rng() % 5))});
    step += static_cast<int>(rng() % 12);
  }
  return jobs;
}

TEST(KVTiersEngine, EvictedPrefixesComeBackFromTheTiersWithEqualOutputs) {
  const int32_t vocab = make(64, "")->model_config().vocab_size;
  const auto jobs = workload(11, vocab);
  const auto want = run(*make(1024, "", 0, DType::kF16, /*prefix_cache=*/false), jobs);
  for (const int64_t host_blocks : {0, 12}) {
    SCOPED_TRACE("host tier blocks " + std::to_string(host_blocks));
    TempDir dir;
    auto e = make(40, dir.path.string(), host_blocks);
    EXPECT_EQ(run(*e, jobs), want);
    const KVTierStats st = e->kv_tier_stats();
    EXPECT_GT(st.spills, 10);
    EXPECT_GT(st.host_hits + st.disk_hits, 10);
    if (host_blocks > 0) {
      EXPECT_GT(st.host_hits, 0);
    } else {
      EXPECT_EQ(st.host_hits, 0);
    }
    EXPECT_EQ(st.disk_corrupt, 0);
    EXPECT_EQ(e->kv_manager().num_available_blocks(), e->kv_manager().num_blocks());
  }
}

TEST(KVTiersEngine, DiskTierIsHitAfterARestartAndDamagedFilesAreRecomputed) {
  TempDir dir;
  const int32_t vocab = make(64, "")->model_config().vocab_size;
  std::mt19937 rng(5);
  const std::vector<int32_t> doc = random_tokens(rng, 61, vocab);  // 15 whole blocks, then one token
  const std::vector<std::pair<int, RequestSpec>> ask = {{0, greedy(doc, 6)}};
  const auto want = run(*make(64, "", 0, DType::kF16, false), ask);
  {
    auto e = make(64, dir.path.string());
    EXPECT_EQ(run(*e, ask), want);
    EXPECT_EQ(e->kv_tier_stats().disk_hits, 0);
  }  // shutdown: the cached blocks go to disk
  {
    auto e = make(64, dir.path.string());
    EXPECT_EQ(e->kv_tier_stats().disk_blocks, 16);  // the prompt's 15 and the one completed by generating
    EXPECT_EQ(run(*e, ask), want);
    EXPECT_EQ(e->kv_tier_stats().disk_hits, 15);
    EXPECT_EQ(e->stats().num_cached_prompt_tokens, 60);
  }
  // Another KV layout (f32 instead of f16) is another namespace: no hits.
  {
    auto e = make(64, dir.path.string(), 0, DType::kF32);
    EXPECT_EQ(e->kv_tier_stats().disk_blocks, 0);
    EXPECT_EQ(run(*e, ask), want);
    EXPECT_EQ(e->kv_tier_stats().disk_hits, 0);
  }
  // Flip a byte in every block file: each is rejected, nothing is
  // reused, the output is recomputed and equal.
  int damaged = 0;
  for (const auto& ns : fs::directory_iterator(dir.path))
    for (const auto& f : fs::directory_iterator(ns.path())) {
      const auto at = static_cast<std::streamoff>(fs::file_size(f.path()) / 2);  // inside the K/V bytes
      std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
      io.seekg(at);
      char c = 0;
      io.read(&c, 1);
      io.seekp(at);
      c = static_cast<char>(c ^ 0x5a);
      io.write(&c, 1);
      ++damaged;
    }
  ASSERT_GE(damaged, 16);
  {
    auto e = make(64, dir.path.string());
    EXPECT_EQ(run(*e, ask), want);
    const KVTierStats st = e->kv_tier_stats();
    EXPECT_EQ(st.disk_hits, 0);
    EXPECT_EQ(st.disk_corrupt, 1);  // the first block fails: the restore stops there
    EXPECT_EQ(e->stats().num_cached_prompt_tokens, 0);
  }
}

TEST(KVTiersEngine, ConfigurationErrorsAreClear) {
  const std::string path = tiny_model_path();
  EngineConfig cfg;
  cfg.num_threads = 1;
  cfg.kv_disk_dir = (fs::temp_directory_path() / "pagoda-unused-tier").string();
  cfg.enable_prefix_caching = false;
  auto e = Engine::create(path, cfg);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("prefix cache"), std::string::npos) << e.status().message();
  cfg.enable_prefix_caching = true;
  cfg.kv_disk_bytes = 0;
  e = Engine::create(path, cfg);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("--kv-disk-size"), std::string::npos) << e.status().message();
  cfg.kv_disk_dir = "/proc/pagoda-no-such-place/tier";
  cfg.kv_disk_bytes = 1 << 20;
  e = Engine::create(path, cfg);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("cannot create"), std::string::npos) << e.status().message();
}

}  // namespace
}  // namespace pagoda
