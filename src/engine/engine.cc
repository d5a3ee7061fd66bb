#include "engine/engine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/check.h"
#include "spec/datastore.h"
#include "spec/head_projection.h"
#include "spec/layer_skip.h"
#include "spec/lookahead.h"
#include "spec/ngram_proposer.h"

namespace pagoda {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

RunnerConfig runner_config(const EngineConfig& config) {
  RunnerConfig rc;
  rc.num_threads = config.num_threads;
  rc.kv_cache_dtype = config.kv_cache_dtype;
  rc.block_size = config.block_size;
  rc.kv_scores = config.sched.kv_policy.h2o();
  rc.pack_cache_dir = config.pack_cache_dir;
  rc.bf16_dot = config.bf16_dot;
  rc.comm = config.comm;
  rc.pp = config.pp;
  return rc;
}

// The KV tiers' namespace: the model file's bytes (its size, its first MiB
// — the header and metadata — and 64 pages spread over the tensor data) and
// everything that shapes a block's bytes: the KV layers, heads, head size,
// dtype and block size. Sampling keeps start-up fast on a 10 GB file; a
// different model differs in its metadata or in the sampled weights.
Result<BlockKey> kv_tier_namespace(const std::string& path, const ModelConfig& mc, const RunnerConfig& rc) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return invalid_argument("cannot read " + path + " to name its KV tier: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return invalid_argument("cannot stat " + path);
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  std::string bytes = "pagoda-kv-tiers 1|";
  const ModelRunner::KVShape shape = ModelRunner::kv_shape(mc);
  bytes += mc.arch + "|" + std::to_string(shape.num_layers) + "|" + std::to_string(shape.num_kv_heads) + "|" +
           std::to_string(shape.head_dim) + "|" + std::to_string(static_cast<int>(rc.kv_cache_dtype)) + "|" +
           std::to_string(rc.block_size) + "|" + std::to_string(size) + "|";
  auto read_at = [&](uint64_t offset, uint64_t n) {
    const size_t old = bytes.size();
    bytes.resize(old + n);
    const ssize_t got = ::pread(fd, bytes.data() + old, n, static_cast<off_t>(offset));
    bytes.resize(old + static_cast<size_t>(std::max<ssize_t>(got, 0)));
  };
  constexpr uint64_t kHead = 1 << 20, kPage = 4096, kPages = 64;
  read_at(0, std::min(size, kHead));
  if (size > kHead + kPage)
    for (uint64_t i = 0; i < kPages; ++i) read_at(kHead + (size - kHead - kPage) / (kPages - 1) * i, kPage);
  ::close(fd);
  return namespace_key(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

}  // namespace

Engine::~Engine() { persist_kv_tiers(); }

Status Engine::open_kv_tiers(const EngineConfig& config) {
  KVTierOptions o;
  o.host_bytes = config.kv_host_tier_bytes;
  o.disk_dir = config.kv_disk_dir;
  o.disk_bytes = config.kv_disk_bytes;
  const RunnerConfig rc = runner_config(config);
  PAGODA_ASSIGN_OR_RETURN(kv_tiers_,
                          KVTiers::open(o, kv_ns_, rc.block_size, runner_->kv_storage().bytes_per_block_all()));
  kv_manager_->attach_tiers(kv_tiers_.get());
  runner_->set_kv_tiers(kv_tiers_.get());
  return Status::ok();
}

void Engine::persist_kv_tiers() {
  if (!kv_tiers_ || !runner_ || !kv_manager_) return;
  runner_->run_tier_copies();
  kv_tiers_->flush_host();
  kv_manager_->persist_cached_blocks(runner_->kv_storage());
}

double Engine::now() const { return steady_seconds() - clock_origin_; }

Status Engine::validate_config(const ModelConfig& mc, const EngineConfig& config) {
  if (config.sched.max_num_batched_tokens <= 0) return invalid_argument("max batched tokens must be positive");
  if (config.sched.max_num_seqs <= 0) return invalid_argument("max seqs must be positive");
  if (config.max_model_len < 0) return invalid_argument("max model length must not be negative");
  if (config.num_spec_tokens < 0 || config.num_spec_tokens > 64)
    return invalid_argument("the number of speculative tokens must be in 1..64 (or 0 for auto)");
  if (config.ngram_min < 1 || config.ngram_max < config.ngram_min || config.ngram_max > 64)
    return invalid_argument("n-gram sizes need 1 <= min <= max <= 64");
  PAGODA_RETURN_IF_ERROR(validate_kv_policy(config.sched.kv_policy, mc.sliding_window > 0 || mc.has_attn_sinks));
  // A recurrent layer's state stands for every token computed: it cannot
  // drop rejected drafts or evicted tokens.
  if (mc.has_recurrent_layers() && config.spec_method != SpecMethod::kNone)
    return invalid_argument("speculative decoding needs rollback, which recurrent layers (" + mc.arch +
                            ") do not have: run without --spec");
  if (mc.has_recurrent_layers() && !config.sched.kv_policy.full())
    return invalid_argument("--kv-policy " + std::string(kv_policy_name(config.sched.kv_policy.kind)) +
                            " evicts tokens, which recurrent layers (" + mc.arch + ") cannot forget");
  if (config.spec_method == SpecMethod::kMedusa && mc.sliding_window > 0)
    return invalid_argument("Medusa speculation needs full attention: this model has sliding-window layers");
  if (config.spec_method == SpecMethod::kLookahead) {
    const LookaheadParams& la = config.lookahead;
    if (la.window < 1 || la.ngram < 2 || la.candidates < 1 || la.tree_size() > ModelRunner::kMaxTreeDrafts)
      return invalid_argument("lookahead needs W >= 1, N >= 2, G >= 1 and (N - 1) * (W + G) <= " +
                              std::to_string(ModelRunner::kMaxTreeDrafts));
    // Tree drafts sit at cache positions past their RoPE positions, which a
    // window counted in cache positions would get wrong.
    if (mc.sliding_window > 0)
      return invalid_argument("lookahead speculation needs full attention: this model has sliding-window layers");
  }
  if (config.spec_method == SpecMethod::kDraft && config.draft_model.empty())
    return invalid_argument("speculation with a draft model needs a draft model file (--draft-model FILE)");
  if (!config.sched.kv_policy.full() && config.spec_method != SpecMethod::kNone)
    return invalid_argument("speculative decoding does not run with --kv-policy " +
                            std::string(kv_policy_name(config.sched.kv_policy.kind)) + " yet");
  if (!config.kv_disk_dir.empty() || config.kv_host_tier_bytes != 0) {
    if (!config.enable_prefix_caching)
      return invalid_argument(
          "the KV tiers (--kv-disk-dir, --kv-host-size) sit below the prefix cache: "
          "run without --no-prefix-cache");
    if (mc.has_recurrent_layers())
      return invalid_argument("the KV tiers hold attention blocks only; recurrent layers (" + mc.arch +
                              ") keep state snapshots instead: run without --kv-disk-dir/--kv-host-size");
    if (config.spec_method == SpecMethod::kDraft || config.spec_method == SpecMethod::kLayerSkip)
      return invalid_argument("the KV tiers do not hold a draft model's blocks yet: run --spec " +
                              std::string(config.spec_method == SpecMethod::kDraft ? "draft" : "layer-skip") +
                              " without --kv-disk-dir/--kv-host-size");
    if (config.kv_host_tier_bytes < 0) return invalid_argument("--kv-host-size must not be negative");
    if (!config.kv_disk_dir.empty() && config.kv_disk_bytes <= 0)
      return invalid_argument("--kv-disk-size must be positive");
  }
  if (config.comm != nullptr && config.comm->size() > 1) {
    const std::string tp =
        config.pp > 1 ? "--pp " + std::to_string(config.pp) : "--tp " + std::to_string(config.comm->size());
    if (config.spec_method != SpecMethod::kNone)
      return invalid_argument(tp + ": speculative decoding does not run with tensor parallelism yet");
    if (!config.kv_disk_dir.empty() || config.kv_host_tier_bytes != 0)
      return invalid_argument(tp + ": the KV tiers do not run with tensor parallelism yet");
    if (config.sched.kv_policy.snapkv() || config.sched.kv_policy.h2o())
      return invalid_argument(tp + ": --kv-policy snapkv/h2o do not run with tensor parallelism yet");
    if (config.sched.policy == SchedPolicy::kSlo && config.sched.step_time.per_token_s <= 0)
      return invalid_argument(tp +
                              ": --policy slo measures step times at start-up on one rank; "
                              "not with tensor parallelism yet");
  }
  RunnerConfig shape = runner_config(config);  // threads, block size, dtype; one block stands in for the sizes
  shape.comm = nullptr;                        // the checks use the whole model's shape
  shape.num_blocks = 1;
  PAGODA_RETURN_IF_ERROR(ModelRunner::validate(mc, shape));
  const int64_t block_bytes = ModelRunner::bytes_per_block(mc, shape);
  if (config.kv_cache_bytes < block_bytes)
    return invalid_argument("KV cache memory (" + std::to_string(config.kv_cache_bytes) +
                            " bytes) is smaller than one block (" + std::to_string(block_bytes) + " bytes)");
  return Status::ok();
}

Result<std::unique_ptr<Engine>> Engine::create(const std::string& model_path, const EngineConfig& config) {
  std::unique_ptr<Engine> e(new Engine());
  e->clock_origin_ = steady_seconds();
  PAGODA_ASSIGN_OR_RETURN(e->file_, gguf::GGUFFile::open(model_path));
  PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::load(*e->file_));
  PAGODA_ASSIGN_OR_RETURN(e->tokenizer_, Tokenizer::from_gguf(*e->file_));
  const ModelConfig& mc = model->config();
  if (e->tokenizer_->vocab_size() > mc.vocab_size)
    return invalid_argument("the tokenizer has more tokens than the model's embedding rows");
  PAGODA_RETURN_IF_ERROR(validate_config(mc, config));
  e->max_model_len_ = config.max_model_len > 0 ? config.max_model_len : mc.train_context_len;

  RunnerConfig rc = runner_config(config);
  int64_t block_bytes = ModelRunner::bytes_per_block(mc, rc);
  // State snapshots for prefix hits of recurrent models: a quarter of the KV
  // memory's worth (1 to 256), beside it.
  const int64_t state_bytes = mc.state_floats_per_seq() * int64_t{sizeof(float)};
  const auto state_snapshots =
      static_cast<int32_t>(state_bytes > 0 ? std::clamp<int64_t>(config.kv_cache_bytes / 4 / state_bytes, 1, 256) : 0);
  if (config.spec_method == SpecMethod::kLayerSkip) {
    std::vector<int32_t> skip;
    const std::string beside = skip_layers_path(model_path);
    if (!config.skip_layers.empty()) {
      PAGODA_ASSIGN_OR_RETURN(skip, parse_skip_layers(config.skip_layers, mc.num_layers));
    } else if (std::filesystem::exists(beside)) {
      PAGODA_ASSIGN_OR_RETURN(skip, load_skip_layers(beside, mc.num_layers));
    } else {
      return invalid_argument("layer-skip speculation needs the layers to skip: --skip-layers LIST, or " + beside +
                              " (written by `pagoda spec tune-skip`)");
    }
    // The model object outlives the move of its pointer into the runner.
    e->draft_ = DraftModel::self(*model, skip);
  }
  if (config.spec_method == SpecMethod::kDraft) {
    PAGODA_ASSIGN_OR_RETURN(e->draft_, DraftModel::open(config.draft_model));
    PAGODA_RETURN_IF_ERROR(e->draft_->check_vocabulary(mc, *e->tokenizer_));
  }
  // Scale-out: each rank keeps 1/tp of every block's KV heads for about 1/pp of the layers.
  if (config.comm != nullptr && config.comm->size() > 1) block_bytes /= config.comm->size();
  // The draft's rows live in the target's blocks: a block costs both.
  if (e->draft_) block_bytes += e->draft_->bytes_per_block(rc.block_size, rc.kv_cache_dtype);
  if (config.kv_cache_bytes < block_bytes)
    return invalid_argument("KV cache memory (" + std::to_string(config.kv_cache_bytes) +
                            " bytes) is smaller than one block of the target and its draft (" +
                            std::to_string(block_bytes) + " bytes)");
  rc.num_blocks = config.kv_cache_bytes / block_bytes;
  rc.num_host_blocks = std::max<int64_t>(0, config.swap_space_bytes) / block_bytes;
  const bool tiers = !config.kv_disk_dir.empty() || config.kv_host_tier_bytes > 0;
  // Sliding-window layers free their blocks past the window (KV groups):
  // the device and host pools count pages of one group's layers then.
  if (!config.swa_full && !e->draft_ && config.comm == nullptr && !tiers && !config.kv_export &&
      config.sched.kv_policy.full()) {
    std::vector<uint8_t> sliding;
    for (int32_t il = 0; il < mc.num_layers; ++il)
      if (mc.kv_layer(il + 1) > mc.kv_layer(il)) sliding.push_back(mc.is_sliding(il) ? 1 : 0);
    rc.kv_groups = KVGroupLayout::make(sliding, mc.sliding_window);
  }
  const KVGroupLayout& groups = rc.kv_groups;
  if (groups.grouped()) {
    rc.num_blocks *= groups.num_groups;
    rc.num_host_blocks *= groups.num_groups;
    if (rc.num_blocks > INT32_MAX / rc.block_size)
      return invalid_argument("the KV cache holds more pages than block ids can name: give it less memory");
  }
  PAGODA_RETURN_IF_ERROR(ModelRunner::validate(mc, rc));
  e->kv_manager_ = std::make_unique<KVCacheManager>(static_cast<int32_t>(rc.num_blocks), rc.block_size,
                                                    static_cast<int32_t>(rc.num_host_blocks));
  if (groups.grouped()) e->kv_manager_->enable_kv_groups(groups.num_groups, groups.num_full_groups, groups.window);
  // Recurrent layers: a state slot per sequence, and with the prefix cache
  // a state snapshot per finished sequence (a hit resumes from one).
  if (mc.has_recurrent_layers()) e->kv_manager_->enable_state_slots(config.enable_prefix_caching ? state_snapshots : 0);
  e->kv_manager_->enable_prefix_cache(config.enable_prefix_caching);
  e->capacity_tokens_ = rc.num_blocks * rc.block_size;
  if (groups.grouped()) {
    // One sequence's most tokens: its window and a chunk keep every group's
    // pages; blocks before them keep the full groups' pages only.
    const int64_t window_blocks =
        (groups.window - 1 + std::max(1, config.sched.max_num_batched_tokens) + rc.block_size - 1) / rc.block_size + 1;
    const int64_t all = groups.num_groups, full = groups.num_full_groups;
    const int64_t blocks = rc.num_blocks >= all * window_blocks
                               ? window_blocks + (rc.num_blocks - all * window_blocks) / full
                               : rc.num_blocks / all;
    e->capacity_tokens_ = blocks * rc.block_size;
  }
  e->kv_policy_ = config.sched.kv_policy;
  e->index_sensitive_ = mc.sliding_window > 0 || mc.has_attn_sinks;
  PAGODA_RETURN_IF_ERROR(e->check_kv_room(e->kv_policy_, "--kv-policy "));
  e->scheduler_ = std::make_unique<Scheduler>(config.sched, *e->kv_manager_);
  if (config.spec_method == SpecMethod::kNgram)
    e->proposer_ = std::make_unique<NgramProposer>(config.ngram_min, config.ngram_max);
  if (config.spec_method == SpecMethod::kRetrieval) {
    if (config.spec_datastore.empty()) return invalid_argument("retrieval speculation needs a datastore file");
    PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<Datastore> store, Datastore::load(config.spec_datastore, mc.vocab_size));
    e->proposer_ = std::make_unique<RetrievalProposer>(std::move(store), config.ngram_min, config.ngram_max);
  }
  if (config.spec_method == SpecMethod::kDraft || config.spec_method == SpecMethod::kLayerSkip)
    e->proposer_ = std::make_unique<DraftModelProposer>();
  if (config.spec_method == SpecMethod::kLookahead)
    e->proposer_ = std::make_unique<LookaheadProposer>(config.lookahead);
  std::optional<MedusaHeads> medusa;
  if (config.spec_method == SpecMethod::kMedusa) {
    const std::string path = config.medusa_heads.empty() ? medusa_heads_path(model_path) : config.medusa_heads;
    if (!std::filesystem::exists(path))
      return invalid_argument("Medusa speculation needs heads: --medusa-heads FILE, or " + path +
                              " (written by tools/train/train_medusa.py)");
    PAGODA_ASSIGN_OR_RETURN(medusa, MedusaHeads::load(path, mc.hidden_size, mc.vocab_size));
  }
  // Trees (lookahead, Medusa) are proposed whole; auto planning keeps a
  // prefix of their nodes. Medusa's come best first, each priced by its
  // calibrated score (MedusaProposer::node_gains). Lookahead's come chain by
  // chain, priced as a chain with the sequence's acceptance.
  e->tree_gains_ = config.spec_method == SpecMethod::kMedusa;
  e->spec_auto_ = (e->proposer_ || medusa) && config.num_spec_tokens == 0;
  e->num_spec_tokens_ = config.num_spec_tokens > 0                     ? config.num_spec_tokens
                        : config.spec_method == SpecMethod::kLookahead ? config.lookahead.tree_size()
                        : medusa                                       ? kDefaultMedusaNodes
                                                                       : kMaxAutoSpecTokens;
  PAGODA_ASSIGN_OR_RETURN(e->runner_, ModelRunner::create(std::move(model), rc));  // repacks: last
  if (medusa) {
    e->tree_fill_depth_ = medusa->num_heads;
    // The heads end in the target's own output matrix (a Q8_0 copy of a
    // wider one: spec/head_projection.h), on its thread pool.
    ModelRunner* runner = e->runner_.get();
    auto projection = std::make_shared<const HeadProjection>(runner->model().output_weight(), runner->pool());
    e->proposer_ = std::make_unique<MedusaProposer>(
        std::move(*medusa), mc.vocab_size, [runner, projection](const float* hidden, int32_t rows, float* logits) {
          projection->project(hidden, rows, logits, runner->pool());
        });
  }
  if (e->draft_) {
    PAGODA_RETURN_IF_ERROR(e->draft_->start(static_cast<int32_t>(rc.num_blocks),
                                            static_cast<int32_t>(rc.num_host_blocks), rc.block_size, rc.kv_cache_dtype,
                                            e->runner_->pool()));
  }
  if (e->spec_auto_) e->profile_step_cost(config.sched.max_num_batched_tokens);
  if (e->spec_auto_ && medusa) e->profile_tree_fill();
  if (tiers || config.kv_export) {
    PAGODA_ASSIGN_OR_RETURN(e->kv_ns_, kv_tier_namespace(model_path, mc, rc));
    e->kv_export_ = config.kv_export;
  }
  if (tiers) PAGODA_RETURN_IF_ERROR(e->open_kv_tiers(config));
  e->slo_reject_ = config.slo_reject;
  if (config.sched.policy == SchedPolicy::kSlo && config.sched.step_time.per_token_s <= 0)
    e->profile_slo_step_time(config.sched.max_num_batched_tokens);
  return e;
}

