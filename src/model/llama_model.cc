#include "model/llama_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <system_error>

#include "core/check.h"
#include "core/fp16.h"
#include "kernels/attention.h"

namespace pagoda {
namespace {

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Attention of a step under this many multiply-adds runs on one thread.
constexpr int64_t kMinParallelAttentionMacs = 128 * 1024;

// LlamaModel::set_min_parallel_step_macs. A model with this many bytes of
// matrices reads them from memory at every step (2 threads stream more than
// one): its steps always use the pool; so do steps of kMaxAloneStepMacs
// multiply-adds and more. Below, a step size's first guess is alone: on a
// quiet machine those ran faster alone (a draft model's or stories260K's
// 64-token prefill 5-10% slower on 2 threads than on 1). Above, the pool
// was faster wherever measured, and timing a 512-token prefill alone once in
// 20 steps moved `pagoda bench model`'s median by 3-4%.
constexpr int64_t kMinParallelWeightBytes = int64_t{8} << 20;
constexpr int64_t kMaxAloneStepMacs = int64_t{64} << 20;
std::atomic<int64_t> g_min_parallel_step_macs{LlamaModel::kMeasureStepThreads};

// The pool of a step that runs alone: one thread, nothing shared (run()
// and the parallel loops of a 1-thread pool call the function inline).
ThreadPool& calling_thread_only() {
  static ThreadPool pool(1);
  return pool;
}
// Query tokens per attention work item (LlamaModel::attention_layer).
constexpr int32_t kAttentionPiece = 64;

// fn(t0, t1) over token ranges, split across the pool for prefill-sized
// batches of a wide enough model (the per-token ops, `width` floats each,
// are cheap: a decode step, or a tiny model's prefill, stays on one thread).
template <class Fn>
void for_tokens(ThreadPool& pool, int64_t n, int64_t width, const Fn& fn) {
  if (n < 16 || n * width < 64 * 1024) {
    fn(int64_t{0}, n);
    return;
  }
  pool.parallel_for(n, 1, fn);
}

}  // namespace

Result<std::unique_ptr<LlamaModel>> LlamaModel::load(const gguf::GGUFFile& file) {
  PAGODA_ASSIGN_OR_RETURN(ModelConfig cfg, model_config_from_gguf(file));
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->config_ = cfg;
  m->file_ = &file;

  // W8A8 files (`pagoda quantize --method smoothquant`): the Q8_0 matrices
  // whose rows each share one scale run with per-token int8 activations.
  const bool w8a8 = file.get_bool("pagoda.w8a8").value_or(false);
  auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out, kernels::WeightView* out) -> Status {
    const auto* t = file.tensor(name);
    if (!t) return invalid_argument("model lacks tensor '" + name + "'");
    if (t->dims.size() != 2 || t->dims[0] != n_in || t->dims[1] != n_out)
      return invalid_argument("tensor '" + name + "' has shape " + dims_str(t->dims) + ", expected [" +
                              std::to_string(n_in) + ", " + std::to_string(n_out) + "]");
    if (!dtype_info(t->type).supported)
      return unimplemented("tensor '" + name + "' has unsupported type " + std::string(dtype_name(t->type)));
    *out = {t->type, t->data, n_in, n_out};
    if (w8a8 && kernels::q8_0_rows_share_scale(*out)) {
      out->row_scaled = true;
      ++m->num_row_scaled_;
    }
    return Status::ok();
  };
  // A 3-D expert tensor [n_in, n_out, n_experts]: one view per expert (its
  // rows are contiguous, whatever the block type).
  auto experts = [&](const std::string& name, int64_t n_in, int64_t n_out,
                     std::vector<kernels::WeightView>* out) -> Status {
    const auto* t = file.tensor(name);
    if (!t) return invalid_argument("model lacks tensor '" + name + "'");
    if (t->dims.size() != 3 || t->dims[0] != n_in || t->dims[1] != n_out || t->dims[2] != cfg.num_experts)
      return invalid_argument("tensor '" + name + "' has shape " + dims_str(t->dims) + ", expected [" +
                              std::to_string(n_in) + ", " + std::to_string(n_out) + ", " +
                              std::to_string(cfg.num_experts) + "]");
    if (!dtype_info(t->type).supported)
      return unimplemented("tensor '" + name + "' has unsupported type " + std::string(dtype_name(t->type)));
    const size_t expert_bytes = dtype_row_bytes(t->type, n_in) * static_cast<size_t>(n_out);
    for (int32_t e = 0; e < cfg.num_experts; ++e) {
      out->push_back({t->type, static_cast<const uint8_t*>(t->data) + e * expert_bytes, n_in, n_out});
    }
    return Status::ok();
  };
  // Norm weights and biases as f32 (copied when the file stores them in f16).
  auto vector = [&](const std::string& name, int64_t n, const float** out, bool required) -> Status {
    const auto* t = file.tensor(name);
    if (!t) return required ? invalid_argument("model lacks tensor '" + name + "'") : Status::ok();
    if (t->num_elements() != n)
      return invalid_argument("tensor '" + name + "' has " + std::to_string(t->num_elements()) +
                              " elements, expected " + std::to_string(n));
    if (t->type == DType::kF32) {
      *out = reinterpret_cast<const float*>(t->data);
      return Status::ok();
    }
    if (t->type != DType::kF16 && t->type != DType::kBF16)
      return unimplemented("tensor '" + name + "' must be f32/f16/bf16");
    auto& copy = m->f32_copies_.emplace_back(n);
    const auto* src = reinterpret_cast<const uint16_t*>(t->data);
    for (int64_t i = 0; i < n; ++i) copy[i] = t->type == DType::kF16 ? fp16_to_fp32(src[i]) : bf16_to_fp32(src[i]);
    *out = copy.data();
    return Status::ok();
  };

