#include "model/model_config.h"

#include <cmath>
#include <string>

namespace pagoda {
namespace {

Status require_int(const gguf::GGUFFile& f, const std::string& key, int32_t* out, bool required = true) {
  auto v = f.get_int(key);
  if (!v) {
    if (!required) return Status::ok();
    return invalid_argument("model metadata lacks '" + key + "'");
  }
  if (*v <= 0 || *v > (1 << 30))
    return invalid_argument("model metadata '" + key + "' out of range: " + std::to_string(*v));
  *out = static_cast<int32_t>(*v);
  return Status::ok();
}

// What differs between the supported architectures (llama.cpp's names and
// defaults).
struct ArchTraits {
  const char* name;
  kernels::RopeStyle rope_style = kernels::RopeStyle::kHalfSplit;
  bool qkv_bias = false;
  bool qk_norm = false;
  float default_rms_eps = 1e-6f;
  bool gemma = false;      // embedding scale, post norms, GeGLU, local layers with their own rope
  bool moe = false;        // mixture-of-experts FFN
  bool gpt_oss = false;    // sinks, clamped SwiGLU experts, post_attention_norm before the FFN
  int32_t swa_period = 0;  // > 0: sliding-window layers, this period unless the file says
  // Recurrent layers: qwen35 interleaves Gated DeltaNet with gated attention
  // (every full_attention_interval-th layer attends); mamba2 has Mamba-2
  // layers only (no attention, no FFN).
  LayerKind recurrent = LayerKind::kAttention;
};
constexpr ArchTraits kArchs[] = {
    {.name = "llama", .rope_style = kernels::RopeStyle::kInterleaved, .default_rms_eps = 1e-5f},
    {.name = "qwen2", .qkv_bias = true},
    {.name = "qwen3", .qk_norm = true},
    {.name = "gemma3", .qk_norm = true, .gemma = true, .swa_period = 6},
    {.name = "qwen3moe", .qk_norm = true, .moe = true},
    {.name = "gpt-oss", .default_rms_eps = 1e-5f, .moe = true, .gpt_oss = true, .swa_period = 2},
    {.name = "qwen35", .qk_norm = true, .recurrent = LayerKind::kGatedDeltaNet},
    {.name = "mamba2", .default_rms_eps = 1e-5f, .recurrent = LayerKind::kMamba2},
    {.name = "rwkv7", .default_rms_eps = 1e-5f, .recurrent = LayerKind::kRwkv7},
};

const ArchTraits* find_arch(std::string_view arch) {
  for (const ArchTraits& t : kArchs)
    if (arch == t.name) return &t;
  return nullptr;
}

// The ssm.* sizes of a recurrent architecture and its layer kinds.
Status read_recurrent(const gguf::GGUFFile& f, const std::string& p, const ArchTraits& traits, ModelConfig* c) {
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "ssm.conv_kernel", &c->ssm_conv_kernel));
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "ssm.state_size", &c->ssm_state_size));
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "ssm.group_count", &c->ssm_group_count));
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "ssm.time_step_rank", &c->ssm_time_step_rank));
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "ssm.inner_size", &c->ssm_inner_size));
  if (c->ssm_inner_size % c->ssm_time_step_rank != 0)
    return invalid_argument("ssm.inner_size is not a multiple of ssm.time_step_rank (the heads)");
  if (c->ssm_time_step_rank % c->ssm_group_count != 0)
    return invalid_argument("ssm.time_step_rank (the heads) is not a multiple of ssm.group_count");
  if (c->ssm_conv_kernel > 64) return invalid_argument("ssm.conv_kernel above 64");
  c->layer_kinds.assign(static_cast<size_t>(c->num_layers), traits.recurrent);
  if (traits.recurrent == LayerKind::kGatedDeltaNet) {
    int32_t interval = 4;  // llama.cpp's default
    PAGODA_RETURN_IF_ERROR(require_int(f, p + "full_attention_interval", &interval, false));
    for (int32_t il = 0; il < c->num_layers; ++il)
      if ((il + 1) % interval == 0) c->layer_kinds[static_cast<size_t>(il)] = LayerKind::kAttention;
  }
  return Status::ok();
}

}  // namespace

