// The decoder-only family (llama 1-3, qwen2/3, gemma3, qwen3moe, gpt-oss,
// and the recurrent qwen35 / mamba2; ModelConfig says what differs): weights bound
// from GGUF and one forward pass over a flat batch through the paged KV cache.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "kernels/matmul.h"
#include "kernels/packed.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_groups.h"
#include "kv/kv_storage.h"
#include "kv/state_storage.h"
#include "model/forward_batch.h"
#include "model/model_config.h"
#include "model/step_threads.h"

namespace pagoda {

// The input of a group of linear layers, as seen by a LinearObserver:
// kAttnQKV feeds attn_q/k/v, kAttnOut attn_output, kFfnGateUp ffn_gate/up,
// kFfnDown ffn_down, kOutput the output matrix (its rows: the logit rows).
enum class LinearInput { kAttnQKV, kAttnOut, kFfnGateUp, kFfnDown, kOutput };

// Called before each dense linear layer's matmul with its input rows x
// ([n][stride], n tokens): calibration for quantization (quant/). It may
// change the weights it is about to be applied with (GPTQ quantizes a layer
// in place, the next layers then see its quantized output). layer is -1 for
// kOutput. MoE expert matrices are not observed.
using LinearObserver = std::function<void(int32_t layer, LinearInput which, const float* x, int64_t stride, int64_t n)>;

class LlamaModel {
 public:
  // Binds tensors of `file` (which must outlive the model) with shape checks.
  static Result<std::unique_ptr<LlamaModel>> load(const gguf::GGUFFile& file);

  const ModelConfig& config() const { return config_; }

  // Computes the batch, writes its K/V into `kv` (attention layers, at
  // ModelConfig::kv_layer indices) and its recurrent layers' state into
  // `state` (the slices' state_slot; required when the model has recurrent
  // layers), and stores the logits of batch.logit_rows into `logits`
  // ([rows][vocab_size]).
  void forward(const ForwardBatch& batch, KVStorage& kv, ThreadPool& pool, float* logits, StateStorage* state = nullptr,
               const float* hidden_in = nullptr, float* hidden_out = nullptr);
  // Floats of one sequence's recurrent state, all layers (0: none).
  int64_t state_floats_per_seq() const { return config_.state_floats_per_seq(); }
  // After forward(): the final-normed hidden state logits row r was computed
  // from ([hidden_size]; valid until the next forward).
  const float* output_hidden(int64_t r) const { return &ws_.h[static_cast<size_t>(r) * config_.hidden_size]; }
  // The output matrix on `rows` hidden rows (tools: the exact projection).
  void project_output(const float* hidden, int64_t rows, float* logits, ThreadPool& pool) const;
  // The output matrix (tied to the token embedding when the file says so).
  const kernels::WeightView& output_weight() const { return output_; }

  // Re-rotates every key of each listed block, all layers, by its delta
  // positions with the layer's RoPE (angles only: YaRN's magnitude scale was
  // applied when the key was written). Rows are read and written in the
  // cache's dtype (quantized ones are re-quantized).
  void shift_keys(std::span<const KeyShift> shifts, KVStorage& kv, ThreadPool& pool) const;

  // Installs (or, with an empty function, removes) the observer.
  void set_linear_observer(LinearObserver observer) { observer_ = std::move(observer); }

  // Bytes of weights read per decode step (for bandwidth figures).
  size_t weight_bytes() const;
  // Whether forward() may run a step on the calling thread alone, whatever
  // the pool: only a model whose matrices are under 8 MiB (larger ones
  // stream their weights from memory, which 2 threads do faster than 1),
  // and only steps under 64 Mi multiply-adds (matrices and attention). Within
  // that, by default (kMeasureStepThreads) each size of step runs the way
  // its measured times favor (model/step_threads.h); `macs` > 0 fixes the
  // bound instead (alone under `macs`); 0: every step uses the pool (tests
  // of the parallel paths).
  static constexpr int64_t kMeasureStepThreads = -1;
  static void set_min_parallel_step_macs(int64_t macs);
  // Matrices that run as W8A8 (a `pagoda.w8a8` file's row-scaled Q8_0).
  int32_t num_row_scaled() const { return num_row_scaled_; }