Status Engine::check_kv_room(const KvPolicy& p, const std::string& what) const {
  const int64_t need = bounded_kv_tokens(p, kv_manager_->block_size());
  if (capacity_tokens_ >= need) return Status::ok();
  return invalid_argument(what + std::string(kv_policy_name(p.kind)) + " needs KV room for " + std::to_string(need) +
                          " tokens per sequence; the cache holds " + std::to_string(capacity_tokens_));
}

Result<KvPolicy> Engine::resolve_kv_policy(const std::optional<KvPolicyRequest>& request) const {
  if (!request) return kv_policy_;
  KvPolicy p = kv_policy_;
  if (request->kind != p.kind) {
    // The server's window belongs to its own policy: another one starts
    // from its default; sinks and budget carry over.
    p.kind = request->kind;
    p.window = 0;
  }
  if (request->sinks) p.sinks = *request->sinks;
  if (request->budget) p.budget = *request->budget;
  if (request->window) p.window = *request->window;
  p = with_default_window(p);
  PAGODA_RETURN_IF_ERROR(validate_kv_policy(p, index_sensitive_));
  if (model_config().has_recurrent_layers() && !p.full())
    return invalid_argument("kv_policy " + std::string(kv_policy_name(p.kind)) +
                            " evicts tokens, which this model's recurrent layers cannot forget");
  if (kv_manager_->num_kv_groups() > 1 && !p.full())
    return invalid_argument("kv_policy " + std::string(kv_policy_name(p.kind)) +
                            ": this server frees sliding-window KV blocks already (start it with --swa-full to "
                            "evict tokens instead)");
  PAGODA_RETURN_IF_ERROR(check_kv_room(p, "kv_policy "));
  return p;
}

