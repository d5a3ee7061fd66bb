// Hyper-parameters of a llama-family model, read from GGUF metadata.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "kernels/ops.h"

namespace pagoda {

// What a layer mixes tokens with: softmax attention over the paged KV cache,
// or a recurrent (linear-attention / state-space) layer whose per-sequence
// state is fixed-size (kv/state_storage.h): Gated DeltaNet (qwen35),
// Mamba-2, or RWKV-7 (its time mix and channel mix, the whole block).
enum class LayerKind { kAttention, kGatedDeltaNet, kMamba2, kRwkv7 };

// The gated FFN's activation: silu(gate) * up, gelu_tanh(gate) * up (gemma3),
// or gpt-oss's clamped SwiGLU (kernels::swiglu_oai).
enum class FfnActivation { kSwiGLU, kGeGLU, kSwiGLUOai };

struct ModelConfig {
  std::string arch;  // general.architecture (model_config.cc lists the supported ones)
  std::string name;
  int32_t vocab_size = 0;
  int32_t train_context_len = 0;
  int32_t hidden_size = 0;
  int32_t num_layers = 0;
  int32_t ffn_size = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float rms_eps = 1e-5f;
  kernels::RopeStyle rope_style = kernels::RopeStyle::kInterleaved;
  int32_t rope_dim = 0;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  // YaRN (rope.scaling.type yarn): rope_ext_factor 1, kernels::set_yarn's inputs.
  float rope_ext_factor = 0;
  int32_t rope_orig_ctx = 0;
  float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
  float rope_attn_factor = 1.0f;
  bool has_qkv_bias = false;
  bool has_qk_norm = false;  // RMSNorm over each head of Q and K before RoPE (qwen3, gemma3)
  // Gemma 3: embeddings times embed_scale (0: none), RMSNorm after attention
  // and after the FFN (before each residual add), GeGLU instead of SwiGLU.
  float embed_scale = 0;
  bool has_post_norms = false;
  FfnActivation ffn_act = FfnActivation::kSwiGLU;
  // The pre-FFN norm's tensor (blk.N.<name>.weight): gpt-oss calls it
  // post_attention_norm.
  std::string ffn_norm_name = "ffn_norm";
  // gpt-oss: a learned sink logit per head in every layer's softmax.
  bool has_attn_sinks = false;
  // Mixture of experts (qwen3moe, gpt-oss): num_experts > 0 replaces the
  // dense FFN; router logits (plus a bias when the file has one), the top
  // num_experts_used, weighted by the softmax over those selected.
  int32_t num_experts = 0;
  int32_t num_experts_used = 0;
  int32_t expert_ffn_size = 0;
  // Interleaved sliding-window attention: with sliding_window > 0, layer il
  // is local iff il % swa_period < swa_period - 1; local layers see the last
  // sliding_window positions and use rope_freq_base_swa / _scale_swa.
  int32_t sliding_window = 0;
  int32_t swa_period = 0;
  float rope_freq_base_swa = 10000.0f;
  float rope_freq_scale_swa = 1.0f;

  // Per layer (empty: every layer is attention). Hybrid models (qwen35)
  // interleave recurrent layers with attention; mamba2 has no attention.
  std::vector<LayerKind> layer_kinds;
  // qwen35's gated attention: attn_q gives [q, gate] per head and the
  // attention output is multiplied by sigmoid(gate) before attn_output.
  bool attn_output_gate = false;
  // Recurrent layers' sizes (llama.cpp's ssm.* keys): the causal conv's
  // width, the state size (DeltaNet: head_k_dim; Mamba-2: d_state), groups
  // (DeltaNet: k heads; Mamba-2: B/C groups), time-step rank (the number of
  // v / SSM heads) and inner size (the v / x width).
  int32_t ssm_conv_kernel = 0, ssm_state_size = 0, ssm_group_count = 0, ssm_time_step_rank = 0, ssm_inner_size = 0;
  // RWKV-7: the wkv head size (hidden_size / heads); norms are LayerNorms
  // with biases (eps in rms_eps), the embeddings normed too.
  int32_t rwkv_head_size = 0;

  int32_t q_dim() const { return num_heads * head_dim; }
  LayerKind layer_kind(int32_t layer) const {
    return layer_kinds.empty() ? LayerKind::kAttention : layer_kinds[static_cast<size_t>(layer)];
  }
  // The layer's index in the KV storage (attention layers only, in order).
  int32_t kv_layer(int32_t layer) const {
    int32_t k = 0;
    for (int32_t i = 0; i < layer; ++i) k += layer_kind(i) == LayerKind::kAttention;
    return k;
  }
  int32_t num_kv_layers() const { return kv_layer(num_layers); }
  bool has_recurrent_layers() const { return num_kv_layers() < num_layers; }
  // Channels of a recurrent layer's causal conv: DeltaNet's q, k, v;
  // Mamba-2's x, B, C.
  int32_t ssm_conv_channels() const {
    const int32_t qk = ssm_group_count * ssm_state_size;
    return 2 * qk + ssm_inner_size;
  }
  // Floats of one sequence's state in recurrent layer `layer` (0 for an
  // attention layer): the conv window (kernel - 1 inputs) and the state
  // matrices (DeltaNet: a k x v matrix per v head; Mamba-2: head_dim x
  // d_state per head).
  int64_t recurrent_state_floats(int32_t layer) const {
    if (layer_kind(layer) == LayerKind::kAttention) return 0;
    // RWKV-7: the time mix's and channel mix's previous inputs, a value x key
    // matrix per head.
    if (layer_kind(layer) == LayerKind::kRwkv7) return int64_t{hidden_size} * (2 + rwkv_head_size);
    return int64_t{ssm_conv_kernel - 1} * ssm_conv_channels() + int64_t{ssm_inner_size} * ssm_state_size;
  }
  // All layers' state of one sequence (0 without recurrent layers).
  int64_t state_floats_per_seq() const {
    int64_t n = 0;
    for (int32_t il = 0; il < num_layers; ++il) n += recurrent_state_floats(il);
    return n;
  }
  bool is_sliding(int32_t layer) const {
    return sliding_window > 0 && swa_period > 0 && layer % swa_period < swa_period - 1;
  }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
};

// Sets what is fixed by the architecture (llama.cpp's name): rope style,
// biases, norms, FFN activation, attention sinks, the default rms eps, and
// for sliding-window architectures the default swa_period (sizes, rope bases
// and windows are left alone). An unsupported name is an error that lists
// the supported ones.
Status set_arch_traits(ModelConfig* config, std::string_view arch);
// The architectures set_arch_traits and model_config_from_gguf accept.
std::vector<std::string> supported_archs();
// Whether the architecture's FFN is a mixture of experts.
bool arch_is_moe(std::string_view arch);
// Whether the architecture has recurrent layers (qwen35, mamba2).
bool arch_is_recurrent(std::string_view arch);

// Validates the metadata: a clear error for a missing key, an unsupported
// architecture or inconsistent shapes.
Result<ModelConfig> model_config_from_gguf(const gguf::GGUFFile& file);

}  // namespace pagoda