  // Makes row-interleaved copies of the matrices the active ISA has packed
  // kernels for (kernels/packed.h); returns the bytes added. Call once,
  // before forward(); a no-op when PAGODA_REPACK=0. Fully packed matrices
  // have their file pages released (GGUFFile::release_pages), so resident
  // memory holds one copy of them, not two. With pack_cache_dir, a packed
  // copy kept there from an earlier start of the same file is mapped
  // instead, or written for the next one (kernels::PackCacheSpec).
  size_t repack(ThreadPool& pool, const std::string& pack_cache_dir = "");
  // Puts every F16/BF16 matrix on the BF16 dot-product path
  // (WeightView::bf16_dot); before repack(). Returns how many. A no-op
  // where the active ISA has no such kernel (a message says so).
  int32_t use_bf16_dot();
  // Tensor parallelism (Megatron-LM; model/tensor_parallel.cc): keeps rank
  // `rank` of `size`'s share of the weights — its query heads and KV heads
  // (GQA groups whole: size must divide the KV heads), its columns of the
  // FFN's gate/up and rows of down, its rows of attn_output's input, its
  // slice of the vocabulary in the output matrix — and sums the partial
  // outputs of attn_output and ffn_down over the ranks with `all_reduce`
  // (in place, n floats). Row slices point into the file; column slices of
  // attn_output and ffn_down are copied. After it, config() describes this
  // rank's heads and FFN and forward() writes logits of the vocabulary rows
  // [vocab_begin, vocab_begin + vocab_rows) ([rows][vocab_rows]). Call once,
  // before repack(). Dense attention models only: a clear error otherwise.
  Status shard_tensor_parallel(int32_t rank, int32_t size, std::function<void(float*, int64_t)> all_reduce);
  int32_t vocab_begin() const { return vocab_begin_; }
  int32_t vocab_rows() const { return static_cast<int32_t>(output_.n_out); }

  // Pipeline parallelism (model/tensor_parallel.cc): this model runs layers
  // [first, last) only; the other layers' matrices (and the output matrix
  // unless last is the end) are dropped before repack() packs anything, and
  // its KV storage holds its own attention layers (num_stage_kv_layers).
  // forward() then starts from hidden_in (the previous stage's hidden
  // states, [tokens][hidden]) unless first is 0, and ends by copying the
  // hidden states to hidden_out (no logits) unless last is the end.
  Status set_layer_range(int32_t first, int32_t last);
  // KV groups: attention layer kl writes and reads its group's pages, at
  // its slot in them (KVStorage then has layers_per_page layers); batches
  // carry every group's slots and tables (ForwardBatch::group_slots).
  void set_kv_groups(KVGroupLayout layout) { kv_groups_ = std::move(layout); }
  const KVGroupLayout& kv_groups() const { return kv_groups_; }
  int32_t first_layer() const { return first_layer_; }
  int32_t last_layer() const { return last_layer_ < 0 ? config_.num_layers : last_layer_; }
  bool is_last_stage() const { return last_layer() == config_.num_layers; }
  int32_t num_stage_kv_layers() const { return config_.kv_layer(last_layer()) - config_.kv_layer(first_layer_); }

  // Whether repack() mapped a pack cache file.
  bool packed_from_cache() const { return packed_.from_cache(); }