Status Engine::validate(const RequestSpec& spec) const {
  const ModelConfig& mc = model_config();
  if (spec.prompt.empty()) return invalid_argument("the prompt is empty");
  for (int32_t t : spec.prompt)
    if (t < 0 || t >= mc.vocab_size)
      return invalid_argument("prompt token id " + std::to_string(t) + " is out of range");
  if (spec.max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  if (spec.n < 1 || spec.n > 256) return invalid_argument("n must be in 1..256");
  if (spec.use_beam_search && (spec.beam_width < 1 || spec.beam_width > 64 || spec.n > spec.beam_width))
    return invalid_argument("beam search needs 1 <= n <= beam width <= 64");
  if (!(spec.slo_ttft_s >= 0 && spec.slo_tpot_s >= 0 && spec.slo_ttft_s < 1e9 && spec.slo_tpot_s < 1e9))
    return invalid_argument("slo targets must be non-negative numbers of seconds");
  if (spec.export_kv && !kv_export_)
    return invalid_argument("this instance does not hand out KV blocks (start it with --role prefill)");
  if (spec.use_beam_search && spec.grammar)
    return invalid_argument("structured output (a grammar, schema or regex) cannot be combined with beam search");
  PAGODA_ASSIGN_OR_RETURN(const KvPolicy policy, resolve_kv_policy(spec.kv_policy));
  const auto prompt_len = static_cast<int64_t>(spec.prompt.size());
  if (policy.streaming()) {
    // Any length: the cache keeps sinks and a window; positions stay inside it.
    if (prompt_len + spec.max_tokens > INT32_MAX) return out_of_range("prompt plus max_tokens exceeds 2^31 tokens");
  } else if (prompt_len >= max_model_len_)
    return out_of_range("the prompt has " + std::to_string(prompt_len) + " tokens but the context length is " +
                        std::to_string(max_model_len_));
  if (!policy.bounded() && prompt_len + 1 > capacity_tokens_)
    return out_of_range("the prompt needs more KV cache (" + std::to_string(prompt_len + 1) +
                        " tokens) than the whole pool holds (" + std::to_string(capacity_tokens_) + ")");
  for (int32_t t : spec.stop_token_ids)
    if (t < 0 || t >= mc.vocab_size) return invalid_argument("stop token id " + std::to_string(t) + " is out of range");
  return spec.sampling.validate(mc.vocab_size);
}

std::unique_ptr<Choice> Engine::make_choice(Request& req, int32_t index, const Sequence& base) {
  auto c = std::make_unique<Choice>();
  c->request = &req;
  c->seq = base;
  c->seq.index = index;
  c->seq.seq_id = SeqId{next_seq_id_++};
  SamplingParams sp = req.spec.sampling;
  if (sp.seed) sp.seed = *sp.seed + static_cast<uint64_t>(index);
  c->sampler = std::make_unique<Sampler>(sp, model_config().vocab_size);
  c->decoder = std::make_unique<StreamDecoder>(*tokenizer_);
  c->stops = std::make_unique<StopStringMatcher>(req.stops);  // one list for all choices
  if (req.spec.grammar) c->matcher = std::make_unique<grammar::Matcher>(req.spec.grammar);
  return c;
}

const grammar::TokenVocab& Engine::grammar_vocab() {
  if (!grammar_vocab_) grammar_vocab_ = make_grammar_vocab(*tokenizer_);
  return *grammar_vocab_;
}

Status check_slo_admission(double ttft_target_s, double predicted_s) {
  if (predicted_s <= ttft_target_s) return Status::ok();
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "the request cannot meet its time-to-first-token target: predicted %.0f ms for the prompt tokens "
                "queued ahead and its own, target %.0f ms (--slo-reject); retry later or relax slo.ttft_ms",
                1e3 * predicted_s, 1e3 * ttft_target_s);
  return resource_exhausted(buf);
}