  m->f32_copies_.reserve(4 * cfg.num_layers + 4);
  PAGODA_RETURN_IF_ERROR(matrix("token_embd.weight", cfg.hidden_size, cfg.vocab_size, &m->tok_embd_));
  PAGODA_RETURN_IF_ERROR(vector("output_norm.weight", cfg.hidden_size, &m->output_norm_, true));
  const bool rwkv = !cfg.layer_kinds.empty() && cfg.layer_kinds[0] == LayerKind::kRwkv7;
  if (rwkv) {
    PAGODA_RETURN_IF_ERROR(vector("output_norm.bias", cfg.hidden_size, &m->output_norm_b_, true));
    PAGODA_RETURN_IF_ERROR(vector("token_embd_norm.weight", cfg.hidden_size, &m->embd_norm_, true));
    PAGODA_RETURN_IF_ERROR(vector("token_embd_norm.bias", cfg.hidden_size, &m->embd_norm_b_, true));
  }
  // A LoRA pair: x1 [hidden -> rank] with the rank from the file, x2 [rank -> hidden].
  auto lora = [&](const std::string& name, kernels::WeightView* x1, kernels::WeightView* x2) -> Status {
    const auto* t = file.tensor(name + "1.weight");
    if (!t) return invalid_argument("model lacks tensor '" + name + "1.weight'");
    if (t->dims.size() != 2) return invalid_argument("tensor '" + name + "1.weight' is not a matrix");
    PAGODA_RETURN_IF_ERROR(matrix(name + "1.weight", cfg.hidden_size, t->dims[1], x1));
    return matrix(name + "2.weight", t->dims[1], cfg.hidden_size, x2);
  };
  if (file.tensor("output.weight")) {
    PAGODA_RETURN_IF_ERROR(matrix("output.weight", cfg.hidden_size, cfg.vocab_size, &m->output_));
  } else {
    m->output_ = m->tok_embd_;  // tied embeddings
  }
  PAGODA_RETURN_IF_ERROR(vector("rope_freqs.weight", cfg.rope_dim / 2, &m->rope_freqs_, false));
  for (const bool local : {false, true}) {
    kernels::RopeParams& rp = local ? m->rope_local_ : m->rope_global_;
    rp.style = cfg.rope_style;
    rp.rot_dim = cfg.rope_dim;
    rp.freq_base = local ? cfg.rope_freq_base_swa : cfg.rope_freq_base;
    rp.freq_scale = local ? cfg.rope_freq_scale_swa : cfg.rope_freq_scale;
    rp.freq_factors = m->rope_freqs_;
    kernels::set_yarn(rp, cfg.rope_orig_ctx, cfg.rope_ext_factor, cfg.yarn_beta_fast, cfg.yarn_beta_slow,
                      cfg.rope_attn_factor);
  }
  m->layers_.resize(cfg.num_layers);
  for (int32_t i = 0; i < cfg.num_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    Layer& l = m->layers_[i];
    PAGODA_RETURN_IF_ERROR(vector(p + "attn_norm.weight", cfg.hidden_size, &l.attn_norm, true));
    const LayerKind kind = cfg.layer_kind(i);
    m->state_offset_.push_back(m->state_offset_.empty() ? 0 : m->state_offset_.back());
    m->state_offset_.back() += cfg.recurrent_state_floats(i);
    if (kind == LayerKind::kRwkv7) {
      const int64_t hs = cfg.hidden_size;
      Layer::Rwkv7& r = l.rwkv;
      const std::string tm = p + "time_mix_";
      PAGODA_RETURN_IF_ERROR(vector(p + "attn_norm.bias", hs, &r.attn_norm_b, true));
      PAGODA_RETURN_IF_ERROR(vector(p + "attn_norm_2.weight", hs, &r.ffn_norm, true));
      PAGODA_RETURN_IF_ERROR(vector(p + "attn_norm_2.bias", hs, &r.ffn_norm_b, true));
      const std::pair<const char*, const float**> vecs[] = {{"w0", &r.w0},   {"a0", &r.a0},   {"v0", &r.v0},
                                                            {"k_k", &r.k_k}, {"k_a", &r.k_a}, {"r_k", &r.r_k},
                                                            {"ln", &r.ln}};
      for (const auto& [name, out] : vecs) PAGODA_RETURN_IF_ERROR(vector(tm + name + ".weight", hs, out, true));
      PAGODA_RETURN_IF_ERROR(vector(tm + "ln.bias", hs, &r.ln_b, true));
      PAGODA_RETURN_IF_ERROR(vector(tm + "lerp_fused.weight", 6 * hs, &r.lerp, true));
      PAGODA_RETURN_IF_ERROR(vector(p + "channel_mix_lerp_k.weight", hs, &r.cm_lerp_k, true));
      PAGODA_RETURN_IF_ERROR(lora(tm + "w", &r.w1, &r.w2));
      PAGODA_RETURN_IF_ERROR(lora(tm + "a", &r.a1, &r.a2));
      PAGODA_RETURN_IF_ERROR(lora(tm + "v", &r.v1, &r.v2));
      PAGODA_RETURN_IF_ERROR(lora(tm + "g", &r.g1, &r.g2));
      PAGODA_RETURN_IF_ERROR(matrix(tm + "receptance.weight", hs, hs, &r.receptance));
      PAGODA_RETURN_IF_ERROR(matrix(tm + "key.weight", hs, hs, &r.key));
      PAGODA_RETURN_IF_ERROR(matrix(tm + "value.weight", hs, hs, &r.value));
      PAGODA_RETURN_IF_ERROR(matrix(tm + "output.weight", hs, hs, &r.output));
      PAGODA_RETURN_IF_ERROR(matrix(p + "channel_mix_key.weight", hs, cfg.ffn_size, &r.cm_key));
      PAGODA_RETURN_IF_ERROR(matrix(p + "channel_mix_value.weight", cfg.ffn_size, hs, &r.cm_value));
      continue;  // the block is all RWKV's
    }
    if (kind != LayerKind::kAttention) {
      const int64_t hs = cfg.hidden_size, inner = cfg.ssm_inner_size, heads = cfg.ssm_time_step_rank;
      const int64_t channels = cfg.ssm_conv_channels();
      PAGODA_RETURN_IF_ERROR(vector(p + "ssm_conv1d.weight", channels * cfg.ssm_conv_kernel, &l.ssm_conv, true));
      PAGODA_RETURN_IF_ERROR(vector(p + "ssm_dt.bias", heads, &l.ssm_dt_bias, true));
      PAGODA_RETURN_IF_ERROR(vector(p + "ssm_a", heads, &l.ssm_a, true));
      PAGODA_RETURN_IF_ERROR(matrix(p + "ssm_out.weight", inner, hs, &l.ssm_out));
      if (kind == LayerKind::kGatedDeltaNet) {
        PAGODA_RETURN_IF_ERROR(matrix(p + "attn_qkv.weight", hs, channels, &l.attn_qkv));
        PAGODA_RETURN_IF_ERROR(matrix(p + "attn_gate.weight", hs, inner, &l.attn_gate));
        PAGODA_RETURN_IF_ERROR(matrix(p + "ssm_beta.weight", hs, heads, &l.ssm_beta));
        PAGODA_RETURN_IF_ERROR(matrix(p + "ssm_alpha.weight", hs, heads, &l.ssm_alpha));
        PAGODA_RETURN_IF_ERROR(vector(p + "ssm_norm.weight", inner / heads, &l.ssm_norm, true));
      } else {
        PAGODA_RETURN_IF_ERROR(matrix(p + "ssm_in.weight", hs, inner + channels + heads, &l.ssm_in));
        PAGODA_RETURN_IF_ERROR(vector(p + "ssm_conv1d.bias", channels, &l.ssm_conv_bias, true));
        PAGODA_RETURN_IF_ERROR(vector(p + "ssm_d", heads, &l.ssm_d, true));
        PAGODA_RETURN_IF_ERROR(vector(p + "ssm_norm.weight", inner, &l.ssm_norm, true));
        continue;  // Mamba-2 blocks have no FFN
      }
    } else {
      const int64_t q_rows = cfg.attn_output_gate ? 2 * int64_t{cfg.q_dim()} : cfg.q_dim();
      PAGODA_RETURN_IF_ERROR(matrix(p + "attn_q.weight", cfg.hidden_size, q_rows, &l.wq));
      PAGODA_RETURN_IF_ERROR(matrix(p + "attn_k.weight", cfg.hidden_size, cfg.kv_dim(), &l.wk));
      PAGODA_RETURN_IF_ERROR(matrix(p + "attn_v.weight", cfg.hidden_size, cfg.kv_dim(), &l.wv));
      PAGODA_RETURN_IF_ERROR(matrix(p + "attn_output.weight", cfg.q_dim(), cfg.hidden_size, &l.wo));
    }
    PAGODA_RETURN_IF_ERROR(vector(p + cfg.ffn_norm_name + ".weight", cfg.hidden_size, &l.ffn_norm, true));
    if (cfg.num_experts > 0) {
      PAGODA_RETURN_IF_ERROR(matrix(p + "ffn_gate_inp.weight", cfg.hidden_size, cfg.num_experts, &l.router));
      PAGODA_RETURN_IF_ERROR(experts(p + "ffn_gate_exps.weight", cfg.hidden_size, cfg.expert_ffn_size, &l.exp_gate));
      PAGODA_RETURN_IF_ERROR(experts(p + "ffn_up_exps.weight", cfg.hidden_size, cfg.expert_ffn_size, &l.exp_up));
      PAGODA_RETURN_IF_ERROR(experts(p + "ffn_down_exps.weight", cfg.expert_ffn_size, cfg.hidden_size, &l.exp_down));
      const int64_t ne = cfg.num_experts;
      PAGODA_RETURN_IF_ERROR(vector(p + "ffn_gate_inp.bias", ne, &l.router_bias, false));
      PAGODA_RETURN_IF_ERROR(vector(p + "ffn_gate_exps.bias", ne * cfg.expert_ffn_size, &l.exp_gate_bias, false));
      PAGODA_RETURN_IF_ERROR(vector(p + "ffn_up_exps.bias", ne * cfg.expert_ffn_size, &l.exp_up_bias, false));
      PAGODA_RETURN_IF_ERROR(vector(p + "ffn_down_exps.bias", ne * cfg.hidden_size, &l.exp_down_bias, false));
    } else {
      PAGODA_RETURN_IF_ERROR(matrix(p + "ffn_gate.weight", cfg.hidden_size, cfg.ffn_size, &l.w_gate));
      PAGODA_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", cfg.hidden_size, cfg.ffn_size, &l.w_up));
      PAGODA_RETURN_IF_ERROR(matrix(p + "ffn_down.weight", cfg.ffn_size, cfg.hidden_size, &l.w_down));
    }
    if (kind != LayerKind::kAttention) continue;
    PAGODA_RETURN_IF_ERROR(vector(p + "attn_q.bias", cfg.q_dim(), &l.bq, false));
    PAGODA_RETURN_IF_ERROR(vector(p + "attn_k.bias", cfg.kv_dim(), &l.bk, false));
    PAGODA_RETURN_IF_ERROR(vector(p + "attn_v.bias", cfg.kv_dim(), &l.bv, false));
    PAGODA_RETURN_IF_ERROR(vector(p + "attn_output.bias", cfg.hidden_size, &l.bo, false));
    PAGODA_RETURN_IF_ERROR(vector(p + "attn_sinks.weight", cfg.num_heads, &l.sinks, cfg.has_attn_sinks));
    if (cfg.has_post_norms) {
      PAGODA_RETURN_IF_ERROR(vector(p + "post_attention_norm.weight", cfg.hidden_size, &l.attn_post_norm, true));
      PAGODA_RETURN_IF_ERROR(vector(p + "post_ffw_norm.weight", cfg.hidden_size, &l.ffn_post_norm, true));
    }
    if (cfg.has_qk_norm) {
      PAGODA_RETURN_IF_ERROR(vector(p + "attn_q_norm.weight", cfg.head_dim, &l.q_norm, true));
      PAGODA_RETURN_IF_ERROR(vector(p + "attn_k_norm.weight", cfg.head_dim, &l.k_norm, true));
    }
  }
  return m;
}

