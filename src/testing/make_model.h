// Random-weight GGUF models of the supported architectures for tests and benchmarks: the same
// tensor names, shapes and metadata as llama.cpp's conversions, weights drawn
// deterministically from a seed and quantized like llama.cpp's quantizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/model_config.h"

namespace pagoda {

// A model to generate is described by the runtime's own ModelConfig: arch
// (any of supported_archs(): its tensor set follows the architecture, as
// llama.cpp names it), sizes, head_dim (0: hidden_size / num_heads; rope
// covers the whole head), context length, rope base, rms eps, experts,
// sliding window (with swa_period) and YaRN scaling.

// Presets: tiny, tiny-mha, 110m, tinyllama-1.1b, qwen3-0.6b, gemma3-1b,
// qwen3-moe-mini, gpt-oss-mini (model_preset_names()).
Result<ModelConfig> model_preset(std::string_view name);
std::vector<std::string> model_preset_names();
// Sets the architecture and its defaults (set_arch_traits), and rope base
// 1e6 for the Qwen and Gemma families.
Status set_model_arch(ModelConfig* config, std::string_view arch);
// The dtypes make-model accepts: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k
// q5_k q6_k q3_k iq4_nl iq4_xs (case-insensitive).
Result<DType> make_model_dtype(std::string_view name);
// llama.cpp's LLAMA_FTYPE for a model whose weights are mostly `t`.
uint32_t llama_file_type(DType t);

struct MakeModelOptions {
  ModelConfig config;
  DType dtype = DType::kF32;
  uint64_t seed = 42;
  bool tied_embeddings = false;  // omit output.weight
  std::string vocab_from;        // GGUF whose tokenizer.* keys are copied; sets vocab_size
  std::string name = "pagoda-random";
  int num_threads = 0;  // 0: default_num_threads()
};

struct PlannedTensor {
  std::string name;
  std::vector<int64_t> dims;  // GGML order: dims[0] is the row length (in_features)
  DType type = DType::kF32;
  double mean = 0;  // weights ~ mean + stddev * N(0, 1)
  double stddev = 0;
};

struct ModelPlan {
  std::vector<PlannedTensor> tensors;
  // Type fallbacks, one line per (row length, wanted type, used type).
  std::vector<std::string> notes;
  int64_t num_params = 0;
  uint64_t num_bytes = 0;  // tensor data
};

// Validates the configuration and lists the tensors (no vocabulary, no
// weights). With vocab_from, pass it with vocab_size already taken from that
// file.
Result<ModelPlan> plan_model(const ModelConfig& config, DType dtype, bool tied_embeddings);

// Writes the model to `path`. Returns the plan that was written.
Result<ModelPlan> make_model(const MakeModelOptions& opts, const std::string& path);

}  // namespace pagoda