Result<RequestId> Engine::add_request(RequestSpec spec, std::optional<RequestId> id_in) {
  PAGODA_RETURN_IF_ERROR(validate(spec));
  PAGODA_ASSIGN_OR_RETURN(const KvPolicy policy, resolve_kv_policy(spec.kv_policy));
  // H2O's attention scores are allocated when a sequence first needs them.
  if (policy.h2o()) PAGODA_RETURN_IF_ERROR(runner_->enable_kv_scores());
  const RequestId id = id_in.value_or(RequestId{next_id_});
  next_id_ = std::max(next_id_, id.value) + 1;
  if (requests_.count(id)) return invalid_argument("duplicate request id " + std::to_string(id.value));
  auto req = std::make_unique<Request>();
  const auto prompt_len = static_cast<int64_t>(spec.prompt.size());
  req->timing.arrival = now();
  Sequence base;
  base.request_id = id;
  base.tokens = spec.prompt;
  base.num_prompt_tokens = static_cast<int32_t>(prompt_len);
  // Streaming has neither limit; H2O keeps positions (the context limits)
  // but not memory (the pool does not). A SnapKV prompt over the budget is
  // held whole only until it is compressed: afterwards the pool limits the
  // compressed cache (budget + output), so it admits by that size.
  int64_t pool_limit = policy.bounded() ? INT32_MAX : capacity_tokens_;
  if (policy.snapkv() && prompt_len > policy.budget) pool_limit += prompt_len - policy.budget;
  base.max_total_tokens = static_cast<int32_t>(
      policy.streaming() ? prompt_len + spec.max_tokens
                         : std::min<int64_t>({prompt_len + spec.max_tokens, max_model_len_, pool_limit}));
  base.kv_policy = policy;
  base.priority = spec.priority;
  base.arrival_time = req->timing.arrival;
  base.slo_ttft_s = spec.slo_ttft_s;
  base.slo_tpot_s = spec.slo_tpot_s;
  req->stops = StopStringMatcher::share(std::move(spec.stop));
  req->spec = std::move(spec);
  req->choices.push_back(make_choice(*req, 0, base));
  req->strategy = make_decoding_strategy(*req, *this);
  scheduler_->add(&req->choices[0]->seq);
  requests_.emplace(id, std::move(req));
  return id;
}