template <class Self, class Fn>
void LlamaModel::for_each_matrix(Self& self, Fn&& fn) {
  fn(self.output_);
  for (auto& l : self.layers_) {
    for (auto* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.router, &l.attn_qkv, &l.attn_gate,
                    &l.ssm_beta, &l.ssm_alpha, &l.ssm_in, &l.ssm_out})
      if (w->data) fn(*w);
    auto& r = l.rwkv;
    for (auto* w : {&r.w1, &r.w2, &r.a1, &r.a2, &r.v1, &r.v2, &r.g1, &r.g2, &r.receptance, &r.key, &r.value, &r.output,
                    &r.cm_key, &r.cm_value})
      if (w->data) fn(*w);
    for (auto* es : {&l.exp_gate, &l.exp_up, &l.exp_down})
      for (auto& w : *es) fn(w);
  }
}

void LlamaModel::set_min_parallel_step_macs(int64_t macs) {
  g_min_parallel_step_macs.store(macs, std::memory_order_relaxed);
}

StepThreadChooser::Way LlamaModel::step_way(const ForwardBatch& batch, int64_t* macs, bool* timed) {
  *timed = false;
  const int64_t min_macs = g_min_parallel_step_macs.load(std::memory_order_relaxed);
  if (min_macs == 0) return StepThreadChooser::kPool;
  if (layer_macs_ < 0) {
    int64_t all = 0;
    for_each_matrix(*this, [&all](const kernels::WeightView& w) { all += w.n_in * w.n_out; });
    output_macs_ = output_.n_in * output_.n_out;
    layer_macs_ = all - output_macs_;
    streams_weights_ = static_cast<int64_t>(weight_bytes()) >= kMinParallelWeightBytes;
  }
  if (streams_weights_) return StepThreadChooser::kPool;
  // Attention: each query reads kv_len keys and values, every KV layer.
  int64_t m = static_cast<int64_t>(batch.tokens.size()) * layer_macs_ +
              static_cast<int64_t>(batch.logit_rows.size()) * output_macs_;
  const int64_t per_key = int64_t{2} * config_.q_dim() * config_.num_kv_layers();
  for (const SeqSlice& s : batch.seqs) m += int64_t{s.num_tokens} * s.kv_len * per_key;
  *macs = m;
  if (min_macs > 0) return m < min_macs ? StepThreadChooser::kAlone : StepThreadChooser::kPool;
  if (m >= kMaxAloneStepMacs) return StepThreadChooser::kPool;
  *timed = true;
  return step_threads_.choose(m, StepThreadChooser::kAlone);
}

