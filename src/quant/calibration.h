// Calibration: running a model over sample text and watching the inputs of
// its linear layers (LinearObserver), for the importance matrix and GPTQ.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/llama_model.h"

namespace pagoda {
class Tokenizer;
}

namespace pagoda::quant {

// Tokenizes text (with BOS) and cuts it into at most max_windows windows of
// ctx tokens, each starting with BOS. An error when not even one fits.
Result<std::vector<std::vector<int32_t>>> calibration_windows(const Tokenizer& tok, std::string_view text, int32_t ctx,
                                                              int32_t max_windows);

struct CalibrationRun {
  int32_t threads = 0;          // 0: physical cores
  bool observe_output = false;  // every position's logits, so the output matrix sees every row
  // Packed copies of the weights (the fast kernels of every type) for an
  // observer that leaves the weights alone (imatrix); without them the
  // matmuls read the weights in place, which GPTQ's observer rewrites
  // (F32/F16/BF16 run SIMD kernels there, other types the scalar reference).
  bool repack = false;
};

// Runs every window through the model as one forward batch (the observer
// therefore sees all calibration rows of a layer in one call) with the
// weights read in place unless run.repack (the observer may change them).
Status run_calibration(std::unique_ptr<LlamaModel> model, const std::vector<std::vector<int32_t>>& windows,
                       LinearObserver observer, const CalibrationRun& run);

// The tensors a LinearInput feeds, for layer `layer` ("blk.3.attn_q.weight",
// ...); kOutput: output.weight, or token_embd.weight when has_output is false.
std::vector<std::string> linear_tensor_names(int32_t layer, LinearInput which, bool has_output);

}  // namespace pagoda::quant
