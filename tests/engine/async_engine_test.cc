// The engine thread: concurrent submitters, streamed outputs, aborts, and a
// bounded queue.
#include "engine/async_engine.h"

#include <gtest/gtest.h>

#include <thread>

#include "engine_test_util.h"

namespace pagoda {
namespace {

using testing_util::make_engine;
using testing_util::tiny_model_path;

RequestSpec spec_of(int32_t first, int32_t max_tokens) {
  RequestSpec s;
  s.prompt = {1, first, 17, 33};
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  s.sampling.temperature = 0;
  return s;
}

TEST(AsyncEngine, ConcurrentSubmittersGetCompleteStreams) {
  AsyncEngine ae(make_engine(tiny_model_path(), 8 << 20));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        auto stream = ae.submit(spec_of(5 + t * 10 + i, 6));
        ASSERT_TRUE(stream.is_ok());
        int tokens = 0;
        bool finished = false;
        while (auto o = (*stream)->next()) {
          tokens += static_cast<int>(o->new_tokens.size());
          finished = o->finished;
          if (finished) {
            EXPECT_EQ(o->finish_reason, FinishReason::kLength);
          }
        }
        EXPECT_TRUE(finished);
        EXPECT_EQ(tokens, 6);
        ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 20);
  // Blocks all return once the engine is idle.
  for (int i = 0; i < 100 && ae.snapshot().num_available_kv_blocks != ae.snapshot().num_kv_blocks; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(ae.snapshot().num_available_kv_blocks, ae.snapshot().num_kv_blocks);
}

TEST(AsyncEngine, AbortEndsStreamAndFreesBlocks) {
  AsyncEngine ae(make_engine(tiny_model_path(), 8 << 20));
  auto stream = ae.submit(spec_of(9, 100000 / 100));
  ASSERT_TRUE(stream.is_ok());
  auto first = (*stream)->next();
  ASSERT_TRUE(first.has_value());
  ae.abort((*stream)->id());
  FinishReason last = FinishReason::kNone;
  while (auto o = (*stream)->next()) last = o->finish_reason;
  EXPECT_EQ(last, FinishReason::kAbort);
  for (int i = 0; i < 100 && ae.snapshot().num_available_kv_blocks != ae.snapshot().num_kv_blocks; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(ae.snapshot().num_available_kv_blocks, ae.snapshot().num_kv_blocks);
}

TEST(AsyncEngine, InvalidRequestIsRejectedAtSubmit) {
  AsyncEngine ae(make_engine(tiny_model_path(), 8 << 20));
  RequestSpec bad = spec_of(3, 4);
  bad.sampling.temperature = -1;
  EXPECT_FALSE(ae.submit(bad).is_ok());
  bad = spec_of(3, 0);
  EXPECT_FALSE(ae.submit(bad).is_ok());
  bad = spec_of(3, 4);
  bad.prompt.clear();
  EXPECT_FALSE(ae.submit(bad).is_ok());
}

TEST(AsyncEngine, FullQueueIsRejected) {
  SchedulerConfig sc;
  sc.max_num_seqs = 1;
  AsyncEngine ae(make_engine(tiny_model_path(), 8 << 20, 4, sc), /*max_queue=*/2);
  std::vector<std::shared_ptr<RequestStream>> streams;
  int rejected = 0;
  for (int i = 0; i < 20; ++i) {
    auto s = ae.submit(spec_of(4 + i, 200));
    if (s.is_ok()) {
      streams.push_back(*s);
    } else {
      EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  ae.shutdown();  // ends every open stream
  for (auto& s : streams) {
    bool finished = false;
    while (auto o = s->next()) finished = o->finished;
    EXPECT_TRUE(finished);
  }
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

std::unique_ptr<Engine> slo_engine(bool reject, StepTimeEstimate t) {
  EngineConfig cfg;
  cfg.num_threads = 1;
  cfg.kv_cache_bytes = 8 << 20;
  cfg.block_size = 4;
  cfg.sched.policy = SchedPolicy::kSlo;
  cfg.sched.step_time = t;  // given: no start-up profile
  cfg.slo_reject = reject;
  auto e = Engine::create(testing_util::tiny_model_path(), cfg);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return std::move(e).value();
}

void drain(std::shared_ptr<RequestStream> s) {
  while (auto o = s->next()) {
    if (o->request_finished) break;
  }
}

TEST(SloAdmission, RefusesWhatCannotMeetItsTtftTarget) {
  // One second per prompt token: a 4-token prompt needs ~4 s.
  AsyncEngine ae(slo_engine(true, {0.0, 1.0}));
  RequestSpec tight = spec_of(5, 2);
  tight.slo_ttft_s = 0.5;
  auto r = ae.submit(tight);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("time-to-first-token target"), std::string::npos) << r.status().message();
  RequestSpec loose = spec_of(6, 2);
  loose.slo_ttft_s = 100;
  auto ok = ae.submit(loose);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  drain(*ok);
  auto none = ae.submit(spec_of(7, 2));  // no target: never refused
  ASSERT_TRUE(none.is_ok());
  drain(*none);
}

TEST(SloAdmission, WithoutRejectLateRequestsAreServed) {
  AsyncEngine ae(slo_engine(false, {0.0, 1.0}));
  RequestSpec tight = spec_of(5, 2);
  tight.slo_ttft_s = 0.5;
  auto r = ae.submit(tight);
  ASSERT_TRUE(r.is_ok());
  drain(*r);
}

TEST(SloGoodput, CountsRequestsMeetingBothTargets) {
  auto e = slo_engine(false, {0.001, 0.0001});
  RequestSpec met = spec_of(5, 4);
  met.slo_ttft_s = 60;
  met.slo_tpot_s = 60;
  RequestSpec missed = spec_of(6, 4);
  missed.slo_ttft_s = 60;
  missed.slo_tpot_s = 1e-9;  // no step is that fast
  RequestSpec untargeted = spec_of(7, 4);
  ASSERT_TRUE(e->add_request(met).is_ok());
  ASSERT_TRUE(e->add_request(missed).is_ok());
  ASSERT_TRUE(e->add_request(untargeted).is_ok());
  while (e->has_unfinished()) e->step();
  EXPECT_EQ(e->stats().num_slo_requests, 2);
  EXPECT_EQ(e->stats().num_slo_met, 1);
}

TEST(SloPolicy, MeasuresItsStepTimeAtStartUp) {
  EngineConfig cfg;
  cfg.num_threads = 1;
  cfg.kv_cache_bytes = 8 << 20;
  cfg.sched.policy = SchedPolicy::kSlo;
  auto e = Engine::create(testing_util::tiny_model_path(), cfg);
  ASSERT_TRUE(e.is_ok());
  const StepTimeEstimate& t = (*e)->scheduler().config().step_time;
  EXPECT_GT(t.per_token_s, 0);
  EXPECT_GT((*e)->predicted_prefill_s(1000), (*e)->predicted_prefill_s(10));
}

}  // namespace
}  // namespace pagoda
