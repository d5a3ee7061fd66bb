// `pagoda quantize`: a GGUF model in, a quantized GGUF out (readable by
// llama.cpp too). Tensor types follow llama.cpp's mixes (quant_types.h);
// matrices are quantized by round-to-nearest (optionally importance-
// weighted by an imatrix), by GPTQ, or after AWQ's activation-aware
// scaling, both with calibration text; or as SmoothQuant's W8A8 (Q8_0
// rows sharing one scale, the file marked `pagoda.w8a8`). Rows are
// quantized in parallel, each independently, so the output is identical for
// every thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "quant/awq.h"
#include "quant/gptq.h"
#include "quant/quant_types.h"

namespace pagoda::quant {

// kSmoothQuant: W8A8 (quant/smoothquant.h); the mix must be Q8_0.
enum class Method { kRtn, kGptq, kAwq, kSmoothQuant };

struct QuantizeOptions {
  QuantMix mix;
  Method method = Method::kRtn;
  int32_t threads = 0;       // 0: physical cores
  std::string imatrix_path;  // optional
  std::string calib_text;    // GPTQ: the calibration text itself
  int32_t calib_ctx = 0;     // tokens per window (0: min(512, the model's context))
  int32_t calib_windows = 16;
  GptqOptions gptq;
  AwqOptions awq;
  float smooth_alpha = 0.5f;  // SmoothQuant's migration strength
  // One line per tensor as it is done (the CLI prints them); may be empty.
  std::function<void(const std::string& line)> progress;
};

struct QuantizeReport {
  size_t bytes_in = 0, bytes_out = 0;  // tensor data
  int32_t num_tensors = 0, num_quantized = 0, num_gptq = 0, num_w8a8 = 0;
  std::vector<std::string> awq_alphas;         // "blk.0.attn_q.weight+...: 0.45", one per scaled group
  std::map<std::string, int32_t> type_counts;  // output type name -> tensors
  double seconds = 0;
};

Result<QuantizeReport> quantize_model(const std::string& in_path, const std::string& out_path,
                                      const QuantizeOptions& opt);

}  // namespace pagoda::quant