std::vector<std::string> supported_archs() {
  std::vector<std::string> names;
  for (const ArchTraits& t : kArchs) names.emplace_back(t.name);
  return names;
}

bool arch_is_moe(std::string_view arch) {
  const ArchTraits* t = find_arch(arch);
  return t && t->moe;
}

bool arch_is_recurrent(std::string_view arch) {
  const ArchTraits* t = find_arch(arch);
  return t && t->recurrent != LayerKind::kAttention;
}

Status set_arch_traits(ModelConfig* c, std::string_view arch) {
  const ArchTraits* traits = find_arch(arch);
  if (!traits) {
    std::string supported;
    for (const std::string& name : supported_archs()) supported += (supported.empty() ? "" : ", ") + name;
    return unimplemented("unsupported architecture '" + std::string(arch) + "' (supported: " + supported + ")");
  }
  c->arch = std::string(arch);
  c->rope_style = traits->rope_style;
  c->has_qkv_bias = traits->qkv_bias;
  c->has_qk_norm = traits->qk_norm;
  c->rms_eps = traits->default_rms_eps;
  c->swa_period = traits->swa_period;
  c->has_post_norms = traits->gemma;
  c->ffn_act = traits->gemma     ? FfnActivation::kGeGLU
               : traits->gpt_oss ? FfnActivation::kSwiGLUOai
                                 : FfnActivation::kSwiGLU;
  c->ffn_norm_name = traits->gpt_oss ? "post_attention_norm" : "ffn_norm";
  c->has_attn_sinks = traits->gpt_oss;
  c->attn_output_gate = traits->recurrent == LayerKind::kGatedDeltaNet;
  if (traits->recurrent == LayerKind::kGatedDeltaNet) c->ffn_norm_name = "post_attention_norm";
  return Status::ok();
}

