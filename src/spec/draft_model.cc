#include "spec/draft_model.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "core/timing.h"

namespace pagoda {

Result<std::unique_ptr<DraftModel>> DraftModel::open(const std::string& path) {
  std::unique_ptr<DraftModel> d(new DraftModel());
  auto file = gguf::GGUFFile::open(path);
  if (!file.is_ok()) return Status(file.status().code(), "draft model: " + file.status().message());
  d->file_ = std::move(file).value();
  auto model = LlamaModel::load(*d->file_);
  if (!model.is_ok()) return Status(model.status().code(), "draft model: " + model.status().message());
  d->own_model_ = std::move(model).value();
  d->model_ = d->own_model_.get();
  if (d->model_->config().has_recurrent_layers())
    return invalid_argument("draft model: " + d->model_->config().arch +
                            " has recurrent layers, whose state cannot drop rejected drafts");
  return d;
}

std::unique_ptr<DraftModel> DraftModel::self(LlamaModel& target, std::span<const int32_t> skip) {
  std::unique_ptr<DraftModel> d(new DraftModel());
  d->model_ = &target;
  d->batch_.skip_layers.assign(static_cast<size_t>(target.config().num_layers), 0);
  for (int32_t il : skip) {
    PAGODA_CHECK(il >= 0 && il < target.config().num_layers);
    d->batch_.skip_layers[static_cast<size_t>(il)] = 1;
  }
  PAGODA_CHECK(d->num_layers_run() > 0);
  return d;
}

int32_t DraftModel::num_layers_run() const {
  int32_t n = config().num_layers;
  for (uint8_t s : batch_.skip_layers) n -= s ? 1 : 0;
  return n;
}

Status DraftModel::check_vocabulary(const ModelConfig& target, const Tokenizer& target_tokenizer) const {
  if (!file_) return Status::ok();  // the target itself
  if (config().vocab_size != target.vocab_size)
    return invalid_argument("the draft model has " + std::to_string(config().vocab_size) +
                            " vocabulary rows but the target has " + std::to_string(target.vocab_size) +
                            ": a draft model needs the target's vocabulary");
  PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> mine, Tokenizer::from_gguf(*file_));
  if (mine->vocab_size() != target_tokenizer.vocab_size())
    return invalid_argument("the draft model's tokenizer has " + std::to_string(mine->vocab_size()) +
                            " tokens but the target's has " + std::to_string(target_tokenizer.vocab_size()));
  for (int32_t id = 0; id < mine->vocab_size(); ++id)
    if (mine->token_text(id) != target_tokenizer.token_text(id))
      return invalid_argument("the draft model's token " + std::to_string(id) +
                              " differs from the target's: a draft model needs the target's vocabulary");
  return Status::ok();
}

int64_t DraftModel::bytes_per_block(int32_t block_size, DType kv_dtype) const {
  // A skipped layer's rows are never written: its pages stay untouched
  // (KVStorage zeroes lazily), so only the layers run take memory.
  const ModelConfig& m = config();
  return static_cast<int64_t>(
      KVStorage::bytes_per_block(num_layers_run(), block_size, m.num_kv_heads, m.head_dim, kv_dtype));
}

Status DraftModel::start(int32_t num_blocks, int32_t num_host_blocks, int32_t block_size, DType kv_dtype,
                         ThreadPool& pool) {
  const ModelConfig& m = config();
  PAGODA_ASSIGN_OR_RETURN(
      kv_storage_, KVStorage::create(m.num_layers, num_blocks, block_size, m.num_kv_heads, m.head_dim, kv_dtype));
  // Written only where sequences draft (catch-ups, copies of their blocks).
  kv_storage_->use_small_pages();
  if (num_host_blocks > 0) {
    PAGODA_ASSIGN_OR_RETURN(host_storage_, KVStorage::create(m.num_layers, num_host_blocks, block_size, m.num_kv_heads,
                                                             m.head_dim, kv_dtype));
  }
  block_size_ = block_size;
  pool_ = &pool;
  if (own_model_) own_model_->repack(pool);  // the target repacked itself
  if (pool.num_threads() > 1) {
    // A small draft's matmuls take microseconds: waking the pool can cost
    // more than it saves. Time a one-token forward both ways, keep the
    // faster (measured here, once).
    single_pool_ = std::make_unique<ThreadPool>(1);
    const int32_t context = std::min(32, num_blocks * block_size - 1);
    const std::vector<int32_t> one = {1};
    const double shared = profile_step_times(one, context).at(0).second;
    pool_ = single_pool_.get();
    const double single = profile_step_times(one, context).at(0).second;
    if (shared <= single) {
      pool_ = &pool;
      single_pool_.reset();
    }
  }
  return Status::ok();
}

