// Speculative decoding with a draft model (Leviathan et al. 2023, Chen et
// al. 2023): a second, smaller GGUF with the target's vocabulary drafts k
// tokens per sequence, the target verifies them in one step, and the exact
// rejection rule (Sampler::verify_draft with the draft's distribution q)
// keeps the output distribution the target's.
//
// The draft's K/V lives in its own storage but in the target's blocks: the
// KV cache manager's block tables index both, so whatever the manager does
// to a block — share it with a prefix hit, copy it on write, swap it out,
// free it when drafts are rolled back — it does to the draft's rows as well,
// and the pool's memory is split between the two by their bytes per block.
// A sequence's draft rows trail its target rows by a lag (Sequence::
// num_draft_lag) that grows while it does not draft — prefill chunks, steps
// the planner leaves without drafts — so those steps cost no draft forward.
// When it drafts, the draft's first pass catches up the lag and the step's
// known tokens and draws the first draft; then one batched forward per
// further draft position. Catching up writes the rows into the sequence's
// blocks, shared ones included (the same tokens give the same rows). A
// prefix hit on blocks whose owner never drafted reads stale draft rows:
// that costs acceptance, never correctness (verification is exact).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "model/forward_batch.h"
#include "model/llama_model.h"
#include "sample/sampler.h"
#include "sched/scheduler.h"
#include "spec/proposer.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

class DraftModel {
 public:
  // One scheduled sequence of the step.
  struct Job {
    Sequence* seq = nullptr;
    int32_t num_known = 0;            // known tokens the target computes this step (its slice without drafts)
    int32_t num_drafts = 0;           // drafts to write into seq->draft_tokens (0: only keep the cache up)
    Sampler* sampler = nullptr;       // draws the drafts (with num_drafts)
    std::vector<float>* q = nullptr;  // out: num_drafts rows of q (vocab_size each); left empty for greedy
  };

  // Opens and binds the file (no KV memory yet, no repacking).
  static Result<std::unique_ptr<DraftModel>> open(const std::string& path);
  // Self-speculative decoding (Draft & Verify, LayerSkip): the target itself
  // with `skip` layers skipped (valid indices, at least one layer kept),
  // over its own rows (the kept layers' K/V differs from the target's).
  static std::unique_ptr<DraftModel> self(LlamaModel& target, std::span<const int32_t> skip);
  // Errors unless the draft can propose for the target: the same number of
  // embedding rows and the same token texts.
  Status check_vocabulary(const ModelConfig& target, const Tokenizer& target_tokenizer) const;
  // K + V bytes of one block of the draft's rows.
  int64_t bytes_per_block(int32_t block_size, DType kv_dtype) const;
  // Allocates the draft's rows for every device and host block of the
  // target's manager and repacks the weights on `pool` (the target's: the
  // two models never run at once). The draft then runs on `pool`, or on one
  // thread of its own when a timed forward says that is faster (a small
  // draft on a multi-thread pool pays more for waking it than it gains).
  Status start(int32_t num_blocks, int32_t num_host_blocks, int32_t block_size, DType kv_dtype, ThreadPool& pool);

  const ModelConfig& config() const { return model_->config(); }
  // Layers the draft runs.
  int32_t num_layers_run() const;
  // Threads its forwards run on (after start()).
  int32_t num_threads() const;

  // The step's block copies (copy-on-write, swap out and in), as the target
  // runs them. Call once per step before run().
  void copy_blocks(const SchedulerOutput& out);
  // Catches the draft's cache up for the jobs that draft and fills their
  // seq->draft_tokens with tokens drawn from the draft's distribution (the
  // job's sampler processing the draft's logits); the other jobs' lag grows
  // by their known tokens.
  void run(std::span<Job> jobs, const KVCacheManager& kv);
  // After verification: the rows the draft has not computed among the
  // sequence's cache (1 when every draft was accepted: the last one was
  // never fed to the draft), caught up at its next run().
  static void after_verify(Sequence& seq, int32_t num_drafts, int32_t num_accepted);
  // The last run()'s passes: (batched tokens, seconds of the forward and the
  // draws), for the planner's cost model to learn from.
  const std::vector<std::pair<int32_t, double>>& pass_times() const { return pass_times_; }

  // Seconds of one draft forward over n tokens (one per sequence, as a draft
  // position is), the best of a few runs; for the speculation planner. Writes
  // blocks from 0 up: call it before any sequence holds one.
  std::vector<std::pair<int32_t, double>> profile_step_times(std::span<const int32_t> sizes, int32_t context);

 private:
  DraftModel() = default;
  // One forward over batch_; returns its logits rows.
  float* forward();

  std::unique_ptr<gguf::GGUFFile> file_;   // a separate draft model's file
  std::unique_ptr<LlamaModel> own_model_;  // a separate draft model
  LlamaModel* model_ = nullptr;            // own_model_, or the target (self)
  std::unique_ptr<KVStorage> kv_storage_;
  std::unique_ptr<KVStorage> host_storage_;
  ThreadPool* pool_ = nullptr;               // the target's, or single_pool_
  std::unique_ptr<ThreadPool> single_pool_;  // one thread, when that is faster
  int32_t block_size_ = 0;
  ForwardBatch batch_;
  std::vector<float> logits_;
  std::vector<std::pair<int32_t, double>> pass_times_;
  std::vector<float> probs_;      // scratch: one draft distribution
  std::vector<int32_t> history_;  // scratch: output plus drafts so far, for the sampler's penalties
};

// The Proposer the decoding strategy sees for the draft model: it reserves
// positions (kPendingDraft) the scheduler can budget and allocate; the
// engine has DraftModel::run fill them after scheduling.
class DraftModelProposer : public Proposer {
 public:
  static constexpr int32_t kPendingDraft = -1;
  void propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>* draft) const override {
    draft->assign(static_cast<size_t>(std::max(0, max_tokens)), kPendingDraft);
  }
  bool drafts_after_scheduling() const override { return true; }
};

}  // namespace pagoda
