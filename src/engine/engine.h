// The Engine: owns the scheduler, the KV cache manager and the ModelRunner.
// One step reads as four verbs — schedule, execute, sample, update — each
// owned by a different object (Scheduler, ModelRunner, the request's
// DecodingStrategy, the engine's bookkeeping). Not thread-safe by itself:
// AsyncEngine runs it on its own thread.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "engine/decoding.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/step_stats.h"
#include "gguf/gguf_file.h"
#include "kv/kv_cache_manager.h"
#include "sched/scheduler.h"
#include "spec/draft_model.h"
#include "spec/draft_planner.h"
#include "spec/lookahead.h"
#include "spec/medusa.h"
#include "spec/proposer.h"
#include "spec/spec_gate.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct EngineConfig {
  int32_t num_threads = 0;  // 0: physical cores
  int64_t kv_cache_bytes = 256 << 20;
  int64_t swap_space_bytes = 0;        // host tier for preemption by swapping
  DType kv_cache_dtype = DType::kF32;  // kF32, kF16, kQ8_0 or kQ4_0 (kernels::kv_row_bytes)
  int32_t block_size = 16;
  int32_t max_model_len = 0;  // 0: the model's training context
  bool enable_prefix_caching = true;
  // Sliding-window models (gemma3, gpt-oss): keep every sliding layer's KV
  // instead of freeing the blocks past the window (llama.cpp's --swa-full).
  // Freeing is also off with a draft model, scale-out, the KV tiers or
  // kv_export, which move whole blocks.
  bool swa_full = false;
  SchedulerConfig sched;
  // Speculative decoding (requests with n = 1 and no beam search).
  SpecMethod spec_method = SpecMethod::kNone;
  // Drafts per verification step; 0 = auto: up to kMaxAutoSpecTokens, chosen
  // each step per sequence from its acceptance and the batch size, using
  // step times measured at start-up (spec/draft_planner.h).
  int32_t num_spec_tokens = 0;
  int32_t ngram_min = 1;  // n-gram proposer: match lengths tried, longest first
  int32_t ngram_max = 4;
  std::string spec_datastore;  // retrieval: a file from `pagoda spec build-datastore`
  std::string draft_model;     // draft: a GGUF with the target's vocabulary (--draft-model)
  // lookahead: window, n-gram size, candidates (--lookahead W,N,G); its
  // tree of (N - 1) * (W + G) drafts is cut to num_spec_tokens when set.
  LookaheadParams lookahead;
  // medusa: the heads file; empty: MODEL.medusa.gguf beside the model. Its
  // trees have up to num_spec_tokens nodes (kDefaultMedusaNodes when 0).
  std::string medusa_heads;
  // SLO policy: refuse (kResourceExhausted) a request whose predicted TTFT
  // already exceeds its target, instead of serving it late.
  bool slo_reject = false;
  // layer-skip: the layers the draft skips, "1,3" (--skip-layers); empty:
  // the set `pagoda spec tune-skip` stored beside the model.
  std::string skip_layers;
  // --pack-cache DIR: keep the packed weights there between starts
  // (kernels::PackCacheSpec); empty: pack at every start.
  std::string pack_cache_dir;
  // --bf16-dot: F16/BF16 weights on the BF16 dot-product path (not exact).
  bool bf16_dot = false;
  // Tiered KV below the prefix cache (kv/kv_tiers.h): blocks it evicts go
  // to a host-memory tier of kv_host_tier_bytes (--kv-host-size) and/or a
  // disk tier in kv_disk_dir of kv_disk_bytes (--kv-disk-dir/-size) that
  // outlives the process; a prompt continuing them loads them back.
  int64_t kv_host_tier_bytes = 0;
  std::string kv_disk_dir;
  int64_t kv_disk_bytes = int64_t{10} << 30;
  // Tensor and pipeline parallelism (--tp N --pp M under mpirun -np N*M):
  // every rank creates the engine with the same configuration; rank 0
  // schedules and samples, the others call run_tensor_parallel_worker().
  // kv_cache_bytes is per rank (each holds 1/N of every block's KV heads
  // for 1/M of the layers). Null or one rank: off.
  dist::Comm* comm = nullptr;
  // Pipeline stages over the group (--pp; tensor parallelism is the group's
  // size / pp within each stage).
  int32_t pp = 1;
  // Prefill/decode disaggregation, prefill side (--role prefill): requests
  // may ask for their prompt's KV blocks (RequestSpec::export_kv). The
  // decode side runs with a KV tier (kv_host_tier_bytes) and import_kv().
  bool kv_export = false;
};

// --slo-reject at admission: kResourceExhausted (HTTP 429) saying why when
// the predicted time to the first token exceeds the target.
Status check_slo_admission(double ttft_target_s, double predicted_s);

