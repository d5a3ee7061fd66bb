#include "engine/model_runner.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/timing.h"
#include "kernels/attention.h"

namespace pagoda {

ModelRunner::KVShape ModelRunner::kv_shape(const ModelConfig& m) {
  if (m.num_kv_layers() == 0) return {1, 1, 32};
  return {m.num_kv_layers(), m.num_kv_heads, m.head_dim};
}

int64_t ModelRunner::bytes_per_block(const ModelConfig& m, const RunnerConfig& c) {
  const KVShape s = kv_shape(m);
  return static_cast<int64_t>(
      KVStorage::bytes_per_block(s.num_layers, c.block_size, s.num_kv_heads, s.head_dim, c.kv_cache_dtype));
}

Status ModelRunner::validate(const ModelConfig& model, const RunnerConfig& config) {
  if (config.num_threads < 0) return invalid_argument("the thread count must not be negative");
  if (config.block_size < 1 || config.block_size > 1024) return invalid_argument("block size must be in 1..1024");
  if (!kernels::is_kv_dtype(config.kv_cache_dtype))
    return invalid_argument("KV cache dtype must be f32, f16, q8_0 or q4_0");
  if (config.num_blocks < 1) return invalid_argument("the KV cache needs at least one block");
  if (config.num_host_blocks < 0) return invalid_argument("the swap tier must not have a negative size");
  PAGODA_RETURN_IF_ERROR(KVCacheManager::validate_config(config.num_blocks, config.block_size));
  return KVCacheManager::validate_config(config.num_host_blocks, config.block_size);
}

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(std::unique_ptr<LlamaModel> model,
                                                         const RunnerConfig& config) {
  PAGODA_RETURN_IF_ERROR(validate(model->config(), config));
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  r->model_ = std::move(model);
  if (config.comm != nullptr && config.comm->size() > 1) PAGODA_RETURN_IF_ERROR(r->start_distributed(config));
  const ModelConfig& mc = r->model_->config();  // this rank's heads under tensor parallelism
  KVShape shape = kv_shape(mc);
  if (r->pp_ > 1) shape.num_layers = r->model_->num_stage_kv_layers();  // this stage's layers
  if (config.kv_groups.grouped()) {                                     // a page holds one group's layers
    if (r->comm_ || config.kv_scores) return invalid_argument("KV groups run in one process, without KV scores");
    if (static_cast<int32_t>(config.kv_groups.group.size()) != shape.num_layers)
      return invalid_argument("the KV group layout does not match the model's attention layers");
    shape.num_layers = config.kv_groups.layers_per_page;
    r->model_->set_kv_groups(config.kv_groups);
  }
  auto storage = [&](int64_t num_blocks) {
    return KVStorage::create(shape.num_layers, static_cast<int32_t>(num_blocks), config.block_size, shape.num_kv_heads,
                             shape.head_dim, config.kv_cache_dtype);
  };
  PAGODA_ASSIGN_OR_RETURN(r->kv_storage_, storage(config.num_blocks));
  if (config.kv_scores) PAGODA_RETURN_IF_ERROR(r->kv_storage_->enable_scores());
  if (config.num_host_blocks > 0) {
    PAGODA_ASSIGN_OR_RETURN(r->host_storage_, storage(config.num_host_blocks));
    if (config.kv_scores) PAGODA_RETURN_IF_ERROR(r->host_storage_->enable_scores());
  }
  r->block_size_ = config.block_size;
  if (r->model_->state_floats_per_seq() > 0)
    r->state_ = std::make_unique<StateStorage>(r->model_->state_floats_per_seq());
  r->pool_ = std::make_unique<ThreadPool>(config.num_threads > 0 ? config.num_threads : default_num_threads());
  if (config.bf16_dot) r->model_->use_bf16_dot();
  if (config.repack) r->model_->repack(*r->pool_, config.pack_cache_dir);
  return r;
}

Status ModelRunner::enable_kv_scores() {
  PAGODA_RETURN_IF_ERROR(kv_storage_->enable_scores());
  return host_storage_ ? host_storage_->enable_scores() : Status::ok();
}

ModelRunner::~ModelRunner() {
  if (comm_ && comm_->rank() == 0) {
    tp_bytes_.clear();  // an empty step: the other ranks stop
    comm_->broadcast(&tp_bytes_);
  }
}

void ModelRunner::copy_blocks(const StepCopies& out) {
  // Streaming eviction acts on the blocks as the last step left them.
  for (const BlockCopy& c : out.evict_cow) kv_storage_->copy_block(c.src, c.dst);
  if (!out.key_shifts.empty()) model_->shift_keys(out.key_shifts, *kv_storage_, *pool_);
  // Device -> host next: a block swapped out may be reused this very step.
  PAGODA_CHECK((out.swap_out.empty() && out.swap_in.empty()) || host_storage_);
  for (const BlockCopy& c : out.swap_out) kv_storage_->copy_block_to(c.src, *host_storage_, c.dst);
  for (const BlockCopy& c : out.swap_in) host_storage_->copy_block_to(c.src, *kv_storage_, c.dst);
  for (const BlockCopy& c : out.cow) kv_storage_->copy_block(c.src, c.dst);
}

void ModelRunner::add_group_tables(const KVCacheManager* kv, SeqId seq, std::span<const BlockId> table0) {
  const KVGroupLayout& layout = model_->kv_groups();
  if (!layout.grouped()) return;
  const size_t other = static_cast<size_t>(layout.num_groups - 1);
  const size_t slice = batch_.seqs.size();
  PAGODA_CHECK(group_tables_.size() >= (slice + 1) * other);  // sized before the first slice: pointers stay put
  for (int32_t g = 1; g < layout.num_groups; ++g) {
    std::vector<BlockId>& t = group_tables_[slice * other + static_cast<size_t>(g - 1)];
    if (kv) {
      kv->group_table(seq, g, &t);
    } else {
      t.assign(table0.begin(), table0.end());  // profiling: every group on the same pages
    }
    batch_.group_tables.push_back(t.data());
  }
}

void ModelRunner::add_group_slots() {
  const KVGroupLayout& layout = model_->kv_groups();
  if (!layout.grouped()) return;
  const size_t other = static_cast<size_t>(layout.num_groups - 1);
  const auto bs = static_cast<int64_t>(block_size_);
  batch_.group_slots.resize(other * batch_.tokens.size());
  for (size_t g = 0; g < other; ++g)
    for (size_t i = 0; i < batch_.seqs.size(); ++i) {
      const SeqSlice& s = batch_.seqs[i];
      const BlockId* table = batch_.group_tables[i * other + g];
      for (int32_t t = s.token_begin; t < s.token_begin + s.num_tokens; ++t) {
        const int32_t p = batch_.cache_positions[static_cast<size_t>(t)];
        PAGODA_CHECK(table[p / bs].value >= 0);  // a write inside the window
        batch_.group_slots[g * batch_.tokens.size() + static_cast<size_t>(t)] = table[p / bs].value * bs + p % bs;
      }
    }
}

void ModelRunner::build_batch(const SchedulerOutput& out, const KVCacheManager& kv) {
  batch_.clear();
  const int32_t bs = kv.block_size();
  if (model_->kv_groups().grouped())
    group_tables_.resize(out.scheduled.size() * static_cast<size_t>(model_->kv_groups().num_groups - 1));
  for (const ScheduledSeq& s : out.scheduled) {
    const Sequence& seq = *s.seq;
    PAGODA_CHECK(s.num_logits >= 0 && s.num_logits <= s.num_new_tokens);
    const std::vector<BlockId>& table = kv.block_table(seq.seq_id);
    SeqSlice slice;
    slice.token_begin = static_cast<int32_t>(batch_.tokens.size());
    slice.num_tokens = s.num_new_tokens;
    slice.kv_len = seq.num_cache_tokens() + s.num_new_tokens;
    slice.block_table = table.data();
    if (state_) {
      slice.state_slot = kv.state_slot(seq.seq_id);
      PAGODA_CHECK(slice.state_slot >= 0);
    }
    const int32_t num_known = seq.num_tokens();
    PAGODA_CHECK(s.num_draft_tokens == static_cast<int32_t>(seq.draft_tokens.size()) || s.num_draft_tokens == 0);
    PAGODA_CHECK(slice.kv_len <= static_cast<int32_t>(table.size()) * bs &&
                 slice.kv_len + seq.num_evicted <= num_known + s.num_draft_tokens);
    slice.compress_to = s.compress_to;
    slice.accumulate_scores = s.accumulate_scores;
    slice.kv_window = s.kv_window;
    slice.kv_pool = s.kv_pool;
    // A tree of drafts: each at the last token's position + its depth,
    // seeing its ancestors only.
    const bool tree = s.num_draft_tokens > 0 && !seq.draft_parents.empty();
    if (tree) {
      PAGODA_CHECK(s.num_draft_tokens <= kMaxTreeDrafts &&
                   static_cast<int32_t>(seq.draft_parents.size()) == s.num_draft_tokens);
      slice.tree_begin = num_known - seq.num_evicted;
      tree_depth_.resize(s.num_draft_tokens);
      tree_mask_.resize(s.num_draft_tokens);
      for (int32_t d = 0; d < s.num_draft_tokens; ++d) {
        const int32_t parent = seq.draft_parents[d];
        PAGODA_CHECK(parent >= -1 && parent < d);
        tree_depth_[d] = parent < 0 ? 1 : tree_depth_[parent] + 1;
        tree_mask_[d] = (uint64_t{1} << d) | (parent < 0 ? 0 : tree_mask_[parent]);
      }
    }
    // Token i sits at cache position p = i - num_evicted; its RoPE position
    // is p + rope_offset (p itself when eviction shifts positions).
    for (int32_t p = seq.num_cache_tokens(); p < slice.kv_len; ++p) {
      const int32_t i = p + seq.num_evicted;
      const int32_t d = i - num_known;  // >= 0: a draft
      batch_.tokens.push_back(d < 0 ? seq.tokens[i] : seq.draft_tokens[d]);
      const int32_t pos = tree && d >= 0 ? slice.tree_begin - 1 + tree_depth_[d] : p;
      batch_.positions.push_back(pos + s.rope_offset);
      batch_.cache_positions.push_back(p);
      batch_.slots.push_back(int64_t{table[p / bs].value} * bs + p % bs);
      batch_.tree_masks.push_back(tree && d >= 0 ? tree_mask_[d] : 0);
    }
    for (int32_t i = s.num_new_tokens - s.num_logits; i < s.num_new_tokens; ++i)
      batch_.logit_rows.push_back(slice.token_begin + i);
    add_group_tables(&kv, seq.seq_id, {});
    batch_.seqs.push_back(slice);
  }
  add_group_slots();
}

std::span<float> ModelRunner::execute(const SchedulerOutput& out, const KVCacheManager& kv) {
  run_tier_copies();  // spills before anything reuses an evicted block; loads before anything reads one
  const StepCopies c{out.evict_cow, out.key_shifts, out.swap_out, out.swap_in, out.cow};
  build_batch(out, kv);
  const auto rows = static_cast<int64_t>(batch_.logit_rows.size());
  logits_.resize(static_cast<size_t>(rows) * config().vocab_size);
  if (comm_) {
    PAGODA_CHECK(out.state_copies.empty());
    encode_tp_step(c, batch_, block_size_, &tp_bytes_);
    comm_->broadcast(&tp_bytes_);
    run_distributed(c, batch_);
    return logits_;
  }
  copy_blocks(c);
  PAGODA_CHECK(out.state_copies.empty() || state_);
  for (const StateCopy& sc : out.state_copies) state_->copy(sc.src, sc.dst);
  model_->forward(batch_, *kv_storage_, *pool_, logits_.data(), state_.get());
  return logits_;
}

std::vector<std::pair<int32_t, double>> ModelRunner::profile_step_times(std::span<const int32_t> sizes,
                                                                        int32_t context) {
  std::vector<std::pair<int32_t, double>> times;
  std::vector<BlockId> table;
  for (int32_t n : sizes) {
    const int32_t kv_len = context + n;
    const int32_t num_blocks = (kv_len + block_size_ - 1) / block_size_;
    if (n < 1 || num_blocks > kv_storage_->num_blocks()) continue;
    table.clear();
    for (int32_t b = 0; b < num_blocks; ++b) table.push_back(BlockId{b});
    batch_.clear();
    for (int32_t p = context; p < kv_len; ++p) {
      batch_.tokens.push_back(p % config().vocab_size);
      batch_.positions.push_back(p);
      batch_.cache_positions.push_back(p);
      batch_.slots.push_back(p);  // blocks 0.. in order: slot = position
      batch_.logit_rows.push_back(p - context);
    }
    if (model_->kv_groups().grouped()) group_tables_.resize(static_cast<size_t>(model_->kv_groups().num_groups - 1));
    add_group_tables(nullptr, SeqId{}, table);
    batch_.seqs.push_back(SeqSlice{0, n, kv_len, table.data()});
    batch_.seqs.back().state_slot = 0;  // no sequence holds a slot yet
    add_group_slots();
    logits_.resize(static_cast<size_t>(n) * static_cast<size_t>(config().vocab_size));
    const double best =
        fastest_run_seconds([&] { model_->forward(batch_, *kv_storage_, *pool_, logits_.data(), state_.get()); });
    times.push_back({n, best});
  }
  return times;
}

}  // namespace pagoda
