// DESIGN.md's ModelRunner: turns one step's SchedulerOutput into a model
// forward. Owns the model's thread pool, the device and host KV storage, the
// flat ForwardBatch and the logits buffer. execute() runs the step's block
// copies (swap-out, swap-in, copy-on-write), flattens every scheduled slice
// into one ragged batch and returns the logits of the rows that need them.
// A prefill chunk, a decode token and draft tokens to verify are all "compute
// these positions of this sequence" here.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "dist/comm.h"
#include "engine/tp_step.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "model/forward_batch.h"
#include "model/llama_model.h"
#include "sched/scheduler.h"

namespace pagoda {

struct RunnerConfig {
  int32_t num_threads = 0;  // 0: physical cores
  DType kv_cache_dtype = DType::kF32;
  int32_t block_size = 16;
  int64_t num_blocks = 0;       // device KV blocks
  int64_t num_host_blocks = 0;  // swap tier
  bool kv_scores = false;       // H2O: a score per cached row (KVStorage::enable_scores)
  // Packed weight copies for the SIMD kernels. Off when the weights change
  // after loading (quantization's calibration writes them in place): matmul
  // then reads the weights where they are.
  bool repack = true;
  // Where packed copies are kept between starts (empty: nowhere).
  std::string pack_cache_dir;
  // F16/BF16 matrices on the BF16 dot-product path (LlamaModel::use_bf16_dot).
  bool bf16_dot = false;
  // Scale-out over this process group (null or one rank: off), of
  // pp pipeline stages of size / pp tensor-parallel ranks each (world rank
  // = stage * tp + tp rank): every rank holds its stage's layers and its
  // share of their heads, FFN and vocabulary; rank 0's execute() sends each
  // step to the others (serve_tensor_parallel).
  dist::Comm* comm = nullptr;
  int32_t pp = 1;
  // KV groups (kv/kv_groups.h; sliding-window freeing): num_blocks and
  // num_host_blocks count pages then, each of layers_per_page layers. Not
  // with comm.
  KVGroupLayout kv_groups;
};

class ModelRunner {
 public:
  // Drafts in one tree (the attention kernel's mask is 64 bits).
  static constexpr int32_t kMaxTreeDrafts = 64;

  // Checks the configuration against the model without allocating anything.
  static Status validate(const ModelConfig& model, const RunnerConfig& config);
  // Validates, allocates the KV storage, then repacks the weights (the slow
  // part, done last so a bad configuration fails fast).
  static Result<std::unique_ptr<ModelRunner>> create(std::unique_ptr<LlamaModel> model, const RunnerConfig& config);
  // K + V bytes of one block for this model.
  static int64_t bytes_per_block(const ModelConfig& model, const RunnerConfig& config);
  // The KV storage's shape: the attention layers only (ModelConfig::
  // kv_layer). A model without attention (mamba2) gets a nominal one-layer
  // storage that is never written (mapped lazily, it costs address space
  // only): its blocks still count each sequence's tokens.
  struct KVShape {
    int32_t num_layers, num_kv_heads, head_dim;
  };
  static KVShape kv_shape(const ModelConfig& model);

  ~ModelRunner();
  // Tensor parallelism: ranks > 0 run this instead of execute(), until rank
  // 0's runner is destroyed: each step's copies and forward over their
  // share, the logits of their vocabulary slice gathered at rank 0. An error
  // for a malformed step message.
  Status serve_tensor_parallel();
  int32_t tp_size() const { return tp_; }
  int32_t pp_size() const { return pp_; }

  // Runs out's block copies, then one forward over out.scheduled. Returns
  // logits [rows][vocab_size]: for each scheduled sequence in order, its
  // last num_logits positions. Valid until the next call.
  std::span<float> execute(const SchedulerOutput& out, const KVCacheManager& kv);
  // Models with recurrent layers: each sequence's state lives in a slot
  // (KVCacheManager::enable_state_slots); a forked sequence starts from its
  // parent's state.
  bool has_recurrent_state() const { return state_ != nullptr; }
  void copy_state(int32_t src_slot, int32_t dst_slot) { state_->copy(src_slot, dst_slot); }
  // Tiered KV: execute() first runs the tiers' staged spills and loads
  // (KVTiers::run_pending); run_tier_copies() runs them now (at shutdown).
  void set_kv_tiers(KVTiers* tiers) { tiers_ = tiers; }
  void run_tier_copies() {
    if (tiers_ && tiers_->has_pending()) tiers_->run_pending(*kv_storage_);
  }
  // Bytes of one sequence's recurrent state (0 without recurrent layers).
  int64_t state_bytes_per_seq() const { return model_->state_floats_per_seq() * int64_t{sizeof(float)}; }