size_t LlamaModel::weight_bytes() const {
  size_t b = 0;
  for_each_matrix(*this, [&b](const kernels::WeightView& w) { b += w.row_bytes() * w.n_out; });
  return b;
}

int32_t LlamaModel::use_bf16_dot() {
  if (!kernels::has_bf16_dot()) {
    std::fprintf(stderr, "pagoda: --bf16-dot needs AVX-512 BF16 kernels; F16/BF16 weights keep the float path\n");
    return 0;
  }
  int32_t n = 0;
  auto mark = [&n](kernels::WeightView& w) {
    if (w.data != nullptr && (w.type == DType::kF16 || w.type == DType::kBF16) && !w.bf16_dot) {
      w.bf16_dot = true;
      ++n;
    }
  };
  for_each_matrix(*this, mark);
  return n;
}

size_t LlamaModel::repack(ThreadPool& pool, const std::string& pack_cache_dir) {
  if (!kernels::repack_enabled()) return 0;
  kernels::PackCacheSpec cache;
  if (!pack_cache_dir.empty()) {
    // The file's identity: where it is and which bytes it holds (size,
    // modification time, inode). A rewritten model gets a new cache file.
    std::error_code ec;
    const std::filesystem::path path = std::filesystem::weakly_canonical(file_->path(), ec);
    struct stat st {};
    if (::stat(file_->path().c_str(), &st) == 0) {
      cache.dir = pack_cache_dir;
      cache.stem = std::filesystem::path(file_->path()).stem().string();
      cache.identity = (ec ? file_->path() : path.string()) + "|" + std::to_string(st.st_size) + "|" +
                       std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "|" +
                       std::to_string(st.st_ino) + "|" + std::to_string(st.st_dev);
    }
  }
  std::vector<kernels::WeightView*> ws;
  for_each_matrix(*this, [&ws](kernels::WeightView& w) { ws.push_back(&w); });
  // Each matrix's file pages are released as soon as it is packed: peak
  // resident memory stays near one copy of the weights.
  const size_t added = packed_.pack(
      ws.data(), static_cast<int>(ws.size()), pool,
      [this](const kernels::WeightView& w) {
        file_->release_pages(w.data, w.row_bytes() * w.n_out);  // every row is in the packed copy
      },
      &cache);
  kernels::note_weight_bytes(static_cast<int64_t>(packed_.bytes()));
  return added;
}

