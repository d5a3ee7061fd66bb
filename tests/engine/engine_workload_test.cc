// Random workloads through the engine: tiny KV budgets force preemption;
// greedy outputs must equal each request run alone, no block may leak, and
// every request must finish or be aborted with a reason.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "../shared_files.h"
#include "engine_test_util.h"

namespace pagoda {
namespace {

using testing_util::make_engine;
using testing_util::tiny_model_path;

struct Job {
  RequestSpec spec;
  int arrival_step;
  int abort_step;  // -1: never
};

std::vector<Job> random_jobs(uint32_t seed, int n, int32_t vocab_size) {
  std::mt19937 rng(seed);
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    Job j;
    const int len = 3 + static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) j.spec.prompt.push_back(static_cast<int32_t>(rng() % vocab_size));
    j.spec.max_tokens = 1 + static_cast<int32_t>(rng() % 24);
    j.spec.sampling.temperature = 0;
    j.spec.ignore_eos = true;
    j.spec.priority = static_cast<int32_t>(rng() % 3);
    j.arrival_step = static_cast<int>(rng() % 30);
    j.abort_step = rng() % 8 == 0 ? j.arrival_step + static_cast<int>(rng() % 10) : -1;
    jobs.push_back(j);
  }
  return jobs;
}

std::vector<int32_t> run_alone(const std::string& path, const RequestSpec& spec, DType kv_dtype) {
  auto e = make_engine(path, 64 << 20, 4, {}, 0, kv_dtype);
  EXPECT_TRUE(e->add_request(spec).is_ok());
  std::vector<int32_t> out;
  while (e->has_unfinished())
    for (const auto& o : e->step()) out.insert(out.end(), o.new_tokens.begin(), o.new_tokens.end());
  return out;
}

struct WorkloadCase {
  SchedPolicy policy;
  PreemptMode mode;
  int32_t kv_blocks;
  int32_t budget;
  DType kv_dtype = DType::kF32;  // quantized K/V must recompute, swap and copy exactly too
};

// The workload on the model at `path`: greedy outputs equal to each request
// run alone, nothing leaked (blocks, host blocks, state slots).
void check_workload(const std::string& path, const WorkloadCase& c) {
  SchedulerConfig sc;
  sc.policy = c.policy;
  sc.preempt_mode = c.mode;
  sc.max_num_batched_tokens = c.budget;
  sc.max_num_seqs = 6;
  // Size the pool in blocks: a tiny model's block is a few KiB.
  auto probe = make_engine(path, 64 << 20);
  const auto& mc = probe->model_config();
  RunnerConfig rc;
  rc.block_size = 4;
  rc.kv_cache_dtype = c.kv_dtype;
  const int64_t block_bytes = ModelRunner::bytes_per_block(mc, rc);
  auto e = make_engine(path, block_bytes * c.kv_blocks, 4, sc, block_bytes * 64, c.kv_dtype);

  for (uint32_t seed : {1u, 2u, 3u}) {
    const auto jobs = random_jobs(seed, 14, mc.vocab_size);
    std::map<int64_t, int> job_of;
    std::map<int64_t, std::vector<int32_t>> got;
    std::map<int64_t, FinishReason> reason;
    for (int step = 0; step < 5000 && (step < 40 || e->has_unfinished()); ++step) {
      for (size_t j = 0; j < jobs.size(); ++j) {
        if (jobs[j].arrival_step == step) {
          auto id = e->add_request(jobs[j].spec);
          ASSERT_TRUE(id.is_ok()) << id.status().message();
          job_of[id->value] = static_cast<int>(j);
        }
      }
      for (auto& [id, j] : job_of)
        if (jobs[j].abort_step == step && !reason.count(id) && e->abort(RequestId{id}))
          reason[id] = FinishReason::kAbort;
      for (const auto& o : e->step()) {
        auto& v = got[o.id.value];
        v.insert(v.end(), o.new_tokens.begin(), o.new_tokens.end());
        if (o.finished) reason[o.id.value] = o.finish_reason;
      }
      const Status inv = e->kv_manager().check_invariants();
      ASSERT_TRUE(inv.is_ok()) << "step " << step << ": " << inv.message();
    }
    ASSERT_FALSE(e->has_unfinished());
    EXPECT_EQ(e->kv_manager().num_available_blocks(), e->kv_manager().num_blocks()) << "leaked blocks";
    EXPECT_EQ(e->kv_manager().num_free_host_blocks(), e->kv_manager().num_host_blocks());
    EXPECT_EQ(e->kv_manager().num_free_state_slots() + e->kv_manager().num_state_snapshots(),
              e->kv_manager().num_state_slots())
        << "leaked state slots";
    for (auto& [id, j] : job_of) {
      ASSERT_TRUE(reason.count(id)) << "request " << id << " never finished";
      if (reason[id] == FinishReason::kAbort) continue;
      EXPECT_EQ(reason[id], FinishReason::kLength);
      EXPECT_EQ(got[id], run_alone(path, jobs[j].spec, c.kv_dtype)) << "request " << id << " seed " << seed;
    }
  }
  EXPECT_GT(e->scheduler().num_preemptions(), 0) << "the workload should force preemption";
}