bool Engine::abort(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  for (auto& c : it->second->choices)
    if (!c->finished) scheduler_->finish(&c->seq, FinishReason::kAbort);
  requests_.erase(it);
  return true;
}

Choice& Engine::fork_choice(Request& req, const Choice& parent) {
  req.choices.push_back(make_choice(req, static_cast<int32_t>(req.choices.size()), parent.seq));
  Choice& child = *req.choices.back();
  kv_manager_->fork(parent.seq.seq_id, child.seq.seq_id);
  if (runner_->has_recurrent_state())
    runner_->copy_state(kv_manager_->state_slot(parent.seq.seq_id), kv_manager_->state_slot(child.seq.seq_id));
  scheduler_->add_running(&child.seq);
  return child;
}

void Engine::accept_drafts(Choice& c, int32_t num_drafts, std::span<const int32_t> tree_path, bool rejected) {
  const auto num_accepted = static_cast<int32_t>(tree_path.size());
  const bool lookahead_tree = !tree_gains_ && !c.seq.draft_parents.empty();
  if (!c.finished) {  // a finished choice's blocks are gone already
    scheduler_->accept_drafts(&c.seq, num_accepted);
    if (draft_) DraftModel::after_verify(c.seq, num_drafts, num_accepted);
  }
  if (num_drafts == 0) return;
  // Lookahead's trees are priced as a chain of all their nodes (their
  // chains come one after another, not best first): any node left over
  // counts against them, as for a chain.
  if (lookahead_tree) rejected = num_accepted < num_drafts;
  stats_.record_verification(num_drafts, num_accepted, rejected);
  c.spec_acceptance.record(num_accepted, rejected);
  // Drafts the planner did not size (a fixed K, or the first ones before
  // any plan) carry no planned gain and teach the calibration nothing.
  if (spec_auto_ && c.spec_planned_gain > 0) gain_calibration_.record(c.spec_planned_gain, num_accepted);
  c.spec_planned_gain = 0;
}

std::span<const float> Engine::hidden_of(const float* logits_row) const {
  const auto vocab = static_cast<size_t>(model_config().vocab_size);
  const auto offset = static_cast<size_t>(logits_row - step_logits_.data());
  PAGODA_CHECK(logits_row >= step_logits_.data() && offset < step_logits_.size() && offset % vocab == 0);
  return {runner_->model().output_hidden(static_cast<int64_t>(offset / vocab)),
          static_cast<size_t>(model_config().hidden_size)};
}

void Engine::move_draft_kv(const Sequence& seq, int32_t from_pos, int32_t to_pos) {
  PAGODA_CHECK(!draft_ && to_pos <= from_pos && kv_manager_->num_kv_groups() == 1);  // trees: no sliding windows
  if (from_pos == to_pos) return;
  runner_->move_kv_row(kv_manager_->slot_of(seq.seq_id, from_pos), kv_manager_->slot_of(seq.seq_id, to_pos));
}

void Engine::profile_slo_step_time(int32_t max_num_batched_tokens) {
  std::vector<int32_t> sizes;
  for (int32_t n : {1, 8, 32, 128, 256, 512})
    if (n <= max_num_batched_tokens) sizes.push_back(n);
  const auto times = runner_->profile_step_times(sizes, 64);
  if (times.size() < 2) return;
  // Least squares of seconds = fixed + per_token * tokens.
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [n, s] : times) {
    sx += n;
    sy += s;
    sxx += static_cast<double>(n) * n;
    sxy += n * s;
  }
  const double k = static_cast<double>(times.size());
  const double per_token = std::max(0.0, (k * sxy - sx * sy) / std::max(k * sxx - sx * sx, 1e-12));
  const double fixed = std::max(0.0, (sy - per_token * sx) / k);
  scheduler_->set_step_time({fixed, per_token});
}

void Engine::profile_step_cost(int32_t max_num_batched_tokens) {
  // Decode-sized batches; beyond the last the model extends linearly.
  std::vector<int32_t> sizes;
  for (int32_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 20, 24, 32, 48, 64})
    if (n <= max_num_batched_tokens) sizes.push_back(n);
  constexpr int32_t kContext = 64;
  auto times = runner_->profile_step_times(sizes, kContext);
  // A KV cache too small for even one profile leaves the model empty: the
  // proposer's drafts are then verified untrimmed.
  if (!times.empty()) {
    // Attention past the profile's context: the verification sizes again
    // after a long context (as long as the model and the cache allow, at
    // most kLongContext), per sequence and per token (StepCostModel).
    constexpr int32_t kLongContext = 1024;
    std::vector<int32_t> verify_sizes;
    for (int32_t n : {1, 4, 8, 16})
      if (n <= max_num_batched_tokens) verify_sizes.push_back(n);
    const int32_t room =
        std::min(max_model_len_, runner_->num_kv_blocks() * kv_manager_->block_size()) - verify_sizes.back() - 1;
    const int32_t long_context = std::min(kLongContext, room);
    const auto base = times;
    step_cost_ = StepCostModel(std::move(times));
    if (long_context >= 4 * kContext) {
      const AttentionFit fit =
          fit_attention(base, kContext, runner_->profile_step_times(verify_sizes, long_context), long_context);
      step_cost_.set_attention(kContext, fit.per_seq_key, fit.per_token_key);
    }
  }
  if (draft_) {
    auto draft_times = draft_->profile_step_times(sizes, kContext);
    if (!draft_times.empty()) draft_cost_ = StepCostModel(std::move(draft_times));
  }
}