class Engine : private DecodingHost {
 public:
  static constexpr int32_t kMaxAutoSpecTokens = 8;
  // Medusa's tree size unless num_spec_tokens sets it.
  static constexpr int32_t kDefaultMedusaNodes = 16;

  // Loads the model and checks every setting before the (slow) weight
  // repacking, so a bad configuration fails fast.
  static Result<std::unique_ptr<Engine>> create(const std::string& model_path, const EngineConfig& config);
  ~Engine() override;

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
  // Tensor parallelism, ranks > 0: runs rank 0's steps on this rank's share
  // of the model until rank 0's engine is destroyed.
  Status run_tensor_parallel_worker() { return runner_->serve_tensor_parallel(); }

  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  const ModelConfig& model_config() const { return runner_->config(); }
  const KVCacheManager& kv_manager() const { return *kv_manager_; }
  const Scheduler& scheduler() const { return *scheduler_; }
  const EngineStats& stats() const { return stats_.stats(); }
  // The KV blocks' namespace (model file and layout), with tiers or kv_export.
  const BlockKey& kv_namespace() const { return kv_ns_; }
  bool exports_kv() const { return kv_export_; }
  // Prefill/decode disaggregation, decode side: checks that the blocks come
  // from the same model and KV layout (safe from any thread: it reads
  // configuration only).
  Status check_kv_import(const KVBlockExport& e) const;
  // Puts them into the KV tiers, where the next admission of a prompt they
  // begin finds them (engine thread).
  void import_kv(const KVBlockExport& e);
  // Tiered KV's counters (all zero without tiers).
  KVTierStats kv_tier_stats() const { return kv_tiers_ ? kv_tiers_->stats() : KVTierStats{}; }
  int32_t max_model_len() const { return max_model_len_; }
  // --slo-reject: requests whose predicted TTFT exceeds their target are
  // refused at admission (AsyncEngine::submit, where a caller can be told
  // at once). Both read only configuration (any thread).
  bool slo_reject() const { return slo_reject_; }
  double predicted_prefill_s(int64_t num_tokens) const { return scheduler_->predicted_prefill_s(num_tokens); }
  // A request's KV policy: the server's, or its own with the server's
  // numbers where it sets none; checked against the model and the pool.
  Result<KvPolicy> resolve_kv_policy(const std::optional<KvPolicyRequest>& request) const;
  size_t weight_bytes() const { return runner_->model().weight_bytes(); }
  // K + V bytes one token takes in the cache, every layer (--kv-cache-dtype).
  double kv_bytes_per_token() const { return runner_->kv_bytes_per_token(); }
  double now() const override;  // engine clock, seconds
  // Adaptive speculation's step-time model (measured at start-up when
  // num_spec_tokens is auto, then refined by every step); tests and
  // benchmarks may replace it with a fixed one (not refined).
  const StepCostModel& step_cost_model() const { return step_cost_; }
  // The draft model or layer-skip draft; null for other methods.
  const DraftModel* draft_model() const { return draft_.get(); }
  // Auto speculation's measured check (tests may give it a history).
  void set_spec_gate(const SpecGate& gate) { spec_gate_ = gate; }
  void set_step_cost_model(StepCostModel m) {
    step_cost_ = std::move(m);
    learn_step_cost_ = false;
  }
  // The same for a draft model's (or layer-skip draft's) forward time; for
  // Medusa, its one-token time is one head's pass for one sequence.
  void set_draft_cost_model(StepCostModel m) {
    tree_fill_seconds_per_head_ = m.empty() ? 0.0 : m.seconds(1);
    draft_cost_ = std::move(m);
    learn_step_cost_ = false;
  }