 private:
  struct Layer {
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    kernels::WeightView wq, wk, wv, wo, w_gate, w_up, w_down;
    const float* bq = nullptr;
    const float* bk = nullptr;
    const float* bv = nullptr;
    const float* q_norm = nullptr;  // [head_dim], qk-norm architectures
    const float* k_norm = nullptr;
    const float* attn_post_norm = nullptr;  // [hidden], gemma3
    const float* ffn_post_norm = nullptr;
    const float* bo = nullptr;     // [hidden] attention output bias, gpt-oss
    const float* sinks = nullptr;  // [num_heads] sink logits, gpt-oss
    kernels::WeightView router;    // MoE: [hidden -> num_experts]
    const float* router_bias = nullptr;
    std::vector<kernels::WeightView> exp_gate, exp_up, exp_down;  // one per expert
    // Optional expert biases, [num_experts][expert_ffn_size] (gate, up) and
    // [num_experts][hidden] (down).
    const float* exp_gate_bias = nullptr;
    const float* exp_up_bias = nullptr;
    const float* exp_down_bias = nullptr;
    // Recurrent layers (model/recurrent_layers.cc). Gated DeltaNet: attn_qkv
    // (conv input q, k, v), attn_gate (the output gate z), ssm_beta,
    // ssm_alpha (per v head); Mamba-2: ssm_in ([z, xBC, dt]). Both: ssm_out.
    kernels::WeightView attn_qkv, attn_gate, ssm_beta, ssm_alpha, ssm_in, ssm_out;
    const float* ssm_conv = nullptr;       // [channels][conv_kernel]
    const float* ssm_conv_bias = nullptr;  // [channels], Mamba-2
    const float* ssm_dt_bias = nullptr;    // [heads]
    const float* ssm_a = nullptr;          // [heads], negative
    const float* ssm_d = nullptr;          // [heads], Mamba-2's skip
    const float* ssm_norm = nullptr;       // DeltaNet: [head_v_dim]; Mamba-2: [inner]
    // RWKV-7 (llama.cpp's time_mix_* / channel_mix_* tensors): LoRA pairs
    // x1 (hidden -> rank) and x2 (rank -> hidden) for the decay w, the
    // in-context learning rate a, the value residual v and the gate g.
    struct Rwkv7 {
      const float *attn_norm_b = nullptr, *ffn_norm = nullptr, *ffn_norm_b = nullptr;
      const float *w0 = nullptr, *a0 = nullptr, *v0 = nullptr;               // [hidden]
      const float *k_k = nullptr, *k_a = nullptr, *r_k = nullptr;            // [hidden]
      const float *ln = nullptr, *ln_b = nullptr;                            // per-head GroupNorm
      const float *lerp = nullptr, *cm_lerp_k = nullptr;                     // [6][hidden] (r w k v a g), [hidden]
      kernels::WeightView w1, w2, a1, a2, v1, v2, g1, g2;                    // LoRA pairs
      kernels::WeightView receptance, key, value, output, cm_key, cm_value;  // hidden x hidden, FFN
    } rwkv;
  };
  // One attention work item: a sequence's kv head over query tokens
  // [t0, t1) of its slice; cost estimates the multiply-adds (ordering only).
  struct AttentionItem {
    int64_t cost;
    int32_t seq, head, t0, t1;
  };
  struct Workspace {
    int64_t capacity = 0;
    std::vector<AttentionItem> attn_items;  // this step's (plan_attention_items)
    bool attn_inline = true;                // attention on the calling thread
    std::vector<float> x, h, q, k, v, attn, gate, up, scratch;
    std::vector<float> router, moe_in, moe_gate, moe_up, moe_out;    // MoE
    std::vector<std::vector<std::pair<int64_t, float>>> moe_routed;  // per expert: (token, weight)
    std::vector<int32_t> moe_order;
    std::vector<float> rope_cs[2];         // RoPE cos/sin per token (kernels::rope_angles): global, local layers
    std::vector<float> q_gate, attn_gate;  // gated attention: [q | gate] per head, gates
    std::vector<float> mix, mix_z, mix_beta, mix_alpha, mix_out;              // recurrent layers
    std::vector<float> rw_r, rw_w, rw_k, rw_v, rw_a, rw_g, rw_lora, v_first;  // RWKV-7
  };