namespace {

// Every scheduled sequence decodes one token (plus its drafts): the steps
// SpecGate compares.
bool decode_only(const SchedulerOutput& out) {
  return std::all_of(out.scheduled.begin(), out.scheduled.end(), [](const ScheduledSeq& s) {
    return s.num_new_tokens - s.num_draft_tokens == 1 && s.num_logits > 0;
  });
}

// The draft model's catch-up rows a sequence's next draft is charged: its
// lag spread over the steps it may draft from then on (at most
// kCatchUpHorizon, at most the tokens it has left). Charged in full, a
// request's prompt would keep it from ever drafting where drafts pay in the
// steady state (the lag only grows); charged nothing, sequences planned
// away and probed again pay their lag at every probe.
int32_t amortized_catch_up(const Sequence& seq) {
  constexpr int32_t kCatchUpHorizon = 8;
  const int32_t left = std::max(1, seq.max_total_tokens - seq.num_tokens());
  const int32_t horizon = std::min(kCatchUpHorizon, left);
  return (seq.num_draft_lag + horizon - 1) / horizon;
}

}  // namespace

void Engine::plan_drafts(const SchedulerOutput& out) {
  if (!spec_auto_ || step_cost_.empty()) return;
  // The next step is forecast as this one without its drafts: the same
  // decoding sequences and prefill chunks.
  int32_t num_base = 0;
  StepContext base_context;
  for (const ScheduledSeq& s : out.scheduled) {
    num_base += s.num_new_tokens - s.num_draft_tokens;
    base_context.add(s.seq->num_cache_tokens(), s.num_new_tokens - s.num_draft_tokens, step_cost_.context());
  }
  const EngineStats& st = stats_.stats();
  const double prior = estimate_acceptance(static_cast<double>(st.num_accepted_draft_tokens),
                                           static_cast<double>(st.num_spec_rejections), 0.5);
  // Drafts are proposed when a choice consumes its logits, so every choice
  // holding drafts was scheduled in this step (requests leave in update()).
  std::vector<Choice*> choices;
  std::vector<DraftCandidate> candidates;
  for (const ScheduledSeq& s : out.scheduled) {
    if (s.num_logits == 0) continue;
    Choice& c = *requests_.at(s.seq->request_id)->choices.at(s.seq->index);
    if (c.finished || c.seq.draft_tokens.empty()) continue;
    choices.push_back(&c);
    const AcceptanceCounts& a = c.spec_acceptance;
    candidates.push_back({optimistic_acceptance(a.num_accepted, a.num_rejected, prior),
                          static_cast<int32_t>(c.seq.draft_tokens.size()),
                          {},
                          draft_ ? amortized_catch_up(c.seq) : 0,
                          c.seq.num_cache_tokens()});
  }
  if (choices.empty()) return;
  if (tree_gains_) {
    // A tree's nodes by their calibrated scores (the sequence's own record
    // of its heads, pulled towards the engine's).
    tree_gain_rows_.resize(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) {
      proposer_->node_gains(choices[i]->spec_state.get(), candidates[i].max_drafts, &tree_gain_rows_[i]);
      tree_gain_rows_[i].resize(static_cast<size_t>(candidates[i].max_drafts), 0.0);
      candidates[i].node_gains = tree_gain_rows_[i];
    }
  }
  std::vector<int32_t> k = plan_draft_lengths(
      step_cost_, num_base, candidates, draft_ && !draft_cost_.empty() ? &draft_cost_ : nullptr,
      tree_fill_seconds_per_head_, std::max(1, tree_fill_depth_), gain_calibration_.scale(), nullptr, base_context);
  // Could drafts accepted half as often as perfect ones pay (a chain of
  // them in place of each sequence the planner left without drafts and
  // whose record is empty or faded)? Only then is such a sequence probed,
  // the sooner the more they could win (probe_scale). A probe pays a draft
  // model's whole lag, not a share: it may be the sequence's only draft.
  std::vector<int32_t> ideal;
  bool probe = false;
  for (size_t i = 0; i < choices.size(); ++i) {
    const AcceptanceCounts& a = choices[i]->spec_acceptance;
    probe = probe || (k[i] == 0 &&
                      a.probed(0, candidates[i].max_drafts, true, AcceptanceCounts::kProbeBelow * kMaxProbeScale) > 0);
  }
  if (probe) {
    std::vector<DraftCandidate> best = candidates;
    for (size_t i = 0; i < best.size(); ++i)
      best[i] = {1.0, best[i].max_drafts, {}, draft_ ? choices[i]->seq.num_draft_lag : 0, best[i].context};
    double could_gain = 0;
    ideal =
        plan_draft_lengths(step_cost_, num_base, best, draft_ && !draft_cost_.empty() ? &draft_cost_ : nullptr,
                           tree_fill_seconds_per_head_, std::max(1, tree_fill_depth_), 0.5, &could_gain, base_context);
    probe_scale_ = probe_scale(could_gain);
  }
  const double probe_below = AcceptanceCounts::kProbeBelow * probe_scale_;
  int32_t num_planned = num_base;
  StepContext planned_context = base_context;
  for (size_t i = 0; i < k.size(); ++i) {
    num_planned += k[i];
    planned_context.add_drafts(candidates[i].context, k[i], step_cost_.context());
  }
  int32_t num_kept = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    AcceptanceCounts& a = choices[i]->spec_acceptance;
    const bool could_pay = !ideal.empty() && ideal[i] > 0;
    int32_t keep = a.probed(k[i], candidates[i].max_drafts, could_pay, probe_below);
    if (keep > k[i]) {
      // A probe is paid from the probe budget (its marginal step time, the
      // draft model's catch-up and drafts, Medusa's heads), or not made.
      StepContext probed_context = planned_context;
      probed_context.add_drafts(candidates[i].context, keep - k[i], step_cost_.context());
      double cost = step_cost_.seconds(num_planned + keep - k[i], probed_context) -
                    step_cost_.seconds(num_planned, planned_context);
      if (draft_ && !draft_cost_.empty()) cost += draft_cost_.seconds(choices[i]->seq.num_draft_lag + keep);
      cost += tree_fill_seconds_per_head_ * heads_run(keep, tree_fill_depth_);
      if (probe_budget_.spend(cost)) {
        num_planned += keep - k[i];
        planned_context = probed_context;
      } else {
        keep = k[i];
      }
    }
    choices[i]->seq.resize_drafts(static_cast<size_t>(keep));
    choices[i]->spec_planned_gain = planned_gain(candidates[i], keep);
    // Steps skipped while the plans were idle count as planned away.
    if (keep == 0)
      for (int32_t f = 0; f < std::max(1, plan_idle_ ? plan_idle_steps_ : 1); ++f) a.fade();
    num_kept += keep;
  }
  plan_idle_ = num_kept == 0;
  plan_idle_steps_ = 0;
  plan_idle_bucket_ = std::bit_width(out.scheduled.size());
}

