// The logits of every position of one prompt, evaluated as one batch through
// the engine's ModelRunner (what `pagoda logits` writes, and what the
// architecture fixtures compare with llama.cpp's).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/model_runner.h"
#include "gguf/gguf_file.h"

namespace pagoda {

// A runner over the model in `path` with KV room for max_tokens positions;
// the file stays open (the model reads weights from its mapping).
struct LogitsRunner {
  std::unique_ptr<gguf::GGUFFile> file;
  std::unique_ptr<ModelRunner> runner;
};
// With comm (tensor parallelism), every rank makes one; ranks > 0 then run
// ModelRunner::serve_tensor_parallel.
Result<LogitsRunner> make_logits_runner(const std::string& path, int32_t max_tokens, int32_t num_threads,
                                        dist::Comm* comm = nullptr, int32_t pp = 1);

// Row t (n_vocab floats) holds the logits after ids[0..t]. No BOS is added.
Result<std::vector<float>> prompt_logits(ModelRunner& runner, std::span<const int32_t> ids);

}  // namespace pagoda