class EngineWorkload : public ::testing::TestWithParam<WorkloadCase> {};

TEST_P(EngineWorkload, PreemptionKeepsGreedyOutputsAndLeaksNothing) { check_workload(tiny_model_path(), GetParam()); }

// The same on the recurrent fixtures (qwen35: DeltaNet + attention; rwkv7:
// recurrent only): state slots through preemption by recompute and swap,
// aborts and arrivals mid-run.
TEST(EngineWorkload, RecurrentModelsToo) {
  for (const char* arch : {"qwen35", "rwkv7"}) {
    const std::string rel = std::string("fixtures/arch/") + arch + "/model.gguf";
    PAGODA_SKIP_WITHOUT_SHARED(rel);
    SCOPED_TRACE(arch);
    check_workload(testing_util::shared_path(rel), {SchedPolicy::kFcfs, PreemptMode::kRecompute, 24, 64});
    check_workload(testing_util::shared_path(rel), {SchedPolicy::kSjf, PreemptMode::kSwap, 20, 16});
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, EngineWorkload,
                         ::testing::Values(WorkloadCase{SchedPolicy::kFcfs, PreemptMode::kRecompute, 24, 64},
                                           WorkloadCase{SchedPolicy::kFcfs, PreemptMode::kSwap, 24, 64},
                                           WorkloadCase{SchedPolicy::kPriority, PreemptMode::kRecompute, 20, 32},
                                           WorkloadCase{SchedPolicy::kSjf, PreemptMode::kSwap, 20, 16},
                                           WorkloadCase{SchedPolicy::kFcfs, PreemptMode::kSwap, 24, 64, DType::kQ8_0},
                                           WorkloadCase{SchedPolicy::kLpm, PreemptMode::kRecompute, 20, 32,
                                                        DType::kQ4_0}));

TEST(EngineChunkedPrefill, LongPromptDoesNotStallDecodes) {
  const std::string path = tiny_model_path();
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 128;
  auto e = make_engine(path, 64 << 20, 16, sc);
  std::vector<RequestId> decoders;
  for (int i = 0; i < 8; ++i) {
    RequestSpec s;
    s.prompt = {1, static_cast<int32_t>(10 + i), 20, 30};
    s.max_tokens = 60;
    s.ignore_eos = true;
    s.sampling.temperature = 0;
    decoders.push_back(e->add_request(s).value());
  }
  for (int i = 0; i < 3; ++i) e->step();  // all eight are decoding now
  RequestSpec big;
  for (int i = 0; i < 2000; ++i) big.prompt.push_back(3 + i % 200);
  big.max_tokens = 4;
  big.ignore_eos = true;
  const RequestId big_id = e->add_request(big).value();
  int steps_with_prefill = 0;
  bool big_done_prefill = false;
  while (!big_done_prefill) {
    const auto outs = e->step();
    ++steps_with_prefill;
    std::set<int64_t> produced;
    for (const auto& o : outs) {
      produced.insert(o.id.value);
      if (o.id == big_id) big_done_prefill = true;
    }
    for (const auto& d : decoders) EXPECT_TRUE(produced.count(d.value)) << "decoder " << d.value << " stalled";
    ASSERT_LT(steps_with_prefill, 100);
  }
  // 2000 prompt tokens at <= 120 per step (8 go to decodes) take >= 17 steps.
  EXPECT_GE(steps_with_prefill, 2000 / 120);
  EXPECT_LE(e->stats().num_steps, 3 + steps_with_prefill);
}

}  // namespace
}  // namespace pagoda