std::shared_ptr<const KVBlockExport> Engine::export_prompt_kv(const Choice& c) const {
  auto e = std::make_shared<KVBlockExport>();
  const KVStorage& storage = runner_->kv_storage();
  e->ns = kv_ns_;
  e->block_size = kv_manager_->block_size();
  e->payload_bytes = storage.bytes_per_block_all();
  const Sequence& seq = c.seq;
  if (seq.num_evicted > 0 || !kv_manager_->contains(seq.seq_id)) return e;
  const std::vector<BlockId>& table = kv_manager_->block_table(seq.seq_id);
  const int32_t bs = e->block_size;
  const int32_t whole =
      std::min({seq.num_prompt_tokens, seq.num_computed_tokens, kv_manager_->num_tokens(seq.seq_id)}) / bs;
  BlockKey key = kv_ns_;
  for (int32_t i = 0; i < whole && i < static_cast<int32_t>(table.size()); ++i) {
    const std::span<const int32_t> t(seq.tokens.data() + static_cast<size_t>(i) * bs, static_cast<size_t>(bs));
    key = chain_block_key(key, t);
    KVBlockExport::Block b{key, std::vector<int32_t>(t.begin(), t.end()), std::vector<uint8_t>(e->payload_bytes)};
    storage.read_block(table[static_cast<size_t>(i)], b.payload.data());
    e->blocks.push_back(std::move(b));
  }
  return e;
}

Status Engine::check_kv_import(const KVBlockExport& e) const {
  if (!kv_tiers_)
    return invalid_argument(
        "this instance has no KV tier to receive blocks into (--role decode sets one; or "
        "--kv-host-size)");
  if (e.ns != kv_ns_)
    return invalid_argument(
        "the KV blocks come from another model file or KV layout (the prefill and decode "
        "instances must serve the same file with the same --kv-cache-dtype and --block-size)");
  if (e.block_size != kv_manager_->block_size() || e.payload_bytes != runner_->kv_storage().bytes_per_block_all())
    return invalid_argument("the KV blocks have another block shape");
  return Status::ok();
}

void Engine::import_kv(const KVBlockExport& e) {
  if (!check_kv_import(e).is_ok()) return;
  for (const KVBlockExport::Block& b : e.blocks) kv_tiers_->import_block(b.key, b.tokens, b.payload);
}

void Engine::finish_choice(Choice& c, FinishReason reason) {
  PAGODA_CHECK(!c.finished);
  if (c.request->spec.export_kv && !c.request->kv_export) c.request->kv_export = export_prompt_kv(c);
  scheduler_->finish(&c.seq, reason);
  c.finished = true;
  ++c.request->num_finished;
}

std::vector<RequestOutput> Engine::step() {
  const double t_start = now();
  const SchedulerOutput out = scheduler_->schedule(t_start);  // 1. schedule
  if (out.empty()) {
    last_step_start_ = -1;  // idle: the gap to the next step is not a step's time
    return {};
  }
  // The previous step's time as decodes see it: start to start.
  if (last_step_start_ >= 0) scheduler_->observe_step(last_step_tokens_, t_start - last_step_start_);
  last_step_start_ = t_start;
  last_step_tokens_ = out.num_batched_tokens;
  mark_scheduled(out, t_start);
  StepContext step_context;  // how far this step's attention reaches (the cost model learns from it)
  if (spec_auto_ && learn_step_cost_)
    for (const ScheduledSeq& s : out.scheduled)
      step_context.add(s.seq->num_cache_tokens(), s.num_new_tokens, step_cost_.context());
  const double draft_seconds = draft_                                              ? run_draft_model(out)
                               : proposer_ && proposer_->drafts_after_scheduling() ? fill_tree_drafts(out)
                                                                                   : 0.0;  // (drafts)
  const double t_execute = now();
  const std::span<float> logits = runner_->execute(out, *kv_manager_);  // 2. execute
  const double t_executed = now();
  scheduler_->on_step_done(out);
  const double kv_waste = kv_manager_->kv_waste();
  // A pure-decode step next (every scheduled sequence decoding, as in this
  // one): the gate may hold its drafts back where they measured slower, and
  // then none are proposed.
  drafts_held_ = spec_auto_ && !step_cost_.empty() && decode_only(out) &&
                 !spec_gate_.allow(static_cast<int32_t>(out.scheduled.size()));
  if (plan_idle_) {
    // Replan now and then, and at once where the batch has grown or shrunk
    // by a power of two (a step's price per token moves with it).
    const int32_t bucket = std::bit_width(out.scheduled.size());
    if (bucket != plan_idle_bucket_) plan_idle_ = false;
    plan_skipped_ = plan_idle_ && ++plan_idle_steps_ % kReplanEvery != 0;
  }
  const double t_sample = now();
  // What the planner expected of this step's drafts (SpecGate::record).
  double planned_gains = 0;
  bool drafted = false;
  if (spec_auto_ && decode_only(out)) {
    for (const ScheduledSeq& s : out.scheduled) {
      if (s.num_draft_tokens == 0) continue;
      drafted = true;
      planned_gains += requests_.at(s.seq->request_id)->choices.at(s.seq->index)->spec_planned_gain;
    }
  }
  const double gain_scale = gain_calibration_.scale();
  std::vector<RequestOutput> outputs = sample(out, logits);  // 3. sample / verify
  drafts_held_ = false;
  plan_skipped_ = false;
  plan_drafts(out);  // and size the next drafts
  stats_.record_phases(t_executed - t_execute, now() - t_sample);
  int64_t num_generated = 0;
  for (const RequestOutput& o : outputs) num_generated += static_cast<int64_t>(o.new_tokens.size());
  const double seconds = now() - t_start;
  stats_.record_step(out, num_generated, seconds, kv_waste);
  if (spec_auto_ && decode_only(out)) {
    const double num_tokens = drafted ? static_cast<double>(out.scheduled.size()) + gain_scale * planned_gains
                                      : static_cast<double>(num_generated);
    spec_gate_.record(static_cast<int32_t>(out.scheduled.size()), drafted, num_tokens, seconds);
  }
  // Drafts are priced as decode steps' tokens, so the model learns from
  // pure-decode steps only: with prefill steps in the fit, the line's slope
  // came from them (matmuls, short contexts) and its offset from the decode
  // steps, and a draft in a step of 64 sequences was priced at a third of
  // what it cost (attention over its context; bench/RESULTS.md, 2026-12-06).
  if (spec_auto_ && learn_step_cost_ && decode_only(out))
    step_cost_.observe(out.num_batched_tokens, seconds - draft_seconds, step_context);
  if (spec_auto_) probe_budget_.earn(seconds, probe_scale_);
  update(outputs);  // 4. update: drop finished requests
  return outputs;
}