  LlamaModel() = default;
  void ensure_workspace(int64_t n_tokens);
  // fn(WeightView&) on every weight matrix of self (const or not): output,
  // per layer the attention/FFN/router matrices present, every expert's.
  template <class Self, class Fn>
  static void for_each_matrix(Self& self, Fn&& fn);
  // How to run `batch` on a pool of more than one thread
  // (set_min_parallel_step_macs); *timed: whether to record its time.
  StepThreadChooser::Way step_way(const ForwardBatch& batch, int64_t* macs, bool* timed);
  // The step's attention work items into ws_ (the same for every layer).
  void plan_attention_items(const ForwardBatch& batch);
  void attention_layer(const ForwardBatch& batch, KVStorage& kv, ThreadPool& pool, int32_t il);
  // Recurrent mixers (model/recurrent_layers.cc): ws_.x += the layer's
  // output; each slice's state (conv window and state matrices) is read
  // from and written back to its slot, zeroed first when the slice starts
  // the sequence.
  void deltanet_layer(const ForwardBatch& batch, StateStorage& state, ThreadPool& pool, int32_t il);
  void mamba2_layer(const ForwardBatch& batch, StateStorage& state, ThreadPool& pool, int32_t il);
  // A whole RWKV-7 block (time mix, channel mix); layer 0 keeps each
  // token's value in ws_.v_first for the later layers' value residual.
  void rwkv7_layer(const ForwardBatch& batch, StateStorage& state, ThreadPool& pool, int32_t il);
  // The slice's state in layer il: the conv window, then the matrices.
  float* layer_state(const SeqSlice& s, StateStorage& state, int32_t il) const;
  // layer_state, zeroed first when the slice starts its sequence; once per
  // slice and layer, before any parallel pass over the state.
  float* start_layer_state(const SeqSlice& s, StateStorage& state, int32_t il) const;
  // SnapKV and H2O after layer il's attention (model/kv_policies.cc), per
  // slice and KV head: H2O adds the slice's attention probabilities to its
  // rows' scores; with compress_to > 0 the head keeps compress_to rows
  // (SnapKV: voted by the observation window, the slice's last
  // kv_window queries; H2O: by accumulated score, the last kv_window
  // kept) and moves them, in order, to the first compress_to slots.
  void apply_kv_policies(const ForwardBatch& batch, KVStorage& kv, ThreadPool& pool, int32_t il, float scale) const;
  // gate[i] = act(gate[i], up[i]) with the model's FFN activation.
  void activate(float* gate, const float* up, int64_t n) const;
  // ws_.x += MoE FFN of ws_.h (normed input) over n tokens.
  void moe_ffn(const Layer& l, int64_t n, ThreadPool& pool);
  void observe(int32_t layer, LinearInput which, const float* x, int64_t stride, int64_t n) const {
    if (observer_) observer_(layer, which, x, stride, n);
  }

  ModelConfig config_;
  const gguf::GGUFFile* file_ = nullptr;
  kernels::WeightView tok_embd_, output_;
  const float* output_norm_ = nullptr;
  const float* output_norm_b_ = nullptr;  // RWKV-7's LayerNorms
  const float *embd_norm_ = nullptr, *embd_norm_b_ = nullptr;
  const float* rope_freqs_ = nullptr;
  kernels::RopeParams rope_global_, rope_local_;  // global and sliding-window layers
  std::vector<Layer> layers_;
  std::vector<int64_t> state_offset_;           // per layer, where its state ends in a slot
  std::vector<std::vector<float>> f32_copies_;  // norms/biases stored as F16 in the file
  Workspace ws_;
  int32_t num_row_scaled_ = 0;
  // Multiply-adds per token of the layers' matrices and of the output
  // matrix, and whether the matrices reach 8 MiB (step_way); computed at the
  // first forward() (after tensor or pipeline parallelism kept a share).
  int64_t layer_macs_ = -1, output_macs_ = 0;
  bool streams_weights_ = false;
  StepThreadChooser step_threads_;
  kernels::PackedWeights packed_;
  LinearObserver observer_;
  KVGroupLayout kv_groups_;
  int32_t first_layer_ = 0, last_layer_ = -1;           // pipeline parallelism: this stage's layers (-1: all)
  int32_t vocab_begin_ = 0;                             // tensor parallelism: this rank's first logit
  std::function<void(float*, int64_t)> all_reduce_;     // tensor parallelism: sums partial outputs
  std::vector<std::unique_ptr<uint8_t[]>> tp_columns_;  // column slices of attn_output / ffn_down
};

}  // namespace pagoda