void LlamaModel::ensure_workspace(int64_t n) {
  if (n <= ws_.capacity) return;
  const auto& c = config_;
  ws_.capacity = n;
  ws_.x.resize(n * c.hidden_size);
  ws_.h.resize(n * c.hidden_size);
  ws_.q.resize(n * c.q_dim());
  ws_.k.resize(n * c.kv_dim());
  ws_.v.resize(n * c.kv_dim());
  ws_.attn.resize(n * c.q_dim());
  ws_.gate.resize(n * c.ffn_size);
  ws_.up.resize(n * c.ffn_size);
}

void LlamaModel::plan_attention_items(const ForwardBatch& batch) {
  const auto& c = config_;
  // Work items: (sequence, kv head, run of at most kAttentionPiece query
  // tokens) — GQA groups stay together; a long prefill is cut so the threads
  // share it whatever the number of kv heads. Costliest first (the last
  // queries see the most keys), claimed by the threads as they free up.
  // A small step (a tiny model's decode) stays on the calling thread: the
  // pool's wake-up would cost more than the attention.
  std::vector<AttentionItem>& items = ws_.attn_items;
  items.clear();
  int64_t macs = 0;
  bool cut = false;
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const SeqSlice& s = batch.seqs[si];
    macs += int64_t{2} * s.num_tokens * s.kv_len * c.q_dim();
    cut = cut || s.num_tokens > kAttentionPiece;
    for (int32_t t0 = 0; t0 < s.num_tokens; t0 += kAttentionPiece) {
      const int32_t t1 = std::min(s.num_tokens, t0 + kAttentionPiece);
      const int64_t cost = int64_t{t1 - t0} * (s.kv_len - s.num_tokens + t1);
      for (int32_t h = 0; h < c.num_kv_heads; ++h) items.push_back({cost, static_cast<int32_t>(si), h, t0, t1});
    }
  }
  ws_.attn_inline = macs < kMinParallelAttentionMacs;
  if (cut && !ws_.attn_inline)
    std::stable_sort(items.begin(), items.end(),
                     [](const AttentionItem& a, const AttentionItem& b) { return a.cost > b.cost; });
}

