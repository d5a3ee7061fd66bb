// Hyper-parameters of a llama-family model, read from GGUF metadata.
#pragma once

#include <string>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "kernels/ops.h"

namespace pagoda {

struct ModelConfig {
  std::string arch;  // "llama" or "qwen2"
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
  bool has_qkv_bias = false;
  bool has_qk_norm = false;  // RMSNorm over each head of Q and K before RoPE (qwen3)

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
};

// Validates the metadata: a clear error for a missing key, an unsupported
// architecture or inconsistent shapes.
Result<ModelConfig> model_config_from_gguf(const gguf::GGUFFile& file);

}  // namespace pagoda