int32_t DraftModel::num_threads() const { return pool_ ? pool_->num_threads() : 0; }

void DraftModel::copy_blocks(const SchedulerOutput& out) {
  // The target's order (ModelRunner::copy_blocks). Streaming eviction's
  // copies belong to sequences the draft does not follow; copying them
  // keeps the blocks' contents in step all the same.
  for (const BlockCopy& c : out.evict_cow) kv_storage_->copy_block(c.src, c.dst);
  PAGODA_CHECK((out.swap_out.empty() && out.swap_in.empty()) || host_storage_);
  for (const BlockCopy& c : out.swap_out) kv_storage_->copy_block_to(c.src, *host_storage_, c.dst);
  for (const BlockCopy& c : out.swap_in) host_storage_->copy_block_to(c.src, *kv_storage_, c.dst);
  for (const BlockCopy& c : out.cow) kv_storage_->copy_block(c.src, c.dst);
}

float* DraftModel::forward() {
  logits_.resize(batch_.logit_rows.size() * static_cast<size_t>(config().vocab_size));
  model_->forward(batch_, *kv_storage_, *pool_, logits_.data());
  return logits_.data();
}

void DraftModel::run(std::span<Job> jobs, const KVCacheManager& kv) {
  PAGODA_CHECK(pool_ != nullptr);
  const int32_t bs = kv.block_size();
  const auto vocab = static_cast<size_t>(config().vocab_size);
  // Appends cache positions [begin, end) of job j (tokens from the
  // sequence, then its drafts) to batch_, with the last one's logits wanted
  // when `logits`.
  auto add = [&](const Job& j, int32_t begin, int32_t end, bool logits) {
    const Sequence& seq = *j.seq;
    const std::vector<BlockId>& table = kv.block_table(seq.seq_id);
    PAGODA_CHECK(seq.num_evicted == 0 && begin < end && end <= static_cast<int32_t>(table.size()) * bs);
    SeqSlice slice;
    slice.token_begin = static_cast<int32_t>(batch_.tokens.size());
    slice.num_tokens = end - begin;
    slice.kv_len = end;
    slice.block_table = table.data();
    for (int32_t p = begin; p < end; ++p) {
      batch_.tokens.push_back(p < seq.num_tokens() ? seq.tokens[p] : seq.draft_tokens[p - seq.num_tokens()]);
      batch_.positions.push_back(p);
      batch_.cache_positions.push_back(p);
      batch_.slots.push_back(int64_t{table[p / bs].value} * bs + p % bs);
    }
    if (logits) batch_.logit_rows.push_back(static_cast<int32_t>(batch_.tokens.size()) - 1);
    batch_.seqs.push_back(slice);
  };
  // Draws draft number i of job j from the logits row: q is the job's
  // sampler's processed distribution, penalties seeing the drafts so far.
  auto draw = [&](Job& j, float* row, int32_t i) {
    Sequence& seq = *j.seq;
    history_.assign(seq.tokens.begin() + seq.num_prompt_tokens, seq.tokens.end());
    history_.insert(history_.end(), seq.draft_tokens.begin(), seq.draft_tokens.begin() + i);
    const std::span<const int32_t> prompt(seq.tokens.data(), seq.num_prompt_tokens);
    std::vector<float>& q = *j.q;
    if (j.sampler->params().is_greedy()) {
      seq.draft_tokens[i] = j.sampler->sample(row, prompt, history_).token;  // argmax: no randomness
      q.clear();
      return;
    }
    q.resize(static_cast<size_t>(j.num_drafts) * vocab);
    std::vector<float>& probs = probs_;
    j.sampler->probabilities(row, prompt, history_, probs);
    std::copy(probs.begin(), probs.end(), q.begin() + static_cast<ptrdiff_t>(i * vocab));
    seq.draft_tokens[i] = j.sampler->sample_from_weights(probs);
    PAGODA_CHECK(seq.draft_tokens[i] >= 0);
  };

  // Pass 0: the known tokens of every drafting job the draft has not seen
  // (the rows it lags behind, then the step's slice), drawing its first
  // draft. A job that does not draft this step only falls further behind:
  // a step the planner leaves without drafts costs no draft forward.
  int32_t max_drafts = 0;
  batch_.clear();
  for (Job& j : jobs) {
    Sequence& seq = *j.seq;
    if (j.num_drafts == 0) {
      seq.num_draft_lag += j.num_known;
      continue;
    }
    PAGODA_CHECK(j.num_drafts == static_cast<int32_t>(seq.draft_tokens.size()));
    const int32_t end = seq.num_cache_tokens() + j.num_known;
    const int32_t begin = std::max(0, seq.num_cache_tokens() - seq.num_draft_lag);
    PAGODA_CHECK(end == seq.num_tokens());
    add(j, begin, end, true);
    seq.num_draft_lag = 0;
    max_drafts = std::max(max_drafts, j.num_drafts);
  }
  pass_times_.clear();
  if (batch_.tokens.empty()) return;
  auto t0 = std::chrono::steady_clock::now();
  // Records a pass (forward and draws) as (tokens, seconds).
  auto timed = [&](int32_t num_tokens) {
    const auto t1 = std::chrono::steady_clock::now();
    pass_times_.push_back({num_tokens, std::chrono::duration<double>(t1 - t0).count()});
    t0 = t1;
  };
  float* logits = forward();
  size_t row = 0;
  for (Job& j : jobs)
    if (j.num_drafts > 0) draw(j, logits + row++ * vocab, 0);
  timed(static_cast<int32_t>(batch_.tokens.size()));
  // Pass i: draft i-1 of every job drafting more than i, drawing draft i.
  for (int32_t i = 1; i < max_drafts; ++i) {
    batch_.clear();
    for (Job& j : jobs) {
      if (j.num_drafts <= i) continue;
      const int32_t p = j.seq->num_tokens() + i - 1;  // cache position of draft i-1
      add(j, p, p + 1, true);
    }
    logits = forward();
    row = 0;
    for (Job& j : jobs)
      if (j.num_drafts > i) draw(j, logits + row++ * vocab, i);
    timed(static_cast<int32_t>(batch_.tokens.size()));
  }
}

