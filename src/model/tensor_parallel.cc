// LlamaModel::shard_tensor_parallel: Megatron-LM's split of one decoder
// layer over `size` ranks. Column-parallel (output rows split, no
// communication): wq/wk/wv by heads, ffn gate/up by FFN columns, the output
// matrix by vocabulary rows. Row-parallel (input columns split, partial sums
// all-reduced): attn_output and ffn_down. Everything else (embeddings, norms)
// is replicated.
#include <algorithm>
#include <cstring>
#include <string>

#include "model/llama_model.h"

namespace pagoda {

namespace {

// Rows [r0, r0 + rows) of w: a view into the same bytes.
kernels::WeightView row_slice(const kernels::WeightView& w, int64_t r0, int64_t rows) {
  kernels::WeightView v = w;
  v.data = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r0) * w.row_bytes();
  v.n_out = rows;
  v.packed = nullptr;
  return v;
}

}  // namespace

Status LlamaModel::shard_tensor_parallel(int32_t rank, int32_t size, std::function<void(float*, int64_t)> all_reduce) {
  ModelConfig& c = config_;
  if (size < 1 || rank < 0 || rank >= size) return invalid_argument("tensor parallelism: bad rank or size");
  if (size == 1) return Status::ok();
  if (c.has_recurrent_layers() || c.num_experts > 0 || c.has_attn_sinks || c.attn_output_gate ||
      std::any_of(layers_.begin(), layers_.end(), [](const Layer& l) { return l.w_down.data == nullptr; }))
    return invalid_argument("tensor parallelism supports dense attention models (llama, qwen2, qwen3, gemma3); " +
                            c.arch + " is not one yet");
  if (c.num_kv_heads % size != 0)
    return invalid_argument("--tp " + std::to_string(size) + " must divide the model's " +
                            std::to_string(c.num_kv_heads) + " KV heads (GQA groups stay whole on one rank)");
  if (c.ffn_size % size != 0)
    return invalid_argument("--tp " + std::to_string(size) + " must divide the FFN size " + std::to_string(c.ffn_size));
  const int32_t heads = c.num_heads / size, kv_heads = c.num_kv_heads / size, ffn = c.ffn_size / size;
  const int64_t hd = c.head_dim;
  // Column slices of row-parallel matrices must fall on quantization blocks.
  for (const Layer& l : layers_)
    for (const kernels::WeightView* w : {&l.wo, &l.w_down}) {
      const int64_t part = w->n_in / size;
      if (w->n_in % size != 0 || part % dtype_block_size(w->type) != 0)
        return invalid_argument("--tp " + std::to_string(size) + ": a " + std::string(dtype_name(w->type)) +
                                " matrix with " + std::to_string(w->n_in) +
                                " inputs cannot be split on its quantization blocks of " +
                                std::to_string(dtype_block_size(w->type)));
    }
  auto column_slice = [&](const kernels::WeightView& w) {
    const int64_t part = w.n_in / size;
    const size_t begin = dtype_row_bytes(w.type, part * rank), bytes = dtype_row_bytes(w.type, part);
    auto buf = std::make_unique<uint8_t[]>(bytes * static_cast<size_t>(w.n_out));
    const auto* src = static_cast<const uint8_t*>(w.data);
    for (int64_t r = 0; r < w.n_out; ++r)
      std::memcpy(buf.get() + static_cast<size_t>(r) * bytes, src + static_cast<size_t>(r) * w.row_bytes() + begin,
                  bytes);
    kernels::WeightView v = w;
    v.data = buf.get();
    v.n_in = part;
    v.packed = nullptr;
    tp_columns_.push_back(std::move(buf));
    return v;
  };
  for (Layer& l : layers_) {
    const int64_t gq = static_cast<int64_t>(rank) * heads * hd, gkv = static_cast<int64_t>(rank) * kv_heads * hd;
    l.wq = row_slice(l.wq, gq, heads * hd);
    l.wk = row_slice(l.wk, gkv, kv_heads * hd);
    l.wv = row_slice(l.wv, gkv, kv_heads * hd);
    if (l.bq) l.bq += gq;
    if (l.bk) l.bk += gkv;
    if (l.bv) l.bv += gkv;
    l.wo = column_slice(l.wo);
    const int64_t f0 = static_cast<int64_t>(rank) * ffn;
    l.w_gate = row_slice(l.w_gate, f0, ffn);
    l.w_up = row_slice(l.w_up, f0, ffn);
    l.w_down = column_slice(l.w_down);
  }
  const int64_t v0 = static_cast<int64_t>(c.vocab_size) * rank / size;
  const int64_t v1 = static_cast<int64_t>(c.vocab_size) * (rank + 1) / size;
  output_ = row_slice(output_, v0, v1 - v0);
  vocab_begin_ = static_cast<int32_t>(v0);
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.ffn_size = ffn;
  all_reduce_ = std::move(all_reduce);
  return Status::ok();
}

Status LlamaModel::set_layer_range(int32_t first, int32_t last) {
  const ModelConfig& c = config_;
  if (first < 0 || last > c.num_layers || first >= last)
    return invalid_argument("pipeline stage layers [" + std::to_string(first) + ", " + std::to_string(last) +
                            ") do not fit the model's " + std::to_string(c.num_layers) + " layers");
  if (c.has_recurrent_layers() || c.num_experts > 0)
    return invalid_argument("pipeline parallelism supports dense attention models; " + c.arch + " is not one yet");
  first_layer_ = first;
  last_layer_ = last;
  // What this stage never runs is never packed (nor read from the file).
  for (int32_t il = 0; il < c.num_layers; ++il) {
    if (il >= first && il < last) continue;
    Layer& l = layers_[static_cast<size_t>(il)];
    for (kernels::WeightView* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) *w = {};
  }
  if (last < c.num_layers) output_ = {};
  return Status::ok();
}

}  // namespace pagoda