Result<ModelConfig> model_config_from_gguf(const gguf::GGUFFile& f) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch) return invalid_argument("not a model file: no 'general.architecture' (a vocabulary-only GGUF?)");
  PAGODA_RETURN_IF_ERROR(set_arch_traits(&c, *arch));
  const ArchTraits* traits = find_arch(c.arch);
  c.name = f.get_string("general.name").value_or(c.arch);
  const std::string p = c.arch + ".";
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "embedding_length", &c.hidden_size));
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "block_count", &c.num_layers));
  if (traits->recurrent == LayerKind::kRwkv7) {
    PAGODA_RETURN_IF_ERROR(require_int(f, p + "feed_forward_length", &c.ffn_size));
    PAGODA_RETURN_IF_ERROR(require_int(f, p + "wkv.head_size", &c.rwkv_head_size));
    if (c.hidden_size % c.rwkv_head_size != 0)
      return invalid_argument("embedding_length is not a multiple of wkv.head_size");
    c.layer_kinds.assign(static_cast<size_t>(c.num_layers), LayerKind::kRwkv7);
  } else if (traits->recurrent != LayerKind::kAttention) {
    PAGODA_RETURN_IF_ERROR(read_recurrent(f, p, *traits, &c));
  }
  if (traits->recurrent == LayerKind::kMamba2 || traits->recurrent == LayerKind::kRwkv7) {  // no attention
    c.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon").value_or(c.rms_eps));
    c.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_epsilon").value_or(c.rms_eps));
    c.train_context_len = 2048;
    PAGODA_RETURN_IF_ERROR(require_int(f, p + "context_length", &c.train_context_len, false));
    const auto* tok = f.tensor("token_embd.weight");
    if (!tok || tok->dims.size() != 2) return invalid_argument("model lacks a 2-D 'token_embd.weight'");
    c.vocab_size = static_cast<int32_t>(tok->dims[1]);
    return c;
  }
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "feed_forward_length", &c.ffn_size));
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "attention.head_count", &c.num_heads));
  c.num_kv_heads = c.num_heads;
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "attention.head_count_kv", &c.num_kv_heads, false));
  c.train_context_len = 2048;
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "context_length", &c.train_context_len, false));
  if (c.hidden_size % c.num_heads != 0) return invalid_argument("embedding_length is not a multiple of head_count");
  if (c.num_heads % c.num_kv_heads != 0) return invalid_argument("head_count is not a multiple of head_count_kv");
  c.head_dim = c.hidden_size / c.num_heads;
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "attention.key_length", &c.head_dim, false));
  c.rope_dim = c.head_dim;
  PAGODA_RETURN_IF_ERROR(require_int(f, p + "rope.dimension_count", &c.rope_dim, false));
  if (c.rope_dim > c.head_dim || c.rope_dim % 2)
    return invalid_argument("rope.dimension_count must be even and <= head dim");
  if (auto base = f.get_float(p + "rope.freq_base")) c.rope_freq_base = static_cast<float>(*base);
  auto factor = f.get_float(p + "rope.scaling.factor");
  if (!factor) factor = f.get_float(p + "rope.scale_linear");  // the older key
  if (factor && *factor > 0) c.rope_freq_scale = static_cast<float>(1.0 / *factor);
  const std::string scaling = f.get_string(p + "rope.scaling.type").value_or("linear");
  if (scaling == "none") {
    c.rope_freq_scale = 1.0f;
  } else if (scaling == "yarn") {
    c.rope_ext_factor = 1.0f;
    c.rope_orig_ctx = c.train_context_len;
    PAGODA_RETURN_IF_ERROR(require_int(f, p + "rope.scaling.original_context_length", &c.rope_orig_ctx, false));
    c.yarn_beta_fast = static_cast<float>(f.get_float(p + "rope.scaling.yarn_beta_fast").value_or(32.0));
    c.yarn_beta_slow = static_cast<float>(f.get_float(p + "rope.scaling.yarn_beta_slow").value_or(1.0));
    if (f.get_float(p + "rope.scaling.yarn_log_multiplier").value_or(0.0) != 0.0)
      return unimplemented("rope scaling yarn with yarn_log_multiplier (DeepSeek-style) is not supported");
  } else if (scaling != "linear") {
    return unimplemented("unsupported rope scaling type '" + scaling + "'");
  }
  c.rope_attn_factor = static_cast<float>(f.get_float(p + "rope.scaling.attn_factor").value_or(1.0));
  c.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon").value_or(c.rms_eps));
  if (traits->moe) {
    PAGODA_RETURN_IF_ERROR(require_int(f, p + "expert_count", &c.num_experts));
    PAGODA_RETURN_IF_ERROR(require_int(f, p + "expert_used_count", &c.num_experts_used));
    PAGODA_RETURN_IF_ERROR(require_int(f, p + "expert_feed_forward_length", &c.expert_ffn_size));
    if (c.num_experts_used > c.num_experts) return invalid_argument("expert_used_count exceeds expert_count");
  }
  if (c.swa_period > 0) {  // the traits' period is llama.cpp's default when the file does not say
    PAGODA_RETURN_IF_ERROR(require_int(f, p + "attention.sliding_window", &c.sliding_window, false));
    PAGODA_RETURN_IF_ERROR(require_int(f, p + "attention.sliding_window_pattern", &c.swa_period, false));
  }
  // Local layers rope like the global ones unless the architecture or the file says otherwise.
  c.rope_freq_base_swa = c.rope_freq_base;
  c.rope_freq_scale_swa = c.rope_freq_scale;
  if (traits->gemma) {
    c.embed_scale = std::sqrt(static_cast<float>(c.hidden_size));
    c.rope_freq_base_swa = 10000.0f;
    c.rope_freq_scale_swa = 1.0f;
  }
  if (auto base = f.get_float(p + "rope.freq_base_swa")) c.rope_freq_base_swa = static_cast<float>(*base);
  const auto* tok = f.tensor("token_embd.weight");
  if (!tok || tok->dims.size() != 2) return invalid_argument("model lacks a 2-D 'token_embd.weight'");
  c.vocab_size = static_cast<int32_t>(tok->dims[1]);
  return c;
}

}  // namespace pagoda