double Engine::run_draft_model(const SchedulerOutput& out) {
  const double t0 = now();
  draft_->copy_blocks(out);
  draft_jobs_.clear();
  for (const ScheduledSeq& s : out.scheduled) {
    Sequence& seq = *s.seq;
    // Sequences under a bounded KV policy never speculate (their rows move
    // or go); the draft does not follow them.
    if (!seq.kv_policy->full()) {
      PAGODA_CHECK(s.num_draft_tokens == 0);
      continue;
    }
    DraftModel::Job job;
    job.seq = &seq;
    job.num_known = s.num_new_tokens - s.num_draft_tokens;
    job.num_drafts = s.num_draft_tokens;
    if (job.num_drafts > 0) {
      Choice& c = *requests_.at(seq.request_id)->choices.at(seq.index);
      if (!c.draft_sampler) {
        SamplingParams sp = c.sampler->params();
        if (sp.seed) sp.seed = *sp.seed ^ 0x9e3779b97f4a7c15ull;  // its own stream, reproducible
        c.draft_sampler = std::make_unique<Sampler>(sp, model_config().vocab_size);
      }
      job.sampler = c.draft_sampler.get();
      job.q = &c.draft_q;
    }
    draft_jobs_.push_back(job);
  }
  draft_->run(draft_jobs_, *kv_manager_);
  if (spec_auto_ && learn_step_cost_ && !draft_cost_.empty())
    for (const auto& [n, sec] : draft_->pass_times()) draft_cost_.observe(n, sec);
  const double seconds = now() - t0;
  stats_.record_draft_seconds(seconds);
  return seconds;
}

void Engine::profile_tree_fill() {
  // One sequence's one-node tree from a zero hidden state, the fastest of
  // three. It runs heads_run(1, heads) heads (the tree's and the next, for
  // the calibration) plus the tree's building, and counts as one head's
  // pass: a start the running mean (fill_tree_drafts) takes down. Dividing
  // by the heads run made Medusa slower at batch 1 (1.89x vs 2.05x over 40
  // paired rounds, bench/RESULTS.md 2026-12-06): the pass has a fixed part.
  std::unique_ptr<ProposerState> st = proposer_->make_state();
  const std::vector<float> hidden(static_cast<size_t>(model_config().hidden_size), 0.0f);
  std::vector<int32_t> draft, parents;
  double best = 1e9;
  for (int r = 0; r < 3; ++r) {
    proposer_->set_hidden(st.get(), hidden);
    proposer_->propose({}, 1, &draft);
    const TreeFill fill{st.get(), &draft, &parents};
    const double t0 = now();
    proposer_->fill_trees({&fill, 1});
    best = std::min(best, now() - t0);
  }
  tree_fill_seconds_per_head_ = best;
}

double Engine::fill_tree_drafts(const SchedulerOutput& out) {
  const double t0 = now();
  std::vector<TreeFill> fills;
  int32_t num_heads_run = 0;
  for (const ScheduledSeq& s : out.scheduled) {
    if (s.num_draft_tokens == 0) continue;
    num_heads_run += heads_run(s.num_draft_tokens, tree_fill_depth_);
    Choice& c = *requests_.at(s.seq->request_id)->choices.at(s.seq->index);
    PAGODA_CHECK(c.spec_state && static_cast<int32_t>(c.seq.draft_tokens.size()) == s.num_draft_tokens);
    fills.push_back({c.spec_state.get(), &c.seq.draft_tokens, &c.seq.draft_parents});
  }
  if (!fills.empty()) proposer_->fill_trees(fills);
  const double seconds = now() - t0;
  // What one sequence's heads cost, for the planner: a running mean from
  // the start-up profile, a spike (a busy machine) counting at most twice
  // the estimate so one slow step cannot switch drafting off for good.
  if (!fills.empty() && spec_auto_ && learn_step_cost_) {
    const double per_head = seconds / static_cast<double>(std::max(1, num_heads_run));
    tree_fill_seconds_per_head_ =
        0.9 * tree_fill_seconds_per_head_ + 0.1 * std::min(per_head, 2 * tree_fill_seconds_per_head_);
  }
  stats_.record_draft_seconds(seconds);
  return seconds;
}

void Engine::mark_scheduled(const SchedulerOutput& out, double t) {
  for (const ScheduledSeq& s : out.scheduled) {
    Request& r = *requests_.at(s.seq->request_id);
    if (s.seq->index != 0 || r.timing.first_scheduled >= 0) continue;
    r.timing.first_scheduled = t;
    r.num_cached_tokens = s.seq->num_cached_tokens;
    stats_.record_admission(*s.seq);
  }
}

std::vector<RequestOutput> Engine::sample(const SchedulerOutput& out, std::span<float> logits) {
  std::vector<RequestOutput> outputs;
  std::vector<Request*> touched;
  const auto vocab_size = static_cast<size_t>(model_config().vocab_size);
  step_logits_ = logits;
  size_t row = 0;
  for (const ScheduledSeq& s : out.scheduled) {
    if (s.num_logits == 0) continue;
    Request& req = *requests_.at(s.seq->request_id);
    req.strategy->on_logits(*req.choices.at(s.seq->index), &logits[row * vocab_size], s.num_logits, outputs);
    if (std::find(touched.begin(), touched.end(), &req) == touched.end()) touched.push_back(&req);
    row += s.num_logits;
  }
  PAGODA_CHECK(row * vocab_size == logits.size());
  for (Request* req : touched) req->strategy->end_step(outputs);
  step_logits_ = {};
  return outputs;
}

void Engine::update(std::vector<RequestOutput>& outputs) {
  // The last output of a request whose strategy is done ends its stream.
  for (auto it = outputs.rbegin(); it != outputs.rend(); ++it) {
    auto req = requests_.find(it->id);
    if (req == requests_.end() || !req->second->strategy->done()) continue;
    it->request_finished = true;
    const Request& r = *req->second;
    it->kv_export = r.kv_export;
    if (r.spec.slo_ttft_s > 0 || r.spec.slo_tpot_s > 0) {
      const RequestTiming& t = r.timing;
      const int32_t n = it->num_output_tokens;
      const double tpot = n > 1 ? (t.last_token - t.first_token) / (n - 1) : 0;
      const bool ttft_ok = r.spec.slo_ttft_s <= 0 || (t.first_token >= 0 && t.ttft() <= r.spec.slo_ttft_s);
      const bool tpot_ok = r.spec.slo_tpot_s <= 0 || tpot <= r.spec.slo_tpot_s;
      stats_.record_slo(ttft_ok && tpot_ok && it->finish_reason != FinishReason::kAbort &&
                        it->finish_reason != FinishReason::kError);
    }
    requests_.erase(req);
    stats_.record_finished_request();
  }
}

}  // namespace pagoda