  // Speculation's cost model: the seconds of one forward over n tokens (all
  // of them with logits, as when verifying drafts) after `context` cached
  // tokens, for each n of `sizes` that fits in the KV storage; the best of
  // at least three runs (and 5 ms) after a warm-up. Writes KV blocks from 0 up: call it before
  // any sequence holds one.
  std::vector<std::pair<int32_t, double>> profile_step_times(std::span<const int32_t> sizes, int32_t context);

  const ModelConfig& config() const { return model_->config(); }
  const LlamaModel& model() const { return *model_; }
  int32_t num_threads() const { return pool_->num_threads(); }
  ThreadPool& pool() { return *pool_; }
  // Runs later forwards with these layers skipped (ForwardBatch::
  // skip_layers; empty: all layers): for measuring a skip set.
  void set_skip_layers(std::vector<uint8_t> skip) { batch_.skip_layers = std::move(skip); }
  int32_t block_size() const { return block_size_; }
  int32_t num_kv_blocks() const { return kv_storage_->num_blocks(); }
  const KVStorage& kv_storage() const { return *kv_storage_; }
  // Moves one token's K/V, every layer (an accepted tree draft to its
  // place in the sequence): slots are block * block_size + offset.
  void move_kv_row(int64_t from_slot, int64_t to_slot) { kv_storage_->copy_token(from_slot, to_slot); }
  // H2O's per-row attention scores in the device and host storage (once;
  // between steps).
  Status enable_kv_scores();
  // K + V bytes of one token over all layers.
  // K + V bytes of one token over all attention layers (with KV groups, a
  // page holds 1/num_groups of them).
  double kv_bytes_per_token() const {
    return 2.0 * static_cast<double>(kv_storage_->block_bytes()) * kv_storage_->num_layers() *
           model_->kv_groups().num_groups / block_size_;
  }

 private:
  ModelRunner() = default;
  void copy_blocks(const StepCopies& c);
  // Scale-out (model_runner_dist.cc): splits the model over the group.
  Status start_distributed(const RunnerConfig& config);
  // Every rank's part of one step: the copies, then its stage's layers over
  // the batch (in micro-batches passed stage to stage when pp > 1), then
  // the last stage's logits slices gathered into logits_ at rank 0.
  void run_distributed(const StepCopies& copies, const ForwardBatch& batch);
  void gather_logits(int64_t rows);
  void build_batch(const SchedulerOutput& out, const KVCacheManager& kv);

  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<KVStorage> kv_storage_;
  std::unique_ptr<KVStorage> host_storage_;  // swap tier; null without one
  std::unique_ptr<StateStorage> state_;      // recurrent layers' state; null without them
  KVTiers* tiers_ = nullptr;                 // tiered KV; not owned
  dist::Comm* comm_ = nullptr;               // scale-out (size > 1): the whole group; not owned
  dist::Comm* tp_comm_ = nullptr;            // this stage's tensor-parallel ranks (tp > 1)
  int32_t tp_ = 1, pp_ = 1, stage_ = 0, tp_rank_ = 0;
  TpStep tp_step_;  // ranks > 0: the received step
  std::vector<uint8_t> tp_bytes_;
  std::vector<float> tp_local_, tp_gathered_, pp_hidden_in_, pp_hidden_out_;
  std::vector<ForwardBatch> micro_batches_;
  int32_t block_size_ = 0;
  ForwardBatch batch_;
  std::vector<int32_t> tree_depth_;  // build_batch's scratch for a tree of drafts
  // KV groups: every group's tables and slots in batch_ (ForwardBatch::group_slots).
  void add_group_tables(const KVCacheManager* kv, SeqId seq, std::span<const BlockId> table0);
  void add_group_slots();
  std::vector<std::vector<BlockId>> group_tables_;  // [slice][group - 1]
  std::vector<uint64_t> tree_mask_;
  std::vector<float> logits_;
};

}  // namespace pagoda