void LlamaModel::attention_layer(const ForwardBatch& batch, KVStorage& kv, ThreadPool& pool, int32_t il) {
  const auto& c = config_;
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const Layer& l = layers_[il];
  for_tokens(pool, n, c.hidden_size, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      kernels::rms_norm(&ws_.x[t * c.hidden_size], l.attn_norm, &ws_.h[t * c.hidden_size], c.hidden_size, c.rms_eps);
  });
  const bool gated = c.attn_output_gate;
  if (gated) {
    ws_.q_gate.resize(static_cast<size_t>(n) * 2 * c.q_dim());
    ws_.attn_gate.resize(static_cast<size_t>(n) * c.q_dim());
  }
  {
    observe(il, LinearInput::kAttnQKV, ws_.h.data(), c.hidden_size, n);
    const kernels::WeightView* w[] = {&l.wq, &l.wk, &l.wv};
    float* y[] = {gated ? ws_.q_gate.data() : ws_.q.data(), ws_.k.data(), ws_.v.data()};
    const int64_t stride[] = {gated ? 2 * c.q_dim() : c.q_dim(), c.kv_dim(), c.kv_dim()};
    kernels::matmul_fused(w, 3, ws_.h.data(), c.hidden_size, n, y, stride, pool);
  }
  int32_t kl = c.kv_layer(il) - c.kv_layer(first_layer_);  // this stage's storage holds its layers only
  // KV groups: the layer's pages are its group's, at its slot in them.
  const int32_t group = kv_groups_.grouped() ? kv_groups_.group[static_cast<size_t>(kl)] : 0;
  if (kv_groups_.grouped()) kl = kv_groups_.slot[static_cast<size_t>(kl)];
  const size_t num_other_groups = static_cast<size_t>(kv_groups_.num_groups - 1);
  PAGODA_CHECK(group == 0 || (batch.group_slots.size() == num_other_groups * static_cast<size_t>(n) &&
                              batch.group_tables.size() == num_other_groups * batch.seqs.size()));
  const int64_t* slots = group == 0 ? batch.slots.data() : &batch.group_slots[static_cast<size_t>((group - 1) * n)];
  auto table_of = [&](size_t i) {
    return group == 0 ? batch.seqs[i].block_table : batch.group_tables[i * num_other_groups + group - 1];
  };

  const bool sliding = c.is_sliding(il);
  const kernels::RopeParams& rp = sliding ? rope_local_ : rope_global_;
  for_tokens(pool, n, c.q_dim(), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* q = &ws_.q[t * c.q_dim()];
      float* k = &ws_.k[t * c.kv_dim()];
      float* v = &ws_.v[t * c.kv_dim()];
      if (gated) {  // [q, gate] per head
        const float* qg = &ws_.q_gate[t * 2 * c.q_dim()];
        for (int32_t h = 0; h < c.num_heads; ++h) {
          std::copy_n(qg + 2 * h * c.head_dim, c.head_dim, q + h * c.head_dim);
          std::copy_n(qg + (2 * h + 1) * c.head_dim, c.head_dim, &ws_.attn_gate[t * c.q_dim() + h * c.head_dim]);
        }
      }
      if (l.bq) kernels::add_inplace(q, l.bq, c.q_dim());
      if (l.bk) kernels::add_inplace(k, l.bk, c.kv_dim());
      if (l.bv) kernels::add_inplace(v, l.bv, c.kv_dim());
      if (l.q_norm)
        for (int32_t h = 0; h < c.num_heads; ++h)
          kernels::rms_norm(q + h * c.head_dim, l.q_norm, q + h * c.head_dim, c.head_dim, c.rms_eps);
      if (l.k_norm)
        for (int32_t h = 0; h < c.num_kv_heads; ++h)
          kernels::rms_norm(k + h * c.head_dim, l.k_norm, k + h * c.head_dim, c.head_dim, c.rms_eps);
      const float* cs = &ws_.rope_cs[sliding ? 1 : 0][t * c.rope_dim];
      kernels::rope_apply(q, c.num_heads, c.head_dim, cs, rp);
      kernels::rope_apply(k, c.num_kv_heads, c.head_dim, cs, rp);
      kv.write(kl, slots[t], k, v);  // distinct slots: safe in parallel
    }
  });

  const kernels::PagedKVView view{kv.k_data(kl),  kv.v_data(kl), kv.block_size(),
                                  c.num_kv_heads, c.head_dim,    kv.dtype()};
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // Cache positions (the causal mask) are the RoPE positions unless tokens were evicted.
  const std::vector<int32_t>& q_pos = batch.cache_positions.empty() ? batch.positions : batch.cache_positions;
  // The step's work items (plan_attention_items, once per forward).
  const std::vector<AttentionItem>& items = ws_.attn_items;
  auto attend = [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scratch;
    for (int64_t i = i0; i < i1; ++i) {
      const AttentionItem& it = items[static_cast<size_t>(i)];
      const SeqSlice& s = batch.seqs[static_cast<size_t>(it.seq)];
      const int64_t tb = s.token_begin + it.t0;
      const int32_t nq = it.t1 - it.t0;
      const size_t need = kernels::paged_attention_scratch_floats(nq, c.num_heads, c.head_dim, kv.block_size());
      if (scratch.size() < need) scratch.resize(need);
      kernels::paged_attention(view, table_of(static_cast<size_t>(it.seq)), s.kv_len, &ws_.q[tb * c.q_dim()], c.q_dim(),
                               &q_pos[tb], nq, c.num_heads, scale, &ws_.attn[tb * c.q_dim()], c.q_dim(), it.head,
                               it.head + 1, scratch.data(),
                               {.window = sliding ? c.sliding_window : 0,
                                .sinks = l.sinks,
                                .tree_begin = s.tree_begin,
                                .tree_mask = s.tree_begin > 0 ? &batch.tree_masks[tb] : nullptr});
    }
  };
  const auto num_items = static_cast<int64_t>(items.size());
  if (ws_.attn_inline) {
    attend(0, num_items);
  } else {
    pool.parallel_chunks(num_items, 1, attend);
  }
  if (std::any_of(batch.seqs.begin(), batch.seqs.end(),
                  [](const SeqSlice& s) { return s.compress_to > 0 || s.accumulate_scores; })) {
    PAGODA_CHECK(!kv_groups_.grouped());  // sliding-window models refuse SnapKV and H2O
    apply_kv_policies(batch, kv, pool, il, scale);
  }
  if (gated)
    for_tokens(pool, n, c.q_dim(), [&](int64_t t0, int64_t t1) {
      for (int64_t i = t0 * c.q_dim(); i < t1 * c.q_dim(); ++i)
        ws_.attn[i] *= 1.0f / (1.0f + std::exp(-ws_.attn_gate[i]));
    });
  observe(il, LinearInput::kAttnOut, ws_.attn.data(), c.q_dim(), n);
  kernels::matmul(l.wo, ws_.attn.data(), c.q_dim(), n, ws_.h.data(), c.hidden_size, pool);
  if (all_reduce_) all_reduce_(ws_.h.data(), n * c.hidden_size);  // tensor parallelism: sum the heads' shares
  for_tokens(pool, n, c.hidden_size, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* h = &ws_.h[t * c.hidden_size];
      if (l.bo) kernels::add_inplace(h, l.bo, c.hidden_size);
      if (l.attn_post_norm) kernels::rms_norm(h, l.attn_post_norm, h, c.hidden_size, c.rms_eps);
    }
    kernels::add_inplace(&ws_.x[t0 * c.hidden_size], &ws_.h[t0 * c.hidden_size], (t1 - t0) * c.hidden_size);
  });
}