void DraftModel::after_verify(Sequence& seq, int32_t num_drafts, int32_t num_accepted) {
  // The draft computed its drafts but the last; the target kept the
  // accepted ones. Without drafts the lag is what run() counted.
  if (num_drafts > 0) seq.num_draft_lag = num_accepted == num_drafts ? 1 : 0;
}

std::vector<std::pair<int32_t, double>> DraftModel::profile_step_times(std::span<const int32_t> sizes,
                                                                       int32_t context) {
  PAGODA_CHECK(pool_ != nullptr);
  std::vector<std::pair<int32_t, double>> times;
  std::vector<BlockId> table;
  const int32_t blocks_per_seq = (context + 1 + block_size_ - 1) / block_size_;
  for (int32_t n : sizes) {
    // n sequences of `context` cached tokens, one new token each.
    if (n < 1 || static_cast<int64_t>(n) * blocks_per_seq > kv_storage_->num_blocks()) continue;
    table.clear();
    for (int32_t b = 0; b < n * blocks_per_seq; ++b) table.push_back(BlockId{b});
    batch_.clear();
    for (int32_t s = 0; s < n; ++s) {
      const BlockId* t = table.data() + static_cast<size_t>(s) * blocks_per_seq;
      batch_.seqs.push_back(SeqSlice{s, 1, context + 1, t});
      batch_.tokens.push_back((s + context) % config().vocab_size);
      batch_.positions.push_back(context);
      batch_.cache_positions.push_back(context);
      batch_.slots.push_back(int64_t{t[context / block_size_].value} * block_size_ + context % block_size_);
      batch_.logit_rows.push_back(s);
    }
    times.push_back({n, fastest_run_seconds([&] { forward(); })});
  }
  return times;
}

}  // namespace pagoda
