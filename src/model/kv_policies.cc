// The model's side of the KV policies: re-rotating keys after StreamingLLM
// evicts (shift_keys) and SnapKV's per-head votes and compaction.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/ops.h"
#include "kv/snapkv.h"
#include "model/llama_model.h"

namespace pagoda {

void LlamaModel::shift_keys(std::span<const KeyShift> shifts, KVStorage& kv, ThreadPool& pool) const {
  const ModelConfig& c = config_;
  const int64_t rows_per_block = int64_t{kv.num_kv_heads()} * kv.block_size();
  // This stage's layers (all of them without pipeline parallelism); the
  // streaming policy runs on attention-only models, so layer = KV layer.
  const int32_t first = first_layer_, num_layers = last_layer() - first_layer_;
  const int64_t num_items = static_cast<int64_t>(shifts.size()) * num_layers;
  pool.run([&](int ti, int nt) {
    std::vector<float> row(c.head_dim);
    for (int64_t item = ti; item < num_items; item += nt) {
      const KeyShift& sh = shifts[item / num_layers];
      const auto kl = static_cast<int32_t>(item % num_layers);
      kernels::RopeParams rp = c.is_sliding(first + kl) ? rope_local_ : rope_global_;
      rp.mscale = 1.0f;  // a pure rotation: the magnitude was scaled at write time
      uint8_t* base = kv.k_block_bytes(kl, sh.block.value);
      for (int64_t r = 0; r < rows_per_block; ++r) {
        uint8_t* p = base + r * kv.row_bytes();
        kernels::load_kv_row(kv.dtype(), p, c.head_dim, row.data());
        kernels::rope(row.data(), 1, c.head_dim, sh.delta, rp);
        kernels::store_kv_row(kv.dtype(), row.data(), c.head_dim, p);
      }
    }
  });
}

namespace {

// votes[j] += the softmax probability that query rows [r0, r0 + rows) (a
// row = one query token of the slice x one head of the GQA group) put on
// cache position j, for a slice whose queries sit at the end of its n
// cached positions. One KV head of one layer; scratch holds the scores.
void add_attention(const KVStorage& kv, int32_t il, int32_t kvh, const SeqSlice& s, const float* q_rows,
                   int64_t q_stride, int32_t group, int32_t first_query, int32_t num_queries, float scale,
                   std::vector<float>& key, std::vector<float>& scores, std::vector<float>& votes) {
  const int32_t n = s.kv_len, hd = kv.head_dim(), bs = kv.block_size();
  const int32_t rows = num_queries * group;
  scores.assign(static_cast<size_t>(rows) * n, -INFINITY);
  for (int32_t j = 0; j < n; ++j) {
    const int64_t slot = int64_t{s.block_table[j / bs].value} * bs + j % bs;
    kernels::load_kv_row(kv.dtype(), kv.k_row(il, kvh, slot), hd, key.data());
    for (int32_t r = 0; r < rows; ++r) {
      const int32_t i = first_query + r / group;  // query index in the slice
      if (j > n - s.num_tokens + i) continue;     // causal: after the query
      const float* q = q_rows + i * q_stride + int64_t{kvh * group + r % group} * hd;
      float dot = 0;
      for (int32_t d = 0; d < hd; ++d) dot += q[d] * key[d];
      scores[static_cast<size_t>(r) * n + j] = dot * scale;
    }
  }
  for (int32_t r = 0; r < rows; ++r) {
    const float* row = &scores[static_cast<size_t>(r) * n];
    const float mx = *std::max_element(row, row + n);
    double sum = 0;
    for (int32_t j = 0; j < n; ++j) sum += std::exp(row[j] - mx);
    for (int32_t j = 0; j < n; ++j) votes[j] += static_cast<float>(std::exp(row[j] - mx) / sum);
  }
}

}  // namespace

void LlamaModel::apply_kv_policies(const ForwardBatch& batch, KVStorage& kv, ThreadPool& pool, int32_t il,
                                   float scale) const {
  const ModelConfig& c = config_;
  const int32_t group = c.num_heads / c.num_kv_heads, bs = kv.block_size();
  std::vector<const SeqSlice*> slices;
  for (const SeqSlice& s : batch.seqs)
    if (s.compress_to > 0 || s.accumulate_scores) slices.push_back(&s);
  // One thread per KV head, over every slice: forked sequences share blocks,
  // and a shared row's score must not be added to from two threads.
  pool.run([&](int ti, int nt) {
    std::vector<float> key(c.head_dim), scores, votes;
    for (size_t it = 0; it < slices.size() * c.num_kv_heads; ++it) {
      const auto kvh = static_cast<int32_t>(it / slices.size());
      if (kvh % nt != ti) continue;
      const SeqSlice& s = *slices[it % slices.size()];
      const int32_t n = s.kv_len;
      auto slot = [&](int32_t j) { return int64_t{s.block_table[j / bs].value} * bs + j % bs; };
      const float* q_rows = &ws_.q[s.token_begin * int64_t{c.q_dim()}];
      std::vector<int32_t> keep;
      if (s.accumulate_scores) {  // H2O
        votes.assign(n, 0.0f);
        add_attention(kv, il, kvh, s, q_rows, c.q_dim(), group, 0, s.num_tokens, scale, key, scores, votes);
        for (int32_t j = 0; j < n; ++j) {
          kv.score(il, kvh, slot(j)) += votes[j];
          votes[j] = kv.score(il, kvh, slot(j));
        }
        if (s.compress_to > 0 && n > s.compress_to)
          keep = snapkv_select(votes, std::min(s.kv_window, s.compress_to - 1), s.compress_to, 1);
      } else if (s.compress_to > 0 && n > s.compress_to) {  // SnapKV
        // The observation window: the slice's last w queries.
        const int32_t w = std::min({s.kv_window, s.num_tokens, s.compress_to - 1});
        votes.assign(n, 0.0f);
        add_attention(kv, il, kvh, s, q_rows, c.q_dim(), group, s.num_tokens - w, w, scale, key, scores, votes);
        keep = snapkv_select(votes, w, s.compress_to, s.kv_pool);
      }
      // keep is ascending with keep[k] >= k: moving rows forward in order
      // never overwrites a row still to be read.
      for (int32_t k = 0; k < static_cast<int32_t>(keep.size()); ++k) kv.copy_row(il, kvh, slot(keep[k]), slot(k));
    }
  });
}

}  // namespace pagoda
