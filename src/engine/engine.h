// The Engine: owns the model, KV cache, scheduler and samplers. One step =
// schedule, run the model on the flat batch, sample, update and emit deltas
// (schedule -> run -> postprocess -> collect finished). Not thread-safe by
// itself: AsyncEngine runs it on its own thread.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/request.h"
#include "gguf/gguf_file.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "model/llama_model.h"
#include "sched/scheduler.h"
#include "tokenizer/stop_strings.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct EngineConfig {
  int32_t num_threads = 0;            // 0: physical cores
  int64_t kv_cache_bytes = 256 << 20;
  int64_t swap_space_bytes = 0;       // host tier for preemption by swapping
  DType kv_cache_dtype = DType::kF32;  // kF32 or kF16 (half the memory per token)
  int32_t block_size = 16;
  int32_t max_model_len = 0;          // 0: the model's training context
  bool enable_prefix_caching = true;
  SchedulerConfig sched;
};

struct EngineStats {
  int64_t num_steps = 0;
  int64_t num_prompt_tokens_computed = 0;
  int64_t num_decode_tokens_computed = 0;
  int64_t num_generated_tokens = 0;
  int64_t num_finished = 0;
  double prefill_seconds = 0;  // steps whose batch was mostly prompt tokens
  double decode_seconds = 0;
  double kv_waste_sum = 0;     // summed over steps, for the mean
  int64_t num_prompt_tokens = 0;         // of requests admitted so far
  int64_t num_cached_prompt_tokens = 0;  // of those, served by the prefix cache
  double prefix_cache_hit_rate() const {
    return num_prompt_tokens ? static_cast<double>(num_cached_prompt_tokens) / num_prompt_tokens : 0.0;
  }
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const std::string& model_path, const EngineConfig& config);
  ~Engine();

  // Checks a request without changing state (safe from other threads).
  Status validate(const RequestSpec& spec) const;
  // Queues a request; `id` lets a caller (AsyncEngine) choose ids.
  Result<RequestId> add_request(RequestSpec spec, std::optional<RequestId> id = std::nullopt);
  // Finishes a request with reason abort and frees its blocks. Returns false
  // for an unknown (or already finished) id.
  bool abort(RequestId id);
  // Runs one step; returns the outputs of every request that made progress.
  std::vector<RequestOutput> step();
  bool has_unfinished() const { return scheduler_->has_unfinished(); }

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelConfig& model_config() const { return model_->config(); }
  const KVCacheManager& kv_manager() const { return *kv_manager_; }
  const Scheduler& scheduler() const { return *scheduler_; }
  const EngineStats& stats() const { return stats_; }
  int32_t max_model_len() const { return max_model_len_; }
  size_t weight_bytes() const { return model_->weight_bytes(); }
  double now() const;  // engine clock, seconds

 private:
  struct Request;
  // One of a request's n sequences, with its own sampler and text state.
  struct Choice {
    Request* request = nullptr;
    Sequence seq;
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<StreamDecoder> decoder;
    std::unique_ptr<StopStringMatcher> stops;
    bool finished = false;
    // Beam search state.
    double cum_logprob = 0;
    std::vector<std::pair<int32_t, float>> candidates;  // top (token, logprob) of the last logits
    bool has_candidates = false;
  };
  struct Hypothesis {
    std::vector<int32_t> output;
    double score = 0;
    FinishReason reason = FinishReason::kStop;
  };
  struct Request {
    RequestSpec spec;
    std::vector<std::unique_ptr<Choice>> choices;
    RequestTiming timing;
    int32_t num_cached_tokens = 0;
    int32_t num_finished = 0;
    std::vector<Hypothesis> hypotheses;  // beam search: finished beams
  };

  Engine() = default;
  void run_swaps(const SchedulerOutput& out);
  void build_batch(const SchedulerOutput& out);
  std::unique_ptr<Choice> make_choice(Request& req, int32_t index, const Sequence& base);
  // Forks choices 1..n-1 from choice 0 once its prompt is computed; each
  // samples its first token from the same logits.
  void fork_choices(Request& req, const float* logits, std::vector<RequestOutput>& outputs);
  void postprocess(Choice& c, SampleResult sr, RequestOutput& o);
  void finish_choice(Choice& c, FinishReason reason);
  // Beam search: records the top candidates of a beam's logits; once every
  // live beam has them, selects the next beams (engine/beam_search.cc).
  void beam_record(Choice& c, const float* logits);
  void beam_step(Request& req, std::vector<RequestOutput>& outputs);
  void beam_finish(Request& req, std::vector<RequestOutput>& outputs);

  std::unique_ptr<gguf::GGUFFile> file_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<KVCacheManager> kv_manager_;
  std::unique_ptr<KVStorage> kv_storage_;
  std::unique_ptr<KVStorage> host_storage_;  // swap tier
  std::unique_ptr<Scheduler> scheduler_;
  std::map<RequestId, std::unique_ptr<Request>> requests_;
  int64_t next_id_ = 0;
  int32_t max_model_len_ = 0;
  int64_t capacity_tokens_ = 0;
  ForwardBatch batch_;
  std::vector<float> logits_;
  std::vector<Choice*> logit_owners_;  // choice of each logit row
  std::vector<float> fork_logits_;
  int64_t next_seq_id_ = 0;
  EngineStats stats_;
  double clock_origin_ = 0;
};

}  // namespace pagoda
