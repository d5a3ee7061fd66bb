// Random-weight llama-family GGUF models for tests and benchmarks: the same
// tensor names, shapes and metadata as llama.cpp's conversions, weights drawn
// deterministically from a seed and quantized like llama.cpp's quantizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace pagoda {

struct ModelShape {
  std::string arch = "llama";  // "llama" or "qwen2" (adds q/k/v biases)
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t ffn_size = 0;
  int64_t vocab_size = 0;
  int64_t n_ctx = 0;
  double rope_freq_base = 10000.0;
  double rms_eps = 1e-5;

  int64_t head_dim() const { return num_heads > 0 ? hidden_size / num_heads : 0; }
};

// Presets: tiny, tiny-mha, 110m, tinyllama-1.1b.
Result<ModelShape> model_preset(std::string_view name);
std::vector<std::string> model_preset_names();
// Sets the architecture and its defaults: rms eps 1e-5 (llama) / 1e-6
// (qwen2), rope base 1e6 for qwen2.
Status set_model_arch(ModelShape* shape, std::string_view arch);
// The dtypes make-model accepts: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k
// q5_k q6_k (case-insensitive).
Result<DType> make_model_dtype(std::string_view name);
// llama.cpp's LLAMA_FTYPE for a model whose weights are mostly `t`.
uint32_t llama_file_type(DType t);

struct MakeModelOptions {
  ModelShape shape;
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

// Validates the shape and lists the tensors (no vocabulary, no weights). With
// vocab_from, pass the shape with vocab_size already taken from that file.
Result<ModelPlan> plan_model(const ModelShape& shape, DType dtype, bool tied_embeddings);

// Writes the model to `path`. Returns the plan that was written.
Result<ModelPlan> make_model(const MakeModelOptions& opts, const std::string& path);

}  // namespace pagoda
