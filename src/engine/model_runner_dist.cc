// ModelRunner's scale-out: tensor parallelism inside a pipeline stage,
// pipeline parallelism across stages. World rank = stage * tp + tp rank.
// Rank 0 (stage 0, tp rank 0) runs the scheduler; it broadcasts each step
// (copies and flat batch, engine/tp_step.h) to every rank. Each stage runs
// its layers over the step in micro-batches: contiguous token ranges (a
// sequence may be cut: a later piece attends to the K/V the earlier piece
// wrote in the same layer, as in chunked prefill), so stage s works on
// micro-batch m while stage s + 1 works on m - 1. Hidden states go from a
// rank to the rank of the same tp rank in the next stage; the last stage's
// tp ranks hold the logits of their vocabulary slices, gathered at rank 0.
#include <algorithm>

#include "core/check.h"
#include "engine/model_runner.h"

namespace pagoda {

namespace {

// Tokens [begin, end) of `b` as a batch of their own: slices cut at the
// ends (a piece of a slice keeps the cache length it has after its last
// token), logit rows renumbered.
void sub_batch(const ForwardBatch& b, int32_t begin, int32_t end, ForwardBatch* out) {
  out->clear();
  out->skip_layers = b.skip_layers;
  auto range = [&](const auto& v, auto* dst) {
    if (!v.empty()) dst->assign(v.begin() + begin, v.begin() + end);
  };
  range(b.tokens, &out->tokens);
  range(b.positions, &out->positions);
  range(b.cache_positions, &out->cache_positions);
  range(b.slots, &out->slots);
  range(b.tree_masks, &out->tree_masks);
  for (const SeqSlice& s : b.seqs) {
    const int32_t s0 = std::max(begin, s.token_begin), s1 = std::min(end, s.token_begin + s.num_tokens);
    if (s0 >= s1) continue;
    SeqSlice piece = s;
    piece.token_begin = s0 - begin;
    piece.num_tokens = s1 - s0;
    piece.kv_len = s.kv_len - (s.token_begin + s.num_tokens - s1);
    out->seqs.push_back(piece);
  }
  for (int32_t row : b.logit_rows)
    if (row >= begin && row < end) out->logit_rows.push_back(row - begin);
}

}  // namespace

Status ModelRunner::start_distributed(const RunnerConfig& config) {
  dist::Comm* world = config.comm;
  pp_ = std::max(1, config.pp);
  if (world->size() % pp_ != 0)
    return invalid_argument("--pp " + std::to_string(pp_) + " must divide the " + std::to_string(world->size()) +
                            " MPI processes");
  tp_ = world->size() / pp_;
  stage_ = world->rank() / tp_;
  tp_rank_ = world->rank() % tp_;
  comm_ = world;
  if (tp_ > 1) {
    tp_comm_ = world->split(stage_, tp_rank_);
    dist::Comm* tc = tp_comm_;
    PAGODA_RETURN_IF_ERROR(
        model_->shard_tensor_parallel(tp_rank_, tp_, [tc](float* x, int64_t n) { tc->all_reduce_sum(x, n); }));
  }
  if (pp_ > 1) {
    const int32_t layers = model_->config().num_layers;
    if (layers < pp_)
      return invalid_argument("--pp " + std::to_string(pp_) + " needs at least as many layers; the model has " +
                              std::to_string(layers));
    PAGODA_RETURN_IF_ERROR(model_->set_layer_range(layers * stage_ / pp_, layers * (stage_ + 1) / pp_));
  }
  return Status::ok();
}

void ModelRunner::run_distributed(const StepCopies& copies, const ForwardBatch& batch) {
  copy_blocks(copies);
  const auto rows = static_cast<int64_t>(batch.logit_rows.size());
  const bool last = model_->is_last_stage();
  tp_local_.resize(last ? static_cast<size_t>(rows) * model_->vocab_rows() : 0);
  if (pp_ == 1) {
    model_->forward(batch, *kv_storage_, *pool_, tp_local_.data(), state_.get());
    gather_logits(rows);
    return;
  }
  // Micro-batches: enough to keep the stages busy, not so many that the
  // matmuls get thin. The split depends on the batch only: every rank makes
  // the same one.
  const auto n = static_cast<int32_t>(batch.tokens.size());
  const int32_t m = n >= 32 * pp_ ? 2 * pp_ : std::max(1, std::min(n, pp_));
  micro_batches_.resize(static_cast<size_t>(m));
  const int32_t hidden = model_->config().hidden_size;
  const int prev = stage_ > 0 ? (stage_ - 1) * tp_ + tp_rank_ : -1;
  const int next = !last ? (stage_ + 1) * tp_ + tp_rank_ : -1;
  int64_t row_offset = 0;
  for (int32_t i = 0; i < m; ++i) {
    ForwardBatch& mb = micro_batches_[static_cast<size_t>(i)];
    sub_batch(batch, static_cast<int32_t>(int64_t{n} * i / m), static_cast<int32_t>(int64_t{n} * (i + 1) / m), &mb);
    const auto tokens = static_cast<int64_t>(mb.tokens.size());
    if (tokens == 0) continue;
    const float* in = nullptr;
    if (prev >= 0) {
      pp_hidden_in_.resize(static_cast<size_t>(tokens * hidden));
      comm_->recv(pp_hidden_in_.data(), tokens * hidden, prev, i);
      in = pp_hidden_in_.data();
    }
    if (last) {
      model_->forward(mb, *kv_storage_, *pool_, tp_local_.data() + row_offset * model_->vocab_rows(), state_.get(), in);
      row_offset += static_cast<int64_t>(mb.logit_rows.size());
    } else {
      pp_hidden_out_.resize(static_cast<size_t>(tokens * hidden));
      model_->forward(mb, *kv_storage_, *pool_, nullptr, state_.get(), in, pp_hidden_out_.data());
      comm_->send(pp_hidden_out_.data(), tokens * hidden, next, i);
    }
  }
  gather_logits(rows);
}

void ModelRunner::gather_logits(int64_t rows) {
  const int size = comm_->size();
  const int64_t vocab = config().vocab_size;
  auto slice = [&](int t) { return std::pair(vocab * t / tp_, vocab * (t + 1) / tp_ - vocab * t / tp_); };
  std::vector<int64_t> counts(static_cast<size_t>(size), 0);
  for (int t = 0; t < tp_; ++t) counts[static_cast<size_t>((pp_ - 1) * tp_ + t)] = rows * slice(t).second;
  if (comm_->rank() == 0) tp_gathered_.resize(static_cast<size_t>(rows * vocab));
  comm_->gather(tp_local_, counts, tp_gathered_.data());
  if (comm_->rank() != 0) return;
  // [tp rank][row][its vocabulary slice] -> [row][vocabulary]
  const float* src = tp_gathered_.data();
  for (int t = 0; t < tp_; ++t) {
    const auto [v0, nv] = slice(t);
    for (int64_t row = 0; row < rows; ++row, src += nv) std::copy_n(src, nv, &logits_[row * vocab + v0]);
  }
}

Status ModelRunner::serve_tensor_parallel() {
  PAGODA_CHECK(comm_ && comm_->rank() != 0);
  const int32_t host_blocks = host_storage_ ? host_storage_->num_blocks() : 0;
  while (true) {
    comm_->broadcast(&tp_bytes_);
    if (tp_bytes_.empty()) return Status::ok();
    PAGODA_RETURN_IF_ERROR(
        decode_tp_step(tp_bytes_, block_size_, kv_storage_->num_blocks(), host_blocks, config().num_layers, &tp_step_));
    run_distributed(tp_step_.copies(), tp_step_.batch);
  }
}

}  // namespace pagoda