 private:
  Engine() = default;
  static Status validate_config(const ModelConfig& mc, const EngineConfig& config);
  // Opens the KV tiers and attaches them to the manager and runner.
  Status open_kv_tiers(const EngineConfig& config);
  // At destruction: staged copies run, then the host tier and the prefix
  // cache's blocks go to disk.
  void persist_kv_tiers();
  // A bounded policy's sequence must fit the pool alone; `what` starts the error.
  Status check_kv_room(const KvPolicy& p, const std::string& what) const;
  void profile_step_cost(int32_t max_num_batched_tokens);
  // SLO policy: fits the scheduler's step-time model (fixed + per token).
  void profile_slo_step_time(int32_t max_num_batched_tokens);
  std::unique_ptr<Choice> make_choice(Request& req, int32_t index, const Sequence& base);
  // Step phases.
  void mark_scheduled(const SchedulerOutput& out, double t);
  std::vector<RequestOutput> sample(const SchedulerOutput& out, std::span<float> logits);
  void update(std::vector<RequestOutput>& outputs);
  // Auto speculation: trims each choice's proposed drafts to the length
  // that maximizes expected tokens per second in the next step.
  void plan_drafts(const SchedulerOutput& out);
  // Draft model: keeps its cache up with the step's known tokens and fills
  // the drafts the scheduler made room for. Returns the seconds it took.
  double run_draft_model(const SchedulerOutput& out);
  // Medusa: the scheduled placeholders become trees (one batched pass of
  // the heads). Returns the seconds it took.
  double fill_tree_drafts(const SchedulerOutput& out);
  // Times one sequence's tree fill (auto planning prices it per sequence).
  void profile_tree_fill();
  // DecodingHost.
  Choice& fork_choice(Request& req, const Choice& parent) override;
  void finish_choice(Choice& c, FinishReason reason) override;
  const Proposer* proposer() const override { return proposer_.get(); }
  // 0 while SpecGate holds the next step's drafts back, or while the planner
  // keeps finding that no draft pays: none are proposed.
  int32_t num_spec_tokens() const override { return drafts_held_ || plan_skipped_ ? 0 : num_spec_tokens_; }
  void accept_drafts(Choice& c, int32_t num_drafts, std::span<const int32_t> tree_path, bool rejected) override;
  void move_draft_kv(const Sequence& seq, int32_t from_pos, int32_t to_pos) override;
  std::span<const float> hidden_of(const float* logits_row) const override;
  void record_draft_seconds(double seconds) override { stats_.record_draft_seconds(seconds); }
  void record_proposal() override { stats_.record_proposal(); }
  const grammar::TokenVocab& grammar_vocab() override;
  void record_grammar_mask(double seconds) override { stats_.record_grammar_mask(seconds); }

  std::unique_ptr<gguf::GGUFFile> file_;
  std::unique_ptr<KVTiers> kv_tiers_;  // null without tiers; outlives the manager and runner using it
  BlockKey kv_ns_;                     // with tiers or kv_export
  bool kv_export_ = false;
  // spec.export_kv: the prompt's whole blocks of `c`, read from the KV storage.
  std::shared_ptr<const KVBlockExport> export_prompt_kv(const Choice& c) const;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<grammar::TokenVocab> grammar_vocab_;  // built by the first constrained request
  std::unique_ptr<ModelRunner> runner_;
  KvPolicy kv_policy_;            // the server's (config.sched.kv_policy)
  bool index_sensitive_ = false;  // sliding windows or attention sinks: no SnapKV/H2O
  std::unique_ptr<KVCacheManager> kv_manager_;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<RequestId, std::unique_ptr<Request>> requests_;
  int64_t next_id_ = 0;
  int64_t next_seq_id_ = 0;
  int32_t max_model_len_ = 0;
  bool slo_reject_ = false;
  int64_t capacity_tokens_ = 0;
  std::unique_ptr<Proposer> proposer_;  // null: speculation off
  std::unique_ptr<DraftModel> draft_;   // --spec draft
  std::vector<DraftModel::Job> draft_jobs_;
  StepCostModel draft_cost_;  // the draft model's forward time (auto speculation)
  int32_t num_spec_tokens_ = 0;
  bool spec_auto_ = false;
  double last_step_start_ = -1;  // for Scheduler::observe_step
  int32_t last_step_tokens_ = 0;
  std::span<const float> step_logits_;     // this step's logits, while sample() runs
  double tree_fill_seconds_per_head_ = 0;  // Medusa: one head's pass for one sequence (learned)
  int32_t tree_fill_depth_ = 0;            // Medusa: heads (a tree of n nodes runs heads_run(n, heads))
  bool tree_gains_ = false;                // the proposer prices its tree's nodes (Proposer::node_gains)
  GainCalibration gain_calibration_;       // accepted vs planned drafts, engine-wide
  SpecGate spec_gate_;                     // measured tokens/s with and without drafts, per batch size
  bool drafts_held_ = false;               // the gate's verdict for the step being sampled: no drafts
  // The planner's last plan kept no draft (none would pay, no probe): the
  // steps after it propose nothing but every kReplanEvery-th, until the
  // batch size changes its power of two (Engine::step).
  static constexpr int32_t kReplanEvery = 8;
  bool plan_idle_ = false;
  int32_t plan_idle_steps_ = 0;
  int32_t plan_idle_bucket_ = -1;
  bool plan_skipped_ = false;                        // this step proposes nothing (while sample() runs)
  ProbeBudget probe_budget_;                         // step time probes may still spend
  double probe_scale_ = 1;                           // probe_scale of the last plan that could probe
  std::vector<std::vector<double>> tree_gain_rows_;  // plan_drafts' scratch
  StepCostModel step_cost_;
  bool learn_step_cost_ = true;
  StepStats stats_;
  double clock_origin_ = 0;
};

}  // namespace pagoda