void LlamaModel::activate(float* gate, const float* up, int64_t n) const {
  switch (config_.ffn_act) {
    case FfnActivation::kSwiGLU: kernels::swiglu(gate, up, gate, n); break;
    case FfnActivation::kGeGLU: kernels::geglu(gate, up, gate, n); break;
    case FfnActivation::kSwiGLUOai: kernels::swiglu_oai(gate, up, gate, n); break;
  }
}

void LlamaModel::moe_ffn(const Layer& l, int64_t n, ThreadPool& pool) {
  const auto& c = config_;
  const int32_t ne = c.num_experts, k = c.num_experts_used, hs = c.hidden_size, fs = c.expert_ffn_size;
  ws_.router.resize(static_cast<size_t>(n) * ne);
  kernels::matmul(l.router, ws_.h.data(), hs, n, ws_.router.data(), ne, pool);
  // Route: the top k router logits (plus the router bias; lowest index on
  // ties), weighted by the softmax over those k — the same as qwen3moe's
  // softmax over all experts renormalised over the chosen ones. Then each
  // expert runs once over the tokens routed to it (its weights read once per
  // step).
  auto& routed = ws_.moe_routed;  // kept across steps: no allocation once warm
  routed.resize(static_cast<size_t>(ne));
  for (auto& r : routed) r.clear();
  auto& order = ws_.moe_order;
  order.resize(static_cast<size_t>(ne));
  for (int64_t t = 0; t < n; ++t) {
    float* p = &ws_.router[static_cast<size_t>(t) * ne];
    if (l.router_bias) kernels::add_inplace(p, l.router_bias, ne);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    const float mx = p[order[0]];
    double sum = 0;
    for (int32_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(p[order[j]] - mx));
    for (int32_t j = 0; j < k; ++j)
      routed[order[j]].push_back({t, static_cast<float>(std::exp(static_cast<double>(p[order[j]] - mx)) / sum)});
  }
  for (int32_t e = 0; e < ne; ++e) {
    const auto& toks = routed[static_cast<size_t>(e)];
    const auto m = static_cast<int64_t>(toks.size());
    if (m == 0) continue;
    ws_.moe_in.resize(static_cast<size_t>(m) * hs);
    ws_.moe_gate.resize(static_cast<size_t>(m) * fs);
    ws_.moe_up.resize(static_cast<size_t>(m) * fs);
    ws_.moe_out.resize(static_cast<size_t>(m) * hs);
    for (int64_t r = 0; r < m; ++r) std::copy_n(&ws_.h[toks[r].first * hs], hs, &ws_.moe_in[r * hs]);
    const kernels::WeightView* w[] = {&l.exp_gate[e], &l.exp_up[e]};
    float* y[] = {ws_.moe_gate.data(), ws_.moe_up.data()};
    const int64_t stride[] = {fs, fs};
    kernels::matmul_fused(w, 2, ws_.moe_in.data(), hs, m, y, stride, pool);
    for (int64_t r = 0; r < m; ++r) {
      if (l.exp_gate_bias) kernels::add_inplace(&ws_.moe_gate[r * fs], l.exp_gate_bias + int64_t{e} * fs, fs);
      if (l.exp_up_bias) kernels::add_inplace(&ws_.moe_up[r * fs], l.exp_up_bias + int64_t{e} * fs, fs);
    }
    activate(ws_.moe_gate.data(), ws_.moe_up.data(), m * fs);
    kernels::matmul(l.exp_down[e], ws_.moe_gate.data(), fs, m, ws_.moe_out.data(), hs, pool);
    const float* down_bias = l.exp_down_bias ? l.exp_down_bias + int64_t{e} * hs : nullptr;
    for (int64_t r = 0; r < m; ++r) {
      float* x = &ws_.x[toks[r].first * hs];
      const float* d = &ws_.moe_out[r * hs];
      const float wgt = toks[r].second;
      for (int32_t i = 0; i < hs; ++i) x[i] += wgt * (down_bias ? d[i] + down_bias[i] : d[i]);
    }
  }
}

void LlamaModel::forward(const ForwardBatch& batch, KVStorage& kv, ThreadPool& step_pool, float* logits,
                         StateStorage* state, const float* hidden_in, float* hidden_out) {
  const auto& c = config_;
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  if (n == 0) return;
  int64_t step_macs = 0;
  bool timed = false;
  const StepThreadChooser::Way way =
      step_pool.num_threads() > 1 ? step_way(batch, &step_macs, &timed) : StepThreadChooser::kPool;
  ThreadPool& pool = way == StepThreadChooser::kAlone ? calling_thread_only() : step_pool;
  // Records the step's time for step_way, on either return.
  struct StepTimer {
    StepThreadChooser* chooser;
    int64_t macs;
    StepThreadChooser::Way way;
    std::chrono::steady_clock::time_point t0 = chooser ? std::chrono::steady_clock::now() : decltype(t0){};
    ~StepTimer() {
      if (chooser)
        chooser->record(macs, way, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  } timer{timed ? &step_threads_ : nullptr, step_macs, way};
  PAGODA_CHECK(state != nullptr || !c.has_recurrent_layers());
  PAGODA_CHECK((first_layer_ == 0) == (hidden_in == nullptr) && is_last_stage() == (hidden_out == nullptr));
  ensure_workspace(n);
  if (hidden_in) std::copy_n(hidden_in, n * c.hidden_size, ws_.x.data());
  for (int64_t t = 0; t < n && !hidden_in; ++t) {
    float* x = &ws_.x[t * c.hidden_size];
    kernels::get_row(tok_embd_, batch.tokens[t], x);
    if (c.embed_scale > 0)
      for (int32_t i = 0; i < c.hidden_size; ++i) x[i] *= c.embed_scale;
    if (embd_norm_) kernels::layer_norm(x, embd_norm_, embd_norm_b_, x, c.hidden_size, c.rms_eps);
  }
  // RoPE angles once per token and step, not per layer and tensor (none
  // without attention layers: mamba2, rwkv7).
  const bool any_sliding = c.sliding_window > 0 && c.swa_period > 1;
  const int num_angle_sets = c.num_kv_layers() == 0 || c.rope_dim == 0 ? 0 : any_sliding ? 2 : 1;
  for (int k = 0; k < num_angle_sets; ++k) {
    auto& cs = ws_.rope_cs[k];
    if (cs.size() < static_cast<size_t>(n * c.rope_dim)) cs.resize(static_cast<size_t>(n * c.rope_dim));
    const kernels::RopeParams& rp = k == 1 ? rope_local_ : rope_global_;
    for_tokens(pool, n, c.rope_dim * 16, [&](int64_t t0, int64_t t1) {
      kernels::rope_angles(&batch.positions[t0], t1 - t0, rp, &cs[t0 * c.rope_dim]);
    });
  }

  if (c.num_kv_layers() > 0) plan_attention_items(batch);

  for (int32_t il = first_layer_; il < last_layer(); ++il) {
    if (!batch.skip_layers.empty() && batch.skip_layers[static_cast<size_t>(il)]) continue;
    switch (c.layer_kind(il)) {
      case LayerKind::kAttention: attention_layer(batch, kv, pool, il); break;
      case LayerKind::kGatedDeltaNet: deltanet_layer(batch, *state, pool, il); break;
      case LayerKind::kMamba2: mamba2_layer(batch, *state, pool, il); break;
      case LayerKind::kRwkv7: rwkv7_layer(batch, *state, pool, il); break;
    }
    const Layer& l = layers_[il];
    if (!l.ffn_norm) continue;  // Mamba-2, RWKV-7: the mixer is the whole block
    for_tokens(pool, n, c.hidden_size, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        kernels::rms_norm(&ws_.x[t * c.hidden_size], l.ffn_norm, &ws_.h[t * c.hidden_size], c.hidden_size, c.rms_eps);
    });
    if (c.num_experts > 0) {
      moe_ffn(l, n, pool);
      continue;
    }
    observe(il, LinearInput::kFfnGateUp, ws_.h.data(), c.hidden_size, n);
    const kernels::WeightView* w[] = {&l.w_gate, &l.w_up};
    float* y[] = {ws_.gate.data(), ws_.up.data()};
    const int64_t stride[] = {c.ffn_size, c.ffn_size};
    kernels::matmul_fused(w, 2, ws_.h.data(), c.hidden_size, n, y, stride, pool);
    for_tokens(pool, n, c.ffn_size, [&](int64_t t0, int64_t t1) {
      activate(&ws_.gate[t0 * c.ffn_size], &ws_.up[t0 * c.ffn_size], (t1 - t0) * c.ffn_size);
    });
    observe(il, LinearInput::kFfnDown, ws_.gate.data(), c.ffn_size, n);
    kernels::matmul(l.w_down, ws_.gate.data(), c.ffn_size, n, ws_.h.data(), c.hidden_size, pool);
    if (all_reduce_) all_reduce_(ws_.h.data(), n * c.hidden_size);
    for_tokens(pool, n, c.hidden_size, [&](int64_t t0, int64_t t1) {
      if (l.ffn_post_norm)
        for (int64_t t = t0; t < t1; ++t)
          kernels::rms_norm(&ws_.h[t * c.hidden_size], l.ffn_post_norm, &ws_.h[t * c.hidden_size], c.hidden_size,
                            c.rms_eps);
      kernels::add_inplace(&ws_.x[t0 * c.hidden_size], &ws_.h[t0 * c.hidden_size], (t1 - t0) * c.hidden_size);
    });
  }

  if (hidden_out) {
    std::copy_n(ws_.x.data(), n * c.hidden_size, hidden_out);
    return;
  }
  const int64_t rows = static_cast<int64_t>(batch.logit_rows.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = &ws_.x[batch.logit_rows[r] * int64_t{c.hidden_size}];
    if (output_norm_b_) {
      kernels::layer_norm(x, output_norm_, output_norm_b_, &ws_.h[r * c.hidden_size], c.hidden_size, c.rms_eps);
    } else {
      kernels::rms_norm(x, output_norm_, &ws_.h[r * c.hidden_size], c.hidden_size, c.rms_eps);
    }
  }
  observe(-1, LinearInput::kOutput, ws_.h.data(), c.hidden_size, rows);
  kernels::matmul(output_, ws_.h.data(), c.hidden_size, rows, logits, output_.n_out, pool);
}

void LlamaModel::project_output(const float* hidden, int64_t rows, float* logits, ThreadPool& pool) const {
  kernels::matmul(output_, hidden, config_.hidden_size, rows, logits, output_.n_out, pool);
}

}  // namespace pagoda
